/*
 * run.c
 *		"dlock run": the lease, the command that runs under it, and the loop
 *		that keeps both in step.
 *
 * "run" connects with libpq, takes the lease (dlock_acquire or dlock_try),
 * starts COMMAND in a process group of its own and renews the lease every
 * third of its TTL.  When the command exits, every process it started that
 * is still running is terminated, the lease is released once they are gone,
 * and dlock exits with the command's status.
 *
 * The lease must never outlive its holder's knowledge of it, so dlock keeps
 * a conservative local deadline: the monotonic time at which the last
 * successful grant or renewal was *sent*, plus the TTL.  The server computed
 * its expiry after that moment, so the lease lasts at least until then.
 *
 *	- A renewal that returns NULL means the lease is gone (forced release,
 *	  expiry): the group (and every process that left it, see below) gets
 *	  SIGTERM at once and SIGKILL --grace later.
 *	- A renewal that fails (connection lost, server restarting, error) is
 *	  retried with a short backoff, reconnecting as needed, because a lease
 *	  belongs to an owner string, not to a connection.  If no renewal has
 *	  succeeded by deadline - margin - grace, the group gets SIGTERM, and
 *	  SIGKILL at deadline - margin, so the command is dead before the server
 *	  can give the name to anyone else.
 *
 * Everything runs in one thread around poll(): signals are turned into bytes
 * on a self-pipe (signals.c), and every libpq call is asynchronous with a
 * deadline (session.c), so a hung server or network can never delay the
 * kill.  Signals sent to dlock (INT, TERM, HUP, QUIT, USR1, USR2) are
 * forwarded to the command's group.
 *
 * On Linux dlock is a child subreaper: every orphan among the command's
 * descendants is reparented to dlock, so no descendant leaves dlock's tree
 * of processes except by dying, whatever group or session it moves to
 * (setsid, setpgid, daemons).  When the lease is lost or the command ends,
 * dlock therefore signals every descendant it finds in /proc
 * (descendants.c), not only the group, and it releases the lease only once
 * it has no child left, that is, once every descendant is gone.  The
 * command's leader is killed if dlock itself dies.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "descendants.h"
#include "loop.h"
#include "msg.h"
#include "run.h"
#include "session.h"
#include "signals.h"

#define MAX_MARGIN_MS		1000	/* safety margin: min(this, ttl / 10) */
#define RECONNECT_WINDOW_MS	10000	/* while waiting: how long to retry */
#define BACKOFF_MIN_MS		100
#define BACKOFF_MAX_MS		1000
#define GROUP_POLL_MS		20	/* polling for the last descendants */
#define KILL_WAIT_MS		5000	/* after SIGKILL: how long to wait */
#define MAX_SENT_PIDS		32	/* backends that got our acquire calls */

/* ---------------------------------------------------------------- the run state */

typedef enum
{
	PH_ACQUIRE,					/* connecting, waiting for the lease */
	PH_RUN,						/* the lease is held, the command runs */
	PH_FINISH					/* releasing, exiting */
} Phase;

/*
 * Everything "run" knows, passed to every function of the state machine
 * (and to the hooks of the wait loop).
 */
typedef struct RunState
{
	Phase		phase;
	int			got_signal;		/* signal received with no command to get it */

	/* the lease */
	const char *lease_name;
	const char *lease_owner;
	const char *lease_mode;		/* "exclusive" or "shared" */
	const char *lease_permits;	/* a semaphore's size, as text, or NULL */
	char		lease_token[32];
	ms_t		ttl_ms;
	ms_t		grace_ms;
	ms_t		margin_ms;
	ms_t		lease_end;		/* conservative end of the lease (monotonic) */
	bool		lost;			/* the lease is gone, or could not be kept */
	ms_t		lost_at;		/* when the lease was found lost */

	/*
	 * The backends that were sent a dlock_acquire or dlock_try of ours, whose
	 * answer we may not have read.  Each connection sends one at a time, and
	 * retries end after RECONNECT_WINDOW_MS, so a few slots are enough.
	 */
	int			sent_pids[MAX_SENT_PIDS];
	int			nsent_pids;

	/*
	 * The command: its leader's pid is also its process group's id.  As the
	 * subreaper, dlock knows that the command and everything it started are
	 * gone when it has no child left; otherwise (not Linux, or prctl failed)
	 * it can only wait for the group to be empty.
	 */
	pid_t		child_pid;
	bool		subreaper;
	bool		leader_reaped;
	int			leader_status;
	bool		no_children;	/* waitpid() said ECHILD */
	bool		all_gone;		/* the command and its descendants are gone */
	bool		survivors;		/* some survived SIGKILL; we stopped waiting */
	ms_t		term_at;		/* when SIGTERM was sent, 0: not yet */
	ms_t		kill_at;		/* when SIGKILL is due */
	bool		killed;
	ms_t		killed_at;
	ms_t		next_kill_at;	/* after SIGKILL: the next round of it */
} RunState;

