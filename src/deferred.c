/*
 * deferred.c
 *		Leases whose rows are deferred (dlock.defer_rows), kept across a
 *		clean restart: written to a file by the postmaster at a clean
 *		shutdown, restored by each database's first rebuild after the start.
 *
 * A deferred lease lives in shared memory only until its first renewal,
 * extension or fence writes its row.  A crash loses it, and the crash grace
 * covers it (its ttl raised the longest unflushed ttl before its grant).  A
 * clean shutdown must not lose it without a grace, and a grace after every
 * planned restart would cost availability, so the postmaster, once every
 * other process has exited, writes the live ones to pg_dlock.deferred with
 * the time each had left, tagged with the shutdown checkpoint.  The next
 * start takes the file only if it starts from that checkpoint (a clean
 * start of the same data directory, not a crash, a standby or a copy):
 * every backend it forks inherits the leases read, and the first rebuild of
 * each database restores its own, each running what it had left from the
 * start.  Leases of a database that no call reached before the next clean
 * shutdown are written again, with what they have left then.  Until a
 * database is rebuilt, a crash would lose its leases from the file: the
 * start raises the longest unflushed ttl to cover them.  If the file cannot
 * be written, the next start begins a grace until they would have ended.
 * It is written at every clean shutdown, with no lease too: a clean start
 * that finds none for its checkpoint (the postmaster was killed after the
 * shutdown checkpoint, or the file is damaged) begins a grace as after a
 * crash if a lease could have been deferred since the start before.
 *
 * Locking: the postmaster reads shared memory at exit with no lock (nothing
 * else runs); a rebuild restores each lease under its partition lock.
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "dbslots.h"
#include "deferred.h"
#include "grace.h"
#include "settings.h"
#include "store.h"

#define DEFERRED_FILE		"pg_dlock.deferred"
#define DEFERRED_FILE_TMP	"pg_dlock.deferred.tmp"
#define DEFERRED_MAGIC		0x444c4446	/* "DLDF" */

typedef struct DeferredHeader
{
	uint32		magic;
	uint32		count;
	XLogRecPtr	checkpoint;		/* the shutdown checkpoint it belongs to */
} DeferredHeader;

/* One lease as the file keeps it (name and owner follow, unpadded) */
typedef struct DeferredLease
{
	Oid			dbid;
	Oid			roleid;
	uint64		token;
	int64		left;			/* microseconds it had left at the shutdown */
	TimestampTz granted_at;
	int32		permits;		/* its name's: 0, or a semaphore's size */
	uint8		mode;
	uint8		namelen;
	uint8		ownerlen;
	char		name[DLOCK_NAME_MAX];
	char		owner[DLOCK_OWNER_MAX];
} DeferredLease;

#define LEASE_FIXED		offsetof(DeferredLease, name)

/* read at the start, in the postmaster; inherited by every backend */
static DeferredLease *kept = NULL;
static int	nkept = 0;
static int64 started = 0;		/* monotonic: when they were read */

static void write_at_shutdown(int code, Datum arg);

static XLogRecPtr
checkpoint_lsn(bool *clean)
{
	bool		crc_ok;
	ControlFileData *control = get_controlfile(DataDir, &crc_ok);
	XLogRecPtr	lsn = crc_ok ? control->checkPoint : InvalidXLogRecPtr;

	*clean = crc_ok && control->state == DB_SHUTDOWNED;
	pfree(control);
	return lsn;
}

