/*
 * watch.h
 *		The expiry watcher, the process that ends leases on time: see watch.c.
 */
#ifndef DLOCK_WATCH_H
#define DLOCK_WATCH_H

#include "storage/latch.h"

/* the watcher's next look, besides a time on the monotonic clock */
#define DLOCK_WATCH_NEVER	PG_UINT64_MAX	/* disabled: nothing wakes it */
#define DLOCK_WATCH_IDLE	0	/* asleep with no lease to time */
#define DLOCK_WATCH_AWAKE	1	/* looking now: any change wakes it again */

extern Size dlock_watch_shmem_size(void);
extern void dlock_watch_shmem_init(void);
extern void dlock_watch_expiries(Latch *latch);
extern void dlock_watch_at(uint64 watch_at);
extern void dlock_wake_watcher(void);
extern void dlock_expiry_moved(int64 free_at);

#endif							/* DLOCK_WATCH_H */
