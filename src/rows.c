/*
 * rows.c
 *		A lease's row in the lease table: its writes (a grant's insert, a
 *		renewal's or extension's update, a release's delete, the deletion of
 *		a name's ended rows by its next grant), and what their transaction's
 *		commit waits for.
 *
 * Rows are written in the caller's transaction: a grant's insert and a
 * release's delete with the heap and index access methods (insert_direct,
 * delete_direct), the rest through SPI as the table's owner.  A lease with a
 * minimum hold also has a row in the hold table (dlock_lease_holds, 1.2),
 * written through SPI with its lease's, and after it (see hold_write); a
 * lease without one never touches that table.  Writers of one
 * row queue on its row lock, so its versions follow commit order; shared
 * memory takes an expiry only from a newer version (see xact.c).
 *
 * Locking: SPI and heap access only without partition locks; clearing a
 * name's rows reads its leases under the partition lock (shared) first and
 * releases it before any SQL.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "engine.h"
#include "grace.h"
#include "rows.h"
#include "store.h"
#include "table.h"

/* prepared statements, kept by table.c (dlock_table_keep_plan) */
static SPIPlanPtr plan_write = NULL;
static SPIPlanPtr plan_takeover = NULL;
static SPIPlanPtr plan_delete = NULL;
static SPIPlanPtr plan_update = NULL;
static SPIPlanPtr plan_clear = NULL;
static SPIPlanPtr plan_clear_probe = NULL;
static SPIPlanPtr plan_hold_write = NULL;
static SPIPlanPtr plan_hold_update = NULL;
static SPIPlanPtr plan_hold_delete = NULL;

static void promise_commit(int64 lasts);
static void note_row_wal(XLogRecPtr before, bool own);
static bool table_plain(void);
static uint64 insert_spi(const DLockRow *row, Datum *args);

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
 * made it (lease_columns, in table.c; heap; its primary key on (name,
 * token) its only index; no CHECK constraint, trigger, rule, row security,
 * inheritance or other replica identity): a heap insert or delete and the
 * key's index entry, as the executor makes them.  Executor start-up and teardown were a
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

/* Prepares fmt, with the hold table's name for %s, into *plan, kept. */
static void
hold_prepare(SPIPlanPtr *plan, const char *fmt, int nargs, Oid *argtypes)
{
	const char *holds = dlock_table_holds();

	/* only calls of the 1.2 functions ask for a hold, and 1.2 made it */
	if (holds == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock's hold table is missing from this database"),
				 errhint("Drop and create the extension again.")));
	*plan = SPI_prepare(psprintf(fmt, holds), nargs, argtypes);
	if (*plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	dlock_table_keep_plan(plan);
}

/*
 * The hold row of the lease (name, token), after its lease row and in its
 * transaction, so row locks are always taken lease row first: a grant's
 * insert (min_hold), a release within the hold's or a renewal's update
 * (released_at; 0 is NULL, taken back), a release's delete.  No hold row
 * lives without its lease row beyond that transaction but when its lease
 * row is deleted by another path (the sweep of an ended lease, the next
 * grant clearing it): the sweep deletes those (see sweep.c).
 */
typedef enum HoldWrite
{
	HOLD_INSERT,
	HOLD_UPDATE,
	HOLD_DELETE
} HoldWrite;

