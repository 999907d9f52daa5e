/*
 * events.c
 *		Change events: NOTIFY dlock, '{"event": ..., "name": ..., ...}'.
 *
 * A lease granted while dlock.events is on in the session that asked for it
 * sends "granted", then one end: "released", "forced", "expired" or "ended".
 * Events go through PostgreSQL's NOTIFY (Async_Notify), so they are sent
 * when the transaction that queues them commits and never after a rollback.
 *
 * Order.  Each event takes seq, from one counter, under the name's partition
 * lock when its change takes effect: a grant when it is made, an expiry or
 * a lifetime end when the lease leaves the engine, a release or a force at
 * the start of its transaction's commit (a claim: the lease is its to end;
 * an expiry meanwhile is not sent unless that commit fails).  On a name,
 * seq order is the order of the changes.  Every transaction that sends
 * events first takes the lock PostgreSQL's NOTIFY takes to queue at commit,
 * and keeps it until it has committed, so senders queue one at a time.
 *
 * Who sends what:
 *	- a grant: its transaction, at commit (a waiter's grant: the waiter's);
 *	- a release, a force: the transaction that makes it, at commit;
 *	- an expiry or a lifetime end: whoever notices it records it here, in
 *	  shared memory; the next transaction of that database that sends
 *	  events sends it first (so an expired lease's end goes before the grant
 *	  that took its name over), or else a sender the worker starts in that
 *	  database.
 * An end of a lease whose grant has not committed yet waits here for that
 * commit, which sends it after the grant; a rollback drops both.  So an
 * event never arrives for a grant that was rolled back, and each lease's
 * events arrive in seq order; events of different leases on one name may
 * arrive out of seq order only around a grant whose transaction commits
 * after later changes of the name (docs/semantics.md, "Events").
 *
 * Events recorded here wait in a buffer of EVENT_SLOTS; when it is full,
 * what does not fit is counted and sent as one "lost" event instead.
 *
 * Locking: the buffer under its own LWLock, taken after a partition lock,
 * never before one; the NOTIFY lock (heavyweight) before both.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lmgr.h"
#include "storage/shmem.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "events.h"

#define EVENT_SLOTS		1024

/*
 * The longest payload: escaping turns a byte into 6 characters at most
 * (\u00XX), and the rest is the keys, two quoted words and two numbers.
 * NOTIFY takes up to BLCKSZ - NAMEDATALEN - 128 bytes (8000).
 */
#define EVENT_JSON_FIXED	192
#define EVENT_JSON_MAX		(EVENT_JSON_FIXED + 6 * (DLOCK_NAME_MAX + DLOCK_OWNER_MAX))
StaticAssertDecl(EVENT_JSON_MAX < BLCKSZ - NAMEDATALEN - 128,
				 "a dlock event must fit in a NOTIFY payload");

/* flags of a recorded event */
#define EV_DURING_CLAIM	0x01	/* an expiry while claim_pid's commit ends the
								 * lease: dropped if that commits */
#define EV_CLAIMED		0x02	/* claim_pid's own release or force: dropped
								 * if that aborts */

typedef struct PendingEvent
{
	uint64		seq;			/* 0: a free slot */
	uint64		token;
	Oid			dbid;
	int32		grant_pid;		/* waits for that backend's grant to commit */
	int32		claim_pid;		/* waits for that backend's commit */
	int32		taken_by;		/* queued by that process's transaction */
	uint8		kind;
	uint8		mode;
	uint8		flags;
	uint16		name_len;
	uint16		owner_len;
	char		lifetime[16];
	char		name[DLOCK_NAME_MAX];
	char		owner[DLOCK_OWNER_MAX];
} PendingEvent;

typedef struct EventShared
{
	pg_atomic_uint64 seq;		/* the last seq taken */
	pg_atomic_uint32 in_use;
	LWLock	   *lock;			/* the rest */
	int			used;			/* slots with an event */
	Oid			lost_db[DLOCK_MAX_DATABASES];	/* by database slot */
	uint32		lost[DLOCK_MAX_DATABASES];
	PendingEvent slots[EVENT_SLOTS];
} EventShared;

