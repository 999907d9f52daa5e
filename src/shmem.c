/*
 * shmem.c
 *		The shared-memory lease table.
 *
 * A dynahash partitioned like the heavyweight lock manager's: the low bits of
 * a key's hash choose one of DLOCK_PARTITIONS LWLocks, so calls on different
 * names rarely meet on one lock.  Entry count is capped by dlock.max_locks,
 * kept exact with an atomic counter because a shared dynahash may borrow
 * spare shared memory beyond its nominal size.
 */
#include "postgres.h"

#include <time.h>

#include "common/hashfn.h"
#include "common/int.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "persist.h"
#include "shmem.h"
#include "wait.h"
#include "worker.h"

typedef struct DLockShared
{
	LWLockPadded *locks;		/* DLOCK_PARTITIONS partition locks */
	pg_atomic_uint32 nentries;
	/* per partition: its held, unpinned leases by expiry, earliest first */
	pairingheap heaps[DLOCK_PARTITIONS];
	pg_atomic_uint64 stats[DLOCK_NUM_STATS];
	slock_t		stats_mutex;
	uint64		stats_reset_at[DLOCK_NUM_STATS];	/* values at last reset */
} DLockShared;

/* The fixed-size parts, laid out one after another. */
static Size
fixed_size(void)
{
	Size		size = MAXALIGN(sizeof(DLockShared));

	size = add_size(size, dlock_token_shmem_size());
	size = add_size(size, dlock_db_shmem_size());
	size = add_size(size, dlock_worker_shmem_size());
	return add_size(size, dlock_wait_shmem_size());
}

static DLockShared *shared = NULL;
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

	if (ka->dbid != kb->dbid || ka->len != kb->len)
		return 1;
	return memcmp(ka->name, kb->name, ka->len);
}

static Size
shared_size(void)
{
	return add_size(fixed_size(), hash_estimate_size(dlock_max_locks, sizeof(DLockEntry)));
}

void
dlock_shmem_request(void)
{
	RequestAddinShmemSpace(shared_size());
	/* the partition locks, then the token lock */
	RequestNamedLWLockTranche("dlock", DLOCK_PARTITIONS + 1);
}

/*
 * Runs in the postmaster at start and after every crash restart, so the
 * table always starts empty: leases come back from the durable table.
 */
