/*
 * dlock_stress.c
 *		Randomized multi-process stress test and checker for dlock.
 *
 * Forks one process per client, each with its own libpq connection and its
 * own owner string "c<N>".  Every fourth client opens a second connection
 * presenting the same owner, and uses it only to renew, re-try and release
 * leases that the first connection took: one holder, two connections.
 *
 * Main names ("lock-<i>") guard a critical section that is a deliberately
 * non-atomic read-modify-write of stress_counter.n.  Mutual exclusion holds
 * iff, at the end, every name's n equals the sum of the increments the
 * clients made on it (a lost update means two holders at once).  The section
 * also raises a "busy" flag on entry and lowers it on exit, so an overlap is
 * seen directly, and it writes the fencing token under the condition that
 * the recorded token is lower (first write of a hold) or equal (later
 * writes): a failure means a token went backwards relative to the previous
 * holder.
 *
 * Expiry names ("exp-<j>") are taken with a 20-100 ms ttl and never
 * released, to exercise expiry and takeover.  For them only token order is
 * checked: the grant and an atomic "last_token <= mine" update run in one
 * statement; a refusal counts as a violation only when the client can prove
 * from its own clock that its lease was still live when the row was written
 * (otherwise a later holder may legitimately have written first).
 *
 * Every client also checks that every new grant it receives carries a token
 * above every token it received before (tokens come from one sequence), and
 * a bitmap shared by all clients catches a token granted twice.
 *
 * Chaos: some unlimited waits are ended by a short statement_timeout (the
 * caller must then hold nothing), and some sessions hang up while queued
 * (their backend must leave the queue).
 *
 * At the end the checker compares the counters, and requires an empty
 * dlock_waiters, no lease left by a client once the leaked ones have run
 * out, and a fresh grant on every name with a token above all tokens seen.
 *
 * Reader/writer names ("rw-<i>") are taken shared or exclusive, semaphore
 * names ("sem-<k>") with a fixed number of permits, and multi-locks take
 * 2-3 rw-* and lock-* names at once with dlock_try_all / dlock_acquire_all.
 * Their leases may be short and leaked, so they can end in the middle of a
 * critical section.  The section is therefore a series of steps, each one
 * transaction that starts with dlock_fence() on every lease it relies on:
 * the fence pins the lease until COMMIT, so within the step the lease is
 * certainly live, whatever its ttl.  Inside the step a client:
 *   - enters a board in shared memory that counts who is inside per name;
 *     an entrant that finds a writer (or, as a writer, anyone) or all permits
 *     taken has seen two incompatible live leases at one instant;
 *   - records its interval on the client's monotonic clock in stress_span,
 *     which the checker sweeps at the end for the same two invariants;
 *   - as a writer, increments stress_rw.n non-atomically and records its
 *     token (lost updates = two writers), and as a reader, checks that n and
 *     the recorded token stay the same for its whole hold and that the token
 *     is below its own (a change means a writer wrote while it held).
 * A fence refused because a short lease ran out ends the section; that is a
 * violation only when the client's clock proves the lease was still live.
 *
 * --unsafe skips the lock around the critical section, and --unsafe-tokens
 * writes the previous grant's token instead of the current one;
 * --unsafe-modes lets writers and semaphore holders skip the lock.  All
 * three exist to show that the checker does fail.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "loadlib.h"

#define MAX_NAMES		1024
#define MAX_MODE_NAMES	256		/* rw-* names, and sem-* names */
#define MAX_CLIENTS		256
#define SLACK_US		2000	/* clock rounding allowance for timing proofs */
#define MAX_REPORTS		5		/* detailed messages printed per client */
#define MAX_ALL_REPORTS	40		/* ... and by all clients together */

/* ---------- options ---------- */

/* -d, -c, -t, -s and -n (how many lock-* names) */
static LoadOptions opts = {.conninfo = "", .clients = 16, .seconds = 15, .seed = 1, .names = 8};
static int	nexp = -1;			/* default: max(2, names / 2) */
static int	exp_pct = 15;		/* percent of operations on exp-* names */
static bool unsafe = false;
static bool unsafe_tokens = false;
static bool unsafe_modes = false;
static int	nrw = -1;			/* rw-* names; default max(2, names / 2) */
static int	nsem = 1;			/* sem-* names */
static int	permits = 3;		/* of every sem-* name */
static int	rw_pct = 25;		/* percent of operations on rw-* names */
static int	sem_pct = 12;		/* ... on sem-* names */
static int	multi_pct = 8;		/* ... that are multi-locks */
static bool verbose = false;
static bool chaos = true;		/* cancelled and abandoned waits */

/* ---------- shared results ---------- */

typedef struct Stats
{
	/* operations */
	long		ops;			/* dlock_* calls */
	long		grants;			/* new grants (main + exp) */
	long		main_grants;
	long		exp_grants;
	long		tries;
	long		try_fail;
	long		acquires;
	long		acq_nolimit;
	long		acq_timeouts;
	long		renews;
	long		releases;
	long		conn2_ops;		/* calls made through the second connection */
	long		retries;		/* idempotent re-tries by the holder */
	long		probes;			/* intruder / wrong-token probes */
	long		sections;
	long		increments;
	long		exp_inconclusive;
	long		exp_skips;		/* left our own live exp lease alone */
	long		cancels;		/* acquires ended by statement_timeout */
	long		cancel_grants;	/* ... that were granted before the cancel */
	long		disconnects;	/* sessions closed while waiting */

	/* rw-*, sem-* and multi-locks */
	long		rw_shared_grants;
	long		rw_excl_grants;
	long		sem_grants;
	long		mode_refused;	/* try NULL or acquire timeout on rw-* */
	long		sem_refused;	/* ... on sem-* */
	long		mode_extends;	/* re-take of our own leaked lease */
	long		mode_skips;		/* left our own live leaked lease alone */
	long		leaks;			/* holds with a short ttl, never released */
	long		steps;			/* fenced steps of critical sections */
	long		mode_expired;	/* fence refused after a short ttl: expected */
	long		rw_increments;
	long		reader_reads;
	long		multi_calls;
	long		multi_shared;
	long		multi_granted;
	long		multi_names;	/* names granted by multi-locks */
	long		multi_refused;	/* dlock_try_all NULL */
	long		multi_acquires; /* dlock_acquire_all calls */
	long		multi_timeouts;
	double		max_multi_wait_ms;	/* a granted dlock_acquire_all */
	int			max_readers;	/* most readers seen inside one rw-* name */
	int			max_sem;		/* most holders seen inside one sem-* name */

	/* violations */
	long		token_viol;
	long		overlaps;
	long		lease_lost;
	long		probe_fail;
	long		errors;
	long		dup_tokens;
	long		unchecked_tokens;	/* beyond the bitmap */
	long		mode_overlaps;	/* a writer inside with anyone else */
	long		permit_over;	/* more holders inside than permits */
	long		reader_viol;	/* a reader saw a write during its hold */

	double		max_try_ms;
	double		max_overshoot_ms;	/* acquire that timed out: elapsed - timeout */
	double		max_section_ms;
	int64_t		max_token;
	int			finished;
	int64_t		incr[MAX_NAMES];
	int64_t		rw_incr[MAX_MODE_NAMES];
} Stats;

static Stats *results;
static int *all_reports;		/* shared count of printed messages */

/*
 * Who is inside the critical section of each rw-* and sem-* name, counted
 * by all clients.  Entering is one atomic add that returns the state just
 * before, so an entrant sees everyone who is inside at that instant.
 */
#define WRITER			(UINT64_C(1) << 32)
typedef struct Board
{
	int			reports;		/* printed messages */
	uint64_t	rw[MAX_MODE_NAMES]; /* writers * WRITER + readers */
	uint32_t	sem[MAX_MODE_NAMES];
} Board;

static Board *board;

/*
 * One bit per token above the baseline token taken before the start: a
 * token granted twice (to two clients, or twice to one) sets a bit twice.
 */
#define TOKEN_BITS		(UINT64_C(1) << 26)
static uint64_t *token_seen;
static int64_t baseline_token;

/* ---------- per-client state ---------- */

typedef struct ExpState
{
	int64_t		token;			/* last token we got on this name, 0 = none */
	int64_t		lo_expiry;		/* lease certainly live until (our clock) */
	int64_t		hi_expiry;		/* lease certainly dead after */
} ExpState;

typedef struct Hold
{
	const char *name;
	int64_t		token;
	int			ttl_ms;
	int64_t		lo_expiry;		/* certainly live until */
	int64_t		granted;
} Hold;

/*
 * A lease on an rw-* or sem-* name.  A leaked one stays here after its hold
 * (token != 0) until it ends, since re-taking it extends it.
 */
typedef struct ModeHold
{
	Hold		h;				/* h.name points to nbuf; h.token 0: none, or
								 * not locked (--unsafe-modes) */
	char		nbuf[32];
	bool		sem;			/* a sem-* name, else rw-* */
	int			idx;			/* among the rw-* or the sem-* names */
	bool		excl;			/* rw-*: writer, else reader */
	bool		leak;			/* short ttl, never released */
	int64_t		hi_expiry;		/* certainly ended after (our clock) */
	bool		read;			/* reader: n0 and lt0 are what the hold saw */
	int64_t		n0;
	int64_t		lt0;
	bool		wrote;			/* writer: its token is recorded */
	int64_t		n_read;			/* writer: n read in the open step */
	bool		incr;			/* writer: the open step's write counted */
} ModeHold;

typedef struct Client
{
	int			id;
	char		owner[32];
	char		intruder[32];
	PGconn	   *conn;
	PGconn	   *conn2;			/* same owner, or NULL */
	uint64_t	rng;
	Stats	   *st;
	bool		fatal;
	int			reports;
	int64_t		prev_grant;		/* for --unsafe-tokens */
	int64_t		fake_busy;
	ExpState	exp[MAX_NAMES];
	ModeHold	rw[MAX_MODE_NAMES];
	ModeHold	sem[MAX_MODE_NAMES];
} Client;

/* the client's next random number in [0, n) */
static int
rnd_int(Client *c, int n)
{
	return load_splitmix_int(&c->rng, n);
}

/* Counts a violation (or error) and prints the first few of each client. */
static void
vreport(Client *c, long *counter, const char *fmt, va_list ap)
{
	char		msg[1024];
	size_t		len;

	(*counter)++;
	if (c->reports++ >= MAX_REPORTS ||
		__atomic_fetch_add(all_reports, 1, __ATOMIC_SEQ_CST) >= MAX_ALL_REPORTS)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	len = strlen(msg);
	while (len > 0 && msg[len - 1] == '\n')
		msg[--len] = '\0';
	fprintf(stderr, "c%d: %s: %s\n", c->id,
			counter == &c->st->errors ? "ERROR" : "VIOLATION", msg);
}

static void
report(Client *c, long *counter, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vreport(c, counter, fmt, ap);
	va_end(ap);
}

/* ---------- libpq helpers ---------- */

typedef struct Stmt
{
	const char *name;
	const char *sql;
} Stmt;

/* the grant "call" on an exp-* name and its record, then "more" columns */
#define EXP_GRANT(call, more) \
	"WITH g AS (SELECT " call " AS t), " \
	"r AS (UPDATE stress_exp e SET prev_token = e.last_token, last_token = g.t, " \
	"grants = e.grants + 1 FROM g " \
	"WHERE e.name = $1 AND g.t IS NOT NULL AND e.last_token <= g.t " \
	"RETURNING e.prev_token) " \
	"SELECT (SELECT t FROM g), (SELECT count(*) FROM r), (SELECT max(prev_token) FROM r)" more

