/*
 * floor.c
 *		The per-database token floor: the table dlock_token_floor, which
 *		keeps a database's tokens above every token it ever stored when the
 *		cluster's token file does not come along (pg_upgrade, a dump
 *		restored elsewhere: see dlock--1.0.sql), and the copy of it in the
 *		database's slot that every grant reads.
 *
 * A grant whose token reaches the floor adds a row covering the block of
 * tokens reserved so far, in its own transaction; the slot learns the new
 * floor when that transaction commits.  The rebuild reads the floor
 * (dlock_floor_read) and raises the cluster's tokens above it.
 *
 * Locking: the slot's floor is an atomic read by every grant without a
 * lock, written under the slots' spinlock; the row is written through SPI
 * with no partition lock held.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"

#include "dbslots.h"
#include "floor.h"
#include "store.h"
#include "table.h"
#include "tokens.h"

/* prepared statement, kept by table.c (dlock_table_keep_plan) */
static SPIPlanPtr plan_floor = NULL;

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

/*
 * The floor the table stores, in the caller's SPI session (the rebuild's):
 * tokens issued here before a pg_upgrade or restore, see dlock--1.0.sql.
 */
uint64
dlock_floor_read(void)
{
	bool		isnull;
	Datum		d;

	if (SPI_execute(psprintf("SELECT pg_catalog.max(floor) FROM %s", dlock_floor_table),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dlock token floor");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : (uint64) Max(DatumGetInt64(d), 0);
}
