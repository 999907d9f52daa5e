/*
 * engine.c
 *		The shared-memory lease table.
 *
 * A dynahash partitioned like the heavyweight lock manager's: the low bits of
 * a key's hash choose one of DLOCK_PARTITIONS LWLocks, so calls on different
 * names rarely meet on one lock.  Entry count is capped by dlock.max_locks,
 * because a shared dynahash may borrow spare shared memory beyond its
 * nominal size, and each database's by dlock.max_locks_per_database: both
 * with credits a partition takes in batches (credits.c), so that no shared
 * count is written by every entry made or removed.
 *
 * The entry credits are credits.c's, what it counts for dlock_stats is
 * counters.c's, the process it wakes when a partition's earliest expiry
 * moves is watch.c's, and a lease's key and its hash are keys.c's: all four
 * below it.
 */
#include "postgres.h"

#include <time.h>

#include "access/transam.h"
#include "common/int.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "engine.h"
#include "settings.h"
#include "tokens.h"

/*
 * A partition's own state, in cache lines of its own: grants and releases
 * in different partitions write no line in common.  Written under the
 * partition's lock.
 */
typedef struct DLockPartition
{
	/* its held, unpinned leases by expiry, earliest first */
	pairingheap heap pg_attribute_aligned(PG_CACHE_LINE_SIZE);
} DLockPartition;

typedef struct DLockShared
{
	/*
	 * per database: rows that ended leases left for the sweeper, counted
	 * since the start (wrapping), and that count as a sweep that committed
	 * having deleted all it saw last read it; read by every new head, so kept
	 * off the lines the credit counts write (credits.c's)
	 */
	pg_atomic_uint32 db_dead_rows[DLOCK_MAX_DATABASES] pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	pg_atomic_uint32 db_dead_swept[DLOCK_MAX_DATABASES];
	DLockPartition parts[DLOCK_PARTITIONS];
} DLockShared;


static DLockShared *shared = NULL;

/*
 * The DLOCK_PARTITIONS partition locks, this process's pointer: every call
 * reads it, so it is not kept in a line the entry counts write.
 */
static LWLockPadded *partition_locks = NULL;
static HTAB *lock_hash = NULL;

static int
expiry_cmp(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const DLockEntry *ea = pairingheap_const_container(DLockEntry, heap_node, a);
	const DLockEntry *eb = pairingheap_const_container(DLockEntry, heap_node, b);

	/* pairingheap keeps the largest first: invert for earliest first */
	if (ea->expires != eb->expires)
		return ea->expires < eb->expires ? 1 : -1;
	return 0;
}

static uint32
key_hash_fn(const void *key, Size keysize)
{
	return dlock_key_hash((const DLockKey *) key);
}

static int
key_match_fn(const void *a, const void *b, Size keysize)
{
	const DLockKey *ka = a;
	const DLockKey *kb = b;

	if (ka->token != kb->token || ka->dbid != kb->dbid || ka->len != kb->len)
		return 1;
	return memcmp(ka->name, kb->name, ka->len);
}

/*
 * A partition's expiry heap, for a caller holding the partition's lock
 * exclusively (or only reading it).  The compare function's address is this
 * process's: stored on each use, as another process (EXEC_BACKEND) may have
 * the library at another address.
 */
static pairingheap *
partition_heap(int partition)
{
	pairingheap *heap = &shared->parts[partition].heap;

	heap->ph_compare = expiry_cmp;
	return heap;
}

/* this backend's database slot (dbslots.c's), whose entries it counts */
static int	my_db = -1;

void
dlock_engine_set_db(int db)
{
	my_db = db;
}

/*
 * Rows of ended leases of database slot db: how many are left to sweep, and
 * forgetting them (the table went).
 */
uint32
dlock_dead_rows(int db)
{
	return pg_atomic_read_u32(&shared->db_dead_rows[db]) -
		pg_atomic_read_u32(&shared->db_dead_swept[db]);
}

void
dlock_dead_rows_add(int db, uint32 n)
{
	pg_atomic_fetch_add_u32(&shared->db_dead_rows[db], n);
}

void
dlock_dead_rows_clear(int db)
{
	dlock_dead_rows_swept(db, dlock_dead_rows_mark(db));
}

/*
 * A sweep reads the mark before it reads the table, and once it committed
 * having deleted every ended row it saw, passes it to dlock_dead_rows_swept:
 * rows left after the mark stay to sweep.  Concurrent sweeps only move the
 * swept mark forward.
 */