static const Stmt stmts[] = {
	{"try", "SELECT dlock_try($1, $2::interval, $3)"},
	{"acq", "SELECT dlock_acquire($1, $2::interval, $3::interval, $4)"},
	{"renew", "SELECT dlock_renew($1, $2::interval, $3)"},
	{"rel", "SELECT dlock_release($1, $2, $3::bigint)"},
	{"enter", "UPDATE stress_counter SET busy = $2 WHERE name = $1 AND busy = 0"},
	{"leave", "UPDATE stress_counter SET busy = 0 WHERE name = $1 AND busy = $2"},
	{"read", "SELECT n FROM stress_counter WHERE name = $1"},
	{"write_first", "UPDATE stress_counter SET n = $2, last_token = $3 "
	"WHERE name = $1 AND last_token < $3"},
	{"write_next", "UPDATE stress_counter SET n = $2 "
	"WHERE name = $1 AND last_token = $3"},
	{"write_unsafe", "UPDATE stress_counter SET n = $2 WHERE name = $1 AND $3::bigint IS NOT NULL"},
	/* rw-* and sem-* names: $5 is the permits, NULL for rw-* */
	{"m_try", "SELECT dlock_try($1, $2::interval, $3, $4, $5::integer)"},
	{"m_acq", "SELECT dlock_acquire($1, $2::interval, $3::interval, $4, $5, $6::integer)"},
	{"try_all", "SELECT dlock_try_all($1::text[], $2::interval, $3, $4)"},
	{"acq_all", "SELECT dlock_acquire_all($1::text[], $2::interval, $3::interval, $4, $5)"},
	{"rel_all", "SELECT dlock_release_all($1::text[], $2)"},
	{"fence", "SELECT dlock_fence($1, $2::bigint)"},
	{"rw_read", "SELECT n, last_token FROM stress_rw WHERE name = $1"},
	{"rw_write_first", "UPDATE stress_rw SET n = $2, last_token = $3 "
	"WHERE name = $1 AND last_token < $3"},
	{"rw_write_next", "UPDATE stress_rw SET n = $2 WHERE name = $1 AND last_token = $3"},
	{"rw_write_unsafe", "UPDATE stress_rw SET n = $2 WHERE name = $1 AND $3::bigint IS NOT NULL"},
	{"span", "INSERT INTO stress_span VALUES ($1, $2, $3, $4, $5)"},
	/* grant + record in one statement: $1 name, $2 ttl, $3 timeout, $4 owner */
	{"exp_try", EXP_GRANT("dlock_try($1, $2::interval, $4)", ", $3::text")},
	{"exp_acq", EXP_GRANT("dlock_acquire($1, $2::interval, $3::interval, $4)", "")},
};

static PGconn *
connect_db(const char *appname, bool die_on_error)
{
	PGconn	   *conn = load_connect(opts.conninfo, NULL, NULL, appname);
	PGresult   *res;

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "%s: connection failed: %s", appname, PQerrorMessage(conn));
		if (die_on_error)
			exit(2);
		PQfinish(conn);
		return NULL;
	}
	/* A hung dlock call ends in an error instead of hanging the test. */
	res = PQexec(conn, "SET statement_timeout = '10s'");
	PQclear(res);
	return conn;
}

static bool
prepare_all(Client *c, PGconn *conn)
{
	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++)
	{
		PGresult   *res = PQprepare(conn, stmts[i].name, stmts[i].sql, 0, NULL);

		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			report(c, &c->st->errors, "prepare %s: %s", stmts[i].name,
				   PQerrorMessage(conn));
			PQclear(res);
			return false;
		}
		PQclear(res);
	}
	return true;
}

/*
 * Runs a prepared statement.  On error: reports, marks the client fatal and
 * returns NULL.
 */
static PGresult *
run(Client *c, PGconn *conn, const char *stmt, int nparams, const char *const *params)
{
	PGresult   *res = PQexecPrepared(conn, stmt, nparams, params, NULL, NULL, 0);
	ExecStatusType s = PQresultStatus(res);

	if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK)
	{
		report(c, &c->st->errors, "%s failed: %s", stmt, PQerrorMessage(conn));
		PQclear(res);
		c->fatal = true;
		return NULL;
	}
	return res;
}

/* Runs a one-value query; returns false on error, sets *isnull / *val. */
static bool
run_int(Client *c, PGconn *conn, const char *stmt, int nparams,
		const char *const *params, bool *isnull, int64_t *val)
{
	PGresult   *res = run(c, conn, stmt, nparams, params);

	if (res == NULL)
		return false;
	*isnull = PQgetisnull(res, 0, 0);
	*val = 0;
	if (!*isnull)
	{
		const char *v = PQgetvalue(res, 0, 0);

		if (strcmp(v, "t") == 0)
			*val = 1;
		else if (strcmp(v, "f") == 0)
			*val = 0;
		else
			*val = strtoll(v, NULL, 10);
	}
	PQclear(res);
	return true;
}

/* Runs a command; returns affected rows or -1. */
static int
run_cmd(Client *c, PGconn *conn, const char *stmt, int nparams, const char *const *params)
{
	PGresult   *res = run(c, conn, stmt, nparams, params);
	int			n;

	if (res == NULL)
		return -1;
	n = atoi(PQcmdTuples(res));
	PQclear(res);
	return n;
}

/*
 * Runs a prepared statement that waits without limit under a 1-30 ms
 * statement_timeout, then restores the usual timeout.  Returns the result,
 * success or error, or NULL (client fatal) when the timeout cannot be
 * restored.
 */
static PGresult *
run_cancelled(Client *c, const char *stmt, int nparams, const char *const *params)
{
	char		sql[64];
	PGresult   *res;

	snprintf(sql, sizeof(sql), "SET statement_timeout = '%d ms'", 1 + rnd_int(c, 30));
	PQclear(PQexec(c->conn, sql));
	res = PQexecPrepared(c->conn, stmt, nparams, params, NULL, NULL, 0);

	/*
	 * The SET itself runs under the short timeout and can be cancelled on a
	 * loaded machine: retry until it sticks.
	 */
	for (int k = 0;; k++)
	{
		PGresult   *r2 = PQexec(c->conn, "SET statement_timeout = '10s'");
		bool		ok = PQresultStatus(r2) == PGRES_COMMAND_OK;

		PQclear(r2);
		if (ok)
			return res;
		if (k == 100)
		{
			report(c, &c->st->errors, "cannot restore statement_timeout: %s",
				   PQerrorMessage(c->conn));
			c->fatal = true;
			PQclear(res);
			return NULL;
		}
	}
}

/* A probe that must fail with SQLSTATE state. */
static void
expect_state(Client *c, PGconn *conn, const char *stmt, int nparams,
			 const char *const *params, const char *state, const char *what)
{
	PGresult   *res = PQexecPrepared(conn, stmt, nparams, params, NULL, NULL, 0);

	c->st->ops++;
	c->st->probes++;
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		report(c, &c->st->probe_fail, "%s on %s returned %s instead of failing with SQLSTATE %s",
			   what, params[0], PQgetisnull(res, 0, 0) ? "NULL" : PQgetvalue(res, 0, 0), state);
	else if (!load_is_state(res, state))
		report(c, &c->st->probe_fail, "%s on %s did not fail with SQLSTATE %s: %s",
			   what, params[0], state, PQerrorMessage(conn));
	PQclear(res);
}

/* Runs a command without parameters, such as BEGIN; false on error. */
static bool
run_simple(Client *c, const char *sql)
{
	PGresult   *res = PQexec(c->conn, sql);
	bool		ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	if (!ok)
	{
		report(c, &c->st->errors, "%s failed: %s", sql, PQerrorMessage(c->conn));
		c->fatal = true;
	}
	PQclear(res);
	return ok;
}

/* ---------- checks shared by both kinds of name ---------- */

/*
 * After a wait that was cancelled, refused or timed out we must not hold
 * name: renewing it must fail.  If it does not, reports fmt and releases
 * the lease.  False if a call failed.
 */
static bool
holds_not(Client *c, const char *name, const char *fmt,...)
{
	const char *p[3] = {name, "1 s", c->owner};
	bool		isnull;
	int64_t		v;

	if (!run_int(c, c->conn, "renew", 3, p, &isnull, &v))
		return false;
	c->st->ops++;
	c->st->renews++;
	if (!isnull)
	{
		va_list		ap;

		va_start(ap, fmt);
		vreport(c, &c->st->lease_lost, fmt, ap);
		va_end(ap);
		p[1] = c->owner;
		p[2] = NULL;
		(void) run_int(c, c->conn, "rel", 3, p, &isnull, &v);
	}
	return true;
}

static void
check_new_token(Client *c, const char *name, int64_t token)
{
	if (token <= c->st->max_token)
		report(c, &c->st->token_viol,
			   "new grant on %s has token %" PRId64 ", not above %" PRId64
			   " received earlier by this client", name, token, c->st->max_token);
	if (token > c->st->max_token)
		c->st->max_token = token;

	if (token <= baseline_token)
		report(c, &c->st->token_viol,
			   "new grant on %s has token %" PRId64 ", not above %" PRId64
			   " issued before the run started", name, token, baseline_token);
	else if ((uint64_t) (token - baseline_token) >= TOKEN_BITS)
		c->st->unchecked_tokens++;
	else
	{
		uint64_t	bit = (uint64_t) (token - baseline_token);
		uint64_t	mask = UINT64_C(1) << (bit % 64);

		if (__atomic_fetch_or(&token_seen[bit / 64], mask, __ATOMIC_SEQ_CST) & mask)
			report(c, &c->st->dup_tokens,
				   "token %" PRId64 " (new grant on %s) was already granted to another grant",
				   token, name);
	}
}

/* ---------- exp-* names: short leases, never released ---------- */

static bool
exp_op(Client *c)
{
	int			j = rnd_int(c, nexp);
	int			ttl_ms = 20 + rnd_int(c, 81);
	bool		use_acq = rnd_int(c, 2) == 0;
	int			timeout_ms = rnd_int(c, 201);
	char		name[32],
				ttl[32],
				tmo[32];
	const char *params[4];
	ExpState   *s = &c->exp[j];
	int64_t		t0,
				t1,
				ttl_us = (int64_t) ttl_ms * 1000;
	int64_t		token,
				updated,
				old_last = 0;
	PGresult   *res;
	bool		held_certain,
				maybe_live,
				is_new;
	double		ms;

	/*
	 * Re-trying our own live lease extends it; done every time, one client
	 * would keep a name forever and nothing would expire.  Mostly leave it.
	 */
	if (s->token != 0 && load_now_us() < s->hi_expiry + SLACK_US && rnd_int(c, 8) != 0)
	{
		c->st->exp_skips++;
		return false;
	}

	snprintf(name, sizeof(name), "exp-%d", j);
	snprintf(ttl, sizeof(ttl), "%d ms", ttl_ms);
	snprintf(tmo, sizeof(tmo), "%d ms", timeout_ms);
	params[0] = name;
	params[1] = ttl;
	params[2] = tmo;
	params[3] = c->owner;

	t0 = load_now_us();
	res = run(c, c->conn, use_acq ? "exp_acq" : "exp_try", 4, params);
	t1 = load_now_us();
	if (res == NULL)
		return true;
	c->st->ops++;
	ms = (t1 - t0) / 1000.0;
	if (use_acq)
		c->st->acquires++;
	else
	{
		c->st->tries++;
		if (ms > c->st->max_try_ms)
			c->st->max_try_ms = ms;
	}

	/* our previous lease on this name, judged by our own clock */
	held_certain = s->token != 0 && t1 + SLACK_US < s->lo_expiry;
	maybe_live = s->token != 0 && t0 < s->hi_expiry + SLACK_US;

	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		if (use_acq)
		{
			c->st->acq_timeouts++;
			if (ms - timeout_ms > c->st->max_overshoot_ms)
				c->st->max_overshoot_ms = ms - timeout_ms;
		}
		else
			c->st->try_fail++;
		if (held_certain)
			report(c, &c->st->lease_lost,
				   "%s on %s returned NULL while our lease (token %" PRId64
				   ") was live for %.1f ms more", use_acq ? "acquire" : "try",
				   name, s->token, (s->lo_expiry - t1) / 1000.0);
		return true;
	}
	token = load_int64(res, 0, 0);
	updated = load_int64(res, 0, 1);
	if (!PQgetisnull(res, 0, 2))
		old_last = load_int64(res, 0, 2);
	PQclear(res);

	is_new = token != s->token;
	if (!is_new)
	{
		c->st->retries++;
		if (!maybe_live)
			report(c, &c->st->token_viol,
				   "%s returned token %" PRId64 " again although our lease expired %.1f ms before the call",
				   name, token, (t0 - s->hi_expiry) / 1000.0);
		if (s->hi_expiry < t1 + ttl_us)
			s->hi_expiry = t1 + ttl_us;
	}
	else
	{
		c->st->grants++;
		c->st->exp_grants++;
		check_new_token(c, name, token);
		if (held_certain)
			report(c, &c->st->lease_lost,
				   "%s: new token %" PRId64 " while our lease (token %" PRId64
				   ") was live for %.1f ms more", name, token, s->token,
				   (s->lo_expiry - t1) / 1000.0);
		s->hi_expiry = t1 + ttl_us;
	}
	s->token = token;
	s->lo_expiry = t0 + ttl_us;

	if (updated == 0)
	{
		/*
		 * A larger token was recorded first.  Legitimate only if our lease
		 * had already expired when the row was written; the write happened
		 * before t1 and our lease lasted at least until t0 + ttl.
		 */
		if (t1 + SLACK_US < t0 + ttl_us)
			report(c, &c->st->token_viol,
				   "%s: token %" PRId64 " is not above the token recorded by an earlier holder",
				   name, token);
		else
			c->st->exp_inconclusive++;
	}
	else if (is_new && old_last == token)
		report(c, &c->st->token_viol,
			   "%s: new grant has token %" PRId64 ", which an earlier holder already recorded",
			   name, token);
	return true;
}

