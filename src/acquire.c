/*
 * acquire.c
 *		Acquiring a lease: dlock_lease_acquire() and its steps.
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
 * granting transaction's id, so nobody acts on it until that ends; a
 * deferred lease carries its decider for the same reason; every wait for
 * them goes through dlock_wait_for_decider(), within the caller's
 * deadline).
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
#include "events.h"
#include "grace.h"
#include "grantwait.h"
#include "lease.h"
#include "lifetime.h"
#include "queue.h"
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

/*
 * The caller's live lease on the name (same owner and role), or NULL.  One
 * whose session or transaction ended within its minimum hold is nobody's to
 * extend: it only waits for the hold's end, like any other holder's lease.
 */
static DLockEntry *
own_lease(DLockEntry *head, const DLockRequest *req, int64 now)
{
	dlist_mutable_iter iter;
	DLockEntry *lease;

	dlock_foreach_lease(lease, head, iter)
	{
		if (lease->roleid == req->roleid && dlock_is_live(lease, now) &&
			!lease->bound_ended &&
			dlock_owner_equal(&lease->owner, &req->owner))
			return lease;
	}
	return NULL;
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
		   uint64 token, bool inserts)
{
	dlock_xact_cleared_rows(op);
	if (!row->takeover || !inserts)
		dlock_store_clear_rows(&req->key, req->hash, token);
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
	   bool durable, bool adopted, int64 now)
{
	int64		expires = now + req->ttl;
	int64		version;

	/* our own pending release deleted the row, or it has none yet */
	if ((dlock_xact_extended(op, req, token, expires) || adopted) && durable)
	{
		insert_row(req, row, expires, now);
		version = row->version;
	}
	else if (durable)
		version = dlock_store_update(&req->key, token,
									 dlock_mono_to_wall(expires, now, GetCurrentTimestamp()),
									 req->ttl, row->min_hold != 0, 0);
	else
		version = 0;
	dlock_xact_renew_set(op, token, expires, version);
	return (durable && version == 0) ? 0 : token;
}

/*
 * The state of one dlock_lease_acquire() call, passed between its steps.
 * It lives on the caller's stack: the fast path allocates nothing.
 */
typedef struct AcquireState
{
	const DLockRequest *req;
	LWLock	   *lock;			/* the name's partition lock */
	struct DLockOp *op;			/* the call in the transaction's log */
	int64		timeout;		/* as asked: 0 = a try */
	int64		hold;			/* dlock_enqueue: how long its request stays
								 * queued; 0: another call */
	int64		deadline;		/* of the whole call, from
								 * dlock_wait_deadline() */
	bool		by_lock_timeout;	/* lock_timeout set the deadline */
	bool		retried;		/* found the table full once already */
	bool		grace;			/* after a promotion, nothing new is granted
								 * yet (grace.c) */
	TransactionId xid;			/* durable: the transaction of the grant */
	bool		defer;			/* durable, its row deferred (dlock.defer_rows) */
	DLockEntry *head;			/* under the lock: the name's head, or NULL */
	int64		now;			/* under the lock: when it was taken */
	uint64		token;			/* the answer, once a step gives one */
} AcquireState;

/* A grant whose row is deferred: the caller's transaction decides it */
static VirtualTransactionId
deferred_by(const AcquireState *a)
{
	VirtualTransactionId vxid;

	if (a->defer)
		return dlock_my_vxid();
	SetInvalidVirtualTransactionId(vxid);
	return vxid;
}

/* Releases the partition lock, then sets the latches collected under it. */
static void
acquire_unlock(AcquireState *a)
{
	LWLockRelease(a->lock);
	dlock_wake_all();
}

/* The call ends without a lease: it leaves nothing in the transaction. */
static bool
not_granted(AcquireState *a)
{
	dlock_xact_forget(a->op);
	a->token = 0;
	return true;
}

/*
 * What may fail, allocate or read the token file is done before the
 * partition lock is taken, so that nothing under the lock does.
 */
