/*
 * run_state.h
 *		The state of "dlock run", shared by the files of its state machine:
 *		run.c (the phases, the renewal loop), run_lease.c (the calls that
 *		take, renew and release the lease) and run_child.c (the command's
 *		processes).
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_RUN_STATE_H
#define DLOCK_RUN_STATE_H

#include <stdbool.h>
#include <sys/types.h>

#include "cli.h"

#define RECONNECT_WINDOW_MS	10000	/* while waiting: how long to retry */
#define BACKOFF_MIN_MS		100
#define BACKOFF_MAX_MS		1000
#define GROUP_POLL_MS		20	/* polling for the last descendants */
#define MAX_SENT_PIDS		32	/* backends that got our acquire calls */

/*
 * --queue: how often the queued request is asked for again (at most: a tenth
 * of the TTL if less, as a grant's TTL runs while it is not collected), and
 * its hold, which outlasts a reconnection window so that a lost connection
 * retried in time keeps the request's place.
 */
#define QUEUE_POLL_MS		1000
#define QUEUE_HOLD_MS		(3 * RECONNECT_WINDOW_MS)

typedef enum
{
	PH_ACQUIRE,					/* connecting, waiting for the lease */
	PH_RUN,						/* the lease is held, the command runs */
	PH_FINISH					/* releasing, exiting */
} Phase;

/*
 * Everything "run" knows: a local of cmd_run(), passed to every function of
 * the state machine and, as their argument, to the hooks of the wait loop.
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
	ms_t		at_least_ms;	/* the lease's minimum hold; 0: none */
	const char *lease_lifetime; /* "ttl", "session"; NULL: not given */
	bool		session;		/* the lease ends with our connection */
	bool		queue;			/* waits as a queued request (dlock_enqueue) */
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
static inline ms_t
term_deadline(const RunState *st)
{
	return st->lease_end - st->margin_ms - st->grace_ms;
}

#endif							/* DLOCK_RUN_STATE_H */
