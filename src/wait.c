/*
 * wait.c
 *		Waiting for a lease without polling.
 *
 * A waiter sleeps on its own latch.  Whoever frees a lease (a release, an
 * aborted acquisition, an expiry noticed by anyone) grants it to the head of
 * the queue in place and sets that one latch.  The head waiter also arms a
 * timer for the holder's expiry, so a dead holder is replaced on time even
 * with no worker running; the others sleep until their own deadline.
 */
#include "postgres.h"

#include "libpq/libpq-be.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "wait.h"

static DLockWaiter *slots = NULL;
static DLockWaiter *my_slot = NULL;
static WaitEventSet *wait_set = NULL;

Size
dlock_wait_shmem_size(void)
{
	return mul_size(MaxBackends, sizeof(DLockWaiter));
}

void
dlock_wait_shmem_init(void *base)
{
	slots = base;
	memset(slots, 0, dlock_wait_shmem_size());
}

DLockWaiter *
dlock_waiter_slots(int *count)
{
	*count = MaxBackends;
	return slots;
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

	if (my_slot != NULL)
		return;
	if (MyBackendId == InvalidBackendId || MyBackendId > MaxBackends)
		elog(ERROR, "dlock waits need a regular backend");

	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	wait_set = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	/* Notice a client that hung up while waiting, so its place is freed. */
	if (MyProcPort != NULL && WaitEventSetCanReportClosed())
		AddWaitEventToSet(wait_set, WL_SOCKET_CLOSED, MyProcPort->sock, NULL, NULL);
	MemoryContextSwitchTo(oldcxt);

	my_slot = &slots[MyBackendId - 1];
	my_slot->proc = MyProc;
	my_slot->pid = MyProcPid;
	my_slot->state = DLOCK_WAIT_NONE;
	before_shmem_exit(wait_exit_callback, (Datum) 0);
}

/* The caller holds the entry's partition lock exclusively. */
void
dlock_enqueue(DLockEntry *entry, uint32 hash, const DLockOwner *owner,
			  Oid roleid, int64 ttl, int64 deadline, bool durable)
{
	DLockWaiter *w = my_slot;

	Assert(w != NULL && w->state == DLOCK_WAIT_NONE);
	w->entry = entry;
	memcpy(&w->key, &entry->key, sizeof(DLockKey));
	w->hash = hash;
	w->token = 0;
	w->ttl = ttl;
	w->deadline = deadline;
	w->wake_at = deadline;
	w->since = GetCurrentTimestamp();
	w->deadline_wall = deadline == 0 ? 0 :
		dlock_mono_to_wall(deadline, dlock_mono_now(), w->since);
	w->roleid = roleid;
	w->durable = durable;
	memcpy(&w->owner, owner, offsetof(DLockOwner, str) + owner->len);
	w->state = DLOCK_WAIT_QUEUED;
	dlock_count(DLOCK_STAT_WAITS);
	dlist_push_tail(&entry->waiters, &w->node);
	entry->nwaiters++;
}

/*
 * Grants a freed lease to the next waiter, or drops the entry when nobody
 * waits.  Returns the process to wake once the partition lock is released.
 */
PGPROC *
dlock_handoff(DLockEntry *entry, uint32 hash, int64 now)
{
	DLockWaiter *w;

	if (dlist_is_empty(&entry->waiters))
	{
		dlock_remove(entry, hash);
		return NULL;
	}
	w = dlist_container(DLockWaiter, node, dlist_pop_head_node(&entry->waiters));
	entry->nwaiters--;
	dlock_grant(entry, hash, &w->owner, w->roleid, w->pid, w->ttl, now, w->durable);
	w->token = entry->token;
	w->state = DLOCK_WAIT_GRANTED;
	return w->proc;
}

void
dlock_wake(PGPROC *proc)
{
	if (proc != NULL)
		SetLatch(&proc->procLatch);
}

/*
 * When the head waiter must look again: when the lease ends (plus any
 * lock-delay), or never while a transaction pins it (unpinning wakes it).
 */