static EventShared *shared = NULL;

/* An event this transaction sends */
typedef struct LocalEvent
{
	uint64		seq;
	uint64		token;
	uint8		kind;
	uint8		mode;
	uint16		name_len;
	uint16		owner_len;
	char		lifetime[16];
	char		name[DLOCK_NAME_MAX];
	char		owner[DLOCK_OWNER_MAX];
} LocalEvent;

/* A lease this transaction granted or claimed */
typedef struct LocalLease
{
	DLockKey	key;
	uint32		hash;
	uint64		token;
} LocalLease;

/* this transaction's, in a context of their own (the worker's sender too) */
static MemoryContext cxt = NULL;
static List *to_send = NIL;		/* LocalEvent */
static List *granted = NIL;		/* LocalLease */
static List *claimed = NIL;		/* LocalLease */
static uint32 lost = 0;			/* "lost" events taken for this database */
static bool locked = false;		/* holds the NOTIFY lock */

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

/* The caller holds the buffer's lock. */
static PendingEvent *
free_slot(void)
{
	if (shared->used == EVENT_SLOTS)
		return NULL;
	for (int i = 0; i < EVENT_SLOTS; i++)
	{
		if (shared->slots[i].seq == 0)
		{
			shared->used++;
			return &shared->slots[i];
		}
	}
	return NULL;
}

static void
drop_slot(PendingEvent *ev)
{
	ev->seq = 0;
	shared->used--;
}

/*
 * Records an event of lease for a later sender; the caller holds the
 * lease's partition lock.  A lease whose grant is still uncommitted (by
 * another backend than claim_pid) has it wait for that commit.
 */
static void
record(DLockEntry *lease, DLockEventKind kind, uint64 seq, int claim_pid,
	   uint8 flags)
{
	DLockEntry *head = dlock_head_of(lease);
	PendingEvent *ev;
	bool		ready;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	ev = free_slot();
	if (ev == NULL)
	{
		shared->lost_db[lease->db] = lease->key.dbid;
		shared->lost[lease->db]++;
		LWLockRelease(shared->lock);
		dlock_wake_watcher();
		return;
	}
	ev->seq = seq;
	ev->token = lease->token;
	ev->dbid = lease->key.dbid;
	ev->grant_pid = lease->ev.seq != 0 ? lease->ev.pid : 0;
	ev->claim_pid = claim_pid;
	ev->taken_by = 0;
	ev->kind = (uint8) kind;
	ev->mode = lease->mode;
	ev->flags = flags;
	strlcpy(ev->lifetime, dlock_event_lifetime(lease), sizeof(ev->lifetime));
	ev->name_len = head->key.len;
	memcpy(ev->name, head->key.name, head->key.len);
	ev->owner_len = lease->owner.len;
	memcpy(ev->owner, lease->owner.str, lease->owner.len);
	ready = (ev->grant_pid == 0 && ev->claim_pid == 0);
	LWLockRelease(shared->lock);
	if (ready)
		dlock_wake_watcher();
}

/*
 * An end noticed outside any commit that sends it.  A lease being released
 * or forced by a commit under way (claimed) has that end's event instead,
 * unless the commit fails; a lease released while pinned sent its end
 * already.
 */
static void
lease_ends(DLockEntry *lease, DLockEventKind kind)
{
	if (!lease->ev.on || lease->released)
		return;
	if (lease->ev.claim != 0)
		record(lease, kind, next_seq(), lease->ev.claim, EV_DURING_CLAIM);
	else
		record(lease, kind, next_seq(), 0, 0);
}

/* a lease released within its minimum hold ends as a release, at its end */
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

/*
 * Takes the lock NOTIFY takes at commit to queue its notifications, before
 * anything is read for sending: the events of this transaction are queued,
 * and it commits, before any other sender looks.
 */