uint32
dlock_dead_rows_mark(int db)
{
	return pg_atomic_read_u32(&shared->db_dead_rows[db]);
}

void
dlock_dead_rows_swept(int db, uint32 mark)
{
	uint32		cur = pg_atomic_read_u32(&shared->db_dead_swept[db]);

	while ((int32) (mark - cur) > 0 &&
		   !pg_atomic_compare_exchange_u32(&shared->db_dead_swept[db], &cur, mark))
		;
}

/* The engine's shared memory: its state and the lease hash */
Size
dlock_engine_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(DLockShared)),
					hash_estimate_size(dlock_max_locks, sizeof(DLockEntry)));
}

/*
 * Every process that attaches; the caller holds AddinShmemInitLock.  The
 * first is the postmaster, at start and after every crash restart, so the
 * table always starts empty: leases come back from the durable table.
 * locks: the partition locks.
 */
void
dlock_engine_shmem_init(LWLockPadded *locks)
{
	bool		found;
	HASHCTL		info;

	/*
	 * Every attach sets this process's pointers into the segment (a backend
	 * of an EXEC_BACKEND build attaches to a segment made by the postmaster);
	 * only the first one initializes it.
	 */
	shared = ShmemInitStruct("dlock", MAXALIGN(sizeof(DLockShared)), &found);
	partition_locks = locks;
	if (!found)
	{
		for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
		{
			pg_atomic_init_u32(&shared->db_dead_rows[i], 0);
			pg_atomic_init_u32(&shared->db_dead_swept[i], 0);
		}
		for (int i = 0; i < DLOCK_PARTITIONS; i++)
		{
			DLockPartition *part = &shared->parts[i];

			part->heap.ph_compare = expiry_cmp;
			part->heap.ph_arg = NULL;
			part->heap.ph_root = NULL;
		}
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(DLockKey);
	info.entrysize = sizeof(DLockEntry);
	info.hash = key_hash_fn;
	info.match = key_match_fn;
	info.num_partitions = DLOCK_PARTITIONS;

	/*
	 * Fixed size: the leases of one name share a free list (the low bits of
	 * their hashes agree), and a short list must borrow from the others, not
	 * from the server's spare shared memory.  The entry credits keep the
	 * total within what is preallocated.
	 */
	lock_hash = ShmemInitHash("dlock leases", dlock_max_locks, dlock_max_locks,
							  &info,
							  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_PARTITION |
							  HASH_FIXED_SIZE);
}

bool
dlock_shmem_ready(void)
{
	return shared != NULL;
}

/* Lease expiry runs on this clock, which wall-clock steps do not move. */
int64
dlock_mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * USECS_PER_SEC + ts.tv_nsec / 1000;
}

/* Saturates at 'infinity' for times past the timestamp range. */
TimestampTz
dlock_mono_to_wall(int64 mono, int64 mono_now, TimestampTz wall_now)
{
	TimestampTz result;

	if (pg_add_s64_overflow(wall_now, mono - mono_now, &result) ||
		!IS_VALID_TIMESTAMP(result))
		TIMESTAMP_NOEND(result);
	return result;
}

LWLock *
dlock_partition_lock(uint32 hash)
{
	return &partition_locks[hash % DLOCK_PARTITIONS].lock;
}

/* Always in partition order, so two scanners cannot deadlock. */
void
dlock_lock_all_partitions(LWLockMode mode)
{
	for (int i = 0; i < DLOCK_PARTITIONS; i++)
		LWLockAcquire(&partition_locks[i].lock, mode);
}

void
dlock_unlock_all_partitions(void)
{
	for (int i = DLOCK_PARTITIONS - 1; i >= 0; i--)
		LWLockRelease(&partition_locks[i].lock);
}

DLockEntry *
dlock_find(const DLockKey *key, uint32 hash)
{
	return hash_search_with_hash_value(lock_hash, key, hash, HASH_FIND, NULL);
}

/*
 * Counts one more entry of the database in slot db, in the partition of
 * hash (credits.c).  False when over.  The caller holds the partition's lock
 * exclusively.
 */
static bool
reserve(uint32 hash, int db, bool share)
{
	Assert(LWLockHeldByMeInMode(&partition_locks[hash % DLOCK_PARTITIONS].lock,
								LW_EXCLUSIVE));
	return dlock_credit_take(hash % DLOCK_PARTITIONS, db, share);
}

