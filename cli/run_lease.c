/*
 * run_lease.c
 *		The lease that "dlock run" holds, as the server sees it: taking it
 *		(dlock_acquire or dlock_try, or dlock_enqueue asked again until
 *		granted; retried over lost connections), renewing it, releasing it by
 *		its token, and what an interrupted wait leaves to release or dequeue.
 *
 * Every call goes through session.c, whose waits serve run's signals and
 * kill deadlines (loop.c), and acts on the RunState it is given
 * (run_state.h).  A lease belongs to an owner string, not to a connection,
 * so a call that lost its connection is sent again on a new one.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop.h"
#include "msg.h"
#include "run_lease.h"
#include "session.h"
#include "signals.h"

/* Sleeps until deadline, unless a signal interrupts the wait for the lease. */
static void
backoff_until(RunState *st, ms_t deadline)
{
	while (now_ms() < deadline && !st->got_signal)
		sleep_until(deadline);
}

/*
 * One renewal attempt, reconnecting first if needed, given up at deadline.
 * On success lease_end moves to the send time plus the TTL.
 */
RenewStatus
renew_once(RunState *st, ms_t deadline)
{
	char		ttl_text[64];
	const char *vals[3];
	PGresult   *res;
	QStatus		qs;
	ms_t		sent;
	RenewStatus result;

	/* a session lease lived on the connection that is gone */
	if (conn == NULL && st->session)
		return RENEW_FAILED;
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
int
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

/* Our backends, sent_pids, as an array literal; pids holds MAX_SENT_PIDS. */
static void
sent_pids_text(const RunState *st, char *pids)
{
	char	   *p = pids;

	*p++ = '{';
	for (int i = 0; i < st->nsent_pids; i++)
		p += sprintf(p, "%s%d", i > 0 ? "," : "", st->sent_pids[i]);
	*p++ = '}';
	*p = '\0';
}

/*
 * Waits (until deadline) for the backends that got our calls to be gone;
 * seen_gone: the server's clock once it saw them gone (or when we stopped
 * waiting).  Such a backend ends as soon as it sees our connection closed:
 * a waiter leaves the queue (and gives back a grant it got meanwhile), a
 * granted call returns and finds no client; once gone, nothing more can be
 * granted to it, nor queued by it.  Returns false if the server could not
 * be asked.
 */
static bool
wait_backends_gone(const char *pids, ms_t deadline, char *seen_gone, size_t len)
{
	const char *vals[1] = {pids};

	for (;;)
	{
		PGresult   *res;
		bool		running;

		if (conn == NULL && !connect_db(deadline))
			return false;
		if (run_query(queries[SQL_BACKENDS_LEFT], 1, vals, deadline, &res) != Q_OK)
			return false;
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			PQclear(res);
			return false;
		}
		running = strcmp(PQgetvalue(res, 0, 0), "0") != 0;
		snprintf(seen_gone, len, "%s", PQgetvalue(res, 0, 1));
		PQclear(res);
		if (!running)
			return true;
		if (now_ms() + GROUP_POLL_MS >= deadline)
		{
			vmsg("backends %s still run; looking for a grant to them anyway", pids);
			return true;
		}
		{
			ms_t		until = now_ms() + GROUP_POLL_MS;

			while (now_ms() < until)
				sleep_until(until);
		}
	}
}

/*
 * The token of the lease on our name and owner granted (granted_at, on the
 * server's clock) after our first connection and up to until, whose pid is
 * NULL (a ttl lease's pid is hidden once its backend exits; a queued
 * request's grant has none) or one of our backends (pids).  A lease of the
 * same owner taken elsewhere is left out: one granted before we started (an
 * extension by our call keeps its granted_at), or held by another process's
 * running backend.  Returns 1 with token set, 0 if there is none, -1 if the
 * server could not be asked.
 */
static int
grant_to_us(RunState *st, const char *pids, const char *until, ms_t deadline,
			char *token, size_t len)
{
	const char *vals[5];
	PGresult   *res;

	vals[0] = st->lease_name;
	vals[1] = st->lease_owner;
	vals[2] = pids;
	vals[3] = first_server_clock;
	vals[4] = until;
	if (run_query(queries[SQL_GRANTED_TO], 5, vals, deadline, &res) != Q_OK)
		return -1;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) == 0)
	{
		int			result = PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : -1;

		PQclear(res);
		return result;
	}
	snprintf(token, len, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 1;
}

/*
 * After an interrupted wait: releases the lease the server may have granted
 * to one of our calls just before we stopped reading its answer, once the
 * backends that got them are gone.
 */