static void
begin(void)
{
	if (cxt == NULL)
		cxt = AllocSetContextCreate(TopMemoryContext, "dlock events",
									ALLOCSET_SMALL_SIZES);
	if (locked)
		return;
	LockSharedObject(DatabaseRelationId, InvalidOid, 0, AccessExclusiveLock);
	locked = true;
}

static LocalEvent *
local_event(uint64 seq, uint64 token, DLockEventKind kind, uint8 mode,
			const char *lifetime, const char *name, int name_len,
			const char *owner, int owner_len)
{
	LocalEvent *ev = MemoryContextAlloc(cxt, sizeof(LocalEvent));

	ev->seq = seq;
	strlcpy(ev->lifetime, lifetime, sizeof(ev->lifetime));
	ev->token = token;
	ev->kind = (uint8) kind;
	ev->mode = mode;
	ev->name_len = name_len;
	memcpy(ev->name, name, name_len);
	ev->owner_len = owner_len;
	memcpy(ev->owner, owner, owner_len);
	return ev;
}

static LocalLease *
local_lease(const DLockKey *key, uint32 hash, uint64 token)
{
	LocalLease *l = MemoryContextAlloc(cxt, sizeof(LocalLease));

	memcpy(&l->key, key, sizeof(DLockKey));
	l->hash = hash;
	l->token = token;
	return l;
}

void
dlock_events_add_grant(const DLockKey *key, const DLockOwner *owner,
					   uint64 token, uint64 seq, DLockMode mode,
					   const char *lifetime)
{
	MemoryContext old;

	begin();
	old = MemoryContextSwitchTo(cxt);
	to_send = lappend(to_send, local_event(seq, token, DLOCK_EVENT_GRANTED, mode,
										   lifetime, key->name, key->len,
										   owner->str, owner->len));
	granted = lappend(granted, local_lease(key, dlock_key_hash(key), token));
	MemoryContextSwitchTo(old);
}

/*
 * A release or force this transaction applies at commit: the lease, if it
 * still carries token, is claimed and its end takes its seq now.  The end
 * of a lease whose grant another backend has not committed yet waits for
 * that commit.
 */
void
dlock_events_add_end(const DLockKey *key, uint32 hash, uint64 token, bool forced)
{
	LWLock	   *lock = dlock_partition_lock(hash);
	DLockEventKind kind = forced ? DLOCK_EVENT_FORCED : DLOCK_EVENT_RELEASED;
	LocalEvent *ev;
	LocalLease *l;
	DLockEntry *lease;
	MemoryContext old;
	bool		on;

	/* a lease without events needs no NOTIFY lock, taken before any LWLock */
	LWLockAcquire(lock, LW_SHARED);
	lease = dlock_find_lease(key, hash, token);
	on = (lease != NULL && lease->ev.on);
	LWLockRelease(lock);
	if (!on)
		return;
	begin();
	old = MemoryContextSwitchTo(cxt);
	/* allocated first: nothing allocates under the lock */
	ev = local_event(0, token, kind, 0, "", key->name, key->len, "", 0);
	l = local_lease(key, hash, token);
	MemoryContextSwitchTo(old);

	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(key, hash, token);
	if (lease == NULL || !lease->ev.on || lease->released || lease->ev.claim != 0)
	{
		/* ended already, with its own event if any */
		LWLockRelease(lock);
		pfree(ev);
		pfree(l);
		return;
	}
	lease->ev.claim = MyProcPid;
	if (lease->ev.seq != 0 && lease->ev.pid != MyProcPid)
	{
		record(lease, kind, next_seq(), MyProcPid, EV_CLAIMED);
		pfree(ev);
	}
	else
	{
		ev->seq = next_seq();
		ev->mode = lease->mode;
		strlcpy(ev->lifetime, dlock_event_lifetime(lease), sizeof(ev->lifetime));
		ev->owner_len = lease->owner.len;
		memcpy(ev->owner, lease->owner.str, lease->owner.len);
		old = MemoryContextSwitchTo(cxt);
		to_send = lappend(to_send, ev);
		MemoryContextSwitchTo(old);
	}
	LWLockRelease(lock);
	old = MemoryContextSwitchTo(cxt);
	claimed = lappend(claimed, l);
	MemoryContextSwitchTo(old);
}

