/*
 * grantwait.c
 *		What acting on a lease that another session granted must respect:
 *		the wait for its granting transaction, within the caller's deadline,
 *		and the bound on the sessions that pin it.
 *
 * A durable grant's row is written after the partition lock is released;
 * the lease carries the granting transaction's id, so nobody acts on it
 * until that transaction ends.  A deferred lease carries the transaction
 * that granted it or released it (no row, so no xid: its virtual id), for
 * the same reason.  Every such wait goes through dlock_wait_for_decider(),
 * so none outlives its caller's deadline.
 *
 * Locking: takes a partition lock only to forget the ended grant in the
 * lease; waits holding none.
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "common/int.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "grantwait.h"
#include "settings.h"

void
dlock_too_many_pinners(const DLockRequest *req)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lease on \"%.*s\" is pinned by too many sessions", req->key.len, req->key.name),
			 errdetail("At most %d sessions may renew, extend or fence one lease in open transactions at once.",
					   DLOCK_MAX_PINNERS),
			 errhint("Commit or roll back the other sessions' transactions that renewed or fenced it.")));
}

/*
 * Whether another session's transaction may still change the lease, and
 * which (*decider): the one that granted a durable lease, or is writing a
 * deferred lease's row, while it may be open (until it ends the row is
 * invisible, and its abort takes the lease back); else a deferred lease's
 * decider, the transaction that granted it or released it, which writes no
 * row (its abort takes the grant back, or gives the lease back).  None of
 * this backend's own transactions counts: the current one acts on its own
 * changes, an earlier one has ended.
 */
bool
dlock_lease_decider(const DLockEntry *lease, DLockDecider *decider)
{
	decider->xid = InvalidTransactionId;
	SetInvalidVirtualTransactionId(decider->vxid);
	decider->releases = false;
	if (lease->durable && TransactionIdIsValid(lease->grant_xid) &&
		lease->grant_xid != GetTopTransactionIdIfAny())
	{
		decider->xid = lease->grant_xid;
		return true;
	}
	if (lease->deferred && VirtualTransactionIdIsValid(lease->decider) &&
		!dlock_vxid_of_this_backend(lease->decider))
	{
		decider->vxid = lease->decider;
		decider->releases = lease->decider_releases;
		return true;
	}
	return false;
}

/*
 * When a wait of timeout microseconds from now gives up, on the monotonic
 * clock: 0 = never (timeout -1), now for timeout 0.  lock_timeout bounds it
 * as it bounds any lock wait; *by_lock_timeout says when it set the limit.
 */
int64
dlock_wait_deadline(int64 timeout, int64 now, bool *by_lock_timeout)
{
	int64		deadline;

	*by_lock_timeout = false;
	if (LockTimeout > 0 && (timeout < 0 || (int64) LockTimeout * 1000 < timeout))
	{
		timeout = (int64) LockTimeout * 1000;
		*by_lock_timeout = true;
	}
	if (timeout < 0 || pg_add_s64_overflow(now, timeout, &deadline))
		return 0;
	return Max(deadline, 1);
}

/*
 * A call with no timeout of its own (renew, release, force release, fence)
 * waits for a lease's grant at most until the lease would expire: it cannot
 * act on the lease after that anyway.
 */
int64
dlock_lease_deadline(const DLockEntry *lease, int64 now, bool *by_lock_timeout)
{
	return dlock_wait_deadline(Max(lease->expires - now, 0), now, by_lock_timeout);
}

pg_noreturn static void decider_not_ended(const DLockRequest *req,
										  const DLockDecider *decider);

static void
decider_not_ended(const DLockRequest *req, const DLockDecider *decider)
{
	if (decider->releases)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease on \"%.*s\" is still being released by another transaction",
						req->key.len, req->key.name),
				 errdetail("The transaction that released it was still open when the lease expired."),
				 errhint("Retry once that transaction has ended.")));
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("lease on \"%.*s\" is still being granted by another transaction",
					req->key.len, req->key.name),
			 errdetail("The transaction that granted it was still open when the lease expired."),
			 errhint("Retry once that transaction has ended.")));
}

static void
grant_wait_context(void *arg)
{
	const DLockRequest *req = (const DLockRequest *) arg;

	errcontext("waiting for the transaction that grants the lease on \"%.*s\", at most until the lease expires",
			   req->key.len, req->key.name);
}

/* how often a timed wait for a decider looks whether its transaction ended */
#define GRANT_POLL_MS	10

/* Whether the lease with token still has decider (under its partition lock) */
static bool
still_decided_by(DLockEntry *lease, const DLockDecider *decider)
{
	if (lease == NULL)
		return false;
	if (TransactionIdIsValid(decider->xid))
		return lease->grant_xid == decider->xid;
	return lease->deferred && VirtualTransactionIdEquals(lease->decider, decider->vxid);
}

