/*
 * xact.h
 *		Making lease changes follow the caller's transaction.
 *
 * A new grant takes effect at once and is taken back if the (sub)transaction
 * that made it aborts.  Renewals, extensions and releases are recorded here
 * and applied at commit, so others see them only then; until then a renewed
 * or extended lease is pinned.
 */
#ifndef DLOCK_XACT_H
#define DLOCK_XACT_H

#include "engine.h"

struct DLockOp;

extern void dlock_xact_register(void);

/*
 * An acquisition is logged before shared memory changes (logging allocates),
 * then completed as a grant or an extension, or forgotten.
 */
extern struct DLockOp *dlock_xact_begin(const DLockRequest *req);
extern void dlock_xact_forget(struct DLockOp *op);
extern void dlock_xact_granted(struct DLockOp *op, uint64 token, bool durable);
extern void dlock_xact_granted_event(struct DLockOp *op, uint64 seq);
extern void dlock_xact_cleared_rows(struct DLockOp *op);
extern bool dlock_xact_extended(struct DLockOp *op, const DLockRequest *req,
								uint64 token, int64 expires);

extern bool dlock_xact_release_pending(const DLockRequest *req);
extern bool dlock_xact_releases(const DLockKey *key, uint64 token);
extern void dlock_xact_release(const DLockRequest *req, uint64 token, bool durable,
							   bool marked);
extern bool dlock_xact_force_release(const DLockRequest *req, uint64 token,
									 bool durable, bool marked);
extern void dlock_xact_release_hold(const DLockRequest *req, uint64 token,
									int64 expires, int64 version,
									TimestampTz released_at);

/*
 * A renewal is logged before its lease is pinned, then completed; one left
 * with token 0 has no effect.
 */
extern struct DLockOp *dlock_xact_renew(const DLockRequest *req);
extern void dlock_xact_adopted(struct DLockOp *op, TransactionId xid);
extern void dlock_xact_renew_set(struct DLockOp *op, uint64 token, int64 expires,
								 int64 version);
extern struct DLockOp *dlock_xact_fence(const DLockRequest *req);
extern void dlock_xact_fence_set(struct DLockOp *op, uint64 token);
extern uint64 dlock_xact_fenced_token(const DLockKey *key);
extern bool dlock_xact_fence_held(const DLockKey *key, uint64 token);
extern bool dlock_xact_holds_pins(void);

#endif							/* DLOCK_XACT_H */
