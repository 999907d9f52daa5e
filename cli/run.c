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

static Phase phase = PH_ACQUIRE;
static int	got_signal = 0;		/* signal received with no command to get it */

/* the lease */
static const char *lease_name;
static const char *lease_owner;
static const char *lease_mode;	/* "exclusive" or "shared" */
static const char *lease_permits;	/* a semaphore's size, as text, or NULL */
static char lease_token[32];
static ms_t ttl_ms;
static ms_t grace_ms;
static ms_t margin_ms;
static ms_t lease_end;			/* conservative end of the lease (monotonic) */
static bool lost = false;		/* the lease is gone, or could not be kept */

/*
 * The command: its leader's pid is also its process group's id.  As the
 * subreaper, dlock knows that the command and everything it started are gone
 * when it has no child left; otherwise (not Linux, or prctl failed) it can
 * only wait for the group to be empty.
 */
static pid_t child_pid = 0;
static bool subreaper = false;
static bool leader_reaped = false;
static int	leader_status = 0;
static bool no_children = false;	/* waitpid() said ECHILD */
static bool all_gone = false;	/* the command and its descendants are gone */
static bool survivors = false;	/* some survived SIGKILL; we stopped waiting */
static ms_t term_at = 0;		/* when SIGTERM was sent, 0: not yet */
static ms_t kill_at = 0;		/* when SIGKILL is due */
static bool killed = false;
static ms_t killed_at = 0;
static ms_t next_kill_at = 0;	/* after SIGKILL: the next round of it */
static ms_t lost_at = 0;		/* when the lease was found lost */

