/*
 * lease.c
 *		Acquire, renew and release: the rules of a lease.
 *
 * A lease is held by an owner string within a role.  It is live until its
 * expiry on the monotonic clock; after that the name is free for the next
 * caller even if no sweeper has run.  Re-acquiring by the live holder is
 * idempotent: same token, lease extended.
 */
#include "postgres.h"

#include "common/int.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/memutils.h"

#include "lease.h"
#include "persist.h"
#include "wait.h"
#include "xact.h"

static bool
is_holder(const DLockEntry *entry, const DLockRequest *req)
{
	return entry->roleid == req->roleid &&
		dlock_owner_equal(&entry->owner, &req->owner);
}

/*
 * Frees every expired lease, handing each to its next waiter.  Only used
 * when the table is full, so the full scan is acceptable.
 */
static bool
reclaim_expired(void)
{
	HASH_SEQ_STATUS status;
	DLockEntry *entry;
	PGPROC	  **wake;
	int			nwake = 0;
	int			nslots;
	int64		now = dlock_mono_now();
	bool		reclaimed = false;

	(void) dlock_waiter_slots(&nslots);
	wake = palloc(sizeof(PGPROC *) * nslots);

	dlock_lock_all_partitions(LW_EXCLUSIVE);
	dlock_scan_begin(&status);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		PGPROC	   *proc;

		if (!dlock_is_free(entry, now))
			continue;
		dlock_count(DLOCK_STAT_EXPIRED_BY_CALLER);
		reclaimed |= dlist_is_empty(&entry->waiters);
		proc = dlock_handoff(entry, dlock_key_hash(&entry->key), now);
		if (proc != NULL && nwake < nslots)
			wake[nwake++] = proc;
	}
	dlock_unlock_all_partitions();

	for (int i = 0; i < nwake; i++)
		dlock_wake(wake[i]);
	pfree(wake);
	return reclaimed;
}

static DLockEntry *
find_or_create_or_fail(const DLockRequest *req, LWLock *lock)
{
	DLockEntry *entry;
	bool		found;

	entry = dlock_find_or_create(&req->key, req->hash, &found);
	if (entry != NULL)
		return entry;

	LWLockRelease(lock);
	(void) reclaim_expired();
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = dlock_find_or_create(&req->key, req->hash, &found);
	if (entry != NULL)
		return entry;

	LWLockRelease(lock);
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("dlock lease table is full"),
			 errdetail("All %d leases allowed by dlock.max_locks are live or awaited.",
					   dlock_max_locks),
			 errhint("Release leases you no longer need, or increase dlock.max_locks and restart the server.")));
	return NULL;				/* keep compiler quiet */
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
	DLockEntry *entry;
	DLockOwner	owner;
	Oid			roleid;
	TimestampTz granted_at;
	int64		expires;
	int64		expected;
	int64		version;

	LWLockAcquire(lock, LW_SHARED);
	entry = dlock_find(&req->key, req->hash);
	if (entry == NULL || entry->token != token || !entry->durable)
	{
		LWLockRelease(lock);
		return 0;
	}
	memcpy(&owner, &entry->owner, offsetof(DLockOwner, str) + entry->owner.len);
	roleid = entry->roleid;
	granted_at = entry->granted_at;
	expires = new_expires != 0 ? new_expires : entry->expires;
	expected = entry->version;
	LWLockRelease(lock);

	version = dlock_persist_write(&req->key, &owner, roleid, token, granted_at,
								  dlock_mono_to_wall(expires, dlock_mono_now(),
													 GetCurrentTimestamp()),
								  expected, is_new);
	if (version == 0 || new_expires != 0)
		return version;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = dlock_find(&req->key, req->hash);
	if (entry != NULL && entry->token == token)
	{
		entry->version = version;
		if (entry->expires != expires)
			dlock_set_expires(entry, req->hash, expires);
	}
	LWLockRelease(lock);
	return version;
}

/* The row version shared memory has for the lease with token, or -1. */
static int64
row_version(const DLockRequest *req, uint64 token)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *entry;
	int64		version = -1;

	LWLockAcquire(lock, LW_SHARED);
	entry = dlock_find(&req->key, req->hash);
	if (entry != NULL && entry->token == token)
		version = entry->version;
	LWLockRelease(lock);
	return version;
}

