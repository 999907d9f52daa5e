/*
 * events.c
 *		Change events: NOTIFY dlock, '{"event": ..., "name": ..., ...}'.
 *
 * A lease granted while dlock.events is on in the session that asked for it
 * sends "granted", then one end: "released", "forced", "expired" or "ended".
 *
 * Off the commit path.  No lease transaction sends anything itself: each
 * event is recorded here, in shared memory, when it becomes final, and one
 * process per database, its sender (a "dlock events" background worker the
 * worker starts there), sends what is recorded with NOTIFY, in batches: one
 * transaction, many NOTIFYs.  A transaction's grants, releases and forces
 * are recorded by its post-commit callback (xact.c), before it applies them
 * to the engine, never after a rollback; an expiry or a lifetime end when
 * it happens.  So a lease transaction takes no transaction id and no NOTIFY
 * lock for its events: recording costs a slot, a list append under the
 * buffer's lock and a latch set.  Delivery follows the commit by the
 * sender's wake-up and its own commit (docs/semantics.md, "Change events").
 *
 * Order.  Each event takes seq, from one counter, under the name's
 * partition lock when its change takes effect: a grant when it is made (its
 * event is recorded at its commit), an expiry or a lifetime end when the
 * lease leaves the engine, a release or a force when its committed
 * transaction records it, just before applying it.  On a name, seq order is
 * the order of the changes.  An event is ready to send when it enters its
 * database's queue, under its name's partition lock; the sender takes the
 * queue's events in order, a batch at a time, and sends each batch in seq
 * order.  So on one name events arrive in seq order, except those of a
 * grant whose transaction commits after later changes of the name, and the
 * end of its lease if that came before the commit too: they enter the queue
 * at that commit.
 *
 * An end of a lease whose grant has not committed yet waits here, off the
 * queue, for that commit, which queues it after the grant; a rollback drops
 * both.  So an event never arrives for a grant that was rolled back, and
 * each lease's events arrive in seq order.  A lease's end is recorded once:
 * recording it turns its events off.
 *
 * The buffer holds EVENT_SLOTS events of all databases.  A committing
 * transaction that finds it nearly full while its database has a sender
 * waits for room at most EVENT_ROOM_WAIT ms; what does not fit then is
 * counted and sent as one "lost" event instead, after the events sent with
 * it (older than what it counts: a listener resyncs on it).  What was recorded and not
 * yet sent is lost in a crash or a restart, as is every LISTEN connection.
 *
 * Locking: the buffer under its own LWLock, taken after a partition lock,
 * never before one.  The sender holds it to take its queue (not to send).
 */
#include "postgres.h"

#include "commands/async.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "events.h"
#include "listen.h"

#define EVENT_SLOTS		4096
#define EVENT_ROOM_WAIT	20		/* ms a commit waits for room at most */
#define EVENT_NONE		(-1)	/* the end of a list of slots */

/*
 * The longest payload: escaping turns a byte into 6 characters at most
 * (\u00XX), and the rest is the keys, two quoted words and two numbers.
 * NOTIFY takes up to BLCKSZ - NAMEDATALEN - 128 bytes (8000).
 */
#define EVENT_JSON_FIXED	192
#define EVENT_JSON_MAX		(EVENT_JSON_FIXED + 6 * (DLOCK_NAME_MAX + DLOCK_OWNER_MAX))
StaticAssertDecl(EVENT_JSON_MAX < BLCKSZ - NAMEDATALEN - 128,
				 "a dlock event must fit in a NOTIFY payload");

typedef struct PendingEvent
{
	uint64		seq;
	uint64		token;
	Oid			dbid;
	int32		grant_pid;		/* waits for that backend's grant to commit */
	int32		next;			/* in its list: free, waiting or a queue */
	uint8		kind;
	uint8		mode;
	uint16		name_len;
	uint16		owner_len;
	char		lifetime[16];
	char		name[DLOCK_NAME_MAX];
	char		owner[DLOCK_OWNER_MAX];
} PendingEvent;

