/*
 * lease.c
 *		What a holder does with its lease: renew, release, force release,
 *		fence.  Acquiring is acquire.c's.
 *
 * Each finds the caller's live lease (held_lease()), once no other
 * transaction is granting it, and acts on it under the name's partition
 * lock; the row write and the change in shared memory follow the caller's
 * transaction (xact.c).
 *
 * Locking: one partition lock at a time, never while sleeping or reading
 * the lease table; waits for a granting or releasing transaction go
 * through dlock_wait_for_decider(), holding no lock.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "common/int.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "grantwait.h"
#include "lease.h"
#include "settings.h"
#include "store.h"
#include "wait.h"
#include "xact.h"

/* What a caller needs to know of the lease it holds */
typedef struct HeldLease
{
	uint64		token;
	bool		durable;
	int64		expires;
	bool		hold;			/* it has a minimum hold (and a hold row) */
	int64		hold_until;		/* its minimum hold's end; 0: none */
	bool		hold_released;	/* released already, within that hold */
	TransactionId adopted;		/* pinned with its deferred row to write, as
								 * this xid (dlock_adopt); else invalid */
	bool		marked;			/* deferred, read by this release, which is
								 * its decider now (see DLockEntry) */
	DLockRow	row;			/* that row, but for expires_at and ttl */
} HeldLease;

/*
 * Finds the caller's live lease, pinned if pin, once no other transaction
 * is granting or releasing it.  A pinned deferred lease is adopted: the
 * caller writes its row (held_out->adopted).  A release (not pin) of a
 * deferred lease becomes its decider (held_out->marked): until it ends,
 * nobody else renews, extends or fences the lease, whose row would outlive
 * the release.  Returns false when the caller holds none: a lease whose
 * session or transaction ended within its minimum hold is held by nobody
 * (it cannot be renewed or released, only fenced and force-released).
 */
static bool
held_lease(const DLockRequest *req, HeldLease *held_out, int64 *now, bool pin)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	Oid			member_of = InvalidOid;

	/*
	 * a release marks a deferred lease: likely where this session defers
	 * rows (elsewhere it looks again, exclusively, if it finds one)
	 */
	bool		exclusive = pin || (req->durable && dlock_defer_rows);

	for (;;)
	{
		DLockEntry *head;
		DLockEntry *lease;
		dlist_mutable_iter iter;
		bool		held = false;
		Oid			other_role = InvalidOid;
		DLockDecider decider;
		bool		busy = false;
		int64		deadline = 0;
		bool		by_lock_timeout = false;
		bool		need_xid = false;
		bool		need_exclusive = false;

		held_out->adopted = InvalidTransactionId;
		held_out->marked = false;
		LWLockAcquire(lock, exclusive ? LW_EXCLUSIVE : LW_SHARED);
		*now = dlock_mono_now();
		head = dlock_find(&req->key, req->hash);
		if (head != NULL)
		{
			dlock_foreach_lease(lease, head, iter)
			{
				if (!dlock_is_live(lease, *now) || lease->bound_ended ||
					!dlock_owner_equal(&lease->owner, &req->owner))
					continue;
				if (lease->roleid != req->roleid && lease->roleid != member_of)
				{
					other_role = lease->roleid;
					continue;
				}
				held_out->token = lease->token;
				held_out->durable = lease->durable;
				held_out->expires = lease->expires;
				held_out->hold = (lease->min_hold != 0);
				held_out->hold_until = lease->hold_until;
				held_out->hold_released = (lease->released_at != 0);
				busy = dlock_lease_decider(lease, &decider);
				held = !busy;
				if (busy)
					deadline = dlock_lease_deadline(lease, *now, &by_lock_timeout);
				/* writing the deferred row takes an xid first, unlocked */
				need_xid = held && pin && lease->deferred &&
					!TransactionIdIsValid(GetTopTransactionIdIfAny());
				held = held && !need_xid;
				if (held && pin && !dlock_pin(lease))
				{
					LWLockRelease(lock);
					dlock_too_many_pinners(req);
				}
				/* a release's decision that it has no row must hold */
				need_exclusive = held && !pin && !exclusive && lease->deferred;
				held = held && !need_exclusive;
				if (held && !pin && lease->deferred &&
					!VirtualTransactionIdEquals(lease->decider, dlock_my_vxid()))
				{
					lease->decider = dlock_my_vxid();
					lease->decider_releases = true;
					held_out->marked = true;
				}
				if (held && pin && lease->deferred)
				{
					dlock_adopt(lease, GetTopTransactionIdIfAny());
					held_out->adopted = lease->grant_xid;
					held_out->durable = true;
					dlock_store_fill_row(&held_out->row, lease, 2);
				}
				break;
			}
		}
		LWLockRelease(lock);

		if (busy)
		{
			dlock_wait_for_decider(req, held_out->token, &decider, deadline, by_lock_timeout, true);
			continue;
		}
		if (need_xid)
		{
			(void) dlock_store_xid();
			continue;
		}
		if (need_exclusive)
		{
			exclusive = true;
			continue;
		}

		/*
		 * The owner's lease was taken by another role: members of that role
		 * may act on it.  The check reads catalogs, so not under the lock.
		 */
		if (held || !OidIsValid(other_role) ||
			!has_privs_of_role(req->roleid, other_role))
			return held;
		member_of = other_role;
	}
}

