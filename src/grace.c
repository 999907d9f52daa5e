/*
 * grace.c
 *		The grace after a promotion: no new grant until every lease that the
 *		failover may have lost has ended.
 *
 * With asynchronous replication a standby may be promoted without the last
 * grants of the old primary; granting their names at once would give them
 * two holders.  As Redis's "delayed restarts" and Chubby's grace period do,
 * a server that finds itself on a new timeline (a promotion, the end of a
 * point-in-time recovery) grants nothing new for dlock.failover_grace,
 * counted on its own monotonic clock from the moment it learns of it: the
 * first grant attempt after recovery ended, or the worker, which starts
 * then.  Leases restored from replicated rows are served as usual (their
 * owners renew, extend, release and fence them); every other grant waits
 * (dlock_acquire, up to its timeout) or is refused (dlock_try).  For this
 * to cover every lost lease, a primary refuses a ttl above the grace unless
 * no standby can lose the lease: none can exist (wal_level minimal or
 * max_wal_senders 0), or, for a durable lease, synchronous_standby_names
 * makes its commit wait for the synchronous standbys (rows.c).
 *
 * The server's timeline when it last served as primary, and the running
 * grace's end in wall-clock time, are kept in a file of the data directory,
 * so a restart inside the grace resumes it, and a clean or crash restart on
 * the same timeline does not begin one.  Base backups and pg_rewind copy the
 * file, so a standby knows the timeline of the primary it was made from.
 * Without the file (a standby made before this file existed), the timeline
 * of the checkpoint the server started from stands in.  begin_grace() is the
 * one way into a grace, whatever its reason.
 *
 * Locking: the grace LWLock serializes settling, the file and the end; the
 * grant path reads only the flag, with no lock, until a grace runs.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "args.h"
#include "engine.h"
#include "grace.h"
#include "settings.h"

#define GRACE_FILE			"pg_dlock.grace"
#define GRACE_FILE_TMP		"pg_dlock.grace.tmp"

typedef struct GraceState
{
	LWLock	   *lock;
	pg_atomic_uint32 pending;	/* 1 until settled without a grace, or until
								 * the grace ended */
	TimeLineID	start_tli;		/* pg_control's checkpoint timeline when
								 * shared memory was set up; 0 unknown */
	bool		settled;		/* the file was read and the timeline judged */
	int64		end_mono;		/* the running grace's end; 0: none */
	TimestampTz end_wall;		/* the same, in wall-clock time */
	char		reason[64];		/* what began it, for the log */
} GraceState;

static GraceState *grace = NULL;
pg_atomic_uint32 *dlock_grace_flag = NULL;

PG_FUNCTION_INFO_V1(dlock_grace);

Size
dlock_grace_shmem_size(void)
{
	return MAXALIGN(sizeof(GraceState));
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_grace_shmem_init(LWLock *lock)
{
	bool		found;
	bool		crc_ok;
	ControlFileData *control;

	grace = ShmemInitStruct("dlock grace", dlock_grace_shmem_size(), &found);
	dlock_grace_flag = &grace->pending;
	if (found)
		return;
	memset(grace, 0, sizeof(GraceState));
	grace->lock = lock;
	pg_atomic_init_u32(&grace->pending, 1);
	/* the postmaster, at start or after a crash: recovery has not begun */
	control = get_controlfile(DataDir, &crc_ok);
	grace->start_tli = crc_ok ? control->checkPointCopy.ThisTimeLineID : 0;
	pfree(control);
}

/*
 * Reads the file: the timeline the server last served on as primary, and
 * the end and length of its grace (0: none).  Returns false without a file;
 * a file that cannot be read counts as another timeline's (tli 0).
 */
static bool
read_grace_file(TimeLineID *tli, TimestampTz *end, int64 *length)
{
	FILE	   *file = AllocateFile(GRACE_FILE, "r");
	unsigned int t;

	*tli = 0;
	*end = 0;
	*length = 0;
	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", GRACE_FILE)));
		return false;
	}
	if (fscanf(file, "%u " INT64_FORMAT " " INT64_FORMAT, &t, end, length) == 3)
		*tli = t;
	else
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("file \"%s\" does not hold a timeline and a grace", GRACE_FILE),
				 errdetail("dlock takes it as left by another timeline, and begins a grace.")));
	FreeFile(file);
	return true;
}

