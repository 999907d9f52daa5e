/*
 * engine.h
 *		The shared-memory lease table: a partitioned hash of named leases.
 *
 * A name has a head entry while it is held or has waiters.  The head carries
 * the name's queue of waiters, its kind (a plain lock or a semaphore) and
 * one lease; the name's further leases (more shared holders, more permits)
 * are entries of their own, keyed by name and token, in the same partition.
 * Every field of an entry, and the queue hanging off a head, is protected by
 * the LWLock of the name's partition.
 *
 * Its callers also get, through this header, the four files below it that
 * it calls: the entry credits (credits.h), a lease's keys (keys.h), the
 * counters (counters.h) and the expiry watcher (watch.h).
 */
#ifndef DLOCK_ENGINE_H
#define DLOCK_ENGINE_H

#include "lib/ilist.h"
#include "lib/pairingheap.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/hsearch.h"

#include "counters.h"
#include "credits.h"
#include "dlock.h"
#include "keys.h"
#include "watch.h"

/*
 * A backend, told apart from a later one with the same pid or slot: its
 * slot among the regular backends and a serial unique since shared memory
 * was set up (lifetime.c).
 */
typedef struct DLockBackend
{
	int32		procno;			/* -1: none */
	uint64		serial;			/* 0: none */
} DLockBackend;

/*
 * A backend whose open transaction pins a lease (renewed, extended or
 * fenced it), with how many times.  A lease has room for a few: more
 * sessions pinning one lease at once are refused.
 */
#define DLOCK_MAX_PINNERS	4

typedef struct DLockPinner
{
	int32		pid;			/* 0: free */
	int32		count;
} DLockPinner;

/*
 * What events.c keeps on a lease for its change events (all zero: the
 * lease sends none).
 */
typedef struct DLockLeaseEvents
{
	uint64		seq;			/* its grant's event, until the granting
								 * transaction commits; else 0 */
	int32		pid;			/* the backend of that transaction */
	bool		on;				/* granted with dlock.events on, and its
								 * end not recorded yet */
} DLockLeaseEvents;

typedef struct DLockEntry
{
	DLockKey	key;			/* hash key: must be first */
	uint32		hash;			/* of key */
	int32		pins;			/* open transactions that renewed or fenced
								 * the lease: it cannot end before they do */
	DLockPinner pinners[DLOCK_MAX_PINNERS]; /* who holds the pins */
	uint64		token;			/* fencing token of the lease; 0 = none */
	int64		expires;		/* monotonic clock, microseconds; set it with
								 * dlock_set_expires() */
	pairingheap_node heap_node;
	TimestampTz granted_at;		/* wall clock, for display */
	int64		min_hold;		/* minimum hold asked at the grant (0: none) */
	int64		hold_until;		/* monotonic: the grant plus min_hold; a
								 * release before then ends the lease then */
	TimestampTz released_at;	/* released by its owner before hold_until
								 * (wall clock; 0: not): it stays its owner's,
								 * live until its expiry (hold_until or
								 * less); a renewal takes it back, unless
								 * bound_ended */
	bool		lifetime_ended; /* released_at set by the end of its session
								 * or transaction, not by a release */
	bool		bound_ended;	/* its session or transaction ended within
								 * its hold (released_at is set): held by
								 * nobody, it cannot be renewed, extended or
								 * taken back */
	int64		version;		/* version of its table row, as last written */
	union
	{
		struct					/* a head (key.token 0) */
		{
			dlist_head	holders;	/* the further leases */
			dlist_head	waiters;	/* DLockWaiter, FIFO */
		}			h;
		struct					/* a further lease */
		{
			dlist_node	node;	/* in its head's holders */
			struct DLockEntry *head;
		}			x;
	}			u;
	Oid			roleid;			/* role that took the lease */
	int			holder_pid;		/* backend that took or last extended it; a
								 * session or transaction lease's: the
								 * backend it is bound to */
	DLockBackend holder_backend;	/* holder_pid's backend */
	int32		nwaiters;		/* head: length of waiters */
	int32		nleases;		/* head: leases of the name, its own included */
	int32		permits;		/* head: 0 for a plain lock, else a semaphore
								 * of that many permits */
	bool		in_heap;		/* in its partition's expiry heap */
	bool		durable;		/* stored in the lease table */
	bool		deferred;		/* durable, with its row left to its first
								 * renewal, extension or fence
								 * (dlock.defer_rows): memory-only until then */
	uint8		mode;			/* DLockMode of the lease */
	uint8		lifetime;		/* DLockLifetime of the lease */
	bool		stale_rows;		/* head: ended leases may have left rows (set
								 * for a new head while its database has rows
								 * left to sweep) */
	bool		released;		/* released while pinned: no longer the
								 * owner's, but it keeps its name until the
								 * pins are gone (expires: when released) */
	bool		clear_rows;		/* a grant that deletes the rows of the name's
								 * ended leases in its transaction; cleared
								 * when that commits (an end before gives the
								 * rows back to stale_rows) */
	uint8		db;				/* slot of its database, whose entry count
								 * includes it */
	DLockOwner	owner;
	TransactionId grant_xid;	/* durable: the transaction that granted it
								 * and writes its row; until it ends, no other
								 * session acts on the lease */
	VirtualTransactionId decider;	/* deferred: the transaction that granted
									 * it, or whose release read it deferred
									 * (they write no row, so have no xid):
									 * until it ends, no other session acts
									 * on the lease (grantwait.c) */
	bool		decider_releases;	/* that transaction released it */
	DLockLeaseEvents ev;		/* events.c's */
} DLockEntry;