static void
hold_write(HoldWrite what, const DLockKey *key, uint64 token, int64 min_hold,
		   TimestampTz released_at)
{
	AsOwner		saved;
	Datum		args[3];
	Oid			types[3] = {TEXTOID, INT8OID, INTERVALOID};
	SPIPlanPtr	plan;
	int			expected;

	dlock_table_spi_begin(&saved, true, false);
	args[0] = PointerGetDatum(cstring_to_text_with_len(key->name, key->len));
	args[1] = Int64GetDatum((int64) token);
	if (what == HOLD_INSERT)
	{
		if (plan_hold_write == NULL)
			hold_prepare(&plan_hold_write, "INSERT INTO %s (name, token, min_hold)"
						 " VALUES ($1, $2, $3)", 3, types);
		args[2] = ttl_datum(min_hold);
		plan = plan_hold_write;
		expected = SPI_OK_INSERT;
	}
	else if (what == HOLD_UPDATE)
	{
		types[2] = TIMESTAMPTZOID;
		if (plan_hold_update == NULL)
			hold_prepare(&plan_hold_update, "UPDATE %s SET released_at = $3"
						 " WHERE name OPERATOR(pg_catalog.=) $1"
						 " AND token OPERATOR(pg_catalog.=) $2", 3, types);
		args[2] = TimestampTzGetDatum(released_at);
		plan = plan_hold_update;
		expected = SPI_OK_UPDATE;
	}
	else
	{
		if (plan_hold_delete == NULL)
			hold_prepare(&plan_hold_delete, "DELETE FROM %s"
						 " WHERE name OPERATOR(pg_catalog.=) $1"
						 " AND token OPERATOR(pg_catalog.=) $2", 2, types);
		plan = plan_hold_delete;
		expected = SPI_OK_DELETE;
	}
	/* a lease with a hold has its hold row for as long as its lease row */
	if (execute(plan, args, what == HOLD_UPDATE && released_at == 0 ? "  n" : NULL,
				0) != expected || (what != HOLD_DELETE && SPI_processed != 1))
		elog(ERROR, "could not write a dlock hold row");
	dlock_table_spi_end(&saved);
}

/*
 * What the row of a durable lease says, taken under its partition lock;
 * the caller fills in expires_at and ttl.
 */
void
dlock_store_fill_row(DLockRow *row, const DLockEntry *lease, int64 version)
{
	memcpy(&row->owner, &lease->owner, offsetof(DLockOwner, str) + lease->owner.len);
	row->roleid = lease->roleid;
	row->token = lease->token;
	row->granted_at = lease->granted_at;
	row->min_hold = lease->min_hold;
	row->mode = (DLockMode) lease->mode;
	row->permits = dlock_head_of(lease)->permits;
	/* an exclusive lease's row closes every older row of its name anyway */
	row->takeover = lease->clear_rows && lease->mode == DLOCK_EXCLUSIVE &&
		row->permits == 0;
	row->version = version;
}

/* A durable grant whose row is deferred needs a read-write transaction too. */
void
dlock_store_check_writable(void)
{
	dlock_table_check_writable();
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
	Datum		args[10];
	bool		direct = false;
	XLogRecPtr	wal_before = XactLastRecEnd;

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
	if (!row->takeover)
	{
		/* in the table's column order */
		Datum		values[LEASE_NATTS] = {args[0], args[1], args[2], args[3],
		args[4], args[5], args[9], args[8], args[6], args[7]};
		bool		nulls[LEASE_NATTS] = {0};

		nulls[LEASE_NATTS - 1] = (row->permits == 0);
		direct = insert_direct(values, nulls);
	}
	/* a takeover's deletions are flushed: see dlock_store_clear_rows */
	if (!direct && insert_spi(row, args) > 0)
		promise_commit(-1);
	else
		promise_commit(row->ttl);
	if (row->min_hold != 0)
		hold_write(HOLD_INSERT, key, row->token, row->min_hold, 0);
	note_row_wal(wal_before, row->min_hold == 0 && (direct || table_plain()));
}

/*
 * dlock_store_insert's row through SPI (a takeover, or a changed table).
 * Returns how many rows of ended leases a takeover deleted.
 */
static uint64
insert_spi(const DLockRow *row, Datum *args)
{
	AsOwner		saved;
	uint64		deleted = 0;
	int			expected = row->takeover ? SPI_OK_INSERT_RETURNING : SPI_OK_INSERT;

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
													 " FOR UPDATE SKIP LOCKED)) RETURNING 1)%s"
													 " RETURNING (SELECT pg_catalog.count(*) FROM older)", insert),
							10, types);
	}
	if (execute(row->takeover ? plan_takeover : plan_write, args,
				row->permits == 0 ? "       n  " : NULL, 0) != expected ||
		SPI_processed != 1)
		elog(ERROR, "could not write a dlock lease row");
	if (row->takeover)
	{
		bool		isnull;

		deleted = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
	}
	dlock_table_spi_end(&saved);
	return deleted;
}

