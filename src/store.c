/*
 * store.c
 *		Durable state: the per-database lease table that is the source of
 *		truth after a crash, and its rebuild into shared memory.
 *
 * Lease rows are written in the caller's transaction: a grant's insert and
 * a release's delete with the heap and index access methods (see
 * insert_direct), the rest through SPI as the table's owner.  Writers of one row queue on its row lock, so its versions
 * follow commit order; shared memory takes an expiry only from a newer
 * version (see xact.c).
 *
 * Locking: SPI and heap access only without partition locks; per-database
 * state (table OIDs, token floors, dead-row flags) under its slot's
 * spinlock, the floor also in an atomic read by every grant.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_database.h"
#include "catalog/index.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/controldata_utils.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "storage/spin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "args.h"
#include "compat.h"
#include "dbslots.h"
#include "engine.h"
#include "store.h"
#include "table.h"
#include "tokens.h"
#include "wait.h"

/* prepared statements, kept by table.c (dlock_table_keep_plan) */
static SPIPlanPtr plan_write = NULL;
static SPIPlanPtr plan_takeover = NULL;
static SPIPlanPtr plan_delete = NULL;
static SPIPlanPtr plan_update = NULL;
static SPIPlanPtr plan_sweep = NULL;
static SPIPlanPtr plan_floor = NULL;
static SPIPlanPtr plan_move = NULL;
static SPIPlanPtr plan_clear = NULL;
static SPIPlanPtr plan_clear_probe = NULL;

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
	/* tokens issued here before a pg_upgrade or restore: see dlock--1.0.sql */
	if (SPI_execute(psprintf("SELECT pg_catalog.max(floor) FROM %s", dlock_floor_table),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dlock token floor");
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		floor = isnull ? 0 : (uint64) Max(DatumGetInt64(d), 0);
	}
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

/* ---------------------------------------------------------------------
 * The database's token floor (dlock_token_floor)
 * --------------------------------------------------------------------- */

/* a floor this transaction wrote, published to the slot at its commit */
static uint64 pending_floor = 0;
static int	pending_level = 0;

static void
floor_xact_callback(XactEvent event, void *arg)
{
	if (pending_floor == 0)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		SpinLockAcquire(&dlock_dbs->mutex);
		if (pg_atomic_read_u64(&dlock_my_slot->token_floor) < pending_floor)
			pg_atomic_write_u64(&dlock_my_slot->token_floor, pending_floor);
		SpinLockRelease(&dlock_dbs->mutex);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		pending_floor = 0;
}

static void
floor_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (pending_floor == 0 || pending_level < level)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		pending_floor = 0;
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		pending_level = level - 1;
}

/*
 * A token was just handed out in this database.  When it reaches the floor
 * its table stores, a row covering every token reserved so far is added (so
 * this happens about once per block of tokens), in the caller's transaction.
 * A read-only transaction cannot write it: the next writable grant here
 * does.
 */
