/*
 * worker.c
 *		The dlock background worker.
 *
 * One worker, attached to shared memory only, serves every database.  It
 * sleeps until the earliest lease falls due (a grant of an earlier one wakes
 * it), then ends what is due in short per-partition batches: each lease goes
 * to its next waiter or is dropped.  Rows left in a database's lease table
 * are deleted by a sweeper it starts there, which does what dlock_sweep()
 * does and exits.  Change events (events.c) are sent by a sender it starts
 * in their database, whatever dlock.worker says, which stays while events
 * come and exits after SENDER_LINGER without any.  Waiters never depend on
 * the worker: each times its holder's expiry itself.  Queued requests that
 * hold no backend (queue.c) do: it drops those whose hold ran out and grants
 * those at the front of a queue that nobody else settled.
 *
 * Locking: expiries take one partition lock at a time, a batch at most per
 * hold; the sweeper holds none while it writes rows.
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

#include "engine.h"
#include "events.h"
#include "grace.h"
#include "queue.h"
#include "settings.h"
#include "store.h"
#include "wait.h"
#include "worker.h"

#define MAX_SWEEPERS	8

/*
 * event senders (one per database at a time), how often one starts in a
 * database, how long one idles before it exits, and its pause after a batch
 * (ms)
 */
#define MAX_SENDERS		8
#define SENDER_INTERVAL	(100 * 1000)
#define SENDER_LINGER	(1000 * 1000)
#define SENDER_PACE		1

void
dlock_worker_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dlock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dlock_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dlock worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "dlock worker");
	RegisterBackgroundWorker(&worker);
}

static void
start_sweeper(Oid dbid, BackgroundWorkerHandle **handle)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	worker.bgw_main_arg = ObjectIdGetDatum(dbid);
	worker.bgw_notify_pid = MyProcPid;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dlock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dlock_sweeper_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dlock sweeper for database %u", dbid);
	snprintf(worker.bgw_type, BGW_MAXLEN, "dlock sweeper");
	if (!RegisterDynamicBackgroundWorker(&worker, handle))
		*handle = NULL;			/* no free slot now: try on a later round */
}

/*
 * Sends a sweeper to each database with rows to delete, one at a time each.
 * Returns when a database held back (its last sweep left rows) may be swept
 * again, or 0.
 */
static int64
start_sweepers(Oid *running, BackgroundWorkerHandle **handles)
{
	Oid			dbids[MAX_SWEEPERS];
	int64		retry_at;
	int			n = dlock_store_dead_databases(dbids, MAX_SWEEPERS, &retry_at);
	pid_t		pid;

	for (int i = 0; i < MAX_SWEEPERS; i++)
	{
		if (handles[i] != NULL &&
			GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STOPPED)
		{
			pfree(handles[i]);
			handles[i] = NULL;
			running[i] = InvalidOid;
		}
	}
	for (int d = 0; d < n; d++)
	{
		int			free_slot = -1;
		bool		busy = false;

		for (int i = 0; i < MAX_SWEEPERS; i++)
		{
			if (running[i] == dbids[d])
				busy = true;
			else if (handles[i] == NULL && free_slot < 0)
				free_slot = i;
		}
		if (busy || free_slot < 0)
			continue;
		start_sweeper(dbids[d], &handles[free_slot]);
		if (handles[free_slot] != NULL)
			running[free_slot] = dbids[d];
	}
	return retry_at;
}

/*
 * Sends a sender to each database with recorded events (events.c) that
 * wait for nothing else, one at a time each, and at most one start per
 * database every SENDER_INTERVAL (a sender that cannot connect is not
 * restarted back to back).  Returns when to look again (0: no need).
 */
static int64
start_senders(Oid *running, BackgroundWorkerHandle **handles, int64 *started)
{
	Oid			dbids[MAX_SENDERS];
	int			n = dlock_events_databases(dbids, MAX_SENDERS);
	int64		now = dlock_mono_now();
	int64		again = 0;
	pid_t		pid;

	for (int i = 0; i < MAX_SENDERS; i++)
	{
		if (handles[i] != NULL &&
			GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STOPPED)
		{
			pfree(handles[i]);
			handles[i] = NULL;
		}
	}
	for (int d = 0; d < n; d++)
	{
		int			slot = -1;
		BackgroundWorker worker;

		for (int i = 0; i < MAX_SENDERS; i++)
		{
			if (running[i] == dbids[d] || (slot < 0 && handles[i] == NULL))
				slot = i;
			if (running[i] == dbids[d])
				break;
		}
		if (slot < 0 || handles[slot] != NULL)
			continue;			/* no room, or one is at work there */
		if (running[slot] == dbids[d] && started[slot] + SENDER_INTERVAL > now)
		{
			again = (again == 0 || started[slot] + SENDER_INTERVAL < again) ?
				started[slot] + SENDER_INTERVAL : again;
			continue;
		}
		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = BGW_NEVER_RESTART;
		worker.bgw_main_arg = ObjectIdGetDatum(dbids[d]);
		worker.bgw_notify_pid = MyProcPid;
		snprintf(worker.bgw_library_name, BGW_MAXLEN, "dlock");
		snprintf(worker.bgw_function_name, BGW_MAXLEN, "dlock_sender_main");
		snprintf(worker.bgw_name, BGW_MAXLEN, "dlock events for database %u", dbids[d]);
		snprintf(worker.bgw_type, BGW_MAXLEN, "dlock events");
		if (!RegisterDynamicBackgroundWorker(&worker, &handles[slot]))
		{
			handles[slot] = NULL;	/* no free slot now: a later round */
			again = now + SENDER_INTERVAL;
			continue;
		}
		running[slot] = dbids[d];
		started[slot] = now;
	}
	return again;
}

