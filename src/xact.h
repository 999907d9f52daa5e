/*
 * xact.h
 *		Making lease changes follow the caller's transaction.
 *
 * Acquisitions take effect at once and are undone if the (sub)transaction
 * that made them aborts.  Releases and renewals are recorded here and
 * applied at commit, so others see them only then.
 */
#ifndef DLOCK_XACT_H
#define DLOCK_XACT_H

#include "lease.h"

extern void dlock_xact_register(void);
extern void dlock_xact_acquired(const DLockRequest *req, uint64 token,
								bool was_new, int64 prior_expires,
								int64 prior_version);
extern bool dlock_xact_release_pending(const DLockRequest *req);
extern void dlock_xact_release(const DLockRequest *req, uint64 token, bool durable);
/*
 * A renewal is logged before its lease is pinned (logging allocates), then
 * completed; a renewal left with token 0 has no effect.
 */
struct DLockOp;
extern struct DLockOp *dlock_xact_renew(const DLockRequest *req);
extern void dlock_xact_renew_set(struct DLockOp *op, uint64 token, int64 expires,
								 int64 version);
extern struct DLockOp *dlock_xact_fence(const DLockRequest *req);
extern uint64 dlock_xact_fenced_token(const DLockKey *key);

#endif							/* DLOCK_XACT_H */
