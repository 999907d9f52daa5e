/*
 * fence.c
 *		Fencing in the database that holds the data: dlock_fence(), the
 *		dlock_fenced trigger that checks a row's fencing token, and the
 *		dlock_versioned trigger for optimistic versioned rows.
 *
 * A fence pins the lease until the transaction ends (see xact.c), once per
 * name and token however many rows a transaction writes.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "args.h"
#include "lease.h"
#include "store.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(dlock_fence);
PG_FUNCTION_INFO_V1(dlock_fenced);
PG_FUNCTION_INFO_V1(dlock_versioned);

/* SQLSTATE of a write whose fencing token is not the live lease's */
#define ERRCODE_DLOCK_FENCE		MAKE_SQLSTATE('D','L','0','0','1')

/*
 * Checks token against the live lease on name, raising DL001 if it is not
 * that lease's token, and pins the lease until the transaction ends.
 */
static void
fence(const char *name, int len, int64 token)
{
	DLockRequest req;
	uint64		current;
	DLockFenceResult result = DLOCK_FENCE_UNKNOWN;

	memset(&req, 0, sizeof(req));
	dlock_set_name(&req, name, len);
	req.roleid = GetUserId();

	/* tokens are positive: anything else was never a lease's */
	if (token > 0)
		result = dlock_lease_fence(&req, (uint64) token, &current);
	switch (result)
	{
		case DLOCK_FENCE_OK:
			return;
		case DLOCK_FENCE_STALE:
			ereport(ERROR,
					(errcode(ERRCODE_DLOCK_FENCE),
					 errmsg("stale fencing token for lock \"%.*s\"", len, name),
					 errdetail("Token " INT64_FORMAT " was superseded by a newer lease, token " INT64_FORMAT ".",
							   token, (int64) current)));
			break;
		case DLOCK_FENCE_EXPIRED:
			ereport(ERROR,
					(errcode(ERRCODE_DLOCK_FENCE),
					 errmsg("fencing token for lock \"%.*s\" belongs to an expired lease", len, name),
					 errdetail("Token " INT64_FORMAT ".", token),
					 errhint("Renew leases before their TTL runs out.")));
			break;
		case DLOCK_FENCE_UNKNOWN:
			ereport(ERROR,
					(errcode(ERRCODE_DLOCK_FENCE),
					 errmsg("fencing token is not the token of a live lease on lock \"%.*s\"", len, name),
					 errdetail("Token " INT64_FORMAT ": its lease ended, or never existed.", token)));
			break;
		case DLOCK_FENCE_ROLE:
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("fencing token for lock \"%.*s\" belongs to a lease of another role", len, name),
					 errdetail("Token " INT64_FORMAT ".", token)));
			break;
	}
}

static void
check_writable(void)
{
	dlock_require_preload();
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot fence during recovery")));
}

/* dlock_fence(name, token) */
Datum
dlock_fence(PG_FUNCTION_ARGS)
{
	char	   *name;
	int			len;

	check_writable();
	dlock_store_ensure_loaded();
	dlock_text_arg(fcinfo, 0, ARG_NAME, &name, &len);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing token must not be null")));
	fence(name, len, PG_GETARG_INT64(1));
	PG_RETURN_VOID();
}

static int
trigger_column(TriggerData *trigdata, const char *column, bool must_exist)
{
	int			attno = SPI_fnumber(trigdata->tg_relation->rd_att, column);

	if (attno <= 0 && must_exist)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of table \"%s\" does not exist",
						column, RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Check the arguments of trigger \"%s\".",
						 trigdata->tg_trigger->tgname)));
	return attno > 0 ? attno : 0;
}

static TriggerData *
row_trigger(FunctionCallInfo fcinfo, const char *fname, int nargs)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("%s() must be called as a BEFORE ... FOR EACH ROW trigger", fname)));
	if (trigdata->tg_trigger->tgnargs != nargs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s() takes %d trigger argument%s", fname, nargs, nargs > 1 ? "s" : "")));
	return trigdata;
}

static int64
int_column(HeapTuple tuple, TupleDesc desc, int attno, bool *isnull)
{
	Datum		value = heap_getattr(tuple, attno, desc, isnull);

	if (*isnull)
		return 0;
	switch (TupleDescAttr(desc, attno - 1)->atttypid)
	{
		case INT8OID:
			return DatumGetInt64(value);
		case INT4OID:
			return DatumGetInt32(value);
		case INT2OID:
			return DatumGetInt16(value);
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("column \"%s\" must be of type bigint, integer or smallint",
					NameStr(TupleDescAttr(desc, attno - 1)->attname))));
	return 0;					/* keep compiler quiet */
}

/*
 * dlock_fenced(lock, token_column): a BEFORE INSERT/UPDATE/DELETE row
 * trigger.  lock is a column of the table holding the lock name, or else
 * the lock name itself.  The row's token must be the live lease's (INSERT,
 * UPDATE), and an UPDATE may not lower the token the row was written with.
 * A write must carry a token of its own: an UPDATE that neither sets nor
 * changes the token column keeps a token checked when someone else wrote
 * it, so it needs the transaction to have fenced exactly that token; a
 * DELETE needs the transaction to have fenced the lock.
 */
