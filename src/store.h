/*
 * store.h
 *		Durability: the per-database lease table that rebuilds shared memory
 *		after a restart or crash.  What the layers above the store
 *		(acquire.c, lease.c, worker.c, the entry points, the module load)
 *		call; the store's own files, bottom to top: table.c, dbslots.c,
 *		floor.c, rows.c, sweep.c, deferred.c, rebuild.c (see dlock.h).
 */
#ifndef DLOCK_STORE_H
#define DLOCK_STORE_H

#include "access/tupdesc.h"
#include "utils/tuplestore.h"

#include "engine.h"

/* per-database slots and drops (dbslots.c), the lease table (table.c) */
extern Size dlock_db_shmem_size(void);
extern void dlock_db_shmem_init(void);
extern void dlock_store_hook_drops(void);
extern bool dlock_store_installed(void);

/* the rebuild (rebuild.c); leases kept by a clean shutdown (deferred.c) */
extern void dlock_store_ensure_loaded(void);
extern void dlock_deferred_startup(void);

/* What a lease row holds */
typedef struct DLockRow
{
	DLockOwner	owner;
	Oid			roleid;
	uint64		token;
	TimestampTz granted_at;
	TimestampTz expires_at;
	int64		ttl;			/* microseconds */
	int64		min_hold;		/* microseconds; 0: none (no hold row) */
	int64		version;
	DLockMode	mode;
	int32		permits;
	bool		takeover;		/* a grant that also deletes the rows of the
								 * name's older, ended leases */
} DLockRow;

/* row writes (rows.c) */
extern void dlock_store_fill_row(DLockRow *row, const DLockEntry *lease, int64 version);
extern void dlock_store_check_writable(void);
extern TransactionId dlock_store_xid(void);
extern void dlock_store_insert(const DLockKey *key, const DLockRow *row);
extern int64 dlock_store_update(const DLockKey *key, uint64 token,
								TimestampTz expires_at, int64 ttl, bool hold,
								TimestampTz released_at);
extern void dlock_store_delete(const DLockKey *key, uint64 token, bool hold);
extern void dlock_store_clear_rows(const DLockKey *key, uint32 hash, uint64 token);
extern void dlock_store_list(Tuplestorestate *tupstore, TupleDesc tupdesc);

/* the token floor (floor.c) */
extern void dlock_store_note_token(uint64 token);

/* rows of ended leases (sweep.c) */
extern void dlock_store_forget_dead_rows(void);
extern int	dlock_store_dead_databases(Oid *dbids, int max, int64 *retry_at);
extern int64 dlock_store_sweep_rows(bool by_sweeper);

#endif							/* DLOCK_STORE_H */