/* A database's events ready to send, oldest first */
typedef struct EventQueue
{
	Oid			dbid;			/* InvalidOid: unused */
	int32		head;
	int32		tail;
	uint32		lost;			/* events that found no room */
	Latch	   *sender;			/* its sender's, while one runs */
	bool		pacing;			/* it pauses after a batch: see wake_sender */
} EventQueue;

typedef struct EventShared
{
	pg_atomic_uint64 seq;		/* the last seq taken */
	pg_atomic_uint32 in_use;
	LWLock	   *lock;			/* the rest */
	int			used;			/* slots off the free list */
	int32		free;
	int32		waiting;		/* ends of grants not committed yet */
	EventQueue	queues[DLOCK_MAX_DATABASES];
	PendingEvent slots[EVENT_SLOTS];
} EventShared;

static EventShared *shared = NULL;

/* The sender's batch: taken off its queue, sent in its transaction */
static int32 batch_head = EVENT_NONE;
static int32 batch_tail = EVENT_NONE;
static int	batch_len = 0;
static uint32 batch_lost = 0;

/* a commit's recording: the sender to wake once it is done */
static Latch *to_wake = NULL;
static bool wake_watcher = false;

Size
dlock_events_shmem_size(void)
{
	return MAXALIGN(sizeof(EventShared));
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_events_shmem_init(LWLock *lock)
{
	bool		found;

	shared = ShmemInitStruct("dlock events", dlock_events_shmem_size(), &found);
	if (found)
		return;
	memset(shared, 0, dlock_events_shmem_size());
	pg_atomic_init_u64(&shared->seq, 0);
	pg_atomic_init_u32(&shared->in_use, 0);
	shared->lock = lock;
	for (int i = 0; i < EVENT_SLOTS; i++)
		shared->slots[i].next = (i + 1 < EVENT_SLOTS) ? i + 1 : EVENT_NONE;
	shared->free = 0;
	shared->waiting = EVENT_NONE;
	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
		shared->queues[i].head = shared->queues[i].tail = EVENT_NONE;
}

bool
dlock_events_in_use(void)
{
	return pg_atomic_read_u32(&shared->in_use) != 0;
}

static uint64
next_seq(void)
{
	return pg_atomic_add_fetch_u64(&shared->seq, 1);
}

uint64
dlock_event_granted(DLockEntry *lease, bool on, int pid)
{
	if (!on)
		return 0;
	if (pg_atomic_read_u32(&shared->in_use) == 0)
		pg_atomic_write_u32(&shared->in_use, 1);
	lease->ev.on = true;
	lease->ev.pid = pid;
	lease->ev.seq = next_seq();
	return lease->ev.seq;
}

/* 'ttl' until leases have other lifetimes */
const char *
dlock_event_lifetime(const DLockEntry *lease)
{
	return dlock_lifetime_name((DLockLifetime) lease->lifetime);
}

/*
 * The queue of a database, or NULL; with create, an unused or idle one
 * becomes its.  The caller holds the buffer's lock.
 */
static EventQueue *
queue_of(Oid dbid, bool create)
{
	EventQueue *idle = NULL;

	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
	{
		EventQueue *q = &shared->queues[i];

		if (q->dbid == dbid)
			return q;
		if (idle == NULL && q->head == EVENT_NONE && q->lost == 0 &&
			q->sender == NULL)
			idle = q;
	}
	if (!create || idle == NULL)
		return NULL;
	idle->dbid = dbid;
	return idle;
}

/* A free slot, or NULL; the caller holds the buffer's lock. */
static PendingEvent *
take_slot(void)
{
	PendingEvent *ev;

	if (shared->free == EVENT_NONE)
		return NULL;
	ev = &shared->slots[shared->free];
	shared->free = ev->next;
	shared->used++;
	return ev;
}

/* Gives back the slots of a list, first to last, all linked. */
static void
free_slots(int32 first, int32 last, int n)
{
	if (first == EVENT_NONE)
		return;
	shared->slots[last].next = shared->free;
	shared->free = first;
	shared->used -= n;
}

/*
 * Who is to send q's new event: its sender, or the watcher that starts one.
 * A sender pausing after a batch (worker.c) is woken only when the buffer is
 * a quarter full: it gathers the next batch without a wake-up per event.
 */
static void
wake_sender(EventQueue *q)
{
	if (q->sender == NULL)
		wake_watcher = true;
	else if (!q->pacing || shared->used >= EVENT_SLOTS / 4)
		to_wake = q->sender;
}

/* Queues an event to send; the caller holds the buffer's lock. */
static void
enqueue(PendingEvent *ev)
{
	EventQueue *q = queue_of(ev->dbid, true);
	int32		i = ev - shared->slots;

	if (q == NULL)
	{
		/* no queue for it (as many databases with events as slots) */
		ev->next = EVENT_NONE;
		free_slots(i, i, 1);
		return;
	}
	ev->next = EVENT_NONE;
	if (q->tail == EVENT_NONE)
		q->head = i;
	else
		shared->slots[q->tail].next = i;
	q->tail = i;
	wake_sender(q);
}

/* An event that found no room; the caller holds the buffer's lock. */
static void
count_lost(Oid dbid)
{
	EventQueue *q = queue_of(dbid, true);

	if (q == NULL)
		return;
	q->lost++;
	wake_sender(q);
}

/* Wakes whoever must send what was just queued (after the buffer's lock). */
static void
wake(void)
{
	if (to_wake != NULL)
		SetLatch(to_wake);
	if (wake_watcher)
		dlock_wake_watcher();
	to_wake = NULL;
	wake_watcher = false;
}

/*
 * Records an end of lease (seq taken), queued at once or, while another
 * backend's grant of it has not committed, left to wait for that commit.
 * The caller holds the lease's partition lock.  Its events end here.
 */
static void
record_end(DLockEntry *lease, DLockEventKind kind)
{
	DLockEntry *head = dlock_head_of(lease);
	PendingEvent *ev;

	lease->ev.on = false;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	ev = take_slot();
	if (ev == NULL)
		count_lost(lease->key.dbid);
	else
	{
		ev->seq = next_seq();
		ev->token = lease->token;
		ev->dbid = lease->key.dbid;
		ev->grant_pid = lease->ev.seq != 0 ? lease->ev.pid : 0;
		ev->kind = (uint8) kind;
		ev->mode = lease->mode;
		strlcpy(ev->lifetime, dlock_event_lifetime(lease), sizeof(ev->lifetime));
		ev->name_len = head->key.len;
		memcpy(ev->name, head->key.name, head->key.len);
		ev->owner_len = lease->owner.len;
		memcpy(ev->owner, lease->owner.str, lease->owner.len);
		if (ev->grant_pid != 0)
		{
			ev->next = shared->waiting;
			shared->waiting = ev - shared->slots;
		}
		else
			enqueue(ev);
	}
	LWLockRelease(shared->lock);
	wake();
}

/*
 * An end noticed outside the commit that makes it (a release within a
 * minimum hold ends as a release, at the hold's end); a lease released
 * while pinned, or whose end was recorded, sends nothing more.
 */
static void
lease_ends(DLockEntry *lease, DLockEventKind kind)
{
	if (!lease->ev.on || lease->released)
		return;
	record_end(lease, kind);
}

void
dlock_event_expired(DLockEntry *lease)
{
	lease_ends(lease, lease->released_at != 0 ? DLOCK_EVENT_RELEASED :
			   DLOCK_EVENT_EXPIRED);
}

void
dlock_event_ended(DLockEntry *lease)
{
	lease_ends(lease, DLOCK_EVENT_ENDED);
}

void
dlock_event_granted_queued(DLockEntry *lease, bool on)
{
	if (!on)
		return;
	if (pg_atomic_read_u32(&shared->in_use) == 0)
		pg_atomic_write_u32(&shared->in_use, 1);
	/* no grant to wait for: recorded as an end is, then its events go on */
	lease->ev.seq = 0;
	lease->ev.pid = 0;
	record_end(lease, DLOCK_EVENT_GRANTED);
	lease->ev.on = true;
}

/*
 * Before recording n events: while the buffer is nearly full and this
 * database has a sender, waits (a bounded time, not interruptible: the
 * transaction has committed) for it to make room.
 */
void
dlock_events_commit_begin(int n)
{
	int			need = Min(n, EVENT_SLOTS / 4);
	Latch	   *sender = NULL;

	for (int waited = 0; waited < EVENT_ROOM_WAIT; waited++)
	{
		/* unlocked reads: a hint; recording finds out for sure */
		if (shared->used <= EVENT_SLOTS - need)
			return;
		if (sender == NULL)
		{
			LWLockAcquire(shared->lock, LW_SHARED);
			for (int i = 0; i < DLOCK_MAX_DATABASES && sender == NULL; i++)
			{
				if (shared->queues[i].dbid == MyDatabaseId)
					sender = shared->queues[i].sender;
			}
			LWLockRelease(shared->lock);
			if (sender == NULL)
				return;			/* none to wait for */
		}
		SetLatch(sender);
		pg_usleep(1000L);
	}
}

/*
 * A grant (of key, under hash) committed: its event is queued, then the
 * ends of its lease that waited for the commit, and its later ends no
 * longer wait.
 */
void
dlock_events_commit_grant(const DLockKey *key, uint32 hash,
						  const DLockOwner *owner, uint64 token, uint64 seq,
						  DLockMode mode, const char *lifetime)
{
	LWLock	   *lock = dlock_partition_lock(hash);
	DLockEntry *lease;
	PendingEvent *ev;
	int32	   *prev;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	ev = take_slot();
	if (ev == NULL)
		count_lost(key->dbid);
	else
	{
		ev->seq = seq;
		ev->token = token;
		ev->dbid = key->dbid;
		ev->grant_pid = 0;
		ev->kind = (uint8) DLOCK_EVENT_GRANTED;
		ev->mode = (uint8) mode;
		strlcpy(ev->lifetime, lifetime, sizeof(ev->lifetime));
		ev->name_len = key->len;
		memcpy(ev->name, key->name, key->len);
		ev->owner_len = owner->len;
		memcpy(ev->owner, owner->str, owner->len);
		enqueue(ev);
	}
	prev = &shared->waiting;
	while (*prev != EVENT_NONE)
	{
		PendingEvent *w = &shared->slots[*prev];

		if (w->grant_pid == MyProcPid && w->token == token &&
			w->dbid == key->dbid && w->name_len == key->len &&
			memcmp(w->name, key->name, key->len) == 0)
		{
			*prev = w->next;
			w->grant_pid = 0;
			enqueue(w);
		}
		else
			prev = &w->next;
	}
	LWLockRelease(shared->lock);
	lease = dlock_find_lease(key, hash, token);
	if (lease != NULL && lease->ev.pid == MyProcPid)
		lease->ev.seq = 0;
	LWLockRelease(lock);
	wake();
}

/*
 * A release or force (of key, under hash) committed, about to be applied:
 * the lease's end, if it still carries token and its end was not recorded.
 */
void
dlock_events_commit_end(const DLockKey *key, uint32 hash, uint64 token,
						bool forced)
{
	LWLock	   *lock = dlock_partition_lock(hash);
	DLockEntry *lease;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(key, hash, token);
	if (lease != NULL && lease->ev.on && !lease->released)
		record_end(lease, forced ? DLOCK_EVENT_FORCED : DLOCK_EVENT_RELEASED);
	LWLockRelease(lock);
}

/* Drops the waiting ends of grants by this backend (of token, if not 0). */
static void
drop_waiting(const DLockKey *key, uint64 token)
{
	int32	   *prev;

	if (shared->waiting == EVENT_NONE)
		return;					/* unlocked: only we add ours */
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	prev = &shared->waiting;
	while (*prev != EVENT_NONE)
	{
		int32		i = *prev;
		PendingEvent *w = &shared->slots[i];

		if (w->grant_pid == MyProcPid &&
			(key == NULL ||
			 (w->token == token && w->dbid == key->dbid &&
			  w->name_len == key->len &&
			  memcmp(w->name, key->name, key->len) == 0)))
		{
			*prev = w->next;
			free_slots(i, i, 1);
		}
		else
			prev = &w->next;
	}
	LWLockRelease(shared->lock);
}

/* Forgets the recorded ends of a grant a subtransaction took back. */
void
dlock_events_undone(const DLockKey *key, uint64 token)
{
	drop_waiting(key, token);
}

/* The transaction aborted: the ends of its grants are never sent. */
void
dlock_events_aborted(void)
{
	drop_waiting(NULL, 0);
}

/*
 * The sender of this database: registers its latch, or returns false if
 * its database has no queue to take.
 */
bool
dlock_events_sender_start(Latch *latch)
{
	EventQueue *q;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	q = queue_of(MyDatabaseId, true);
	if (q != NULL)
	{
		q->sender = latch;
		q->pacing = false;
	}
	LWLockRelease(shared->lock);
	return q != NULL;
}

/* The sender, idle: stops (true) unless an event came meanwhile. */
bool
dlock_events_sender_stop(void)
{
	EventQueue *q;
	bool		stop;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	q = queue_of(MyDatabaseId, false);
	stop = (q == NULL || (q->head == EVENT_NONE && q->lost == 0));
	if (stop && q != NULL && q->sender == MyLatch)
		q->sender = NULL;
	LWLockRelease(shared->lock);
	return stop;
}

/*
 * The sender takes its database's queue whole (a list handed over: the
 * lock is held for a few stores).  Returns whether it took anything.
 */
bool
dlock_events_take(void)
{
	EventQueue *q;

	Assert(batch_head == EVENT_NONE && batch_lost == 0);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	q = queue_of(MyDatabaseId, false);
	if (q != NULL)
	{
		batch_head = q->head;
		batch_tail = q->tail;
		batch_lost = q->lost;
		q->head = q->tail = EVENT_NONE;
		q->lost = 0;
		/* it pauses after a batch, not after finding none */
		q->pacing = (batch_head != EVENT_NONE || batch_lost != 0);
	}
	LWLockRelease(shared->lock);
	batch_len = 0;
	for (int32 i = batch_head; i != EVENT_NONE; i = shared->slots[i].next)
		batch_len++;
	return batch_head != EVENT_NONE || batch_lost != 0;
}

static int
by_seq(const void *a, const void *b)
{
	const PendingEvent *x = *(PendingEvent *const *) a;
	const PendingEvent *y = *(PendingEvent *const *) b;

	return x->seq < y->seq ? -1 : (x->seq > y->seq ? 1 : 0);
}

static const char *const kind_names[] = {
	"granted", "released", "expired", "forced", "ended"
};

/* One event's payload */
static void
payload(StringInfo buf, const PendingEvent *ev)
{
	char		str[Max(DLOCK_NAME_MAX, DLOCK_OWNER_MAX) + 1];

	appendStringInfo(buf, "{\"event\": \"%s\", \"name\": ", kind_names[ev->kind]);
	memcpy(str, ev->name, ev->name_len);
	str[ev->name_len] = '\0';
	escape_json(buf, str);
	appendStringInfoString(buf, ", \"owner\": ");
	memcpy(str, ev->owner, ev->owner_len);
	str[ev->owner_len] = '\0';
	escape_json(buf, str);
	appendStringInfo(buf, ", \"token\": " UINT64_FORMAT ", \"mode\": \"%s\", \"lifetime\": \"%s\", \"seq\": " UINT64_FORMAT "}",
					 ev->token, dlock_mode_name((DLockMode) ev->mode),
					 ev->lifetime, ev->seq);
	Assert(buf->len <= EVENT_JSON_MAX);
}

/*
 * In the sender's transaction: queues the batch it took with NOTIFY, the
 * events in seq order, then the "lost" count, and gives their slots back
 * (NOTIFY copied them).  The count comes last: what it counts found no room
 * after the batch's events were recorded (or is an older failed batch), so
 * a listener that re-reads dlock_locks on it reads a state at least as new
 * as every event sent before it, the lost ones included.
 */
void
dlock_events_notify(void)
{
	PendingEvent **evs;
	StringInfoData buf;
	int			n = 0;

	initStringInfo(&buf);
	evs = palloc(sizeof(PendingEvent *) * Max(batch_len, 1));
	/* no backend of the database has run LISTEN dlock: none would hear */
	if (!dlock_listened(MyDatabaseId))
		batch_lost = 0;
	else
	{
		for (int32 i = batch_head; i != EVENT_NONE; i = shared->slots[i].next)
			evs[n++] = &shared->slots[i];
	}
	qsort(evs, n, sizeof(PendingEvent *), by_seq);
	for (int i = 0; i < n; i++)
	{
		resetStringInfo(&buf);
		payload(&buf, evs[i]);
		Async_Notify("dlock", buf.data);
	}
	if (batch_lost != 0)
	{
		resetStringInfo(&buf);
		appendStringInfo(&buf, "{\"event\": \"lost\", \"count\": %u}", batch_lost);
		Async_Notify("dlock", buf.data);
	}
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	free_slots(batch_head, batch_tail, batch_len);
	LWLockRelease(shared->lock);
	batch_head = batch_tail = EVENT_NONE;
	pfree(evs);
	pfree(buf.data);
}

/* After the sender's transaction committed: its batch was sent. */
void
dlock_events_sent(void)
{
	batch_head = batch_tail = EVENT_NONE;
	batch_len = 0;
	batch_lost = 0;
}

/*
 * The sender exits, whatever ends it: a batch taken and not sent is counted
 * as lost, for the next sender to say so, and it is no longer the sender.
 */
void
dlock_events_sender_exit(void)
{
	EventQueue *q;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	free_slots(batch_head, batch_tail, batch_len);
	q = queue_of(MyDatabaseId, batch_len != 0 || batch_lost != 0);
	if (q != NULL)
	{
		q->lost += batch_lost + batch_len;
		if (q->sender == MyLatch)
			q->sender = NULL;
	}
	LWLockRelease(shared->lock);
	dlock_events_sent();
	/* a sender stopped: the worker hears of it and starts one if need be */
}

/*
 * The databases with events (or a lost count) to send and no sender, for
 * the worker to start one there.
 */
int
dlock_events_databases(Oid *dbids, int max)
{
	int			n = 0;

	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < DLOCK_MAX_DATABASES && n < max; i++)
	{
		EventQueue *q = &shared->queues[i];

		if ((q->head != EVENT_NONE || q->lost != 0) && q->sender == NULL)
			dbids[n++] = q->dbid;
	}
	LWLockRelease(shared->lock);
	return n;
}

/* A database's leases were dropped (dlock_db_purge): so are its events. */
void
dlock_events_forget(Oid dbid)
{
	EventQueue *q;
	int32	   *prev;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	q = queue_of(dbid, false);
	if (q != NULL)
	{
		int			n = 0;

		for (int32 i = q->head; i != EVENT_NONE; i = shared->slots[i].next)
			n++;
		free_slots(q->head, q->tail, n);
		q->head = q->tail = EVENT_NONE;
		q->lost = 0;
	}
	prev = &shared->waiting;
	while (*prev != EVENT_NONE)
	{
		int32		i = *prev;
		PendingEvent *w = &shared->slots[i];

		if (w->dbid == dbid)
		{
			*prev = w->next;
			free_slots(i, i, 1);
		}
		else
			prev = &w->next;
	}
	LWLockRelease(shared->lock);
}