bool
dlock_lease_renew(const DLockRequest *req, TimestampTz *expires_at)
{
	int64		now;
	int64		version = 0;
	HeldLease	held;
	struct DLockOp *op;

	dlock_xact_register();
	if (dlock_xact_release_pending(req))
		return false;
	/* pinned until our transaction ends, so it cannot expire before commit */
	op = dlock_xact_renew(req);
	if (!held_lease(req, &held, &now, true))
		return false;
	*expires_at = dlock_mono_to_wall(now + req->ttl, now, GetCurrentTimestamp());
	dlock_xact_renew_set(op, held.token, now + req->ttl, 0);
	if (TransactionIdIsValid(held.adopted))
	{
		/* the first renewal of a deferred lease writes its row */
		dlock_xact_adopted(op, held.adopted);
		held.row.expires_at = *expires_at;
		held.row.ttl = req->ttl;
		dlock_store_insert(&req->key, &held.row);
		dlock_xact_renew_set(op, held.token, now + req->ttl, held.row.version);
	}
	else if (held.durable)
	{
		version = dlock_store_update(&req->key, held.token, *expires_at, req->ttl,
									 held.hold, 0);
		dlock_xact_renew_set(op, held.token, now + req->ttl, version);
		/* its row is gone: released from another session meanwhile */
		if (version == 0)
			return false;
	}
	return true;
}

/*
 * A release before the lease's minimum hold ended: at commit the lease
 * ends at the hold's end (or at its expiry, if sooner) instead of at once,
 * marked released; its durable rows say so (the lease row with a ttl that
 * makes a restored lease last at least as long, its hold row when).  Returns false when the row is gone
 * (released from another session meanwhile).
 */
static bool
release_within_hold(const DLockRequest *req, const HeldLease *held, int64 now)
{
	int64		expires = Min(held->hold_until, held->expires);
	TimestampTz wall_now = GetCurrentTimestamp();
	int64		version = 0;

	if (held->durable)
	{
		version = dlock_store_update(&req->key, held->token,
									 dlock_mono_to_wall(expires, now, wall_now),
									 Max(expires - now, 1), true, wall_now);
		if (version == 0)
			return false;
	}
	dlock_xact_release_hold(req, held->token, expires, version, wall_now);
	return true;
}

/*
 * Releases the caller's lease: true when it held one (with token, if given)
 * that was not released already.  Within its minimum hold, the lease ends
 * only when the hold does.
 */
