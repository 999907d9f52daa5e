/*
 * lease.c
 *		Acquire, renew and release: the rules of a lease.
 *
 * A lease is held by an owner string within a role.  It is live until its
 * expiry on the monotonic clock; after that the name is free for the next
 * caller even if no sweeper has run.  Re-acquiring by the live holder is
 * idempotent: same token, lease extended.
 *
 * A name is a plain lock (one exclusive lease, or any number of shared ones)
 * or a semaphore of N permits (up to N leases).  Each lease has its own
 * owner, expiry and token.  A new request is granted at once only if it
 * fits and nobody is queued, so FIFO holds across modes.
 *
 * Locking: one partition lock at a time, never while sleeping, reading
 * the lease table or allocating tokens from their file; a durable grant's
 * row is written after the lock is released (the lease carries the
 * granting transaction's id, so nobody acts on it until that ends; every
 * wait for that goes through wait_for_grant(), within the caller's deadline).
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
#include "grace.h"
#include "lease.h"
#include "settings.h"
#include "store.h"
#include "tokens.h"
#include "wait.h"
#include "xact.h"

/* Ends every lease that is due now, for a caller that found the table full. */
static void
reclaim_expired(void)
{
	int			mine = 0;
	int64		next;

	do
		next = dlock_expire_due(dlock_worker_batch, DLOCK_STAT_EXPIRED_BY_CALLER, &mine);
	while (next != 0 && next <= dlock_mono_now());
}

static void
table_full(void)
{
	if (dlock_full_in_database())
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("dlock lease table is full for database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errdetail("All %d entries allowed per database by dlock.max_locks_per_database are live leases or queued waits.",
						   dlock_max_locks_per_database),
				 errhint("Release leases you no longer need, or increase dlock.max_locks_per_database and reload the configuration.")));
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("dlock lease table is full"),
			 errdetail("All %d entries allowed by dlock.max_locks are live leases or queued waits.",
					   dlock_max_locks),
			 errhint("Release leases you no longer need, or increase dlock.max_locks and restart the server.")));
}

static void
kind_conflict(const DLockRequest *req, int permits)
{
	if (permits == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lock \"%.*s\" is not a semaphore", req->key.len, req->key.name),
				 errdetail("It is held or awaited as a plain lock; this call asked for %d permits.",
						   req->permits),
				 errhint("Every caller must ask for the same permits while a name is held or awaited.")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lock \"%.*s\" is a semaphore of %d permits", req->key.len, req->key.name,
					permits),
			 req->permits == 0 ?
			 errdetail("This call asked for a plain lock.") :
			 errdetail("This call asked for %d permits.", req->permits),
			 errhint("Every caller must ask for the same permits while a name is held or awaited.")));
}

pg_noreturn static void too_many_pinners(const DLockRequest *req);

static void
too_many_pinners(const DLockRequest *req)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lease on \"%.*s\" is pinned by too many sessions", req->key.len, req->key.name),
			 errdetail("At most %d sessions may renew, extend or fence one lease in open transactions at once.",
					   DLOCK_MAX_PINNERS),
			 errhint("Commit or roll back the other sessions' transactions that renewed or fenced it.")));
}

pg_noreturn static void self_deadlock(const DLockRequest *req, uint64 token, int ahead);

static void
self_deadlock(const DLockRequest *req, uint64 token, int ahead)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected waiting for lock \"%.*s\"", req->key.len, req->key.name),
			 ahead == 0 ?
			 errdetail("This transaction pins the lease with token " UINT64_FORMAT " on that lock (it renewed, extended or fenced it), so the lease cannot end before the transaction does, nor the wait.",
					   token) :
			 errdetail("This transaction pins the lease with token " UINT64_FORMAT " on that lock (it renewed, extended or fenced it), which process %d, queued for the lock first, waits to end.",
					   token, ahead),
			 errhint("End the transaction before waiting for the lock.")));
}

