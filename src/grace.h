/*
 * grace.h
 *		The grace after a promotion or a crash restart: no new grant until
 *		every lease the failover or the crash may have lost has ended (see
 *		grace.c).
 */
#ifndef DLOCK_GRACE_H
#define DLOCK_GRACE_H

#include "port/atomics.h"
#include "storage/lwlock.h"

/* Nonzero while a grace runs or may have to begin: the grant path's flag. */
extern pg_atomic_uint32 *dlock_grace_flag;

extern Size dlock_grace_shmem_size(void);
extern void dlock_grace_shmem_init(LWLock *lock);

/* One predictable branch on the grant path; dlock_grace_holds() if set. */
static inline bool
dlock_grace_pending(void)
{
	return unlikely(pg_atomic_read_u32(dlock_grace_flag) != 0);
}

/* Whether new grants are held now; settles the grace first.  No lock held. */
extern bool dlock_grace_holds(void);

/*
 * Waits until the grace ends (true) or the deadline of wait_deadline()'s
 * kind passes (false; ERROR when lock_timeout set it).  No lock held.
 */
extern bool dlock_grace_wait(int64 deadline, bool by_lock_timeout);

/* For the worker: when the running grace ends on the monotonic clock, or 0. */
extern int64 dlock_grace_watch(void);

/* Refuses a ttl that a failover could lose for longer than the grace. */
extern void dlock_grace_check_ttl(int64 ttl, bool durable);

/*
 * At a commit: whether promises lasting at most lasts may skip the WAL
 * flush, the crash grace raised to cover them if so (may ERROR).
 */
extern bool dlock_grace_unflushed(int64 lasts);
extern void dlock_grace_after_shutdown(int64 left);
extern void dlock_grace_deferred_lost(void);
extern void dlock_grace_unwritten(int64 lasts);

#endif							/* DLOCK_GRACE_H */
