/*
 * rebuild.c
 *		Shared memory rebuilt from the lease table: before any call is
 *		served in a database after a start (a restart, a crash, a promotion)
 *		or after the extension was created again, its leases are restored
 *		from its table.  Only leases that could have been live together,
 *		and that were live at the last moment the old server is known to
 *		have reached, come back (the rule is load_rows's).
 *
 * One backend loads a database; the others wait for it on the slots'
 * condition variable, interruptibly, and take over if it dies.
 *
 * Locking: the database's load state under the slots' spinlock, never held
 * while loading; each restored lease under its name's partition lock, taken
 * per row and never across SQL.
 */
#include "postgres.h"

#include "access/xlogrecovery.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/procarray.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "args.h"
#include "dbslots.h"
#include "engine.h"
#include "floor.h"
#include "store.h"
#include "table.h"
#include "tokens.h"

/* A restored name whose ended leases left rows: its next grant deletes them. */
static void
mark_stale_rows(const DLockKey *key)
{
	uint32		hash = dlock_key_hash(key);
	LWLock	   *lock = dlock_partition_lock(hash);
	DLockEntry *head;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	head = dlock_find(key, hash);
	if (head != NULL)
		head->stale_rows = true;
	LWLockRelease(lock);
}

/*
 * Restores one row's lease, to end at expires, unless the name already has a
 * live lease of the same owner and role.  Returns false when the table is
 * full.
 */
static bool
restore_row(const DLockKey *key, HeapTuple tuple, TupleDesc desc, int32 permits,
			int64 expires)
{
	uint32		hash = dlock_key_hash(key);
	LWLock	   *lock = dlock_partition_lock(hash);
	bool		isnull;
	text	   *owner = DatumGetTextPP(SPI_getbinval(tuple, desc, 2, &isnull));
	Oid			roleid = DatumGetObjectId(SPI_getbinval(tuple, desc, 3, &isnull));
	uint64		token = DatumGetInt64(SPI_getbinval(tuple, desc, 4, &isnull));
	DLockEntry *head;
	DLockEntry *lease = NULL;
	DLockEntry *each;
	dlist_mutable_iter iter;
	DLockOwner	o;
	bool		found;
	bool		skip = false;

	o.len = VARSIZE_ANY_EXHDR(owner);
	memcpy(o.str, VARDATA_ANY(owner), o.len);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	head = dlock_restore_head(key, hash, &found);
	if (head != NULL)
	{
		dlock_foreach_lease(each, head, iter)
		{
			if (each->token == token ||
				(each->roleid == roleid && dlock_owner_equal(&each->owner, &o)))
				skip = true;
		}
		if (head->nleases == 0)
			head->permits = permits;
		if (!skip)
			lease = dlock_restore(head, token);
	}
	if (lease != NULL)
	{
		memcpy(&lease->owner, &o, offsetof(DLockOwner, str) + o.len);
		lease->roleid = roleid;
		lease->granted_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 5, &isnull));
		lease->version = DatumGetInt64(SPI_getbinval(tuple, desc, 7, &isnull));
		lease->mode = DatumGetBool(SPI_getbinval(tuple, desc, 8, &isnull)) ?
			DLOCK_SHARED : DLOCK_EXCLUSIVE;
		lease->durable = true;
		lease->holder_pid = 0;
		dlock_set_expires(lease, expires);
	}
	else if (head != NULL)
		dlock_drop_if_unused(head);
	LWLockRelease(lock);
	return head != NULL && (skip || lease != NULL);
}

/*
 * Rebuilds this database's leases from its table.  Rows are read newest
 * first per name, and only a set that could have been live together is
 * restored: a row older than a newer exclusive lease, or than a newer
 * declaration of the name's kind, or beyond a semaphore's permits, belongs
 * to a lease that had ended (its grant's transaction may have committed
 * only after a release it could not see).  Expired rows are not revived but
 * still count as newer.  Rows that break the table's rules (a name or owner
 * too long, token not positive, expiry not finite, unknown mode, permits
 * not positive, ttl not within the limits) are skipped.
 *
 * The first rebuild since the server started (a restart, a crash or a
 * promotion) cannot compare rows with its own clock, which may have been
 * stepped while the server was down, or be a standby's: a row counts as
 * live if it expires after the latest moment the old server is known to
 * have reached, in that server's clock (its last commit replayed by archive
 * recovery or a standby, or the checkpoint it left), and its lease runs its
 * full ttl again from now, as etcd's leases do after a leader change.  A
 * lease may so end late, never early.  A later rebuild (the extension was
 * created again) judges rows by the clock of this server.
 */
