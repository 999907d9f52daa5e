/*
 * wait.h
 *		Queues of waiters and the handoff of a freed lease to the next one.
 *
 * Each backend owns one waiter slot.  While queued, the slot hangs off an
 * entry's FIFO list and is protected by that entry's partition lock.  A
 * release grants the lease to the head waiter in place and sets only that
 * waiter's latch: nobody polls and nobody else wakes.
 */
#ifndef DLOCK_WAIT_H
#define DLOCK_WAIT_H

#include "storage/proc.h"

#include "shmem.h"

typedef enum DLockWaitState
{
	DLOCK_WAIT_NONE,
	DLOCK_WAIT_QUEUED,
	DLOCK_WAIT_GRANTED
} DLockWaitState;

typedef struct DLockWaiter
{
	dlist_node	node;
	PGPROC	   *proc;
	int			pid;
	DLockWaitState state;
	DLockEntry *entry;			/* the entry waited on, while queued */
	DLockKey	key;			/* its key, to find the lease once granted */
	uint32		hash;			/* hash of that key */
	int64		wake_at;		/* when this waiter's own timer fires; 0 = never */
	uint64		token;			/* set when granted */
	int64		ttl;
	int64		deadline;		/* monotonic; 0 = wait without limit */
	TimestampTz since;
	TimestampTz deadline_wall;	/* for display; 0 = none */
	Oid			roleid;
	bool		durable;
	DLockOwner	owner;
} DLockWaiter;

extern Size dlock_wait_shmem_size(void);
extern void dlock_wait_shmem_init(void *base);

extern void dlock_enqueue(DLockEntry *entry, uint32 hash, const DLockOwner *owner,
						  Oid roleid, int64 ttl, int64 deadline, bool durable);
extern void dlock_wait_prepare(void);
extern uint64 dlock_sleep(void);
extern PGPROC *dlock_handoff(DLockEntry *entry, uint32 hash, int64 now);
extern void dlock_wake(PGPROC *proc);
extern PGPROC *dlock_head_needing_timer(DLockEntry *entry);
extern DLockWaiter *dlock_waiter_slots(int *count);

#endif							/* DLOCK_WAIT_H */