static bool
any_lost(void)
{
	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
	{
		if (shared->lost[i] != 0)
			return true;
	}
	return false;
}

/*
 * Takes the recorded events this transaction may send: those of its
 * database that wait for nothing, and the ends of its own grants.
 */
static void
take_recorded(void)
{
	LocalEvent *taken;
	int			ntaken = 0;

	/* a read without the lock: anything recorded later is a later sender's */
	if (shared->used == 0 && !any_lost())
		return;
	taken = MemoryContextAlloc(cxt, sizeof(LocalEvent) * EVENT_SLOTS);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
	{
		if (shared->lost[i] != 0 && shared->lost_db[i] == MyDatabaseId)
		{
			lost += shared->lost[i];
			shared->lost[i] = 0;
		}
	}
	for (int i = 0; i < EVENT_SLOTS && shared->used > 0; i++)
	{
		PendingEvent *ev = &shared->slots[i];
		LocalEvent *l = &taken[ntaken];

		if (ev->seq == 0 || ev->dbid != MyDatabaseId || ev->taken_by != 0 ||
			ev->claim_pid != 0 ||
			(ev->grant_pid != 0 && ev->grant_pid != MyProcPid))
			continue;
		ev->taken_by = MyProcPid;
		l->seq = ev->seq;
		l->token = ev->token;
		l->kind = ev->kind;
		l->mode = ev->mode;
		memcpy(l->lifetime, ev->lifetime, sizeof(l->lifetime));
		l->name_len = ev->name_len;
		memcpy(l->name, ev->name, ev->name_len);
		l->owner_len = ev->owner_len;
		memcpy(l->owner, ev->owner, ev->owner_len);
		ntaken++;
	}
	LWLockRelease(shared->lock);
	for (int i = 0; i < ntaken; i++)
		to_send = lappend(to_send, &taken[i]);
}

static int
by_seq(const ListCell *a, const ListCell *b)
{
	const LocalEvent *x = lfirst(a);
	const LocalEvent *y = lfirst(b);

	return x->seq < y->seq ? -1 : (x->seq > y->seq ? 1 : 0);
}

static const char *const kind_names[] = {
	"granted", "released", "expired", "forced", "ended"
};

/* One event's payload */
static void
payload(StringInfo buf, const LocalEvent *ev)
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
 * Queues this transaction's events, and the recorded ones it may send,
 * with NOTIFY, in seq order.  The sender of the worker calls it in a
 * transaction of its own, with no events of its own.
 */
void
dlock_events_send(void)
{
	MemoryContext old;
	StringInfoData buf;
	ListCell   *lc;

	/* nothing of ours, nothing recorded: no need to wait for other senders */
	if (!locked && shared->used == 0 && !any_lost())
		return;
	begin();
	old = MemoryContextSwitchTo(cxt);
	take_recorded();
	list_sort(to_send, by_seq);
	initStringInfo(&buf);
	if (lost != 0)
	{
		appendStringInfo(&buf, "{\"event\": \"lost\", \"count\": %u}", lost);
		Async_Notify("dlock", buf.data);
	}
	foreach(lc, to_send)
	{
		resetStringInfo(&buf);
		payload(&buf, lfirst(lc));
		Async_Notify("dlock", buf.data);
	}
	MemoryContextSwitchTo(old);
}

/* Forgets the recorded ends of a grant a subtransaction took back. */
void
dlock_events_undone(const DLockKey *key, uint64 token)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < EVENT_SLOTS && shared->used > 0; i++)
	{
		PendingEvent *ev = &shared->slots[i];

		if (ev->seq != 0 && ev->grant_pid == MyProcPid && ev->token == token &&
			ev->dbid == key->dbid && ev->name_len == key->len &&
			memcmp(ev->name, key->name, key->len) == 0)
			drop_slot(ev);
	}
	LWLockRelease(shared->lock);
}

