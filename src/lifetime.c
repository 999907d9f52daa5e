/*
 * lifetime.c
 *		Leases that end with the session or the transaction that took them.
 *
 * A lease's lifetime says what ends it besides its TTL: 'ttl' nothing else;
 * 'session' the exit of the backend that took it, however it exits (a crash
 * resets shared memory, which ends it too); 'transaction' the commit or
 * abort of the transaction that took it.  Neither of the two has a row in
 * the lease table, so neither comes back after a restart or crash.
 *
 * Backends are told apart by a serial each one takes on its first
 * acquisition and keeps in its slot (one per regular backend) until it
 * exits.  A lease records its holder's slot and serial: a later backend
 * with the same pid or slot is never taken for it, and dlock_locks shows a
 * holder's pid only while that backend lives.
 *
 * A backend keeps a local list of the session leases granted to it, so its
 * exit ends them in O(its leases), not by a scan of the table.  The list may
 * name leases that ended otherwise (released, expired, taken back): it is
 * pruned whenever it fills up.  A transaction's leases are found in its log
 * (xact.c), which ends them at commit or abort.  Every end of a bound lease
 * goes through dlock_lifetime_end().
 *
 * Locking: the serials are atomics; the list is backend-local; ending or
 * pruning takes one partition lock at a time.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"

#include "compat.h"
#include "lifetime.h"
#include "wait.h"

typedef struct LifetimeShared
{
	pg_atomic_uint64 next_serial;
	pg_atomic_uint64 serials[FLEXIBLE_ARRAY_MEMBER];	/* per backend slot;
														 * 0: none */
} LifetimeShared;

static LifetimeShared *shared = NULL;

/* this backend, once it took a serial */
static DLockBackend me = {-1, 0};

/* the session leases granted to this backend (some may have ended) */
typedef struct BoundLease
{
	DLockKey	key;			/* the name's head key */
	uint32		hash;
	uint64		token;
} BoundLease;

static BoundLease *bound = NULL;	/* in TopMemoryContext */
static int	nbound = 0;
static int	maxbound = 0;

Size
dlock_lifetime_shmem_size(void)
{
	return add_size(offsetof(LifetimeShared, serials),
					mul_size(MaxBackends, sizeof(pg_atomic_uint64)));
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_lifetime_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("dlock lifetimes", dlock_lifetime_shmem_size(), &found);
	if (found)
		return;
	pg_atomic_init_u64(&shared->next_serial, 1);
	for (int i = 0; i < MaxBackends; i++)
		pg_atomic_init_u64(&shared->serials[i], 0);
}

/*
 * Ends the bound lease with token on the name of key, if it still carries
 * that token and was not released meanwhile, and hands the name to its
 * waiters as a release does (within its minimum hold: at the hold's end).
 */
void
dlock_lifetime_end(const DLockKey *key, uint32 hash, uint64 token)
{
	dlock_handoff_end(key, hash, token);
}

/*
 * The backend exits: its session leases end (its transaction, if one is
 * open, is rolled back after this runs, which takes back what it granted and
 * ends its transaction leases; a wait it abandons gives up a lease granted
 * meanwhile).
 */
static void
lifetime_exit(int code, Datum arg)
{
	for (int i = 0; i < nbound; i++)
		dlock_lifetime_end(&bound[i].key, bound[i].hash, bound[i].token);
	nbound = 0;
}

/*
 * Its serial goes last, once every before_shmem_exit callback has run (the
 * rollback and the abandoned wait included): until then it is alive, so a
 * lease bound to it never shows as outliving it.
 */
static void
lifetime_serial_exit(int code, Datum arg)
{
	pg_atomic_write_u64(&shared->serials[me.procno], 0);
}

/* This backend takes its serial, which lasts until it exits. */
static void
register_backend(void)
{
	int			slot = DLockMyProcIndex();

	if (slot < 0 || slot >= MaxBackends)
		return;
	me.procno = slot;
	me.serial = pg_atomic_fetch_add_u64(&shared->next_serial, 1);
	pg_atomic_write_u64(&shared->serials[slot], me.serial);
	on_shmem_exit(lifetime_serial_exit, (Datum) 0);
	before_shmem_exit(lifetime_exit, (Datum) 0);
}

/* Whether the list's lease i is still held (whoever renewed it). */
static bool
still_bound(const BoundLease *b)
{
	LWLock	   *lock = dlock_partition_lock(b->hash);
	DLockEntry *lease;
	bool		held;

	LWLockAcquire(lock, LW_SHARED);
	lease = dlock_find_lease(&b->key, b->hash, b->token);
	held = (lease != NULL && !lease->released);
	LWLockRelease(lock);
	return held;
}

/*
 * Room in the list for one more lease: those that ended are dropped, and
 * the list doubles when that frees less than half of it, so each grant
 * costs O(1) on average.
 */
static void
make_room(void)
{
	int			kept = 0;

	for (int i = 0; i < nbound; i++)
	{
		if (still_bound(&bound[i]))
			bound[kept++] = bound[i];
	}
	nbound = kept;
	if (nbound < maxbound / 2)
		return;
	maxbound = Max(16, maxbound * 2);
	if (bound == NULL)
		bound = MemoryContextAlloc(TopMemoryContext, sizeof(BoundLease) * maxbound);
	else
		bound = repalloc(bound, sizeof(BoundLease) * maxbound);
}

/*
 * Before an acquisition takes any lock: the backend has its serial, and the
 * list has room for a session lease the call may be granted.
 */
void
dlock_lifetime_prepare(const DLockRequest *req)
{
	if (me.serial == 0)
		register_backend();
	if (req->lifetime == DLOCK_LIFETIME_TTL)
		return;
	if (me.serial == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("only a regular backend can take a dlock lease of lifetime '%s'",
						dlock_lifetime_name(req->lifetime))));
	if (req->lifetime == DLOCK_LIFETIME_SESSION && nbound == maxbound)
		make_room();
}

/* This backend (procno -1 when it has no slot) */
const DLockBackend *
dlock_lifetime_backend(void)
{
	return &me;
}

/* Whether backend is still running (the same backend, not a later one). */
bool
dlock_backend_alive(const DLockBackend *backend)
{
	return backend->serial != 0 && backend->procno >= 0 &&
		backend->procno < MaxBackends &&
		pg_atomic_read_u64(&shared->serials[backend->procno]) == backend->serial;
}

/*
 * A session lease was granted to this backend (under or after the
 * partition lock: nothing here allocates or fails; see
 * dlock_lifetime_prepare).
 */
void
dlock_lifetime_bound(const DLockRequest *req, uint64 token)
{
	BoundLease *b;

	Assert(nbound < maxbound);
	b = &bound[nbound++];
	memcpy(&b->key, &req->key, sizeof(DLockKey));
	b->hash = req->hash;
	b->token = token;
}
