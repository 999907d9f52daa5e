/*
 * run_lease.h
 *		The lease that "dlock run" holds: take, renew, release.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_RUN_LEASE_H
#define DLOCK_RUN_LEASE_H

#include "run_state.h"

typedef enum
{
	RENEW_OK,
	RENEW_GONE,					/* the server says the lease is gone */
	RENEW_FAILED,				/* error or connection trouble: retry */
	RENEW_ABANDONED
} RenewStatus;

extern void acquire_lease(RunState *st, bool nowait, ms_t timeout_ms);
extern RenewStatus renew_once(RunState *st, ms_t deadline);
extern int	release_lease(RunState *st, const char *token);
extern void exit_interrupted(RunState *st) DLOCK_NORETURN;

#endif							/* DLOCK_RUN_LEASE_H */