/* the moment the command must get SIGTERM if no renewal succeeds before */
static ms_t
term_deadline(RunState *st)
{
	return st->lease_end - st->margin_ms - st->grace_ms;
}

/* ---------------------------------------------------------------- the command's processes */

/*
 * Sends sig to the command's process group and, on Linux, to every other
 * descendant of dlock, whatever its group or session; with sig, SIGCONT
 * too, unless sig is SIGKILL, so that stopped processes see it.  The group
 * is signalled as a whole only while its leader is not reaped: its id
 * cannot be reused before that.  Returns how many processes outside the
 * group were signalled, or -1 if /proc cannot be read.
 */
static int
signal_all(RunState *st, int sig)
{
	bool		cont = sig != SIGKILL;
	bool		whole_group = !st->leader_reaped || !st->subreaper;
	int			others = 0;

	if (whole_group)
	{
		kill(-st->child_pid, sig);
		if (cont)
			kill(-st->child_pid, SIGCONT);
	}
#ifdef __linux__
	if (!scan_processes())
		return -1;
	for (size_t i = 0; i < nprocs; i++)
	{
		if (!procs[i].ours || (whole_group && procs[i].pgrp == st->child_pid))
			continue;
		signal_process(procs[i].pid, sig);
		if (cont)
			signal_process(procs[i].pid, SIGCONT);
		if (procs[i].pgrp != st->child_pid)
			others++;
	}
#endif
	return others;
}

/* Sends SIGTERM to the command and its descendants (once), schedules SIGKILL. */
static void
terminate_all(RunState *st, ms_t kill_deadline, const char *why)
{
	ms_t		now = now_ms();
	char		b[32];
	char		others[96] = "";
	int			n;

	if (st->child_pid <= 0 || st->all_gone)
		return;
	if (st->term_at != 0)
	{
		if (kill_deadline < st->kill_at)
			st->kill_at = kill_deadline;
		return;
	}
	n = signal_all(st, SIGTERM);
	if (n > 0)
		snprintf(others, sizeof(others), " and to %d process%s that left it", n,
				 n == 1 ? "" : "es");
	else if (n < 0)
		snprintf(others, sizeof(others), " (cannot read /proc: processes that left it are not found)");
	msg("%s: sent SIGTERM to the command's process group %d%s (SIGKILL in %s)",
		why, (int) st->child_pid, others,
		fmt_ms(kill_deadline - now > 0 ? kill_deadline - now : 0, b, sizeof(b)));
	st->term_at = now;
	st->kill_at = kill_deadline;
}

/* The lease is gone, or cannot be kept: terminate the command. */
static void
declare_lost(RunState *st, ms_t kill_deadline, const char *why)
{
	if (st->lost)
		return;
	st->lost = true;
	st->lost_at = now_ms();
	terminate_all(st, kill_deadline, why);
}

static void
reap(RunState *st)
{
	for (;;)
	{
		int			status;
		pid_t		pid = waitpid(-1, &status, WNOHANG);

		if (pid < 0 && errno == ECHILD)
			st->no_children = true;
		if (pid <= 0)
			break;
		if (pid == st->child_pid)
		{
			st->leader_reaped = true;
			st->leader_status = status;
			if (WIFEXITED(status))
				vmsg("the command exited with status %d", WEXITSTATUS(status));
			else if (WIFSIGNALED(status))
				vmsg("the command was killed by signal %d", WTERMSIG(status));
		}
		/* other pids: orphaned descendants, reparented to us */
	}
}

/*
 * Whether the command and everything it started are gone: as the
 * subreaper, when dlock has no child left (an orphan becomes our child, so
 * a descendant can leave our tree only by dying); otherwise when the group
 * is empty.
 */
