/*
 * wait.h
 *		Queues of waiters and the handoff of a freed lease to the next one.
 *
 * Each backend owns one waiter slot; a queued request that holds no backend
 * (queue.c) has one of a pool of slots, dlock.max_locks of them, with no
 * proc.  While queued, the slot hangs off a name's FIFO list and is
 * protected by the name's partition lock.  Whoever frees a lease grants the
 * name to the waiters at the front of the queue that no longer conflict (one
 * exclusive, or a run of shared ones, or as many as there are free permits)
 * and sets only their latches: nobody polls and nobody else wakes.  A queued
 * request granted so gets a memory-only lease and leaves its slot; one whose
 * hold ran out is dropped instead.
 */
#ifndef DLOCK_WAIT_H
#define DLOCK_WAIT_H

#include "storage/proc.h"

#include "engine.h"

typedef enum DLockWaitState
{
	DLOCK_WAIT_NONE,
	DLOCK_WAIT_QUEUED,
	DLOCK_WAIT_GRANTED,
	DLOCK_WAIT_ENDED			/* its database's leases were dropped */
} DLockWaitState;

typedef struct DLockWaiter
{
	dlist_node	node;			/* in its name's queue; a free pool slot: in
								 * the pool's free list */
	PGPROC	   *proc;			/* NULL: a queued request (no backend) */
	int			pid;
	DLockWaitState state;
	DLockEntry *head;			/* the name's head, while queued */
	DLockKey	key;			/* the head's key, to find the lease once
								 * granted */
	uint32		hash;			/* hash of that key */
	int64		wake_at;		/* when this waiter's own timer fires; 0 =
								 * never */
	uint64		token;			/* set when granted */
	int64		ttl;
	int64		min_hold;		/* of the lease asked for; 0: none */
	int64		deadline;		/* monotonic; 0 = wait without limit */
	TimestampTz since;
	TimestampTz deadline_wall;	/* for display; 0 = none */
	Oid			roleid;
	TransactionId durable_xid;	/* durable: the transaction that will write
								 * the row of the lease granted; else invalid */
	VirtualTransactionId deferred_by;	/* durable with its row deferred:
										 * the waiter's transaction (see
										 * DLockEntry); else invalid */
	uint8		mode;			/* DLockMode asked for */
	uint8		lifetime;		/* DLockLifetime asked for */
	DLockBackend backend;		/* the waiter's backend, which a session or
								 * transaction lease granted is bound to */
	bool		reserved;		/* counted an entry for its lease */
	bool		events;			/* dlock.events of the waiter */
	uint64		event_seq;		/* set when granted: its grant event's seq */
	int64		hold;			/* a queued request: how long it stays
								 * queued unless asked again */
	int64		hold_until;		/* a queued request: monotonic end of its
								 * hold; 0: a backend */
	DLockOwner	owner;
} DLockWaiter;

extern Size dlock_wait_shmem_size(void);
extern void dlock_wait_shmem_init(void);

extern void dlock_enqueue(DLockEntry *head, const DLockOwner *owner, Oid roleid,
						  int64 ttl, int64 deadline, DLockMode mode, bool reserved,
						  TransactionId durable_xid, VirtualTransactionId deferred_by,
						  int64 min_hold,
						  DLockLifetime lifetime, const DLockBackend *backend);
extern void dlock_wait_prepare(void);
extern uint64 dlock_self_deadlock(DLockEntry *head, DLockMode mode, int *ahead);
extern uint64 dlock_sleep(bool holds_pins);
extern uint64 dlock_wait_event_seq(void);
extern void dlock_settle(DLockEntry *head, int64 now, DLockStat stat, bool keep);
extern void dlock_end_waits(Oid dbid);
extern DLockWaiter *dlock_waiter_slots(int *count);

/*
 * Queued requests' slots (the pool is counted in dlock_waiter_slots after
 * the backends').  new() takes one (NULL: none left; the caller reserved an
 * entry for it, so there always is one), filled with what any queued
 * request has; remove() takes one out of its queue, gives back its
 * reservation and its slot.  Both under the name's partition lock.
 */
extern DLockWaiter *dlock_queued_new(DLockEntry *head, const DLockOwner *owner,
									 Oid roleid, int64 ttl, DLockMode mode);
extern void dlock_queued_remove(DLockWaiter *w);
extern uint32 dlock_queued_count(void);

/*
 * Latches to set are collected while partition locks are held and set
 * after they are released.  dlock_wake_init() must run before any lock is
 * taken, as it may allocate.
 */
extern void dlock_wake_init(void);
extern void dlock_wake_later(PGPROC *proc);
extern void dlock_wake_all(void);

/*
 * Frees the lease if it still carries token; used at commit and on undo.
 * row_deleted: the caller's transaction deleted the lease's row (or took
 * back its insert).
 */
extern void dlock_handoff_end(const DLockKey *key, uint32 hash, uint64 token);
extern void dlock_handoff_free(const DLockKey *key, uint32 hash, uint64 token,
							   bool row_deleted);
extern void dlock_handoff_set_expiry(const DLockKey *key, uint32 hash,
									 uint64 token, int64 expires, int64 version);
extern void dlock_handoff_hold(const DLockKey *key, uint32 hash, uint64 token,
							   int64 expires, int64 version, TimestampTz released_at);

extern void dlock_handoff_unadopt(const DLockKey *key, uint32 hash, uint64 token);
extern void dlock_handoff_unmark(const DLockKey *key, uint32 hash, uint64 token);
extern void dlock_grant_committed(const DLockKey *key, uint32 hash,
								  uint64 token);
extern int64 dlock_expire_due(int batch, DLockStat stat, int *mine);

#endif							/* DLOCK_WAIT_H */