uint64
dlock_lease_acquire(const DLockRequest *req, int64 timeout)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *entry;
	PGPROC	   *wake = NULL;
	int64		now;
	uint64		token;
	bool		was_new = true;
	bool		durable;
	int64		prior_expires = 0;
	int64		prior_version;

	dlock_xact_register();
	if (timeout != 0)
		dlock_wait_prepare();

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = find_or_create_or_fail(req, lock);
	now = dlock_mono_now();
	prior_version = entry->version;

	/* An expired lease is free: its next waiter, if any, gets it first. */
	if (entry->token != 0 && dlock_is_free(entry, now))
	{
		dlock_count(DLOCK_STAT_EXPIRED_BY_CALLER);
		if (!dlist_is_empty(&entry->waiters))
			wake = dlock_handoff(entry, req->hash, now);
	}

	if (dlock_is_free(entry, now))
	{
		dlock_grant(entry, req->hash, &req->owner, req->roleid, MyProcPid,
					req->ttl, now, req->durable);
		dlock_count(DLOCK_STAT_IMMEDIATE);
	}
	else if (dlock_is_live(entry, now) && is_holder(entry, req))
	{
		was_new = false;
		prior_expires = entry->expires;
		dlock_set_expires(entry, req->hash, now + req->ttl);
		entry->holder_pid = MyProcPid;
	}
	else if (timeout == 0)
	{
		LWLockRelease(lock);
		dlock_wake(wake);
		return 0;
	}
	else
	{
		int64		deadline = 0;

		if (timeout > 0 && !pg_add_s64_overflow(now, timeout, &deadline))
			deadline = Max(deadline, 1);
		else
			deadline = 0;
		dlock_enqueue(entry, req->hash, &req->owner, req->roleid, req->ttl,
					  deadline, req->durable);
		LWLockRelease(lock);
		dlock_wake(wake);

		token = dlock_sleep();
		if (token == 0)
			return 0;
		/* logged first, so an error while writing the row undoes the grant */
		dlock_xact_acquired(req, token, true, 0, row_version(req, token));
		if (req->durable)
			(void) persist_lease(req, token, 0, true);
		return token;
	}

	token = entry->token;
	durable = entry->durable;
	LWLockRelease(lock);
	dlock_wake(wake);
	dlock_xact_acquired(req, token, was_new, prior_expires, prior_version);
	if (durable)
		(void) persist_lease(req, token, 0, was_new);
	return token;
}

/*
 * Finds the caller's live lease: its token, version and whether it is
 * durable.  Returns false when the caller holds none.
 */
static bool
held_lease(const DLockRequest *req, uint64 *token, int64 *version, bool *durable,
		   int64 *now, bool pin)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	Oid			member_of = InvalidOid;

	for (;;)
	{
		DLockEntry *entry;
		bool		held = false;
		Oid			other_role = InvalidOid;

		LWLockAcquire(lock, pin ? LW_EXCLUSIVE : LW_SHARED);
		*now = dlock_mono_now();
		entry = dlock_find(&req->key, req->hash);
		if (entry != NULL && dlock_is_live(entry, *now) &&
			dlock_owner_equal(&entry->owner, &req->owner))
		{
			if (entry->roleid == req->roleid || entry->roleid == member_of)
			{
				*token = entry->token;
				*version = entry->version;
				*durable = entry->durable;
				held = true;
				if (pin)
					dlock_pin(entry, req->hash, 1);
			}
			else
				other_role = entry->roleid;
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
	uint64		token;
	int64		version;
	bool		durable;

	struct DLockOp *op;

	dlock_xact_register();
	if (dlock_xact_release_pending(req))
		return false;
	/* pinned until our transaction ends, so it cannot expire before commit */
	op = dlock_xact_renew(req);
	if (!held_lease(req, &token, &version, &durable, &now, true))
		return false;
	dlock_xact_renew_set(op, token, now + req->ttl, 0);
	if (durable)
		dlock_xact_renew_set(op, token, now + req->ttl,
							 persist_lease(req, token, now + req->ttl, false));
	*expires_at = dlock_mono_to_wall(now + req->ttl, now, GetCurrentTimestamp());
	return true;
}

bool
dlock_lease_release(const DLockRequest *req, uint64 token)
{
	int64		now;
	uint64		held;
	int64		version;
	bool		durable;

	dlock_xact_register();
	if (dlock_xact_release_pending(req) ||
		!held_lease(req, &held, &version, &durable, &now, false) ||
		(token != 0 && token != held))
		return false;
	dlock_xact_release(req, held, durable);
	if (durable)
		dlock_persist_delete(&req->key, held, version);
	return true;
}

/*
 * Releases whatever lease is live on the name, for any owner (at commit, as
 * a release would).  Returns false when there is none; else fills in what
 * was broken, for the caller's log line.
 */
bool
dlock_lease_force_release(const DLockRequest *req, DLockOwner *owner, Oid *roleid,
						  uint64 *token)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	DLockEntry *entry;
	DLockRequest holder;
	int64		version = 0;
	bool		durable = false;
	bool		found = false;

	dlock_xact_register();
	memcpy(&holder, req, sizeof(DLockRequest));
	LWLockAcquire(lock, LW_SHARED);
	entry = dlock_find(&req->key, req->hash);
	if (entry != NULL && dlock_is_live(entry, dlock_mono_now()))
	{
		memcpy(&holder.owner, &entry->owner, sizeof(DLockOwner));
		holder.roleid = entry->roleid;
		*token = entry->token;
		version = entry->version;
		durable = entry->durable;
		found = true;
	}
	LWLockRelease(lock);
	if (!found || dlock_xact_release_pending(&holder))
		return false;

	memcpy(owner, &holder.owner, sizeof(DLockOwner));
	*roleid = holder.roleid;
	dlock_xact_release(&holder, *token, durable);
	if (durable)
		dlock_persist_delete(&req->key, *token, version);
	return true;
}