static void
load_rows(bool after_start)
{
	AsOwner		saved;
	uint64		max_token = 0;
	uint64		floor;
	TimestampTz since = 0;
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	Datum		args[1];
	int64		mono_now;
	TimestampTz wall_now;
	text	   *prev = NULL;
	int32		kind = 0;
	int			kept = 0;
	int			seen = 0;
	bool		closed = false;
	int64		dead = 0;
	int64		stale = 0;
	int64		invalid = 0;
	int64		restored = 0;

	dlock_table_spi_begin(&saved, false, true);

	/*
	 * Read what is committed now, not what the caller's snapshot saw: a
	 * REPEATABLE READ transaction begun on a standby may make the first call
	 * after promotion, and must not miss leases replayed since.
	 */
	PushActiveSnapshot(GetLatestSnapshot());
	if (after_start)
		since = Max(GetLatestXTime(), dlock_dbs->checkpoint_time);
	if (since == 0)
		since = GetCurrentTimestamp();
	args[0] = TimestampTzGetDatum(since);
	if (SPI_execute_with_args(psprintf("SELECT name, owner, role, token, granted_at, expires_at, version,"
									   " mode OPERATOR(pg_catalog.=) 'shared', coalesce(permits, 0),"
									   " expires_at OPERATOR(pg_catalog.>) $1, %s, ttl"
									   " FROM %s ORDER BY name, token DESC", dlock_table_row_valid_sql(), dlock_lease_table),
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dlock lease table");

	mono_now = dlock_mono_now();
	wall_now = GetCurrentTimestamp();
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		text	   *name = DatumGetTextPP(SPI_getbinval(tuple, desc, 1, &isnull));
		int64		token = DatumGetInt64(SPI_getbinval(tuple, desc, 4, &isnull));
		bool		shared = DatumGetBool(SPI_getbinval(tuple, desc, 8, &isnull));
		int32		permits = DatumGetInt32(SPI_getbinval(tuple, desc, 9, &isnull));
		bool		live = DatumGetBool(SPI_getbinval(tuple, desc, 10, &isnull));
		bool		valid = DatumGetBool(SPI_getbinval(tuple, desc, 11, &isnull));
		int64		ttl = dlock_interval_usecs(DatumGetIntervalP(SPI_getbinval(tuple, desc, 12, &isnull)));
		int32		name_len = VARSIZE_ANY_EXHDR(name);
		bool		keep;
		int64		expires;
		DLockKey	key;

		if (!valid)
		{
			invalid++;
			continue;
		}
		max_token = Max(max_token, (uint64) token);

		/* the newest row of a name declares its kind */
		if (prev == NULL || VARSIZE_ANY_EXHDR(prev) != (Size) name_len ||
			memcmp(VARDATA_ANY(prev), VARDATA_ANY(name), name_len) != 0)
		{
			prev = name;
			kind = permits;
			kept = 0;
			seen = 0;
			closed = false;
		}
		if (closed || permits != kind)
			keep = false;
		else if (kind != 0)
			keep = live && kept < kind;
		else if (!shared)
		{
			/* an exclusive lease ended every older one before it began */
			keep = (seen == 0);
			closed = true;
		}
		else
			keep = true;
		if (permits != kind || (kind != 0 && live && !keep))
			closed = true;
		seen++;

		dlock_make_key(&key, VARDATA_ANY(name), name_len);
		if (!live || !keep)
		{
			if (!live)
				dead++;
			else
				stale++;
			/* rows newest first: a restored lease of the name came before */
			if (kept > 0)
				mark_stale_rows(&key);
			continue;
		}
		kept++;
		restored++;
		expires = mono_now + ttl;
		if (!after_start)
			expires = mono_now +
				(DatumGetTimestampTz(SPI_getbinval(tuple, desc, 6, &isnull)) - wall_now);
		if (!restore_row(&key, tuple, desc, kind, expires))
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("dlock lease table is full while restoring leases"),
					 errhint("Increase dlock.max_locks and restart the server.")));
	}
	if (after_start && SPI_processed > 0)
		ereport(LOG,
				(errmsg_plural("dlock restored " INT64_FORMAT " lease of %s, for its full ttl",
							   "dlock restored " INT64_FORMAT " leases of %s, each for its full ttl",
							   restored, restored, dlock_lease_table),
				 errdetail("Rows that expired before %s, when the server that wrote them was last known to be running, belong to leases that had ended.",
						   timestamptz_to_str(since))));
	if (stale > 0 || invalid > 0)
		ereport(LOG,
				(errmsg("dlock skipped " INT64_FORMAT " ended and " INT64_FORMAT " invalid lease rows of %s while restoring leases",
						stale, invalid, dlock_lease_table)));
	floor = dlock_floor_read();
	SpinLockAcquire(&dlock_dbs->mutex);
	dlock_dead_rows_add(dlock_my_slot - dlock_dbs->slots, (uint32) Min(dead + stale + invalid, INT_MAX / 2));
	pg_atomic_write_u64(&dlock_my_slot->token_floor, floor);
	if (after_start && restored > 0)
	{
		dlock_my_slot->stale_expiries = true;
		dlock_my_slot->restores++;
	}
	SpinLockRelease(&dlock_dbs->mutex);
	PopActiveSnapshot();
	dlock_table_spi_end(&saved);
	dlock_token_raise_floor(Max(max_token + 1, floor));
	/* a sweeper moves the restored leases' rows to this clock */
	if (after_start && restored > 0)
		dlock_wake_watcher();
}