/*
 * Moves the expiry of a lease's row, and its ttl (an extension or renewal;
 * or a release within its minimum hold, released_at set).  A lease with a
 * hold (hold) has its hold row say when it was released within it, or (0)
 * that it was not or was taken back.
 * The update waits for any other transaction writing the row, so row
 * versions follow commit order.  It never creates a row: if the row is gone
 * (released from another session), nothing is written.  Returns the row's
 * new version, or 0.
 */
int64
dlock_store_update(const DLockKey *key, uint64 token, TimestampTz expires_at,
				   int64 ttl, bool hold, TimestampTz released_at)
{
	AsOwner		saved;
	Datum		args[4];
	int64		version = 0;
	XLogRecPtr	wal_before = XactLastRecEnd;

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
	Assert(hold || released_at == 0);
	if (version != 0 && hold)
		hold_write(HOLD_UPDATE, key, token, 0, released_at);
	note_row_wal(wal_before, !hold && table_plain());
	if (version != 0)
		promise_commit(ttl);
	return version;
}

/*
 * What a commit waits for.
 *
 * A grant, a renewal or an extension is a promise.  Its commit returns
 * before its WAL is flushed (as under synchronous_commit = off) when losing
 * it in a crash cannot give its name a second holder: grace.c decides
 * (dlock_grace_unflushed: a ttl within dlock.failover_grace, no synchronous
 * standby, dlock.flush_grants off) and raises the crash grace to cover it
 * before the commit.  Otherwise its commit waits for the flush and, with
 * synchronous replication, for the synchronous standbys, whatever
 * synchronous_commit the caller runs with: below remote_write (local, off)
 * the commit would wait for no standby, and a failover to one would lose
 * the lease, so for that commit the setting is raised to on (remote_flush),
 * as SET LOCAL would; remote_write and remote_apply are kept.  A lease's
 * minimum hold never outlasts its ttl, so the ttl is what a promise lasts.
 *
 * A release need not be on disk before it returns: if a crash loses it, the
 * lease comes back and keeps its name until its TTL ends, which is safe.
 *
 * Either way a commit skips the flush only if all its WAL is dlock's own row
 * writes (row_wal), on a lease table as the extension made it, with no hold
 * rows (another table, which its owner may have given triggers): any other
 * WAL of the transaction, before, between or after (the caller's own
 * writes, a fenced write), keeps the caller's synchronous_commit, and the
 * flush a promise needs.  WAL is written in order, so a fenced write on disk
 * has the grant it used on disk before it.  The next flush anywhere in the
 * cluster flushes what was skipped.
 */
typedef enum RowWal
{
	ROW_WAL_NONE,				/* no row write in this transaction */
	ROW_WAL_ONLY,				/* all its WAL so far: dlock's row writes, up
								 * to row_wal_end */
	ROW_WAL_MIXED				/* other WAL too */
} RowWal;

static bool promised = false;	/* this transaction wrote a promise */
static int64 promised_lasts = 0;	/* the longest; -1: must be flushed */
static RowWal row_wal = ROW_WAL_NONE;
static XLogRecPtr row_wal_end = InvalidXLogRecPtr;
static int	saved_synchronous_commit = -1;	/* -1: not changed */

static void
commit_xact_callback(XactEvent event, void *arg)
{
	bool		own_wal;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			own_wal = row_wal == ROW_WAL_ONLY && XactLastRecEnd == row_wal_end;
			if (promised &&
				(!own_wal || promised_lasts < 0 || !dlock_grace_unflushed(promised_lasts)))
			{
				ForceSyncCommit();
				if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_WRITE)
				{
					/* undone by the commit's own GUC cleanup, after the wait */
					(void) set_config_option("synchronous_commit", "on",
											 PGC_USERSET, PGC_S_SESSION,
											 GUC_ACTION_LOCAL, true, 0, false);
				}
			}
			else if (own_wal && synchronous_commit > SYNCHRONOUS_COMMIT_OFF)
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
			row_wal = ROW_WAL_NONE;
			promised = false;
			promised_lasts = 0;
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
 * The WAL written since before was a row write of dlock's alone (own) or
 * may hold more: with nothing else since the last row write, the
 * transaction's WAL stays dlock's own.
 */