static bool
descendants_gone(RunState *st)
{
	if (st->subreaper)
		return st->no_children;
	return kill(-st->child_pid, 0) != 0 && errno == ESRCH;
}

/* ---------------------------------------------------------------- the loop */

static void
handle_signal(RunState *st, int sig)
{
	if (sig == SIGCHLD)
		return;
	if (st->child_pid > 0 && !st->leader_reaped)
	{
		vmsg("forwarding %s to process group %d", signame(sig), (int) st->child_pid);
		kill(-st->child_pid, sig);
	}
	else if (st->got_signal == 0)
		st->got_signal = sig;
}

/* Acts on whatever is due: signals, exited children, kill deadlines. */
static void
service(void *arg)
{
	RunState   *st = arg;
	ms_t		now;

	if (sigpipe_fds[0] >= 0)
	{
		unsigned char buf[64];
		ssize_t		n;

		while ((n = read(sigpipe_fds[0], buf, sizeof(buf))) > 0)
			for (ssize_t i = 0; i < n; i++)
				handle_signal(st, buf[i]);
	}
	if (st->child_pid <= 0)
		return;
	reap(st);
	if (st->all_gone)
		return;

	now = now_ms();
	if (st->phase == PH_RUN && !st->lost && now >= term_deadline(st))
	{
		char		b[32];
		char		why[160];

		snprintf(why, sizeof(why), "lease lost: no renewal succeeded and it may end in %s",
				 fmt_ms(st->lease_end - now, b, sizeof(b)));
		declare_lost(st, min_ms(now + st->grace_ms, st->lease_end - st->margin_ms), why);
	}
	if (st->term_at != 0 && !st->killed && now >= st->kill_at)
	{
		msg("sending SIGKILL to process group %d and to every process the command started",
			(int) st->child_pid);
		signal_all(st, SIGKILL);
		st->killed = true;
		st->killed_at = now;
		st->next_kill_at = now + GROUP_POLL_MS;
	}
	else if (st->killed && now >= st->next_kill_at && !descendants_gone(st))
	{
		/* processes forked while the last round was sent */
		signal_all(st, SIGKILL);
		st->next_kill_at = now + GROUP_POLL_MS;
	}
	if (st->leader_reaped)
	{
		if (descendants_gone(st))
		{
			st->all_gone = true;
			if (st->lost)
			{
				char		b[32];

				msg("the command and every process it started are gone, %s after the lease was lost",
					fmt_ms(now - st->lost_at, b, sizeof(b)));
			}
			else
				vmsg("the command and every process it started are gone");
		}
		else if (st->term_at == 0)
			terminate_all(st, now + st->grace_ms,
						  "the command exited but processes it started remain");
		else if (st->killed && now >= st->killed_at + KILL_WAIT_MS)
		{
			msg("processes the command started survived SIGKILL for %d ms; not waiting for them",
				KILL_WAIT_MS);
			st->all_gone = true;
			st->survivors = true;
		}
	}
}

/* When service() next has something to do on its own. */
static ms_t
next_timer(void *arg)
{
	RunState   *st = arg;
	ms_t		t = NEVER;

	if (st->child_pid <= 0 || st->all_gone)
		return t;
	if (st->phase == PH_RUN && !st->lost)
		t = min_ms(t, term_deadline(st));
	if (st->term_at != 0 && !st->killed)
		t = min_ms(t, st->kill_at);
	if (st->killed)
		t = min_ms(t, min_ms(st->next_kill_at, st->killed_at + KILL_WAIT_MS));
	/* as the subreaper, SIGCHLD tells when the last child is gone */
	if (st->leader_reaped && !st->subreaper)
		t = min_ms(t, now_ms() + GROUP_POLL_MS);
	return t;
}

/* Whether a query or connection attempt in progress is no longer wanted. */
static bool
abandoned(void *arg)
{
	RunState   *st = arg;

	switch (st->phase)
	{
		case PH_ACQUIRE:
			return st->got_signal != 0;
		case PH_RUN:
			return st->lost || st->all_gone;
		case PH_FINISH:
			return false;
	}
	return false;
}

/* Sleeps until deadline, unless a signal interrupts the wait for the lease. */
static void
backoff_until(RunState *st, ms_t deadline)
{
	while (now_ms() < deadline && !st->got_signal)
		sleep_until(deadline);
}

/* ---------------------------------------------------------------- the lease */