static void
release_unseen_grant(RunState *st)
{
	ms_t		deadline = now_ms() + RELEASE_WINDOW_MS;
	char		pids[MAX_SENT_PIDS * 12 + 3];
	char		seen_gone[40];
	char		token[32];
	int			found;

	sent_pids_text(st, pids);
	if (!wait_backends_gone(pids, deadline, seen_gone, sizeof(seen_gone)))
		goto failed;
	found = grant_to_us(st, pids, seen_gone, deadline, token, sizeof(token));
	if (found == 0)
		return;					/* nothing was granted to us */
	if (found < 0)
		goto failed;
	vmsg("releasing the lease granted as the wait was interrupted (token %s)", token);
	if (release_lease(st, token) < 0)
		goto failed;
	return;

failed:
	msg("cannot release what may have been granted on %s (%s); it ends by itself within its TTL",
		st->lease_name, last_error);
}

/*
 * --queue, when it stops waiting: our queued request leaves the queue
 * (dlock_dequeue), once no call of ours can still queue it again (with
 * in_flight, a call whose answer we did not read, on a connection now
 * closed, may still run).  If it was granted first, the lease is released,
 * or with adopt kept: its token is put in lease_token and true returned.
 */
static bool
leave_queue(RunState *st, bool in_flight, bool adopt)
{
	ms_t		deadline = now_ms() + RELEASE_WINDOW_MS;
	char		pids[MAX_SENT_PIDS * 12 + 3];
	char		seen_gone[40];
	char		after[40];
	char		token[32];
	const char *vals[2];
	PGresult   *res;
	bool		dequeued;
	int			found;

	sent_pids_text(st, pids);
	if (in_flight && !wait_backends_gone(pids, deadline, seen_gone, sizeof(seen_gone)))
		goto failed;
	if (conn == NULL && !connect_db(deadline))
		goto failed;
	vals[0] = st->lease_name;
	vals[1] = st->lease_owner;
	if (run_query(queries[SQL_DEQUEUE], 2, vals, deadline, &res) != Q_OK)
		goto failed;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		PQclear(res);
		goto failed;
	}
	dequeued = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	snprintf(after, sizeof(after), "%s", PQgetvalue(res, 0, 1));
	PQclear(res);
	if (dequeued)
	{
		vmsg("left the queue of %s", st->lease_name);
		return false;
	}
	/* not queued: granted meanwhile, or at once by an answer we did not read */
	found = grant_to_us(st, pids, after, deadline, token, sizeof(token));
	if (found == 0)
		return false;
	if (found < 0)
		goto failed;
	if (adopt)
	{
		snprintf(st->lease_token, sizeof(st->lease_token), "%s", token);
		vmsg("the queued request on %s was granted as it left (token %s)", st->lease_name, token);
		return true;
	}
	vmsg("releasing the lease granted to the queued request (token %s)", token);
	if (release_lease(st, token) < 0)
		goto failed;
	return false;

failed:
	msg("cannot leave the queue of %s (%s); the request leaves it within %d s, and a lease granted to it ends within its TTL",
		st->lease_name, last_error, QUEUE_HOLD_MS / 1000);
	return false;
}

/*
 * Exits after an interrupted wait.  Releases the lease we took: by its
 * token if we read it, else the one granted to our backends or our queued
 * request (which leaves the queue), if any; never another lease of the same
 * owner.  A session lease granted to our backend
 * ends with it (or stays released within its minimum hold): nothing to do.
 */
void
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
	else if (st->queue && st->nsent_pids > 0)
		leave_queue(st, true, false);
	else if (st->nsent_pids > 0 && !st->session)
		release_unseen_grant(st);
	close_conn();
	exit(128 + sig);
}


/* Taking the lease: what every attempt needs, and when retries end. */
typedef struct
{
	bool		nowait;			/* dlock_try, not dlock_acquire */
	char		min_hold_text[64];	/* --at-least; "": none */
	ms_t		timeout_ms;		/* -1: wait until granted */
	ms_t		start;			/* when the first attempt began */
	ms_t		retry_until;	/* 0: no connection lost yet */
	ms_t		backoff;
	char		ttl_text[64];
} Acquire;

/* Waits before the next attempt (never past retry_until), then backs off. */
static void
back_off(RunState *st, Acquire *aq)
{
	backoff_until(st, min_ms(now_ms() + aq->backoff, aq->retry_until));
	aq->backoff = min_ms(aq->backoff * 2, BACKOFF_MAX_MS);
}

/*
 * Connects for the next attempt unless connected.  Returns false after a
 * reconnection that failed but may be retried; exits if the first
 * connection fails, or retries have run out.
 */
