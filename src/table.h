/*
 * table.h
 *		The lease table of the current database, for the files of the store
 *		above table.c: its lookup, prepared statements, SPI as its owner,
 *		the rules of its rows, and the direct path's open.
 */
#ifndef DLOCK_TABLE_H
#define DLOCK_TABLE_H

#include "access/xact.h"
#include "executor/spi.h"
#include "utils/rel.h"

/* the lease table's columns the direct path and its index use */
#define ATT_NAME	1
#define ATT_TOKEN	4
#define LEASE_NATTS 10

/* qualified, quoted names of the tables, as last looked up */
extern char *dlock_lease_table;
extern char *dlock_floor_table;

extern Oid	dlock_table_lookup(void);
extern const char *dlock_table_holds(void);
extern void dlock_table_keep_plan(SPIPlanPtr *plan);
extern void dlock_table_prepare(SPIPlanPtr *plan, const char *fmt, int nargs,
								Oid *argtypes);

/*
 * SPI work runs as the table's owner, so callers need no rights on it.  The
 * prepared statements of the lease operations name every table, operator and
 * function with its schema, so no object a caller created (a function or
 * operator in public or pg_temp) can be picked up with the owner's rights.
 * The few ad hoc queries (rebuild, sweep, listing) run with search_path
 * pinned instead (pin_path).
 */
typedef struct AsOwner
{
	Oid			userid;
	int			sec_context;
	int			guc_level;		/* -1: search_path untouched */
} AsOwner;

/* inline: every durable grant and release checks it */
static inline void
dlock_table_check_writable(void)
{
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot change a durable dlock lease in a read-only transaction"),
				 errhint("Use a read-write transaction, or SET dlock.durable = off for leases kept in memory only.")));
}

extern void dlock_table_spi_begin(AsOwner *saved, bool write, bool pin_path);
extern void dlock_table_spi_end(AsOwner *saved);

extern const char *dlock_table_row_valid_sql(void);
extern Relation dlock_table_open_direct(void);

#endif							/* DLOCK_TABLE_H */