static void
forget_file(void)
{
	if (unlink(DEFERRED_FILE) != 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", DEFERRED_FILE)));
}

/*
 * Reads the file into kept if it belongs to the checkpoint the server
 * starts from cleanly; false if it is missing or does not.
 */
static bool
read_file(XLogRecPtr checkpoint)
{
	FILE	   *file = AllocateFile(DEFERRED_FILE, PG_BINARY_R);
	DeferredHeader header;
	pg_crc32c	crc;
	pg_crc32c	file_crc;
	bool		ok;

	if (file == NULL)
		return false;
	INIT_CRC32C(crc);
	/* (no more leases than entries: a damaged count allocates nothing) */
	ok = fread(&header, sizeof(header), 1, file) == 1 &&
		header.magic == DEFERRED_MAGIC && header.checkpoint == checkpoint &&
		header.count <= (uint32) dlock_max_locks;
	if (ok)
	{
		COMP_CRC32C(crc, &header, sizeof(header));
		kept = MemoryContextAllocZero(TopMemoryContext,
									  Max(header.count, 1) * sizeof(DeferredLease));
		for (nkept = 0; ok && nkept < (int) header.count; nkept++)
		{
			DeferredLease *l = &kept[nkept];

			ok = fread(l, LEASE_FIXED, 1, file) == 1 &&
				l->namelen > 0 && l->namelen <= DLOCK_NAME_MAX &&
				l->ownerlen > 0 && l->ownerlen <= DLOCK_OWNER_MAX &&
				fread(l->name, l->namelen, 1, file) == 1 &&
				fread(l->owner, l->ownerlen, 1, file) == 1;
			if (ok)
			{
				COMP_CRC32C(crc, l, LEASE_FIXED);
				COMP_CRC32C(crc, l->name, l->namelen);
				COMP_CRC32C(crc, l->owner, l->ownerlen);
			}
		}
		FIN_CRC32C(crc);
		ok = ok && fread(&file_crc, sizeof(file_crc), 1, file) == 1 &&
			EQ_CRC32C(crc, file_crc);
	}
	FreeFile(file);
	if (!ok)
	{
		if (kept != NULL)
			pfree(kept);
		kept = NULL;
		nkept = 0;
		ereport(LOG,
				(errmsg("dlock ignores file \"%s\": it is not the one the last clean shutdown wrote",
						DEFERRED_FILE)));
	}
	return ok;
}

/*
 * Shared memory is set up (the postmaster, at a start or after a crash):
 * only a clean start from the checkpoint the file names takes its leases.
 */
void
dlock_deferred_startup(void)
{
	bool		clean;
	XLogRecPtr	checkpoint;
	int64		longest = 0;
	struct stat st;

	if (IsUnderPostmaster)
		return;
	on_shmem_exit(write_at_shutdown, (Datum) 0);
	if (kept != NULL)
		pfree(kept);
	kept = NULL;
	nkept = 0;
	checkpoint = checkpoint_lsn(&clean);
	/* a standby's or a recovery's file is a copy: its primary went on */
	if (!clean || stat(STANDBY_SIGNAL_FILE, &st) == 0 ||
		stat(RECOVERY_SIGNAL_FILE, &st) == 0)
	{
		forget_file();
		return;
	}
	if (!read_file(checkpoint))
	{
		forget_file();
		dlock_grace_deferred_lost();
		return;
	}
	started = dlock_mono_now();
	for (int i = 0; i < nkept; i++)
		longest = Max(longest, kept[i].left);
	/* a crash before a database is rebuilt loses its leases from the file */
	dlock_grace_unwritten(longest);
	ereport(LOG,
			(errmsg_plural("dlock keeps %d lease whose row was deferred from the last clean shutdown",
						   "dlock keeps %d leases whose rows were deferred from the last clean shutdown",
						   nkept, nkept)));
}

/*
 * Restores this database's leases from the file, after its rows, at its
 * first rebuild since the start: each runs what it had left from the start.
 * A lease that would conflict with one restored from a row is skipped (it
 * cannot be: a live row's lease and it were live together).  Returns how
 * many came back.
 */
int
dlock_deferred_restore(void)
{
	int64		now = dlock_mono_now();
	int			restored = 0;

	for (int i = 0; i < nkept; i++)
	{
		DeferredLease *l = &kept[i];
		DLockKey	key;
		uint32		hash;
		LWLock	   *lock;
		DLockEntry *head;
		DLockEntry *lease = NULL;
		bool		found;

		if (l->dbid != MyDatabaseId || started + l->left <= now)
			continue;
		memset(&key, 0, sizeof(key));
		key.dbid = l->dbid;
		key.len = l->namelen;
		memcpy(key.name, l->name, l->namelen);
		hash = dlock_key_hash(&key);
		lock = dlock_partition_lock(hash);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		head = dlock_restore_head(&key, hash, &found);
		if (head == NULL)
		{
			LWLockRelease(lock);
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("dlock lease table is full while restoring leases"),
					 errhint("Increase dlock.max_locks and restart the server.")));
		}
		if (head->nleases == 0)
			head->permits = l->permits;
		if (!dlock_conflicts(head, (DLockMode) l->mode, now))
			lease = dlock_restore(head, l->token);
		if (lease != NULL)
		{
			lease->owner.len = l->ownerlen;
			memcpy(lease->owner.str, l->owner, l->ownerlen);
			lease->roleid = l->roleid;
			lease->granted_at = l->granted_at;
			lease->mode = l->mode;
			lease->deferred = true;
			lease->holder_pid = 0;
			dlock_set_expires(lease, started + l->left);
			restored++;
		}
		else
			dlock_drop_if_unused(head);
		LWLockRelease(lock);
	}
	return restored;
}

/* Appends a lease to the file being written, and to its checksum. */
static bool
put_lease(FILE *file, pg_crc32c *crc, const DeferredLease *l)
{
	COMP_CRC32C(*crc, l, LEASE_FIXED);
	COMP_CRC32C(*crc, l->name, l->namelen);
	COMP_CRC32C(*crc, l->owner, l->ownerlen);
	return fwrite(l, LEASE_FIXED, 1, file) == 1 &&
		fwrite(l->name, l->namelen, 1, file) == 1 &&
		fwrite(l->owner, l->ownerlen, 1, file) == 1;
}