typedef enum
{
	RENEW_OK,
	RENEW_GONE,					/* the server says the lease is gone */
	RENEW_FAILED,				/* error or connection trouble: retry */
	RENEW_ABANDONED
} RenewStatus;

/*
 * One renewal attempt, reconnecting first if needed, given up at deadline.
 * On success lease_end moves to the send time plus the TTL.
 */
static RenewStatus
renew_once(RunState *st, ms_t deadline)
{
	char		ttl_text[64];
	const char *vals[3];
	PGresult   *res;
	QStatus		qs;
	ms_t		sent;
	RenewStatus result;

	if (conn == NULL && !connect_db(deadline))
		return io_abandoned() ? RENEW_ABANDONED : RENEW_FAILED;

	interval_text(st->ttl_ms, ttl_text, sizeof(ttl_text));
	vals[0] = st->lease_name;
	vals[1] = ttl_text;
	vals[2] = st->lease_owner;
	sent = now_ms();
	qs = run_query(queries[SQL_RENEW], 3, vals, deadline, &res);
	if (qs == Q_ABANDONED)
		return RENEW_ABANDONED;
	if (qs != Q_OK)
		return RENEW_FAILED;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		result = RENEW_FAILED;
	else if (PQgetisnull(res, 0, 0))
		result = RENEW_GONE;
	else
	{
		result = RENEW_OK;
		st->lease_end = sent + st->ttl_ms;
		vmsg("renewed %s until %s", st->lease_name, PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	return result;
}

/*
 * Releases the lease with this token (never another lease of the owner):
 * best effort, retried with reconnects for at most RELEASE_WINDOW_MS, and
 * never after the lease has surely ended.  Returns 1 if released, 0 if the
 * server says there was nothing to release, -1 if it could not be asked.
 */
static int
release_lease(RunState *st, const char *token)
{
	ms_t		deadline = now_ms() + RELEASE_WINDOW_MS;
	ms_t		backoff = BACKOFF_MIN_MS;
	const char *vals[3];

	if (st->lease_end != 0)
		deadline = min_ms(deadline, st->lease_end);
	vals[0] = st->lease_name;
	vals[1] = st->lease_owner;
	vals[2] = token;
	for (;;)
	{
		PGresult   *res;

		if (conn != NULL || connect_db(deadline))
		{
			if (run_query(queries[SQL_RELEASE], 3, vals, deadline, &res) == Q_OK)
			{
				int			result = -1;

				if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
					!PQgetisnull(res, 0, 0))
					result = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? 1 : 0;
				PQclear(res);
				return result;
			}
		}
		if (now_ms() + backoff >= deadline)
			return -1;
		vmsg("cannot release yet (%s); retrying", last_error);
		{
			ms_t		until = now_ms() + backoff;

			while (now_ms() < until)
				sleep_until(until);
		}
		backoff = min_ms(backoff * 2, BACKOFF_MAX_MS);
	}
}

/* Notes a backend that is sent one of our acquire calls. */
static void
note_backend(RunState *st, int pid)
{
	for (int i = 0; i < st->nsent_pids; i++)
		if (st->sent_pids[i] == pid)
			return;
	if (st->nsent_pids < MAX_SENT_PIDS)
		st->sent_pids[st->nsent_pids++] = pid;
}

/*
 * After an interrupted wait: releases the lease the server may have granted
 * to one of our calls just before we stopped reading its answer.  That lease
 * is the one on our name and owner whose pid is one of those backends
 * (dlock_locks.pid is the backend that took it).  Such a backend ends as
 * soon as it sees our connection closed: a waiter leaves the queue (and
 * gives back a grant it got meanwhile), a granted call returns and finds no
 * client.  Once those backends are gone nothing more can be granted to
 * them, so wait for that, then release by token.  A lease of the same owner
 * that was taken elsewhere (another process, "dlock try") is left alone.
 */
static void
release_unseen_grant(RunState *st)
{
	ms_t		deadline = now_ms() + RELEASE_WINDOW_MS;
	char		pids[MAX_SENT_PIDS * 12 + 3];
	char	   *p = pids;
	const char *vals[3];
	PGresult   *res;
	char		token[32];

	*p++ = '{';
	for (int i = 0; i < st->nsent_pids; i++)
		p += sprintf(p, "%s%d", i > 0 ? "," : "", st->sent_pids[i]);
	*p++ = '}';
	*p = '\0';

	for (;;)
	{
		bool		running;

		if (conn == NULL && !connect_db(deadline))
			goto failed;
		vals[0] = pids;
		if (run_query(queries[SQL_BACKENDS_LEFT], 1, vals, deadline, &res) != Q_OK)
			goto failed;
		running = PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
			strcmp(PQgetvalue(res, 0, 0), "0") != 0;
		PQclear(res);
		if (!running)
			break;
		if (now_ms() + GROUP_POLL_MS >= deadline)
		{
			vmsg("backends %s still run; looking for a grant to them anyway", pids);
			break;
		}
		{
			ms_t		until = now_ms() + GROUP_POLL_MS;

			while (now_ms() < until)
				sleep_until(until);
		}
	}
	vals[0] = st->lease_name;
	vals[1] = st->lease_owner;
	vals[2] = pids;
	if (run_query(queries[SQL_GRANTED_TO], 3, vals, deadline, &res) != Q_OK)
		goto failed;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) == 0)
	{
		PQclear(res);
		return;					/* nothing was granted to us */
	}
	snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	vmsg("releasing the lease granted as the wait was interrupted (token %s)", token);
	if (release_lease(st, token) < 0)
		goto failed;
	return;