/* Gives back the credit of an entry of database slot db, hash's partition. */
static void
unreserve(uint32 hash, int db)
{
	Assert(LWLockHeldByMeInMode(&partition_locks[hash % DLOCK_PARTITIONS].lock,
								LW_EXCLUSIVE));
	dlock_credit_give(hash % DLOCK_PARTITIONS, db);
}

/* Counts an entry for a lease of head's name to come; false when full. */
bool
dlock_reserve(const DLockEntry *head)
{
	return reserve(head->hash, head->db, true);
}

void
dlock_unreserve(const DLockEntry *head)
{
	unreserve(head->hash, head->db);
}

/*
 * A new entry: no lease, no waiters.  Needs a reservation, counted for the
 * database in slot db.
 */
static DLockEntry *
create_entry(const DLockKey *key, uint32 hash, DLockEntry *head, int db)
{
	DLockEntry *entry;
	bool		found;

	/* the reservation keeps the count within the preallocated entries */
	entry = hash_search_with_hash_value(lock_hash, key, hash, HASH_ENTER_NULL, &found);
	if (entry == NULL)
		return NULL;
	Assert(!found);
	entry->hash = hash;
	entry->pins = 0;
	memset(entry->pinners, 0, sizeof(entry->pinners));
	entry->released = false;
	entry->token = 0;
	entry->expires = 0;
	entry->granted_at = 0;
	entry->version = 0;

	/*
	 * A new head does not know whether an entry of its name that was
	 * dropped left rows: it assumes so while any row of its database is
	 * left to sweep.
	 */
	entry->stale_rows = (head == NULL && dlock_dead_rows(db) != 0);
	if (head == NULL)
	{
		dlist_init(&entry->u.h.holders);
		dlist_init(&entry->u.h.waiters);
	}
	else
		entry->u.x.head = head;
	entry->roleid = InvalidOid;
	entry->holder_pid = 0;
	entry->holder_backend.procno = -1;
	entry->holder_backend.serial = 0;
	entry->lifetime = DLOCK_LIFETIME_TTL;
	entry->nwaiters = 0;
	entry->nleases = 0;
	entry->permits = 0;
	entry->in_heap = false;
	entry->durable = false;
	entry->deferred = false;
	SetInvalidVirtualTransactionId(entry->decider);
	entry->decider_releases = false;
	entry->mode = DLOCK_EXCLUSIVE;
	entry->clear_rows = false;
	entry->db = db;
	entry->owner.len = 0;
	memset(&entry->ev, 0, sizeof(entry->ev));
	entry->grant_xid = InvalidTransactionId;
	return entry;
}

/* A name's head is created by a backend of its database. */
static DLockEntry *
find_or_create(const DLockKey *key, uint32 hash, bool *found, bool share)
{
	DLockEntry *entry;
	int			db;

	Assert(key->token == 0 && key->dbid == MyDatabaseId);
	entry = hash_search_with_hash_value(lock_hash, key, hash, HASH_FIND, NULL);
	*found = (entry != NULL);
	if (entry != NULL)
		return entry;
	Assert(my_db >= 0);
	db = my_db;
	if (!reserve(hash, db, share))
		return NULL;
	entry = create_entry(key, hash, NULL, db);
	if (entry == NULL)
		unreserve(hash, db);
	return entry;
}

/*
 * The head entry of the name in key, created if needed.  Returns NULL when
 * the table, or the database's share of it, is full.  The caller holds the
 * partition lock exclusively.
 */
DLockEntry *
dlock_find_or_create(const DLockKey *key, uint32 hash, bool *found)
{
	return find_or_create(key, hash, found, true);
}

/*
 * The same for the rebuild, which is not held to the database's share: the
 * leases it restores were granted already, and a share lowered since must
 * not keep the database from loading.
 */
DLockEntry *
dlock_restore_head(const DLockKey *key, uint32 hash, bool *found)
{
	return find_or_create(key, hash, found, false);
}

/* The lease with token on the name of key (a head's key), or NULL. */
DLockEntry *
dlock_find_lease(const DLockKey *key, uint32 hash, uint64 token)
{
	DLockEntry *head = dlock_find(key, hash);
	DLockKey	lkey;

	if (head == NULL || token == 0)
		return NULL;
	if (head->token == token)
		return head;
	if (dlist_is_empty(&head->u.h.holders))
		return NULL;
	memcpy(&lkey, key, offsetof(DLockKey, name) + key->len);
	memset(lkey.name + key->len, 0, DLOCK_NAME_MAX - key->len);
	lkey.token = token;
	return dlock_find(&lkey, dlock_key_hash(&lkey));
}