/*
 * After the commit: the grants it sent are announced (their ends no longer
 * wait), what it sent is forgotten, and what waited for it is dropped or
 * becomes ready.  After an abort: what it took goes back, what waited for
 * its grants is dropped, an end it claimed is released again.
 */
void
dlock_events_end(bool commit)
{
	ListCell   *lc;
	bool		ready = false;

	foreach(lc, commit ? granted : claimed)
	{
		LocalLease *l = lfirst(lc);
		LWLock	   *lock = dlock_partition_lock(l->hash);
		DLockEntry *lease;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		lease = dlock_find_lease(&l->key, l->hash, l->token);
		if (lease != NULL && commit && lease->ev.pid == MyProcPid)
			lease->ev.seq = 0;
		if (lease != NULL && !commit && lease->ev.claim == MyProcPid)
			lease->ev.claim = 0;
		LWLockRelease(lock);
	}
	if (shared != NULL && (shared->used > 0 || lost != 0))
	{
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		for (int i = 0; i < EVENT_SLOTS && shared->used > 0; i++)
		{
			PendingEvent *ev = &shared->slots[i];
			bool		waits = false;

			if (ev->seq == 0)
				continue;
			if (ev->taken_by == MyProcPid)
			{
				if (commit)
				{
					drop_slot(ev);
					continue;
				}
				ev->taken_by = 0;
				waits = true;
			}
			if (ev->claim_pid == MyProcPid)
			{
				if (commit == ((ev->flags & EV_DURING_CLAIM) != 0))
				{
					drop_slot(ev);
					continue;
				}
				ev->claim_pid = 0;
				ev->flags = 0;
				waits = true;
			}
			if (ev->grant_pid == MyProcPid)
			{
				if (!commit)
				{
					drop_slot(ev);
					continue;
				}
				ev->grant_pid = 0;
				waits = true;
			}
			ready |= (waits && ev->grant_pid == 0 && ev->claim_pid == 0 &&
					  ev->taken_by == 0);
		}
		if (!commit && lost != 0)
		{
			for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
			{
				if (shared->lost_db[i] == MyDatabaseId)
				{
					shared->lost[i] += lost;
					ready = true;
					break;
				}
			}
		}
		LWLockRelease(shared->lock);
	}
	if (ready)
		dlock_wake_watcher();
	to_send = NIL;
	granted = NIL;
	claimed = NIL;
	lost = 0;
	locked = false;				/* released with the transaction's locks */
	if (cxt != NULL)
		MemoryContextReset(cxt);
}

/* The databases with events that wait for nothing but a sender. */
int
dlock_events_databases(Oid *dbids, int max)
{
	int			n = 0;

	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < DLOCK_MAX_DATABASES && n < max; i++)
	{
		if (shared->lost[i] != 0)
			dbids[n++] = shared->lost_db[i];
	}
	for (int i = 0; i < EVENT_SLOTS && n < max && shared->used > 0; i++)
	{
		PendingEvent *ev = &shared->slots[i];
		bool		known = false;

		if (ev->seq == 0 || ev->taken_by != 0 || ev->claim_pid != 0 ||
			ev->grant_pid != 0)
			continue;
		for (int j = 0; j < n; j++)
			known |= (dbids[j] == ev->dbid);
		if (!known)
			dbids[n++] = ev->dbid;
	}
	LWLockRelease(shared->lock);
	return n;
}

/* A database's leases were dropped (dlock_db_purge): so are its events. */
void
dlock_events_forget(Oid dbid)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < EVENT_SLOTS && shared->used > 0; i++)
	{
		if (shared->slots[i].seq != 0 && shared->slots[i].dbid == dbid)
			drop_slot(&shared->slots[i]);
	}
	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
	{
		if (shared->lost_db[i] == dbid)
			shared->lost[i] = 0;
	}
	LWLockRelease(shared->lock);
}