failed:
	msg("cannot release what may have been granted on %s (%s); it ends by itself within its TTL",
		st->lease_name, last_error);
}

/*
 * Exits after an interrupted wait.  Releases the lease we took: by its
 * token if we read it, else the one granted to our backends, if any; never
 * another lease of the same owner.
 */
static void
exit_interrupted(RunState *st)
{
	int			sig = st->got_signal;

	msg("interrupted by %s while waiting for %s; the command was not started",
		signame(sig), st->lease_name);
	st->phase = PH_FINISH;
	close_conn();
	if (st->lease_token[0] != '\0')
	{
		if (release_lease(st, st->lease_token) < 0)
			msg("cannot release %s (%s); it ends by itself within its TTL",
				st->lease_name, last_error);
	}
	else if (st->nsent_pids > 0)
		release_unseen_grant(st);
	close_conn();
	exit(128 + sig);
}

/*
 * Takes the lease.  Returns only when it is held (lease_token, lease_end
 * set); exits otherwise.  A lost connection is retried for a while: taking
 * a lease again with the same owner returns the same token.
 */
static void
acquire_lease(RunState *st, bool nowait, ms_t timeout_ms)
{
	ms_t		start = now_ms();
	ms_t		retry_until = 0;
	ms_t		backoff = BACKOFF_MIN_MS;
	char		ttl_text[64];
	char		timeout_text[64];
	char		b[32];

	interval_text(st->ttl_ms, ttl_text, sizeof(ttl_text));
	for (;;)
	{
		const char *vals[6];
		PGresult   *res;
		QStatus		qs;
		ms_t		sent;
		ms_t		recv;
		ms_t		deadline = NEVER;
		const char *sql;
		int			nparams;

		if (st->got_signal)
			exit_interrupted(st);
		if (conn == NULL)
		{
			if (!connect_db(retry_until ? retry_until : 0))
			{
				if (st->got_signal)
					exit_interrupted(st);
				if (retry_until == 0 || now_ms() >= retry_until)
				{
					msg("cannot connect to the server: %s", last_error);
					exit(EXIT_CONN);
				}
				vmsg("reconnecting failed: %s", last_error);
				backoff_until(st, min_ms(now_ms() + backoff, retry_until));
				backoff = min_ms(backoff * 2, BACKOFF_MAX_MS);
				continue;
			}
		}

		vals[0] = st->lease_name;
		vals[1] = ttl_text;
		if (nowait)
		{
			sql = queries[SQL_TRY];
			vals[2] = st->lease_owner;
			vals[3] = st->lease_mode;
			vals[4] = st->lease_permits;
			nparams = 5;
		}
		else
		{
			sql = queries[SQL_ACQUIRE];
			if (timeout_ms >= 0)
			{
				ms_t		left = timeout_ms - (now_ms() - start);

				interval_text(left > 0 ? left : 0, timeout_text, sizeof(timeout_text));
				vals[2] = timeout_text;
				/* the server times the wait; this only guards a hung server */
				deadline = start + timeout_ms + RECONNECT_WINDOW_MS;
			}
			else
				vals[2] = NULL;
			vals[3] = st->lease_owner;
			vals[4] = st->lease_mode;
			vals[5] = st->lease_permits;
			nparams = 6;
		}
		note_backend(st, PQbackendPID(conn));
		sent = now_ms();
		qs = run_query(sql, nparams, vals, deadline, &res);
		recv = now_ms();
		if (qs == Q_ABANDONED)
			exit_interrupted(st);
		if (qs != Q_OK)
		{
			if (retry_until == 0)
				retry_until = now_ms() + RECONNECT_WINDOW_MS;
			if (now_ms() >= retry_until)
			{
				msg("lost the connection while taking %s: %s", st->lease_name, last_error);
				exit(EXIT_CONN);
			}
			msg("lost the connection while taking %s (%s); retrying", st->lease_name, last_error);
			backoff_until(st, min_ms(now_ms() + backoff, retry_until));
			backoff = min_ms(backoff * 2, BACKOFF_MAX_MS);
			continue;
		}
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			bool		arg = is_argument_error(res);

			msg("cannot take %s: %s", st->lease_name, last_error);
			PQclear(res);
			exit(arg ? EXIT_USAGE : EXIT_SERVER);
		}
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			if (nowait)
			{
				report_holder(st->lease_name, now_ms() + RELEASE_WINDOW_MS);
				exit(EXIT_BUSY);
			}
			msg("timed out after %s waiting for %s", fmt_ms(recv - start, b, sizeof(b)),
				st->lease_name);
			exit(EXIT_TIMEOUT);
		}
		snprintf(st->lease_token, sizeof(st->lease_token), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		st->lease_end = sent + st->ttl_ms;
		vmsg("took %s as %s, token %s, after %s", st->lease_name, st->lease_owner, st->lease_token,
			 fmt_ms(recv - start, b, sizeof(b)));
		if (recv - sent <= st->ttl_ms / 10)
			return;

		/*
		 * The grant came after a wait (or a slow round trip): when exactly is
		 * unknown, so renew now to know how long the lease lasts.
		 */
		st->phase = PH_RUN;
		switch (renew_once(st, now_ms() + RECONNECT_WINDOW_MS))
		{
			case RENEW_OK:
				st->phase = PH_ACQUIRE;
				return;
			case RENEW_GONE:
				msg("lease on %s lost before the command started", st->lease_name);
				exit(EXIT_LOST);
			default:
				msg("cannot confirm the lease on %s: %s", st->lease_name, last_error);
				st->phase = PH_FINISH;
				st->lease_end = 0;	/* its real end is unknown: do not cap the
									 * release */
				release_lease(st, st->lease_token);
				exit(EXIT_CONN);
		}
	}
}