bool
dlock_lease_release(const DLockRequest *req, uint64 token)
{
	int64		now;
	HeldLease	held;

	dlock_xact_register();
	if (dlock_xact_release_pending(req) || !held_lease(req, &held, &now, false))
		return false;
	if ((token != 0 && token != held.token) || held.hold_released)
	{
		/* not released after all: others may act on the lease again */
		if (held.marked)
			dlock_handoff_unmark(&req->key, req->hash, held.token);
		return false;
	}
	if (now < held.hold_until)
		return release_within_hold(req, &held, now);
	dlock_xact_release(req, held.token, held.durable, held.marked);
	if (held.durable)
		dlock_store_delete(&req->key, held.token, held.hold);
	return true;
}

/*
 * Releases every lease that is live on the name, whoever holds it (at
 * commit, as a release would).  Returns how many, and what was broken in
 * *broken (palloc'd), for the caller's log lines.
 */
int
dlock_lease_force_release(const DLockRequest *req, DLockBroken **broken)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *head;
	DLockEntry *lease;
	dlist_mutable_iter iter;
	DLockBroken *found;
	int			nfound = 0;
	int			n = 0;
	int64		now;

	dlock_xact_register();
	for (;;)
	{
		int			room;
		bool		complete;
		DLockDecider decider;
		bool		busy = false;
		uint64		wait_token = 0;
		int64		deadline = 0;
		bool		by_lock_timeout = false;

		LWLockAcquire(lock, LW_SHARED);
		head = dlock_find(&req->key, req->hash);
		room = head != NULL ? head->nleases : 0;
		LWLockRelease(lock);
		found = palloc(sizeof(DLockBroken) * Max(room, 1));

		/* exclusive: the force release becomes a deferred lease's decider */
		LWLockAcquire(lock, LW_EXCLUSIVE);
		now = dlock_mono_now();
		nfound = 0;
		head = dlock_find(&req->key, req->hash);
		complete = (head == NULL || head->nleases <= room);
		if (head != NULL && complete)
		{
			/* first, whether one is still being granted or released */
			dlock_foreach_lease(lease, head, iter)
			{
				if (!dlock_is_live(lease, now))
					continue;
				busy = dlock_lease_decider(lease, &decider);
				if (busy)
				{
					wait_token = lease->token;
					deadline = dlock_lease_deadline(lease, now, &by_lock_timeout);
					break;
				}
			}
		}
		if (head != NULL && complete && !busy)
		{
			dlock_foreach_lease(lease, head, iter)
			{
				if (!dlock_is_live(lease, now))
					continue;
				/* until we end, nobody writes its row (see held_lease) */
				found[nfound].marked = lease->deferred &&
					!VirtualTransactionIdEquals(lease->decider, dlock_my_vxid());
				if (found[nfound].marked)
				{
					lease->decider = dlock_my_vxid();
					lease->decider_releases = true;
				}
				memcpy(&found[nfound].owner, &lease->owner, sizeof(DLockOwner));
				found[nfound].roleid = lease->roleid;
				found[nfound].token = lease->token;
				found[nfound].durable = lease->durable;
				found[nfound].hold = (lease->min_hold != 0);
				nfound++;
			}
		}
		LWLockRelease(lock);
		if (complete && !busy)
			break;
		pfree(found);
		/* a lease still being granted or released, or more leases came */
		if (busy)
			dlock_wait_for_decider(req, wait_token, &decider, deadline, by_lock_timeout, true);
	}

	for (int i = 0; i < nfound; i++)
	{
		DLockRequest holder;

		memcpy(&holder, req, sizeof(DLockRequest));
		memcpy(&holder.owner, &found[i].owner, sizeof(DLockOwner));
		holder.roleid = found[i].roleid;
		if (!dlock_xact_force_release(&holder, found[i].token, found[i].durable,
									  found[i].marked))
			continue;
		found[n++] = found[i];
	}
	/* after every release is logged: a failed delete's rollback undoes all */
	for (int i = 0; i < n; i++)
	{
		if (found[i].durable)
			dlock_store_delete(&req->key, found[i].token, found[i].hold);
	}
	*broken = found;
	return n;
}

/*
 * Whether a fence writes a deferred lease's row: in a read-write transaction
 * that does not release the lease (the row would outlive that release).
 */