static void
acquire_prepare(AcquireState *a)
{
	dlock_xact_register();

	/*
	 * only calls that may grant reserve tokens: a release works on a full
	 * disk
	 */
	dlock_token_prefetch();
	/* after a promotion: nothing new until every lost lease has ended */
	a->grace = dlock_grace_pending() && dlock_grace_holds();
	if (a->timeout != 0)
		dlock_wait_prepare();

	/*
	 * A durable grant records our xid, and another backend granting us the
	 * lease as a waiter needs it; a try got past the glance, so it will
	 * likely be granted.  Assigning it may fail: not under the lock.  A
	 * deferred grant writes nothing (the crash grace covers its ttl, raised
	 * here), but as a durable one it needs a read-write transaction.
	 */
	a->xid = InvalidTransactionId;
	a->defer = a->req->durable && dlock_defer_rows && a->req->min_hold == 0 &&
		dlock_grace_unflushed(a->req->ttl);
	if (a->defer)
		dlock_store_check_writable();
	else if (a->req->durable)
		a->xid = dlock_store_xid();
	dlock_lifetime_prepare(a->req);
	a->op = dlock_xact_begin(a->req);
}

/*
 * No entry was free for the request (the partition lock is held): the name
 * is settled (dropped if unused), the leases that are due are ended, and
 * the call looks again, once; the second time, the table is full.  Returns
 * false: look again.
 */
