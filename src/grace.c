/*
 * grace.c
 *		The grace after a promotion or a crash restart: no new grant until
 *		every lease that the failover or the crash may have lost has ended.
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
 * A crash loses WAL too: what was in the WAL buffers and not yet flushed.
 * A durable grant, renewal or extension commits without waiting for its
 * flush (rows.c) when losing it cannot give its name a second holder: its
 * ttl is at most dlock.failover_grace, no synchronous standby waits for it
 * (those keep their flush, and need no grace on failover), the session did
 * not ask for the flush (dlock.flush_grants), and its transaction wrote no
 * other WAL.  Before such a commit, the longest ttl committed so
 * (dlock_grace_unflushed) is raised in the file, fsynced, if it is above
 * the file's: written only when it rises, so once per ttl a workload uses.
 * Whenever shared memory is set up (a start, or the postmaster's
 * reinitialisation after a backend crash, which loses the WAL buffers as a
 * crash of the server does), pg_control tells whether the server stopped
 * cleanly: anything but a shutdown checkpoint means a crash, and then a
 * grace as long as the file's longest unflushed ttl begins at once, before
 * recovery, in the same way as after a promotion.  Not on a server that
 * starts as a standby or to recover to a target (a signal file): it leaves
 * recovery on a new timeline, with the failover grace, and its file may
 * be the copy of a primary's, made by a base backup.  A lost lease was granted
 * before the crash and ends within its ttl of its grant, so within that
 * grace.  The postmaster then sets the longest ttl back to 0, in the same
 * file write that records the grace: any later unflushed commit raises it
 * again before it commits.  After a clean shutdown every commit is on disk
 * (the shutdown checkpoint), so the file's value is set back to 0 with no
 * grace.  A server where no commit skipped its flush since (all with
 * dlock.flush_grants, or ttls above the grace) begins no grace after a
 * crash.  The grace begins when shared memory is set up, not lazily at the
 * first grant: a clean shutdown right after the crash recovery must not
 * forget it.
 *
 * The server's timeline when it last served as primary, the running
 * grace's end in wall-clock time, a bound on its length, the longest
 * unflushed ttl and what began the grace are kept in a file of the data
 * directory, so a restart inside the grace resumes it, and a clean restart
 * on the same timeline does not begin one.  Base backups and pg_rewind copy
 * the file, so a standby knows the timeline of the primary it was made
 * from.  Without the file (a standby made before this file existed), the
 * timeline of the checkpoint the server started from stands in.
 * begin_grace() is the one way into a grace, whatever its reason: a grace
 * that begins while another runs ends at the later of their ends.
 *
 * Locking: the grace LWLock serializes settling, the file and the end; the
 * grant path reads only the flag, with no lock, until a grace runs; a
 * commit reads the longest unflushed ttl with no lock, and takes the lock
 * only to raise it.
 */
#include "postgres.h"

#include <sys/stat.h>

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
	pg_atomic_uint64 unflushed; /* the longest ttl committed without a flush
								 * since it was last set back to 0, as the
								 * file says */
	TimeLineID	start_tli;		/* pg_control's checkpoint timeline when
								 * shared memory was set up; 0 unknown */
	bool		have_file;		/* the file exists */
	TimeLineID	file_tli;		/* the timeline it names; 0 unreadable */
	bool		settled;		/* the timeline was judged */
	int64		end_mono;		/* the running grace's end; 0: none */
	TimestampTz end_wall;		/* the same, in wall-clock time */
	char		reason[64];		/* what began it, for the log */
	int64		unflushed_before;	/* a clean start: the longest unflushed
									 * ttl the file had (see
									 * dlock_grace_deferred_lost) */
} GraceState;

static GraceState *grace = NULL;
pg_atomic_uint32 *dlock_grace_flag = NULL;

PG_FUNCTION_INFO_V1(dlock_grace);

static void load_grace_file(const char *clean);

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
	const char *clean = NULL;
	struct stat st;
	ControlFileData *control;

	grace = ShmemInitStruct("dlock grace", dlock_grace_shmem_size(), &found);
	dlock_grace_flag = &grace->pending;
	if (found)
		return;
	memset(grace, 0, sizeof(GraceState));
	grace->lock = lock;
	pg_atomic_init_u32(&grace->pending, 1);
	pg_atomic_init_u64(&grace->unflushed, 0);
	/* the postmaster, at start or after a crash: recovery has not begun */
	control = get_controlfile(DataDir, &crc_ok);
	grace->start_tli = crc_ok ? control->checkPointCopy.ThisTimeLineID : 0;
	/* a reinitialisation after a backend crash finds DB_IN_PRODUCTION */
	if (crc_ok && (control->state == DB_SHUTDOWNED ||
				   control->state == DB_SHUTDOWNED_IN_RECOVERY))
		clean = "the server was shut down cleanly";

	/*
	 * A standby, or a recovery to a target, leaves recovery on a new
	 * timeline, which begins the failover grace; its file may be a base
	 * backup's, whose primary's WAL buffers it never had.
	 */
	else if (stat(STANDBY_SIGNAL_FILE, &st) == 0 || stat(RECOVERY_SIGNAL_FILE, &st) == 0)
		clean = "the server starts in archive recovery, which ends on a new timeline";
	pfree(control);
	load_grace_file(clean);
}