void
dlock_store_note_token(uint64 token)
{
	static bool registered = false;
	AsOwner		saved;
	Datum		arg;
	uint64		floor;

	/* every grant asks: a read, no lock (writers hold the mutex) */
	floor = pg_atomic_read_u64(&dlock_my_slot->token_floor);
	if (token < floor || token < pending_floor || XactReadOnly || RecoveryInProgress())
		return;
	if (!registered)
	{
		RegisterXactCallback(floor_xact_callback, NULL);
		RegisterSubXactCallback(floor_subxact_callback, NULL);
		registered = true;
	}
	floor = dlock_token_reserved_end();
	arg = Int64GetDatum((int64) floor);
	dlock_table_spi_begin(&saved, true, false);
	if (plan_floor == NULL)
	{
		Oid			type = INT8OID;

		/*
		 * A new row, not an update of one: grants that reach the floor
		 * together each insert theirs, and none waits for another's
		 * transaction (a long one would hold up every grant here).  Lower
		 * rows nobody has locked go.
		 */
		plan_floor = SPI_prepare(psprintf("WITH lower AS (DELETE FROM %1$s"
										  " WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
										  "SELECT ctid FROM %1$s WHERE floor OPERATOR(pg_catalog.<) $1"
										  " FOR UPDATE SKIP LOCKED)))"
										  " INSERT INTO %1$s VALUES ($1)", dlock_floor_table),
								 1, &type);
		if (plan_floor == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		dlock_table_keep_plan(&plan_floor);
	}
	if (SPI_execute_plan(plan_floor, &arg, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not raise the dlock token floor");
	dlock_table_spi_end(&saved);
	pending_floor = floor;
	pending_level = GetCurrentTransactionNestLevel();
}

/* ---------------------------------------------------------------------
 * Rows of ended leases
 * --------------------------------------------------------------------- */

/*
 * A sweeper found no dlock extension in its database: no rows to delete
 * there, and none to send another sweeper for.
 */
void
dlock_store_forget_dead_rows(void)
{
	DbSlot	   *slot;

	SpinLockAcquire(&dlock_dbs->mutex);
	slot = dlock_db_find_slot(MyDatabaseId);
	if (slot != NULL)
		dlock_dead_rows_clear(slot - dlock_dbs->slots);
	SpinLockRelease(&dlock_dbs->mutex);
}

/*
 * The databases with rows to delete or move, for the worker to send a
 * sweeper.  One whose last sweep failed or left rows (locked by another
 * transaction) waits a while, so sweepers are not sent back to back while
 * that transaction is open: *retry_at says when the first of those may be
 * swept again (0: none waits).
 */
int
dlock_store_dead_databases(Oid *dbids, int max, int64 *retry_at)
{
	int			n = 0;
	int64		now = dlock_mono_now();

	*retry_at = 0;
	SpinLockAcquire(&dlock_dbs->mutex);
	for (int i = 0; i < DLOCK_MAX_DATABASES && n < max; i++)
	{
		DbSlot	   *slot = &dlock_dbs->slots[i];

		if (slot->dbid == InvalidOid ||
			(dlock_dead_rows(i) == 0 && !slot->stale_expiries))
			continue;
		if (slot->sweep_retry_at > now)
		{
			if (*retry_at == 0 || slot->sweep_retry_at < *retry_at)
				*retry_at = slot->sweep_retry_at;
			continue;
		}
		dbids[n++] = slot->dbid;
	}
	SpinLockRelease(&dlock_dbs->mutex);
	return n;
}

static void promise_commit(void);

/*
 * What the sweeps of this transaction may clear once it commits: rows left
 * before sweep_dead_mark, and the restored rows' old expiries.  Only a sweep
 * that deleted or moved every row it meant to clears them; a failed or
 * rolled-back one leaves them for the next.  The latest sweep of the
 * transaction speaks for it (it saw what the earlier ones left).
 */
static bool sweep_pending = false;
static bool sweep_clean = false;
static bool sweep_all_rows = false;
static uint32 sweep_dead_mark = 0;
static uint32 sweep_restores = 0;
static int	sweep_level = 0;

#define SWEEP_RETRY		USECS_PER_SEC

static void
sweep_xact_callback(XactEvent event, void *arg)
{
	if (!sweep_pending)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (sweep_clean)
			{
				SpinLockAcquire(&dlock_dbs->mutex);
				dlock_dead_rows_swept(dlock_my_slot - dlock_dbs->slots, sweep_dead_mark);
				if (sweep_all_rows && dlock_my_slot->restores == sweep_restores)
					dlock_my_slot->stale_expiries = false;
				dlock_my_slot->sweep_retry_at = 0;
				SpinLockRelease(&dlock_dbs->mutex);
			}
			sweep_pending = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			sweep_pending = false;
			break;
		default:
			break;
	}
}

static void
sweep_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (!sweep_pending || sweep_level < level)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		sweep_clean = false;
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		sweep_level = level - 1;
}

/*
 * Deletes the rows of leases that ended, each by version compare-and-set.
 * Shared memory decides what ended: a row whose lease is still held there
 * (renewed meanwhile, pinned by an open renewal, or inside its lock-delay)
 * is kept even if the wall clock says otherwise.  Rows that break the
 * table's rules belong to no lease and go too.  Returns rows deleted.
 *
 * A kept row whose lease shared memory holds for longer than the row says
 * (a rebuild gave it its ttl again, or the wall clock was stepped forward
 * since the row was written) gets the expiry memory holds, in this clock,
 * by the same compare-and-set: a later rebuild judges the lease by its row.
 * After a rebuild, every row is looked at once, not only those the wall
 * clock says expired.
 */
int64
dlock_store_sweep_rows(void)
{
	static bool registered = false;
	AsOwner		saved;
	Datum		args[4];
	int64		deleted = 0;
	int64		moved = 0;
	int64		invalid = 0;
	uint64		nrows;
	SPITupleTable *rows;
	bool		all_rows;
	bool		clean = true;
	uint32		dead_mark;
	uint32		restores;

	if (!registered)
	{
		RegisterXactCallback(sweep_xact_callback, NULL);
		RegisterSubXactCallback(sweep_subxact_callback, NULL);
		registered = true;
	}

	/* cleared at commit, if this sweep gets every row (see sweep_pending) */
	SpinLockAcquire(&dlock_dbs->mutex);
	dead_mark = dlock_dead_rows_mark(dlock_my_slot - dlock_dbs->slots);
	all_rows = dlock_my_slot->stale_expiries;
	restores = dlock_my_slot->restores;
	dlock_my_slot->sweep_retry_at = dlock_mono_now() + SWEEP_RETRY;
	SpinLockRelease(&dlock_dbs->mutex);

	dlock_table_spi_begin(&saved, true, true);
	/* every row left before the mark is committed: read what is now */
	PushActiveSnapshot(GetLatestSnapshot());
	if (SPI_execute(psprintf("SELECT name, token, version, expires_at, %1$s FROM %2$s%3$s",
							 dlock_table_row_valid_sql(), dlock_lease_table,
							 all_rows ? "" :
							 psprintf(" WHERE expires_at <= clock_timestamp() OR NOT %s",
									  dlock_table_row_valid_sql())),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dlock lease table");
	PopActiveSnapshot();
	nrows = SPI_processed;
	rows = SPI_tuptable;
	for (uint64 i = 0; i < nrows; i++)
	{
		bool		isnull;
		text	   *name = DatumGetTextPP(SPI_getbinval(rows->vals[i], rows->tupdesc, 1, &isnull));
		uint64		token = DatumGetInt64(SPI_getbinval(rows->vals[i], rows->tupdesc, 2, &isnull));
		int64		version = DatumGetInt64(SPI_getbinval(rows->vals[i], rows->tupdesc, 3, &isnull));
		TimestampTz row_expires = DatumGetTimestampTz(SPI_getbinval(rows->vals[i], rows->tupdesc, 4, &isnull));
		bool		valid = DatumGetBool(SPI_getbinval(rows->vals[i], rows->tupdesc, 5, &isnull));
		TimestampTz held_until = 0;
		DLockKey	key;
		uint32		hash;
		DLockEntry *lease;
		bool		ended = true;

		if (valid)
		{
			dlock_make_key(&key, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
			hash = dlock_key_hash(&key);
			LWLockAcquire(dlock_partition_lock(hash), LW_SHARED);
			lease = dlock_find_lease(&key, hash, token);
			ended = (lease == NULL || dlock_is_free(lease, dlock_mono_now()));
			if (!ended && lease->durable && lease->version == version)
				held_until = dlock_mono_to_wall(lease->expires, dlock_mono_now(),
												GetCurrentTimestamp());
			LWLockRelease(dlock_partition_lock(hash));
		}
		/* a second is below any clock step worth a write */
		if (!ended && held_until <= row_expires + USECS_PER_SEC)
			continue;

		/*
		 * A row someone has locked (a grant clearing the name's old rows, a
		 * release, a renewal) is left for the next sweep: waiting for it,
		 * with the rows written so far still locked, could deadlock with that
		 * writer.
		 */
		args[0] = PointerGetDatum(name);
		args[1] = Int64GetDatum((int64) token);
		args[2] = Int64GetDatum(version);
		if (!ended)
		{
			if (plan_move == NULL)
			{
				Oid			types[4] = {TEXTOID, INT8OID, INT8OID, TIMESTAMPTZOID};

				dlock_table_prepare(&plan_move, "UPDATE %1$s SET expires_at = $4"
									" WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
									"SELECT ctid FROM %1$s WHERE name OPERATOR(pg_catalog.=) $1"
									" AND token OPERATOR(pg_catalog.=) $2"
									" AND version OPERATOR(pg_catalog.=) $3"
									" FOR UPDATE SKIP LOCKED))", 4, types);
			}
			args[3] = TimestampTzGetDatum(held_until);
			if (SPI_execute_plan(plan_move, args, NULL, false, 0) != SPI_OK_UPDATE)
				elog(ERROR, "could not update a dlock lease row");
			moved += SPI_processed;
			clean &= (SPI_processed > 0);
			continue;
		}
		if (plan_sweep == NULL)
		{
			Oid			types[3] = {TEXTOID, INT8OID, INT8OID};

			dlock_table_prepare(&plan_sweep, "DELETE FROM %1$s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
								"SELECT ctid FROM %1$s WHERE name OPERATOR(pg_catalog.=) $1"
								" AND token OPERATOR(pg_catalog.=) $2"
								" AND version OPERATOR(pg_catalog.=) $3"
								" FOR UPDATE SKIP LOCKED))", 3, types);
		}
		if (SPI_execute_plan(plan_sweep, args, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not delete a dlock lease row");
		deleted += SPI_processed;
		if (!valid)
			invalid += SPI_processed;
		/* locked by someone (or changed): left for a later sweep */
		clean &= (SPI_processed > 0);
	}
	dlock_table_spi_end(&saved);
	/* a moved row is what the next rebuild trusts */
	if (moved > 0)
		promise_commit();
	if (invalid > 0)
		ereport(LOG,
				(errmsg("dlock deleted " INT64_FORMAT " invalid lease rows of %s",
						invalid, dlock_lease_table),
				 errdetail("They break the table's rules, so no lease has them.")));
	sweep_pending = true;
	sweep_clean = clean;
	sweep_all_rows = all_rows;
	sweep_dead_mark = dead_mark;
	sweep_restores = restores;
	sweep_level = GetCurrentTransactionNestLevel();
	return deleted;
}

/* ---------------------------------------------------------------------
 * Row writes
 * --------------------------------------------------------------------- */

static Datum
ttl_datum(int64 ttl)
{
	Interval   *span = palloc0(sizeof(Interval));

	span->time = ttl;
	return IntervalPGetDatum(span);
}

/*
 * A grant's insert and a release's delete, the two row writes of every
 * durable cycle, bypass the executor while the table is as the extension
 * made it (lease_columns in table.c; heap; its primary key on (name, token) its only
 * index; no CHECK constraint, trigger, rule, row security, inheritance or
 * other replica identity): a heap insert or delete and the key's index
 * entry, as the executor makes them.  Executor start-up and teardown were a
 * third of a durable cycle's instructions.  A table its owner changed takes
 * SPI, so its constraints, triggers and conversions apply as to any INSERT
 * or DELETE.
 */

/*
 * Where this backend last inserted rows: a release by the session that took
 * the lease (the usual case) finds its row without an index scan.  What is
 * found there is deleted only if it is still the row's visible version.
 */
#define ROW_PLACES	8

typedef struct RowPlace
{
	Oid			relfilenode;	/* the table's, when the row was written */
	uint64		token;
	ItemPointerData tid;
} RowPlace;

static RowPlace row_places[ROW_PLACES];
static int	row_places_next = 0;

/* Inserts a row and its key's entry; false if it must go through SPI. */
static bool
insert_direct(Datum *values, bool *nulls)
{
	Relation	index;
	Relation	rel;
	HeapTuple	tuple;
	IndexInfo  *info;

	rel = dlock_table_open_direct();
	if (rel == NULL)
		return false;
	index = index_open(rel->rd_pkindex, RowExclusiveLock);
	CommandCounterIncrement();
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	heap_insert(rel, tuple, GetCurrentCommandId(true), 0, NULL);
	info = BuildIndexInfo(index);
	{
		Datum		key[2] = {values[ATT_NAME - 1], values[ATT_TOKEN - 1]};
		bool		keynulls[2] = {false, false};

		index_insert(index, key, keynulls, &tuple->t_self, rel,
					 UNIQUE_CHECK_YES, false, info);
	}
	row_places[row_places_next].relfilenode = DLockRelFileNumber(rel);
	row_places[row_places_next].token = DatumGetInt64(values[ATT_TOKEN - 1]);
	row_places[row_places_next].tid = tuple->t_self;
	row_places_next = (row_places_next + 1) % ROW_PLACES;
	heap_freetuple(tuple);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	return true;
}

/*
 * The row of (name, token) where this backend inserted it, if it is still
 * the version that snapshot sees; else an invalid TID.
 */
static ItemPointerData
row_place(Relation rel, Datum name, Datum token, Snapshot snapshot)
{
	ItemPointerData tid;

	ItemPointerSetInvalid(&tid);
	for (int i = 0; i < ROW_PLACES; i++)
	{
		RowPlace   *place = &row_places[i];
		HeapTupleData tuple;
		Buffer		buffer;

		if (place->token != (uint64) DatumGetInt64(token) ||
			place->relfilenode != DLockRelFileNumber(rel) ||
			ItemPointerGetBlockNumber(&place->tid) >= RelationGetNumberOfBlocks(rel))
			continue;
		tuple.t_self = place->tid;
		if (heap_fetch(rel, snapshot, &tuple, &buffer, false))
		{
			bool		isnull;
			Datum		t = heap_getattr(&tuple, ATT_TOKEN, RelationGetDescr(rel), &isnull);
			Datum		n = heap_getattr(&tuple, ATT_NAME, RelationGetDescr(rel), &isnull);

			if (DatumGetInt64(t) == DatumGetInt64(token) &&
				DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, n, name)))
				tid = place->tid;
			ReleaseBuffer(buffer);
		}
		place->token = 0;
		break;
	}
	return tid;
}

/*
 * Deletes the row of (name, token), if there is one, waiting for another
 * transaction writing it as a DELETE would; false if it must go through
 * SPI.
 */
static bool
delete_direct(Datum name, Datum token)
{
	Relation	index = NULL;
	Relation	rel;

	rel = dlock_table_open_direct();
	if (rel == NULL)
		return false;
	/* as a DELETE: a publication of deletes must be able to name the row */
	CheckCmdReplicaIdentity(rel, CMD_DELETE);
	CommandCounterIncrement();
	for (;;)
	{
		ScanKeyData keys[2];
		SysScanDesc scan;
		HeapTuple	tuple;
		ItemPointerData tid;
		TM_Result	result;
		TM_FailureData tmfd;

		tid = row_place(rel, name, token, GetLatestSnapshot());
		if (!ItemPointerIsValid(&tid))
		{
			if (index == NULL)
				index = index_open(rel->rd_pkindex, RowExclusiveLock);
			ScanKeyEntryInitialize(&keys[0], 0, ATT_NAME, BTEqualStrategyNumber,
								   InvalidOid, index->rd_indcollation[0],
								   F_TEXTEQ, name);
			ScanKeyInit(&keys[1], ATT_TOKEN, BTEqualStrategyNumber, F_INT8EQ,
						token);
			scan = systable_beginscan(rel, RelationGetRelid(index), true,
									  GetLatestSnapshot(), 2, keys);
			tuple = systable_getnext(scan);
			if (HeapTupleIsValid(tuple))
				tid = tuple->t_self;
			systable_endscan(scan);
			if (!HeapTupleIsValid(tuple))
				break;
		}

		result = heap_delete(rel, &tid, GetCurrentCommandId(true),
							 InvalidSnapshot, true, &tmfd, false);
		if (result == TM_Ok || result == TM_SelfModified)
			break;
		if (result != TM_Updated && result != TM_Deleted)
			elog(ERROR, "unexpected heap_delete status: %u", result);

		/*
		 * Another transaction committed a newer version of the row, or its
		 * deletion, meanwhile: as the executor does, that fails a snapshot
		 * that cannot see it; else a newer version is looked for again and a
		 * deleted row leaves nothing to do.
		 */
		if (IsolationUsesXactSnapshot() && result == TM_Deleted)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent delete")));
		if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
		if (result == TM_Deleted)
			break;
	}
	if (index != NULL)
		index_close(index, NoLock);
	table_close(rel, NoLock);
	return true;
}

/*
 * Runs a row statement of a lease operation.  Under REPEATABLE READ or
 * SERIALIZABLE the transaction's snapshot would hide rows committed since it
 * was taken (a release would delete nothing, a renewal update nothing), so
 * these statements see the latest committed state, as foreign-key checks do.
 */
static int
execute(SPIPlanPtr plan, Datum *args, const char *nulls, long tcount)
{
	if (IsolationUsesXactSnapshot())
		return SPI_execute_snapshot(plan, args, nulls, GetLatestSnapshot(),
									InvalidSnapshot, false, true, tcount);
	return SPI_execute_plan(plan, args, nulls, false, tcount);
}

/*
 * The transaction that will write a durable grant's row.  Taken before the
 * grant, as assigning it may fail; a read-only transaction is refused here.
 */
TransactionId
dlock_store_xid(void)
{
	dlock_table_check_writable();
	return GetTopTransactionId();
}

/*
 * Inserts a lease's row: a new grant, or a lease taken again after this
 * transaction deleted its row.  With row->takeover (an exclusive grant on a
 * plain lock whose ended leases left rows) it also deletes the rows of the
 * name's older leases, which have all ended; rows someone else has locked (a
 * sweeper) it leaves to the sweeper rather than wait for them.
 */
void
dlock_store_insert(const DLockKey *key, const DLockRow *row)
{
	AsOwner		saved;
	Datum		args[10];

	dlock_table_check_writable();
	args[0] = PointerGetDatum(cstring_to_text_with_len(key->name, key->len));
	args[1] = PointerGetDatum(cstring_to_text_with_len(row->owner.str, row->owner.len));
	args[2] = ObjectIdGetDatum(row->roleid);
	args[3] = Int64GetDatum((int64) row->token);
	args[4] = TimestampTzGetDatum(row->granted_at);
	args[5] = TimestampTzGetDatum(row->expires_at);
	args[6] = PointerGetDatum(cstring_to_text(dlock_mode_name(row->mode)));
	args[7] = Int32GetDatum(row->permits);
	args[8] = Int64GetDatum(row->version);
	args[9] = ttl_datum(row->ttl);
	promise_commit();
	if (!row->takeover)
	{
		/* in the table's column order */
		Datum		values[LEASE_NATTS] = {args[0], args[1], args[2], args[3],
		args[4], args[5], args[9], args[8], args[6], args[7]};
		bool		nulls[LEASE_NATTS] = {0};

		nulls[LEASE_NATTS - 1] = (row->permits == 0);
		if (insert_direct(values, nulls))
			return;
	}

	dlock_table_spi_begin(&saved, true, false);
	if (plan_write == NULL)
	{
		Oid			types[10] = {TEXTOID, TEXTOID, OIDOID, INT8OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT4OID, INT8OID, INTERVALOID};
		const char *insert = " INSERT INTO %1$s"
		" (name, owner, role, token, granted_at, expires_at, ttl, version, mode, permits)"
		" VALUES ($1, $2, $3, $4, $5, $6, $10, $9, $7, $8)";

		dlock_table_prepare(&plan_write, insert, 10, types);
		dlock_table_prepare(&plan_takeover, psprintf("WITH older AS (DELETE FROM %%1$s"
													 " WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
													 "SELECT ctid FROM %%1$s"
													 " WHERE name OPERATOR(pg_catalog.=) $1"
													 " AND token OPERATOR(pg_catalog.<) $4"
													 " FOR UPDATE SKIP LOCKED)))%s", insert),
							10, types);
	}
	if (execute(row->takeover ? plan_takeover : plan_write, args,
				row->permits == 0 ? "       n  " : NULL, 0) != SPI_OK_INSERT ||
		SPI_processed != 1)
		elog(ERROR, "could not write a dlock lease row");
	dlock_table_spi_end(&saved);
}

/*
 * Moves the expiry of a lease's row, and its ttl (an extension or renewal).
 * The update waits for any other transaction writing the row, so row
 * versions follow commit order.  It never creates a row: if the row is gone
 * (released from another session), nothing is written.  Returns the row's
 * new version, or 0.
 */
int64
dlock_store_update(const DLockKey *key, uint64 token, TimestampTz expires_at,
				   int64 ttl)
{
	AsOwner		saved;
	Datum		args[4];
	int64		version = 0;

	dlock_table_spi_begin(&saved, true, false);
	if (plan_update == NULL)
	{
		Oid			types[4] = {TEXTOID, INT8OID, TIMESTAMPTZOID, INTERVALOID};

		dlock_table_prepare(&plan_update, "UPDATE %s SET expires_at = $3, ttl = $4,"
							" version = version OPERATOR(pg_catalog.+) 1"
							" WHERE name OPERATOR(pg_catalog.=) $1"
							" AND token OPERATOR(pg_catalog.=) $2"
							" RETURNING version", 4, types);
	}
	args[0] = PointerGetDatum(cstring_to_text_with_len(key->name, key->len));
	args[1] = Int64GetDatum((int64) token);
	args[2] = TimestampTzGetDatum(expires_at);
	args[3] = ttl_datum(ttl);
	if (execute(plan_update, args, NULL, 1) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not update a dlock lease row");
	if (SPI_processed == 1)
	{
		bool		isnull;

		version = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
	}
	dlock_table_spi_end(&saved);
	if (version != 0)
		promise_commit();
	return version;
}

/*
 * What a commit waits for.
 *
 * A grant, a renewal or an extension is a promise: its commit waits for its
 * WAL to be flushed and, with synchronous replication, for the synchronous
 * standbys, whatever synchronous_commit the caller runs with.  Below
 * remote_write (local, off) the commit would wait for no standby, and a
 * failover to one would lose the lease, so for that commit the setting is
 * raised to on (remote_flush), as SET LOCAL would; remote_write and
 * remote_apply are kept.
 *
 * A release need not be on disk before it returns: if a crash loses it, the
 * lease comes back and keeps its name until its TTL ends, which is safe.  So
 * a transaction whose only WAL is its releases' row deletions commits
 * without waiting for the flush (as under synchronous_commit = off); the next
 * synchronous commit anywhere in the cluster (a grant's) flushes it.  Any
 * other WAL of the transaction, before or after (a grant, a renewal, the
 * caller's own writes), keeps its commit synchronous.
 */
typedef enum ReleaseWal
{
	RELEASE_WAL_NONE,			/* no release in this transaction */
	RELEASE_WAL_ONLY,			/* all its WAL so far: releases, up to
								 * release_wal_end */
	RELEASE_WAL_MIXED			/* other WAL too */
} ReleaseWal;

static bool promised = false;	/* this transaction wrote a promise */
static ReleaseWal release_wal = RELEASE_WAL_NONE;
static XLogRecPtr release_wal_end = InvalidXLogRecPtr;
static int	saved_synchronous_commit = -1;	/* -1: not changed */

static void
commit_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (promised && synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_WRITE)
			{
				/* undone by the commit's own GUC cleanup, after the wait */
				(void) set_config_option("synchronous_commit", "on",
										 PGC_USERSET, PGC_S_SESSION,
										 GUC_ACTION_LOCAL, true, 0, false);
			}
			else if (!promised && release_wal == RELEASE_WAL_ONLY &&
					 XactLastRecEnd == release_wal_end &&
					 synchronous_commit > SYNCHRONOUS_COMMIT_OFF)
			{
				/* read by RecordTransactionCommit, just after this */
				saved_synchronous_commit = synchronous_commit;
				synchronous_commit = SYNCHRONOUS_COMMIT_OFF;
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			if (saved_synchronous_commit >= 0)
				synchronous_commit = saved_synchronous_commit;
			saved_synchronous_commit = -1;
			release_wal = RELEASE_WAL_NONE;
			promised = false;
			break;
		default:
			break;
	}
}

static void
register_commit_callback(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(commit_xact_callback, NULL);
		registered = true;
	}
}

/*
 * Makes this transaction's commit wait for its WAL locally and on the
 * synchronous standbys (see above).
 */
static void
promise_commit(void)
{
	register_commit_callback();
	ForceSyncCommit();
	promised = true;
}

/* Deletes the row of the lease with token (a release). */
void
dlock_store_delete(const DLockKey *key, uint64 token)
{
	AsOwner		saved;
	Datum		args[2];
	XLogRecPtr	wal_before = XactLastRecEnd;
	bool		direct;

	register_commit_callback();
	dlock_table_check_writable();
	args[0] = PointerGetDatum(cstring_to_text_with_len(key->name, key->len));
	args[1] = Int64GetDatum((int64) token);
	direct = delete_direct(args[0], args[1]);
	if (!direct)
	{
		dlock_table_spi_begin(&saved, true, false);
		if (plan_delete == NULL)
		{
			Oid			types[2] = {TEXTOID, INT8OID};

			dlock_table_prepare(&plan_delete, "DELETE FROM %s WHERE name OPERATOR(pg_catalog.=) $1"
								" AND token OPERATOR(pg_catalog.=) $2", 2, types);
		}
		if (execute(plan_delete, args, NULL, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not delete a dlock lease row");
		dlock_table_spi_end(&saved);
	}
	/* through SQL, an owner's trigger may have written more than the row */
	if (direct &&
		(wal_before == InvalidXLogRecPtr ||
		 (release_wal == RELEASE_WAL_ONLY && wal_before == release_wal_end)))
	{
		release_wal = RELEASE_WAL_ONLY;
		release_wal_end = XactLastRecEnd;
	}
	else
		release_wal = RELEASE_WAL_MIXED;
}

/*
 * Deletes the rows of the name's leases older than token that ended: the
 * grant of token found rows of ended leases on its name (see clear_rows in
 * engine.h), and no crash may bring them back once its token is out.  The
 * name's older leases still in shared memory keep their rows.  In the
 * grant's transaction, waiting for any other writer of those rows; when it
 * deletes anything, its commit waits for the WAL flush, as a durable
 * grant's does.  A read-only transaction cannot delete them, and refuses
 * the grant if there are any.
 */
void
dlock_store_clear_rows(const DLockKey *key, uint32 hash, uint64 token)
{
	LWLock	   *lock = dlock_partition_lock(hash);
	AsOwner		saved;
	Datum		args[3];
	Datum	   *keep = NULL;
	int			nkeep;
	bool		read_only = XactReadOnly;
	bool		found = false;

	/* as dlock_lease_force_release: allocate, then fill if it fits */
	for (;;)
	{
		DLockEntry *head;
		DLockEntry *lease;
		dlist_mutable_iter iter;
		int			room = 0;
		bool		complete;

		LWLockAcquire(lock, LW_SHARED);
		head = dlock_find(key, hash);
		if (head != NULL)
			room = head->nleases;
		LWLockRelease(lock);
		keep = palloc(sizeof(Datum) * Max(room, 1));

		nkeep = 0;
		LWLockAcquire(lock, LW_SHARED);
		head = dlock_find(key, hash);
		complete = (head == NULL || head->nleases <= room);
		if (head != NULL && complete)
		{
			dlock_foreach_lease(lease, head, iter)
			{
				if (lease->token < token)
					keep[nkeep++] = Int64GetDatum((int64) lease->token);
			}
		}
		LWLockRelease(lock);
		if (complete)
			break;
		pfree(keep);
	}

	args[0] = PointerGetDatum(cstring_to_text_with_len(key->name, key->len));
	args[1] = Int64GetDatum((int64) token);
	args[2] = PointerGetDatum(construct_array(keep, nkeep, INT8OID, sizeof(int64),
											  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	dlock_table_spi_begin(&saved, false, false);
	if (plan_clear == NULL)
	{
		Oid			types[3] = {TEXTOID, INT8OID, INT8ARRAYOID};
		const char *rows = " FROM %s WHERE name OPERATOR(pg_catalog.=) $1"
		" AND token OPERATOR(pg_catalog.<) $2"
		" AND token OPERATOR(pg_catalog.<>) ALL ($3)";

		dlock_table_prepare(&plan_clear, psprintf("DELETE%s", rows), 3, types);
		dlock_table_prepare(&plan_clear_probe, psprintf("SELECT 1%s", rows), 3, types);
	}
	if (read_only)
	{
		if (execute(plan_clear_probe, args, NULL, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read the dlock lease table");
		found = (SPI_processed > 0);
	}
	else
	{
		if (execute(plan_clear, args, NULL, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not delete a dlock lease row");
		if (SPI_processed > 0)
			promise_commit();
	}
	dlock_table_spi_end(&saved);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot take lock \"%.*s\" in a read-only transaction", key->len, key->name),
				 errdetail("The lease table still holds rows of the name's ended durable leases, which the grant must delete."),
				 errhint("Take it in a read-write transaction, or run dlock_sweep() first.")));
}

/* The leases of the table, for dlock_locks on a hot standby. */
void
dlock_store_list(Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	AsOwner		saved;

	(void) dlock_table_lookup();
	dlock_table_spi_begin(&saved, false, true);
	if (SPI_execute(psprintf("SELECT name, owner, token, granted_at, expires_at, role,"
							 " NULL::int, 0, version, true, mode, permits FROM %s"
							 " WHERE expires_at > clock_timestamp()", dlock_lease_table),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dlock lease table");
	for (uint64 i = 0; i < SPI_processed; i++)
		tuplestore_puttuple(tupstore, SPI_tuptable->vals[i]);
	dlock_table_spi_end(&saved);
}
