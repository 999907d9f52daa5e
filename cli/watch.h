/*
 * watch.h
 *		"dlock watch": the change events of names as they happen.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_WATCH_H
#define DLOCK_WATCH_H

#include "args.h"

extern int	cmd_watch(const Args *a);

#endif							/* DLOCK_WATCH_H */
