/*
 * run.h
 *		"dlock run", and the loop it runs in.  Every wait for the server goes
 *		through that loop, so that signals and kill deadlines are served while
 *		a query runs.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_RUN_H
#define DLOCK_RUN_H

#include "args.h"

extern int	cmd_run(const Args *a);

extern int	wait_io(int fd, short events, ms_t deadline);
extern bool io_abandoned(void);

#endif							/* DLOCK_RUN_H */
