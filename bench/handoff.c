/*
 * handoff.c
 *		Release-to-waiter handoff latency: dlock versus PostgreSQL advisory locks.
 *
 * Three connections: A and B take turns holding one lock, M watches.
 * Each iteration:
 *   1. the holder H already holds the lock;
 *   2. the waiter W sends a blocking acquire asynchronously;
 *   3. M polls until W is really queued (dlock_waiters, or pg_locks with
 *      granted = false for advisory locks);
 *   4. t0 = clock_gettime(CLOCK_MONOTONIC) just before H's release is sent;
 *      the client then poll()s both sockets and records
 *        t_waiter  = when W's acquire result is complete (W now owns the lock),
 *        t_release = when H's release result is complete;
 *   5. the roles swap, so W is the holder of the next iteration.
 * handoff = t_waiter - t0.  It contains the release's trip to the server
 * and its execution, the wakeup of the waiting backend and the grant
 * result's trip back to the client; it does not wait for H's own reply.
 *
 * All statements are prepared once per connection (like pgbench -M prepared).
 * The lock kinds are interleaved: the run is cut into rounds, and each round
 * does a block of every kind, in an order that rotates from round to round,
 * so a change of machine load touches every kind alike.  Each block starts
 * with a few unmeasured warm-up handoffs.
 *
 * usage: handoff "conninfo" [iterations] [warmup] [modes] [rounds]
 *   iterations: measured handoffs per kind (default 1000)
 *   warmup:     unmeasured handoffs at the start of each block (default 5)
 *   modes: comma list of dlock_mem (SET dlock.durable = off), dlock_durable
 *          (SET dlock.durable = on), dlock (server default), advisory;
 *          default "dlock_mem,dlock_durable,advisory"
 *   rounds: default 10
 * Output: one line per kind, "key=value" pairs, times in microseconds.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

typedef struct Mode
{
	const char *name;
	const char *acquire;		/* $1 = owner */
	const char *release;		/* $1 = owner */
	const char *queued;			/* $1 = pid of the waiter; returns a count */
	const char *cleanup;		/* run on both connections before and after */
	const char *setup;			/* run on A and B first (session settings) */
} Mode;

#define DLOCK_MODE(mode_name, setting) \
	{ \
		mode_name, \
		"SELECT dlock_acquire('bench_handoff', '60 s', '30 s', $1::text)", \
		"SELECT dlock_release('bench_handoff', $1::text)", \
		"SELECT count(*) FROM dlock_waiters WHERE pid = $1::int AND name = 'bench_handoff'", \
		"SELECT dlock_release('bench_handoff', $1::text)", \
		setting, \
	}

static const Mode modes[] = {
	DLOCK_MODE("dlock_mem", "SET dlock.durable = off"),
	DLOCK_MODE("dlock_durable", "SET dlock.durable = on"),
	/* whatever the server's defaults are */
	DLOCK_MODE("dlock", "SET application_name = 'handoff'"),
	{
		"advisory",
		"SELECT pg_advisory_lock(424242) WHERE $1::text IS NOT NULL",
		"SELECT pg_advisory_unlock(424242) WHERE $1::text IS NOT NULL",
		"SELECT count(*) FROM pg_locks WHERE pid = $1::int AND locktype = 'advisory' AND NOT granted",
		"SELECT pg_advisory_unlock_all() WHERE $1::text IS NOT NULL",
		"SET application_name = 'handoff'",
	},
};

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void
die(PGconn *conn, const char *what)
{
	fprintf(stderr, "handoff: %s: %s\n", what, conn ? PQerrorMessage(conn) : "");
	exit(1);
}

static PGconn *
connect_one(const char *conninfo, const char *appname)
{
	PGconn	   *conn = PQconnectdb(conninfo);
	char		sql[128];
	PGresult   *res;

	if (PQstatus(conn) != CONNECTION_OK)
		die(conn, "connect");
	snprintf(sql, sizeof(sql), "SET application_name = '%s'", appname);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(conn, sql);
	PQclear(res);
	return conn;
}

static void
prepare(PGconn *conn, const char *name, const char *sql)
{
	PGresult   *res = PQprepare(conn, name, sql, 0, NULL);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(conn, sql);
	PQclear(res);
}

