/*
 * wait.c
 *		Waiting for a lease without polling.
 *
 * A waiter sleeps on its own latch.  Whoever frees a lease (a release, an
 * aborted acquisition, an expiry noticed by anyone) grants the name to the
 * waiters at the front of the queue that fit and sets their latches.  The
 * head waiter also arms a timer for the holders' expiry, so a dead holder is
 * replaced on time even with no worker running; the others sleep until their
 * own deadline.  The head waiter also terminates the backends whose open
 * transactions keep a lease that ended pinned past dlock.fence_grace, when
 * its role could end them with pg_terminate_backend() (overdue.c).
 *
 * Locking: a queue belongs to its name's partition lock; latches are set
 * only after that lock is released; a waiter sleeps holding no LWLock and
 * wakes on cancel, statement_timeout and postmaster death.
 */
#include "postgres.h"

#include "libpq/libpq-be.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "engine.h"
#include "events.h"
#include "grace.h"
#include "overdue.h"
#include "settings.h"
#include "tokens.h"
#include "wait.h"

/* The backends' slots, then the pool of queued requests' slots */
static DLockWaiter *slots = NULL;
static DLockWaiter *my_slot = NULL;
static WaitEventSet *wait_set = NULL;

/* The pool's free slots; taken and given back under a partition lock */
typedef struct QueuedPool
{
	slock_t		mutex;			/* the free list */
	dlist_head	free;
	pg_atomic_uint32 count;		/* slots in use */
	pg_atomic_uint32 used;		/* slots ever handed out: the free list is
								 * LIFO over slots in index order, so those
								 * are the first ones, as many as were ever
								 * in use at once */
} QueuedPool;

static QueuedPool *pool = NULL;

/* latches to set once the partition locks are released */
static PGPROC **to_wake = NULL;
static int	nto_wake = 0;

/* a queued request holds an entry, so dlock.max_locks slots always suffice */
static Size
slots_size(void)
{
	return mul_size(add_size(MaxBackends, dlock_max_locks), sizeof(DLockWaiter));
}

