/*
 * lease.c
 *		Acquire, renew and release: the rules of a lease.
 *
 * A lease is held by an owner string within a role.  It is live until its
 * expiry on the monotonic clock; after that the name is free for the next
 * caller even if no sweeper has run.  Re-acquiring by the live holder is
 * idempotent: same token, lease extended.
 *
 * A name is a plain lock (one exclusive lease, or any number of shared ones)
 * or a semaphore of N permits (up to N leases).  Each lease has its own
 * owner, expiry and token.  A new request is granted at once only if it
 * fits and nobody is queued, so FIFO holds across modes.
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "common/int.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/memutils.h"

#include "lease.h"
#include "persist.h"
#include "wait.h"
#include "xact.h"

/* Ends every lease that is due now, for a caller that found the table full. */
static void
reclaim_expired(void)
{
	int			mine = 0;
	int64		next;

	do
		next = dlock_lease_expire_due(dlock_worker_batch, DLOCK_STAT_EXPIRED_BY_CALLER, &mine);
	while (next != 0 && next <= dlock_mono_now());
}

static void
table_full(void)
{
	if (dlock_full_in_database())
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("dlock lease table is full for database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errdetail("All %d entries allowed per database by dlock.max_locks_per_database are live leases or queued waits.",
						   dlock_max_locks_per_database),
				 errhint("Release leases you no longer need, or increase dlock.max_locks_per_database and reload the configuration.")));
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("dlock lease table is full"),
			 errdetail("All %d entries allowed by dlock.max_locks are live leases or queued waits.",
					   dlock_max_locks),
			 errhint("Release leases you no longer need, or increase dlock.max_locks and restart the server.")));
}

static void
kind_conflict(const DLockRequest *req, int permits)
{
	if (permits == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lock \"%.*s\" is not a semaphore", req->key.len, req->key.name),
				 errdetail("It is held or awaited as a plain lock; this call asked for %d permits.",
						   req->permits),
				 errhint("Every caller must ask for the same permits while a name is held or awaited.")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lock \"%.*s\" is a semaphore of %d permits", req->key.len, req->key.name,
					permits),
			 req->permits == 0 ?
			 errdetail("This call asked for a plain lock.") :
			 errdetail("This call asked for %d permits.", req->permits),
			 errhint("Every caller must ask for the same permits while a name is held or awaited.")));
}

static void
mode_conflict(const DLockRequest *req, DLockMode held)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("owner \"%.*s\" holds lock \"%.*s\" in %s mode, not %s",
					req->owner.len, req->owner.str, req->key.len, req->key.name,
					dlock_mode_name(held), dlock_mode_name(req->mode)),
			 errhint("Release the lease before asking for it in another mode.")));
}

/* The caller's live lease on the name (same owner and role), or NULL. */
static DLockEntry *
own_lease(DLockEntry *head, const DLockRequest *req, int64 now)
{
	dlist_mutable_iter iter;
	DLockEntry *lease;

	dlock_foreach_lease(lease, head, iter)
	{
		if (lease->roleid == req->roleid && dlock_is_live(lease, now) &&
			dlock_owner_equal(&lease->owner, &req->owner))
			return lease;
	}
	return NULL;
}

/*
 * Writes a lease that shared memory now holds with token to the table, if it
 * is durable: a new grant, an extension, or (with new_expires) a renewal.
 * Returns the row's new version (0: nothing written).  A grant or extension
 * then puts what it wrote back into shared memory, so the last writer of the
 * row is also the last word there (a renewal of the same lease from another
 * session may have committed meanwhile); a renewal's version is applied by
 * its commit.
 */
static int64
persist_lease(const DLockRequest *req, uint64 token, int64 new_expires, bool is_new)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *lease;
	DLockRow	row;
	int64		expires;
	int64		version;

	LWLockAcquire(lock, LW_SHARED);
	lease = dlock_find_lease(&req->key, req->hash, token);
	if (lease == NULL || !lease->durable)
	{
		LWLockRelease(lock);
		return 0;
	}
	memcpy(&row.owner, &lease->owner, offsetof(DLockOwner, str) + lease->owner.len);
	row.roleid = lease->roleid;
	row.token = token;
	row.granted_at = lease->granted_at;
	row.mode = (DLockMode) lease->mode;
	row.permits = dlock_head_of(lease)->permits;
	row.takeover = is_new && row.mode == DLOCK_EXCLUSIVE && row.permits == 0 &&
		dlock_head_of(lease)->stale_rows;
	expires = new_expires != 0 ? new_expires : lease->expires;
	row.version = lease->version;
	LWLockRelease(lock);

	row.expires_at = dlock_mono_to_wall(expires, dlock_mono_now(), GetCurrentTimestamp());
	version = dlock_persist_write(&req->key, &row, is_new);
	if (version == 0 || new_expires != 0)
		return version;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(&req->key, req->hash, token);
	if (lease != NULL)
	{
		lease->version = version;
		/* a release from another session must wait until this commits */
		if (is_new)
			lease->grant_xid = GetTopTransactionIdIfAny();
		if (row.takeover)
			dlock_head_of(lease)->stale_rows = false;
		if (lease->expires != expires)
		{
			dlock_set_expires(lease, expires);
			dlock_settle(dlock_head_of(lease), dlock_mono_now(),
						 DLOCK_STAT_EXPIRED_BY_CALLER, false);
		}
	}
	LWLockRelease(lock);
	dlock_wake_all();
	return version;
}

