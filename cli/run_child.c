/*
 * run_child.c
 *		The command that "dlock run" runs: its start, the signals dlock
 *		forwards to it, the SIGTERM and SIGKILL it gets when the lease is lost
 *		or it leaves processes behind, and when it and everything it started
 *		are gone.
 *
 * On Linux dlock is a child subreaper: every orphan among the command's
 * descendants is reparented to dlock, so no descendant leaves dlock's tree
 * of processes except by dying, whatever group or session it moves to
 * (setsid, setpgid, daemons).  When the lease is lost or the command ends,
 * dlock therefore signals every descendant it finds in /proc
 * (descendants.c), not only the group, and the command is gone only once
 * dlock has no child left, that is, once every descendant is gone.  The
 * command's leader is killed if dlock itself dies.
 *
 * Everything here acts on the RunState it is given (run_state.h); the wait
 * loop calls run_service() on every wakeup, so kill deadlines are kept
 * while a query runs.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <errno.h>
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
#include "msg.h"
#include "run_child.h"
#include "signals.h"

#define KILL_WAIT_MS		5000	/* after SIGKILL: how long to wait */

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
void
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
descendants_gone(const RunState *st)
{
	if (st->subreaper)
		return st->no_children;
	return kill(-st->child_pid, 0) != 0 && errno == ESRCH;
}

/* A signal to dlock: forwarded to the command, or kept to end a wait. */
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

/*
 * Acts on whatever is due: signals, exited children, kill deadlines.  Every
 * wakeup of a wait of "run" comes here (a hook of loop.c).
 */
void
run_service(RunState *st)
{
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

/* When run_service() next has something to do on its own. */
ms_t
run_next_timer(const RunState *st)
{
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

/*
 * Makes dlock a child subreaper (Linux): orphaned descendants become its
 * children, so none leaves its tree of processes except by dying.
 */
void
become_subreaper(RunState *st)
{
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
		st->subreaper = true;
	else
		vmsg("cannot become a child subreaper (%s): only the command's process group is tracked",
			 strerror(errno));
#else
	(void) st;
#endif
}

/*
 * Starts the command in a process group of its own, with DLOCK_NAME,
 * DLOCK_OWNER and DLOCK_TOKEN in its environment.  Returns false, with a
 * message, if no process could be started (the lease is the caller's to
 * release); a command that cannot be executed is a started process that
 * exits 126 or 127.
 */
bool
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
		return false;
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
		return false;
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
	return true;
}