/*
 * Whether decider's transaction has ended, with its callbacks: a lock test,
 * as its transaction lock (or its virtual one) is released after them.
 */
static bool
decider_ended(const DLockDecider *decider)
{
	if (TransactionIdIsValid(decider->xid))
		return DLockConditionalXactLockTableWait(decider->xid);
	return VirtualXactLock(decider->vxid, false);
}

/*
 * A timed wait: the decider's end is tried between sleeps on the latch; a
 * deferred lease's decider is also looked for in the lease (a release rolled
 * back to a savepoint gives it back before its transaction ends).  Returns
 * true when the wait is over, false at the deadline (0: none).
 */
static bool
poll_decider(const DLockRequest *req, uint64 token, const DLockDecider *decider,
			 int64 deadline)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);

	for (;;)
	{
		int64		now;
		bool		decided;

		if (decider_ended(decider))
			return true;
		if (!TransactionIdIsValid(decider->xid))
		{
			LWLockAcquire(lock, LW_SHARED);
			decided = still_decided_by(dlock_find_lease(&req->key, req->hash, token), decider);
			LWLockRelease(lock);
			if (!decided)
				return true;
		}
		now = dlock_mono_now();
		if (deadline != 0 && now >= deadline)
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 deadline == 0 ? GRANT_POLL_MS :
						 Min(GRANT_POLL_MS, (deadline - now + 999) / 1000),
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Waits until decider (from dlock_lease_decider) has ended, then forgets it
 * in the lease with token.  Every wait for another session's grant or
 * deferred release goes through here, so none outlives its caller's
 * deadline (from dlock_wait_deadline):
 *
 * - past the deadline (a try's is now): one look, no wait;
 * - a granting transaction (xid), with no deadline: a wait for its lock, as
 *   for a row lock (lock_timeout, the deadlock detector and pg_locks see
 *   it); with no timeout of the caller's own (fail_at_deadline): the same
 *   wait, with lock_timeout lowered to the deadline, which it then fails at;
 * - else (a caller's own timeout, or a deferred lease's decider, which has
 *   no xid to wait on as a row lock would) the end is tried between sleeps
 *   on the latch.
 *
 * Cancel and statement_timeout end every wait.  Returns true when the caller
 * should look at the lease again (the decider ended, or the lease did),
 * false when the deadline came first.  At the deadline it raises 55P03
 * instead when lock_timeout set it, or with fail_at_deadline.
 */
bool
dlock_wait_for_decider(const DLockRequest *req, uint64 token,
					   const DLockDecider *decider, int64 deadline,
					   bool by_lock_timeout, bool fail_at_deadline)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	TransactionId xid = decider->xid;
	DLockEntry *lease;
	bool		ended;
	bool		waiting;
	int64		now = dlock_mono_now();

	if (deadline != 0 && now >= deadline)
		ended = decider_ended(decider);
	else if (!TransactionIdIsValid(xid))
		ended = poll_decider(req, token, decider, deadline);
	else if (deadline == 0)
	{
		XactLockTableWait(xid, NULL, NULL, XLTW_None);
		ended = true;
	}
	else if (fail_at_deadline)
	{
		ErrorContextCallback context;
		int			nestlevel = NewGUCNestLevel();
		char		ms[32];

		snprintf(ms, sizeof(ms), INT64_FORMAT, (deadline - now + 999) / 1000);
		(void) set_config_option("lock_timeout", ms, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		context.callback = grant_wait_context;
		context.arg = (void *) req;
		context.previous = error_context_stack;
		error_context_stack = &context;
		XactLockTableWait(xid, NULL, NULL, XLTW_None);
		error_context_stack = context.previous;
		AtEOXact_GUC(true, nestlevel);
		ended = true;
	}
	else
		ended = poll_decider(req, token, decider, deadline);

	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(&req->key, req->hash, token);
	if (ended && still_decided_by(lease, decider))
	{
		if (TransactionIdIsValid(xid))
			lease->grant_xid = InvalidTransactionId;
		else
			SetInvalidVirtualTransactionId(lease->decider);
	}
	waiting = !ended && still_decided_by(lease, decider) &&
		dlock_is_live(lease, dlock_mono_now());
	LWLockRelease(lock);
	if (waiting && by_lock_timeout)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("canceling statement due to lock timeout"),
				 decider->releases ?
				 errdetail("The transaction releasing the lease on \"%.*s\" did not end within lock_timeout (%d ms).",
						   req->key.len, req->key.name, LockTimeout) :
				 errdetail("The transaction granting the lease on \"%.*s\" did not end within lock_timeout (%d ms).",
						   req->key.len, req->key.name, LockTimeout)));
	if (waiting && fail_at_deadline)
		decider_not_ended(req, decider);
	return !waiting;
}