static void
mode_conflict(const DLockRequest *req, DLockMode held)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("owner \"%.*s\" holds lock \"%.*s\" in %s mode, not %s",
					req->owner.len, req->owner.str, req->key.len, req->key.name,
					dlock_mode_name(held), dlock_mode_name(req->mode)),
			 errhint("Release the lease before asking for it in another mode.")));
}

/* The caller's live lease on the name (same owner and role), or NULL. */
static DLockEntry *
own_lease(DLockEntry *head, const DLockRequest *req, int64 now)
{
	dlist_mutable_iter iter;
	DLockEntry *lease;

	dlock_foreach_lease(lease, head, iter)
	{
		if (lease->roleid == req->roleid && dlock_is_live(lease, now) &&
			dlock_owner_equal(&lease->owner, &req->owner))
			return lease;
	}
	return NULL;
}

/*
 * What the row of a durable lease says, taken under its partition lock;
 * expires_at and ttl are filled in by insert_row().
 */
static void
fill_row(DLockRow *row, const DLockEntry *lease, int64 version)
{
	memcpy(&row->owner, &lease->owner, offsetof(DLockOwner, str) + lease->owner.len);
	row->roleid = lease->roleid;
	row->token = lease->token;
	row->granted_at = lease->granted_at;
	row->mode = (DLockMode) lease->mode;
	row->permits = dlock_head_of(lease)->permits;
	/* an exclusive lease's row closes every older row of its name anyway */
	row->takeover = lease->clear_rows && lease->mode == DLOCK_EXCLUSIVE &&
		row->permits == 0;
	row->version = version;
}

static void
insert_row(const DLockRequest *req, DLockRow *row, int64 expires, int64 now)
{
	row->expires_at = dlock_mono_to_wall(expires, now, GetCurrentTimestamp());
	row->ttl = req->ttl;
	dlock_store_insert(&req->key, row);
}

/*
 * A grant found rows of the name's ended leases (clear_rows): they are
 * deleted in its transaction, by its row insert (row->takeover) or here, so
 * no crash can bring back a lease that ended before the grant's token.
 */
static void
clear_rows(const DLockRequest *req, struct DLockOp *op, const DLockRow *row,
		   uint64 token)
{
	dlock_xact_cleared_rows(op);
	if (!row->takeover || !req->durable)
		dlock_store_clear_rows(&req->key, req->hash, token);
}

/*
 * The transaction another session must wait for before it acts on the
 * lease: the one that granted it, while it may be open.  Until it ends the
 * lease's row is invisible, and its abort takes the lease back.
 */
static TransactionId
grant_in_progress(const DLockEntry *lease)
{
	if (!lease->durable || !TransactionIdIsValid(lease->grant_xid) ||
		lease->grant_xid == GetTopTransactionIdIfAny())
		return InvalidTransactionId;
	return lease->grant_xid;
}

/*
 * When a wait of timeout microseconds from now gives up, on the monotonic
 * clock: 0 = never (timeout -1), now for timeout 0.  lock_timeout bounds it
 * as it bounds any lock wait; *by_lock_timeout says when it set the limit.
 */
static int64
wait_deadline(int64 timeout, int64 now, bool *by_lock_timeout)
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
static int64
lease_deadline(const DLockEntry *lease, int64 now, bool *by_lock_timeout)
{
	return wait_deadline(Max(lease->expires - now, 0), now, by_lock_timeout);
}

pg_noreturn static void grant_not_ended(const DLockRequest *req);