void
dlock_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);

	shared = ShmemInitStruct("dlock", fixed_size(), &found);
	if (!found)
	{
		char	   *next = (char *) shared + MAXALIGN(sizeof(DLockShared));

		shared->locks = GetNamedLWLockTranche("dlock");
		pg_atomic_init_u32(&shared->nentries, 0);
		for (int i = 0; i < DLOCK_NUM_STATS; i++)
		{
			pg_atomic_init_u64(&shared->stats[i], 0);
			shared->stats_reset_at[i] = 0;
		}
		SpinLockInit(&shared->stats_mutex);
		for (int i = 0; i < DLOCK_PARTITIONS; i++)
		{
			shared->heaps[i].ph_compare = expiry_cmp;
			shared->heaps[i].ph_arg = NULL;
			shared->heaps[i].ph_root = NULL;
		}
		dlock_token_shmem_init(next, &shared->locks[DLOCK_PARTITIONS].lock);
		next += dlock_token_shmem_size();
		dlock_db_shmem_init(next);
		next += dlock_db_shmem_size();
		dlock_worker_shmem_init(next);
		next += dlock_worker_shmem_size();
		dlock_wait_shmem_init(next);
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(DLockKey);
	info.entrysize = sizeof(DLockEntry);
	info.hash = key_hash_fn;
	info.match = key_match_fn;
	info.num_partitions = DLOCK_PARTITIONS;
	lock_hash = ShmemInitHash("dlock leases", dlock_max_locks, dlock_max_locks,
							  &info,
							  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_PARTITION);

	LWLockRelease(AddinShmemInitLock);
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

void
dlock_make_key(DLockKey *key, const char *name, int len)
{
	Assert(len > 0 && len <= DLOCK_NAME_MAX);
	memset(key, 0, sizeof(DLockKey));
	key->dbid = MyDatabaseId;
	key->len = len;
	memcpy(key->name, name, len);
}

uint32
dlock_key_hash(const DLockKey *key)
{
	return hash_combine(hash_bytes_uint32(key->dbid),
						hash_bytes((const unsigned char *) key->name, key->len));
}

LWLock *
dlock_partition_lock(uint32 hash)
{
	return &shared->locks[hash % DLOCK_PARTITIONS].lock;
}

/* Always in partition order, so two scanners cannot deadlock. */
void
dlock_lock_all_partitions(LWLockMode mode)
{
	for (int i = 0; i < DLOCK_PARTITIONS; i++)
		LWLockAcquire(&shared->locks[i].lock, mode);
}

void
dlock_unlock_all_partitions(void)
{
	for (int i = DLOCK_PARTITIONS - 1; i >= 0; i--)
		LWLockRelease(&shared->locks[i].lock);
}

DLockEntry *
dlock_find(const DLockKey *key, uint32 hash)
{
	return hash_search_with_hash_value(lock_hash, key, hash, HASH_FIND, NULL);
}

/*
 * Returns NULL when the table is full.  The caller holds the partition lock
 * exclusively.
 */
DLockEntry *
dlock_find_or_create(const DLockKey *key, uint32 hash, bool *found)
{
	DLockEntry *entry;

	entry = hash_search_with_hash_value(lock_hash, key, hash, HASH_FIND, NULL);
	if (entry != NULL)
	{
		*found = true;
		return entry;
	}

	if (pg_atomic_fetch_add_u32(&shared->nentries, 1) >= (uint32) dlock_max_locks)
	{
		pg_atomic_fetch_sub_u32(&shared->nentries, 1);
		return NULL;
	}
	entry = hash_search_with_hash_value(lock_hash, key, hash, HASH_ENTER_NULL, found);
	if (entry == NULL)
	{
		pg_atomic_fetch_sub_u32(&shared->nentries, 1);
		return NULL;
	}
	Assert(!*found);
	entry->token = 0;
	entry->expires = 0;
	entry->pins = 0;
	entry->in_heap = false;
	entry->granted_at = 0;
	entry->roleid = InvalidOid;
	entry->holder_pid = 0;
	entry->durable = false;
	entry->version = 0;
	entry->nwaiters = 0;
	dlist_init(&entry->waiters);
	entry->owner.len = 0;
	return entry;
}

void
dlock_remove(DLockEntry *entry, uint32 hash)
{
	Assert(dlist_is_empty(&entry->waiters));
	if (entry->in_heap)
		pairingheap_remove(&shared->heaps[hash % DLOCK_PARTITIONS], &entry->heap_node);
	hash_search_with_hash_value(lock_hash, &entry->key, hash, HASH_REMOVE, NULL);
	pg_atomic_fetch_sub_u32(&shared->nentries, 1);
}

/* The caller holds every partition lock. */
void
dlock_scan_begin(HASH_SEQ_STATUS *status)
{
	hash_seq_init(status, lock_hash);
}

bool
dlock_owner_equal(const DLockOwner *a, const DLockOwner *b)
{
	return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}

/* Held: granted, and not expired or kept by a transaction that pinned it. */
bool
dlock_is_live(const DLockEntry *entry, int64 now)
{
	return entry->token != 0 && (entry->expires > now || entry->pins > 0);
}

/* When a name that is not live may go to a new holder (after lock-delay). */
int64
dlock_free_at(const DLockEntry *entry)
{
	return entry->token == 0 ? 0 : entry->expires + (int64) dlock_lock_delay_ms * 1000;
}

bool
dlock_is_free(const DLockEntry *entry, int64 now)
{
	return !dlock_is_live(entry, now) && dlock_free_at(entry) <= now;
}

/* Puts the entry where it belongs in its partition's expiry heap. */
static void
heap_update(DLockEntry *entry, uint32 hash)
{
	pairingheap *heap = &shared->heaps[hash % DLOCK_PARTITIONS];

	if (entry->in_heap)
		pairingheap_remove(heap, &entry->heap_node);
	entry->in_heap = (entry->token != 0 && entry->pins == 0);
	if (entry->in_heap)
	{
		pairingheap_add(heap, &entry->heap_node);
		if (pairingheap_first(heap) == &entry->heap_node)
			dlock_worker_expiry_moved(dlock_free_at(entry));
	}
}

void
dlock_set_expires(DLockEntry *entry, uint32 hash, int64 expires)
{
	entry->expires = expires;
	heap_update(entry, hash);
}

/* A pinned lease leaves the heap: nothing may expire it until unpinned. */
void
dlock_pin(DLockEntry *entry, uint32 hash, int delta)
{
	entry->pins += delta;
	Assert(entry->pins >= 0);
	heap_update(entry, hash);
}

/* The lease of the partition that expires first; caller holds its lock. */
DLockEntry *
dlock_earliest(int partition)
{
	pairingheap *heap = &shared->heaps[partition];

	if (pairingheap_is_empty(heap))
		return NULL;
	return pairingheap_container(DLockEntry, heap_node, pairingheap_first(heap));
}

/*
 * Gives the lease to a new holder with a fresh fencing token.  The row
 * version is kept: it still describes what the table holds for the name.
 */
void
dlock_grant(DLockEntry *entry, uint32 hash, const DLockOwner *owner,
			Oid roleid, int pid, int64 ttl, int64 now, bool durable)
{
	entry->token = dlock_token_next();
	entry->durable = durable;
	entry->pins = 0;
	dlock_count(DLOCK_STAT_GRANTS);
	dlock_set_expires(entry, hash, now + ttl);
	entry->granted_at = GetCurrentTimestamp();
	entry->roleid = roleid;
	entry->holder_pid = pid;
	memcpy(&entry->owner, owner, offsetof(DLockOwner, str) + owner->len);
}

void
dlock_count(DLockStat stat)
{
	pg_atomic_fetch_add_u64(&shared->stats[stat], 1);
}

void
dlock_counters_read(uint64 *values)
{
	SpinLockAcquire(&shared->stats_mutex);
	for (int i = 0; i < DLOCK_NUM_STATS; i++)
		values[i] = pg_atomic_read_u64(&shared->stats[i]) - shared->stats_reset_at[i];
	SpinLockRelease(&shared->stats_mutex);
}

void
dlock_counters_reset(void)
{
	SpinLockAcquire(&shared->stats_mutex);
	for (int i = 0; i < DLOCK_NUM_STATS; i++)
		shared->stats_reset_at[i] = pg_atomic_read_u64(&shared->stats[i]);
	SpinLockRelease(&shared->stats_mutex);
}

/* Entries in the table: held leases, and ended ones not yet reclaimed. */
uint32
dlock_entry_count(void)
{
	return pg_atomic_read_u32(&shared->nentries);
}
