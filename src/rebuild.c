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
#include "deferred.h"
#include "engine.h"
#include "floor.h"
#include "store.h"
#include "table.h"
#include "tokens.h"

/* A restored lease's minimum hold (see restore_hold) */
typedef struct RestoredHold
{
	int64		min_hold;
	int64		hold_until;
	TimestampTz released_at;
} RestoredHold;

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
			int64 expires, const RestoredHold *hold)
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
		lease->min_hold = hold->min_hold;
		lease->hold_until = hold->hold_until;
		lease->released_at = hold->released_at;
		dlock_set_expires(lease, expires);
	}
	else if (head != NULL)
		dlock_drop_if_unused(head);
	LWLockRelease(lock);
	return head != NULL && (skip || lease != NULL);
}

/* What a rebuild found, for its log and the database's slot. */
typedef struct LoadCounts
{
	uint64		max_token;
	int64		dead;			/* rows that expired */
	int64		stale;			/* rows of leases that had ended */
	int64		invalid;		/* rows that break the table's rules */
	int64		restored;
} LoadCounts;

/* Where the rule of load_rows stands in the rows of one name. */
typedef struct NameRows
{
	text	   *prev;			/* the name; NULL before the first row */
	int32		kind;			/* permits its newest row declares; 0: not a
								 * semaphore */
	int			kept;			/* rows restored */
	int			seen;			/* rows judged */
	bool		closed;			/* no older row of the name is restored */
} NameRows;

/*
 * Reads every row (into SPI_tuptable), by name and newest first, each with
 * whether it is valid and whether it counts as live: expiring after the
 * moment returned; and its lease's minimum hold, from its hold row if any
 * (none before 1.2).
 */
static TimestampTz
read_rows(bool after_start)
{
	TimestampTz since = 0;
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	Datum		args[1];
	const char *holds = dlock_table_holds();

	if (after_start)
		since = Max(GetLatestXTime(), dlock_dbs->checkpoint_time);
	if (since == 0)
		since = GetCurrentTimestamp();
	args[0] = TimestampTzGetDatum(since);
	if (SPI_execute_with_args(psprintf("SELECT name, owner, role, token, granted_at, expires_at, version,"
									   " mode OPERATOR(pg_catalog.=) 'shared', coalesce(permits, 0),"
									   " expires_at OPERATOR(pg_catalog.>) $1, %s, ttl, %s"
									   " FROM %s%s ORDER BY name, token DESC", dlock_table_row_valid_sql(),
									   holds != NULL ? "min_hold, released_at" :
									   "NULL::interval, NULL::timestamptz", dlock_lease_table,
									   holds != NULL ? psprintf(" LEFT JOIN %s USING (name, token)", holds) : ""),
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dlock lease table");
	return since;
}

/*
 * The rule of load_rows for one valid row, read after the newer rows of its
 * name (a row of another name starts over): whether its lease could have
 * been live with those restored.  The caller counts it in run->kept if it
 * restores it.
 */
static bool
keep_row(NameRows *run, text *name, bool shared, int32 permits, bool live)
{
	int32		name_len = VARSIZE_ANY_EXHDR(name);
	bool		keep;

	/* the newest row of a name declares its kind */
	if (run->prev == NULL || VARSIZE_ANY_EXHDR(run->prev) != (Size) name_len ||
		memcmp(VARDATA_ANY(run->prev), VARDATA_ANY(name), name_len) != 0)
	{
		run->prev = name;
		run->kind = permits;
		run->kept = 0;
		run->seen = 0;
		run->closed = false;
	}
	if (run->closed || permits != run->kind)
		keep = false;
	else if (run->kind != 0)
		keep = live && run->kept < run->kind;
	else if (!shared)
	{
		/* an exclusive lease ended every older one before it began */
		keep = (run->seen == 0);
		run->closed = true;
	}
	else
		keep = true;
	if (permits != run->kind || (run->kind != 0 && live && !keep))
		run->closed = true;
	run->seen++;
	return keep;
}

/*
 * A restored lease's minimum hold (into hold): what was left of it at since,
 * the last moment the old server is known to have reached in its clock (or
 * now, by this server's clock), runs again from now, so a hold may end late,
 * never early, as the lease itself.
 */
static void
restore_hold(HeapTuple tuple, TupleDesc desc, TimestampTz since, int64 mono_now,
			 RestoredHold *hold)
{
	bool		isnull;
	Datum		min_hold = SPI_getbinval(tuple, desc, 13, &isnull);
	Datum		released_at;
	TimestampTz granted_at;
	int64		left;

	hold->min_hold = 0;
	hold->hold_until = 0;
	hold->released_at = 0;
	if (isnull)
		return;
	hold->min_hold = Min(Max(dlock_interval_usecs(DatumGetIntervalP(min_hold)), 0),
						 DLOCK_TTL_MAX);
	granted_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 5, &isnull));
	left = hold->min_hold - (since - granted_at);
	if (hold->min_hold > 0 && left > 0)
		hold->hold_until = mono_now + Min(left, hold->min_hold);
	released_at = SPI_getbinval(tuple, desc, 14, &isnull);
	if (!isnull)
		hold->released_at = DatumGetTimestampTz(released_at);
}