static bool
fence_writes_row(const DLockRequest *req, const DLockEntry *lease, bool may_write)
{
	return lease->deferred && may_write &&
		!dlock_xact_releases(&req->key, lease->token);
}

/*
 * Checks that token is the token of a live lease on the name and pins that
 * lease until the caller's transaction ends, so it cannot end meanwhile.
 * On failure says why; *current is the newest live token on the name.  A
 * deferred lease's row is written in a read-write transaction: a fenced
 * write that commits has its lease on disk before it (WAL is in order).
 */
DLockFenceResult
dlock_lease_fence(const DLockRequest *req, uint64 token, uint64 *current)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	struct DLockOp *op = NULL;
	DLockFenceResult result;
	Oid			member_of = InvalidOid;

	/* a transaction pins a lease once, however many rows it fences with it */
	bool		held = dlock_xact_fence_held(&req->key, token);
	bool		may_write = !XactReadOnly && !RecoveryInProgress();
	TransactionId adopted = InvalidTransactionId;
	DLockRow	row;

	dlock_xact_register();
	if (!held)
		op = dlock_xact_fence(req);
	for (;;)
	{
		Oid			other_role = InvalidOid;
		DLockEntry *head;
		DLockEntry *lease = NULL;
		DLockEntry *each;
		dlist_mutable_iter iter;
		int64		now;
		DLockDecider decider;
		bool		busy = false;
		int64		deadline = 0;
		bool		by_lock_timeout = false;
		bool		need_xid = false;

		LWLockAcquire(lock, held ? LW_SHARED : LW_EXCLUSIVE);
		now = dlock_mono_now();
		*current = 0;
		head = dlock_find(&req->key, req->hash);
		if (head != NULL)
		{
			dlock_foreach_lease(each, head, iter)
			{
				if (each->token == token)
					lease = each;
				if (each->token > *current &&
					(dlock_is_live(each, now) || each->token > token))
					*current = each->token;
			}
		}
		if (lease == NULL)
			result = *current > token ? DLOCK_FENCE_STALE : DLOCK_FENCE_UNKNOWN;
		else if (!dlock_is_live(lease, now))
			result = *current > token ? DLOCK_FENCE_STALE : DLOCK_FENCE_EXPIRED;
		else if (lease->roleid != req->roleid && lease->roleid != member_of)
		{
			other_role = lease->roleid;
			result = DLOCK_FENCE_ROLE;
		}
		else if (held)
			result = DLOCK_FENCE_OK;
		else if ((busy = dlock_lease_decider(lease, &decider)))
		{
			/* a grant that may still be taken back, a release that may end it */
			deadline = dlock_lease_deadline(lease, now, &by_lock_timeout);
		}
		else if (fence_writes_row(req, lease, may_write) &&
				 !TransactionIdIsValid(GetTopTransactionIdIfAny()))
			need_xid = true;	/* its row's write takes one, unlocked */
		else if (!dlock_pin(lease))
		{
			LWLockRelease(lock);
			dlock_too_many_pinners(req);
		}
		else
		{
			if (fence_writes_row(req, lease, may_write))
			{
				dlock_adopt(lease, GetTopTransactionIdIfAny());
				adopted = lease->grant_xid;
				dlock_store_fill_row(&row, lease, 1);
				row.expires_at = dlock_mono_to_wall(lease->expires, now, GetCurrentTimestamp());
				/* a restored lease runs its ttl again: what it had left */
				row.ttl = Max(lease->expires - now, 1);
				dlock_xact_adopted(op, adopted);
			}
			dlock_xact_fence_set(op, token);
			result = DLOCK_FENCE_OK;
		}
		LWLockRelease(lock);
		if (busy)
		{
			dlock_wait_for_decider(req, token, &decider, deadline, by_lock_timeout, true);
			continue;
		}
		if (need_xid)
		{
			(void) dlock_store_xid();
			continue;
		}
		if (TransactionIdIsValid(adopted))
			dlock_store_insert(&req->key, &row);
		if (result != DLOCK_FENCE_ROLE || !has_privs_of_role(req->roleid, other_role))
			return result;
		member_of = other_role;
	}
}