static void
grant_not_ended(const DLockRequest *req)
{
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

/* how often a timed wait for a grant looks whether its transaction ended */
#define GRANT_POLL_MS	10

/*
 * Waits until xid (from grant_in_progress) has ended, then forgets it in the
 * lease with token.  Every wait for another session's grant goes through
 * here, so none outlives its caller's deadline (from wait_deadline):
 *
 * - past the deadline (a try's is now): one look, no wait;
 * - no deadline: a wait for the transaction's lock, as for a row lock
 *   (lock_timeout, the deadlock detector and pg_locks see it);
 * - a caller with no timeout of its own (fail_at_deadline): the same wait,
 *   with lock_timeout lowered to the deadline, which it then fails at;
 * - a caller's own timeout: the lock is tried between sleeps on the latch,
 *   since a lock wait cannot end at a deadline without an error.
 *
 * Cancel and statement_timeout end every wait.  Returns true when the caller
 * should look at the lease again (the grant ended, or the lease did), false
 * when the deadline came first.  At the deadline it raises 55P03 instead
 * when lock_timeout set it, or with fail_at_deadline.
 */
static bool
wait_for_grant(const DLockRequest *req, uint64 token, TransactionId xid,
			   int64 deadline, bool by_lock_timeout, bool fail_at_deadline)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *lease;
	bool		ended;
	bool		waiting;
	int64		now = dlock_mono_now();

	if (deadline != 0 && now >= deadline)
		ended = DLockConditionalXactLockTableWait(xid);
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
	{
		for (;;)
		{
			ended = DLockConditionalXactLockTableWait(xid);
			now = dlock_mono_now();
			if (ended || now >= deadline)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(GRANT_POLL_MS, (deadline - now + 999) / 1000),
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}

	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(&req->key, req->hash, token);
	if (ended && lease != NULL && lease->grant_xid == xid)
		lease->grant_xid = InvalidTransactionId;
	waiting = !ended && lease != NULL && lease->grant_xid == xid &&
		dlock_is_live(lease, dlock_mono_now());
	LWLockRelease(lock);
	if (waiting && by_lock_timeout)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("canceling statement due to lock timeout"),
				 errdetail("The transaction granting the lease on \"%.*s\" did not end within lock_timeout (%d ms).",
						   req->key.len, req->key.name, LockTimeout)));
	if (waiting && fail_at_deadline)
		grant_not_ended(req);
	return !waiting;
}

/*
 * Whether a try is refused, seen under a shared lock: many callers trying
 * one busy name would otherwise all queue for its exclusive lock.  Anything
 * that needs the full path (an ended lease to clear, the caller's own lease,
 * another kind of name) answers false.
 */
static bool
refused_at_a_glance(const DLockRequest *req)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *head;
	DLockEntry *lease;
	dlist_mutable_iter iter;
	bool		refused = false;

	LWLockAcquire(lock, LW_SHARED);
	head = dlock_find(&req->key, req->hash);
	if (head != NULL && head->permits == req->permits)
	{
		int64		now = dlock_mono_now();

		refused = true;
		dlock_foreach_lease(lease, head, iter)
		{
			if (dlock_is_free(lease, now) ||
				(lease->roleid == req->roleid &&
				 dlock_owner_equal(&lease->owner, &req->owner)))
			{
				refused = false;
				break;
			}
		}
		if (refused && dlist_is_empty(&head->u.h.waiters))
			refused = dlock_conflicts(head, req->mode, now);
	}
	LWLockRelease(lock);
	return refused;
}

/*
 * Extends the caller's own lease (lease, pinned by the caller under the
 * partition lock) to now + ttl at commit, writing its row first if durable.
 * Returns the token, or 0 when the lease's row was deleted meanwhile by a
 * release from another session.
 */
static uint64
extend(const DLockRequest *req, struct DLockOp *op, uint64 token, DLockRow *row,
	   bool durable, int64 now)
{
	int64		expires = now + req->ttl;
	int64		version;

	if (dlock_xact_extended(op, req, token, expires) && durable)
	{
		/* our own pending release deleted the row: the lease keeps one */
		insert_row(req, row, expires, now);
		version = row->version;
	}
	else if (durable)
		version = dlock_store_update(&req->key, token,
									 dlock_mono_to_wall(expires, now, GetCurrentTimestamp()),
									 req->ttl);
	else
		version = 0;
	dlock_xact_renew_set(op, token, expires, version);
	return (durable && version == 0) ? 0 : token;
}