/*
 * Whether a try is refused, seen under a shared lock: many callers trying
 * one busy name would otherwise all queue for its exclusive lock.  Anything
 * that needs the full path (an ended lease to clear, the caller's own lease,
 * another kind of name) answers false.
 */
static bool
refused_at_a_glance(const DLockRequest *req)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *head;
	DLockEntry *lease;
	dlist_mutable_iter iter;
	bool		refused = false;

	LWLockAcquire(lock, LW_SHARED);
	head = dlock_find(&req->key, req->hash);
	if (head != NULL && head->permits == req->permits)
	{
		int64		now = dlock_mono_now();

		refused = true;
		dlock_foreach_lease(lease, head, iter)
		{
			if (dlock_is_free(lease, now) ||
				(lease->roleid == req->roleid &&
				 dlock_owner_equal(&lease->owner, &req->owner)))
			{
				refused = false;
				break;
			}
		}
		if (refused && dlist_is_empty(&head->u.h.waiters))
			refused = dlock_conflicts(head, req->mode, now);
	}
	LWLockRelease(lock);
	return refused;
}

uint64
dlock_lease_acquire(const DLockRequest *req, int64 timeout)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *head;
	DLockEntry *lease;
	int64		now;
	uint64		token;
	bool		was_new = true;
	int64		prior_expires = 0;
	int64		prior_version = 0;
	bool		retried = false;
	bool		found;
	bool		durable;

	if (timeout == 0 && refused_at_a_glance(req))
		return 0;
	dlock_xact_register();
	if (timeout != 0)
		dlock_wait_prepare();

retry:
	LWLockAcquire(lock, LW_EXCLUSIVE);
	now = dlock_mono_now();
	head = dlock_find_or_create(&req->key, req->hash, &found);
	if (head == NULL)
		goto full;
	/* ended leases go first, to the waiters they free the name for */
	if (found)
		dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, true);
	if (head->nleases == 0 && dlist_is_empty(&head->u.h.waiters))
		head->permits = req->permits;
	else if (head->permits != req->permits)
	{
		int			permits = head->permits;

		LWLockRelease(lock);
		dlock_wake_all();
		kind_conflict(req, permits);
	}

	if ((lease = own_lease(head, req, now)) != NULL)
	{
		if (lease->mode != req->mode)
		{
			DLockMode	held = (DLockMode) lease->mode;

			LWLockRelease(lock);
			dlock_wake_all();
			mode_conflict(req, held);
		}
		was_new = false;
		prior_expires = lease->expires;
		prior_version = lease->version;
		dlock_set_expires(lease, now + req->ttl);
		lease->holder_pid = MyProcPid;
		/* a shorter ttl moves the end closer: the head waiter re-arms */
		dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, true);
	}
	else if (dlist_is_empty(&head->u.h.waiters) && !dlock_conflicts(head, req->mode, now))
	{
		lease = dlock_grant(head, &req->owner, req->roleid, MyProcPid, req->ttl, now,
							req->durable, req->mode, false);
		if (lease == NULL)
			goto full;
		dlock_count(DLOCK_STAT_IMMEDIATE);
	}
	else if (timeout == 0)
	{
		LWLockRelease(lock);
		dlock_wake_all();
		return 0;
	}
	else
	{
		int64		deadline = 0;

		/* a waiter that may need an entry of its own counts it now */
		bool		reserve = (head->permits != 0 || req->mode != DLOCK_EXCLUSIVE);

		if (reserve && !dlock_reserve(head))
			goto full;
		if (timeout > 0 && !pg_add_s64_overflow(now, timeout, &deadline))
			deadline = Max(deadline, 1);
		else
			deadline = 0;
		dlock_enqueue(head, &req->owner, req->roleid, req->ttl, deadline,
					  req->durable, req->mode, reserve);
		LWLockRelease(lock);
		dlock_wake_all();

		token = dlock_sleep();
		if (token == 0)
			return 0;
		/* logged first, so an error while writing the row undoes the grant */
		dlock_xact_acquired(req, token, true, 0, 0);
		if (req->durable)
			(void) persist_lease(req, token, 0, true);
		return token;
	}

	token = lease->token;
	durable = lease->durable;
	LWLockRelease(lock);
	dlock_wake_all();
	dlock_xact_acquired(req, token, was_new, prior_expires, prior_version);
	if (durable)
		(void) persist_lease(req, token, 0, was_new);
	return token;

