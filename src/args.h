/*
 * args.h
 *		What the SQL entry points check first: the preload and their
 *		arguments; shared by api.c and fence.c (and the interval conversion
 *		by rebuild.c).
 */
#ifndef DLOCK_ARGS_H
#define DLOCK_ARGS_H

#include "datatype/timestamp.h"
#include "fmgr.h"

#include "engine.h"

/* The two text arguments with limits; whole messages, so they translate */
typedef enum DLockTextArg
{
	ARG_NAME,
	ARG_OWNER
} DLockTextArg;

/* Raises a clean ERROR when the library was not preloaded. */
extern void dlock_require_preload(void);

/* An interval in microseconds, a month counted as 30 days; saturates. */
extern int64 dlock_interval_usecs(const Interval *span);

extern void dlock_check_length(int len, DLockTextArg what);
extern void dlock_text_arg(FunctionCallInfo fcinfo, int argno, DLockTextArg what,
						   char **data, int *len);
extern void dlock_set_name(DLockRequest *req, const char *data, int len);
extern int64 dlock_hold_arg(FunctionCallInfo fcinfo, int argno);

#endif							/* DLOCK_ARGS_H */
