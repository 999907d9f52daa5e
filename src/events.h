/*
 * events.h
 *		Change events: each grant and end of a lease granted with
 *		dlock.events on, recorded in shared memory when the change commits
 *		and sent with NOTIFY on channel "dlock" in the lease's database by
 *		that database's sender (events.c).
 *
 * Every event carries "seq", taken from one counter under the name's
 * partition lock when the change takes effect: on each name, seq orders the
 * events as the changes happened.
 */
#ifndef DLOCK_EVENTS_H
#define DLOCK_EVENTS_H

#include "storage/latch.h"

#include "engine.h"

typedef enum DLockEventKind
{
	DLOCK_EVENT_GRANTED,
	DLOCK_EVENT_RELEASED,
	DLOCK_EVENT_EXPIRED,
	DLOCK_EVENT_FORCED,
	DLOCK_EVENT_ENDED
} DLockEventKind;

extern Size dlock_events_shmem_size(void);
extern void dlock_events_shmem_init(LWLock *lock);

/* Whether any lease was granted with events since shared memory began. */
extern bool dlock_events_in_use(void);

/*
 * Under the lease's partition lock (exclusive).  A new lease (granted to
 * backend pid, with events if on) takes its grant's seq, returned (0: no
 * events); its grant is sent when that backend's transaction commits.
 */
extern uint64 dlock_event_granted(DLockEntry *lease, bool on, int pid);

/*
 * A new lease granted to a queued request (its owner away, with events if
 * on): no transaction made it, so its grant is queued to send at once.
 */
extern void dlock_event_granted_queued(DLockEntry *lease, bool on);

/* A lease ended by its ttl (after lock-delay), about to leave the engine. */
extern void dlock_event_expired(DLockEntry *lease);

/*
 * A lease ended because the backend or transaction it belongs to ended
 * (lifetime 'session' or 'transaction'): "ended", sent like an expiry.  For
 * the one function that ends such leases, under the partition lock, before
 * the lease leaves the engine.
 */
extern void dlock_event_ended(DLockEntry *lease);

/*
 * The payload's "lifetime" of a lease, a word of 15 bytes at most; NULL: a
 * lease granted to this backend that ended before it could look.  The one
 * place that knows lifetimes.
 */
extern const char *dlock_event_lifetime(const DLockEntry *lease);

/*
 * At the top transaction's commit (xact.c), before it applies its changes,
 * in their order: commit_begin() with how many events it will record (it
 * may wait, bounded, for room), then its grants and its releases (forced:
 * by dlock_force_release).
 */
extern void dlock_events_commit_begin(int n);
extern void dlock_events_commit_grant(const DLockKey *key, uint32 hash,
									  const DLockOwner *owner, uint64 token,
									  uint64 seq, DLockMode mode,
									  const char *lifetime);
extern void dlock_events_commit_end(const DLockKey *key, uint32 hash,
									uint64 token, bool forced);

/* A grant taken back by a subtransaction's abort. */
extern void dlock_events_undone(const DLockKey *key, uint64 token);

/* The top transaction aborted. */
extern void dlock_events_aborted(void);

/*
 * The sender of a database (worker.c): start() registers it (false: no
 * room), stop() unregisters it when idle (false: events came meanwhile).
 * Each batch: take() the queue (false: nothing), then notify() in a
 * transaction, then sent() after its commit.  sender_exit() when it exits,
 * however: a batch not sent is counted as lost.
 */
extern bool dlock_events_sender_start(Latch *latch);
extern bool dlock_events_sender_stop(void);
extern bool dlock_events_take(void);
extern void dlock_events_notify(void);
extern void dlock_events_sent(void);
extern void dlock_events_sender_exit(void);

/* A database's leases were dropped (dlock_db_purge): so are its events. */
extern void dlock_events_forget(Oid dbid);

/* Databases with events to send, for the worker to send a sender to. */
extern int	dlock_events_databases(Oid *dbids, int max);

#endif							/* DLOCK_EVENTS_H */
