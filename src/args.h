/*
 * args.h
 *		Checks of the SQL functions' arguments, shared by api.c and fence.c.
 */
#ifndef DLOCK_ARGS_H
#define DLOCK_ARGS_H

#include "fmgr.h"

#include "engine.h"

/* The two text arguments with limits; whole messages, so they translate */
typedef enum DLockTextArg
{
	ARG_NAME,
	ARG_OWNER
} DLockTextArg;

extern void dlock_check_length(int len, DLockTextArg what);
extern void dlock_text_arg(FunctionCallInfo fcinfo, int argno, DLockTextArg what,
						   char **data, int *len);
extern void dlock_set_name(DLockRequest *req, const char *data, int len);

#endif							/* DLOCK_ARGS_H */
