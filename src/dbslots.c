/*
 * dbslots.c
 *		The per-database slots in shared memory (which databases use dlock,
 *		whether their leases are loaded, their token floors, dead-row
 *		counts and sweep state), and what happens when a database, or the
 *		extension in one, is dropped: its leases and waits leave shared
 *		memory at once.
 *
 * The slots' fields are read and written by the files above (rebuild.c,
 * floor.c, sweep.c); the slot layout and its locking live in dbslots.h.
 *
 * Locking: every field of a slot, and the choice of a free one, under the
 * slots' spinlock (dlock_dbs->mutex), never held across anything that can
 * fail or sleep; a slot's token_floor is also an atomic, read without the
 * lock.  A purge takes every partition lock at once.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "dbslots.h"
#include "engine.h"
#include "events.h"
#include "store.h"
#include "wait.h"

DbSlots    *dlock_dbs = NULL;
DbSlot	   *dlock_my_slot = NULL;	/* this backend's database's, once claimed */

Size
dlock_db_shmem_size(void)
{
	return MAXALIGN(sizeof(DbSlots));
}

/*
 * Every process that attaches; the caller holds AddinShmemInitLock.  The
 * first is the postmaster, before recovery: pg_control still holds the last
 * checkpoint of the server that ran before (crash recovery then writes a
 * checkpoint of its own, in the new clock).
 */
void
dlock_db_shmem_init(void)
{
	ControlFileData *control;
	bool		crc_ok;
	bool		found;

	dlock_dbs = ShmemInitStruct("dlock databases", dlock_db_shmem_size(), &found);
	if (found)
		return;
	memset(dlock_dbs, 0, sizeof(DbSlots));
	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
		pg_atomic_init_u64(&dlock_dbs->slots[i].token_floor, 0);
	SpinLockInit(&dlock_dbs->mutex);
	ConditionVariableInit(&dlock_dbs->cv);
	control = get_controlfile(DataDir, &crc_ok);
	if (crc_ok)
		dlock_dbs->checkpoint_time = time_t_to_timestamptz(control->checkPointCopy.time);
	pfree(control);
}

/* Slots are freed when their database is dropped (database_dropped). */
DbSlot *
dlock_db_claim_slot(void)
{
	DbSlot	   *free_slot = NULL;

	SpinLockAcquire(&dlock_dbs->mutex);
	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
	{
		DbSlot	   *s = &dlock_dbs->slots[i];

		if (s->dbid == MyDatabaseId)
		{
			SpinLockRelease(&dlock_dbs->mutex);
			return s;
		}
		if (s->dbid == InvalidOid && free_slot == NULL)
			free_slot = s;
	}
	if (free_slot != NULL)
	{
		free_slot->dbid = MyDatabaseId;
		free_slot->relid = InvalidOid;
		free_slot->loaded = false;
		dlock_dead_rows_clear(free_slot - dlock_dbs->slots);
		free_slot->stale_expiries = false;
		free_slot->restores = 0;
		free_slot->sweep_retry_at = 0;
		free_slot->sweep_retry_mark = 0;
		pg_atomic_write_u64(&free_slot->token_floor, 0);
		free_slot->state = DB_NOT_LOADED;
		SpinLockRelease(&dlock_dbs->mutex);
		return free_slot;
	}
	SpinLockRelease(&dlock_dbs->mutex);
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("dlock is in use in too many databases"),
			 errdetail("At most %d databases of a cluster can use dlock at once.",
					   DLOCK_MAX_DATABASES)));
	return NULL;				/* keep compiler quiet */
}

/*
 * Drops a database's leases and waits from shared memory: its lease table
 * was dropped or replaced, or the database itself.  Their rows went with
 * the table, so the ended leases leave nothing to sweep.  Further leases go
 * first, so each pass removes only the entry it is looking at.
 */
void
dlock_db_purge(Oid dbid)
{
	HASH_SEQ_STATUS status;
	DLockEntry *entry;

	dlock_wake_init();
	dlock_lock_all_partitions(LW_EXCLUSIVE);
	dlock_end_waits(dbid);
	dlock_scan_begin(&status);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid == dbid && !dlock_is_head(entry))
		{
			entry->version = 0;
			entry->clear_rows = false;
			dlock_end_lease(entry);
		}
	}
	dlock_scan_begin(&status);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != dbid)
			continue;
		if (entry->token != 0)
		{
			entry->version = 0;
			entry->clear_rows = false;
			dlock_end_lease(entry);
		}
		dlock_drop_if_unused(entry);
	}
	dlock_unlock_all_partitions();
	dlock_events_forget(dbid);
	dlock_wake_all();
}

/* ---------------------------------------------------------------------
 * Dropped databases and extensions
 *
 * When a drop of a database, or of the extension in one, commits, the
 * backend that made it drops that database's leases and waits from shared
 * memory at once.  Left there, they would take entries until they expired,
 * keep waiters waiting on names nobody serves, and, as they expired, send
 * sweepers again and again to a database with no table to sweep.  The
 * object access hook sees every drop, from any backend and by any command
 * (DROP DATABASE, with FORCE or not; DROP EXTENSION; DROP SCHEMA ...
 * CASCADE).
 * --------------------------------------------------------------------- */