/*
 * Reads the file: the timeline the server last served on as primary, the
 * end of its grace and a bound on its length (0: none), the longest
 * unflushed ttl, and what began the grace.  Returns false without a file; a
 * file that cannot be read counts as another timeline's (tli 0).  A file of
 * 1.1 has no unflushed ttl: every commit of a grant was flushed then.
 */
static bool
read_grace_file(TimeLineID *tli, TimestampTz *end, int64 *length,
				int64 *unflushed, char *reason)
{
	FILE	   *file = AllocateFile(GRACE_FILE, "r");
	unsigned int t;

	*tli = 0;
	*end = 0;
	*length = 0;
	*unflushed = 0;
	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", GRACE_FILE)));
		return false;
	}
	if (fscanf(file, "%u " INT64_FORMAT " " INT64_FORMAT, &t, end, length) == 3)
	{
		*tli = t;
		if (fscanf(file, " " INT64_FORMAT " %63[^\n]", unflushed, reason) < 1)
			*unflushed = 0;
	}
	else
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("file \"%s\" does not hold a timeline and a grace", GRACE_FILE),
				 errdetail("dlock takes it as left by another timeline, and begins a grace.")));
	FreeFile(file);
	return true;
}

/*
 * Writes the file from the shared state: the grace lock is held (or, in the
 * postmaster, nobody else runs).  Its length is what remains of the grace,
 * which bounds a resumed one if the clock steps back.  Failures are raised
 * at elevel: below ERROR, the postmaster's exit (where an ERROR would be a
 * FATAL) learns of them by false.
 */
static bool
write_grace_file(int elevel)
{
	FILE	   *file = AllocateFile(GRACE_FILE_TMP, PG_BINARY_W);
	int64		now = dlock_mono_now();
	bool		running = grace->end_mono > now;
	bool		ok;

	ok = file != NULL &&
		fprintf(file, "%u " INT64_FORMAT " " INT64_FORMAT " " INT64_FORMAT " %s\n",
				grace->file_tli, running ? grace->end_wall : 0,
				running ? grace->end_mono - now : 0,
				(int64) pg_atomic_read_u64(&grace->unflushed),
				running ? grace->reason : "-") >= 0 &&
		fflush(file) == 0 &&
		pg_fsync(fileno(file)) == 0;
	if (!ok)
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", GRACE_FILE_TMP)));
	if (file != NULL && FreeFile(file) != 0 && ok)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", GRACE_FILE_TMP)));
		ok = false;
	}
	if (!ok || durable_rename(GRACE_FILE_TMP, GRACE_FILE, elevel) != 0)
		return false;
	grace->have_file = true;
	return true;
}

/*
 * Begins a grace of length, or extends the running one to end no sooner
 * than length from now; the caller holds the grace lock (or is the
 * postmaster) and writes the file after.  detail says which leases it
 * covers.
 */
static void
begin_grace(int64 length, const char *reason, const char *detail)
{
	int64		end_mono = dlock_mono_now() + length;

	if (end_mono <= grace->end_mono)
		return;
	grace->end_mono = end_mono;
	grace->end_wall = GetCurrentTimestamp() + length;
	strlcpy(grace->reason, reason, sizeof(grace->reason));
	pg_atomic_write_u32(&grace->pending, 1);
	ereport(LOG,
			(errmsg("dlock grants no new lease until %s, the end of its grace after %s",
					timestamptz_to_str(grace->end_wall), reason),
			 errdetail_internal("%s Leases restored from the lease table are served meanwhile.",
								detail)));
}

/*
 * When shared memory is set up (the postmaster, before recovery): resumes
 * a grace the file says runs, and after a crash (clean NULL; else why it
 * was none) begins one as long as the longest ttl committed without a
 * flush, which is then set back to 0 (see the top of the file).
 */
static void
load_grace_file(const char *clean)
{
	TimestampTz file_end;
	int64		length;
	int64		unflushed;
	char		reason[sizeof(grace->reason)] = "";
	TimestampTz wall_now = GetCurrentTimestamp();

	grace->have_file = read_grace_file(&grace->file_tli, &file_end, &length,
									   &unflushed, reason);
	if (file_end > wall_now)
	{
		/* a clock stepped back while the server was down adds no more */
		grace->end_mono = dlock_mono_now() + Min(file_end - wall_now, length);
		grace->end_wall = file_end;
		if (reason[0] == '\0' || strcmp(reason, "-") == 0)
			snprintf(reason, sizeof(reason), "the switch to timeline %u", grace->file_tli);
		strlcpy(grace->reason, reason, sizeof(grace->reason));
		ereport(LOG,
				(errmsg("dlock grants no new lease until %s: its grace after %s goes on after the restart",
						timestamptz_to_str(file_end), grace->reason)));
	}
	if (unflushed <= 0)
		return;
	grace->unflushed_before = unflushed;
	if (clean == NULL)
		begin_grace(unflushed, "a crash restart",
					psprintf("Leases granted, renewed or extended without waiting for the WAL flush may have been lost in the crash; each ends within " INT64_FORMAT " ms, the longest ttl committed so.",
							 unflushed / 1000));
	else
		ereport(LOG,
				(errmsg("dlock begins no grace after this start: %s", clean)));
	write_grace_file(ERROR);
}

