/*
 * queue.c
 *		Queued requests that hold no backend: dlock_enqueue and dlock_dequeue.
 *
 * A queued request waits in its name's FIFO queue like a blocked
 * dlock_acquire caller, under the same rules (lock-delay, shared and permit
 * runs, FIFO across both kinds), but in a slot of a pool (wait.c's, one per
 * dlock.max_locks entry) rather than in a backend: its caller returns at
 * once and may hand its connection back to a pooler.  Each counts one entry
 * against dlock.max_locks and dlock.max_locks_per_database while queued.
 *
 * Its hold: a request not asked for again within it leaves the queue, as a
 * client that vanished should; asked again, it keeps its place and its hold
 * restarts.  Whoever walks the queue drops a request whose hold ran out: the
 * handoff (dlock_settle) at the front, its owner's own calls anywhere in it,
 * and the worker (dlock_queue_expire), woken when a hold ends.
 *
 * Its grant: whoever frees the lease grants the front of the queue, a
 * blocked backend or a queued request alike; the request's lease runs its
 * ttl from then, held by its owner, who learns its token by asking again
 * (dlock_enqueue, or dlock_try: both return a holder its token) or from the
 * "granted" change event.  Such a lease is memory-only for its whole life
 * (as with dlock.durable off): it is granted outside any transaction of its
 * owner (in another backend's commit callback, in the worker), and no
 * transaction of the granter may write a row for it.  Writing its row later,
 * when its owner collects it, would not make it durable from its grant: a
 * crash before then loses it anyway, so its owner must already cope with a
 * lost lease, by its fencing token, which never goes backwards.  Its ttl is
 * bounded as any memory-only lease's (dlock.failover_grace).  Its owner
 * may act on it (it learned the token from the event), so a crash restart's
 * grace covers it: a durable request raises the longest unflushed ttl to its
 * own before it joins (dlock_lease_enqueue, grace.c).  Queued
 * requests themselves live in shared memory only: neither a restart nor a
 * crash keeps them, their owners enqueue again.
 *
 * A queued request belongs to its owner within the role that made it, as a
 * lease does: another role's dlock_dequeue leaves it, unless that role has
 * the privileges of the request's role.
 *
 * Locking: a request, like its queue, under its name's partition lock; the
 * pool's free list under its spinlock (wait.c); the worker takes one
 * partition lock at a time.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/acl.h"

#include "queue.h"
#include "tokens.h"
#include "wait.h"

/*
 * The queued request of owner within roleid (InvalidOid: any role) on
 * head's name, or NULL
 */
static DLockWaiter *
own_request(DLockEntry *head, const DLockOwner *owner, Oid roleid)
{
	dlist_iter	iter;

	dlist_foreach(iter, &head->u.h.waiters)
	{
		DLockWaiter *w = dlist_container(DLockWaiter, node, iter.cur);

		if (w->proc == NULL && (w->roleid == roleid || !OidIsValid(roleid)) &&
			dlock_owner_equal(&w->owner, owner))
			return w;
	}
	return NULL;
}

/*
 * Drops the queued requests of head's name whose hold ran out, wherever
 * they are in its queue.  Returns whether it dropped any: the caller settles
 * the name then.  The caller holds the partition lock exclusively.
 */
bool
dlock_queue_prune(DLockEntry *head, int64 now)
{
	dlist_mutable_iter iter;
	bool		dropped = false;

	dlist_foreach_modify(iter, &head->u.h.waiters)
	{
		DLockWaiter *w = dlist_container(DLockWaiter, node, iter.cur);

		if (w->proc != NULL || w->hold_until > now)
			continue;
		dlock_count(DLOCK_STAT_QUEUE_DROPPED);
		dlock_queued_remove(w);
		dropped = true;
	}
	return dropped;
}

/*
 * Queues the request at the tail of head's queue, or keeps the caller's
 * queued request in its place, with the ttl and mode asked now; either way
 * it stays queued for hold from now.  Returns false when no entry is free
 * for a new one.  The caller holds the partition lock exclusively.
 */