static void
load_database(DbSlot *slot, Oid old_relid, Oid relid)
{
	PG_TRY();
	{
		if (OidIsValid(old_relid) && old_relid != relid)
			dlock_db_purge(MyDatabaseId);
		load_rows(!slot->loaded);
	}
	PG_CATCH();
	{
		SpinLockAcquire(&dlock_dbs->mutex);
		slot->state = DB_NOT_LOADED;
		SpinLockRelease(&dlock_dbs->mutex);
		ConditionVariableBroadcast(&dlock_dbs->cv);
		PG_RE_THROW();
	}
	PG_END_TRY();

	SpinLockAcquire(&dlock_dbs->mutex);
	slot->state = DB_LOADED;
	slot->relid = relid;
	slot->loaded = true;
	SpinLockRelease(&dlock_dbs->mutex);
	ConditionVariableBroadcast(&dlock_dbs->cv);
}

/*
 * Before any call is served in a database, its leases are restored from its
 * table: after a restart, a crash, a promotion, or a re-created extension.
 * One backend loads; others wait (interruptibly) and take over if it dies.
 */
void
dlock_store_ensure_loaded(void)
{
	Oid			lease_relid = dlock_table_lookup();

	if (dlock_my_slot == NULL)
	{
		dlock_my_slot = dlock_db_claim_slot();
		/* the engine counts this database's entries and rows by it */
		dlock_engine_set_db(dlock_my_slot - dlock_dbs->slots);
	}
	if (dlock_my_slot->state == DB_LOADED && dlock_my_slot->relid == lease_relid)
		return;

	for (;;)
	{
		bool		claimed = false;
		int			loader = 0;
		Oid			old_relid = InvalidOid;

		SpinLockAcquire(&dlock_dbs->mutex);
		if (dlock_my_slot->state == DB_LOADED && dlock_my_slot->relid == lease_relid)
		{
			SpinLockRelease(&dlock_dbs->mutex);
			break;
		}
		if (dlock_my_slot->state == DB_LOADING)
			loader = dlock_my_slot->loader_pid;
		else
		{
			/* relid changes only once loaded: a failed load is redone whole */
			old_relid = dlock_my_slot->relid;
			dlock_my_slot->state = DB_LOADING;
			dlock_my_slot->loader_pid = MyProcPid;
			claimed = true;
		}
		SpinLockRelease(&dlock_dbs->mutex);

		if (claimed)
		{
			load_database(dlock_my_slot, old_relid, lease_relid);
			break;
		}
		if (BackendPidGetProc(loader) == NULL)
		{
			/* the loader died mid-way: let someone start over */
			SpinLockAcquire(&dlock_dbs->mutex);
			if (dlock_my_slot->state == DB_LOADING && dlock_my_slot->loader_pid == loader)
				dlock_my_slot->state = DB_NOT_LOADED;
			SpinLockRelease(&dlock_dbs->mutex);
			continue;
		}
		(void) ConditionVariableTimedSleep(&dlock_dbs->cv, 100, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
}
