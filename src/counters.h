/*
 * counters.h
 *		The cumulative counters dlock_stats shows: see counters.c.
 */
#ifndef DLOCK_COUNTERS_H
#define DLOCK_COUNTERS_H

/* cumulative counters, shown by dlock_stats */
typedef enum DLockStat
{
	DLOCK_STAT_GRANTS,
	DLOCK_STAT_IMMEDIATE,
	DLOCK_STAT_WAITS,
	DLOCK_STAT_TIMEOUTS,
	DLOCK_STAT_RELEASES,
	DLOCK_STAT_RENEWALS,
	DLOCK_STAT_EXPIRED_BY_WORKER,
	DLOCK_STAT_EXPIRED_BY_SWEEP,
	DLOCK_STAT_EXPIRED_BY_CALLER,
	DLOCK_STAT_QUEUE_DROPPED,	/* queued requests whose hold ran out */
	DLOCK_NUM_STATS
} DLockStat;

extern Size dlock_counters_shmem_size(void);
extern void dlock_counters_shmem_init(void);
extern void dlock_count(DLockStat stat);
extern void dlock_counters_read(uint64 *values);
extern void dlock_counters_reset(void);

#endif							/* DLOCK_COUNTERS_H */