/* the moment the command must get SIGTERM if no renewal succeeds before */
static ms_t
term_deadline(void)
{
	return lease_end - margin_ms - grace_ms;
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
signal_all(int sig)
{
	bool		cont = sig != SIGKILL;
	bool		whole_group = !leader_reaped || !subreaper;
	int			others = 0;

	if (whole_group)
	{
		kill(-child_pid, sig);
		if (cont)
			kill(-child_pid, SIGCONT);
	}
#ifdef __linux__
	if (!scan_processes())
		return -1;
	for (size_t i = 0; i < nprocs; i++)
	{
		if (!procs[i].ours || (whole_group && procs[i].pgrp == child_pid))
			continue;
		signal_process(procs[i].pid, sig);
		if (cont)
			signal_process(procs[i].pid, SIGCONT);
		if (procs[i].pgrp != child_pid)
			others++;
	}
#endif
	return others;
}

/* Sends SIGTERM to the command and its descendants (once), schedules SIGKILL. */
static void
terminate_all(ms_t kill_deadline, const char *why)
{
	ms_t		now = now_ms();
	char		b[32];
	char		others[96] = "";
	int			n;

	if (child_pid <= 0 || all_gone)
		return;
	if (term_at != 0)
	{
		if (kill_deadline < kill_at)
			kill_at = kill_deadline;
		return;
	}
	n = signal_all(SIGTERM);
	if (n > 0)
		snprintf(others, sizeof(others), " and to %d process%s that left it", n,
				 n == 1 ? "" : "es");
	else if (n < 0)
		snprintf(others, sizeof(others), " (cannot read /proc: processes that left it are not found)");
	msg("%s: sent SIGTERM to the command's process group %d%s (SIGKILL in %s)",
		why, (int) child_pid, others,
		fmt_ms(kill_deadline - now > 0 ? kill_deadline - now : 0, b, sizeof(b)));
	term_at = now;
	kill_at = kill_deadline;
}

/* The lease is gone, or cannot be kept: terminate the command. */
static void
declare_lost(ms_t kill_deadline, const char *why)
{
	if (lost)
		return;
	lost = true;
	lost_at = now_ms();
	terminate_all(kill_deadline, why);
}

static void
reap(void)
{
	for (;;)
	{
		int			status;
		pid_t		pid = waitpid(-1, &status, WNOHANG);

		if (pid < 0 && errno == ECHILD)
			no_children = true;
		if (pid <= 0)
			break;
		if (pid == child_pid)
		{
			leader_reaped = true;
			leader_status = status;
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
descendants_gone(void)
{
	if (subreaper)
		return no_children;
	return kill(-child_pid, 0) != 0 && errno == ESRCH;
}

/* ---------------------------------------------------------------- the loop */

static void
handle_signal(int sig)
{
	if (sig == SIGCHLD)
		return;
	if (child_pid > 0 && !leader_reaped)
	{
		vmsg("forwarding %s to process group %d", signame(sig), (int) child_pid);
		kill(-child_pid, sig);
	}
	else if (got_signal == 0)
		got_signal = sig;
}

/* Acts on whatever is due: signals, exited children, kill deadlines. */
static void
service(void *arg)
{
	ms_t		now;

	(void) arg;					/* the state is in this file's statics */

	if (sigpipe_fds[0] >= 0)
	{
		unsigned char buf[64];
		ssize_t		n;

		while ((n = read(sigpipe_fds[0], buf, sizeof(buf))) > 0)
			for (ssize_t i = 0; i < n; i++)
				handle_signal(buf[i]);
	}
	if (child_pid <= 0)
		return;
	reap();
	if (all_gone)
		return;

	now = now_ms();
	if (phase == PH_RUN && !lost && now >= term_deadline())
	{
		char		b[32];
		char		why[160];

		snprintf(why, sizeof(why), "lease lost: no renewal succeeded and it may end in %s",
				 fmt_ms(lease_end - now, b, sizeof(b)));
		declare_lost(min_ms(now + grace_ms, lease_end - margin_ms), why);
	}
	if (term_at != 0 && !killed && now >= kill_at)
	{
		msg("sending SIGKILL to process group %d and to every process the command started",
			(int) child_pid);
		signal_all(SIGKILL);
		killed = true;
		killed_at = now;
		next_kill_at = now + GROUP_POLL_MS;
	}
	else if (killed && now >= next_kill_at && !descendants_gone())
	{
		/* processes forked while the last round was sent */
		signal_all(SIGKILL);
		next_kill_at = now + GROUP_POLL_MS;
	}
	if (leader_reaped)
	{
		if (descendants_gone())
		{
			all_gone = true;
			if (lost)
			{
				char		b[32];

				msg("the command and every process it started are gone, %s after the lease was lost",
					fmt_ms(now - lost_at, b, sizeof(b)));
			}
			else
				vmsg("the command and every process it started are gone");
		}
		else if (term_at == 0)
			terminate_all(now + grace_ms,
						  "the command exited but processes it started remain");
		else if (killed && now >= killed_at + KILL_WAIT_MS)
		{
			msg("processes the command started survived SIGKILL for %d ms; not waiting for them",
				KILL_WAIT_MS);
			all_gone = true;
			survivors = true;
		}
	}
}

/* When service() next has something to do on its own. */
static ms_t
next_timer(void *arg)
{
	ms_t		t = NEVER;

	(void) arg;					/* the state is in this file's statics */

	if (child_pid <= 0 || all_gone)
		return t;
	if (phase == PH_RUN && !lost)
		t = min_ms(t, term_deadline());
	if (term_at != 0 && !killed)
		t = min_ms(t, kill_at);
	if (killed)
		t = min_ms(t, min_ms(next_kill_at, killed_at + KILL_WAIT_MS));
	/* as the subreaper, SIGCHLD tells when the last child is gone */
	if (leader_reaped && !subreaper)
		t = min_ms(t, now_ms() + GROUP_POLL_MS);
	return t;
}

/* Whether a query or connection attempt in progress is no longer wanted. */
static bool
abandoned(void *arg)
{
	(void) arg;					/* the state is in this file's statics */

	switch (phase)
	{
		case PH_ACQUIRE:
			return got_signal != 0;
		case PH_RUN:
			return lost || all_gone;
		case PH_FINISH:
			return false;
	}
	return false;
}

/* Sleeps until deadline, unless a signal interrupts the wait for the lease. */
static void
backoff_until(ms_t deadline)
{
	while (now_ms() < deadline && !got_signal)
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
renew_once(ms_t deadline)
{
	char		ttl_text[64];
	const char *vals[3];
	PGresult   *res;
	QStatus		qs;
	ms_t		sent;
	RenewStatus result;

	if (conn == NULL && !connect_db(deadline))
		return io_abandoned() ? RENEW_ABANDONED : RENEW_FAILED;

	interval_text(ttl_ms, ttl_text, sizeof(ttl_text));
	vals[0] = lease_name;
	vals[1] = ttl_text;
	vals[2] = lease_owner;
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
		lease_end = sent + ttl_ms;
		vmsg("renewed %s until %s", lease_name, PQgetvalue(res, 0, 0));
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
release_lease(const char *token)
{
	ms_t		deadline = now_ms() + RELEASE_WINDOW_MS;
	ms_t		backoff = BACKOFF_MIN_MS;
	const char *vals[3];

	if (lease_end != 0)
		deadline = min_ms(deadline, lease_end);
	vals[0] = lease_name;
	vals[1] = lease_owner;
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

/*
 * The backends that were sent a dlock_acquire or dlock_try of ours, whose
 * answer we may not have read.  Each connection sends one at a time, and
 * retries end after RECONNECT_WINDOW_MS, so a few slots are enough.
 */
static int	sent_pids[MAX_SENT_PIDS];
static int	nsent_pids = 0;

static void
note_backend(int pid)
{
	for (int i = 0; i < nsent_pids; i++)
		if (sent_pids[i] == pid)
			return;
	if (nsent_pids < MAX_SENT_PIDS)
		sent_pids[nsent_pids++] = pid;
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
release_unseen_grant(void)
{
	ms_t		deadline = now_ms() + RELEASE_WINDOW_MS;
	char		pids[MAX_SENT_PIDS * 12 + 3];
	char	   *p = pids;
	const char *vals[3];
	PGresult   *res;
	char		token[32];

	*p++ = '{';
	for (int i = 0; i < nsent_pids; i++)
		p += sprintf(p, "%s%d", i > 0 ? "," : "", sent_pids[i]);
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
	vals[0] = lease_name;
	vals[1] = lease_owner;
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
	if (release_lease(token) < 0)
		goto failed;
	return;

failed:
	msg("cannot release what may have been granted on %s (%s); it ends by itself within its TTL",
		lease_name, last_error);
}

/*
 * Exits after an interrupted wait.  Releases the lease we took: by its
 * token if we read it, else the one granted to our backends, if any; never
 * another lease of the same owner.
 */
static void
exit_interrupted(void)
{
	int			sig = got_signal;

	msg("interrupted by %s while waiting for %s; the command was not started",
		signame(sig), lease_name);
	phase = PH_FINISH;
	close_conn();
	if (lease_token[0] != '\0')
	{
		if (release_lease(lease_token) < 0)
			msg("cannot release %s (%s); it ends by itself within its TTL",
				lease_name, last_error);
	}
	else if (nsent_pids > 0)
		release_unseen_grant();
	close_conn();
	exit(128 + sig);
}

/*
 * Takes the lease.  Returns only when it is held (lease_token, lease_end
 * set); exits otherwise.  A lost connection is retried for a while: taking
 * a lease again with the same owner returns the same token.
 */
static void
acquire_lease(bool nowait, ms_t timeout_ms)
{
	ms_t		start = now_ms();
	ms_t		retry_until = 0;
	ms_t		backoff = BACKOFF_MIN_MS;
	char		ttl_text[64];
	char		timeout_text[64];
	char		b[32];

	interval_text(ttl_ms, ttl_text, sizeof(ttl_text));
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

		if (got_signal)
			exit_interrupted();
		if (conn == NULL)
		{
			if (!connect_db(retry_until ? retry_until : 0))
			{
				if (got_signal)
					exit_interrupted();
				if (retry_until == 0 || now_ms() >= retry_until)
				{
					msg("cannot connect to the server: %s", last_error);
					exit(EXIT_CONN);
				}
				vmsg("reconnecting failed: %s", last_error);
				backoff_until(min_ms(now_ms() + backoff, retry_until));
				backoff = min_ms(backoff * 2, BACKOFF_MAX_MS);
				continue;
			}
		}

		vals[0] = lease_name;
		vals[1] = ttl_text;
		if (nowait)
		{
			sql = queries[SQL_TRY];
			vals[2] = lease_owner;
			vals[3] = lease_mode;
			vals[4] = lease_permits;
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
			vals[3] = lease_owner;
			vals[4] = lease_mode;
			vals[5] = lease_permits;
			nparams = 6;
		}
		note_backend(PQbackendPID(conn));
		sent = now_ms();
		qs = run_query(sql, nparams, vals, deadline, &res);
		recv = now_ms();
		if (qs == Q_ABANDONED)
			exit_interrupted();
		if (qs != Q_OK)
		{
			if (retry_until == 0)
				retry_until = now_ms() + RECONNECT_WINDOW_MS;
			if (now_ms() >= retry_until)
			{
				msg("lost the connection while taking %s: %s", lease_name, last_error);
				exit(EXIT_CONN);
			}
			msg("lost the connection while taking %s (%s); retrying", lease_name, last_error);
			backoff_until(min_ms(now_ms() + backoff, retry_until));
			backoff = min_ms(backoff * 2, BACKOFF_MAX_MS);
			continue;
		}
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			bool		arg = is_argument_error(res);

			msg("cannot take %s: %s", lease_name, last_error);
			PQclear(res);
			exit(arg ? EXIT_USAGE : EXIT_SERVER);
		}
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			if (nowait)
			{
				report_holder(lease_name, now_ms() + RELEASE_WINDOW_MS);
				exit(EXIT_BUSY);
			}
			msg("timed out after %s waiting for %s", fmt_ms(recv - start, b, sizeof(b)),
				lease_name);
			exit(EXIT_TIMEOUT);
		}
		snprintf(lease_token, sizeof(lease_token), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		lease_end = sent + ttl_ms;
		vmsg("took %s as %s, token %s, after %s", lease_name, lease_owner, lease_token,
			 fmt_ms(recv - start, b, sizeof(b)));
		if (recv - sent <= ttl_ms / 10)
			return;

		/*
		 * The grant came after a wait (or a slow round trip): when exactly is
		 * unknown, so renew now to know how long the lease lasts.
		 */
		phase = PH_RUN;
		switch (renew_once(now_ms() + RECONNECT_WINDOW_MS))
		{
			case RENEW_OK:
				phase = PH_ACQUIRE;
				return;
			case RENEW_GONE:
				msg("lease on %s lost before the command started", lease_name);
				exit(EXIT_LOST);
			default:
				msg("cannot confirm the lease on %s: %s", lease_name, last_error);
				phase = PH_FINISH;
				lease_end = 0;	/* its real end is unknown: do not cap the
								 * release */
				release_lease(lease_token);
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
start_child(char **argv)
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
		phase = PH_FINISH;
		release_lease(lease_token);
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
		setenv("DLOCK_NAME", lease_name, 1);
		setenv("DLOCK_OWNER", lease_owner, 1);
		setenv("DLOCK_TOKEN", lease_token, 1);
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
		phase = PH_FINISH;
		release_lease(lease_token);
		exit(EXIT_OSERR);
	}
	/* both sides set the group, so kill(-pid) works whoever runs first */
	if (setpgid(pid, pid) != 0 && errno != EACCES)
		vmsg("setpgid: %s", strerror(errno));
	child_pid = pid;
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
	LoopHooks	hooks = {-1, service, next_timer, abandoned, NULL};
	ms_t		renew_at;
	ms_t		backoff = BACKOFF_MIN_MS;
	int			failures = 0;
	int			released;
	int			status;

	lease_name = a->name;
	lease_owner = a->owner;
	lease_mode = a->mode;
	lease_permits = a->permits;
	ttl_ms = a->ttl_ms;
	grace_ms = a->grace_ms;
	margin_ms = min_ms(MAX_MARGIN_MS, ttl_ms / 10);

	setup_signals();
	hooks.wake_fd = sigpipe_fds[0];
	loop_set_hooks(&hooks);
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
	/* orphaned descendants become our children: none leaves our tree */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
		subreaper = true;
	else
		vmsg("cannot become a child subreaper (%s): only the command's process group is tracked",
			 strerror(errno));
#endif

	phase = PH_ACQUIRE;
	acquire_lease(a->nowait, a->timeout_ms);
	if (got_signal)
		exit_interrupted();

	phase = PH_RUN;
	renew_at = lease_end - ttl_ms + ttl_ms / 3;
	start_child(a->argv);

	while (!all_gone)
	{
		if (!lost && now_ms() >= renew_at)
		{
			char		b[32];
			ms_t		now;

			switch (renew_once(term_deadline()))
			{
				case RENEW_OK:
					if (failures > 0)
						msg("lease renewed after %d failed attempt%s", failures,
							failures > 1 ? "s" : "");
					failures = 0;
					backoff = BACKOFF_MIN_MS;
					renew_at = lease_end - ttl_ms + ttl_ms / 3;
					break;
				case RENEW_GONE:
					now = now_ms();
					declare_lost(now + grace_ms,
								 "lease lost: the server says it is gone (forced release or expiry)");
					break;
				case RENEW_FAILED:
					now = now_ms();
					if (failures == 0 || verbose)
						msg("cannot renew the lease (%s); retrying, SIGTERM to the command in %s unless a renewal succeeds",
							last_error, fmt_ms(term_deadline() - now, b, sizeof(b)));
					failures++;
					renew_at = now + backoff;
					backoff = min_ms(backoff * 2, BACKOFF_MAX_MS);
					break;
				case RENEW_ABANDONED:
					break;
			}
			continue;
		}
		sleep_until(lost ? NEVER : renew_at);
	}

	phase = PH_FINISH;
	status = leader_status;
	if (survivors)
	{
		/* they can still finish a write: the lease must not end early */
		msg("not releasing %s while processes of the command may still run; it ends by itself within its TTL",
			lease_name);
		released = -2;
	}
	else
		released = release_lease(lease_token);
	close_conn();

	if (lost)
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
			lease_name, EXIT_LOST);
		return EXIT_LOST;
	}
	if (released == -1)
		msg("could not release %s (%s); it ends by itself within its TTL",
			lease_name, last_error);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
