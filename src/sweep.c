/*
 * sweep.c
 *		Rows of ended leases: the sweep that deletes them (dlock_sweep() and
 *		the worker's sweepers), and what it may clear once its transaction
 *		commits.
 *
 * A release deletes its lease's row; a lease that expires leaves it, and a
 * rebuild finds rows of leases that had ended.  Shared memory counts
 * those rows per database (engine.c), and the worker sends a sweeper to
 * each database that has some, or whose leases a rebuild just restored
 * (their rows keep the old server's expiry until a sweep moves them).
 * Each sweep also deletes the hold rows (1.2) whose lease rows are gone.
 *
 * Locking: the sweep reads each row's lease under its partition lock
 * (shared), released before the row is written through SPI; the slot's
 * sweep state under the slots' spinlock.  A row someone else has locked is
 * skipped, never waited for.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "dbslots.h"
#include "engine.h"
#include "rows.h"
#include "store.h"
#include "table.h"

/* prepared statements, kept by table.c (dlock_table_keep_plan) */
static SPIPlanPtr plan_sweep = NULL;
static SPIPlanPtr plan_move = NULL;
static SPIPlanPtr plan_orphans = NULL;

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
 * sweeper.  One whose last sweeper failed or left rows (locked by another
 * transaction) waits a while, so sweepers are not sent back to back while
 * that transaction is open: *retry_at says when the first of those may be
 * swept again (0: none waits).  Only for the rows it saw: a lease that ended
 * since and left a row gets a sweeper at once, or a clean restart meanwhile
 * could bring it back (the shutdown checkpoint's time has whole seconds).
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
		if (slot->sweep_retry_at > now &&
			dlock_dead_rows_mark(i) == slot->sweep_retry_mark)
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

/* What a sweep did to the rows it read. */
typedef struct SweepCounts
{
	int64		deleted;
	int64		moved;
	int64		invalid;		/* of those deleted */
	bool		clean;			/* it deleted or moved every row it meant to */
} SweepCounts;

/*
 * Reads the rows to look at (into SPI_tuptable): after a rebuild every row,
 * else those the wall clock says expired and those that break the rules.
 */
static void
read_sweep_rows(bool all_rows)
{
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
}

/*
 * Whether shared memory says the lease of (name, token) ended; if it holds
 * that version of the lease, *held_until is when it expires, in this clock.
 */
static bool
lease_ended(text *name, uint64 token, int64 version, TimestampTz *held_until)
{
	DLockKey	key;
	uint32		hash;
	DLockEntry *lease;
	bool		ended;

	dlock_make_key(&key, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	hash = dlock_key_hash(&key);
	LWLockAcquire(dlock_partition_lock(hash), LW_SHARED);
	lease = dlock_find_lease(&key, hash, token);
	ended = (lease == NULL || dlock_is_free(lease, dlock_mono_now()));
	if (!ended && lease->durable && lease->version == version)
		*held_until = dlock_mono_to_wall(lease->expires, dlock_mono_now(),
										 GetCurrentTimestamp());
	LWLockRelease(dlock_partition_lock(hash));
	return ended;
}

/* Moves the row of args (name, token, version) to expire at held_until. */
static void
move_row(Datum *args, TimestampTz held_until, SweepCounts *counts)
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
	counts->moved += SPI_processed;
	counts->clean &= (SPI_processed > 0);
}

/* Deletes the row of args (name, token, version). */
static void
delete_row(Datum *args, bool valid, SweepCounts *counts)
{
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
	counts->deleted += SPI_processed;
	if (!valid)
		counts->invalid += SPI_processed;
	/* locked by someone (or changed): left for a later sweep */
	counts->clean &= (SPI_processed > 0);
}

/*
 * One row read_sweep_rows read: deleted if its lease ended (or it is
 * invalid), its expiry moved if shared memory holds the lease for longer.
 */
static void
sweep_row(HeapTuple tuple, TupleDesc desc, SweepCounts *counts)
{
	Datum		args[4];
	bool		isnull;
	text	   *name = DatumGetTextPP(SPI_getbinval(tuple, desc, 1, &isnull));
	uint64		token = DatumGetInt64(SPI_getbinval(tuple, desc, 2, &isnull));
	int64		version = DatumGetInt64(SPI_getbinval(tuple, desc, 3, &isnull));
	TimestampTz row_expires = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 4, &isnull));
	bool		valid = DatumGetBool(SPI_getbinval(tuple, desc, 5, &isnull));
	TimestampTz held_until = 0;
	bool		ended = true;

	if (valid)
		ended = lease_ended(name, token, version, &held_until);
	/* a second is below any clock step worth a write */
	if (!ended && held_until <= row_expires + USECS_PER_SEC)
		return;

	/*
	 * A row someone has locked (a grant clearing the name's old rows, a
	 * release, a renewal) is left for the next sweep: waiting for it, with
	 * the rows written so far still locked, could deadlock with that writer.
	 */
	args[0] = PointerGetDatum(name);
	args[1] = Int64GetDatum((int64) token);
	args[2] = Int64GetDatum(version);
	if (!ended)
		move_row(args, held_until, counts);
	else
		delete_row(args, valid, counts);
}

