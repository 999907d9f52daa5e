/*
 * counters.c
 *		The cumulative counters dlock_stats shows (grants, waits, releases,
 *		expiries by who ended them), and their reset.
 *
 * The bottom of the layers with settings.c and tokens.c: it calls no other
 * file of dlock.  Its state is in shared memory of its own, zero at every
 * start and after every crash restart.
 *
 * Locking: a count is an atomic add, without a lock; a read and a reset
 * take the spinlock, so a read sees every counter against the same reset.
 */
#include "postgres.h"

#include "port/atomics.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "counters.h"

typedef struct DLockCounters
{
	pg_atomic_uint64 stats[DLOCK_NUM_STATS];
	slock_t		stats_mutex;
	uint64		stats_reset_at[DLOCK_NUM_STATS];	/* values at last reset */
} DLockCounters;

static DLockCounters *shared = NULL;

Size
dlock_counters_shmem_size(void)
{
	return MAXALIGN(sizeof(DLockCounters));
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_counters_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("dlock counters", dlock_counters_shmem_size(), &found);
	if (found)
		return;
	for (int i = 0; i < DLOCK_NUM_STATS; i++)
	{
		pg_atomic_init_u64(&shared->stats[i], 0);
		shared->stats_reset_at[i] = 0;
	}
	SpinLockInit(&shared->stats_mutex);
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
