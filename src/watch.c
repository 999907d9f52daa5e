/*
 * watch.c
 *		The expiry watcher: one process (the worker) that ends leases when
 *		they fall due, and when it must look next.
 *
 * The engine wakes it when a partition's earliest lease changes and it
 * would otherwise sleep past it (dlock_expiry_moved); it never calls the
 * worker's code.  The bottom of the layers with settings.c and tokens.c:
 * it calls no other file of dlock.  Its state is in shared memory of its
 * own: no watcher, disabled, at every start and after every crash restart.
 *
 * Locking: none.  The watcher sets its latch here when it starts and
 * clears it when it exits; when it looks next is an atomic, written by the
 * watcher before it looks and before it sleeps, and by an engine caller
 * (under the partition lock of the lease that moved) to wake it earlier.
 */
#include "postgres.h"

#include "port/atomics.h"
#include "storage/shmem.h"

#include "watch.h"

typedef struct DLockWatch
{
	/* the process that ends leases on time (the worker), if any */
	Latch	   *watcher;
	pg_atomic_uint64 watch_at;	/* when it looks next, or DLOCK_WATCH_* */
} DLockWatch;

static DLockWatch *shared = NULL;

Size
dlock_watch_shmem_size(void)
{
	return MAXALIGN(sizeof(DLockWatch));
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_watch_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("dlock watcher", dlock_watch_shmem_size(), &found);
	if (found)
		return;
	shared->watcher = NULL;
	pg_atomic_init_u64(&shared->watch_at, DLOCK_WATCH_NEVER);
}

void
dlock_watch_expiries(Latch *latch)
{
	shared->watcher = latch;
	pg_atomic_write_u64(&shared->watch_at, DLOCK_WATCH_NEVER);
}

void
dlock_watch_at(uint64 watch_at)
{
	pg_atomic_write_u64(&shared->watch_at, watch_at);
}

void
dlock_wake_watcher(void)
{
	Latch	   *latch = shared->watcher;

	if (latch != NULL)
		SetLatch(latch);
}

/* A partition's earliest lease is now free at free_at. */
void
dlock_expiry_moved(int64 free_at)
{
	uint64		watch_at = pg_atomic_read_u64(&shared->watch_at);

	if (watch_at == DLOCK_WATCH_NEVER)
		return;					/* disabled (or not running): nothing to time */
	if (watch_at == DLOCK_WATCH_AWAKE)
		dlock_wake_watcher();
	else if (watch_at == DLOCK_WATCH_IDLE || (uint64) free_at < watch_at)
	{
		pg_atomic_write_u64(&shared->watch_at, (uint64) free_at);
		dlock_wake_watcher();
	}
}