static int64
head_timer(const DLockEntry *entry, int64 deadline)
{
	int64		free_at = dlock_free_at(entry);

	if (entry->pins > 0 || (deadline != 0 && deadline < free_at))
		return deadline;
	return free_at;
}

/*
 * The head waiter must time the holder's expiry.  If its own timer fires
 * later than that, wake it once so it re-arms.  Caller holds the lock.
 */
PGPROC *
dlock_head_needing_timer(DLockEntry *entry)
{
	DLockWaiter *head;

	if (entry == NULL || dlist_is_empty(&entry->waiters) || entry->token == 0)
		return NULL;
	head = dlist_container(DLockWaiter, node, dlist_head_node(&entry->waiters));
	if (head->wake_at == head_timer(entry, head->deadline))
		return NULL;
	return head->proc;
}

static void
dequeue(DLockWaiter *w, PGPROC **baton)
{
	DLockEntry *entry = w->entry;
	bool		was_head = (dlist_head_node(&entry->waiters) == &w->node);

	dlist_delete(&w->node);
	entry->nwaiters--;
	w->state = DLOCK_WAIT_NONE;
	if (was_head)
		*baton = dlock_head_needing_timer(entry);
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
	PGPROC	   *wake = NULL;

	if (w == NULL || w->state == DLOCK_WAIT_NONE)
		return;

	lock = dlock_partition_lock(w->hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	if (w->state == DLOCK_WAIT_QUEUED)
		dequeue(w, &wake);
	else if (w->state == DLOCK_WAIT_GRANTED)
	{
		DLockEntry *entry = dlock_find(&w->key, w->hash);

		if (entry != NULL && entry->token == w->token)
			wake = dlock_handoff(entry, w->hash, dlock_mono_now());
		w->state = DLOCK_WAIT_NONE;
	}
	LWLockRelease(lock);
	dlock_wake(wake);
}

static void
sleep_until(int64 wake_at, int64 now)
{
	WaitEvent	event;
	long		timeout_ms = -1;

	if (wake_at != 0)
		timeout_ms = (long) ((Max(wake_at - now, 0) + 999) / 1000);

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
	PGPROC	   *wake = NULL;
	bool		done = false;
	DLockEntry *entry;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	*now = dlock_mono_now();
	entry = w->entry;

	/* Our holder died: we are next in line, so take the lease ourselves. */
	if (w->state == DLOCK_WAIT_QUEUED &&
		dlist_head_node(&entry->waiters) == &w->node &&
		dlock_is_free(entry, *now))
	{
		dlock_count(DLOCK_STAT_EXPIRED_BY_CALLER);
		(void) dlock_handoff(entry, w->hash, *now);
	}

	if (w->state == DLOCK_WAIT_GRANTED)
	{
		*token = w->token;
		w->state = DLOCK_WAIT_NONE;
		/* The lease may already be gone if its ttl was tiny. */
		wake = dlock_head_needing_timer(dlock_find(&w->key, w->hash));
		done = true;
	}
	else if (w->deadline != 0 && *now >= w->deadline)
	{
		dlock_count(DLOCK_STAT_TIMEOUTS);
		dequeue(w, &wake);
		*token = 0;
		done = true;
	}
	else
	{
		bool		is_head = dlist_head_node(&entry->waiters) == &w->node;

		*wake_at = is_head ? head_timer(entry, w->deadline) : w->deadline;
		w->wake_at = *wake_at;
	}
	LWLockRelease(lock);
	dlock_wake(wake);
	return done;
}

/*
 * Waits for the lease this backend was just queued for.  Returns its token,
 * or 0 when the deadline passed first.  Cancel, statement_timeout and
 * termination end the wait with an error and leave nothing queued.
 */
uint64
dlock_sleep(void)
{
	DLockWaiter *w = my_slot;
	uint64		token = 0;

	Assert(w != NULL && w->state == DLOCK_WAIT_QUEUED);
	PG_TRY();
	{
		int64		wake_at;
		int64		now;

		while (!check_wait(w, &token, &wake_at, &now))
			sleep_until(wake_at, now);
	}
	PG_CATCH();
	{
		dlock_abandon_wait();
		PG_RE_THROW();
	}
	PG_END_TRY();
	return token;
}