/* Runs a prepared statement with one parameter; returns the first value. */
static char *
exec1(PGconn *conn, const char *stmt, const char *param, char *buf, size_t len)
{
	PGresult   *res = PQexecPrepared(conn, stmt, 1, &param, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die(conn, stmt);
	if (buf)
		snprintf(buf, len, "%s", PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ?
				 PQgetvalue(res, 0, 0) : "NULL");
	PQclear(res);
	return buf;
}

/* Reads the one result of an async query; checks it's a non-null, non-false value. */
static void
finish_async(PGconn *conn, const char *what)
{
	PGresult   *res;
	int			seen = 0;

	while ((res = PQgetResult(conn)) != NULL)
	{
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die(conn, what);
		if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0) ||
			strcmp(PQgetvalue(res, 0, 0), "f") == 0)
		{
			fprintf(stderr, "handoff: %s returned %s\n", what,
					PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ?
					PQgetvalue(res, 0, 0) : "NULL/no row");
			exit(1);
		}
		seen++;
		PQclear(res);
	}
	if (seen != 1)
	{
		fprintf(stderr, "handoff: %s: %d results\n", what, seen);
		exit(1);
	}
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* nearest-rank percentile of a sorted array */
static double
pct(const double *v, int n, double p)
{
	int			i = (int) (p * n + 0.999999) - 1;

	if (i < 0)
		i = 0;
	if (i >= n)
		i = n - 1;
	return v[i];
}

typedef struct ModeRun
{
	const Mode *m;
	int			idx;			/* for statement names */
	double	   *handoff;
	double	   *release;
	double	   *queuewait;
	int			n;				/* measured so far */
	int			polls;
} ModeRun;

static void
prepare_mode(ModeRun *r, PGconn **conn, PGconn *mon)
{
	char		name[32];

	for (int i = 0; i < 2; i++)
	{
		snprintf(name, sizeof(name), "acq%d", r->idx);
		prepare(conn[i], name, r->m->acquire);
		snprintf(name, sizeof(name), "rel%d", r->idx);
		prepare(conn[i], name, r->m->release);
		snprintf(name, sizeof(name), "clean%d", r->idx);
		prepare(conn[i], name, r->m->cleanup);
	}
	snprintf(name, sizeof(name), "queued%d", r->idx);
	prepare(mon, name, r->m->queued);
}

/* One block: warmup + count handoffs of one lock kind. */
static void
run_block(ModeRun *r, PGconn **conn, PGconn *mon, int count, int warmup)
{
	const char *owner[2] = {"bench_handoff_A", "bench_handoff_B"};
	char		pid[2][16];
	char		acq[32],
				rel[32],
				clean[32],
				queued[32];
	char		buf[64];
	int			h = 0;			/* index of the holder */

	snprintf(acq, sizeof(acq), "acq%d", r->idx);
	snprintf(rel, sizeof(rel), "rel%d", r->idx);
	snprintf(clean, sizeof(clean), "clean%d", r->idx);
	snprintf(queued, sizeof(queued), "queued%d", r->idx);

	for (int i = 0; i < 2; i++)
	{
		PGresult   *res = PQexec(conn[i], r->m->setup);

		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die(conn[i], r->m->setup);
		PQclear(res);
		snprintf(pid[i], sizeof(pid[i]), "%d", PQbackendPID(conn[i]));
		exec1(conn[i], clean, owner[i], NULL, 0);
	}

	/* A takes the lock uncontended. */
	exec1(conn[h], acq, owner[h], buf, sizeof(buf));
	if (strcmp(buf, "NULL") == 0)
		die(NULL, "first acquire returned NULL");

	for (int it = 0; it < warmup + count; it++)
	{
		int			w = 1 - h;
		const char *wp = owner[w];
		const char *hp = owner[h];
		double		t0,
					tq,
					t_wait = 0,
					t_rel = 0;
		struct pollfd pfd[2];

		/* the waiter blocks in the server */
		tq = now_us();
		if (!PQsendQueryPrepared(conn[w], acq, 1, &wp, NULL, NULL, 0))
			die(conn[w], "send acquire");
		/* until it's really queued */
		for (;;)
		{
			exec1(mon, queued, pid[w], buf, sizeof(buf));
			r->polls++;
			if (strcmp(buf, "1") == 0)
				break;
			if (now_us() - tq > 10e6)
				die(NULL, "waiter never showed up as queued");
		}
		tq = now_us() - tq;

		t0 = now_us();
		if (!PQsendQueryPrepared(conn[h], rel, 1, &hp, NULL, NULL, 0))
			die(conn[h], "send release");
		while (t_wait == 0 || t_rel == 0)
		{
			pfd[0].fd = PQsocket(conn[w]);
			pfd[0].events = t_wait == 0 ? POLLIN : 0;
			pfd[1].fd = PQsocket(conn[h]);
			pfd[1].events = t_rel == 0 ? POLLIN : 0;
			if (poll(pfd, 2, 10000) <= 0)
			{
				fprintf(stderr, "handoff: poll: %s\n", errno ? strerror(errno) : "timeout");
				exit(1);
			}
			if (t_wait == 0 && (pfd[0].revents & (POLLIN | POLLERR | POLLHUP)))
			{
				if (!PQconsumeInput(conn[w]))
					die(conn[w], "consume");
				if (!PQisBusy(conn[w]))
					t_wait = now_us();
			}
			if (t_rel == 0 && (pfd[1].revents & (POLLIN | POLLERR | POLLHUP)))
			{
				if (!PQconsumeInput(conn[h]))
					die(conn[h], "consume");
				if (!PQisBusy(conn[h]))
					t_rel = now_us();
			}
		}
		finish_async(conn[w], "waiter's acquire");
		finish_async(conn[h], "holder's release");

		if (it >= warmup)
		{
			r->handoff[r->n] = t_wait - t0;
			r->release[r->n] = t_rel - t0;
			r->queuewait[r->n] = tq;
			r->n++;
		}
		h = w;
	}
	exec1(conn[h], rel, owner[h], NULL, 0);
}