static void
write_grace_file(TimeLineID tli, TimestampTz end, int64 length)
{
	FILE	   *file = AllocateFile(GRACE_FILE_TMP, PG_BINARY_W);

	if (file == NULL ||
		fprintf(file, "%u " INT64_FORMAT " " INT64_FORMAT "\n", tli, end, length) < 0 ||
		fflush(file) != 0 ||
		pg_fsync(fileno(file)) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", GRACE_FILE_TMP)));
	if (FreeFile(file) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", GRACE_FILE_TMP)));
	(void) durable_rename(GRACE_FILE_TMP, GRACE_FILE, ERROR);
}

/*
 * Begins a grace of dlock.failover_grace on timeline tli; the caller holds
 * the grace lock and serves no grant yet.  The file first: a grace that a
 * restart could forget must not begin.
 */
static void
begin_grace(TimeLineID tli, const char *reason)
{
	int64		length = (int64) dlock_failover_grace_ms * 1000;
	TimestampTz end_wall;

	if (length == 0)
	{
		write_grace_file(tli, 0, 0);
		ereport(LOG,
				(errmsg("dlock grants new leases at once after %s: dlock.failover_grace is 0", reason)));
		return;
	}
	end_wall = GetCurrentTimestamp() + length;
	write_grace_file(tli, end_wall, length);
	grace->end_mono = dlock_mono_now() + length;
	grace->end_wall = end_wall;
	strlcpy(grace->reason, reason, sizeof(grace->reason));
	ereport(LOG,
			(errmsg("dlock grants no new lease until %s, the end of its grace after %s",
					timestamptz_to_str(end_wall), reason),
			 errdetail("Leases granted by the old primary may have been lost with the WAL that did not reach this server; each ends within dlock.failover_grace (%d ms). Leases restored from the lease table are served meanwhile.",
					   dlock_failover_grace_ms)));
}

/*
 * The first look after shared memory was set up, once recovery has ended:
 * a timeline other than the one the server last served on as primary means
 * a promotion (or the end of a point-in-time recovery) since; the same one,
 * a restart, which resumes a grace that had not ended.
 */
static void
settle(void)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	TimeLineID	file_tli;
	TimestampTz file_end;
	int64		length;
	bool		have_file = read_grace_file(&file_tli, &file_end, &length);
	TimestampTz wall_now = GetCurrentTimestamp();

	if (have_file && file_tli == tli)
	{
		/* a clock stepped back while the server was down adds no more */
		if (file_end > wall_now)
		{
			grace->end_mono = dlock_mono_now() + Min(file_end - wall_now, length);
			grace->end_wall = file_end;
			snprintf(grace->reason, sizeof(grace->reason),
					 "the switch to timeline %u", tli);
			ereport(LOG,
					(errmsg("dlock grants no new lease until %s: its grace after %s goes on after the restart",
							timestamptz_to_str(file_end), grace->reason)));
		}
	}
	else if (tli != (have_file ? file_tli : grace->start_tli))
		begin_grace(tli, psprintf("the switch to timeline %u", tli));
	else
		write_grace_file(tli, 0, 0);
	grace->settled = true;
}

/* Settles, ends a grace that is over; returns the running grace's end or 0. */
static int64
grace_end(void)
{
	int64		end;

	/* only a primary grants; its timeline is known once recovery ended */
	if (RecoveryInProgress())
		return 0;
	LWLockAcquire(grace->lock, LW_EXCLUSIVE);
	/* a failed file write must not leave the lock held */
	PG_TRY();
	{
		if (!grace->settled)
			settle();
	}
	PG_CATCH();
	{
		LWLockRelease(grace->lock);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (grace->end_mono != 0 && dlock_mono_now() >= grace->end_mono)
	{
		grace->end_mono = 0;
		ereport(LOG,
				(errmsg("dlock grace after %s ended: new leases are granted again",
						grace->reason)));
	}
	end = grace->end_mono;
	if (end == 0)
		pg_atomic_write_u32(&grace->pending, 0);
	LWLockRelease(grace->lock);
	return end;
}

bool
dlock_grace_holds(void)
{
	return grace_end() != 0;
}

bool
dlock_grace_wait(int64 deadline, bool by_lock_timeout)
{
	for (;;)
	{
		int64		end = grace_end();
		int64		now = dlock_mono_now();
		int64		until;

		if (end == 0)
			return true;
		if (deadline != 0 && now >= deadline)
		{
			if (by_lock_timeout)
			{
				TimestampTz end_wall;
				char		reason[sizeof(grace->reason)];

				/* a new grace may begin meanwhile: read both under its lock */
				LWLockAcquire(grace->lock, LW_SHARED);
				end_wall = grace->end_wall;
				strlcpy(reason, grace->reason, sizeof(reason));
				LWLockRelease(grace->lock);
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("canceling statement due to lock timeout"),
						 errdetail("dlock grants no new lease until %s, the end of its grace after %s.",
								   timestamptz_to_str(end_wall), reason)));
			}
			return false;
		}
		/* a timer to the end, or to the deadline: no polling */
		until = (deadline != 0) ? Min(end, deadline) : end;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 (long) ((until - now + 999) / 1000), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

int64
dlock_grace_watch(void)
{
	return dlock_grace_pending() ? grace_end() : 0;
}

void
dlock_grace_check_ttl(int64 ttl, bool durable)
{
	if (likely(ttl <= (int64) dlock_failover_grace_ms * 1000) ||
		dlock_failover_grace_ms == 0)
		return;
	/* no standby can lose the lease: none can exist ... */
	if (wal_level == WAL_LEVEL_MINIMAL || max_wal_senders == 0)
		return;

	/*
	 * ... or its commit waits for the synchronous ones (a memory lease has
	 * none)
	 */
	if (durable && SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0')
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ttl must be at most dlock.failover_grace (%d ms) on a primary without synchronous standbys",
					dlock_failover_grace_ms),
			 errdetail("A failover to an asynchronous standby could lose this lease, and the promoted standby would grant its name again once dlock.failover_grace has passed."),
			 errhint("Use a shorter ttl and renew the lease, raise dlock.failover_grace (how long a promoted standby grants no new lease), or configure synchronous replication (synchronous_standby_names).")));
}

/* dlock_grace(): when the running grace ends, or NULL */
Datum
dlock_grace(PG_FUNCTION_ARGS)
{
	TimestampTz end_wall;

	dlock_require_preload();
	if (!dlock_grace_pending() || grace_end() == 0)
		PG_RETURN_NULL();
	LWLockAcquire(grace->lock, LW_SHARED);
	end_wall = grace->end_wall;
	LWLockRelease(grace->lock);
	PG_RETURN_TIMESTAMPTZ(end_wall);
}