DLockEntry *
dlock_next_lease(DLockEntry *head, dlist_mutable_iter *iter)
{
	if (iter->next == iter->end)
		return NULL;
	iter->cur = iter->next;
	iter->next = iter->cur->next;
	return dlist_container(DLockEntry, u.x.node, iter->cur);
}

DLockEntry *
dlock_first_lease(DLockEntry *head, dlist_mutable_iter *iter)
{
	iter->end = &head->u.h.holders.head;
	iter->cur = NULL;
	iter->next = head->u.h.holders.head.next;
	if (head->token != 0)
		return head;
	return dlock_next_lease(head, iter);
}

/* The caller holds every partition lock. */
void
dlock_scan_begin(HASH_SEQ_STATUS *status)
{
	hash_seq_init(status, lock_hash);
}

/* Held: granted, and not expired or kept by a transaction that pinned it. */
bool
dlock_is_live(const DLockEntry *entry, int64 now)
{
	return entry->token != 0 && !entry->released &&
		(entry->expires > now || entry->pins > 0);
}

/* When a name that is not live may go to a new holder (after lock-delay). */
int64
dlock_free_at(const DLockEntry *entry)
{
	if (entry->token == 0)
		return 0;
	/* lock-delay covers an expiry, not a release (within a hold too) */
	return entry->released || entry->released_at != 0 ? entry->expires :
		entry->expires + (int64) dlock_lock_delay_ms * 1000;
}

bool
dlock_is_free(const DLockEntry *entry, int64 now)
{
	return entry->pins == 0 && !dlock_is_live(entry, now) &&
		dlock_free_at(entry) <= now;
}

/* Puts the entry where it belongs in its partition's expiry heap. */
static void
heap_update(DLockEntry *entry)
{
	pairingheap *heap = partition_heap(entry->hash % DLOCK_PARTITIONS);

	if (entry->in_heap)
		pairingheap_remove(heap, &entry->heap_node);
	entry->in_heap = (entry->token != 0 && entry->pins == 0);
	if (entry->in_heap)
	{
		pairingheap_add(heap, &entry->heap_node);
		if (pairingheap_first(heap) == &entry->heap_node)
			dlock_expiry_moved(dlock_free_at(entry));
	}
}

void
dlock_set_expires(DLockEntry *entry, int64 expires)
{
	entry->expires = expires;
	heap_update(entry);
}

/*
 * Pins the lease for this backend's transaction.  A pinned lease leaves the
 * heap: nothing may expire it until unpinned.  Returns false (changing
 * nothing) when too many other backends pin it already.
 */
bool
dlock_pin(DLockEntry *entry)
{
	DLockPinner *free_slot = NULL;

	for (int i = 0; i < DLOCK_MAX_PINNERS; i++)
	{
		DLockPinner *p = &entry->pinners[i];

		if (p->pid == MyProcPid)
		{
			free_slot = p;
			break;
		}
		if (p->pid == 0 && free_slot == NULL)
			free_slot = p;
	}
	if (free_slot == NULL)
		return false;
	free_slot->pid = MyProcPid;
	free_slot->count++;
	entry->pins++;
	heap_update(entry);
	return true;
}

/* Drops one pin this backend's transaction took. */
void
dlock_unpin(DLockEntry *entry)
{
	for (int i = 0; i < DLOCK_MAX_PINNERS; i++)
	{
		DLockPinner *p = &entry->pinners[i];

		if (p->pid != MyProcPid)
			continue;
		if (--p->count == 0)
			p->pid = 0;
		entry->pins--;
		Assert(entry->pins >= 0);
		heap_update(entry);
		return;
	}
}

/*
 * When a pinned lease's pinners have kept it past its end (its expiry, or
 * its release) for dlock.fence_grace, and may be terminated if others wait.
 */
int64
dlock_overdue_at(const DLockEntry *entry)
{
	return entry->expires + (int64) dlock_fence_grace_ms * 1000;
}

/*
 * A release of a lease that other transactions still pin: it is no longer
 * the owner's, but no conflicting lease is granted (with a newer token)
 * until those transactions end.
 */
void
dlock_release_pinned(DLockEntry *entry, int64 now)
{
	Assert(entry->pins > 0);
	entry->released = true;
	dlock_set_expires(entry, now);
}

/* The lease of the partition that expires first; caller holds its lock. */
DLockEntry *
dlock_earliest(int partition)
{
	pairingheap *heap = partition_heap(partition);

	if (pairingheap_is_empty(heap))
		return NULL;
	return pairingheap_container(DLockEntry, heap_node, pairingheap_first(heap));
}

