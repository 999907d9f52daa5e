/*
 * counters.c
 *		The cumulative counters dlock_stats shows (grants, waits, releases,
 *		expiries by who ended them), and their reset.
 *
 * The bottom of the layers with settings.c and tokens.c: it calls no other
 * file of dlock.  Its state is in shared memory of its own, zero at every
 * start and after every crash restart.
 *
 * Each backend counts in a slot of its own (by its index among MaxBackends,
 * one cache line each; processes without one share a last slot), and a
 * read sums the slots, as pgstat does: a counter every grant and release
 * bumps in one shared cache line would move that line between the cores of
 * every caller.  A slot keeps its counts when its backend exits and the
 * next one adds to them.
 *
 * Locking: a count is an atomic add to the counter's own slot (whoever
 * holds the slot next may be counting before the last one is done), without
 * a lock; a read and a reset take the spinlock while they sum the slots, so
 * a read sees every counter against the same reset.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "compat.h"
#include "counters.h"

/* one backend's counts, alone in its cache line */
typedef union DLockCounterSlot
{
	pg_atomic_uint64 stats[DLOCK_NUM_STATS];
	char		pad[PG_CACHE_LINE_SIZE];
} DLockCounterSlot;

StaticAssertDecl(sizeof(pg_atomic_uint64) * DLOCK_NUM_STATS <= PG_CACHE_LINE_SIZE,
				 "dlock's counters must fit in one cache line");

typedef struct DLockCounters
{
	slock_t		stats_mutex;
	uint64		stats_reset_at[DLOCK_NUM_STATS];	/* sums at last reset */
} DLockCounters;

static DLockCounters *shared = NULL;
static DLockCounterSlot *slots = NULL;	/* MaxBackends + 1 */

/* the header, then the slots from the next cache line */
#define SLOTS_OFFSET	CACHELINEALIGN(sizeof(DLockCounters))

Size
dlock_counters_shmem_size(void)
{
	return add_size(SLOTS_OFFSET,
					mul_size(add_size(MaxBackends, 1), sizeof(DLockCounterSlot)));
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_counters_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("dlock counters", dlock_counters_shmem_size(), &found);
	slots = (DLockCounterSlot *) ((char *) shared + SLOTS_OFFSET);
	if (found)
		return;
	for (int i = 0; i < DLOCK_NUM_STATS; i++)
		shared->stats_reset_at[i] = 0;
	for (int s = 0; s <= MaxBackends; s++)
		for (int i = 0; i < DLOCK_NUM_STATS; i++)
			pg_atomic_init_u64(&slots[s].stats[i], 0);
	SpinLockInit(&shared->stats_mutex);
}

void
dlock_count(DLockStat stat)
{
	int			slot = DLockMyProcIndex();

	if (slot < 0 || slot >= MaxBackends)
		slot = MaxBackends;
	pg_atomic_fetch_add_u64(&slots[slot].stats[stat], 1);
}

/* Every slot's counts added up; the caller holds the spinlock. */
static void
sum_slots(uint64 *values)
{
	for (int i = 0; i < DLOCK_NUM_STATS; i++)
		values[i] = 0;
	for (int s = 0; s <= MaxBackends; s++)
		for (int i = 0; i < DLOCK_NUM_STATS; i++)
			values[i] += pg_atomic_read_u64(&slots[s].stats[i]);
}

void
dlock_counters_read(uint64 *values)
{
	SpinLockAcquire(&shared->stats_mutex);
	sum_slots(values);
	for (int i = 0; i < DLOCK_NUM_STATS; i++)
		values[i] -= shared->stats_reset_at[i];
	SpinLockRelease(&shared->stats_mutex);
}

void
dlock_counters_reset(void)
{
	SpinLockAcquire(&shared->stats_mutex);
	sum_slots(shared->stats_reset_at);
	SpinLockRelease(&shared->stats_mutex);
}
