/*
 * grantwait.h
 *		What acting on a lease that another session granted must respect
 *		(grantwait.c), shared by acquire.c and lease.c.
 */
#ifndef DLOCK_GRANTWAIT_H
#define DLOCK_GRANTWAIT_H

#include "engine.h"

pg_noreturn extern void dlock_too_many_pinners(const DLockRequest *req);
extern TransactionId dlock_grant_in_progress(const DLockEntry *lease);
extern int64 dlock_wait_deadline(int64 timeout, int64 now, bool *by_lock_timeout);
extern int64 dlock_lease_deadline(const DLockEntry *lease, int64 now,
								  bool *by_lock_timeout);
extern bool dlock_wait_for_grant(const DLockRequest *req, uint64 token,
								 TransactionId xid, int64 deadline,
								 bool by_lock_timeout, bool fail_at_deadline);

#endif							/* DLOCK_GRANTWAIT_H */