uint64
dlock_lease_acquire(const DLockRequest *req, int64 timeout)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *head;
	DLockEntry *lease;
	struct DLockOp *op;
	int64		now;
	int64		expires = 0;
	uint64		token;
	TransactionId xid = InvalidTransactionId;
	TransactionId wait_xid;
	DLockRow	row;
	bool		retried = false;
	bool		found;
	bool		durable;
	bool		clears;
	bool		no_token;
	bool		by_lock_timeout;
	bool		grace;

	/* one deadline for the whole call, whatever it waits for */
	int64		deadline = wait_deadline(timeout, dlock_mono_now(), &by_lock_timeout);

	if (timeout == 0 && refused_at_a_glance(req))
		return 0;
	dlock_xact_register();

	/*
	 * only calls that may grant reserve tokens: a release works on a full
	 * disk
	 */
	dlock_token_prefetch();
	/* after a promotion: nothing new until every lost lease has ended */
	grace = dlock_grace_pending() && dlock_grace_holds();
	if (timeout != 0)
		dlock_wait_prepare();

	/*
	 * A durable grant records our xid, and another backend granting us the
	 * lease as a waiter needs it; a try got past the glance, so it will
	 * likely be granted.  Assigning it may fail: not under the lock.
	 */
	if (req->durable)
		xid = dlock_store_xid();
	op = dlock_xact_begin(req);

retry:
	LWLockAcquire(lock, LW_EXCLUSIVE);
	now = dlock_mono_now();
	head = dlock_find_or_create(&req->key, req->hash, &found);
	if (head == NULL)
		goto full;
	/* ended leases go first, to the waiters they free the name for */
	if (found)
		dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, true);
	if (head->nleases == 0 && dlist_is_empty(&head->u.h.waiters))
		head->permits = req->permits;
	else if (head->permits != req->permits)
	{
		int			permits = head->permits;

		LWLockRelease(lock);
		dlock_wake_all();
		kind_conflict(req, permits);
	}

	if ((lease = own_lease(head, req, now)) != NULL)
	{
		if (lease->mode != req->mode)
		{
			DLockMode	held = (DLockMode) lease->mode;

			LWLockRelease(lock);
			dlock_wake_all();
			mode_conflict(req, held);
		}
		wait_xid = grant_in_progress(lease);
		if (TransactionIdIsValid(wait_xid))
		{
			token = lease->token;
			LWLockRelease(lock);
			dlock_wake_all();
			if (wait_for_grant(req, token, wait_xid, deadline, by_lock_timeout, false))
				goto retry;
			dlock_xact_forget(op);
			return 0;
		}
		/* it cannot end before our commit applies the new expiry */
		if (!dlock_pin(lease))
		{
			LWLockRelease(lock);
			dlock_wake_all();
			too_many_pinners(req);
		}
		lease->holder_pid = MyProcPid;
		token = lease->token;
		durable = lease->durable;
		if (durable)
			fill_row(&row, lease, lease->version + 1);
		LWLockRelease(lock);
		dlock_wake_all();
		return extend(req, op, token, &row, durable, now);
	}
	else if (grace)
	{
		dlock_drop_if_unused(head);
		LWLockRelease(lock);
		dlock_wake_all();
		if (!dlock_grace_wait(deadline, by_lock_timeout))
		{
			dlock_xact_forget(op);
			return 0;
		}
		grace = false;
		goto retry;
	}
	else if (dlist_is_empty(&head->u.h.waiters) && !dlock_conflicts(head, req->mode, now))
	{
		lease = dlock_grant(head, &req->owner, req->roleid, MyProcPid, req->ttl, now,
							req->mode, false, req->durable ? xid : InvalidTransactionId,
							&no_token);
		if (lease == NULL && no_token)
		{
			/* reserve more tokens, outside the lock, and look again */
			dlock_drop_if_unused(head);
			LWLockRelease(lock);
			dlock_wake_all();
			dlock_token_prefetch();
			goto retry;
		}
		if (lease == NULL)
			goto full;
		dlock_count(DLOCK_STAT_IMMEDIATE);
	}
	else if (timeout == 0)
	{
		LWLockRelease(lock);
		dlock_wake_all();
		dlock_xact_forget(op);
		return 0;
	}
	else
	{
		/* a waiter that may need an entry of its own counts it now */
		bool		reserve = (head->permits != 0 || req->mode != DLOCK_EXCLUSIVE);
		int			ahead;
		uint64		pinned = dlock_self_deadlock(head, req->mode, &ahead);

		if (pinned != 0)
		{
			LWLockRelease(lock);
			dlock_wake_all();
			self_deadlock(req, pinned, ahead);
		}
		if (reserve && !dlock_reserve(head))
			goto full;
		dlock_enqueue(head, &req->owner, req->roleid, req->ttl, deadline,
					  req->mode, reserve, req->durable ? xid : InvalidTransactionId);
		LWLockRelease(lock);
		dlock_wake_all();

		token = dlock_sleep(dlock_xact_holds_pins());
		if (token == 0)
		{
			dlock_xact_forget(op);
			if (by_lock_timeout)
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("canceling statement due to lock timeout"),
						 errdetail("Lock \"%.*s\" was not granted within lock_timeout (%d ms).",
								   req->key.len, req->key.name, LockTimeout)));
			return 0;
		}
		dlock_xact_granted(op, token, req->durable);

		/* granted by another backend: read what to write */
		LWLockAcquire(lock, LW_SHARED);
		now = dlock_mono_now();
		lease = dlock_find_lease(&req->key, req->hash, token);
		found = (lease != NULL);
		clears = found && lease->clear_rows;
		if (found)
		{
			fill_row(&row, lease, 1);
			expires = lease->expires;
		}
		LWLockRelease(lock);
		dlock_store_note_token(token);
		if (clears)
			clear_rows(req, op, &row, token);
		/* (a lease that ended already leaves no row) */
		if (found && req->durable)
			insert_row(req, &row, expires, now);
		return token;
	}

	dlock_xact_granted(op, lease->token, lease->durable);
	token = lease->token;
	durable = lease->durable;
	clears = lease->clear_rows;
	if (durable || clears)
		fill_row(&row, lease, 1);
	LWLockRelease(lock);
	dlock_wake_all();
	dlock_store_note_token(token);
	if (clears)
		clear_rows(req, op, &row, token);
	if (durable)
		insert_row(req, &row, now + req->ttl, now);
	return token;