full:
	if (head != NULL)
		dlock_settle(head, now, DLOCK_STAT_EXPIRED_BY_CALLER, false);
	LWLockRelease(lock);
	dlock_wake_all();
	if (retried)
		table_full();
	reclaim_expired();
	retried = true;
	goto retry;
}

/* What a caller needs to know of the lease it holds */
typedef struct HeldLease
{
	uint64		token;
	int64		version;
	bool		durable;
	TransactionId grant_xid;
} HeldLease;

/*
 * Finds the caller's live lease.  Returns false when the caller holds none.
 */
static bool
held_lease(const DLockRequest *req, HeldLease *held_out, int64 *now, bool pin)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	Oid			member_of = InvalidOid;

	for (;;)
	{
		DLockEntry *head;
		DLockEntry *lease;
		dlist_mutable_iter iter;
		bool		held = false;
		Oid			other_role = InvalidOid;

		LWLockAcquire(lock, pin ? LW_EXCLUSIVE : LW_SHARED);
		*now = dlock_mono_now();
		head = dlock_find(&req->key, req->hash);
		if (head != NULL)
		{
			dlock_foreach_lease(lease, head, iter)
			{
				if (!dlock_is_live(lease, *now) ||
					!dlock_owner_equal(&lease->owner, &req->owner))
					continue;
				if (lease->roleid != req->roleid && lease->roleid != member_of)
				{
					other_role = lease->roleid;
					continue;
				}
				held_out->token = lease->token;
				held_out->version = lease->version;
				held_out->durable = lease->durable;
				held_out->grant_xid = lease->grant_xid;
				held = true;
				if (pin)
					dlock_pin(lease, 1);
				break;
			}
		}
		LWLockRelease(lock);

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
	HeldLease	held;
	struct DLockOp *op;

	dlock_xact_register();
	if (dlock_xact_release_pending(req))
		return false;
	/* pinned until our transaction ends, so it cannot expire before commit */
	op = dlock_xact_renew(req);
	if (!held_lease(req, &held, &now, true))
		return false;
	dlock_xact_renew_set(op, held.token, now + req->ttl, 0);
	if (held.durable)
		dlock_xact_renew_set(op, held.token, now + req->ttl,
							 persist_lease(req, held.token, now + req->ttl, false));
	*expires_at = dlock_mono_to_wall(now + req->ttl, now, GetCurrentTimestamp());
	return true;
}

bool
dlock_lease_release(const DLockRequest *req, uint64 token)
{
	int64		now;
	HeldLease	held;

	dlock_xact_register();
	if (dlock_xact_release_pending(req) ||
		!held_lease(req, &held, &now, false) ||
		(token != 0 && token != held.token))
		return false;
	dlock_xact_release(req, held.token, held.durable);
	if (held.durable)
		dlock_persist_delete(&req->key, held.token, held.version, held.grant_xid);
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

		LWLockAcquire(lock, LW_SHARED);
		head = dlock_find(&req->key, req->hash);
		room = head != NULL ? head->nleases : 0;
		LWLockRelease(lock);
		found = palloc(sizeof(DLockBroken) * Max(room, 1));

		LWLockAcquire(lock, LW_SHARED);
		now = dlock_mono_now();
		head = dlock_find(&req->key, req->hash);
		complete = (head == NULL || head->nleases <= room);
		if (head != NULL && complete)
		{
			dlock_foreach_lease(lease, head, iter)
			{
				if (!dlock_is_live(lease, now))
					continue;
				memcpy(&found[nfound].owner, &lease->owner, sizeof(DLockOwner));
				found[nfound].roleid = lease->roleid;
				found[nfound].token = lease->token;
				found[nfound].version = lease->version;
				found[nfound].durable = lease->durable;
				found[nfound].grant_xid = lease->grant_xid;
				nfound++;
			}
		}
		LWLockRelease(lock);
		if (complete)
			break;
		pfree(found);			/* more leases came meanwhile: look again */
	}

	for (int i = 0; i < nfound; i++)
	{
		DLockRequest holder;

		memcpy(&holder, req, sizeof(DLockRequest));
		memcpy(&holder.owner, &found[i].owner, sizeof(DLockOwner));
		holder.roleid = found[i].roleid;
		if (dlock_xact_release_pending(&holder))
			continue;
		dlock_xact_release(&holder, found[i].token, found[i].durable);
		if (found[i].durable)
			dlock_persist_delete(&req->key, found[i].token, found[i].version,
								 found[i].grant_xid);
		found[n++] = found[i];
	}
	*broken = found;
	return n;
}