/* Restores the leases of the rows read_rows read that keep_row keeps. */
static void
restore_rows(bool after_start, TimestampTz since, LoadCounts *counts)
{
	int64		mono_now = dlock_mono_now();
	TimestampTz wall_now = GetCurrentTimestamp();
	NameRows	run = {0};

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
		bool		keep;
		int64		expires;
		DLockKey	key;
		RestoredHold hold;

		if (!valid)
		{
			counts->invalid++;
			continue;
		}
		counts->max_token = Max(counts->max_token, (uint64) token);
		keep = keep_row(&run, name, shared, permits, live);

		dlock_make_key(&key, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
		if (!live || !keep)
		{
			if (!live)
				counts->dead++;
			else
				counts->stale++;
			/* rows newest first: a restored lease of the name came before */
			if (run.kept > 0)
				mark_stale_rows(&key);
			continue;
		}
		run.kept++;
		counts->restored++;
		expires = mono_now + ttl;
		if (!after_start)
			expires = mono_now +
				(DatumGetTimestampTz(SPI_getbinval(tuple, desc, 6, &isnull)) - wall_now);
		restore_hold(tuple, desc, after_start ? since : wall_now, mono_now, &hold);
		if (!restore_row(&key, tuple, desc, run.kind, expires, &hold))
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("dlock lease table is full while restoring leases"),
					 errhint("Increase dlock.max_locks and restart the server.")));
	}
}

/* The rebuild's log, while SPI_processed still counts the rows it read. */
static void
log_load(bool after_start, TimestampTz since, const LoadCounts *counts)
{
	if (after_start && SPI_processed > 0)
		ereport(LOG,
				(errmsg_plural("dlock restored " INT64_FORMAT " lease of %s, for its full ttl",
							   "dlock restored " INT64_FORMAT " leases of %s, each for its full ttl",
							   counts->restored, counts->restored, dlock_lease_table),
				 errdetail("Rows that expired before %s, when the server that wrote them was last known to be running, belong to leases that had ended.",
						   timestamptz_to_str(since))));
	if (counts->stale > 0 || counts->invalid > 0)
		ereport(LOG,
				(errmsg("dlock skipped " INT64_FORMAT " ended and " INT64_FORMAT " invalid lease rows of %s while restoring leases",
						counts->stale, counts->invalid, dlock_lease_table)));
}

/*
 * What the rebuild leaves in the database's slot: its rows to sweep, its
 * token floor, and whether restored rows may hold the old server's expiry.
 */
static void
record_load(bool after_start, const LoadCounts *counts, uint64 floor)
{
	SpinLockAcquire(&dlock_dbs->mutex);
	dlock_dead_rows_add(dlock_my_slot - dlock_dbs->slots,
						(uint32) Min(counts->dead + counts->stale + counts->invalid, INT_MAX / 2));
	pg_atomic_write_u64(&dlock_my_slot->token_floor, floor);
	if (after_start && counts->restored > 0)
	{
		dlock_my_slot->stale_expiries = true;
		dlock_my_slot->restores++;
	}
	SpinLockRelease(&dlock_dbs->mutex);
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
	LoadCounts	counts = {0};
	TimestampTz since;
	uint64		floor;
	int			deferred = 0;

	dlock_table_spi_begin(&saved, false, true);

	/*
	 * Read what is committed now, not what the caller's snapshot saw: a
	 * REPEATABLE READ transaction begun on a standby may make the first call
	 * after promotion, and must not miss leases replayed since.
	 */
	PushActiveSnapshot(GetLatestSnapshot());
	since = read_rows(after_start);
	restore_rows(after_start, since, &counts);
	log_load(after_start, since, &counts);
	if (after_start)
		deferred = dlock_deferred_restore();
	floor = dlock_floor_read();
	record_load(after_start, &counts, floor);
	PopActiveSnapshot();
	dlock_table_spi_end(&saved);
	dlock_token_raise_floor(Max(counts.max_token + 1, floor));
	if (deferred > 0)
		ereport(LOG,
				(errmsg_plural("dlock restored %d lease whose row was deferred, kept by the last clean shutdown",
							   "dlock restored %d leases whose rows were deferred, kept by the last clean shutdown",
							   deferred, deferred)));
	/* a sweeper moves the restored leases' rows to this clock */
	if (after_start && counts.restored > 0)
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