full:
	if (head != NULL)
		dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
	LWLockRelease(lock);
	dlock_wake_all();
	if (retried)
	{
		dlock_xact_forget(op);
		table_full();
	}
	reclaim_expired();
	retried = true;
	goto retry;
}

/* What a caller needs to know of the lease it holds */
typedef struct HeldLease
{
	uint64		token;
	bool		durable;
} HeldLease;

/*
 * Finds the caller's live lease, pinned if pin, once no other transaction
 * is granting it.  Returns false when the caller holds none.
 */
static bool
held_lease(const DLockRequest *req, HeldLease *held_out, int64 *now, bool pin)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	Oid			member_of = InvalidOid;

	for (;;)
	{
		DLockEntry *head;
		DLockEntry *lease;
		dlist_mutable_iter iter;
		bool		held = false;
		Oid			other_role = InvalidOid;
		TransactionId wait_xid = InvalidTransactionId;
		int64		deadline = 0;
		bool		by_lock_timeout = false;

		LWLockAcquire(lock, pin ? LW_EXCLUSIVE : LW_SHARED);
		*now = dlock_mono_now();
		head = dlock_find(&req->key, req->hash);
		if (head != NULL)
		{
			dlock_foreach_lease(lease, head, iter)
			{
				if (!dlock_is_live(lease, *now) ||
					!dlock_owner_equal(&lease->owner, &req->owner))
					continue;
				if (lease->roleid != req->roleid && lease->roleid != member_of)
				{
					other_role = lease->roleid;
					continue;
				}
				held_out->token = lease->token;
				held_out->durable = lease->durable;
				wait_xid = grant_in_progress(lease);
				held = !TransactionIdIsValid(wait_xid);
				if (!held)
					deadline = lease_deadline(lease, *now, &by_lock_timeout);
				if (held && pin && !dlock_pin(lease))
				{
					LWLockRelease(lock);
					too_many_pinners(req);
				}
				break;
			}
		}
		LWLockRelease(lock);

		if (TransactionIdIsValid(wait_xid))
		{
			wait_for_grant(req, held_out->token, wait_xid, deadline, by_lock_timeout, true);
			continue;
		}

		/*
		 * The owner's lease was taken by another role: members of that role
		 * may act on it.  The check reads catalogs, so not under the lock.
		 */
		if (held || !OidIsValid(other_role) ||
			!has_privs_of_role(req->roleid, other_role))
			return held;
		member_of = other_role;
	}
}