/*
 * Whether a lease in mode would conflict with the name's leases that are
 * not yet free (ended ones inside their lock-delay count, too).
 */
bool
dlock_conflicts(DLockEntry *head, DLockMode mode, int64 now)
{
	dlist_mutable_iter iter;
	DLockEntry *lease;
	int			held = 0;

	dlock_foreach_lease(lease, head, iter)
	{
		if (dlock_is_free(lease, now))
			continue;
		if (head->permits == 0 &&
			(mode == DLOCK_EXCLUSIVE || lease->mode == DLOCK_EXCLUSIVE))
			return true;
		held++;
	}
	return head->permits != 0 && held >= head->permits;
}

/*
 * Puts a lease with token on head's name: in the head when it has none,
 * else in a further entry.  reserved: an entry is counted for it already;
 * a reservation not used up here is given back.  Returns NULL (keeping the
 * reservation) when the entry cannot be made.
 */
static DLockEntry *
place_lease(DLockEntry *head, uint64 token, bool reserved)
{
	DLockEntry *lease;

	Assert(dlock_is_head(head));
	if (head->token == 0)
	{
		if (reserved)
			unreserve(head->hash, head->db);
		lease = head;
	}
	else
	{
		DLockKey	key;

		Assert(reserved);
		memcpy(&key, &head->key, sizeof(DLockKey));
		key.token = token;
		lease = create_entry(&key, dlock_key_hash(&key), head, head->db);
		if (lease == NULL)
			return NULL;
		dlist_push_tail(&head->u.h.holders, &lease->u.x.node);
	}
	head->nleases++;
	lease->token = token;
	lease->version = 0;
	lease->pins = 0;
	memset(lease->pinners, 0, sizeof(lease->pinners));
	lease->released = false;
	lease->min_hold = 0;
	lease->hold_until = 0;
	lease->released_at = 0;
	lease->lifetime_ended = false;
	lease->bound_ended = false;
	lease->grant_xid = InvalidTransactionId;
	SetInvalidVirtualTransactionId(lease->decider);
	lease->clear_rows = false;
	memset(&lease->ev, 0, sizeof(lease->ev));
	lease->holder_pid = 0;
	lease->holder_backend.procno = -1;
	lease->holder_backend.serial = 0;
	lease->lifetime = DLOCK_LIFETIME_TTL;
	return lease;
}

/*
 * Gives a new lease on head's name with a fresh fencing token.  reserved:
 * the caller (a queued waiter) counted an entry for it already, and keeps
 * that reservation if NULL is returned.  durable_xid: for a durable lease,
 * the transaction that will write its row (version 1); else invalid.
 * deferred_by: for a durable lease whose row is not written yet (no
 * durable_xid), the transaction that takes it; else invalid.  Returns NULL
 * when the table is full, or with *no_token when no token is reserved (see
 * dlock_token_next).
 */
DLockEntry *
dlock_grant(DLockEntry *head, const DLockOwner *owner, Oid roleid, int pid,
			int64 ttl, int64 now, DLockMode mode, bool reserved,
			TransactionId durable_xid, VirtualTransactionId deferred_by,
			bool *no_token)
{
	DLockEntry *lease;
	uint64		token;
	bool		own_reservation = false;

	/* first: nothing is reserved or changed yet */
	token = dlock_token_next();
	*no_token = (token == 0);
	if (token == 0)
		return NULL;
	if (head->token != 0 && !reserved)
	{
		if (!reserve(head->hash, head->db, true))
			return NULL;
		own_reservation = true;
	}
	lease = place_lease(head, token, reserved || own_reservation);
	if (lease == NULL)
	{
		if (own_reservation)
			unreserve(head->hash, head->db);
		return NULL;
	}
	lease->durable = TransactionIdIsValid(durable_xid);
	lease->deferred = VirtualTransactionIdIsValid(deferred_by) && !lease->durable;
	if (lease->deferred)
	{
		lease->decider = deferred_by;
		lease->decider_releases = false;
	}
	lease->mode = mode;

	/*
	 * Whatever its mode, a grant deletes the rows of the name's ended leases
	 * (a memory-only one too): after a crash, nothing else would tell the
	 * rebuild that they ended before this token was issued.
	 */
	lease->clear_rows = head->stale_rows;
	head->stale_rows = false;
	if (lease->durable)
	{
		/* the row counts from now: an end before it is written leaves it */
		lease->version = 1;
		lease->grant_xid = durable_xid;
	}
	dlock_count(DLOCK_STAT_GRANTS);
	dlock_set_expires(lease, now + ttl);
	lease->granted_at = GetCurrentTimestamp();
	lease->roleid = roleid;
	lease->holder_pid = pid;
	memcpy(&lease->owner, owner, offsetof(DLockOwner, str) + owner->len);
	return lease;
}