static object_access_hook_type prev_object_access_hook = NULL;
static Oid	dropped_db = InvalidOid;	/* by DROP DATABASE, in this
										 * transaction */
static bool dropped_ext = false;	/* dlock's extension, in this transaction */
static Oid	kept_relid = InvalidOid;	/* see kept_lease_table() */

/* The caller holds the slots' mutex. */
DbSlot *
dlock_db_find_slot(Oid dbid)
{
	for (int i = 0; i < DLOCK_MAX_DATABASES; i++)
	{
		if (dlock_dbs->slots[i].dbid == dbid)
			return &dlock_dbs->slots[i];
	}
	return NULL;
}

/*
 * A dropped database has no backends left (DROP DATABASE refuses them, or
 * with FORCE ends them first), so its slot is ours to empty and free.
 */
static void
database_dropped(Oid dbid)
{
	DbSlot	   *slot;

	SpinLockAcquire(&dlock_dbs->mutex);
	slot = dlock_db_find_slot(dbid);
	SpinLockRelease(&dlock_dbs->mutex);
	if (slot == NULL)
		return;
	dlock_db_purge(dbid);
	SpinLockAcquire(&dlock_dbs->mutex);
	slot->relid = InvalidOid;
	slot->state = DB_NOT_LOADED;
	dlock_dead_rows_clear(slot - dlock_dbs->slots);
	slot->dbid = InvalidOid;
	SpinLockRelease(&dlock_dbs->mutex);
}

/*
 * The extension was dropped in this database, and kept is the lease table
 * that remains of those its leases were loaded from (InvalidOid: none).
 * Leases loaded from a table that is gone are dropped, unless a load is
 * under way (a load of a new table drops them itself).  The slot is marked
 * as loading meanwhile, so a call in a re-created extension waits for the
 * purge before it loads.
 */
static void
extension_dropped(Oid kept)
{
	DbSlot	   *slot;

	SpinLockAcquire(&dlock_dbs->mutex);
	slot = dlock_db_find_slot(MyDatabaseId);
	if (slot != NULL && OidIsValid(slot->relid) && slot->relid != kept &&
		slot->state != DB_LOADING)
	{
		slot->state = DB_LOADING;
		slot->loader_pid = MyProcPid;
		slot->relid = InvalidOid;
	}
	else
		slot = NULL;
	SpinLockRelease(&dlock_dbs->mutex);
	if (slot == NULL)
		return;
	dlock_db_purge(MyDatabaseId);
	SpinLockAcquire(&dlock_dbs->mutex);
	slot->state = DB_NOT_LOADED;
	dlock_dead_rows_clear(slot - dlock_dbs->slots);
	SpinLockRelease(&dlock_dbs->mutex);
	ConditionVariableBroadcast(&dlock_dbs->cv);
}

/*
 * The table this database's leases were loaded from, if it still exists:
 * the drop was undone by ROLLBACK TO SAVEPOINT, or the leases were loaded
 * again from a re-created extension's table.
 */
static Oid
kept_lease_table(void)
{
	DbSlot	   *slot;
	Oid			relid = InvalidOid;

	SpinLockAcquire(&dlock_dbs->mutex);
	slot = dlock_db_find_slot(MyDatabaseId);
	if (slot != NULL)
		relid = slot->relid;
	SpinLockRelease(&dlock_dbs->mutex);
	if (OidIsValid(relid) && SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		return relid;
	return InvalidOid;
}

static void
drop_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (dropped_ext)
				kept_relid = kept_lease_table();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (dropped_ext)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot prepare a transaction that dropped extension dlock")));
			break;
		case XACT_EVENT_COMMIT:
			if (OidIsValid(dropped_db))
				database_dropped(dropped_db);
			if (dropped_ext)
				extension_dropped(kept_relid);
			dropped_db = InvalidOid;
			dropped_ext = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			dropped_db = InvalidOid;
			dropped_ext = false;
			break;
		default:
			break;
	}
}

static void
drop_hook(ObjectAccessType access, Oid classId, Oid objectId, int subId,
		  void *arg)
{
	static bool registered = false;

	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access != OAT_DROP)
		return;
	if (classId == DatabaseRelationId)
		dropped_db = objectId;
	else if (classId == ExtensionRelationId)
	{
		char	   *name = get_extension_name(objectId);

		if (name == NULL || strcmp(name, "dlock") != 0)
			return;
		dropped_ext = true;
	}
	else
		return;
	if (!registered)
	{
		RegisterXactCallback(drop_xact_callback, NULL);
		registered = true;
	}
	/* the commit callback must not fail, so it must not allocate */
	dlock_wake_init();
}

void
dlock_store_hook_drops(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = drop_hook;
}
