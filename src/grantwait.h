/*
 * grantwait.h
 *		What acting on a lease that another session granted must respect
 *		(grantwait.c), shared by acquire.c and lease.c.
 */
#ifndef DLOCK_GRANTWAIT_H
#define DLOCK_GRANTWAIT_H

#include "engine.h"

pg_noreturn extern void dlock_too_many_pinners(const DLockRequest *req);
/*
 * The transaction another session must wait for before acting on a lease:
 * the one that granted a durable lease or is writing a deferred one's row
 * (xid), else a deferred lease's decider (vxid, see DLockEntry).
 */
typedef struct DLockDecider
{
	TransactionId xid;
	VirtualTransactionId vxid;
	bool		releases;		/* vxid: a release, not a grant */
} DLockDecider;

extern bool dlock_lease_decider(const DLockEntry *lease, DLockDecider *decider);
extern int64 dlock_wait_deadline(int64 timeout, int64 now, bool *by_lock_timeout);
extern int64 dlock_lease_deadline(const DLockEntry *lease, int64 now,
								  bool *by_lock_timeout);
extern bool dlock_wait_for_decider(const DLockRequest *req, uint64 token,
								   const DLockDecider *decider, int64 deadline,
								   bool by_lock_timeout, bool fail_at_deadline);

#endif							/* DLOCK_GRANTWAIT_H */