/* ---------------------------------------------------------------- run */

/*
 * Starts the command in a process group of its own, with DLOCK_NAME,
 * DLOCK_OWNER and DLOCK_TOKEN in its environment.
 */
static void
start_child(RunState *st, char **argv)
{
	int			errpipe[2];
	sigset_t	all;
	sigset_t	old;
	pid_t		parent = getpid();
	pid_t		pid;
	int			child_errno = 0;
	ssize_t		n;

	if (make_pipe(errpipe, false) != 0)
	{
		msg("cannot create a pipe: %s", strerror(errno));
		st->phase = PH_FINISH;
		release_lease(st, st->lease_token);
		exit(EXIT_OSERR);
	}
	/* no handler of ours may run in the child */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0)
	{
		int			e;

		setpgid(0, 0);
		restore_signals();
#ifdef __linux__
		/* if dlock dies, so does the command (its leader, at least) */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(EXIT_LOST);
#endif
		setenv("DLOCK_NAME", st->lease_name, 1);
		setenv("DLOCK_OWNER", st->lease_owner, 1);
		setenv("DLOCK_TOKEN", st->lease_token, 1);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(argv[0], argv);
		e = errno;
		if (write(errpipe[1], &e, sizeof(e)) < 0)
		{
			/* the parent sees the exit status anyway */
		}
		_exit(e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC);
	}
	if (pid < 0)
	{
		int			e = errno;

		sigprocmask(SIG_SETMASK, &old, NULL);
		msg("cannot fork: %s", strerror(e));
		st->phase = PH_FINISH;
		release_lease(st, st->lease_token);
		exit(EXIT_OSERR);
	}
	/* both sides set the group, so kill(-pid) works whoever runs first */
	if (setpgid(pid, pid) != 0 && errno != EACCES)
		vmsg("setpgid: %s", strerror(errno));
	st->child_pid = pid;
	sigprocmask(SIG_SETMASK, &old, NULL);

	close(errpipe[1]);
	do
		n = read(errpipe[0], &child_errno, sizeof(child_errno));
	while (n < 0 && errno == EINTR);
	close(errpipe[0]);
	if (n == (ssize_t) sizeof(child_errno))
		msg("cannot run %s: %s", argv[0], strerror(child_errno));
	else
		vmsg("started %s as process group %d", argv[0], (int) pid);
}

