/*
 * oneshot.h
 *		The subcommands that run one query: try, release and status.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_ONESHOT_H
#define DLOCK_ONESHOT_H

#include "args.h"

extern int	cmd_try(const Args *a);
extern int	cmd_release(const Args *a);
extern int	cmd_status(const Args *a);

#endif							/* DLOCK_ONESHOT_H */