static bool
connect_for_acquire(RunState *st, Acquire *aq)
{
	if (conn != NULL || connect_db(aq->retry_until ? aq->retry_until : 0))
		return true;
	if (st->got_signal)
		exit_interrupted(st);
	if (aq->retry_until == 0 || now_ms() >= aq->retry_until)
	{
		msg("cannot connect to the server: %s", last_error);
		exit(EXIT_CONN);
	}
	vmsg("reconnecting failed: %s", last_error);
	back_off(st, aq);
	return false;
}

/*
 * Sends dlock_try (--no-wait) or dlock_acquire with what is left of the
 * timeout, and reads its answer.  *sent: when it was sent.
 */
static QStatus
send_acquire(RunState *st, const Acquire *aq, PGresult **res, ms_t *sent)
{
	const char *vals[8];
	char		timeout_text[64];
	ms_t		deadline = NEVER;
	const char *sql;
	int			nparams;

	vals[0] = st->lease_name;
	vals[1] = aq->ttl_text;
	if (aq->nowait)
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
		if (aq->timeout_ms >= 0)
		{
			ms_t		left = aq->timeout_ms - (now_ms() - aq->start);

			interval_text(left > 0 ? left : 0, timeout_text, sizeof(timeout_text));
			vals[2] = timeout_text;
			/* the server times the wait; this only guards a hung server */
			deadline = aq->start + aq->timeout_ms + RECONNECT_WINDOW_MS;
		}
		else
			vals[2] = NULL;
		vals[3] = st->lease_owner;
		vals[4] = st->lease_mode;
		vals[5] = st->lease_permits;
		nparams = 6;
	}
	/* without --at-least and --lifetime, the query an extension before 1.2 has too */
	if (aq->min_hold_text[0] != '\0' || st->lease_lifetime != NULL)
	{
		require_version(1, 2, st->lease_lifetime != NULL ? "--lifetime" : "--at-least");
		sql = queries[aq->nowait ? SQL_TRY_12 : SQL_ACQUIRE_12];
		vals[nparams++] = st->lease_lifetime;
		vals[nparams++] = aq->min_hold_text[0] != '\0' ? aq->min_hold_text : NULL;
	}
	note_backend(st, PQbackendPID(conn));
	*sent = now_ms();
	return run_query(sql, nparams, vals, deadline, res);
}

/*
 * After a call whose connection was lost: exits once retries have run out
 * (RECONNECT_WINDOW_MS after the first loss), else waits to retry.
 */
static void
retry_after_loss(RunState *st, Acquire *aq)
{
	/*
	 * A session lease granted to the lost connection's backend ends when that
	 * backend notices; asked again before then, the server would extend that
	 * lease, still bound to the dying backend, instead of granting one to ours.
	 */
	if (st->session)
	{
		msg("lost the connection while taking %s (%s); a session lease is not asked for again",
			st->lease_name, last_error);
		exit(EXIT_CONN);
	}
	if (aq->retry_until == 0)
		aq->retry_until = now_ms() + RECONNECT_WINDOW_MS;
	if (now_ms() >= aq->retry_until)
	{
		msg("lost the connection while taking %s: %s", st->lease_name, last_error);
		exit(EXIT_CONN);
	}
	msg("lost the connection while taking %s (%s); retrying", st->lease_name, last_error);
	back_off(st, aq);
}

/*
 * Reads the answer to a call sent at sent and answered at recv: the token
 * (lease_token set, lease_end from the send time), or an exit: an error,
 * the name busy (--no-wait), the timeout passed.
 */
static void
read_grant(RunState *st, const Acquire *aq, PGresult *res, ms_t sent, ms_t recv)
{
	char		b[32];

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
		if (aq->nowait)
		{
			report_holder(st->lease_name, now_ms() + RELEASE_WINDOW_MS);
			exit(EXIT_BUSY);
		}
		msg("timed out after %s waiting for %s", fmt_ms(recv - aq->start, b, sizeof(b)),
			st->lease_name);
		exit(EXIT_TIMEOUT);
	}
	snprintf(st->lease_token, sizeof(st->lease_token), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	st->lease_end = sent + st->ttl_ms;
	vmsg("took %s as %s, token %s, after %s", st->lease_name, st->lease_owner, st->lease_token,
		 fmt_ms(recv - aq->start, b, sizeof(b)));
}

/*
 * The grant came after a wait (or a slow round trip): when exactly is
 * unknown, so renew now to know how long the lease lasts.  Exits if the
 * lease is gone or the renewal fails (releasing it then).
 */