/*
 * Checks that token is the token of a live lease on the name and pins that
 * lease until the caller's transaction ends, so it cannot end meanwhile.
 * On failure says why; *current is the newest live token on the name.
 */
DLockFenceResult
dlock_lease_fence(const DLockRequest *req, uint64 token, uint64 *current)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	struct DLockOp *op;
	DLockFenceResult result;
	Oid			member_of = InvalidOid;

	dlock_xact_register();
	op = dlock_xact_fence(req);
	for (;;)
	{
		Oid			other_role = InvalidOid;
		DLockEntry *head;
		DLockEntry *lease = NULL;
		DLockEntry *each;
		dlist_mutable_iter iter;
		int64		now;

		LWLockAcquire(lock, LW_EXCLUSIVE);
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
		else
		{
			dlock_pin(lease, 1);
			dlock_xact_renew_set(op, token, 0, 0);
			result = DLOCK_FENCE_OK;
		}
		LWLockRelease(lock);
		if (result != DLOCK_FENCE_ROLE || !has_privs_of_role(req->roleid, other_role))
			return result;
		member_of = other_role;
	}
}

void
dlock_lease_free(const DLockKey *key, uint32 hash, uint64 token, bool row_deleted)
{
	LWLock	   *lock = dlock_partition_lock(hash);
	DLockEntry *lease;

	dlock_wake_init();
	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(key, hash, token);
	if (lease != NULL)
	{
		DLockEntry *head = dlock_head_of(lease);

		if (row_deleted)
			lease->version = 0;
		dlock_end_lease(lease);
		dlock_settle(head, dlock_mono_now(), DLOCK_STAT_EXPIRED_BY_CALLER, false);
	}
	LWLockRelease(lock);
	dlock_wake_all();
}

/*
 * Moves the expiry of the lease if it still carries token (an undone
 * re-acquisition, or a renewal at commit), and drops the pin a renewal took
 * (unpin, also on abort), and sets the row version shown (version -1: keep).
 * A lease left expired goes to the next waiters.
 */
void
dlock_lease_set_expiry(const DLockKey *key, uint32 hash, uint64 token,
					   int64 expires, bool unpin, int64 version)
{
	LWLock	   *lock = dlock_partition_lock(hash);
	DLockEntry *lease;

	dlock_wake_init();
	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(key, hash, token);
	if (lease != NULL)
	{
		if (unpin && lease->pins > 0)
			dlock_pin(lease, -1);
		if (expires != 0)
			dlock_set_expires(lease, expires);
		if (version >= 0)
			lease->version = version;
		dlock_settle(dlock_head_of(lease), dlock_mono_now(), DLOCK_STAT_EXPIRED_BY_CALLER, false);
	}
	LWLockRelease(lock);
	dlock_wake_all();
}

/*
 * Ends leases that are due (past expiry and lock-delay), partition by
 * partition, at most batch per partition per lock hold: the next waiters get
 * the name, and a durable lease's row is left for dlock_sweep().  Returns
 * when the next lease falls due (0: none), or now when a batch was cut
 * short.  *mine counts this database's ended memory-only leases.
 */
int64
dlock_lease_expire_due(int batch, DLockStat stat, int *mine)
{
	int64		next = 0;
	bool		more = false;

	dlock_wake_init();
	dlock_token_prefetch();
	for (int p = 0; p < DLOCK_PARTITIONS; p++)
	{
		LWLock	   *lock = dlock_partition_lock((uint32) p);
		DLockEntry *lease;
		int64		now;
		int			n = 0;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		/* read per partition: leases granted here run from this moment */
		now = dlock_mono_now();
		while ((lease = dlock_earliest(p)) != NULL && dlock_free_at(lease) <= now)
		{
			DLockEntry *head = dlock_head_of(lease);

			if (n++ == batch)
			{
				more = true;	/* come back at once */
				break;
			}
			dlock_count(stat);
			if (!lease->durable && lease->key.dbid == MyDatabaseId)
				(*mine)++;
			dlock_end_lease(lease);
			dlock_settle(head, now, stat, false);
		}
		if (lease != NULL && (next == 0 || dlock_free_at(lease) < next))
			next = dlock_free_at(lease);
		LWLockRelease(lock);
		dlock_wake_all();
	}
	return more ? dlock_mono_now() : next;
}