bool
dlock_lease_renew(const DLockRequest *req, TimestampTz *expires_at)
{
	int64		now;
	int64		version = 0;
	HeldLease	held;
	struct DLockOp *op;

	dlock_xact_register();
	if (dlock_xact_release_pending(req))
		return false;
	/* pinned until our transaction ends, so it cannot expire before commit */
	op = dlock_xact_renew(req);
	if (!held_lease(req, &held, &now, true))
		return false;
	*expires_at = dlock_mono_to_wall(now + req->ttl, now, GetCurrentTimestamp());
	dlock_xact_renew_set(op, held.token, now + req->ttl, 0);
	if (held.durable)
	{
		version = dlock_store_update(&req->key, held.token, *expires_at, req->ttl);
		dlock_xact_renew_set(op, held.token, now + req->ttl, version);
		/* its row is gone: released from another session meanwhile */
		if (version == 0)
			return false;
	}
	return true;
}

bool
dlock_lease_release(const DLockRequest *req, uint64 token)
{
	int64		now;
	HeldLease	held;

	dlock_xact_register();
	if (dlock_xact_release_pending(req) ||
		!held_lease(req, &held, &now, false) ||
		(token != 0 && token != held.token))
		return false;
	dlock_xact_release(req, held.token, held.durable);
	if (held.durable)
		dlock_store_delete(&req->key, held.token);
	return true;
}

/*
 * Releases every lease that is live on the name, whoever holds it (at
 * commit, as a release would).  Returns how many, and what was broken in
 * *broken (palloc'd), for the caller's log lines.
 */
int
dlock_lease_force_release(const DLockRequest *req, DLockBroken **broken)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *head;
	DLockEntry *lease;
	dlist_mutable_iter iter;
	DLockBroken *found;
	int			nfound = 0;
	int			n = 0;
	int64		now;

	dlock_xact_register();
	for (;;)
	{
		int			room;
		bool		complete;
		TransactionId wait_xid = InvalidTransactionId;
		uint64		wait_token = 0;
		int64		deadline = 0;
		bool		by_lock_timeout = false;

		LWLockAcquire(lock, LW_SHARED);
		head = dlock_find(&req->key, req->hash);
		room = head != NULL ? head->nleases : 0;
		LWLockRelease(lock);
		found = palloc(sizeof(DLockBroken) * Max(room, 1));

		LWLockAcquire(lock, LW_SHARED);
		now = dlock_mono_now();
		nfound = 0;
		head = dlock_find(&req->key, req->hash);
		complete = (head == NULL || head->nleases <= room);
		if (head != NULL && complete)
		{
			dlock_foreach_lease(lease, head, iter)
			{
				if (!dlock_is_live(lease, now))
					continue;
				wait_xid = grant_in_progress(lease);
				if (TransactionIdIsValid(wait_xid))
				{
					wait_token = lease->token;
					deadline = lease_deadline(lease, now, &by_lock_timeout);
					break;
				}
				memcpy(&found[nfound].owner, &lease->owner, sizeof(DLockOwner));
				found[nfound].roleid = lease->roleid;
				found[nfound].token = lease->token;
				found[nfound].durable = lease->durable;
				nfound++;
			}
		}
		LWLockRelease(lock);
		if (complete && !TransactionIdIsValid(wait_xid))
			break;
		pfree(found);
		/* a lease still being granted, or more leases came: look again */
		if (TransactionIdIsValid(wait_xid))
			wait_for_grant(req, wait_token, wait_xid, deadline, by_lock_timeout, true);
	}

	for (int i = 0; i < nfound; i++)
	{
		DLockRequest holder;

		memcpy(&holder, req, sizeof(DLockRequest));
		memcpy(&holder.owner, &found[i].owner, sizeof(DLockOwner));
		holder.roleid = found[i].roleid;
		if (dlock_xact_release_pending(&holder))
			continue;
		dlock_xact_release(&holder, found[i].token, found[i].durable);
		if (found[i].durable)
			dlock_store_delete(&req->key, found[i].token);
		found[n++] = found[i];
	}
	*broken = found;
	return n;
}