Datum
dlock_fenced(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = row_trigger(fcinfo, "dlock_fenced", 2);
	char	  **args = trigdata->tg_trigger->tgargs;
	TupleDesc	desc = trigdata->tg_relation->rd_att;
	int			name_col = trigger_column(trigdata, args[0], false);
	int			token_col = trigger_column(trigdata, args[1], true);
	HeapTuple	row;
	char	   *name;
	DLockKey	key;
	bool		isnull;
	int64		token;

	/* a trigger for UPDATE OF some columns never sees updates of the others */
	if (trigdata->tg_trigger->tgnattr > 0)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("dlock_fenced() trigger \"%s\" must not be limited to UPDATE OF some columns",
						trigdata->tg_trigger->tgname),
				 errdetail("Updates of the other columns would not be checked."),
				 errhint("Create the trigger without OF: BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW.")));
	check_writable();
	/* the first call in a database after a restart may be this one */
	dlock_store_ensure_loaded();
	row = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? trigdata->tg_newtuple : trigdata->tg_trigtuple;
	name = name_col ? SPI_getvalue(row, desc, name_col) : args[0];
	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lock name column \"%s\" is null", args[0])));
	if (strlen(name) == 0 || strlen(name) > DLOCK_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock name must be 1 to %d bytes", DLOCK_NAME_MAX)));
	dlock_make_key(&key, name, strlen(name));

	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		token = (int64) dlock_xact_fenced_token(&key);
		if (token == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DLOCK_FENCE),
					 errmsg("deleting from \"%s\" needs a fencing token for lock \"%s\"",
							RelationGetRelationName(trigdata->tg_relation), name),
					 errhint("Call dlock_fence(lock, token) earlier in the transaction.")));
		fence(name, strlen(name), token);
		return PointerGetDatum(trigdata->tg_trigtuple);
	}

	token = int_column(row, desc, token_col, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_DLOCK_FENCE),
				 errmsg("fencing token column \"%s\" is null", args[1])));
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		int64		old_token = int_column(trigdata->tg_trigtuple, desc, token_col, &isnull);

		if (!isnull && token < old_token)
			ereport(ERROR,
					(errcode(ERRCODE_DLOCK_FENCE),
					 errmsg("stale fencing token for a row of \"%s\"",
							RelationGetRelationName(trigdata->tg_relation)),
					 errdetail("Token " INT64_FORMAT " is below the token " INT64_FORMAT " the row was written with.",
							   token, old_token)));

		/*
		 * The row's own token, left in place, says nothing about the writer:
		 * a stale holder's UPDATE of other columns would pass as the live
		 * holder's.  (An earlier trigger may set the column: a changed token
		 * is the writer's own.)
		 */
		if (!bms_is_member(token_col - FirstLowInvalidHeapAttributeNumber, trigdata->tg_updatedcols) &&
			!isnull && token == old_token)
		{
			uint64		fenced = dlock_xact_fenced_token(&key);

			if (fenced != (uint64) token)
				ereport(ERROR,
						(errcode(ERRCODE_DLOCK_FENCE),
						 errmsg("updating \"%s\" needs a fencing token for lock \"%s\"",
								RelationGetRelationName(trigdata->tg_relation), name),
						 fenced == 0 ?
						 errdetail("The update does not set column \"%s\", and the transaction has not fenced the lock.",
								   args[1]) :
						 errdetail("The update does not set column \"%s\", so the row keeps token " INT64_FORMAT ", but the transaction fenced token " INT64_FORMAT ".",
								   args[1], token, (int64) fenced),
						 errhint("Set column \"%s\" to your lease's token in the UPDATE, or call dlock_fence(lock, token) with the row's token earlier in the transaction.",
								 args[1])));
		}
	}
	fence(name, strlen(name), token);
	return PointerGetDatum(row);
}

/*
 * dlock_versioned(version_column): a BEFORE INSERT/UPDATE row trigger for
 * optimistic concurrency.  An UPDATE states the version it read (SET
 * version = <read>) and the row gets that + 1; an update stating a stale
 * version fails with a serialization failure.  The classic "SET version =
 * version + 1 WHERE version = <read>" is accepted as is, and an update that
 * leaves the column alone counts as based on the current version.
 */
Datum
dlock_versioned(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = row_trigger(fcinfo, "dlock_versioned", 1);
	TupleDesc	desc = trigdata->tg_relation->rd_att;
	int			col = trigger_column(trigdata, trigdata->tg_trigger->tgargs[0], true);
	HeapTuple	row;
	bool		isnull;
	int64		next;
	Datum		value;
	Oid			type = TupleDescAttr(desc, col - 1)->atttypid;

	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		return PointerGetDatum(trigdata->tg_trigtuple);
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		row = trigdata->tg_trigtuple;
		next = int_column(row, desc, col, &isnull);
		if (!isnull)
			return PointerGetDatum(row);
		next = 1;
	}
	else
	{
		int64		read_version = int_column(trigdata->tg_newtuple, desc, col, &isnull);
		int64		current = int_column(trigdata->tg_trigtuple, desc, col, &isnull);

		row = trigdata->tg_newtuple;
		if (read_version == current + 1)
			return PointerGetDatum(row);
		if (read_version != current)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("row of \"%s\" changed since it was read",
							RelationGetRelationName(trigdata->tg_relation)),
					 errdetail("The update is based on version " INT64_FORMAT "; the row is at version " INT64_FORMAT ".",
							   read_version, current),
					 errhint("Read the row again and retry.")));
		next = current + 1;
	}
	value = type == INT8OID ? Int64GetDatum(next) :
		type == INT4OID ? Int32GetDatum((int32) next) : Int16GetDatum((int16) next);
	isnull = false;
	row = heap_modify_tuple_by_cols(row, desc, 1, &col, &value, &isnull);
	return PointerGetDatum(row);
}