static void
note_row_wal(XLogRecPtr before, bool own)
{
	register_commit_callback();
	if (own && (before == InvalidXLogRecPtr ||
				(row_wal == ROW_WAL_ONLY && before == row_wal_end)))
	{
		row_wal = ROW_WAL_ONLY;
		row_wal_end = XactLastRecEnd;
	}
	else
		row_wal = ROW_WAL_MIXED;
}

/* Whether an SPI write on the lease table wrote its rows only (no trigger). */
static bool
table_plain(void)
{
	Relation	rel = dlock_table_open_direct();

	if (rel == NULL)
		return false;
	table_close(rel, NoLock);
	return true;
}

/*
 * Makes this transaction's commit wait for its WAL locally and on the
 * synchronous standbys, unless a promise lasting lasts (-1: always waits)
 * may be lost in a crash (see above).
 */
static void
promise_commit(int64 lasts)
{
	register_commit_callback();
	promised = true;
	if (lasts < 0 || promised_lasts < 0)
		promised_lasts = -1;
	else
		promised_lasts = Max(promised_lasts, lasts);
}

/*
 * promise_commit for the sweep, whose moved rows the next rebuild trusts;
 * the grant's insert calls the static one, inlined.
 */
void
dlock_rows_promise_commit(void)
{
	promise_commit(-1);
}

/*
 * Deletes the row of the lease with token (a release), and its hold row if
 * it has one (hold).
 */
void
dlock_store_delete(const DLockKey *key, uint64 token, bool hold)
{
	AsOwner		saved;
	Datum		args[2];
	XLogRecPtr	wal_before = XactLastRecEnd;
	bool		direct;

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
	if (hold)
		hold_write(HOLD_DELETE, key, token, 0, 0);
	/* through SQL, an owner's trigger may have written more than the row */
	note_row_wal(wal_before, direct && !hold);
}

/*
 * Deletes the rows of the name's leases older than token that ended: the
 * grant of token found rows of ended leases on its name (see clear_rows in
 * engine.h), and no crash may bring them back once its token is out.  The
 * name's older leases still in shared memory keep their rows.  In the
 * grant's transaction, waiting for any other writer of those rows; when it
 * deletes anything, its commit waits for the WAL flush, whatever the
 * grant's ttl: a crash that lost the deletion would restore a lease that
 * had ended just before it for its full ttl (rebuild.c), which its owner
 * could renew while the lost grant's holder still counts on its own.  A
 * read-only transaction cannot delete them, and refuses the grant if there
 * are any.
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
			promise_commit(-1);
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
	const char *holds;

	(void) dlock_table_lookup();
	dlock_table_spi_begin(&saved, false, true);
	holds = dlock_table_holds();
	/* a row is a 'ttl' lease's; older SQL has fewer columns */
	if (SPI_execute(psprintf("SELECT name, owner, token, granted_at, expires_at, role,"
							 " NULL::int, 0, version, true, mode, permits%s FROM %s%s"
							 " WHERE expires_at > clock_timestamp()",
							 tupdesc->natts <= 12 ? "" : holds != NULL ?
							 ", 'ttl'::text, min_hold, released_at" :
							 ", 'ttl'::text, NULL::interval, NULL::timestamptz",
							 dlock_lease_table,
							 holds != NULL ? psprintf(" LEFT JOIN %s USING (name, token)", holds) : ""),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dlock lease table");
	for (uint64 i = 0; i < SPI_processed; i++)
		tuplestore_puttuple(tupstore, SPI_tuptable->vals[i]);
	dlock_table_spi_end(&saved);
}