static bool
make_room(AcquireState *a)
{
	if (a->head != NULL)
		dlock_settle(a->head, a->now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
	acquire_unlock(a);
	if (a->retried)
	{
		dlock_xact_forget(a->op);
		table_full();
	}
	reclaim_expired();
	a->retried = true;
	return false;
}

/*
 * The caller holds a live lease on the name already: re-acquiring extends
 * it, same token, once no other transaction is still granting it.  Returns
 * false when that transaction ended: the lease may be gone, look again.
 */
static bool
extend_own(AcquireState *a, DLockEntry *lease)
{
	const DLockRequest *req = a->req;
	DLockDecider decider;
	uint64		token;
	bool		durable;
	bool		adopt;
	DLockRow	row;

	if (lease->mode != req->mode)
	{
		DLockMode	held = (DLockMode) lease->mode;

		acquire_unlock(a);
		mode_conflict(req, held);
	}
	if (dlock_lease_decider(lease, &decider))
	{
		token = lease->token;
		acquire_unlock(a);
		if (dlock_wait_for_decider(req, token, &decider, a->deadline, a->by_lock_timeout, false))
			return false;
		return not_granted(a);
	}
	adopt = lease->deferred;
	if (adopt && !TransactionIdIsValid(GetTopTransactionIdIfAny()))
	{
		/* the extension writes the deferred row: an xid first, unlocked */
		acquire_unlock(a);
		(void) dlock_store_xid();
		return false;
	}
	/* it cannot end before our commit applies the new expiry */
	if (!dlock_pin(lease))
	{
		acquire_unlock(a);
		dlock_too_many_pinners(req);
	}
	/* a session or transaction lease stays bound to its backend */
	if (lease->lifetime == DLOCK_LIFETIME_TTL)
		dlock_set_holder(lease, MyProcPid, dlock_lifetime_backend(),
						 DLOCK_LIFETIME_TTL);
	token = lease->token;
	if (adopt)
	{
		dlock_adopt(lease, GetTopTransactionIdIfAny());
		dlock_xact_adopted(a->op, lease->grant_xid);
	}
	durable = lease->durable;
	if (durable)
		dlock_store_fill_row(&row, lease, lease->version + 1);
	acquire_unlock(a);
	a->token = extend(req, a->op, token, &row, durable, adopt, a->now);
	return true;
}

/*
 * A lease this call granted under the partition lock: logged in the
 * transaction (whose abort takes it back) while the lock is held, its row
 * written after the lock is released.
 */
static bool
granted(AcquireState *a, DLockEntry *lease)
{
	const DLockRequest *req = a->req;
	DLockRow	row;
	uint64		token;
	bool		durable;
	bool		clears;

	dlock_xact_granted(a->op, lease->token, lease->durable);
	dlock_xact_granted_event(a->op, dlock_event_granted(lease, dlock_events, MyProcPid));
	token = lease->token;
	if (req->lifetime == DLOCK_LIFETIME_SESSION)
		dlock_lifetime_bound(req, token);
	durable = lease->durable;
	clears = lease->clear_rows;
	if (durable || clears)
		dlock_store_fill_row(&row, lease, 1);
	acquire_unlock(a);
	dlock_store_note_token(token);
	if (clears)
		clear_rows(req, a->op, &row, token, durable);
	if (durable)
		insert_row(req, &row, a->now + req->ttl, a->now);
	a->token = token;
	return true;
}

/*
 * The name is free for the request and nobody is queued: the fast path.
 * Returns false to look again, after reserving tokens (none was left) or
 * making room (no entry was free).
 */
static bool
grant_now(AcquireState *a)
{
	const DLockRequest *req = a->req;
	DLockEntry *lease;
	bool		no_token;

	lease = dlock_grant(a->head, &req->owner, req->roleid, MyProcPid, req->ttl, a->now,
						req->mode, false, a->xid, deferred_by(a), &no_token);
	if (lease == NULL && no_token)
	{
		/* reserve more tokens, outside the lock, and look again */
		dlock_drop_if_unused(a->head);
		acquire_unlock(a);
		dlock_token_prefetch();
		return false;
	}
	if (lease == NULL)
		return make_room(a);
	dlock_set_min_hold(lease, req->min_hold, a->now);
	dlock_set_holder(lease, MyProcPid, dlock_lifetime_backend(), req->lifetime);
	dlock_count(DLOCK_STAT_IMMEDIATE);
	return granted(a, lease);
}

/*
 * Granted by another backend while we slept: it could not write our row
 * (only our transaction can), so we read what to write under a shared lock
 * and write it here.
 */
static bool
handed_over(AcquireState *a, uint64 token)
{
	const DLockRequest *req = a->req;
	DLockEntry *lease;
	DLockRow	row;
	int64		now;
	int64		expires = 0;
	bool		found;
	bool		clears;
	bool		durable;

	dlock_xact_granted(a->op, token, TransactionIdIsValid(a->xid));
	if (req->lifetime == DLOCK_LIFETIME_SESSION)
		dlock_lifetime_bound(req, token);

	/* granted by another backend: read what to write */
	LWLockAcquire(a->lock, LW_SHARED);
	now = dlock_mono_now();
	lease = dlock_find_lease(&req->key, req->hash, token);
	found = (lease != NULL);
	/* (a lease that ended already: its end's event waits for our commit) */
	dlock_xact_granted_event(a->op, dlock_wait_event_seq());
	clears = found && lease->clear_rows;
	durable = found && lease->durable;
	if (found)
	{
		dlock_store_fill_row(&row, lease, 1);
		expires = lease->expires;
	}
	LWLockRelease(a->lock);
	dlock_store_note_token(token);
	if (clears)
		clear_rows(req, a->op, &row, token, durable);
	/* (a lease that ended already leaves no row, a deferred one none yet) */
	if (durable)
		insert_row(req, &row, expires, now);
	a->token = token;
	return true;
}

/*
 * The name is taken, or others are queued first (FIFO across modes): the
 * request joins the queue and sleeps, without the lock, until a backend
 * that frees the lease hands it over or the deadline comes.  Returns false
 * to look again after making room (no entry was free for the waiter).
 */
static bool
queue_and_wait(AcquireState *a)
{
	const DLockRequest *req = a->req;
	DLockEntry *head = a->head;

	/* a waiter that may need an entry of its own counts it now */
	bool		reserve = (head->permits != 0 || req->mode != DLOCK_EXCLUSIVE);
	int			ahead;
	uint64		pinned = dlock_self_deadlock(head, req->mode, &ahead);
	uint64		token;

	if (pinned != 0)
	{
		acquire_unlock(a);
		self_deadlock(req, pinned, ahead);
	}
	if (reserve && !dlock_reserve(head))
		return make_room(a);
	dlock_enqueue(head, &req->owner, req->roleid, req->ttl, a->deadline,
				  req->mode, reserve, a->xid, deferred_by(a),
				  req->min_hold, req->lifetime, dlock_lifetime_backend());
	acquire_unlock(a);

	token = dlock_sleep(dlock_xact_holds_pins());
	if (token == 0)
	{
		dlock_xact_forget(a->op);
		if (a->by_lock_timeout)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("canceling statement due to lock timeout"),
					 errdetail("Lock \"%.*s\" was not granted within lock_timeout (%d ms).",
							   req->key.len, req->key.name, LockTimeout)));
		a->token = 0;
		return true;
	}
	return handed_over(a, token);
}

/*
 * dlock_enqueue, when the name is not free for it: its request joins the
 * queue (or keeps its place there) and the call returns at once.  Returns
 * false to look again after making room (no entry was free for it).
 */