static void
confirm_grant(RunState *st)
{
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

/* Sends dlock_enqueue, with QUEUE_HOLD_MS; *sent: when it was sent. */
static QStatus
send_enqueue(RunState *st, const Acquire *aq, PGresult **res, ms_t *sent)
{
	const char *vals[6];
	char		hold_text[64];

	require_version(1, 2, "--queue");
	interval_text(QUEUE_HOLD_MS, hold_text, sizeof(hold_text));
	vals[0] = st->lease_name;
	vals[1] = aq->ttl_text;
	vals[2] = st->lease_owner;
	vals[3] = st->lease_mode;
	vals[4] = st->lease_permits;
	vals[5] = hold_text;
	note_backend(st, PQbackendPID(conn));
	*sent = now_ms();
	/* a short call: the deadline only guards a hung server */
	return run_query(queries[SQL_ENQUEUE], 6, vals, *sent + RECONNECT_WINDOW_MS, res);
}

/*
 * --timeout passed while queued: the request leaves the queue and dlock
 * exits, unless it was granted first: then that lease is kept, and renewed
 * at once (its grant's time is unknown).
 */
static void
queue_timed_out(RunState *st, const Acquire *aq)
{
	char		b[32];

	if (leave_queue(st, false, true))
	{
		confirm_grant(st);
		return;
	}
	msg("timed out after %s waiting in the queue for %s",
		fmt_ms(now_ms() - aq->start, b, sizeof(b)), st->lease_name);
	close_conn();
	exit(EXIT_TIMEOUT);
}

/*
 * --queue: takes the lease by asking dlock_enqueue every poll interval
 * until it returns a token; between calls no call of ours is open on the
 * server, so a transaction-pooling PgBouncer holds no server connection for
 * us.  Each call keeps the request's place and restarts its hold; a grant
 * made meanwhile runs its TTL from then, so the interval is at most a tenth
 * of the TTL.  A lost connection is retried within RECONNECT_WINDOW_MS,
 * inside the hold.
 */
static void
queue_for_lease(RunState *st, Acquire *aq)
{
	ms_t		poll = min_ms(QUEUE_POLL_MS, st->ttl_ms / 10);

	for (;;)
	{
		PGresult   *res;
		QStatus		qs;
		ms_t		sent;
		ms_t		recv;
		ms_t		next;

		if (st->got_signal)
			exit_interrupted(st);
		if (aq->timeout_ms >= 0 && now_ms() - aq->start >= aq->timeout_ms)
		{
			queue_timed_out(st, aq);
			return;
		}
		if (!connect_for_acquire(st, aq))
			continue;
		qs = send_enqueue(st, aq, &res, &sent);
		recv = now_ms();
		if (qs == Q_ABANDONED)
			exit_interrupted(st);
		if (qs != Q_OK)
		{
			retry_after_loss(st, aq);
			continue;
		}
		aq->retry_until = 0;
		aq->backoff = BACKOFF_MIN_MS;
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
			PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			next = now_ms() + poll;
			if (aq->timeout_ms >= 0)
				next = min_ms(next, aq->start + aq->timeout_ms);
			backoff_until(st, next);
			continue;
		}
		read_grant(st, aq, res, sent, recv);
		if (recv - sent > st->ttl_ms / 10)
			confirm_grant(st);
		return;
	}
}

/*
 * Takes the lease.  Returns only when it is held (lease_token, lease_end
 * set); exits otherwise.  A lost connection is retried for a while: taking
 * a lease again with the same owner returns the same token.
 */
void
acquire_lease(RunState *st, bool nowait, ms_t timeout_ms)
{
	Acquire		aq = {
		.nowait = nowait,
		.timeout_ms = timeout_ms,
		.start = now_ms(),
		.retry_until = 0,
		.backoff = BACKOFF_MIN_MS,
	};

	interval_text(st->ttl_ms, aq.ttl_text, sizeof(aq.ttl_text));
	aq.min_hold_text[0] = '\0';
	if (st->at_least_ms > 0)
		interval_text(st->at_least_ms, aq.min_hold_text, sizeof(aq.min_hold_text));
	if (st->queue)
	{
		queue_for_lease(st, &aq);
		return;
	}
	for (;;)
	{
		PGresult   *res;
		QStatus		qs;
		ms_t		sent;
		ms_t		recv;

		if (st->got_signal)
			exit_interrupted(st);
		if (!connect_for_acquire(st, &aq))
			continue;
		qs = send_acquire(st, &aq, &res, &sent);
		recv = now_ms();
		if (qs == Q_ABANDONED)
			exit_interrupted(st);
		if (qs != Q_OK)
		{
			retry_after_loss(st, &aq);
			continue;
		}
		read_grant(st, &aq, res, sent, recv);
		if (recv - sent > st->ttl_ms / 10)
			confirm_grant(st);
		return;
	}
}