/* ---------- main names: the critical section ---------- */

/* Which connection acts for the holder: sometimes the second one. */
static PGconn *
holder_conn(Client *c, bool *second)
{
	*second = c->conn2 != NULL && rnd_int(c, 2) == 0;
	if (*second)
		c->st->conn2_ops++;
	return *second ? c->conn2 : c->conn;
}

static void
lease_lost(Client *c, Hold *h, const char *what, int64_t t0)
{
	if (t0 + SLACK_US < h->lo_expiry)
		report(c, &c->st->lease_lost,
			   "%s on %s (token %" PRId64 ") failed %.1f ms after the grant, "
			   "with the lease certainly live for %.1f ms more: ENGINE BUG",
			   what, h->name, h->token, (t0 - h->granted) / 1000.0,
			   (h->lo_expiry - t0) / 1000.0);
	else
		report(c, &c->st->lease_lost,
			   "%s on %s (token %" PRId64 ") failed %.1f ms after the grant; "
			   "the ttl was %d ms, so the client stalled past its lease",
			   what, h->name, h->token, (t0 - h->granted) / 1000.0, h->ttl_ms);
}

/*
 * The holder takes its own lease again (statement stmt, parameters p),
 * through either of its connections: it must get the same token, and its
 * lease then lasts from the call's start.
 */
static void
holder_retry(Client *c, Hold *h, const char *stmt, int nparams, const char *const *p)
{
	bool		second,
				isnull;
	PGconn	   *conn = holder_conn(c, &second);
	int64_t		v,
				t0 = load_now_us();

	if (!run_int(c, conn, stmt, nparams, p, &isnull, &v))
		return;
	c->st->ops++;
	c->st->tries++;
	c->st->retries++;
	if (isnull)
	{
		c->st->try_fail++;
		lease_lost(c, h, second ? "holder re-try (2nd connection)" : "holder re-try", t0);
	}
	else if (v != h->token)
		report(c, &c->st->token_viol,
			   "holder re-try on %s%s returned token %" PRId64 ", not %" PRId64,
			   h->name, second ? " (2nd connection)" : "", v, h->token);
	else
		h->lo_expiry = t0 + (int64_t) h->ttl_ms * 1000;
}

/* Our release with a wrong token must fail; false if the call did. */
static bool
wrong_token_release(Client *c, Hold *h)
{
	char		tok[32];
	const char *p[3] = {h->name, c->owner,
	load_i64(tok, rnd_int(c, 2) ? h->token + 1 : h->token - 1)};
	bool		isnull;
	int64_t		v;

	if (!run_int(c, c->conn, "rel", 3, p, &isnull, &v))
		return false;
	if (isnull || v)
		report(c, &c->st->probe_fail,
			   "release of %s with wrong token %s succeeded (held token %" PRId64 ")",
			   h->name, tok, h->token);
	return true;
}

/* Probes made while holding: all must be refused, or be idempotent. */
static void
probe(Client *c, Hold *h)
{
	char		ttl[32];
	const char *p[3];
	bool		isnull;
	int64_t		v;

	snprintf(ttl, sizeof(ttl), "%d ms", h->ttl_ms);
	switch (rnd_int(c, 6))
	{
		case 0:					/* another owner's try */
			p[0] = h->name;
			p[1] = "1 s";
			p[2] = c->intruder;
			if (!run_int(c, c->conn, "try", 3, p, &isnull, &v))
				return;
			if (!isnull)
				report(c, &c->st->probe_fail,
					   "intruder %s got %s (token %" PRId64 ") held by %s (token %" PRId64 ")",
					   c->intruder, h->name, v, c->owner, h->token);
			break;
		case 1:					/* another owner's renew */
			p[0] = h->name;
			p[1] = "1 s";
			p[2] = c->intruder;
			if (!run_int(c, c->conn, "renew", 3, p, &isnull, &v))
				return;
			if (!isnull)
				report(c, &c->st->probe_fail, "intruder %s renewed %s held by %s",
					   c->intruder, h->name, c->owner);
			break;
		case 2:					/* another owner's release */
			p[0] = h->name;
			p[1] = c->intruder;
			p[2] = NULL;
			if (!run_int(c, c->conn, "rel", 3, p, &isnull, &v))
				return;
			if (isnull || v)
				report(c, &c->st->probe_fail, "intruder %s released %s held by %s",
					   c->intruder, h->name, c->owner);
			break;
		case 3:					/* our release with a wrong token */
			if (!wrong_token_release(c, h))
				return;
			break;
		default:				/* re-try by the holder, maybe via conn2 */
			p[0] = h->name;
			p[1] = ttl;
			p[2] = c->owner;
			holder_retry(c, h, "try", 3, p);
			return;
	}
	c->st->ops++;
	c->st->probes++;
}

static void
renew(Client *c, Hold *h)
{
	char		ttl[32];
	const char *p[3];
	bool		isnull,
				second;
	int64_t		v,
				t0;
	PGconn	   *conn = holder_conn(c, &second);

	h->ttl_ms = 3000 + rnd_int(c, 5001);
	snprintf(ttl, sizeof(ttl), "%d ms", h->ttl_ms);
	p[0] = h->name;
	p[1] = ttl;
	p[2] = c->owner;
	t0 = load_now_us();
	if (!run_int(c, conn, "renew", 3, p, &isnull, &v))
		return;
	c->st->ops++;
	c->st->renews++;
	if (isnull)
		lease_lost(c, h, second ? "renew (2nd connection)" : "renew", t0);
	else
		h->lo_expiry = t0 + (int64_t) h->ttl_ms * 1000;
}

static void
critical_section(Client *c, int i, Hold *h)
{
	char		nbuf[32],
				tbuf[32],
				busy[32];
	const char *p[3];
	int64_t		t0 = load_now_us(),
				n,
				write_token;
	bool		isnull,
				entered;
	int			k = 1 + rnd_int(c, 3);
	int			rows;

	c->st->sections++;
	if (unsafe)
		load_i64(busy, ++c->fake_busy);
	else
		load_i64(busy, h->token);
	write_token = unsafe_tokens ? c->prev_grant : h->token;

	p[0] = h->name;
	p[1] = busy;
	rows = run_cmd(c, c->conn, "enter", 2, p);
	if (rows < 0)
		return;
	entered = rows == 1;
	if (!entered)
		report(c, &c->st->overlaps, "%s is busy on entry: another holder is inside (our token %" PRId64 "%s)",
			   h->name, h->token, unsafe ? ", --unsafe" : "");

	for (int step = 0; step < k && !c->fatal; step++)
	{
		if (!unsafe && rnd_int(c, 8) == 0)
			renew(c, h);
		if (!unsafe && rnd_int(c, 5) == 0)
			probe(c, h);

		p[0] = h->name;
		if (!run_int(c, c->conn, "read", 1, p, &isnull, &n))
			return;
		/* widen the read-to-write window now and then */
		if (rnd_int(c, 3) == 0)
			usleep(rnd_int(c, 1000));
		p[1] = load_i64(nbuf, n + 1);
		p[2] = load_i64(tbuf, write_token);
		rows = run_cmd(c, c->conn,
					   unsafe ? "write_unsafe" : step == 0 ? "write_first" : "write_next",
					   3, p);
		if (rows < 0)
			return;
		if (rows == 1)
		{
			c->st->increments++;
			c->st->incr[i]++;
		}
		else
			report(c, &c->st->token_viol,
				   "%s: write with token %" PRId64 " refused: an earlier holder recorded a %s token",
				   h->name, write_token, step == 0 ? "higher or equal" : "different");
	}

	if (entered)
	{
		p[0] = h->name;
		p[1] = busy;
		rows = run_cmd(c, c->conn, "leave", 2, p);
		if (rows == 0)
			report(c, &c->st->overlaps, "%s: busy flag changed by someone else while we held it",
				   h->name);
	}
	{
		double		ms = (load_now_us() - t0) / 1000.0;

		if (ms > c->st->max_section_ms)
			c->st->max_section_ms = ms;
	}
}

static void
main_op(Client *c)
{
	int			i = rnd_int(c, opts.names);
	int			mode = rnd_int(c, 100);
	int			timeout_ms = rnd_int(c, 201);
	bool		cancel = chaos && rnd_int(c, 50) == 0;
	char		name[32],
				ttl[32],
				tmo[32],
				tok[32];
	const char *p[4];
	Hold		h;
	bool		isnull,
				second;
	int64_t		v,
				t0,
				t1;
	double		ms;
	PGconn	   *conn;

	snprintf(name, sizeof(name), "lock-%d", i);
	memset(&h, 0, sizeof(h));
	h.name = name;
	h.ttl_ms = 3000 + rnd_int(c, 5001);
	snprintf(ttl, sizeof(ttl), "%d ms", h.ttl_ms);
	snprintf(tmo, sizeof(tmo), "%d ms", timeout_ms);

	if (unsafe)
	{
		critical_section(c, i, &h);
		return;
	}

	p[0] = name;
	p[1] = ttl;
	t0 = load_now_us();
	if (cancel)
	{
		/*
		 * An unlimited wait ended by statement_timeout after 1-30 ms: either
		 * a grant or an error that leaves us holding nothing, even if the
		 * lease was handed to us just before the cancel.
		 */
		PGresult   *res;

		p[2] = NULL;
		p[3] = c->owner;
		res = run_cancelled(c, "acq", 4, p);
		if (res == NULL)
			return;
		c->st->ops++;
		c->st->acquires++;
		if (PQresultStatus(res) == PGRES_TUPLES_OK && !PQgetisnull(res, 0, 0))
		{
			v = load_int64(res, 0, 0);
			PQclear(res);
			c->st->cancel_grants++;
			t1 = load_now_us();
			goto granted;
		}
		if (PQresultStatus(res) == PGRES_TUPLES_OK || !load_is_state(res, "57014"))
		{
			report(c, &c->st->errors, "acquire of %s ended by statement_timeout: %s",
				   name, PQresultStatus(res) == PGRES_TUPLES_OK ? "returned NULL" : PQerrorMessage(c->conn));
			PQclear(res);
			c->fatal = true;
			return;
		}
		PQclear(res);
		c->st->cancels++;
		(void) holds_not(c, name,
						 "a cancelled acquire of %s left us holding it (renew succeeded): ENGINE BUG", name);
		return;
	}
	if (mode < 40)
	{
		p[2] = c->owner;
		if (!run_int(c, c->conn, "try", 3, p, &isnull, &v))
			return;
		c->st->tries++;
	}
	else
	{
		p[2] = mode < 95 ? tmo : NULL;
		p[3] = c->owner;
		if (!run_int(c, c->conn, "acq", 4, p, &isnull, &v))
			return;
		c->st->acquires++;
		if (mode >= 95)
			c->st->acq_nolimit++;
	}
	t1 = load_now_us();
	c->st->ops++;
	ms = (t1 - t0) / 1000.0;
	if (isnull)
	{
		if (mode < 40)
		{
			c->st->try_fail++;
			if (ms > c->st->max_try_ms)
				c->st->max_try_ms = ms;
		}
		else
		{
			c->st->acq_timeouts++;
			if (mode >= 95)
				report(c, &c->st->probe_fail, "acquire of %s without timeout returned NULL", name);
			if (ms - timeout_ms > c->st->max_overshoot_ms)
				c->st->max_overshoot_ms = ms - timeout_ms;
		}
		return;
	}
	if (mode < 40 && ms > c->st->max_try_ms)
		c->st->max_try_ms = ms;

granted:
	h.token = v;
	h.granted = t1;
	h.lo_expiry = t0 + (int64_t) h.ttl_ms * 1000;
	c->st->grants++;
	c->st->main_grants++;
	check_new_token(c, name, v);
	if (c->prev_grant == 0)
		c->prev_grant = v;

	critical_section(c, i, &h);
	c->prev_grant = h.token;
	if (c->fatal)
		return;

	/* release: usually with the token, sometimes without, maybe via conn2 */
	conn = holder_conn(c, &second);
	p[0] = name;
	p[1] = c->owner;
	p[2] = rnd_int(c, 10) == 0 ? NULL : load_i64(tok, h.token);
	t0 = load_now_us();
	if (!run_int(c, conn, "rel", 3, p, &isnull, &v))
		return;
	c->st->ops++;
	c->st->releases++;
	if (isnull || !v)
		lease_lost(c, &h, second ? "release (2nd connection)" : "release", t0);
	else if (rnd_int(c, 10) == 0)
	{
		/* a second release of the same lease must fail */
		p[2] = load_i64(tok, h.token);
		if (!run_int(c, c->conn, "rel", 3, p, &isnull, &v))
			return;
		c->st->ops++;
		c->st->probes++;
		if (isnull || v)
			report(c, &c->st->probe_fail, "second release of %s (token %" PRId64 ") succeeded",
				   name, h.token);
	}
}