/*
 * Checks that token is the token of a live lease on the name and pins that
 * lease until the caller's transaction ends, so it cannot end meanwhile.
 * On failure says why; *current is the newest live token on the name.
 */
DLockFenceResult
dlock_lease_fence(const DLockRequest *req, uint64 token, uint64 *current)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	struct DLockOp *op = NULL;
	DLockFenceResult result;
	Oid			member_of = InvalidOid;

	/* a transaction pins a lease once, however many rows it fences with it */
	bool		held = dlock_xact_fence_held(&req->key, token);

	dlock_xact_register();
	if (!held)
		op = dlock_xact_fence(req);
	for (;;)
	{
		Oid			other_role = InvalidOid;
		DLockEntry *head;
		DLockEntry *lease = NULL;
		DLockEntry *each;
		dlist_mutable_iter iter;
		int64		now;
		TransactionId wait_xid = InvalidTransactionId;
		int64		deadline = 0;
		bool		by_lock_timeout = false;

		LWLockAcquire(lock, held ? LW_SHARED : LW_EXCLUSIVE);
		now = dlock_mono_now();
		*current = 0;
		head = dlock_find(&req->key, req->hash);
		if (head != NULL)
		{
			dlock_foreach_lease(each, head, iter)
			{
				if (each->token == token)
					lease = each;
				if (each->token > *current &&
					(dlock_is_live(each, now) || each->token > token))
					*current = each->token;
			}
		}
		if (lease == NULL)
			result = *current > token ? DLOCK_FENCE_STALE : DLOCK_FENCE_UNKNOWN;
		else if (!dlock_is_live(lease, now))
			result = *current > token ? DLOCK_FENCE_STALE : DLOCK_FENCE_EXPIRED;
		else if (lease->roleid != req->roleid && lease->roleid != member_of)
		{
			other_role = lease->roleid;
			result = DLOCK_FENCE_ROLE;
		}
		else if (held)
			result = DLOCK_FENCE_OK;
		else if (TransactionIdIsValid(wait_xid = grant_in_progress(lease)))
		{
			/* a grant that may still be taken back: nobody pins it yet */
			deadline = lease_deadline(lease, now, &by_lock_timeout);
		}
		else if (!dlock_pin(lease))
		{
			LWLockRelease(lock);
			too_many_pinners(req);
		}
		else
		{
			dlock_xact_fence_set(op, token);
			result = DLOCK_FENCE_OK;
		}
		LWLockRelease(lock);
		if (TransactionIdIsValid(wait_xid))
		{
			wait_for_grant(req, token, wait_xid, deadline, by_lock_timeout, true);
			continue;
		}
		if (result != DLOCK_FENCE_ROLE || !has_privs_of_role(req->roleid, other_role))
			return result;
		member_of = other_role;
	}
}
