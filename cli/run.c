/*
 * run.c
 *		"dlock run": the lease, the command that runs under it, and the loop
 *		that keeps both in step.
 *
 * "run" connects with libpq, takes the lease (dlock_acquire, dlock_try, or
 * with --queue dlock_enqueue asked again until granted), starts COMMAND in
 * a process group of its own and renews the lease every third of its TTL.
 * When the command exits, every process it started that is still running
 * is terminated, the lease is released once they are gone, and dlock exits
 * with the command's status.
 *
 * The lease must never outlive its holder's knowledge of it, so dlock keeps
 * a conservative local deadline: the monotonic time at which the last
 * successful grant or renewal was *sent*, plus the TTL.  The server computed
 * its expiry after that moment, so the lease lasts at least until then.
 *
 *	- A renewal that returns NULL means the lease is gone (forced release,
 *	  expiry): the group (and every process that left it, see run_child.c)
 *	  gets SIGTERM at once and SIGKILL --grace later.
 *	- A renewal that fails (connection lost, server restarting, error) is
 *	  retried with a short backoff, reconnecting as needed, because a ttl
 *	  lease belongs to an owner string, not to a connection.  A session lease
 *	  (--lifetime session) ends with its connection: once that is gone, the
 *	  lease is lost as if the server had said so.  If no renewal has
 *	  succeeded by deadline - margin - grace, the group gets SIGTERM, and
 *	  SIGKILL at deadline - margin, so the command is dead before the server
 *	  can give the name to anyone else.
 *
 * Everything runs in one thread around poll(): signals are turned into bytes
 * on a self-pipe (signals.c), and every libpq call is asynchronous with a
 * deadline (session.c) and waits in loop.c, whose hooks this file sets, so
 * a hung server or network can never delay the kill.  Signals sent to dlock
 * (INT, TERM, HUP, QUIT, USR1, USR2) are forwarded to the command's group.
 *
 * This file is the state machine's top: its phases (taking the lease,
 * running the command, finishing), the renewal loop and the exit status.
 * The calls to the server are run_lease.c's, the command's processes
 * run_child.c's; all three share one RunState (run_state.h), a local of
 * cmd_run() passed to each of them.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "loop.h"
#include "msg.h"
#include "run.h"
#include "run_child.h"
#include "run_lease.h"
#include "session.h"
#include "signals.h"

#define MAX_MARGIN_MS		1000	/* safety margin: min(this, ttl / 10) */

/* ---------------------------------------------------------------- the wait loop's hooks */

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

static void
service(void *arg)
{
	run_service(arg);
}

static ms_t
next_timer(void *arg)
{
	return run_next_timer(arg);
}

/* ---------------------------------------------------------------- the phases */

/* The state at the start: the lease asked for, nothing held, nothing run. */
static void
init_state(RunState *st, const Args *a)
{
	memset(st, 0, sizeof(*st));
	st->phase = PH_ACQUIRE;
	st->lease_name = a->name;
	st->lease_owner = a->owner;
	st->lease_mode = a->mode;
	st->lease_permits = a->permits;
	st->at_least_ms = a->at_least_ms;
	st->lease_lifetime = a->lifetime;
	st->session = a->lifetime != NULL && strcmp(a->lifetime, "session") == 0;
	st->queue = a->queue;
	st->ttl_ms = a->ttl_ms;
	st->grace_ms = a->grace_ms;
	st->margin_ms = min_ms(MAX_MARGIN_MS, st->ttl_ms / 10);
}

/* The renewal loop's own state: when to renew next, and the retries. */
typedef struct
{
	ms_t		renew_at;
	ms_t		backoff;
	int			failures;		/* in a row */
} Renewal;

/* One renewal, and when the next one is due. */
static void
renew(RunState *st, Renewal *rn)
{
	char		b[32];
	ms_t		now;

	switch (renew_once(st, term_deadline(st)))
	{
		case RENEW_OK:
			if (rn->failures > 0)
				msg("lease renewed after %d failed attempt%s", rn->failures,
					rn->failures > 1 ? "s" : "");
			rn->failures = 0;
			rn->backoff = BACKOFF_MIN_MS;
			rn->renew_at = st->lease_end - st->ttl_ms + st->ttl_ms / 3;
			break;
		case RENEW_GONE:
			now = now_ms();
			declare_lost(st, now + st->grace_ms,
						 "lease lost: the server says it is gone (forced release or expiry)");
			break;
		case RENEW_FAILED:
			now = now_ms();
			/* a session lease ends with its connection: no renewal can save it */
			if (st->session && conn == NULL)
			{
				char		why[1200];

				snprintf(why, sizeof(why),
						 "lease lost: the connection its session lease lived on is gone (%s)",
						 last_error);
				declare_lost(st, now + st->grace_ms, why);
				break;
			}
			if (rn->failures == 0 || verbose)
				msg("cannot renew the lease (%s); retrying, SIGTERM to the command in %s unless a renewal succeeds",
					last_error, fmt_ms(term_deadline(st) - now, b, sizeof(b)));
			rn->failures++;
			rn->renew_at = now + rn->backoff;
			rn->backoff = min_ms(rn->backoff * 2, BACKOFF_MAX_MS);
			break;
		case RENEW_ABANDONED:
			break;
	}
}

/*
 * While the command runs: renews the lease every third of its TTL (sooner
 * after a failure) until the lease is lost, and serves the waits until the
 * command and everything it started are gone.
 */
static void
keep_lease(RunState *st)
{
	Renewal		rn = {
		.renew_at = st->lease_end - st->ttl_ms + st->ttl_ms / 3,
		.backoff = BACKOFF_MIN_MS,
		.failures = 0,
	};

	while (!st->all_gone)
	{
		if (!st->lost && now_ms() >= rn.renew_at)
		{
			renew(st, &rn);
			continue;
		}
		sleep_until(st->lost ? NEVER : rn.renew_at);
	}
}

/*
 * Once the command and everything it started are gone: releases the lease
 * (unless some survived SIGKILL) and returns dlock's exit status.
 */
static int
finish(RunState *st)
{
	int			status = st->leader_status;
	int			released;

	st->phase = PH_FINISH;
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

/* "dlock run": returns the exit status. */
int
cmd_run(const Args *a)
{
	RunState	run;
	RunState   *st = &run;
	LoopHooks	hooks = {-1, service, next_timer, abandoned, st};
	int			status;

	init_state(st, a);
	setup_signals();
	hooks.wake_fd = sigpipe_fds[0];
	loop_set_hooks(&hooks);
	become_subreaper(st);

	acquire_lease(st, a->nowait, a->timeout_ms);
	if (st->got_signal)
		exit_interrupted(st);

	st->phase = PH_RUN;
	if (!start_child(st, a->argv))
	{
		st->phase = PH_FINISH;
		release_lease(st, st->lease_token);
		exit(EXIT_OSERR);
	}
	keep_lease(st);

	status = finish(st);
	loop_set_hooks(NULL);		/* its argument, run, ends here */
	return status;
}