/*
 * A session of owner "d<N>" queues for a lock-* name with a 100 ms ttl and
 * hangs up while waiting (or just after being granted).  Its backend must
 * leave the queue, and a lease granted meanwhile is only held until its ttl.
 */
static void
disconnect_op(Client *c)
{
	char		name[32],
				owner[32],
				app[64];
	const char *p[2];
	PGconn	   *dc;

	snprintf(name, sizeof(name), "lock-%d", rnd_int(c, opts.names));
	snprintf(owner, sizeof(owner), "d%d", c->id);
	snprintf(app, sizeof(app), "dlock_stress d%d", c->id);
	dc = connect_db(app, false);
	if (dc == NULL)
	{
		report(c, &c->st->errors, "connection for a disconnect test failed");
		c->fatal = true;
		return;
	}
	p[0] = name;
	p[1] = owner;
	if (!PQsendQueryParams(dc, "SELECT dlock_acquire($1, '100 ms', NULL, $2)", 2, NULL, p,
						   NULL, NULL, 0))
		report(c, &c->st->errors, "send: %s", PQerrorMessage(dc));
	usleep(rnd_int(c, 20000));
	PQfinish(dc);
	c->st->disconnects++;
}

/* ---------- rw-* and sem-* names, and multi-locks ---------- */

static void
mode_init(ModeHold *m, bool sem, int idx)
{
	m->h.name = m->nbuf;
	snprintf(m->nbuf, sizeof(m->nbuf), sem ? "sem-%d" : "rw-%d", idx);
	m->sem = sem;
	m->idx = idx;
}

/* Whether our leaked lease on the name may still be live at t. */
static bool
leak_maybe_live(const ModeHold *m, int64_t t)
{
	return m->h.token != 0 && t < m->hi_expiry + SLACK_US;
}

static void
board_enter(Client *c, ModeHold *m)
{
	const char *unsafe_note = m->h.token == 0 ? ", --unsafe-modes" : "";

	if (m->sem)
	{
		uint32_t	before = __atomic_fetch_add(&board->sem[m->idx], 1, __ATOMIC_SEQ_CST);

		if ((int) before + 1 > c->st->max_sem)
			c->st->max_sem = before + 1;
		if ((int) before >= permits)
			report(c, &c->st->permit_over,
				   "%s: %u holders inside when we entered (token %" PRId64 "%s): more than %d permits",
				   m->h.name, before, m->h.token, unsafe_note, permits);
	}
	else
	{
		uint64_t	before = __atomic_fetch_add(&board->rw[m->idx], m->excl ? WRITER : 1,
												__ATOMIC_SEQ_CST);
		unsigned	writers = (unsigned) (before / WRITER);
		unsigned	readers = (unsigned) (before % WRITER);

		if (!m->excl && (int) readers + 1 > c->st->max_readers)
			c->st->max_readers = readers + 1;
		if (writers > 0 || (m->excl && readers > 0))
			report(c, &c->st->mode_overlaps,
				   "%s: %u writer(s) and %u reader(s) inside when we entered as a %s (token %" PRId64 "%s)",
				   m->h.name, writers, readers, m->excl ? "writer" : "reader", m->h.token,
				   unsafe_note);
	}
}

static void
board_leave(ModeHold *m)
{
	if (m->sem)
		__atomic_fetch_sub(&board->sem[m->idx], 1, __ATOMIC_SEQ_CST);
	else
		__atomic_fetch_sub(&board->rw[m->idx], m->excl ? WRITER : 1, __ATOMIC_SEQ_CST);
}

/*
 * A reader's view of stress_rw.  Writes are fenced, so each is visible while
 * its writer's lease is still pinned.  Our lease has been live since its
 * grant: a writer granted after it (a larger token) must not have written,
 * and nobody may write between two of our reads.
 */
static void
reader_saw(Client *c, ModeHold *m, int64_t n, int64_t lt)
{
	c->st->reader_reads++;
	if (!m->read)
	{
		m->read = true;
		m->n0 = n;
		m->lt0 = lt;
		if (lt >= m->h.token)
			report(c, &c->st->reader_viol,
				   "%s: reader with token %" PRId64 " sees last_token %" PRId64
				   ": a writer granted after it wrote while it held the name",
				   m->h.name, m->h.token, lt);
		return;
	}
	if (n != m->n0 || lt != m->lt0)
	{
		report(c, &c->st->reader_viol,
			   "%s: n went from %" PRId64 " (token %" PRId64 ") to %" PRId64 " (token %" PRId64
			   ") while we held it shared (token %" PRId64 ")",
			   m->h.name, m->n0, m->lt0, n, lt, m->h.token);
		m->n0 = n;
		m->lt0 = lt;
	}
}

/*
 * dlock_fence refused our token, sent at t0 and answered at t1: the lease
 * had ended.  Expected of a short leaked lease, unless our clock proves it
 * was still live: the server looked at it before t1, so t1 must be before
 * the lease's earliest possible end.
 */
static void
fence_refused(Client *c, ModeHold *m, int64_t t0, int64_t t1)
{
	if (t1 + SLACK_US < m->h.lo_expiry)
		report(c, &c->st->lease_lost,
			   "dlock_fence on %s refused token %" PRId64 " %.1f ms after the grant "
			   "(the fence took %.1f ms), with the lease certainly live for %.1f ms more: ENGINE BUG",
			   m->h.name, m->h.token, (t0 - m->h.granted) / 1000.0, (t1 - t0) / 1000.0,
			   (m->h.lo_expiry - t1) / 1000.0);
	else if (!m->leak)
		report(c, &c->st->lease_lost,
			   "dlock_fence on %s refused token %" PRId64 " %.1f ms after the grant; "
			   "the ttl was %d ms, so the client stalled past its lease",
			   m->h.name, m->h.token, (t0 - m->h.granted) / 1000.0, m->h.ttl_ms);
	else
		c->st->mode_expired++;
	if (t1 < m->hi_expiry)
		m->hi_expiry = t1;
	if (!m->leak)
		m->h.token = 0;			/* nothing left to release */
}

static bool
rw_read(Client *c, ModeHold *m, int64_t *n, int64_t *lt)
{
	const char *p[1] = {m->h.name};
	PGresult   *res = run(c, c->conn, "rw_read", 1, p);

	if (res == NULL)
		return false;
	*n = load_int64(res, 0, 0);
	*lt = load_int64(res, 0, 1);
	PQclear(res);
	return true;
}

static void
rw_write(Client *c, ModeHold *m)
{
	char		nbuf[32],
				tbuf[32];
	const char *p[3];
	int			rows;

	p[0] = m->h.name;
	p[1] = load_i64(nbuf, m->n_read + 1);
	p[2] = load_i64(tbuf, m->h.token);
	rows = run_cmd(c, c->conn,
				   m->h.token == 0 ? "rw_write_unsafe" : m->wrote ? "rw_write_next" : "rw_write_first",
				   3, p);
	if (rows == 1)
		m->incr = true;
	else if (rows == 0)
		report(c, &c->st->token_viol,
			   "%s: write with token %" PRId64 " refused: an earlier holder recorded a %s token",
			   m->h.name, m->h.token, m->wrote ? "different" : "higher or equal");
}

/*
 * One step of the critical section of holds hs (sorted by name), in one
 * transaction: dlock_fence every lease, which pins it until COMMIT; enter the
 * board; writers increment stress_rw.n, readers read it twice; leave; record
 * the span.  Returns 1 when done, 0 when a fence was refused (that lease
 * ended), -1 on error.
 */
static int
mode_step(Client *c, ModeHold **hs, int nh)
{
	char		tbuf[32],
				inbuf[32],
				outbuf[32];
	const char *p[5];
	int64_t		t_in,
				t_out,
				n,
				lt;

	if (!run_simple(c, "BEGIN"))
		return -1;
	for (int i = 0; i < nh; i++)
	{
		ModeHold   *m = hs[i];
		PGresult   *res;
		int64_t		f0,
					f1;
		bool		refused;

		m->incr = false;
		if (m->h.token == 0)
			continue;			/* --unsafe-modes: no lease */
		p[0] = m->h.name;
		p[1] = load_i64(tbuf, m->h.token);
		f0 = load_now_us();
		res = PQexecPrepared(c->conn, "fence", 2, p, NULL, NULL, 0);
		f1 = load_now_us();
		c->st->ops++;
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
		{
			PQclear(res);
			continue;
		}
		refused = load_is_state(res, "DL001");
		if (!refused)
		{
			report(c, &c->st->errors, "dlock_fence on %s: %s", m->h.name, PQerrorMessage(c->conn));
			c->fatal = true;
		}
		PQclear(res);
		if (!refused || !run_simple(c, "ROLLBACK"))
			return -1;
		fence_refused(c, m, f0, f1);
		return 0;
	}

	/* every lease stays live from here until COMMIT */
	t_in = load_now_us();
	for (int i = 0; i < nh; i++)
		board_enter(c, hs[i]);
	for (int pass = 0; pass < 2 && !c->fatal; pass++)
	{
		/*
		 * Widen the window between the passes now and then.  A permit is held
		 * for a while, so that the permits run out and callers queue.
		 */
		if (pass == 1 && hs[0]->sem)
			usleep(1000 + rnd_int(c, 4000));
		else if (pass == 1 && rnd_int(c, 2) == 0)
			usleep(rnd_int(c, 2000));
		for (int i = 0; i < nh && !c->fatal; i++)
		{
			ModeHold   *m = hs[i];

			if (m->sem)
				continue;
			if (pass == 1 && m->excl)
				rw_write(c, m);
			else if (rw_read(c, m, &n, &lt))
			{
				if (m->excl)
					m->n_read = n;
				else
					reader_saw(c, m, n, lt);
			}
		}
	}
	t_out = load_now_us();
	for (int i = 0; i < nh; i++)
		board_leave(hs[i]);
	if (c->fatal)
		return -1;

	for (int i = 0; i < nh; i++)
	{
		ModeHold   *m = hs[i];

		p[0] = m->h.name;
		p[1] = load_i64(tbuf, m->h.token);
		p[2] = m->sem ? "p" : m->excl ? "w" : "r";
		p[3] = load_i64(inbuf, t_in);
		p[4] = load_i64(outbuf, t_out);
		if (run_cmd(c, c->conn, "span", 5, p) < 0)
			return -1;
	}
	if (!run_simple(c, "COMMIT"))
		return -1;
	c->st->steps++;
	t_out = load_now_us();
	for (int i = 0; i < nh; i++)
	{
		ModeHold   *m = hs[i];

		/* a pinned lease outlives its ttl until COMMIT */
		if (m->hi_expiry < t_out)
			m->hi_expiry = t_out;
		if (m->incr)
		{
			m->wrote = m->h.token != 0;
			c->st->rw_increments++;
			c->st->rw_incr[m->idx]++;
		}
	}
	return 1;
}