void
dlock_worker_main(Datum arg)
{
	Oid			running[MAX_SWEEPERS] = {0};
	BackgroundWorkerHandle *handles[MAX_SWEEPERS] = {0};
	Oid			sending[MAX_SENDERS] = {0};
	BackgroundWorkerHandle *senders[MAX_SENDERS] = {0};
	int64		sent_at[MAX_SENDERS] = {0};

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	/*
	 * no database, like the logical replication launcher: shows in
	 * pg_stat_activity
	 */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	dlock_watch_expiries(MyLatch);
	ereport(LOG, (errmsg("dlock worker started")));

	while (!ShutdownRequestPending)
	{
		int64		next = 0;
		int64		grace_end;
		int64		retry_at;
		long		timeout = -1;
		int			unused = 0;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		if (!dlock_worker_enabled)
			dlock_watch_at(DLOCK_WATCH_NEVER);
		else
		{
			/*
			 * "awake" first: an earlier lease granted meanwhile sets our
			 * latch
			 */
			dlock_watch_at(DLOCK_WATCH_AWAKE);
			next = dlock_expire_due(dlock_worker_batch,
									DLOCK_STAT_EXPIRED_BY_WORKER, &unused);
			/* queued requests whose hold ran out, or that fit now */
			retry_at = dlock_queue_expire();
			if (retry_at != 0 && (next == 0 || retry_at < next))
				next = retry_at;
			retry_at = start_sweepers(running, handles);
			if (retry_at != 0 && (next == 0 || retry_at < next))
				next = retry_at;
			dlock_watch_at(next == 0 ? DLOCK_WATCH_IDLE : (uint64) next);
		}
		/* events are sent whatever dlock.worker says: nothing else sends them */
		retry_at = start_senders(sending, senders, sent_at);
		if (retry_at != 0 && (next == 0 || retry_at < next))
			next = retry_at;
		/* a grace after a promotion begins now, and its end is logged on time */
		grace_end = dlock_grace_watch();
		if (grace_end != 0 && (next == 0 || grace_end < next))
			next = grace_end;
		if (next != 0)
			timeout = (long) Max((next - dlock_mono_now() + 999) / 1000, 0);

		/* A running sweeper reports its exit through our latch. */
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | (timeout >= 0 ? WL_TIMEOUT : 0),
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	dlock_watch_expiries(NULL);
	/* exit 1, so the postmaster restarts the worker unless shutting down */
	proc_exit(1);
}

/*
 * Sweeps one database, as dlock_sweep() does, then exits: ends what is due
 * and deletes (or moves) the rows of its ended (or restored) leases.
 */
void
dlock_sweeper_main(Datum arg)
{
	Oid			dbid = DatumGetObjectId(arg);
	int			unused = 0;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);

	/* a database-level search_path must not choose what a superuser runs */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "dlock sweep");
	if (dlock_store_installed())
	{
		int64		next;

		dlock_store_ensure_loaded();
		do
			next = dlock_expire_due(dlock_worker_batch, DLOCK_STAT_EXPIRED_BY_SWEEP,
									&unused);
		while (next != 0 && next <= dlock_mono_now());
		(void) dlock_store_sweep_rows(true);
	}
	else
		dlock_store_forget_dead_rows(); /* or we would be sent again */
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}

static void
sender_exit(int code, Datum arg)
{
	dlock_events_sender_exit();
}

/*
 * Sends the events recorded for one database (events.c) with NOTIFY, all
 * that wait at each round in a transaction of its own.  While events come,
 * it pauses SENDER_PACE after each round (a batch per round rather than a
 * transaction and a wake-up per event); committers do not wake it then,
 * unless the buffer fills (events.c).  Idle for SENDER_LINGER, it exits.
 * It runs as the bootstrap superuser, with the database's settings.
 */
void
dlock_sender_main(Datum arg)
{
	Oid			dbid = DatumGetObjectId(arg);
	int64		idle_since;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	/* whatever ends it: what it took and did not send is counted as lost */
	before_shmem_exit(sender_exit, (Datum) 0);
	if (!dlock_events_sender_start(MyLatch))
		proc_exit(0);
	pgstat_report_activity(STATE_RUNNING, "dlock events");
	idle_since = dlock_mono_now();
	while (!ShutdownRequestPending)
	{
		int64		idle;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (dlock_events_take())
		{
			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			dlock_events_notify();
			CommitTransactionCommand();
			dlock_events_sent();
			idle_since = dlock_mono_now();
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 SENDER_PACE, PG_WAIT_EXTENSION);
			continue;
		}
		idle = dlock_mono_now() - idle_since;
		if (idle >= SENDER_LINGER)
		{
			if (dlock_events_sender_stop())
				break;
			continue;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 (SENDER_LINGER - idle + 999) / 1000, PG_WAIT_EXTENSION);
	}
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}
