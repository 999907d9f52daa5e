/*
 * run.h
 *		The run loop.  Every wait for the server goes through it, so that
 *		signals and kill deadlines are served while a query runs.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_RUN_H
#define DLOCK_RUN_H

#include "cli.h"

extern int	wait_io(int fd, short events, ms_t deadline);
extern bool io_abandoned(void);

#endif							/* DLOCK_RUN_H */