/* Probes made while holding an rw-* or sem-* lease with a long ttl. */
static void
mode_probe(Client *c, ModeHold *m)
{
	Hold	   *h = &m->h;
	char		ttl[32],
				perm[16],
				other[16];
	const char *p[5];
	bool		isnull;
	int64_t		v;

	snprintf(ttl, sizeof(ttl), "%d ms", h->ttl_ms);
	snprintf(perm, sizeof(perm), "%d", permits);
	snprintf(other, sizeof(other), "%d", permits + 1);
	p[0] = h->name;
	switch (rnd_int(c, 4))
	{
		case 0:					/* another owner: refused, or an error */
			p[1] = "1 s";
			p[2] = c->intruder;
			p[3] = !m->sem && m->excl && rnd_int(c, 2) == 0 ? "shared" : "exclusive";
			p[4] = m->sem ? other : NULL;
			if (m->sem)
			{
				expect_state(c, c->conn, "m_try", 5, p, "55000", "a try with other permits");
				return;
			}
			if (!run_int(c, c->conn, "m_try", 5, p, &isnull, &v))
				return;
			if (!isnull)
				report(c, &c->st->probe_fail,
					   "intruder %s got %s in %s mode (token %" PRId64 ") while %s holds it %s (token %" PRId64 ")",
					   c->intruder, h->name, p[3], v, c->owner,
					   m->excl ? "exclusive" : "shared", h->token);
			break;
		case 1:					/* the holder cannot change its mode in place */
			p[1] = ttl;
			p[2] = c->owner;
			p[3] = !m->sem && m->excl ? "shared" : "exclusive";
			p[4] = NULL;
			expect_state(c, c->conn, "m_try", 5, p, "55000",
						 m->sem ? "the holder's try without permits" : "the holder's try in the other mode");
			return;
		case 2:					/* our release with a wrong token */
			if (!wrong_token_release(c, h))
				return;
			break;
		default:				/* re-try by the holder, maybe via conn2 */
			p[1] = ttl;
			p[2] = c->owner;
			p[3] = !m->sem && !m->excl ? "shared" : "exclusive";
			p[4] = m->sem ? perm : NULL;
			holder_retry(c, h, "m_try", 5, p);
			return;
	}
	c->st->ops++;
	c->st->probes++;
}

/*
 * The critical section of a single-name hold: 1-3 fenced steps, with
 * renewals and probes in between; a leaked hold takes 1-4 steps with pauses
 * of up to 40 ms, so that its short lease may run out in between.
 */
static void
mode_section(Client *c, ModeHold *m)
{
	int			steps = 1 + rnd_int(c, m->leak ? 4 : 3);
	int64_t		t0 = load_now_us();
	double		ms;

	for (int s = 0; s < steps && !c->fatal; s++)
	{
		if (s > 0 && m->leak)
			usleep(rnd_int(c, 40000));
		else if (s > 0 && m->h.token != 0)
		{
			if (rnd_int(c, 6) == 0)
				renew(c, &m->h);
			if (rnd_int(c, 5) == 0 && !c->fatal)
				mode_probe(c, m);
		}
		if (c->fatal || mode_step(c, &m, 1) <= 0)
			break;
	}
	ms = (load_now_us() - t0) / 1000.0;
	if (!m->leak && ms > c->st->max_section_ms)
		c->st->max_section_ms = ms;
}

/*
 * A hold of an rw-* name (shared 65 %, exclusive 35 %) or of a sem-* name:
 * a try (40 %), or an acquire with a 0-200 ms timeout (55 %) or without one;
 * the critical section; a release.  One hold in ten has a 20-100 ms ttl and
 * is leaked instead.
 */
static bool
mode_op(Client *c, bool sem)
{
	int			count = sem ? nsem : nrw;
	int			idx,
				how,
				timeout_ms,
				ttl_ms;
	bool		excl,
				leak,
				isnull,
				second,
				held_certain,
				maybe_live;
	ModeHold   *m;
	char		ttl[32],
				tmo[32],
				perm[16],
				tok[32];
	const char *p[6];
	int64_t		v,
				t0,
				t1,
				ttl_us;
	double		ms;
	PGconn	   *conn;

	if (count == 0)
		return false;
	idx = rnd_int(c, count);
	m = sem ? &c->sem[idx] : &c->rw[idx];
	excl = !sem && rnd_int(c, 100) < 35;
	leak = rnd_int(c, 10) == 0;
	how = rnd_int(c, 100);
	timeout_ms = rnd_int(c, 201);
	ttl_ms = leak ? 20 + rnd_int(c, 81) : 3000 + rnd_int(c, 5001);
	ttl_us = (int64_t) ttl_ms * 1000;

	if (leak_maybe_live(m, load_now_us()))
	{
		/*
		 * Re-taking our own live lease extends it; done every time, nothing
		 * would expire, so mostly leave it.  Its mode cannot change.
		 */
		if (rnd_int(c, 8) != 0)
		{
			c->st->mode_skips++;
			return false;
		}
		excl = m->excl;
	}

	if (unsafe_modes && (sem || excl))
	{
		ModeHold	u;

		memset(&u, 0, sizeof(u));
		mode_init(&u, sem, idx);
		u.excl = excl;
		mode_section(c, &u);
		return true;
	}

	snprintf(ttl, sizeof(ttl), "%d ms", ttl_ms);
	snprintf(tmo, sizeof(tmo), "%d ms", timeout_ms);
	snprintf(perm, sizeof(perm), "%d", permits);
	p[0] = m->h.name;
	p[1] = ttl;
	t0 = load_now_us();
	if (how < 40)
	{
		p[2] = c->owner;
		p[3] = excl || sem ? "exclusive" : "shared";
		p[4] = sem ? perm : NULL;
		if (!run_int(c, c->conn, "m_try", 5, p, &isnull, &v))
			return true;
		c->st->tries++;
	}
	else
	{
		p[2] = how < 95 ? tmo : NULL;
		p[3] = c->owner;
		p[4] = excl || sem ? "exclusive" : "shared";
		p[5] = sem ? perm : NULL;
		if (!run_int(c, c->conn, "m_acq", 6, p, &isnull, &v))
			return true;
		c->st->acquires++;
		if (how >= 95)
			c->st->acq_nolimit++;
	}
	t1 = load_now_us();
	c->st->ops++;
	ms = (t1 - t0) / 1000.0;
	if (how < 40 && ms > c->st->max_try_ms)
		c->st->max_try_ms = ms;

	/* our leaked lease on this name, judged by our own clock */
	held_certain = m->h.token != 0 && t1 + SLACK_US < m->h.lo_expiry;
	maybe_live = leak_maybe_live(m, t0);

	if (isnull)
	{
		if (sem)
			c->st->sem_refused++;
		else
			c->st->mode_refused++;
		if (how < 40)
			c->st->try_fail++;
		else
		{
			c->st->acq_timeouts++;
			if (how >= 95)
				report(c, &c->st->probe_fail, "acquire of %s without timeout returned NULL",
					   m->h.name);
			if (ms - timeout_ms > c->st->max_overshoot_ms)
				c->st->max_overshoot_ms = ms - timeout_ms;
		}
		if (held_certain)
			report(c, &c->st->lease_lost,
				   "%s of %s returned NULL while our leaked lease (token %" PRId64
				   ") was live for %.1f ms more", how < 40 ? "try" : "acquire",
				   m->h.name, m->h.token, (m->h.lo_expiry - t1) / 1000.0);
		return true;
	}

	if (m->h.token != 0 && v == m->h.token)
	{
		/* our leaked lease, extended: what its holds read and wrote stands */
		c->st->mode_extends++;
		if (!maybe_live)
			report(c, &c->st->token_viol,
				   "%s returned token %" PRId64 " again although our lease ended %.1f ms before the call",
				   m->h.name, v, (t0 - m->hi_expiry) / 1000.0);
	}
	else
	{
		c->st->grants++;
		if (sem)
			c->st->sem_grants++;
		else if (excl)
			c->st->rw_excl_grants++;
		else
			c->st->rw_shared_grants++;
		check_new_token(c, m->h.name, v);
		if (held_certain)
			report(c, &c->st->lease_lost,
				   "%s: new token %" PRId64 " while our leaked lease (token %" PRId64
				   ") was live for %.1f ms more", m->h.name, v, m->h.token,
				   (m->h.lo_expiry - t1) / 1000.0);
		m->read = false;
		m->wrote = false;
	}
	m->h.token = v;
	m->h.ttl_ms = ttl_ms;
	m->h.granted = t1;
	m->h.lo_expiry = t0 + ttl_us;
	m->hi_expiry = t1 + ttl_us;
	m->excl = excl;
	m->leak = leak;
	if (leak)
		c->st->leaks++;

	mode_section(c, m);
	if (c->fatal || leak || m->h.token == 0)
		return true;

	/* release: usually with the token, sometimes via conn2 */
	conn = holder_conn(c, &second);
	p[0] = m->h.name;
	p[1] = c->owner;
	p[2] = rnd_int(c, 10) == 0 ? NULL : load_i64(tok, m->h.token);
	t0 = load_now_us();
	if (!run_int(c, conn, "rel", 3, p, &isnull, &v))
		return true;
	c->st->ops++;
	c->st->releases++;
	if (isnull || !v)
		lease_lost(c, &m->h, second ? "release (2nd connection)" : "release", t0);
	m->h.token = 0;
	return true;
}