/*
 * The leases to keep: the live deferred ones in shared memory, and those of
 * the file that no rebuild restored since the start, with what they have
 * left now.  Returns how many, and the longest time left.
 */
static int
collect(DeferredLease **out, int64 *longest)
{
	HASH_SEQ_STATUS status;
	DLockEntry *entry;
	int64		now = dlock_mono_now();
	int			n = 0;
	int			size = 64;
	DeferredLease *all = palloc(size * sizeof(DeferredLease));

	*longest = 0;
	/* nothing else runs: no partition lock is needed */
	dlock_scan_begin(&status);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		DeferredLease *l;

		/* (a pin left by a backend gone keeps nothing now) */
		if (!entry->deferred || !dlock_is_live(entry, now) || entry->expires <= now)
			continue;
		if (n == size)
			all = repalloc(all, (size *= 2) * sizeof(DeferredLease));
		l = &all[n++];
		memset(l, 0, sizeof(*l));
		l->dbid = entry->key.dbid;
		l->roleid = entry->roleid;
		l->token = entry->token;
		l->left = entry->expires - now;
		l->granted_at = entry->granted_at;
		l->permits = dlock_head_of(entry)->permits;
		l->mode = entry->mode;
		l->namelen = entry->key.len;
		memcpy(l->name, entry->key.name, entry->key.len);
		l->ownerlen = entry->owner.len;
		memcpy(l->owner, entry->owner.str, entry->owner.len);
		*longest = Max(*longest, l->left);
	}
	for (int i = 0; i < nkept; i++)
	{
		DbSlot	   *slot = dlock_db_find_slot(kept[i].dbid);

		if ((slot != NULL && slot->loaded) || started + kept[i].left <= now)
			continue;
		if (n == size)
			all = repalloc(all, (size *= 2) * sizeof(DeferredLease));
		all[n] = kept[i];
		all[n].left = started + kept[i].left - now;
		*longest = Max(*longest, all[n].left);
		n++;
	}
	*out = all;
	return n;
}

/*
 * Writes the file; false, after a LOG line, if it cannot (an ERROR in the
 * postmaster's exit would be a FATAL).
 */
static bool
write_file(const DeferredLease *all, int n, XLogRecPtr checkpoint)
{
	FILE	   *file = AllocateFile(DEFERRED_FILE_TMP, PG_BINARY_W);
	DeferredHeader header = {DEFERRED_MAGIC, (uint32) n, checkpoint};
	pg_crc32c	crc;
	bool		ok;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, &header, sizeof(header));
	ok = file != NULL && fwrite(&header, sizeof(header), 1, file) == 1;
	for (int i = 0; ok && i < n; i++)
		ok = put_lease(file, &crc, &all[i]);
	FIN_CRC32C(crc);
	ok = ok && fwrite(&crc, sizeof(crc), 1, file) == 1 && fflush(file) == 0 &&
		pg_fsync(fileno(file)) == 0;
	if (!ok)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", DEFERRED_FILE_TMP)));
	if (file != NULL && FreeFile(file) != 0 && ok)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", DEFERRED_FILE_TMP)));
		ok = false;
	}
	return ok && durable_rename(DEFERRED_FILE_TMP, DEFERRED_FILE, LOG) == 0;
}

/*
 * The postmaster's exit: after a clean shutdown, the leases to keep go to
 * the file, tagged with the shutdown checkpoint; if that fails, the next
 * start begins a grace until the last of them would have ended.
 */
static void
write_at_shutdown(int code, Datum arg)
{
	DeferredLease *all;
	int			n;
	int64		longest;
	bool		clean;
	XLogRecPtr	checkpoint;

	/* after a crash or an immediate shutdown, the crash grace covers them */
	checkpoint = checkpoint_lsn(&clean);
	if (code != 0 || !clean)
	{
		forget_file();
		return;
	}
	/* written even with none: the next start then knows none was lost */
	n = collect(&all, &longest);
	if (write_file(all, n, checkpoint))
	{
		if (n > 0)
			ereport(LOG,
				(errmsg_plural("dlock kept %d lease whose row was deferred for the next start; the last ends at %s",
							   "dlock kept %d leases whose rows were deferred for the next start; the last ends at %s",
							   n, n, timestamptz_to_str(GetCurrentTimestamp() + longest)),
				 errdetail("Only the next start of this data directory from its shutdown checkpoint restores them: after pg_upgrade, or on a copy, they are lost.")));
		return;
	}
	forget_file();
	if (n > 0)
		dlock_grace_after_shutdown(longest);
}
