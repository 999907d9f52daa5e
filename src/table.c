/*
 * table.c
 *		The lease table of the current database, as this backend knows it:
 *		its lookup (and the hold table's beside it, from 1.2), the prepared
 *		statements on it, the SPI sessions that run as its owner, the rules
 *		its rows keep, and whether its shape lets rows be written directly.
 *
 * The bottom of the store: it calls no other file of dlock.  The files
 * above it (rows.c, floor.c, sweep.c, rebuild.c) keep their own prepared
 * statements and register them here, so a change of table forgets them all.
 *
 * Locking: backend-local state only; a call keeps the table it looked up
 * (see lease_invals), and relation locks are taken as the executor takes
 * them.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "dlock.h"
#include "store.h"
#include "table.h"

static Oid	lease_relid = InvalidOid;
static Oid	lease_owner = InvalidOid;
static Oid	plans_relid = InvalidOid;
char	   *dlock_lease_table = NULL;	/* qualified, quoted name */
char	   *dlock_floor_table = NULL;	/* dlock_token_floor, likewise */
static char *hold_table = NULL; /* dlock_lease_holds, likewise; NULL: not
								 * found yet */

/*
 * Where the files above keep their prepared statements (see
 * dlock_table_keep_plan): a change of table frees them and sets each back to
 * NULL.
 */
static SPIPlanPtr *plans[16];
static int	nplans = 0;

/*
 * Invalidations of the lease table are counted, not acted on: they arrive
 * at any relation lock a call takes (its first row write, the token floor's
 * write, a plan's revalidation), often while it is half done.  A call keeps
 * the table it looked up at its start, as the executor keeps a relation it
 * opened (its OID is the table's for as long as the table exists); the next
 * call looks it up again, and the next direct row write checks its shape
 * again (direct_checked).
 */
static uint64 lease_invals = 1;
static uint64 lease_looked_up = 0;	/* lease_invals when last looked up */
static uint64 direct_checked = 0;	/* lease_invals when its shape was last
									 * checked */

static void
relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == lease_relid)
		lease_invals++;
}

static void
forget_plans(void)
{
	for (int i = 0; i < nplans; i++)
	{
		if (*plans[i] != NULL)
			SPI_freeplan(*plans[i]);
		*plans[i] = NULL;
	}
}

/* The extension's schema in this database; InvalidOid when not installed. */
static Oid
extension_schema(void)
{
	Oid			ext = get_extension_oid("dlock", true);
	Oid			nsp = InvalidOid;
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;

	if (!OidIsValid(ext))
		return InvalidOid;
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		nsp = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return nsp;
}

/* Whether the extension is installed in this database (for the sweepers). */
bool
dlock_store_installed(void)
{
	return OidIsValid(extension_schema());
}

/*
 * Finds the lease table in the extension's schema; returns its OID, which
 * stays this call's table.
 */
Oid
dlock_table_lookup(void)
{
	static bool callback_registered = false;
	uint64		invals = lease_invals;
	Oid			nsp;
	Oid			relid;
	HeapTuple	tuple;

	if (lease_looked_up == invals)
		return lease_relid;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
		callback_registered = true;
	}

	nsp = extension_schema();
	relid = OidIsValid(nsp) ? get_relname_relid("dlock_leases", nsp) : InvalidOid;
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock's lease table is missing from this database"),
				 errhint("Drop and create the extension again.")));
	/* invalidations of this table count from here on */
	lease_relid = relid;
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	lease_owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);

	if (relid != plans_relid)
	{
		forget_plans();
		if (dlock_lease_table != NULL)
			pfree(dlock_lease_table);
		if (dlock_floor_table != NULL)
			pfree(dlock_floor_table);
		if (hold_table != NULL)
			pfree(hold_table);
		hold_table = NULL;
		dlock_lease_table = MemoryContextStrdup(TopMemoryContext,
												quote_qualified_identifier(get_namespace_name(nsp),
																		   "dlock_leases"));
		dlock_floor_table = MemoryContextStrdup(TopMemoryContext,
												quote_qualified_identifier(get_namespace_name(nsp),
																		   "dlock_token_floor"));
		plans_relid = relid;
		direct_checked = 0;
	}
	lease_looked_up = invals;
	return lease_relid;
}