/*
 * A clean start that finds no file of deferred leases for its checkpoint
 * (deferred.c): the last shutdown's exit did not write it (the postmaster
 * was killed after the shutdown checkpoint) or it was damaged.  If any lease
 * could have been deferred since the start before (the longest unflushed
 * ttl was not 0), a grace as long as that begins, as after a crash.
 */
void
dlock_grace_deferred_lost(void)
{
	if (grace->unflushed_before <= 0)
		return;
	begin_grace(grace->unflushed_before, "a clean shutdown that kept no leases",
				psprintf("Leases whose rows were deferred (dlock.defer_rows) may have been lost: no file kept them; each ends within " INT64_FORMAT " ms.",
						 grace->unflushed_before / 1000));
	write_grace_file(ERROR);
}

/*
 * The postmaster's exit after a clean shutdown, when leases whose rows were
 * deferred could not be kept for the next start (deferred.c): that start
 * resumes a grace until the last of them, left from now, would have ended.
 */
void
dlock_grace_after_shutdown(int64 left)
{
	begin_grace(left, "a clean shutdown",
				"Leases whose rows were deferred (dlock.defer_rows) could not be kept.");
	(void) write_grace_file(LOG);
}

/*
 * The first look after shared memory was set up, once recovery has ended:
 * a timeline other than the one the server last served on as primary means
 * a promotion (or the end of a point-in-time recovery) since.  A restart on
 * the same one resumed its grace when shared memory was set up.
 */
static void
settle(void)
{
	TimeLineID	tli = GetWALInsertionTimeLine();

	if (tli != (grace->have_file ? grace->file_tli : grace->start_tli))
	{
		char	   *reason = psprintf("the switch to timeline %u", tli);

		grace->file_tli = tli;
		if (dlock_failover_grace_ms == 0)
			ereport(LOG,
					(errmsg("dlock grants new leases at once after %s: dlock.failover_grace is 0", reason)));
		else
			begin_grace((int64) dlock_failover_grace_ms * 1000, reason,
						psprintf("Leases granted by the old primary may have been lost with the WAL that did not reach this server; each ends within dlock.failover_grace (%d ms).",
								 dlock_failover_grace_ms));
		write_grace_file(ERROR);
	}
	else if (!grace->have_file)
	{
		grace->file_tli = tli;
		write_grace_file(ERROR);
	}
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

/*
 * Whether a commit whose promises (grants, renewals, extensions) last at
 * most lasts may skip its WAL flush; if so, the longest unflushed ttl is
 * raised to lasts first, in the file, so a crash that loses the commit
 * begins a grace that covers it.  Not when the session asks for the flush,
 * lasts is above dlock.failover_grace (which bounds every crash grace as
 * it bounds ttls), or synchronous standbys wait for the commit (it must
 * reach them, and a failover to them needs no grace).
 */
bool
dlock_grace_unflushed(int64 lasts)
{
	if (dlock_flush_grants || lasts > (int64) dlock_failover_grace_ms * 1000 ||
		(SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0'))
		return false;
	dlock_grace_unwritten(lasts);
	return true;
}

/*
 * The longest unflushed ttl raised to lasts, for a lease that no commit
 * will ever write: one granted to a queued request while its owner is away
 * (queue.c), whatever dlock.flush_grants says.  A ttl above
 * dlock.failover_grace is left out: the grace is never longer, so a crash
 * loses such a lease without one, as a memory-only lease (documented).
 */
void
dlock_grace_unwritten(int64 lasts)
{
	if (lasts > (int64) dlock_failover_grace_ms * 1000 ||
		likely(lasts <= (int64) pg_atomic_read_u64(&grace->unflushed)))
		return;
	LWLockAcquire(grace->lock, LW_EXCLUSIVE);
	if (lasts > (int64) pg_atomic_read_u64(&grace->unflushed))
	{
		uint64		before = pg_atomic_read_u64(&grace->unflushed);

		/* read by write_grace_file; set back if the file was not written */
		pg_atomic_write_u64(&grace->unflushed, (uint64) lasts);
		PG_TRY();
		{
			write_grace_file(ERROR);
		}
		PG_CATCH();
		{
			pg_atomic_write_u64(&grace->unflushed, before);
			LWLockRelease(grace->lock);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	LWLockRelease(grace->lock);
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