extern void dlock_engine_set_db(int db);
extern uint32 dlock_dead_rows(int db);
extern void dlock_dead_rows_add(int db, uint32 n);
extern void dlock_dead_rows_clear(int db);
extern uint32 dlock_dead_rows_mark(int db);
extern void dlock_dead_rows_swept(int db, uint32 mark);
extern Size dlock_engine_shmem_size(void);
extern void dlock_engine_shmem_init(LWLockPadded *locks);
extern bool dlock_shmem_ready(void);

extern int64 dlock_mono_now(void);
extern TimestampTz dlock_mono_to_wall(int64 mono, int64 mono_now, TimestampTz wall_now);

extern LWLock *dlock_partition_lock(uint32 hash);
extern void dlock_lock_all_partitions(LWLockMode mode);
extern void dlock_unlock_all_partitions(void);

extern DLockEntry *dlock_find(const DLockKey *key, uint32 hash);
extern DLockEntry *dlock_find_or_create(const DLockKey *key, uint32 hash, bool *found);
extern DLockEntry *dlock_restore_head(const DLockKey *key, uint32 hash, bool *found);
extern DLockEntry *dlock_find_lease(const DLockKey *key, uint32 hash, uint64 token);
extern void dlock_scan_begin(HASH_SEQ_STATUS *status);

#define dlock_is_head(entry)	((entry)->key.token == 0)
#define dlock_head_of(entry) \
	(dlock_is_head(entry) ? (entry) : (entry)->u.x.head)

extern bool dlock_is_live(const DLockEntry *entry, int64 now);
extern bool dlock_is_free(const DLockEntry *entry, int64 now);
extern int64 dlock_free_at(const DLockEntry *entry);
extern void dlock_set_expires(DLockEntry *entry, int64 expires);
extern bool dlock_pin(DLockEntry *entry);
extern void dlock_unpin(DLockEntry *entry);
extern int64 dlock_overdue_at(const DLockEntry *entry);
extern void dlock_release_pinned(DLockEntry *entry, int64 now);
extern DLockEntry *dlock_earliest(int partition);

/*
 * The leases of a name: the head's own (when it has one), then the further
 * ones.  The current one may be ended inside the loop, no other.
 */
#define dlock_foreach_lease(lease, head, iter) \
	for ((lease) = dlock_first_lease(head, &(iter)); (lease) != NULL; \
		 (lease) = dlock_next_lease(head, &(iter)))
extern DLockEntry *dlock_first_lease(DLockEntry *head, dlist_mutable_iter *iter);
extern DLockEntry *dlock_next_lease(DLockEntry *head, dlist_mutable_iter *iter);

extern bool dlock_reserve(const DLockEntry *head);
extern void dlock_unreserve(const DLockEntry *head);
extern bool dlock_conflicts(DLockEntry *head, DLockMode mode, int64 now);
extern DLockEntry *dlock_grant(DLockEntry *head, const DLockOwner *owner, Oid roleid,
							   int pid, int64 ttl, int64 now, DLockMode mode,
							   bool reserved, TransactionId durable_xid,
							   VirtualTransactionId deferred_by, bool *no_token);
extern void dlock_adopt(DLockEntry *lease, TransactionId xid);
extern void dlock_unadopt(DLockEntry *lease);
extern void dlock_set_min_hold(DLockEntry *lease, int64 min_hold, int64 now);
extern DLockEntry *dlock_restore(DLockEntry *head, uint64 token);
extern void dlock_end_lease(DLockEntry *lease);
extern void dlock_drop_if_unused(DLockEntry *head);
extern int64 dlock_next_free_at(DLockEntry *head);

/*
 * The backend that holds a lease (took or extended it), and for a new grant
 * its lifetime: a session or transaction lease is bound to that backend.
 */
static inline void
dlock_set_holder(DLockEntry *lease, int pid, const DLockBackend *backend,
				 DLockLifetime lifetime)
{
	lease->holder_pid = pid;
	lease->holder_backend = *backend;
	lease->lifetime = lifetime;
}

/* This backend's transaction: a deferred lease's decider, when it takes one */
static inline VirtualTransactionId
dlock_my_vxid(void)
{
	VirtualTransactionId vxid;

	GET_VXID_FROM_PGPROC(vxid, *MyProc);
	return vxid;
}

/*
 * Whether a deferred lease's decider is a transaction of this backend: the
 * current one, or one that ended (a backend runs one at a time).
 */
static inline bool
dlock_vxid_of_this_backend(VirtualTransactionId vxid)
{
	VirtualTransactionId mine = dlock_my_vxid();

	mine.localTransactionId = vxid.localTransactionId;
	return VirtualTransactionIdEquals(vxid, mine);
}

/* What an operation asks for: a name, who asks, and the lease wanted */
typedef struct DLockRequest
{
	DLockKey	key;
	uint32		hash;
	DLockOwner	owner;
	Oid			roleid;
	int64		ttl;			/* microseconds */
	int64		min_hold;		/* microseconds; 0: none */
	bool		durable;		/* a new grant goes to the lease table */
	DLockMode	mode;
	int32		permits;		/* 0: a plain lock; else a semaphore's size */
	DLockLifetime lifetime;		/* of a new grant (not durable unless ttl) */
} DLockRequest;

#endif							/* DLOCK_ENGINE_H */