/*
 * Deletes the hold rows whose lease rows are gone: a lease with a minimum
 * hold that ended by expiry (as one released within its hold does) loses
 * its row here or to the next grant on its name, which know nothing of
 * holds; a release or force release deletes both.  Run after the rows were
 * swept, in their transaction, so the holds of the rows it deleted go too;
 * the sweeper comes for every lease that ended by expiry.  A hold row and
 * its lease row are written in one transaction, lease row first, so a
 * snapshot that sees a hold row without its lease row saw that row deleted;
 * locked hold rows are skipped, as locked lease rows are.  Before 1.2 there
 * is no hold table, and nothing to do.
 */
static void
delete_orphan_holds(void)
{
	const char *holds = dlock_table_holds();

	if (holds == NULL)
		return;
	if (plan_orphans == NULL)
	{
		plan_orphans = SPI_prepare(psprintf("DELETE FROM %1$s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
											"SELECT h.ctid FROM %1$s h WHERE NOT EXISTS (SELECT FROM %2$s l"
											" WHERE l.name OPERATOR(pg_catalog.=) h.name"
											" AND l.token OPERATOR(pg_catalog.=) h.token)"
											" FOR UPDATE OF h SKIP LOCKED))", holds, dlock_lease_table),
								   0, NULL);
		if (plan_orphans == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		dlock_table_keep_plan(&plan_orphans);
	}
	if (SPI_execute_plan(plan_orphans, NULL, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete a dlock hold row");
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
 *
 * by_sweeper: the worker's sweeper, whose failure or left rows hold back
 * the next one (see dlock_store_dead_databases); a dlock_sweep() call that
 * fails or rolls back says nothing of what a sweeper would meet, and holds
 * back none.
 */
int64
dlock_store_sweep_rows(bool by_sweeper)
{
	static bool registered = false;
	AsOwner		saved;
	SweepCounts counts = {0, 0, 0, true};
	uint64		nrows;
	SPITupleTable *rows;
	bool		all_rows;
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
	if (by_sweeper)
	{
		dlock_my_slot->sweep_retry_at = dlock_mono_now() + SWEEP_RETRY;
		dlock_my_slot->sweep_retry_mark = dead_mark;
	}
	SpinLockRelease(&dlock_dbs->mutex);

	dlock_table_spi_begin(&saved, true, true);
	read_sweep_rows(all_rows);
	nrows = SPI_processed;
	rows = SPI_tuptable;
	for (uint64 i = 0; i < nrows; i++)
		sweep_row(rows->vals[i], rows->tupdesc, &counts);
	delete_orphan_holds();
	dlock_table_spi_end(&saved);
	/* a moved row is what the next rebuild trusts */
	if (counts.moved > 0)
		dlock_rows_promise_commit();
	if (counts.invalid > 0)
		ereport(LOG,
				(errmsg("dlock deleted " INT64_FORMAT " invalid lease rows of %s",
						counts.invalid, dlock_lease_table),
				 errdetail("They break the table's rules, so no lease has them.")));
	sweep_pending = true;
	sweep_clean = counts.clean;
	sweep_all_rows = all_rows;
	sweep_dead_mark = dead_mark;
	sweep_restores = restores;
	sweep_level = GetCurrentTransactionNestLevel();
	return counts.deleted;
}