/*
 * Checks that token is the token of the live lease on the name and pins
 * that lease until the caller's transaction ends, so no newer token can be
 * granted meanwhile.  On failure says why; *current is the live token.
 */
DLockFenceResult
dlock_lease_fence(const DLockRequest *req, uint64 token, uint64 *current)
{
	LWLock	   *lock = dlock_partition_lock(req->hash);
	struct DLockOp *op;
	DLockEntry *entry;
	DLockFenceResult result;
	Oid			member_of = InvalidOid;

	dlock_xact_register();
	op = dlock_xact_fence(req);
	for (;;)
	{
		Oid			other_role = InvalidOid;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		entry = dlock_find(&req->key, req->hash);
		*current = entry != NULL ? entry->token : 0;
		if (entry == NULL || entry->token < token)
			result = DLOCK_FENCE_UNKNOWN;
		else if (entry->token > token)
			result = DLOCK_FENCE_STALE;
		else if (!dlock_is_live(entry, dlock_mono_now()))
			result = DLOCK_FENCE_EXPIRED;
		else if (entry->roleid != req->roleid && entry->roleid != member_of)
		{
			other_role = entry->roleid;
			result = DLOCK_FENCE_ROLE;
		}
		else
		{
			dlock_pin(entry, req->hash, 1);
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
	DLockEntry *entry;
	PGPROC	   *wake = NULL;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = dlock_find(key, hash);
	if (entry != NULL && entry->token == token)
	{
		if (row_deleted)
			entry->version = 0;
		wake = dlock_handoff(entry, hash, dlock_mono_now());
	}
	LWLockRelease(lock);
	dlock_wake(wake);
}

/*
 * Moves the expiry of the lease if it still carries token (an undone
 * re-acquisition, or a renewal at commit), and drops the pin a renewal took
 * (unpin, also on abort), and sets the row version shown (version -1: keep).
 * A lease left expired goes to its next waiter.
 */
void
dlock_lease_set_expiry(const DLockKey *key, uint32 hash, uint64 token,
					   int64 expires, bool unpin, int64 version)
{
	LWLock	   *lock = dlock_partition_lock(hash);
	DLockEntry *entry;
	PGPROC	   *wake = NULL;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = dlock_find(key, hash);
	if (entry != NULL && entry->token == token)
	{
		int64		now = dlock_mono_now();

		if (unpin && entry->pins > 0)
			dlock_pin(entry, hash, -1);
		if (expires != 0)
			dlock_set_expires(entry, hash, expires);
		if (version >= 0)
			entry->version = version;
		if (dlock_is_free(entry, now) && !dlist_is_empty(&entry->waiters))
		{
			dlock_count(DLOCK_STAT_EXPIRED_BY_CALLER);
			wake = dlock_handoff(entry, hash, now);
		}
		else
			wake = dlock_head_needing_timer(entry);
	}
	LWLockRelease(lock);
	dlock_wake(wake);
}

/*
 * Ends leases that are due (past expiry and lock-delay), partition by
 * partition, at most batch per partition per lock hold: each goes to its next
 * waiter, or is dropped, its row left for dlock_sweep().  Returns when the
 * next lease falls due (0: none), or now when a batch was cut short.
 * *mine counts this database's dropped memory-only leases.
 */
int64
dlock_lease_expire_due(int batch, DLockStat stat, int *mine)
{
	PGPROC	  **wake = palloc(sizeof(PGPROC *) * batch);
	int64		next = 0;
	int64		now = dlock_mono_now();

	for (int p = 0; p < DLOCK_PARTITIONS; p++)
	{
		LWLock	   *lock = dlock_partition_lock((uint32) p);
		DLockEntry *entry;
		int			n = 0;
		int			nwake = 0;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		while ((entry = dlock_earliest(p)) != NULL && dlock_free_at(entry) <= now)
		{
			uint32		hash = dlock_key_hash(&entry->key);

			if (n++ == batch)
			{
				next = now;		/* more to do: come back at once */
				break;
			}
			dlock_count(stat);
			if (!dlist_is_empty(&entry->waiters))
			{
				wake[nwake++] = dlock_handoff(entry, hash, now);
				continue;
			}
			if (entry->durable)
				dlock_persist_note_dead_row(entry->key.dbid);
			else if (entry->key.dbid == MyDatabaseId)
				(*mine)++;
			dlock_remove(entry, hash);
		}
		if (entry != NULL && next != now &&
			(next == 0 || dlock_free_at(entry) < next))
			next = dlock_free_at(entry);
		LWLockRelease(lock);
		for (int i = 0; i < nwake; i++)
			dlock_wake(wake[i]);
	}
	pfree(wake);
	return next;
}