/* The values of a bigint[] in text form; returns how many there are. */
static int
parse_tokens(const char *s, int64_t *out, int max)
{
	int			n = 0;

	if (*s == '{')
		s++;
	while (*s != '\0' && *s != '}')
	{
		char	   *end;
		int64_t		v = strtoll(s, &end, 10);

		if (end == s)
			break;
		if (n < max)
			out[n] = v;
		n++;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

/* A text[] literal of names[order[0..n-1]]. */
static void
name_array(char *buf, size_t size, char (*names)[32], const int *order, int n)
{
	size_t		len = 1;

	buf[0] = '{';
	for (int j = 0; j < n && len < size; j++)
		len += snprintf(buf + len, size - len, "%s%s", j > 0 ? "," : "", names[order[j]]);
	if (len < size)
		snprintf(buf + len, size - len, "}");
}

/* Holds in name order, the order the step writes their rows in. */
static void
sort_holds(ModeHold **hs, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && strcmp(hs[j - 1]->h.name, hs[j]->h.name) > 0; j--)
		{
			ModeHold   *t = hs[j];

			hs[j] = hs[j - 1];
			hs[j - 1] = t;
		}
}

/*
 * After a multi-lock that was refused, timed out or cancelled we hold none
 * of its names (all or nothing): renewing each must fail.
 */
static void
multi_holds_none(Client *c, char (*names)[32], int n, const char *arr, const char *how)
{
	for (int j = 0; j < n && !c->fatal; j++)
		if (!holds_not(c, names[j], "%s %s left us holding %s (renew succeeded): ENGINE BUG",
					   how, arr, names[j]))
			return;
}

/*
 * A multi-lock: 2-3 distinct names in random order, rw-* names in either
 * mode and lock-* names too when exclusive (sem-* names cannot be: the
 * functions take no permits), by dlock_try_all (40 %) or dlock_acquire_all
 * with a 1-3 s timeout (55 %) or without one.  The rw-* names get 1-2 steps
 * that fence them all in one transaction, the lock-* names the usual
 * critical section, and dlock_release_all must release every one.
 */
static bool
multi_op(Client *c)
{
	bool		excl = nrw < 2 || rnd_int(c, 100) < 60;
	int			pool = excl && !unsafe_modes ? nrw + opts.names : nrw;
	int			want = 2 + rnd_int(c, 2);
	int			how = rnd_int(c, 100);
	int			timeout_ms = 1000 + rnd_int(c, 2001);
	int			ttl_ms = 3000 + rnd_int(c, 5001);
	int64_t		ttl_us = (int64_t) ttl_ms * 1000;
	bool		cancel = chaos && rnd_int(c, 50) == 0;
	const char *mode = excl ? "exclusive" : "shared";
	int			pick[3];
	int			order[3] = {0, 1, 2};
	int			by_token[3] = {0, 1, 2};
	int			npick = 0;
	char		names[3][32];
	char		arr[128],
				ttl[32],
				tmo[32];
	const char *p[5];
	ModeHold   *rws[3];
	ModeHold	unsafe_holds[3];
	int			nrws = 0;
	Hold		locks[3];
	int			lock_idx[3];
	int			nlocks = 0;
	int			expect;
	int64_t		tokens[3],
				t0,
				t1,
				v;
	int			ntok;
	bool		isnull,
				second;
	PGresult   *res;
	PGconn	   *conn;
	double		ms;

	if (pool < 2)
		return false;
	t0 = load_now_us();
	for (int tries = 0; npick < want && tries < 20; tries++)
	{
		int			x = rnd_int(c, pool);

		/* each name once; our own live leaked lease is left to expire */
		bool		skip = x < nrw && leak_maybe_live(&c->rw[x], t0);

		for (int j = 0; j < npick; j++)
			skip = skip || pick[j] == x;
		if (!skip)
			pick[npick++] = x;
	}
	if (npick < 2)
		return false;
	for (int j = 0; j < npick; j++)
		snprintf(names[j], sizeof(names[j]), pick[j] < nrw ? "rw-%d" : "lock-%d",
				 pick[j] < nrw ? pick[j] : pick[j] - nrw);
	name_array(arr, sizeof(arr), names, order, npick);

	if (unsafe_modes && excl)
	{
		/* --unsafe-modes: the writers go in without leases */
		memset(unsafe_holds, 0, sizeof(unsafe_holds));
		for (int j = 0; j < npick; j++)
		{
			mode_init(&unsafe_holds[j], false, pick[j]);
			unsafe_holds[j].excl = true;
			rws[j] = &unsafe_holds[j];
		}
		sort_holds(rws, npick);
		for (int s = 1 + rnd_int(c, 2); s > 0 && !c->fatal; s--)
			if (mode_step(c, rws, npick) <= 0)
				break;
		return true;
	}

	snprintf(ttl, sizeof(ttl), "%d ms", ttl_ms);
	snprintf(tmo, sizeof(tmo), "%d ms", timeout_ms);
	p[0] = arr;
	p[1] = ttl;
	c->st->multi_calls++;
	if (!excl)
		c->st->multi_shared++;
	t0 = load_now_us();
	if (cancel)
	{
		/* an unlimited wait ended by statement_timeout leaves us nothing */
		p[2] = NULL;
		p[3] = c->owner;
		p[4] = mode;
		res = run_cancelled(c, "acq_all", 5, p);
		if (res == NULL)
			return true;
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			c->st->ops++;
			c->st->multi_acquires++;
			if (!load_is_state(res, "57014"))
			{
				report(c, &c->st->errors, "dlock_acquire_all of %s ended by statement_timeout: %s",
					   arr, PQerrorMessage(c->conn));
				c->fatal = true;
				PQclear(res);
				return true;
			}
			PQclear(res);
			c->st->cancels++;
			multi_holds_none(c, names, npick, arr, "a cancelled dlock_acquire_all of");
			return true;
		}
	}
	else if (how < 40)
	{
		p[2] = c->owner;
		p[3] = mode;
		res = run(c, c->conn, "try_all", 4, p);
	}
	else
	{
		p[2] = how < 95 ? tmo : NULL;
		p[3] = c->owner;
		p[4] = mode;
		res = run(c, c->conn, "acq_all", 5, p);
	}
	if (res == NULL)
		return true;
	t1 = load_now_us();
	c->st->ops++;
	ms = (t1 - t0) / 1000.0;
	if (cancel || how >= 40)
		c->st->multi_acquires++;
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		if (cancel || how >= 95)
			report(c, &c->st->probe_fail, "dlock_acquire_all of %s without timeout returned NULL",
				   arr);
		else if (how < 40)
			c->st->multi_refused++;
		else
		{
			c->st->multi_timeouts++;
			if (ms - timeout_ms > c->st->max_overshoot_ms)
				c->st->max_overshoot_ms = ms - timeout_ms;
		}
		multi_holds_none(c, names, npick, arr, how < 40 ? "a refused dlock_try_all of" :
						 "a timed-out dlock_acquire_all of");
		return true;
	}
	ntok = parse_tokens(PQgetvalue(res, 0, 0), tokens, 3);
	if (ntok != npick)
	{
		report(c, &c->st->token_viol, "dlock_%s_all(%s) returned %s", how < 40 ? "try" : "acquire",
			   arr, PQgetvalue(res, 0, 0));
		PQclear(res);
		return true;
	}
	PQclear(res);
	if (cancel)
		c->st->cancel_grants++;
	if ((cancel || how >= 40) && ms > c->st->max_multi_wait_ms)
		c->st->max_multi_wait_ms = ms;
	if (!cancel && how < 40 && ms > c->st->max_try_ms)
		c->st->max_try_ms = ms;
	c->st->multi_granted++;
	c->st->multi_names += npick;
	c->st->grants += npick;

	/* all granted during this call: in token order, each above all before */
	for (int j = 1; j < npick; j++)
		for (int k = j; k > 0 && tokens[by_token[k - 1]] > tokens[by_token[k]]; k--)
		{
			int			t = by_token[k];

			by_token[k] = by_token[k - 1];
			by_token[k - 1] = t;
		}
	for (int j = 0; j < npick; j++)
		check_new_token(c, names[by_token[j]], tokens[by_token[j]]);

	for (int j = 0; j < npick; j++)
	{
		if (pick[j] < nrw)
		{
			ModeHold   *m = &c->rw[pick[j]];

			m->h.token = tokens[j];
			m->h.ttl_ms = ttl_ms;
			m->h.granted = t1;
			m->h.lo_expiry = t0 + ttl_us;
			m->hi_expiry = t1 + ttl_us;
			m->excl = excl;
			m->leak = false;
			m->read = false;
			m->wrote = false;
			rws[nrws++] = m;
		}
		else
		{
			Hold	   *h = &locks[nlocks];

			h->name = names[j];
			h->token = tokens[j];
			h->ttl_ms = ttl_ms;
			h->granted = t1;
			h->lo_expiry = t0 + ttl_us;
			lock_idx[nlocks++] = pick[j] - nrw;
		}
	}
	sort_holds(rws, nrws);
	for (int s = nrws > 0 ? 1 + rnd_int(c, 2) : 0; s > 0 && !c->fatal; s--)
		if (mode_step(c, rws, nrws) <= 0)
			break;
	for (int j = 0; j < nlocks && !c->fatal; j++)
	{
		if (c->prev_grant == 0)
			c->prev_grant = locks[j].token;
		critical_section(c, lock_idx[j], &locks[j]);
		c->prev_grant = locks[j].token;
	}
	if (c->fatal)
		return true;

	/* release them all, in another order, maybe via conn2 */
	expect = nlocks;
	for (int j = 0; j < nrws; j++)
		expect += rws[j]->h.token != 0;
	for (int j = npick - 1; j > 0; j--)
	{
		int			k = rnd_int(c, j + 1);
		int			t = order[j];

		order[j] = order[k];
		order[k] = t;
	}
	name_array(arr, sizeof(arr), names, order, npick);
	conn = holder_conn(c, &second);
	p[0] = arr;
	p[1] = c->owner;
	t0 = load_now_us();
	if (!run_int(c, conn, "rel_all", 2, p, &isnull, &v))
		return true;
	c->st->ops++;
	c->st->releases += v;
	if (isnull || v != expect)
		report(c, &c->st->lease_lost,
			   "dlock_release_all(%s)%s released %" PRId64 " of %d leases, %.1f ms after the grant (ttl %d ms)",
			   arr, second ? " (2nd connection)" : "", v, expect, (t0 - t1) / 1000.0, ttl_ms);
	for (int j = 0; j < nrws; j++)
		rws[j]->h.token = 0;
	return true;
}

/* ---------- a client process ---------- */

static void
client_main(int id, int start_fd)
{
	Client	   *c = calloc(1, sizeof(Client));
	char		app[64],
				buf;
	int64_t		end;
	int			exp_from = 1000 - exp_pct * 10;
	int			rw_from = exp_from - rw_pct * 10;
	int			sem_from = rw_from - sem_pct * 10;
	int			multi_from = sem_from - multi_pct * 10;

	c->id = id;
	c->st = &results[id];
	for (int j = 0; j < MAX_MODE_NAMES; j++)
	{
		mode_init(&c->rw[j], false, j);
		mode_init(&c->sem[j], true, j);
	}
	c->rng = opts.seed ^ ((uint64_t) (id + 1) * UINT64_C(0xD1B54A32D192ED03));
	c->fake_busy = (int64_t) (id + 1) << 32;
	snprintf(c->owner, sizeof(c->owner), "c%d", id);
	snprintf(c->intruder, sizeof(c->intruder), "x%d", id);
	snprintf(app, sizeof(app), "dlock_stress c%d", id);
	c->conn = connect_db(app, false);
	if (c->conn == NULL || !prepare_all(c, c->conn))
		exit(3);
	if (id % 4 == 1)
	{
		snprintf(app, sizeof(app), "dlock_stress c%d/2", id);
		c->conn2 = connect_db(app, false);
		if (c->conn2 == NULL || !prepare_all(c, c->conn2))
			exit(3);
	}

	/* wait for the parent to open the gate (EOF on the pipe) */
	while (read(start_fd, &buf, 1) < 0 && errno == EINTR)
		;
	end = load_now_us() + (int64_t) opts.seconds * 1000000;
	while (!c->fatal && load_now_us() < end)
	{
		int			r = rnd_int(c, 1000);

		/* a kind that declines (say, our own leaked lease) makes a main op */
		if (chaos && r < 1)
			disconnect_op(c);
		else if (r >= exp_from ? exp_op(c) :
				 r >= rw_from ? mode_op(c, false) :
				 r >= sem_from ? mode_op(c, true) :
				 r >= multi_from ? multi_op(c) : false)
			;
		else
			main_op(c);
	}
	PQfinish(c->conn);
	if (c->conn2)
		PQfinish(c->conn2);
	c->st->finished = 1;
	exit(c->fatal ? 1 : 0);
}

/* ---------- the parent: setup, run, check ---------- */

static void
setup(PGconn *conn)
{
	char		sql[256];
	PGresult   *res;
	int64_t		deadline;

	PQclear(load_must(conn, "SET client_min_messages = warning"));
	res = load_must(conn, "SELECT 1 FROM pg_extension WHERE extname = 'dlock'");
	if (PQntuples(res) != 1)
	{
		fprintf(stderr, "extension dlock is not installed in this database (CREATE EXTENSION dlock)\n");
		exit(2);
	}
	PQclear(res);
	PQclear(load_must(conn, "DROP TABLE IF EXISTS stress_counter, stress_exp, stress_rw, stress_span"));
	PQclear(load_must(conn, "CREATE TABLE stress_counter (name text PRIMARY KEY, "
				 "n bigint NOT NULL DEFAULT 0, last_token bigint NOT NULL DEFAULT 0, "
				 "busy bigint NOT NULL DEFAULT 0)"));
	PQclear(load_must(conn, "CREATE TABLE stress_exp (name text PRIMARY KEY, "
				 "last_token bigint NOT NULL DEFAULT 0, prev_token bigint NOT NULL DEFAULT 0, "
				 "grants bigint NOT NULL DEFAULT 0)"));
	PQclear(load_must(conn, "CREATE TABLE stress_rw (name text PRIMARY KEY, "
				 "n bigint NOT NULL DEFAULT 0, last_token bigint NOT NULL DEFAULT 0)"));
	/* kind: r reader, w writer, p semaphore holder; times on our clock, us */
	PQclear(load_must(conn, "CREATE UNLOGGED TABLE stress_span (name text NOT NULL, "
				 "token bigint NOT NULL, kind text NOT NULL, "
				 "t_in bigint NOT NULL, t_out bigint NOT NULL)"));
	snprintf(sql, sizeof(sql),
			 "INSERT INTO stress_rw (name) SELECT 'rw-' || i FROM generate_series(0, %d) i",
			 nrw - 1);
	PQclear(load_must(conn, sql));
	snprintf(sql, sizeof(sql),
			 "INSERT INTO stress_counter (name) SELECT 'lock-' || i FROM generate_series(0, %d) i",
			 opts.names - 1);
	PQclear(load_must(conn, sql));
	snprintf(sql, sizeof(sql),
			 "INSERT INTO stress_exp (name) SELECT 'exp-' || i FROM generate_series(0, %d) i",
			 nexp - 1);
	PQclear(load_must(conn, sql));

	/* leases left by an earlier run must expire first */
	deadline = load_now_us() + 10 * 1000000;
	for (;;)
	{
		res = load_must(conn, "SELECT count(*) FROM dlock_locks "
				   "WHERE name ~ '^(lock|exp|rw|sem)-[0-9]+$'");
		if (strcmp(PQgetvalue(res, 0, 0), "0") == 0)
		{
			PQclear(res);
			break;
		}
		PQclear(res);
		if (load_now_us() > deadline)
		{
			fprintf(stderr, "leases on lock-* / exp-* / rw-* / sem-* names are still held; not starting\n");
			exit(2);
		}
		usleep(100000);
	}

	/* the token sequence so far: every grant of the run must be above it */
	res = load_must(conn, "SELECT dlock_try('stress-baseline', '1 s', 'probe')");
	baseline_token = load_int64(res, 0, 0);
	PQclear(res);
	PQclear(load_must(conn, "SELECT dlock_release('stress-baseline', 'probe')"));
}