static void
report_mode(ModeRun *r)
{
	int			n = r->n;
	double		sum = 0;

	for (int i = 0; i < n; i++)
		sum += r->handoff[i];
	qsort(r->handoff, n, sizeof(double), cmp_double);
	qsort(r->release, n, sizeof(double), cmp_double);
	qsort(r->queuewait, n, sizeof(double), cmp_double);
	printf("mode=%s n=%d p50=%.1f p90=%.1f p99=%.1f max=%.1f mean=%.1f min=%.1f "
		   "release_rtt_p50=%.1f release_rtt_p99=%.1f queue_p50=%.1f monitor_polls=%d\n",
		   r->m->name, n, pct(r->handoff, n, 0.50), pct(r->handoff, n, 0.90),
		   pct(r->handoff, n, 0.99), r->handoff[n - 1], sum / n, r->handoff[0],
		   pct(r->release, n, 0.50), pct(r->release, n, 0.99),
		   pct(r->queuewait, n, 0.50), r->polls);
	fflush(stdout);
}

/* Median round trip of a prepared SELECT 1, for scale. */
static void
baseline(PGconn *conn, int iters)
{
	double	   *v = malloc(sizeof(double) * iters);

	prepare(conn, "one", "SELECT 1 WHERE $1::text IS NOT NULL");
	for (int i = 0; i < iters; i++)
	{
		double		t = now_us();

		exec1(conn, "one", "x", NULL, 0);
		v[i] = now_us() - t;
	}
	qsort(v, iters, sizeof(double), cmp_double);
	printf("mode=select1_rtt n=%d p50=%.1f p90=%.1f p99=%.1f max=%.1f\n",
		   iters, pct(v, iters, 0.5), pct(v, iters, 0.9), pct(v, iters, 0.99), v[iters - 1]);
	free(v);
}

int
main(int argc, char **argv)
{
	const char *conninfo;
	int			iters = 1000;
	int			warmup = 5;
	int			rounds = 10;
	char	   *modelist;
	PGconn	   *conn[2],
			   *mon;
	ModeRun		runs[16];
	int			nruns = 0;

	if (argc < 2)
	{
		fprintf(stderr, "usage: %s conninfo [iterations] [warmup] [dlock_mem,dlock_durable,dlock,advisory] [rounds]\n", argv[0]);
		return 2;
	}
	conninfo = argv[1];
	if (argc > 2)
		iters = atoi(argv[2]);
	if (argc > 3)
		warmup = atoi(argv[3]);
	modelist = strdup(argc > 4 ? argv[4] : "dlock_mem,dlock_durable,advisory");
	if (argc > 5)
		rounds = atoi(argv[5]);
	if (iters < 1 || warmup < 0 || rounds < 1)
	{
		fprintf(stderr, "handoff: bad iteration counts\n");
		return 2;
	}
	if (rounds > iters)
		rounds = iters;

	conn[0] = connect_one(conninfo, "handoff_A");
	conn[1] = connect_one(conninfo, "handoff_B");
	mon = connect_one(conninfo, "handoff_monitor");

	for (char *tok = strtok(modelist, ","); tok; tok = strtok(NULL, ","))
	{
		const Mode *m = NULL;

		for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
			if (strcmp(modes[i].name, tok) == 0)
				m = &modes[i];
		if (m == NULL || nruns == 16)
		{
			fprintf(stderr, "handoff: unknown mode %s\n", tok);
			return 2;
		}
		runs[nruns].m = m;
		runs[nruns].idx = nruns;
		runs[nruns].handoff = malloc(sizeof(double) * iters);
		runs[nruns].release = malloc(sizeof(double) * iters);
		runs[nruns].queuewait = malloc(sizeof(double) * iters);
		runs[nruns].n = 0;
		runs[nruns].polls = 0;
		prepare_mode(&runs[nruns], conn, mon);
		nruns++;
	}

	baseline(conn[0], iters);
	for (int r = 0; r < rounds; r++)
	{
		int			count = iters / rounds + (r < iters % rounds);

		for (int k = 0; k < nruns; k++)
			run_block(&runs[(k + r) % nruns], conn, mon, count, warmup);
	}
	for (int k = 0; k < nruns; k++)
		report_mode(&runs[k]);

	PQfinish(conn[0]);
	PQfinish(conn[1]);
	PQfinish(mon);
	return 0;
}