bool
dlock_queue_join(DLockEntry *head, const DLockRequest *req, int64 hold,
				 int64 now)
{
	DLockWaiter *w = own_request(head, &req->owner, req->roleid);

	if (w == NULL)
	{
		if (!dlock_reserve(head))
			return false;
		w = dlock_queued_new(head, &req->owner, req->roleid, req->ttl, req->mode);
		/* (cannot happen: each slot in use holds one of the entries) */
		if (w == NULL)
		{
			dlock_unreserve(head);
			return false;
		}
	}
	w->ttl = req->ttl;
	w->mode = (uint8) req->mode;
	w->hold = hold;
	w->hold_until = now + hold;
	w->deadline_wall = dlock_mono_to_wall(w->hold_until, now, GetCurrentTimestamp());
	/* the worker drops it on time if nobody walks the queue before */
	dlock_expiry_moved(w->hold_until);
	return true;
}

/*
 * dlock_dequeue: the caller's queued request on the name leaves its queue.
 * Returns false when it has none (one whose hold ran out has left already).
 * A request of another role is left only by a member of that role, as a
 * lease is released.
 */
bool
dlock_queue_leave(const DLockRequest *req)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	Oid			roleid = req->roleid;

	dlock_wake_init();
	for (;;)
	{
		DLockEntry *head;
		DLockWaiter *w = NULL;
		Oid			other_role = InvalidOid;
		int64		now;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		now = dlock_mono_now();
		head = dlock_find(&req->key, req->hash);
		if (head != NULL)
		{
			bool		changed = dlock_queue_prune(head, now);

			w = own_request(head, &req->owner, roleid);
			if (w != NULL)
				dlock_queued_remove(w);
			else if ((w = own_request(head, &req->owner, InvalidOid)) != NULL)
			{
				other_role = w->roleid;
				w = NULL;
			}
			if (w != NULL || changed)
				dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
		}
		LWLockRelease(lock);
		dlock_wake_all();

		/*
		 * The owner's request was made by another role: members of that role
		 * may leave it.  The check reads catalogs, so not under the lock.
		 */
		if (w != NULL || !OidIsValid(other_role) || roleid != req->roleid ||
			!has_privs_of_role(req->roleid, other_role))
			return w != NULL;
		roleid = other_role;
	}
}

/*
 * For the worker: drops the queued requests whose hold ran out and grants
 * those at the front of their queue that fit now (held back by a grace
 * after a promotion, or by tokens not reserved yet).  Returns when the next
 * hold ends (0: none).
 *
 * The pool is read without a lock to find the slots in use; each is looked
 * at again under the partition lock of the name it was seen with: a slot
 * is only filled and emptied under its name's partition lock.
 */
int64
dlock_queue_expire(void)
{
	DLockWaiter *slots;
	int			nslots;
	int64		next = 0;

	if (dlock_queued_count() == 0)
		return 0;
	dlock_token_prefetch();
	dlock_wake_init();
	slots = dlock_waiter_slots(&nslots);
	for (int i = MaxBackends; i < nslots; i++)
	{
		DLockWaiter *w = &slots[i];
		uint32		hash = w->hash;
		LWLock	   *lock;
		int64		now;

		if (w->state != DLOCK_WAIT_QUEUED)
			continue;
		lock = dlock_partition_lock(hash);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		now = dlock_mono_now();
		if (w->state == DLOCK_WAIT_QUEUED && w->hash == hash)
		{
			DLockEntry *head = w->head;

			if (w->hold_until <= now)
			{
				dlock_count(DLOCK_STAT_QUEUE_DROPPED);
				dlock_queued_remove(w);
				dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_WORKER, false);
			}
			else if (dlist_head_node(&head->u.h.waiters) == &w->node)
				dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_WORKER, false);
			if (w->state == DLOCK_WAIT_QUEUED && (next == 0 || w->hold_until < next))
				next = w->hold_until;
		}
		LWLockRelease(lock);
		dlock_wake_all();
	}
	return next;
}
