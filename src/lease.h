/*
 * lease.h
 *		The lease operations behind the SQL functions: acquire, renew,
 *		release.  They combine the shared table, the wait queues and the
 *		transaction bookkeeping.
 */
#ifndef DLOCK_LEASE_H
#define DLOCK_LEASE_H

#include "engine.h"

/* A lease broken by dlock_force_release() */
typedef struct DLockBroken
{
	DLockOwner	owner;
	Oid			roleid;
	uint64		token;
	bool		durable;
	bool		hold;			/* it has a minimum hold (and a hold row) */
	bool		marked;			/* deferred: the force release is its decider */
} DLockBroken;

/* timeout: microseconds, 0 = do not wait, -1 = wait without limit */
extern uint64 dlock_lease_acquire(const DLockRequest *req, int64 timeout);
extern uint64 dlock_lease_enqueue(const DLockRequest *req, int64 hold);
extern bool dlock_lease_renew(const DLockRequest *req, TimestampTz *expires_at);
extern bool dlock_lease_release(const DLockRequest *req, uint64 token);
typedef enum DLockFenceResult
{
	DLOCK_FENCE_OK,
	DLOCK_FENCE_STALE,			/* a newer lease exists */
	DLOCK_FENCE_EXPIRED,		/* the token's lease ended */
	DLOCK_FENCE_UNKNOWN,		/* no lease ever had the token here */
	DLOCK_FENCE_ROLE			/* the lease belongs to another role */
} DLockFenceResult;

extern DLockFenceResult dlock_lease_fence(const DLockRequest *req, uint64 token,
										  uint64 *current);
extern int	dlock_lease_force_release(const DLockRequest *req, DLockBroken **broken);

#endif							/* DLOCK_LEASE_H */