/*
 * Every increment the clients counted per name (incr, by the number after
 * prefix) is in the table that sql reads (name, n[, busy]): fewer are lost
 * updates (returned), more phantom ones (added to *phantom).  A busy flag
 * left set, unless a client hung, adds to *check_viol.
 */
static long
check_counts(PGconn *conn, const char *sql, const char *prefix, const int64_t *incr,
			 const char *who, bool hung, long *phantom, long *check_viol)
{
	PGresult   *res = load_must(conn, sql);
	long		lost = 0;

	for (int r = 0; r < PQntuples(res); r++)
	{
		const char *nm = PQgetvalue(res, r, 0);
		int			k = atoi(nm + strlen(prefix));
		int64_t		n = load_int64(res, r, 1);
		int64_t		busy = PQnfields(res) > 2 ? load_int64(res, r, 2) : 0;

		if (n < incr[k])
		{
			fprintf(stderr, "VIOLATION: %s: table says %" PRId64 " but %s made %" PRId64
					" increments: %" PRId64 " lost updates\n", nm, n, who, incr[k], incr[k] - n);
			lost += incr[k] - n;
		}
		else if (n > incr[k])
		{
			fprintf(stderr, "VIOLATION: %s: table says %" PRId64 " but %s made only %" PRId64 "\n",
					nm, n, who, incr[k]);
			*phantom += n - incr[k];
		}
		if (busy != 0 && !hung)
		{
			fprintf(stderr, "VIOLATION: %s: busy flag %" PRId64 " left set\n", nm, busy);
			(*check_viol)++;
		}
	}
	PQclear(res);
	return lost;
}

/*
 * What sql finds (four columns) was left behind: each row is printed with
 * fmt, and the rows are counted.  While there are any, sql runs again every
 * 100 ms, up to retries times.
 */
static long
left_behind(PGconn *conn, const char *sql, int retries, const char *fmt)
{
	PGresult   *res;
	long		n;

	for (int tries = 0;; tries++)
	{
		res = load_must(conn, sql);
		if (PQntuples(res) == 0 || tries == retries)
			break;
		PQclear(res);
		usleep(100000);
	}
	for (int r = 0; r < PQntuples(res); r++)
		fprintf(stderr, fmt, PQgetvalue(res, r, 0), PQgetvalue(res, r, 1), PQgetvalue(res, r, 2),
				PQgetvalue(res, r, 3));
	n = PQntuples(res);
	PQclear(res);
	return n;
}

static void
report_hang(int i, pid_t pid)
{
	fprintf(stderr, "c%d: HANG: still running 30 s after the end; killing pid %d\n", i, (int) pid);
}

static void
usage(const char *prog)
{
	fprintf(stderr,
			"usage: %s [options]\n"
			"  -d, --conninfo=STR   libpq connection string (default: from PG* environment)\n"
			"  -c, --clients=N      client processes (default 16)\n"
			"  -n, --names=N        lock-* names with a critical section (default 8)\n"
			"  -e, --exp-names=N    exp-* names with short leaked leases (default names/2, min 2)\n"
			"  -p, --exp-pct=P      percent of operations on exp-* names (default 15)\n"
			"  -r, --rw-names=N     rw-* names taken shared or exclusive (default names/2, min 2)\n"
			"  -m, --sem-names=N    sem-* names, semaphores (default 1)\n"
			"  --permits=N          permits of every sem-* name (default 3)\n"
			"  --rw-pct=P           percent of operations on rw-* names (default 25)\n"
			"  --sem-pct=P          percent of operations on sem-* names (default 12)\n"
			"  --multi-pct=P        percent of operations that are multi-locks (default 8)\n"
			"  -t, --duration=S     seconds (default 15)\n"
			"  -s, --seed=N         random seed (default 1)\n"
			"  -v, --verbose        per-client lines\n"
			"  --no-chaos           no cancelled or abandoned waits\n"
			"  --unsafe             skip the lock around the critical section (must FAIL)\n"
			"  --unsafe-tokens      write the previous grant's token (must FAIL)\n"
			"  --unsafe-modes       writers and semaphore holders skip the lock (must FAIL)\n",
			prog);
	exit(2);
}

