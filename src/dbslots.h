/*
 * dbslots.h
 *		The per-database slots in shared memory, for the files of the store
 *		above dbslots.c.
 *
 * Every field of a slot is protected by the slots' spinlock (mutex), except
 * that token_floor is also read without it (an atomic, written under it).
 * The condition variable is broadcast when a load ends.
 */
#ifndef DLOCK_DBSLOTS_H
#define DLOCK_DBSLOTS_H

#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/spin.h"

#include "dlock.h"

typedef enum DbState
{
	DB_NOT_LOADED,
	DB_LOADING,
	DB_LOADED
} DbState;

typedef struct DbSlot
{
	Oid			dbid;			/* InvalidOid: free slot */
	Oid			relid;			/* lease table the state was loaded from;
								 * InvalidOid: not loaded since the start */
	DbState		state;
	int			loader_pid;
	pg_atomic_uint64 token_floor;	/* what its dlock_token_floor says, as
									 * last read or committed */
	bool		stale_expiries; /* rows of restored leases may still hold the
								 * old server's expiry */
	uint32		restores;		/* times stale_expiries was set */
	int64		sweep_retry_at; /* monotonic clock: the worker sends no
								 * sweeper before, as the last sweeper failed
								 * or left rows (0: none) */
	uint32		sweep_retry_mark;	/* dead-row mark that sweeper read: rows
									 * left after it are not held back */
	bool		loaded;			/* loaded once since the server started (a
								 * dropped and re-created extension keeps it) */
} DbSlot;

typedef struct DbSlots
{
	slock_t		mutex;
	ConditionVariable cv;		/* broadcast when a load ends */
	TimestampTz checkpoint_time;	/* of the checkpoint the server started
									 * from; 0 if unknown */
	DbSlot		slots[DLOCK_MAX_DATABASES];
} DbSlots;

extern DbSlots *dlock_dbs;
extern DbSlot *dlock_my_slot;

extern DbSlot *dlock_db_claim_slot(void);
extern DbSlot *dlock_db_find_slot(Oid dbid);
extern void dlock_db_purge(Oid dbid);

#endif							/* DLOCK_DBSLOTS_H */