/*
 * A deferred lease's row is about to be written by transaction xid (its
 * first renewal, extension or fence): durable from now, as a new grant is,
 * and acted on by nobody else until xid ends.  dlock_unadopt() takes it
 * back if xid's write rolls back; its decider, kept, counts again then.
 */
void
dlock_adopt(DLockEntry *lease, TransactionId xid)
{
	Assert(lease->deferred && TransactionIdIsValid(xid));
	lease->deferred = false;
	lease->durable = true;
	lease->version = 1;
	lease->grant_xid = xid;
}

void
dlock_unadopt(DLockEntry *lease)
{
	lease->durable = false;
	lease->deferred = true;
	lease->version = 0;
	lease->grant_xid = InvalidTransactionId;
}

/* A new grant's minimum hold, counted from its grant at now (0: none). */
void
dlock_set_min_hold(DLockEntry *lease, int64 min_hold, int64 now)
{
	lease->min_hold = min_hold;
	lease->hold_until = min_hold > 0 ? now + min_hold : 0;
}

/*
 * A lease with a known token, for restoring the lease table; the caller
 * fills it in and sets its expiry.  NULL when the table is full (the
 * database's share does not apply, as in dlock_restore_head).
 */
DLockEntry *
dlock_restore(DLockEntry *head, uint64 token)
{
	DLockEntry *lease;
	bool		reserved = (head->token != 0);

	if (reserved && !reserve(head->hash, head->db, false))
		return NULL;
	lease = place_lease(head, token, reserved);
	if (lease == NULL && reserved)
		unreserve(head->hash, head->db);
	return lease;
}

/*
 * Ends a lease: the head forgets its own, a further lease goes away.  The
 * name's head stays (see dlock_drop_if_unused).  A durable lease whose row
 * is still in the table leaves it for the sweeper.
 */
void
dlock_end_lease(DLockEntry *lease)
{
	DLockEntry *head = dlock_head_of(lease);

	Assert(lease->token != 0);
	if ((lease->durable && lease->version != 0) || lease->clear_rows)
	{
		/* its row, or those its uncommitted grant was to delete */
		pg_atomic_fetch_add_u32(&shared->db_dead_rows[lease->db], 1);
		head->stale_rows = true;
	}
	lease->clear_rows = false;
	if (lease->in_heap)
		pairingheap_remove(partition_heap(lease->hash % DLOCK_PARTITIONS), &lease->heap_node);
	lease->in_heap = false;
	head->nleases--;
	if (lease == head)
	{
		lease->token = 0;
		lease->pins = 0;
		memset(lease->pinners, 0, sizeof(lease->pinners));
		lease->released = false;
		lease->version = 0;
		lease->durable = false;
		lease->deferred = false;
		SetInvalidVirtualTransactionId(lease->decider);
		return;
	}
	dlist_delete(&lease->u.x.node);
	hash_search_with_hash_value(lock_hash, &lease->key, lease->hash, HASH_REMOVE, NULL);
	unreserve(head->hash, lease->db);
}

/* Removes a head that has neither leases nor waiters. */
void
dlock_drop_if_unused(DLockEntry *head)
{
	Assert(dlock_is_head(head));
	if (head->nleases > 0 || !dlist_is_empty(&head->u.h.waiters))
		return;
	hash_search_with_hash_value(lock_hash, &head->key, head->hash, HASH_REMOVE, NULL);
	unreserve(head->hash, head->db);
}

/*
 * When the head waiter must look at the name's leases again: the earliest
 * end of an unpinned one, or the moment a pinned one becomes overdue (0:
 * none).  A pinned lease ends only when unpinned, which settles the name.
 */
int64
dlock_next_free_at(DLockEntry *head)
{
	dlist_mutable_iter iter;
	DLockEntry *lease;
	int64		next = 0;

	dlock_foreach_lease(lease, head, iter)
	{
		int64		at = lease->pins == 0 ? dlock_free_at(lease) : dlock_overdue_at(lease);

		if (next == 0 || at < next)
			next = at;
	}
	return next;
}