/*
 * The qualified, quoted name of the hold table (dlock_lease_holds, made by
 * the update to 1.2) beside the lease table looked up, or NULL: the library
 * serves an extension not yet updated too, whose calls ask for no hold.
 * Looked for again until found, as creating it invalidates nothing this
 * backend watches; only calls about a hold (and rebuilds, sweeps and the
 * standby's list) ask, so a lease without one pays nothing.  Once found it
 * stays for as long as the lease table does: only dropping the extension
 * drops it.
 */
const char *
dlock_table_holds(void)
{
	Oid			nsp;

	if (hold_table != NULL || !OidIsValid(lease_relid))
		return hold_table;
	nsp = get_rel_namespace(lease_relid);
	if (OidIsValid(get_relname_relid("dlock_lease_holds", nsp)))
		hold_table = MemoryContextStrdup(TopMemoryContext,
										 quote_qualified_identifier(get_namespace_name(nsp),
																	"dlock_lease_holds"));
	return hold_table;
}

/*
 * Keeps the statement in *plan (SPI_keepplan) until the table changes, when
 * it is freed and *plan set back to NULL.
 */
void
dlock_table_keep_plan(SPIPlanPtr *plan)
{
	int			i = 0;

	while (i < nplans && plans[i] != plan)
		i++;
	if (i == nplans)
	{
		if (nplans == lengthof(plans))
		{
			*plan = NULL;		/* not kept: gone at SPI_finish */
			elog(ERROR, "too many dlock prepared statements");
		}
		plans[nplans++] = plan;
	}
	SPI_keepplan(*plan);
}