static bool
queue_request(AcquireState *a)
{
	if (!dlock_queue_join(a->head, a->req, a->hold, a->now))
		return make_room(a);
	acquire_unlock(a);
	return not_granted(a);
}

/*
 * During the grace after a promotion a lease the old primary granted may
 * have been lost with WAL that never arrived, on any name: nothing new is
 * granted until it ends (the caller's own restored lease was extended
 * above).  The wait holds no lock and joins no queue.  Returns false: look
 * again once the grace is over.
 */
static bool
wait_for_grace(AcquireState *a)
{
	dlock_drop_if_unused(a->head);
	acquire_unlock(a);
	if (!dlock_grace_wait(a->deadline, a->by_lock_timeout))
		return not_granted(a);
	a->grace = false;
	return false;
}

/*
 * One look at the name under its partition lock: its ended leases are
 * settled first, its kind checked, then the request goes one of six ways,
 * each of which releases the lock.  Returns true when a->token is the
 * answer, false when the call must look again.
 */
static bool
acquire_look(AcquireState *a)
{
	const DLockRequest *req = a->req;
	DLockEntry *head;
	DLockEntry *lease;
	bool		found;

	LWLockAcquire(a->lock, LW_EXCLUSIVE);
	a->now = dlock_mono_now();
	a->head = head = dlock_find_or_create(&req->key, req->hash, &found);
	if (head == NULL)
		return make_room(a);
	/* dlock_enqueue walks its queue: requests whose hold ran out leave it */
	if (found && a->hold != 0)
		(void) dlock_queue_prune(head, a->now);
	/* ended leases go first, to the waiters they free the name for */
	if (found)
		dlock_settle(head, a->now, DLOCK_STAT_EXPIRED_BY_CALLER, true);
	if (head->nleases == 0 && dlist_is_empty(&head->u.h.waiters))
		head->permits = req->permits;
	else if (head->permits != req->permits)
	{
		int			permits = head->permits;

		acquire_unlock(a);
		kind_conflict(req, permits);
	}

	if ((lease = own_lease(head, req, a->now)) != NULL)
		return extend_own(a, lease);
	if (a->grace)
		return a->hold != 0 ? queue_request(a) : wait_for_grace(a);
	if (dlist_is_empty(&head->u.h.waiters) && !dlock_conflicts(head, req->mode, a->now))
		return grant_now(a);
	if (a->hold != 0)
		return queue_request(a);
	if (a->timeout == 0)
	{
		acquire_unlock(a);
		return not_granted(a);
	}
	return queue_and_wait(a);
}

/*
 * The steps of an acquisition: a try refused at a glance ends at once;
 * else everything that may fail or allocate is done before the partition
 * lock (acquire_prepare), then the name is looked at under the lock until
 * a look answers.  A look is repeated after tokens were reserved, after
 * the wait for another transaction's grant of our own lease, and once after
 * expired leases were reclaimed from a full table.
 */
static uint64
lease_acquire(const DLockRequest *req, int64 timeout, int64 hold)
{
	AcquireState a;

	a.req = req;
	a.lock = dlock_partition_lock(req->hash);
	a.timeout = timeout;
	a.hold = hold;
	a.retried = false;
	/* one deadline for the whole call, whatever it waits for */
	a.deadline = dlock_wait_deadline(timeout, dlock_mono_now(), &a.by_lock_timeout);

	if (timeout == 0 && hold == 0 && refused_at_a_glance(req))
		return 0;
	acquire_prepare(&a);
	for (;;)
	{
		if (acquire_look(&a))
			return a.token;
	}
}

uint64
dlock_lease_acquire(const DLockRequest *req, int64 timeout)
{
	return lease_acquire(req, timeout, 0);
}

/*
 * dlock_enqueue: a try that, when refused, leaves a request queued for hold
 * (queue.c); the caller's own lease, granted to that request meanwhile, is
 * returned as a try returns it.  Returns 0 when not granted now.
 */
uint64
dlock_lease_enqueue(const DLockRequest *req, int64 hold)
{
	Assert(hold > 0);
	/*
	 * A grant to the request while its owner is away writes no row: a crash
	 * restart's grace must cover it as it covers an unflushed grant (before
	 * the partition lock: this may write and fsync the grace's file).
	 */
	if (req->durable)
		dlock_grace_unwritten(req->ttl);
	return lease_acquire(req, 0, hold);
}