int
main(int argc, char **argv)
{
	static struct option longopts[] = {
		LOAD_LONG_OPTIONS,
		{"exp-names", required_argument, NULL, 'e'},
		{"exp-pct", required_argument, NULL, 'p'},
		{"verbose", no_argument, NULL, 'v'},
		{"unsafe", no_argument, NULL, 1},
		{"unsafe-tokens", no_argument, NULL, 2},
		{"no-chaos", no_argument, NULL, 3},
		{"rw-names", required_argument, NULL, 'r'},
		{"sem-names", required_argument, NULL, 'm'},
		{"permits", required_argument, NULL, 4},
		{"rw-pct", required_argument, NULL, 5},
		{"sem-pct", required_argument, NULL, 6},
		{"multi-pct", required_argument, NULL, 7},
		{"unsafe-modes", no_argument, NULL, 8},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			opt;
	int			gate[2];
	pid_t		pids[MAX_CLIENTS];
	int			status[MAX_CLIENTS];
	int64_t		t_start,
				t_end;
	PGconn	   *conn;
	PGresult   *res;
	Stats		tot;
	bool		fail = false;
	bool		hung = false;
	long		lost = 0,
				rw_lost = 0,
				phantom = 0,
				check_viol = 0,
				spans = 0,
				span_viol = 0;
	int			span_sem_max = 0;
	double		secs;

	load_must_fmt = "setup/check query failed: %s\n%s";
	while ((opt = getopt_long(argc, argv, "d:c:n:e:p:t:s:r:m:vh", longopts, NULL)) != -1)
	{
		switch (opt)
		{
			case 'e':
				nexp = atoi(optarg);
				break;
			case 'p':
				exp_pct = atoi(optarg);
				break;
			case 'v':
				verbose = true;
				break;
			case 1:
				unsafe = true;
				break;
			case 2:
				unsafe_tokens = true;
				break;
			case 3:
				chaos = false;
				break;
			case 'r':
				nrw = atoi(optarg);
				break;
			case 'm':
				nsem = atoi(optarg);
				break;
			case 4:
				permits = atoi(optarg);
				break;
			case 5:
				rw_pct = atoi(optarg);
				break;
			case 6:
				sem_pct = atoi(optarg);
				break;
			case 7:
				multi_pct = atoi(optarg);
				break;
			case 8:
				unsafe_modes = true;
				break;
			default:
				if (!load_option(&opts, opt, optarg))
					usage(argv[0]);
		}
	}
	if (optind < argc)
		usage(argv[0]);
	if (nexp < 0)
		nexp = opts.names / 2 < 2 ? 2 : opts.names / 2;
	if (nrw < 0)
		nrw = opts.names / 2 < 2 ? 2 : opts.names / 2;
	if (opts.clients < 1 || opts.clients > MAX_CLIENTS || opts.names < 1 || opts.names > MAX_NAMES ||
		nexp < 1 || nexp > MAX_NAMES || opts.seconds < 1 || exp_pct < 0 ||
		nrw > MAX_MODE_NAMES || nsem < 0 || nsem > MAX_MODE_NAMES || permits < 1 ||
		rw_pct < 0 || sem_pct < 0 || multi_pct < 0 ||
		exp_pct + rw_pct + sem_pct + multi_pct > 100)
	{
		fprintf(stderr, "option out of range (clients 1..%d, names 1..%d, exp-names 1..%d, "
				"rw-names and sem-names 0..%d, permits >= 1, duration >= 1, "
				"percentages >= 0 adding up to at most 100)\n",
				MAX_CLIENTS, MAX_NAMES, MAX_NAMES, MAX_MODE_NAMES);
		exit(2);
	}

	results = load_shared(sizeof(Stats) * opts.clients + sizeof(Board), false);
	board = (Board *) &results[opts.clients];
	all_reports = &board->reports;
	token_seen = load_shared(TOKEN_BITS / 8, true);

	conn = connect_db("dlock_stress checker", true);
	setup(conn);

	printf("dlock_stress: %d clients (%d with a second connection per owner), %d names + %d exp names, "
		   "%d rw names, %d sem names of %d permits, %d s, seed %" PRIu64 "%s%s%s\n",
		   opts.clients, (opts.clients + 2) / 4, opts.names, nexp, nrw, nsem, permits, opts.seconds, opts.seed,
		   unsafe ? ", UNSAFE (no lock)" : "", unsafe_tokens ? ", UNSAFE-TOKENS (stale tokens)" : "",
		   unsafe_modes ? ", UNSAFE-MODES (writers and semaphore holders skip the lock)" : "");
	fflush(stdout);

	if (pipe(gate) != 0)
	{
		perror("pipe");
		exit(2);
	}
	for (int i = 0; i < opts.clients; i++)
	{
		pids[i] = fork();
		if (pids[i] < 0)
		{
			perror("fork");
			exit(2);
		}
		if (pids[i] == 0)
		{
			/* the checker's connection is the parent's: leave it alone */
			close(gate[1]);
			client_main(i, gate[0]);
		}
	}
	close(gate[0]);
	t_start = load_now_us();
	close(gate[1]);				/* start */

	/* wait for everyone; a client stuck 30 s past the end is a hang */
	hung = load_reap(opts.clients, pids, status,
					 t_start + (int64_t) (opts.seconds + 30) * 1000000, report_hang) > 0;
	t_end = load_now_us();
	secs = (t_end - t_start) / 1e6;

	/* totals */
	memset(&tot, 0, sizeof(tot));
	for (int i = 0; i < opts.clients; i++)
	{
		Stats	   *s = &results[i];

		tot.ops += s->ops;
		tot.grants += s->grants;
		tot.main_grants += s->main_grants;
		tot.exp_grants += s->exp_grants;
		tot.tries += s->tries;
		tot.try_fail += s->try_fail;
		tot.acquires += s->acquires;
		tot.acq_nolimit += s->acq_nolimit;
		tot.acq_timeouts += s->acq_timeouts;
		tot.renews += s->renews;
		tot.releases += s->releases;
		tot.conn2_ops += s->conn2_ops;
		tot.retries += s->retries;
		tot.probes += s->probes;
		tot.sections += s->sections;
		tot.increments += s->increments;
		tot.exp_inconclusive += s->exp_inconclusive;
		tot.exp_skips += s->exp_skips;
		tot.cancels += s->cancels;
		tot.cancel_grants += s->cancel_grants;
		tot.disconnects += s->disconnects;
		tot.token_viol += s->token_viol;
		tot.overlaps += s->overlaps;
		tot.lease_lost += s->lease_lost;
		tot.probe_fail += s->probe_fail;
		tot.errors += s->errors;
		tot.dup_tokens += s->dup_tokens;
		tot.unchecked_tokens += s->unchecked_tokens;
		tot.rw_shared_grants += s->rw_shared_grants;
		tot.rw_excl_grants += s->rw_excl_grants;
		tot.sem_grants += s->sem_grants;
		tot.mode_refused += s->mode_refused;
		tot.sem_refused += s->sem_refused;
		tot.mode_extends += s->mode_extends;
		tot.mode_skips += s->mode_skips;
		tot.leaks += s->leaks;
		tot.steps += s->steps;
		tot.mode_expired += s->mode_expired;
		tot.rw_increments += s->rw_increments;
		tot.reader_reads += s->reader_reads;
		tot.multi_calls += s->multi_calls;
		tot.multi_shared += s->multi_shared;
		tot.multi_granted += s->multi_granted;
		tot.multi_names += s->multi_names;
		tot.multi_refused += s->multi_refused;
		tot.multi_acquires += s->multi_acquires;
		tot.multi_timeouts += s->multi_timeouts;
		tot.mode_overlaps += s->mode_overlaps;
		tot.permit_over += s->permit_over;
		tot.reader_viol += s->reader_viol;
		if (s->max_multi_wait_ms > tot.max_multi_wait_ms)
			tot.max_multi_wait_ms = s->max_multi_wait_ms;
		if (s->max_readers > tot.max_readers)
			tot.max_readers = s->max_readers;
		if (s->max_sem > tot.max_sem)
			tot.max_sem = s->max_sem;
		for (int k = 0; k < nrw; k++)
			tot.rw_incr[k] += s->rw_incr[k];
		if (s->max_try_ms > tot.max_try_ms)
			tot.max_try_ms = s->max_try_ms;
		if (s->max_overshoot_ms > tot.max_overshoot_ms)
			tot.max_overshoot_ms = s->max_overshoot_ms;
		if (s->max_section_ms > tot.max_section_ms)
			tot.max_section_ms = s->max_section_ms;
		if (s->max_token > tot.max_token)
			tot.max_token = s->max_token;
		for (int k = 0; k < opts.names; k++)
			tot.incr[k] += s->incr[k];
		if (verbose)
			printf("  c%-3d ops %6ld grants %5ld try-fail %5ld timeouts %5ld incr %5ld max-token %" PRId64 "%s\n",
				   i, s->ops, s->grants, s->try_fail, s->acq_timeouts, s->increments,
				   s->max_token, s->finished ? "" : "  (did not finish)");
		if (!s->finished || !WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
		{
			fprintf(stderr, "c%d: did not finish cleanly (%s %d)\n", i,
					WIFEXITED(status[i]) ? "exit" : "signal",
					WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : WTERMSIG(status[i]));
			fail = true;
		}
	}

	/* mutual exclusion: every increment made under the lock is in the table */
	lost = check_counts(conn, "SELECT name, n, busy FROM stress_counter ORDER BY name", "lock-",
						tot.incr, "clients", hung, &phantom, &check_viol);
	/* rw-* names: every increment a writer committed is in the table */
	rw_lost = check_counts(conn, "SELECT name, n FROM stress_rw ORDER BY name", "rw-",
						   tot.rw_incr, "writers", hung, &phantom, &check_viol);

	/* everyone left the board */
	for (int k = 0; k < nrw + nsem && !hung; k++)
	{
		uint64_t	v = k < nrw ? board->rw[k] : board->sem[k - nrw];

		if (v != 0)
		{
			fprintf(stderr, "VIOLATION: %s-%d: board left at %" PRIu64 "\n",
					k < nrw ? "rw" : "sem", k < nrw ? k : k - nrw, v);
			check_viol++;
		}
	}

	/*
	 * The recorded spans, swept per name in time order (a leave before an
	 * enter at the same microsecond): a writer inside together with anyone,
	 * or more holders inside a sem-* name than it has permits.
	 */
	{
		char		sql[1024];

		snprintf(sql, sizeof(sql),
				 "WITH ev AS (SELECT name, kind, t_in AS t, 1 AS d FROM stress_span "
				 "UNION ALL SELECT name, kind, t_out, -1 FROM stress_span), "
				 "run AS (SELECT name, d, sum(d) OVER w AS inside, "
				 "sum(CASE WHEN kind = 'w' THEN d ELSE 0 END) OVER w AS writers "
				 "FROM ev WINDOW w AS (PARTITION BY name ORDER BY t, d ROWS UNBOUNDED PRECEDING)) "
				 "SELECT name, count(*) FILTER (WHERE d = 1), max(inside), "
				 "count(*) FILTER (WHERE d = 1 AND (CASE WHEN name LIKE 'sem-%%' "
				 "THEN inside > %d ELSE writers > 0 AND inside > 1 END)) "
				 "FROM run GROUP BY name ORDER BY name", permits);
		res = load_must(conn, sql);
	}
	for (int r = 0; r < PQntuples(res); r++)
	{
		const char *nm = PQgetvalue(res, r, 0);
		long		bad = atol(PQgetvalue(res, r, 3));
		int			most = atoi(PQgetvalue(res, r, 2));

		spans += atol(PQgetvalue(res, r, 1));
		if (strncmp(nm, "sem-", 4) == 0)
			span_sem_max = most > span_sem_max ? most : span_sem_max;
		if (bad > 0)
			fprintf(stderr, "VIOLATION: %s: %ld recorded spans began %s (up to %d inside)\n", nm, bad,
					strncmp(nm, "sem-", 4) == 0 ? "with all permits taken" : "while a writer was inside with someone",
					most);
		span_viol += bad;
	}
	PQclear(res);
	if (span_viol > 0)
	{
		/* a few of the overlapping pairs, for the record */
		res = load_must(conn, "SELECT a.name, a.kind, a.token, b.kind, b.token, "
				   "least(a.t_out, b.t_out) - greatest(a.t_in, b.t_in) "
				   "FROM stress_span a JOIN stress_span b ON a.name = b.name "
				   "AND a.t_in < b.t_out AND b.t_in < a.t_out AND a.ctid < b.ctid "
				   "WHERE a.name LIKE 'rw-%' AND 'w' IN (a.kind, b.kind) LIMIT 5");
		for (int r = 0; r < PQntuples(res); r++)
			fprintf(stderr, "  %s: %s token %s and %s token %s inside together for %s us\n",
					PQgetvalue(res, r, 0), PQgetvalue(res, r, 1), PQgetvalue(res, r, 2),
					PQgetvalue(res, r, 3), PQgetvalue(res, r, 4), PQgetvalue(res, r, 5));
		PQclear(res);
	}

	/*
	 * No waiter left behind.  Sessions that hung up while waiting get up to
	 * 2 s to notice.
	 */
	check_viol += left_behind(conn, "SELECT pid, name, owner, queue_position FROM dlock_waiters", 20,
							  "VIOLATION: waiter left behind: pid %s name %s owner %s position %s\n");

	/*
	 * No lease still held by a stress owner once the leaked ones (ttl 100 ms
	 * at most) have run out.
	 */
	usleep(150000);
	check_viol += left_behind(conn, "SELECT name, owner, token, expires_at FROM dlock_locks "
							  "WHERE owner ~ '^[cx][0-9]+$'", 0,
							  "VIOLATION: lease left behind: %s held by %s token %s until %s\n");

	/*
	 * Every name is free now and its next grant carries a token above every
	 * token the clients saw.
	 */
	{
		int64_t		last_probe = tot.max_token;
		static const char *const kinds[] = {"lock-%d", "exp-%d", "rw-%d", "sem-%d"};
		int			counts[] = {opts.names, nexp, nrw, nsem};
		char		perm[16];

		snprintf(perm, sizeof(perm), "%d", permits);
		for (int kind = 0; kind < 4; kind++)
			for (int k = 0; k < counts[kind]; k++)
			{
				char		name[32];
				const char *p[3];
				char		tok[32];

				snprintf(name, sizeof(name), kinds[kind], k);
				p[0] = name;
				p[1] = kind == 3 ? perm : NULL;
				res = PQexecParams(conn, "SELECT dlock_try($1, '5 s', 'probe', permits => $2::integer)",
								   2, NULL, p, NULL, NULL, 0);
				if (PQresultStatus(res) != PGRES_TUPLES_OK)
				{
					fprintf(stderr, "probe try on %s failed: %s", name, PQerrorMessage(conn));
					check_viol++;
					PQclear(res);
					continue;
				}
				if (PQgetisnull(res, 0, 0))
				{
					fprintf(stderr, "VIOLATION: %s is not free after the run\n", name);
					check_viol++;
					PQclear(res);
					continue;
				}
				strncpy(tok, PQgetvalue(res, 0, 0), sizeof(tok) - 1);
				tok[sizeof(tok) - 1] = '\0';
				PQclear(res);
				if (strtoll(tok, NULL, 10) <= last_probe)
				{
					fprintf(stderr, "VIOLATION: final grant on %s has token %s, not above %" PRId64 "\n",
							name, tok, last_probe);
					tot.token_viol++;
				}
				else
					last_probe = strtoll(tok, NULL, 10);
				p[1] = tok;
				res = PQexecParams(conn, "SELECT dlock_release($1, 'probe', $2::bigint)", 2, NULL, p,
								   NULL, NULL, 0);
				if (PQresultStatus(res) != PGRES_TUPLES_OK ||
					strcmp(PQgetvalue(res, 0, 0), "t") != 0)
				{
					fprintf(stderr, "VIOLATION: release of the final grant on %s failed %s\n",
							name, PQerrorMessage(conn));
					check_viol++;
				}
				PQclear(res);
			}
	}
	PQfinish(conn);

	printf("clients        %d\n", opts.clients);
	printf("seconds        %.1f\n", secs);
	printf("total ops      %ld (%.0f ops/s; dlock calls)\n", tot.ops, tot.ops / secs);
	printf("grants         %ld (lock-* %ld, exp-* %ld, rw-* %ld shared + %ld exclusive, sem-* %ld, "
		   "%ld names by multi-locks; %.0f grants/s)\n",
		   tot.grants, tot.main_grants, tot.exp_grants, tot.rw_shared_grants, tot.rw_excl_grants,
		   tot.sem_grants, tot.multi_names, tot.grants / secs);
	printf("tries          %ld, failed %ld\n", tot.tries, tot.try_fail);
	printf("waits          %ld acquire calls (%ld without timeout), timeouts %ld\n",
		   tot.acquires, tot.acq_nolimit, tot.acq_timeouts);
	printf("renews         %ld\n", tot.renews);
	printf("releases       %ld\n", tot.releases);
	printf("holder re-try  %ld; second-connection calls %ld; refused probes %ld\n",
		   tot.retries, tot.conn2_ops, tot.probes);
	printf("sections       %ld, increments %ld\n", tot.sections, tot.increments);
	printf("latency        try max %.1f ms; acquire timeout overshoot max %.1f ms; section max %.1f ms\n",
		   tot.max_try_ms, tot.max_overshoot_ms, tot.max_section_ms);
	printf("exp records    %ld inconclusive (lease may have expired before the record)\n",
		   tot.exp_inconclusive);
	printf("modes          rw-* refused %ld, sem-* refused %ld; %ld short leases leaked, "
		   "%ld re-takes extended our own, %ld times left alone\n",
		   tot.mode_refused, tot.sem_refused, tot.leaks, tot.mode_extends, tot.mode_skips);
	printf("multi-locks    %ld calls (%ld shared), granted %ld; try_all refused %ld; "
		   "acquire_all %ld calls, timeouts %ld, granted after at most %.1f ms\n",
		   tot.multi_calls, tot.multi_shared, tot.multi_granted, tot.multi_refused,
		   tot.multi_acquires, tot.multi_timeouts, tot.max_multi_wait_ms);
	printf("mode sections  %ld fenced steps (%ld spans), %ld cut short by a short lease's end; "
		   "rw-* increments %ld, reader reads %ld\n",
		   tot.steps, spans, tot.mode_expired, tot.rw_increments, tot.reader_reads);
	printf("concurrency    up to %d readers inside one rw-* name, up to %d holders inside one sem-* "
		   "name (%d in the spans)\n",
		   tot.max_readers, tot.max_sem, span_sem_max);
	printf("chaos          %ld acquires cancelled by statement_timeout (%ld granted first), "
		   "%ld sessions hung up while waiting\n",
		   tot.cancels, tot.cancel_grants, tot.disconnects);
	printf("max token      %" PRId64 " (%" PRId64 " issued during the run, before the final probes)\n",
		   tot.max_token, tot.max_token - baseline_token);
	printf("lost updates   %ld on lock-*, %ld on rw-*%s\n", lost, rw_lost,
		   phantom ? " (plus phantom increments)" : "");
	printf("overlaps       %ld\n", tot.overlaps);
	printf("mode overlaps  %ld writer with others + %ld over the permits seen live; "
		   "%ld in the spans; %ld reader saw a write\n",
		   tot.mode_overlaps, tot.permit_over, span_viol, tot.reader_viol);
	printf("token violations %ld; duplicate tokens %ld (%ld beyond the duplicate check)\n",
		   tot.token_viol, tot.dup_tokens, tot.unchecked_tokens);
	printf("leases lost    %ld (release false / renew NULL / holder re-try refused)\n", tot.lease_lost);
	printf("probe failures %ld\n", tot.probe_fail);
	printf("end-state violations %ld\n", check_viol);
	printf("errors         %ld%s\n", tot.errors, hung ? " (HANG)" : "");

	if (lost || rw_lost || phantom || tot.overlaps || tot.token_viol || tot.dup_tokens ||
		tot.lease_lost || tot.probe_fail || check_viol || tot.errors || hung ||
		tot.mode_overlaps || tot.permit_over || span_viol || tot.reader_viol)
		fail = true;
	printf("RESULT: %s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