/* Prepares fmt, with the lease table's name for %1$s, into *plan, kept. */
void
dlock_table_prepare(SPIPlanPtr *plan, const char *fmt, int nargs, Oid *argtypes)
{
	*plan = SPI_prepare(psprintf(fmt, dlock_lease_table), nargs, argtypes);
	if (*plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	dlock_table_keep_plan(plan);
}

/*
 * Opens an SPI session as the table's owner (see AsOwner in table.h); write:
 * refused in a read-only transaction; pin_path: with search_path pinned, for
 * ad hoc queries.
 */
void
dlock_table_spi_begin(AsOwner *saved, bool write, bool pin_path)
{
	if (write)
		dlock_table_check_writable();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	SetUserIdAndSecContext(lease_owner, saved->sec_context |
						   SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	saved->guc_level = -1;
	if (pin_path)
	{
		saved->guc_level = NewGUCNestLevel();
		(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	}
}

void
dlock_table_spi_end(AsOwner *saved)
{
	if (saved->guc_level >= 0)
		AtEOXact_GUC(true, saved->guc_level);
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
	SPI_finish();
}

/*
 * Whether a row keeps the table's rules (see load_rows in rebuild.c), as one boolean
 * column for the queries that read rows: the rebuild restores only rows
 * that do, the sweep deletes the others (no lease can have such a row), and
 * only theirs are fit for dlock_make_key.
 */
const char *
dlock_table_row_valid_sql(void)
{
	static char *sql = NULL;

	if (sql == NULL)
		sql = MemoryContextStrdup(TopMemoryContext,
								  psprintf("(token OPERATOR(pg_catalog.>) 0"
										   " AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.>=) 1"
										   " AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) %d"
										   " AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.>=) 1"
										   " AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.<=) %d"
										   " AND pg_catalog.isfinite(expires_at)"
										   " AND mode OPERATOR(pg_catalog.=) ANY ('{exclusive,shared}'::pg_catalog.text[])"
										   " AND coalesce(permits OPERATOR(pg_catalog.>) 0, true)"
										   " AND ttl OPERATOR(pg_catalog.>) '0'::pg_catalog.interval"
										   " AND ttl OPERATOR(pg_catalog.<=) pg_catalog.make_interval(secs => %d))",
										   DLOCK_NAME_MAX, DLOCK_OWNER_MAX,
										   (int) (DLOCK_TTL_MAX / USECS_PER_SEC)));
	return sql;
}

/* ---------------------------------------------------------------------
 * The direct path's shape check
 * --------------------------------------------------------------------- */

/*
 * The direct path (rows.c) writes rows only into a table as the extension
 * made it; a table its owner changed takes SPI.
 */
typedef struct LeaseColumn
{
	const char *name;
	Oid			type;
	bool		notnull;
} LeaseColumn;

/* the columns of dlock--1.0.sql, in the order heap_form_tuple fills them */
static const LeaseColumn lease_columns[LEASE_NATTS] = {
	{"name", TEXTOID, true},
	{"owner", TEXTOID, true},
	{"role", OIDOID, true},
	{"token", INT8OID, true},
	{"granted_at", TIMESTAMPTZOID, true},
	{"expires_at", TIMESTAMPTZOID, true},
	{"ttl", INTERVALOID, true},
	{"version", INT8OID, true},
	{"mode", TEXTOID, true},
	{"permits", INT4OID, false}
};

/* what dlock_table_open_direct found when it last checked (direct_checked) */
static bool direct_fit = false;

/* Whether the open lease table is as the extension made it. */
static bool
lease_table_fits(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	List	   *indexes;
	Relation	key;
	bool		fit;

	if (rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->rd_rel->relreplident != REPLICA_IDENTITY_DEFAULT ||
		rel->rd_rel->relhassubclass || rel->rd_rel->relispartition ||
		rel->trigdesc != NULL || rel->rd_rules != NULL ||
		rel->rd_rel->relrowsecurity ||
		desc->natts != LEASE_NATTS ||
		(desc->constr != NULL && desc->constr->num_check > 0))
		return false;
	for (int i = 0; i < LEASE_NATTS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		const LeaseColumn *col = &lease_columns[i];

		if (att->attisdropped || att->attgenerated != '\0' ||
			att->atttypid != col->type || att->atttypmod != -1 ||
			att->attcollation != (col->type == TEXTOID ? DEFAULT_COLLATION_OID : InvalidOid) ||
			att->attnotnull != col->notnull ||
			strcmp(NameStr(att->attname), col->name) != 0)
			return false;
	}

	indexes = RelationGetIndexList(rel);
	fit = list_length(indexes) == 1 && linitial_oid(indexes) == rel->rd_pkindex;
	list_free(indexes);
	if (!fit)
		return false;
	key = index_open(rel->rd_pkindex, RowExclusiveLock);
	fit = key->rd_rel->relam == BTREE_AM_OID &&
		key->rd_index->indnatts == 2 &&
		key->rd_index->indkey.values[0] == ATT_NAME &&
		key->rd_index->indkey.values[1] == ATT_TOKEN &&
		key->rd_opfamily[0] == TEXT_BTREE_FAM_OID &&
		key->rd_opfamily[1] == INTEGER_BTREE_FAM_OID &&
		key->rd_indcollation[0] == DEFAULT_COLLATION_OID &&
		key->rd_index->indimmediate &&
		RelationGetIndexExpressions(key) == NIL &&
		RelationGetIndexPredicate(key) == NIL;
	index_close(key, NoLock);
	return fit;
}

/*
 * Opens the lease table if rows can be written directly (the key is then
 * rel->rd_pkindex); else returns NULL.  The locks are kept to the end of
 * the transaction, as the executor keeps them.  The shape is checked again
 * only after an invalidation of the table, which any change to it sends
 * (opening it reads those that came).
 */
Relation
dlock_table_open_direct(void)
{
	Relation	rel = try_table_open(lease_relid, RowExclusiveLock);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock's lease table was dropped while this call was running")));
	if (direct_checked != lease_invals)
	{
		uint64		invals = lease_invals;

		direct_fit = lease_table_fits(rel);
		direct_checked = invals;
	}
	if (!direct_fit)
	{
		table_close(rel, NoLock);
		return NULL;
	}
	return rel;
}