Size
dlock_wait_shmem_size(void)
{
	return add_size(slots_size(), MAXALIGN(sizeof(QueuedPool)));
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_wait_shmem_init(void)
{
	bool		found;

	slots = ShmemInitStruct("dlock waiters", slots_size(), &found);
	if (!found)
		memset(slots, 0, slots_size());
	pool = ShmemInitStruct("dlock queued requests", sizeof(QueuedPool), &found);
	if (found)
		return;
	SpinLockInit(&pool->mutex);
	dlist_init(&pool->free);
	pg_atomic_init_u32(&pool->count, 0);
	pg_atomic_init_u32(&pool->used, 0);
	for (int i = 0; i < dlock_max_locks; i++)
		dlist_push_tail(&pool->free, &slots[MaxBackends + i].node);
}

/*
 * Every slot that may be in use: the backends' first (MaxBackends), then
 * the pool's that were ever handed out (not every dlock.max_locks one: the
 * worker and the views walk these)
 */
DLockWaiter *
dlock_waiter_slots(int *count)
{
	*count = MaxBackends + (int) pg_atomic_read_u32(&pool->used);
	return slots;
}

/*
 * A pool slot for a new queued request on head's name, at the tail of its
 * queue; the caller fills in its hold.  The caller holds the partition lock
 * exclusively and reserved an entry for it.
 */
DLockWaiter *
dlock_queued_new(DLockEntry *head, const DLockOwner *owner, Oid roleid,
				 int64 ttl, DLockMode mode)
{
	DLockWaiter *w = NULL;

	SpinLockAcquire(&pool->mutex);
	if (!dlist_is_empty(&pool->free))
	{
		uint32		index;

		w = dlist_container(DLockWaiter, node, dlist_pop_head_node(&pool->free));
		index = (uint32) (w - slots - MaxBackends);
		if (index >= pg_atomic_read_u32(&pool->used))
			pg_atomic_write_u32(&pool->used, index + 1);
	}
	SpinLockRelease(&pool->mutex);
	if (w == NULL)
		return NULL;
	pg_atomic_fetch_add_u32(&pool->count, 1);
	memset(w, 0, offsetof(DLockWaiter, owner));
	w->head = head;
	memcpy(&w->key, &head->key, sizeof(DLockKey));
	w->hash = head->hash;
	w->ttl = ttl;
	w->since = GetCurrentTimestamp();
	w->roleid = roleid;
	w->mode = mode;
	w->lifetime = DLOCK_LIFETIME_TTL;
	w->backend.procno = -1;
	w->reserved = true;
	w->events = dlock_events;
	memcpy(&w->owner, owner, offsetof(DLockOwner, str) + owner->len);
	w->state = DLOCK_WAIT_QUEUED;
	dlist_push_tail(&head->u.h.waiters, &w->node);
	head->nwaiters++;
	return w;
}

/* A queued request leaves the pool (granted, or out of its queue). */
static void
queued_free(DLockWaiter *w)
{
	Assert(w->proc == NULL);
	w->state = DLOCK_WAIT_NONE;
	pg_atomic_fetch_sub_u32(&pool->count, 1);
	SpinLockAcquire(&pool->mutex);
	dlist_push_head(&pool->free, &w->node);
	SpinLockRelease(&pool->mutex);
}

/* The caller settles the name after (those behind may fit now). */
void
dlock_queued_remove(DLockWaiter *w)
{
	dlist_delete(&w->node);
	w->head->nwaiters--;
	if (w->reserved)
		dlock_unreserve(w->head);
	w->reserved = false;
	queued_free(w);
}

uint32
dlock_queued_count(void)
{
	return pg_atomic_read_u32(&pool->count);
}

void
dlock_wake_init(void)
{
	if (to_wake == NULL)
		to_wake = MemoryContextAlloc(TopMemoryContext, sizeof(PGPROC *) * MaxBackends);
}

/* Each backend waits in one queue at a time, so MaxBackends slots suffice. */
void
dlock_wake_later(PGPROC *proc)
{
	Assert(to_wake != NULL);
	if (proc == NULL)
		return;
	for (int i = 0; i < nto_wake; i++)
	{
		if (to_wake[i] == proc)
			return;
	}
	if (nto_wake < MaxBackends)
		to_wake[nto_wake++] = proc;
}

void
dlock_wake_all(void)
{
	for (int i = 0; i < nto_wake; i++)
		SetLatch(&to_wake[i]->procLatch);
	nto_wake = 0;
}

static void dlock_abandon_wait(void);

static void
wait_exit_callback(int code, Datum arg)
{
	dlock_abandon_wait();
}

/*
 * Sets up this backend's slot and wait set; call before taking any
 * partition lock, since it may allocate and register callbacks.
 */
void
dlock_wait_prepare(void)
{
	MemoryContext oldcxt;
	int			slot = DLockMyProcIndex();

	if (my_slot != NULL)
		return;
	if (slot < 0 || slot >= MaxBackends)
		elog(ERROR, "dlock waits need a regular backend");

	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	dlock_overdue_prepare();
	wait_set = DLockCreateWaitEventSet(3);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	/* Notice a client that hung up while waiting, so its place is freed. */
	if (MyProcPort != NULL && WaitEventSetCanReportClosed())
		AddWaitEventToSet(wait_set, WL_SOCKET_CLOSED, MyProcPort->sock, NULL, NULL);
	MemoryContextSwitchTo(oldcxt);

	my_slot = &slots[slot];
	my_slot->proc = MyProc;
	my_slot->pid = MyProcPid;
	my_slot->state = DLOCK_WAIT_NONE;
	before_shmem_exit(wait_exit_callback, (Datum) 0);
}

/* The caller holds the name's partition lock exclusively. */
void
dlock_enqueue(DLockEntry *head, const DLockOwner *owner, Oid roleid,
			  int64 ttl, int64 deadline, DLockMode mode, bool reserved,
			  TransactionId durable_xid, VirtualTransactionId deferred_by,
			  int64 min_hold,
			  DLockLifetime lifetime, const DLockBackend *backend)
{
	DLockWaiter *w = my_slot;

	Assert(w != NULL && w->state == DLOCK_WAIT_NONE && dlock_is_head(head));
	w->head = head;
	memcpy(&w->key, &head->key, sizeof(DLockKey));
	w->hash = head->hash;
	w->token = 0;
	w->ttl = ttl;
	w->min_hold = min_hold;
	w->deadline = deadline;
	w->wake_at = deadline;
	w->since = GetCurrentTimestamp();
	w->deadline_wall = deadline == 0 ? 0 :
		dlock_mono_to_wall(deadline, dlock_mono_now(), w->since);
	w->roleid = roleid;
	w->durable_xid = durable_xid;
	w->deferred_by = deferred_by;
	w->mode = mode;
	w->lifetime = lifetime;
	w->backend = *backend;
	w->reserved = reserved;
	w->events = dlock_events;
	memcpy(&w->owner, owner, offsetof(DLockOwner, str) + owner->len);
	w->state = DLOCK_WAIT_QUEUED;
	dlock_count(DLOCK_STAT_WAITS);
	dlist_push_tail(&head->u.h.waiters, &w->node);
	head->nwaiters++;
}

/*
 * A due lease ends.  One released within its minimum hold ends as the
 * release it was, counted and sent only now; one whose session or
 * transaction ended within it, as that end (no counter counts those).
 */
static void
end_due_lease(DLockEntry *lease, DLockStat stat)
{
	if (lease->lifetime_ended)
		dlock_event_ended(lease);
	else
	{
		dlock_count(lease->released_at != 0 ? DLOCK_STAT_RELEASES : stat);
		dlock_event_expired(lease);
	}
	dlock_end_lease(lease);
}

/*
 * When the head waiter must look again: when the next lease of the name
 * may end (plus any lock-delay), or at its deadline if that comes first.
 * Pinned leases end only when unpinned, which settles the name again.
 */
static int64
head_timer(DLockEntry *head, int64 deadline)
{
	int64		free_at = dlock_next_free_at(head);

	if (free_at == 0 || (deadline != 0 && deadline < free_at))
		return deadline;
	return free_at;
}

/*
 * Brings a name up to date after any change: ends its leases that are free,
 * grants the waiters at the front of the queue that no longer conflict,
 * makes sure the head waiter's timer is right, and drops the name when
 * nothing is left.  Latches to set are collected for dlock_wake_all().
 * stat counts the leases found ended here.  The caller holds the partition
 * lock exclusively; head is gone afterwards unless keep.
 */
void
dlock_settle(DLockEntry *head, int64 now, DLockStat stat, bool keep)
{
	dlist_mutable_iter iter;
	DLockEntry *lease;
	bool		no_token;

	dlock_foreach_lease(lease, head, iter)
	{
		if (!dlock_is_free(lease, now))
			continue;
		end_due_lease(lease, stat);
	}

	while (!dlist_is_empty(&head->u.h.waiters))
	{
		DLockWaiter *w = dlist_container(DLockWaiter, node,
										 dlist_head_node(&head->u.h.waiters));

		/* a queued request not asked for again within its hold is gone */
		if (w->proc == NULL && w->hold_until <= now)
		{
			dlock_count(DLOCK_STAT_QUEUE_DROPPED);
			dlock_queued_remove(w);
			continue;
		}
		/* (after a promotion: its owner, or the worker, looks again) */
		if (w->proc == NULL && dlock_grace_pending())
			break;
		if (dlock_conflicts(head, (DLockMode) w->mode, now))
			break;
		lease = dlock_grant(head, &w->owner, w->roleid, w->pid, w->ttl, now,
							(DLockMode) w->mode, w->reserved, w->durable_xid,
							w->deferred_by, &no_token);
		if (lease == NULL)
		{
			/*
			 * it reserves tokens itself, outside any lock, and looks again;
			 * a head waiter settling the name itself too (its own latch), or
			 * it would sleep on while the name is free; for a queued
			 * request, the worker does
			 */
			if (no_token && w->proc == NULL)
				dlock_wake_watcher();
			else if (no_token)
				dlock_wake_later(w->proc);
			break;				/* else not reserved and full: it waits on */
		}
		dlock_set_min_hold(lease, w->min_hold, now);
		dlock_set_holder(lease, w->pid, &w->backend, (DLockLifetime) w->lifetime);
		dlist_pop_head_node(&head->u.h.waiters);
		head->nwaiters--;
		w->reserved = false;
		if (w->proc == NULL)
		{
			/* its owner is away: the grant is final now */
			dlock_event_granted_queued(lease, w->events);
			queued_free(w);
			continue;
		}
		w->token = lease->token;
		w->event_seq = dlock_event_granted(lease, w->events, w->pid);
		w->state = DLOCK_WAIT_GRANTED;
		dlock_wake_later(w->proc);
	}

	if (!dlist_is_empty(&head->u.h.waiters))
	{
		DLockWaiter *w = dlist_container(DLockWaiter, node,
										 dlist_head_node(&head->u.h.waiters));

		/* its own timer fires too late: wake it once so it re-arms */
		if (w->proc != MyProc && w->wake_at != head_timer(head, w->deadline))
			dlock_wake_later(w->proc);
	}
	if (!keep)
		dlock_drop_if_unused(head);
}

/* Whether this backend's transaction pins the lease. */
static bool
pinned_by_me(const DLockEntry *lease)
{
	for (int i = 0; i < DLOCK_MAX_PINNERS; i++)
	{
		if (lease->pinners[i].pid == MyProcPid)
			return true;
	}
	return false;
}

/*
 * Whether a wait for head in mode, queued now, could only end with the
 * caller's own transaction.  The leases it pins (renewed, extended or
 * fenced) cannot end before it does; if they alone conflict with the
 * request, or with that of a waiter queued before it (served first, so
 * waited for), no other session can end the wait.  Returns the token of
 * such a lease (0: none), and in *ahead the pid of the waiter before us that
 * it blocks (0: it blocks our own request).  The caller holds the partition
 * lock.
 */
uint64
dlock_self_deadlock(DLockEntry *head, DLockMode mode, int *ahead)
{
	dlist_mutable_iter iter;
	dlist_iter	witer;
	DLockEntry *lease;
	uint64		token = 0;
	int			npinned = 0;
	bool		exclusive = false;

	dlock_foreach_lease(lease, head, iter)
	{
		if (lease->pins == 0 || !pinned_by_me(lease))
			continue;
		token = Max(token, lease->token);
		npinned++;
		exclusive |= (lease->mode == DLOCK_EXCLUSIVE);
	}
	*ahead = 0;
	if (npinned == 0)
		return 0;
	/* a semaphore: every waiter asks for a permit, and none is left */
	if (head->permits != 0)
		return npinned >= head->permits ? token : 0;
	if (exclusive || mode == DLOCK_EXCLUSIVE)
		return token;
	dlist_foreach(witer, &head->u.h.waiters)
	{
		DLockWaiter *w = dlist_container(DLockWaiter, node, witer.cur);

		if (w->mode == DLOCK_EXCLUSIVE)
		{
			*ahead = w->pid;
			return token;
		}
	}
	return 0;
}

static void
dequeue(DLockWaiter *w, int64 now)
{
	DLockEntry *head = w->head;

	dlist_delete(&w->node);
	head->nwaiters--;
	if (w->reserved)
		dlock_unreserve(head);
	w->reserved = false;
	w->state = DLOCK_WAIT_NONE;
	/* those queued behind may fit now */
	dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
}

/*
 * Ends every wait in the database, queued or granted but not yet returned:
 * its leases are about to be dropped (the extension or the database went
 * away), so nothing can be granted any more.  Each waiter wakes to an
 * error; a queued request is dropped.  The caller holds every partition
 * lock.
 */
void
dlock_end_waits(Oid dbid)
{
	for (int i = 0; i < MaxBackends + dlock_max_locks; i++)
	{
		DLockWaiter *w = &slots[i];

		if (w->key.dbid != dbid ||
			(w->state != DLOCK_WAIT_QUEUED && w->state != DLOCK_WAIT_GRANTED))
			continue;
		if (w->proc == NULL)
			dlock_queued_remove(w);
		else if (w->state == DLOCK_WAIT_QUEUED)
		{
			dlist_delete(&w->node);
			w->head->nwaiters--;
			if (w->reserved)
				dlock_unreserve(w->head);
			w->reserved = false;
		}
		if (w->proc == NULL)
			continue;
		w->state = DLOCK_WAIT_ENDED;
		dlock_wake_later(w->proc);
	}
}

/*
 * Ends a lease its holder gives up (a release, a grant taken back or never
 * returned) and hands the name on.  A lease that other transactions pin
 * (they renewed, extended or fenced it, and their writes may still commit)
 * only stops being its owner's: no conflicting lease is granted until they
 * end (a second end of such a lease changes nothing).  row_deleted: the lease has no row any more (or never had one).  The
 * caller holds the partition lock exclusively.
 */
static void
give_up(DLockEntry *lease, bool row_deleted, int64 now)
{
	DLockEntry *head = dlock_head_of(lease);

	if (row_deleted)
		lease->version = 0;
	if (lease->pins > 0)
	{
		/* its first end counts: a later one must not put off its pinners' */
		if (!lease->released)
			dlock_release_pinned(lease, now);
	}
	else
		dlock_end_lease(lease);
	dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
}

/*
 * Forgets a wait that ends in an error or in backend exit.  A lease granted
 * to us meanwhile was never returned to the caller, so it is passed on.
 */
static void
dlock_abandon_wait(void)
{
	DLockWaiter *w = my_slot;
	LWLock	   *lock;

	if (w == NULL || w->state == DLOCK_WAIT_NONE)
		return;

	dlock_wake_init();
	lock = dlock_partition_lock(w->hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	if (w->state == DLOCK_WAIT_QUEUED)
		dequeue(w, dlock_mono_now());
	else if (w->state == DLOCK_WAIT_GRANTED)
	{
		DLockEntry *lease = dlock_find_lease(&w->key, w->hash, w->token);

		/* its row was never written */
		if (lease != NULL)
			give_up(lease, true, dlock_mono_now());
	}
	w->state = DLOCK_WAIT_NONE;
	LWLockRelease(lock);
	dlock_wake_all();
}

static void
sleep_until(int64 wake_at, int64 now)
{
	WaitEvent	event;
	long		timeout_ms = -1;

	if (wake_at != 0)
		timeout_ms = (long) Min((Max(wake_at - now, 0) + 999) / 1000, INT_MAX);

	if (WaitEventSetWait(wait_set, timeout_ms, &event, 1, PG_WAIT_EXTENSION) == 1 &&
		(event.events & WL_SOCKET_CLOSED))
	{
		ClientConnectionLost = true;
		InterruptPending = true;
	}
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * One look at our slot under the partition lock.  Returns true when the wait
 * is over (*token is 0 on timeout); otherwise sets *wake_at for the sleep.
 */
static bool
check_wait(DLockWaiter *w, uint64 *token, int64 *wake_at, int64 *now)
{
	LWLock	   *lock = dlock_partition_lock(w->hash);
	bool		done = false;
	DLockOverdue overdue[DLOCK_MAX_PINNERS * 4];
	int			noverdue = 0;
	int64		look_at = 0;
	bool		ended = false;

	/* a grant to us needs a reserved token; the reservation may fail */
	dlock_token_prefetch();
	LWLockAcquire(lock, LW_EXCLUSIVE);
	*now = dlock_mono_now();

	/* We are next in line: end dead holders ourselves and take our turn. */
	if (w->state == DLOCK_WAIT_QUEUED &&
		dlist_head_node(&w->head->u.h.waiters) == &w->node)
	{
		dlock_settle(w->head, *now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
		if (w->state == DLOCK_WAIT_QUEUED)
			noverdue = dlock_find_overdue(w->head, *now, overdue,
										  lengthof(overdue), &look_at);
	}

	if (w->state == DLOCK_WAIT_GRANTED)
	{
		*token = w->token;
		w->state = DLOCK_WAIT_NONE;
		done = true;
	}
	else if (w->state == DLOCK_WAIT_ENDED)
	{
		w->state = DLOCK_WAIT_NONE;
		ended = true;
	}
	else if (w->deadline != 0 && *now >= w->deadline)
	{
		dlock_count(DLOCK_STAT_TIMEOUTS);
		dequeue(w, *now);
		*token = 0;
		done = true;
	}
	else
	{
		bool		is_head = dlist_head_node(&w->head->u.h.waiters) == &w->node;

		*wake_at = is_head ? dlock_sooner(look_at, w->deadline) : w->deadline;
		w->wake_at = *wake_at;
	}
	LWLockRelease(lock);
	dlock_wake_all();
	dlock_terminate_overdue(w, overdue, noverdue);
	if (ended)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("wait for lock \"%.*s\" ended: the dlock extension was dropped",
						w->key.len, w->key.name),
				 errdetail("Every lease and wait of this database was discarded with the extension's lease table.")));
	return done;
}

/*
 * Waits for the lease this backend was just queued for.  Returns its token,
 * or 0 when the deadline passed first.  Cancel, statement_timeout and
 * termination end the wait with an error and leave nothing queued.
 */
/* kept out of dlock_sleep's setjmp frame, so its locals cannot be clobbered */
static pg_noinline uint64
wait_loop(DLockWaiter *w)
{
	uint64		token = 0;
	int64		wake_at;
	int64		now;

	while (!check_wait(w, &token, &wake_at, &now))
		sleep_until(wake_at, now);
	return token;
}

uint64
dlock_sleep(bool holds_pins)
{
	DLockWaiter *w = my_slot;
	volatile uint64 token = 0;

	Assert(w != NULL && w->state == DLOCK_WAIT_QUEUED);
	dlock_overdue_begin(holds_pins);
	PG_TRY();
	{
		token = wait_loop(w);
	}
	PG_CATCH();
	{
		dlock_abandon_wait();
		PG_RE_THROW();
	}
	PG_END_TRY();
	return token;
}

/* The seq of the grant event of the lease dlock_sleep() returned, or 0. */
uint64
dlock_wait_event_seq(void)
{
	return my_slot->event_seq;
}

/*
 * Takes the partition lock of the name, exclusive, and finds the lease that
 * carries token there (NULL: it ended).  The caller releases the lock.
 */
static DLockEntry *
lock_lease(const DLockKey *key, uint32 hash, uint64 token)
{
	LWLockAcquire(dlock_partition_lock(hash), LW_EXCLUSIVE);
	return dlock_find_lease(key, hash, token);
}

/*
 * The transaction that granted the lease with token committed (called from
 * its commit callback): its row is visible to every new snapshot, so nobody
 * needs to wait for that transaction before acting on the lease, and the
 * rows of ended leases it deleted are gone for good.
 */
void
dlock_grant_committed(const DLockKey *key, uint32 hash, uint64 token)
{
	DLockEntry *lease = lock_lease(key, hash, token);

	if (lease != NULL)
	{
		lease->grant_xid = InvalidTransactionId;
		lease->clear_rows = false;
	}
	LWLockRelease(dlock_partition_lock(hash));
}

/*
 * An aborted write of a deferred lease's row: the lease is deferred again
 * (see dlock_adopt).  Nobody else wrote its row meanwhile: only a deferred
 * lease is adopted.  (Its grant_xid may be gone: a waiter that saw the
 * transaction end before this callback forgets it.)
 */
void
dlock_handoff_unadopt(const DLockKey *key, uint32 hash, uint64 token)
{
	DLockEntry *lease = lock_lease(key, hash, token);

	if (lease != NULL && lease->durable)
		dlock_unadopt(lease);
	LWLockRelease(dlock_partition_lock(hash));
}

/*
 * A release of a deferred lease was undone (with its transaction, or
 * rolled back to a savepoint): it no longer decides the lease, which others
 * may act on again.  (The release made this backend its decider; at a
 * transaction's abort its own virtual id is already reset.)
 */
void
dlock_handoff_unmark(const DLockKey *key, uint32 hash, uint64 token)
{
	DLockEntry *lease = lock_lease(key, hash, token);

	if (lease != NULL && lease->decider_releases &&
		VirtualTransactionIdIsValid(lease->decider) &&
		dlock_vxid_of_this_backend(lease->decider))
		SetInvalidVirtualTransactionId(lease->decider);
	LWLockRelease(dlock_partition_lock(hash));
}

/*
 * Frees the lease if it still carries token (a release at commit, or a grant
 * taken back) and hands the name to the next waiters.
 */
void
dlock_handoff_free(const DLockKey *key, uint32 hash, uint64 token, bool row_deleted)
{
	DLockEntry *lease;

	dlock_wake_init();
	lease = lock_lease(key, hash, token);
	if (lease != NULL)
		give_up(lease, row_deleted, dlock_mono_now());
	LWLockRelease(dlock_partition_lock(hash));
	dlock_wake_all();
}

/*
 * Ends a session's or transaction's lease with its session or transaction,
 * if it still carries token and was not released, as a release does.  Within
 * its minimum hold it is kept until the hold's end, marked released, as a
 * release within the hold is; one released within it already stays so.
 * Either way it is bound to nothing from now on: nobody can renew, extend or
 * take it back, so it ends at the hold's end.
 */
void
dlock_handoff_end(const DLockKey *key, uint32 hash, uint64 token)
{
	DLockEntry *lease;
	int64		now = dlock_mono_now();

	dlock_wake_init();
	lease = lock_lease(key, hash, token);
	if (lease != NULL && !lease->released && lease->released_at != 0)
		lease->bound_ended = true;
	else if (lease != NULL && !lease->released)
	{
		if (lease->hold_until > now)
		{
			dlock_set_expires(lease, Min(lease->hold_until, lease->expires));
			lease->released_at = GetCurrentTimestamp();
			lease->lifetime_ended = true;
			lease->bound_ended = true;
			dlock_settle(dlock_head_of(lease), now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
		}
		else
		{
			dlock_event_ended(lease);
			give_up(lease, true, now);
		}
	}
	LWLockRelease(dlock_partition_lock(hash));
	dlock_wake_all();
}

/*
 * Drops a pin of the lease if it still carries token (a renewal, extension
 * or fence ended with its transaction), and with expires (at commit) moves
 * its expiry, unless it is durable and already has a row version as new as
 * version, or its session or transaction ended (a renewal made before that
 * end cannot take it back).  A lease left expired goes to the next waiters.
 */
void
dlock_handoff_set_expiry(const DLockKey *key, uint32 hash, uint64 token,
						 int64 expires, int64 version)
{
	DLockEntry *lease;

	dlock_wake_init();
	lease = lock_lease(key, hash, token);
	if (lease != NULL)
	{
		dlock_unpin(lease);
		if (expires != 0 && !lease->released && !lease->bound_ended &&
			(!lease->durable || version > lease->version))
		{
			dlock_set_expires(lease, expires);
			/* a renewal or extension takes back a release within the hold */
			lease->released_at = 0;
			if (lease->durable)
				lease->version = version;
		}
		dlock_settle(dlock_head_of(lease), dlock_mono_now(), DLOCK_STAT_EXPIRED_BY_CALLER, false);
	}
	LWLockRelease(dlock_partition_lock(hash));
	dlock_wake_all();
}

/*
 * A release within the lease's minimum hold, at commit: the lease stays its
 * owner's until expires (the hold's end, or its expiry if sooner), marked
 * released, unless it is durable and already has a row version as new as
 * version.  The head waiter is woken to re-arm its timer for that moment.
 */
void
dlock_handoff_hold(const DLockKey *key, uint32 hash, uint64 token,
				   int64 expires, int64 version, TimestampTz released_at)
{
	DLockEntry *lease;

	dlock_wake_init();
	lease = lock_lease(key, hash, token);
	/* (one whose session or transaction ended meanwhile is released already) */
	if (lease != NULL && !lease->released && !lease->bound_ended &&
		(!lease->durable || version > lease->version))
	{
		dlock_set_expires(lease, Min(expires, lease->expires));
		lease->released_at = released_at;
		if (lease->durable)
			lease->version = version;
		dlock_settle(dlock_head_of(lease), dlock_mono_now(), DLOCK_STAT_EXPIRED_BY_CALLER, false);
	}
	LWLockRelease(dlock_partition_lock(hash));
	dlock_wake_all();
}

/*
 * Ends leases that are due (past expiry and lock-delay), partition by
 * partition, at most batch per partition per lock hold: the next waiters get
 * the name, and a durable lease's row is left for dlock_sweep().  Returns
 * when the next lease falls due (0: none), or now when a batch was cut
 * short.  *mine counts this database's ended memory-only leases.
 */
int64
dlock_expire_due(int batch, DLockStat stat, int *mine)
{
	int64		next = 0;
	bool		more = false;

	dlock_wake_init();
	for (int p = 0; p < DLOCK_PARTITIONS; p++)
	{
		LWLock	   *lock = dlock_partition_lock((uint32) p);
		DLockEntry *lease;
		int64		now;
		int			n = 0;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		/* read per partition: leases granted here run from this moment */
		now = dlock_mono_now();
		while ((lease = dlock_earliest(p)) != NULL && dlock_free_at(lease) <= now)
		{
			DLockEntry *head = dlock_head_of(lease);

			if (n++ == batch)
			{
				more = true;	/* come back at once */
				break;
			}
			if (!lease->durable && lease->key.dbid == MyDatabaseId)
				(*mine)++;
			end_due_lease(lease, stat);
			dlock_settle(head, now, stat, false);
		}
		if (lease != NULL && (next == 0 || dlock_free_at(lease) < next))
			next = dlock_free_at(lease);
		LWLockRelease(lock);
		dlock_wake_all();
	}
	return more ? dlock_mono_now() : next;
}
