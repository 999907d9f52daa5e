/*
 * run.h
 *		"dlock run": the lease, the command that runs under it, and the loop
 *		that keeps both in step.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_RUN_H
#define DLOCK_RUN_H

#include "args.h"

extern int	cmd_run(const Args *a);

#endif							/* DLOCK_RUN_H */