/* "dlock run": returns the exit status. */
int
cmd_run(const Args *a)
{
	RunState	run = {.phase = PH_ACQUIRE};
	RunState   *st = &run;
	LoopHooks	hooks = {-1, service, next_timer, abandoned, st};
	ms_t		renew_at;
	ms_t		backoff = BACKOFF_MIN_MS;
	int			failures = 0;
	int			released;
	int			status;

	st->lease_name = a->name;
	st->lease_owner = a->owner;
	st->lease_mode = a->mode;
	st->lease_permits = a->permits;
	st->ttl_ms = a->ttl_ms;
	st->grace_ms = a->grace_ms;
	st->margin_ms = min_ms(MAX_MARGIN_MS, st->ttl_ms / 10);

	setup_signals();
	hooks.wake_fd = sigpipe_fds[0];
	loop_set_hooks(&hooks);
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
	/* orphaned descendants become our children: none leaves our tree */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
		st->subreaper = true;
	else
		vmsg("cannot become a child subreaper (%s): only the command's process group is tracked",
			 strerror(errno));
#endif

	st->phase = PH_ACQUIRE;
	acquire_lease(st, a->nowait, a->timeout_ms);
	if (st->got_signal)
		exit_interrupted(st);

	st->phase = PH_RUN;
	renew_at = st->lease_end - st->ttl_ms + st->ttl_ms / 3;
	start_child(st, a->argv);

	while (!st->all_gone)
	{
		if (!st->lost && now_ms() >= renew_at)
		{
			char		b[32];
			ms_t		now;

			switch (renew_once(st, term_deadline(st)))
			{
				case RENEW_OK:
					if (failures > 0)
						msg("lease renewed after %d failed attempt%s", failures,
							failures > 1 ? "s" : "");
					failures = 0;
					backoff = BACKOFF_MIN_MS;
					renew_at = st->lease_end - st->ttl_ms + st->ttl_ms / 3;
					break;
				case RENEW_GONE:
					now = now_ms();
					declare_lost(st, now + st->grace_ms,
								 "lease lost: the server says it is gone (forced release or expiry)");
					break;
				case RENEW_FAILED:
					now = now_ms();
					if (failures == 0 || verbose)
						msg("cannot renew the lease (%s); retrying, SIGTERM to the command in %s unless a renewal succeeds",
							last_error, fmt_ms(term_deadline(st) - now, b, sizeof(b)));
					failures++;
					renew_at = now + backoff;
					backoff = min_ms(backoff * 2, BACKOFF_MAX_MS);
					break;
				case RENEW_ABANDONED:
					break;
			}
			continue;
		}
		sleep_until(st->lost ? NEVER : renew_at);
	}

	st->phase = PH_FINISH;
	status = st->leader_status;
	if (st->survivors)
	{
		/* they can still finish a write: the lease must not end early */
		msg("not releasing %s while processes of the command may still run; it ends by itself within its TTL",
			st->lease_name);
		released = -2;
	}
	else
		released = release_lease(st, st->lease_token);
	close_conn();

	if (st->lost)
	{
		if (WIFSIGNALED(status))
			msg("exiting with status %d (lease lost); the command was killed by signal %d",
				EXIT_LOST, WTERMSIG(status));
		else
			msg("exiting with status %d (lease lost); the command exited with status %d",
				EXIT_LOST, WEXITSTATUS(status));
		return EXIT_LOST;
	}
	if (released == 0)
	{
		msg("the lease on %s was gone when the command ended (forced release?); exiting with status %d",
			st->lease_name, EXIT_LOST);
		return EXIT_LOST;
	}
	if (released == -1)
		msg("could not release %s (%s); it ends by itself within its TTL",
			st->lease_name, last_error);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
