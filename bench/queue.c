/*
 * queue.c
 *		Queued requests at scale: many client threads queue with
 *		dlock_enqueue (through a pooler) or block in dlock_acquire, and a
 *		checker goes over every grant afterwards.
 *
 * Each of -c threads has one libpq connection (to -d) and makes -r requests
 * in turn, each on one of -n names picked at random (request i of thread t
 * has the owner "q<t>.<i>").  A request (-m queue):
 *   1. dlock_enqueue(name, ttl, owner, hold => -h): a token (granted now)
 *      or NULL (queued);
 *   2. while NULL: sleep, then ask again; the sleep starts at -p ms and
 *      doubles up to -P ms (each times a random 0.5..1.5);
 *   3. with its token: -w microseconds of "work", then dlock_release(name,
 *      owner, token).
 * With -m acquire, step 1 and 2 are one blocked dlock_acquire (timeout -t).
 * With -m try, every call of step 1 and 2 is dlock_try(name, ttl, owner):
 * the loop fleets fall back to without a queue, which is not FIFO (a
 * newcomer's try can win over one that has been trying for long), so the
 * FIFO check fails on it: the checker's negative control.
 * A request not granted within -t seconds leaves the queue (dlock_dequeue,
 * then dlock_release in case it was granted meanwhile) and counts as lost.
 *
 * All times come from one CLOCK_MONOTONIC in one process: when each call
 * was sent and returned, when the owner learned its token (the return of
 * the call that gave it), when its release was sent and returned.
 *
 * A handoff: on a name, two grants with consecutive tokens, prev and next,
 * where next's request was sent before prev's release was (next was waiting
 * when prev let go).  Its latency: next learning its token minus prev's
 * release being sent ("from send") and returning ("from return"; negative
 * when next's poll came back before the release's own reply).
 *
 * The checker (every check must hold, else exit status 1):
 *   - every request granted exactly once (no error, none lost), and every
 *     release returned true;
 *   - per name, in the order the owners learned their tokens, the tokens
 *     grow strictly and each owner learned its token after the previous
 *     owner's release was sent (one holder at a time; no token twice);
 *   - FIFO (-m queue, try): the server queues a request before its first
 *     dlock_enqueue returns and not before it is sent, so if request Q's
 *     first call returned NULL before request R's first call on the same
 *     name was sent, Q was ahead of R in the queue and must be granted
 *     first: token(Q) < token(R).  Requests whose calls overlap in time
 *     have no order a client can see and are not compared;
 *   - a sampler thread (its own connection, -a) reads pg_stat_activity every
 *     50 ms: with -m queue no backend of the clients' role (-U) ever waits
 *     in an extension wait (a blocked dlock call) and the role never has
 *     more than -S server connections; some requests were seen queued;
 *   - on the server afterwards (-a): no queued request was dropped for its
 *     hold (dlock_stats.queue_dropped did not move), nothing held or queued.
 *
 * usage: queue -d conninfo -a admin_conninfo [-m queue|acquire|try] [-c 2000]
 *        [-r 5] [-n 100] [-w 2000] [-p 5] [-P 500] [-h 60] [-t 120]
 *        [-U role] [-S pool_size] [-C max_concurrent_connects] [-l log]
 *        queue -T: the checker's self-test (made-up histories with faults)
 * Output: "key=value" lines (times in ms), then "check ok" or one
 * "check FAILED: ..." line per failure.  -l writes one line per request.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

typedef struct Req
{
	int			name;
	int			thread;
	int			seq;
	int			polls;			/* calls after the first */
	bool		immediate;		/* the first call returned the token */
	bool		granted;
	bool		released;		/* the release returned true */
	bool		lost;			/* not granted within -t: left the queue */
	long long	token;
	double		t_send;			/* first call sent */
	double		t_ret;			/* first call returned */
	double		t_learn;		/* the call that returned the token returned */
	double		t_rel_send;
	double		t_rel_ret;
} Req;

static const char *conninfo;
static const char *admin_conninfo;
static const char *role = NULL;
typedef enum
{
	MODE_QUEUE,
	MODE_ACQUIRE,
	MODE_TRY
} Mode;

static Mode mode = MODE_QUEUE;
static const char *const mode_names[] = {"queue", "acquire", "try"};
static int	nclients = 2000;
static int	nreqs = 5;
static int	nnames = 100;
static int	work_us = 2000;
static int	poll_min_ms = 5;
static int	poll_max_ms = 500;
static int	hold_s = 60;
static int	timeout_s = 120;
static int	pool_size = 0;
static int	max_connects = 50;
static const char *logpath = NULL;

static Req *reqs;
static char **errors;			/* per thread: its error, or NULL */
static pthread_barrier_t start_barrier;
static sem_t connect_sem;
static volatile int stop_sampler = 0;

/* the sampler's maxima */
static int	s_samples,
			s_app_conns,
			s_app_waiting,
			s_backends;
static long long s_queued;

static int	nfailed = 0;

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void
sleep_ms(double ms)
{
	struct timespec ts;

	ts.tv_sec = (time_t) (ms / 1e3);
	ts.tv_nsec = (long) ((ms - ts.tv_sec * 1e3) * 1e6);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static bool quiet = false;		/* the self-test's expected failures */

static void
fail(const char *fmt,...)
{
	va_list		ap;

	nfailed++;
	if (quiet)
		return;
	/* the first ones say enough */
	if (nfailed > 20)
	{
		if (nfailed == 21)
			printf("check FAILED: (more failures not shown)\n");
		return;
	}
	printf("check FAILED: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static char *
errstr(PGconn *conn, const char *what)
{
	char	   *s = malloc(512);

	snprintf(s, 512, "%s: %s", what, PQerrorMessage(conn));
	return s;
}

/*
 * One statement with text parameters; returns its first value into *val
 * (NULL: SQL NULL).  Returns false on an error, with *err set.
 */
static bool
run(PGconn *conn, const char *sql, int nparams, const char *const *params,
	char *val, size_t len, bool *isnull, char **err)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		*err = errstr(conn, sql);
		PQclear(res);
		return false;
	}
	if (isnull)
		*isnull = PQntuples(res) < 1 || PQgetisnull(res, 0, 0);
	if (val && PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
		snprintf(val, len, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return true;
}

static void *
client(void *arg)
{
	int			t = (int) (long) arg;
	unsigned int seed = 7919u * (unsigned) t + 1;
	PGconn	   *conn;
	char	   *err = NULL;
	char		ttl[32],
				hold[32],
				timeout[32];

	/* from the grant; a holder releases within ms */
	snprintf(ttl, sizeof(ttl), "60 s");
	snprintf(hold, sizeof(hold), "%d s", hold_s);
	snprintf(timeout, sizeof(timeout), "%d s", timeout_s);

	/* a few connections at a time: PgBouncer's listen backlog, scram */
	sem_wait(&connect_sem);
	conn = PQconnectdb(conninfo);
	sem_post(&connect_sem);
	if (PQstatus(conn) != CONNECTION_OK)
		err = errstr(conn, "connect");
	pthread_barrier_wait(&start_barrier);

	for (int i = 0; err == NULL && i < nreqs; i++)
	{
		Req		   *r = &reqs[t * nreqs + i];
		char		name[32],
					owner[32],
					tok[32] = "";
		bool		isnull;
		double		delay = poll_min_ms;

		r->thread = t;
		r->seq = i;
		r->name = rand_r(&seed) % nnames;
		snprintf(name, sizeof(name), "qbench:%d", r->name);
		snprintf(owner, sizeof(owner), "q%d.%d", t, i);

		r->t_send = now_ms();
		if (mode == MODE_ACQUIRE)
		{
			const char *p[4] = {name, ttl, timeout, owner};

			if (!run(conn, "SELECT dlock_acquire($1, $2::interval, $3::interval, $4)",
					 4, p, tok, sizeof(tok), &isnull, &err))
				break;
			r->t_ret = r->t_learn = now_ms();
			if (isnull)
				r->lost = true;
		}
		else
		{
			const char *p[4] = {name, ttl, owner, hold};
			const char *sql = mode == MODE_TRY ?
			"SELECT dlock_try($1, $2::interval, $3) WHERE $4::interval IS NOT NULL" :
			"SELECT dlock_enqueue($1, $2::interval, $3, hold => $4::interval)";

			if (!run(conn, sql, 4, p, tok, sizeof(tok), &isnull, &err))
				break;
			r->t_ret = r->t_learn = now_ms();
			r->immediate = !isnull;
			while (isnull)
			{
				if (r->t_learn - r->t_send > timeout_s * 1e3)
				{
					const char *q[2] = {name, owner};

					if (!run(conn, "SELECT dlock_dequeue($1, $2)", 2, q, NULL, 0, NULL, &err) ||
						!run(conn, "SELECT dlock_release($1, $2)", 2, q, NULL, 0, NULL, &err))
						break;
					r->lost = true;
					break;
				}
				sleep_ms(delay * (0.5 + rand_r(&seed) / (double) RAND_MAX));
				if (delay * 2 <= poll_max_ms)
					delay *= 2;
				else
					delay = poll_max_ms;
				r->polls++;
				if (!run(conn, sql, 4, p, tok, sizeof(tok), &isnull, &err))
					break;
				r->t_learn = now_ms();
			}
			if (err)
				break;
		}
		if (r->lost)
			continue;
		r->granted = true;
		r->token = atoll(tok);

		if (work_us > 0)
			sleep_ms(work_us / 1e3);

		{
			const char *p[3] = {name, owner, tok};
			char		ok[8] = "";

			r->t_rel_send = now_ms();
			if (!run(conn, "SELECT dlock_release($1, $2, $3::bigint)", 3, p,
					 ok, sizeof(ok), NULL, &err))
				break;
			r->t_rel_ret = now_ms();
			r->released = strcmp(ok, "t") == 0;
		}
	}
	errors[t] = err;
	PQfinish(conn);
	return NULL;
}

/* pg_stat_activity every 50 ms until told to stop */
static void *
sampler(void *arg)
{
	PGconn	   *conn = PQconnectdb(admin_conninfo);
	const char *sql =
	"SELECT count(*) FILTER (WHERE usename = $1 AND backend_type = 'client backend'),"
	" count(*) FILTER (WHERE usename = $1 AND wait_event_type = 'Extension'),"
	" count(*) FILTER (WHERE backend_type = 'client backend'),"
	" (SELECT queued FROM dlock_stats)"
	" FROM pg_stat_activity";
	const char *p[1] = {role};

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "queue: sampler: %s", PQerrorMessage(conn));
		return NULL;
	}
	while (!stop_sampler)
	{
		PGresult   *res = PQexecParams(conn, sql, 1, NULL, p, NULL, NULL, 0);

		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			fprintf(stderr, "queue: sampler: %s", PQerrorMessage(conn));
			PQclear(res);
			break;
		}
		s_samples++;
#define MAXV(var, col) do { long long v_ = atoll(PQgetvalue(res, 0, col)); if (v_ > var) var = v_; } while (0)
		MAXV(s_app_conns, 0);
		MAXV(s_app_waiting, 1);
		MAXV(s_backends, 2);
		MAXV(s_queued, 3);
		PQclear(res);
		sleep_ms(50);
	}
	PQfinish(conn);
	return NULL;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

static double
pct(double *v, int n, double f)
{
	int			i = (int) (n * f);

	if (n == 0)
		return 0;
	if (i >= n)
		i = n - 1;
	return v[i];
}

static int
cmp_learn(const void *a, const void *b)
{
	const Req  *x = *(Req *const *) a,
			   *y = *(Req *const *) b;

	return x->t_learn < y->t_learn ? -1 : x->t_learn > y->t_learn;
}

static int
cmp_token(const void *a, const void *b)
{
	const Req  *x = *(Req *const *) a,
			   *y = *(Req *const *) b;

	return x->token < y->token ? -1 : x->token > y->token;
}

/* what check_history found besides its failures */
static int	ngranted,
			nlost,
			nimmediate,
			nhandoffs,
			nneg,
			fifo_pairs;
static long long polls;
static double first_send,
			last_ret;
static double *lat_send,
		   *lat_ret;

/*
 * The checks over the requests' records (reqs[0..total-1]) that need no
 * server; each failure goes through fail().  Also counts the handoffs and
 * their latencies.
 */
static void
check_history(int total)
{
	Req		  **byname;
	int		   *count,
			   *start;

	ngranted = nlost = nimmediate = nhandoffs = nneg = fifo_pairs = 0;
	polls = 0;
	last_ret = 0;
	first_send = 1e300;
	for (int i = 0; i < total; i++)
	{
		Req		   *r = &reqs[i];

		if (r->t_send == 0)
			continue;			/* not reached: its thread failed */
		if (r->t_send < first_send)
			first_send = r->t_send;
		if (r->t_rel_ret > last_ret)
			last_ret = r->t_rel_ret;
		if (r->lost)
			nlost++;
		if (r->granted)
			ngranted++;
		if (r->immediate)
			nimmediate++;
		polls += r->polls;
		if (r->granted && r->t_rel_ret > 0 && !r->released)
			fail("request q%d.%d: its release of token %lld returned false",
				 r->thread, r->seq, r->token);
	}
	if (nlost > 0)
		fail("%d requests not granted within %d s (lost)", nlost, timeout_s);
	if (ngranted != total)
		fail("%d of %d requests granted", ngranted, total);

	/* ---- per name: in learn order, tokens grow, one holder at a time ---- */
	count = calloc(nnames, sizeof(int));
	start = calloc(nnames + 1, sizeof(int));
	byname = calloc(total, sizeof(Req *));
	for (int i = 0; i < total; i++)
		if (reqs[i].granted)
			count[reqs[i].name]++;
	for (int n = 0; n < nnames; n++)
		start[n + 1] = start[n] + count[n];
	memset(count, 0, nnames * sizeof(int));
	for (int i = 0; i < total; i++)
		if (reqs[i].granted)
			byname[start[reqs[i].name] + count[reqs[i].name]++] = &reqs[i];

	free(lat_send);
	free(lat_ret);
	lat_send = calloc(total, sizeof(double));
	lat_ret = calloc(total, sizeof(double));
	for (int n = 0; n < nnames; n++)
	{
		Req		  **g = byname + start[n];
		int			k = count[n];

		qsort(g, k, sizeof(Req *), cmp_learn);
		for (int j = 1; j < k; j++)
		{
			if (g[j]->token <= g[j - 1]->token)
				fail("qbench:%d: q%d.%d learned token %lld after q%d.%d learned %lld",
					 n, g[j]->thread, g[j]->seq, g[j]->token,
					 g[j - 1]->thread, g[j - 1]->seq, g[j - 1]->token);
			else if (g[j]->t_learn < g[j - 1]->t_rel_send)
				fail("qbench:%d: q%d.%d learned token %lld %.3f ms before q%d.%d sent the release of %lld",
					 n, g[j]->thread, g[j]->seq, g[j]->token,
					 g[j - 1]->t_rel_send - g[j]->t_learn,
					 g[j - 1]->thread, g[j - 1]->seq, g[j - 1]->token);
		}

		/* handoffs, in token order (the same order when the above holds) */
		qsort(g, k, sizeof(Req *), cmp_token);
		for (int j = 1; j < k; j++)
		{
			if (g[j]->t_send >= g[j - 1]->t_rel_send)
				continue;		/* nobody of ours waited: not a handoff */
			lat_send[nhandoffs] = g[j]->t_learn - g[j - 1]->t_rel_send;
			lat_ret[nhandoffs] = g[j]->t_learn - g[j - 1]->t_rel_ret;
			if (lat_ret[nhandoffs] < 0)
				nneg++;
			nhandoffs++;
		}

		/*
		 * FIFO: token(Q) < token(R) whenever Q's first call returned NULL
		 * before R's first call was sent.  In token order, each R's token
		 * must be above every queued Q's whose first call returned before R's
		 * was sent: compare R with the queued requests after it.
		 */
		if (mode == MODE_ACQUIRE)
			continue;
		for (int j = 0; j < k; j++)
			for (int q = j + 1; q < k; q++)
			{
				if (g[q]->immediate)
					continue;
				fifo_pairs++;
				if (g[q]->t_ret < g[j]->t_send)
					fail("qbench:%d: FIFO: q%d.%d was queued (its first call returned NULL) %.3f ms before "
						 "q%d.%d's first call was sent, but got token %lld after its %lld",
						 n, g[q]->thread, g[q]->seq, g[j]->t_send - g[q]->t_ret,
						 g[j]->thread, g[j]->seq, g[q]->token, g[j]->token);
			}
	}

	free(byname);
	free(count);
	free(start);
}

/*
 * -T: check_history over made-up histories of one name, each with one
 * fault that one check must find, and a clean one it must pass.  Times in
 * ms; r(...) fills one request.
 */
static void
r(Req *q, int seq, bool immediate, long long token, double send, double ret,
  double learn, double rel_send)
{
	memset(q, 0, sizeof(Req));
	q->seq = seq;
	q->immediate = immediate;
	q->granted = q->released = true;
	q->token = token;
	/* (a t_send of 0 marks a request never sent) */
	q->t_send = 1000 + send;
	q->t_ret = 1000 + ret;
	q->t_learn = 1000 + learn;
	q->t_rel_send = 1000 + rel_send;
	q->t_rel_ret = 1000 + rel_send + 1;
}

static int
selftest(void)
{
	Req			h[3];
	int			bad = 0;
	struct
	{
		const char *what;
		int			expect;		/* failures it must find */
	}			cases[] = {
		{"clean: A now, B and C queued in order, granted in order", 0},
		{"FIFO: B queued before C was sent, C granted first", 1},
		{"two holders: B learned its token before A sent its release", 1},
		{"token backwards: B learned after A but has a lower token", 1},
		{"lost: C not granted (and so not all granted)", 2},
		{"release returned false", 1},
	};

	nnames = 1;
	mode = MODE_QUEUE;
	quiet = true;
	for (int c = 0; c < (int) (sizeof(cases) / sizeof(cases[0])); c++)
	{
		int			before = nfailed;
		int			found;

		/* A: granted at once, holds 10..20; B and C queue at 2 and 5 */
		r(&h[0], 0, true, 100, 0, 1, 1, 20);
		r(&h[1], 1, false, 101, 2, 3, 22, 30);
		r(&h[2], 2, false, 102, 5, 6, 32, 40);
		switch (c)
		{
			case 1:
				r(&h[1], 1, false, 102, 2, 3, 42, 50);
				r(&h[2], 2, false, 101, 5, 6, 22, 30);
				break;
			case 2:
				h[1].t_learn = 1015;
				break;
			case 3:
				h[1].token = 99;
				break;
			case 4:
				h[2].granted = h[2].released = false;
				h[2].lost = true;
				h[2].token = 0;
				break;
			case 5:
				h[2].released = false;
				break;
		}
		reqs = h;
		check_history(3);
		found = nfailed - before;
		nfailed = before;
		if (found != cases[c].expect)
		{
			printf("selftest FAILED: %s: %d failures found, %d expected\n",
				   cases[c].what, found, cases[c].expect);
			bad++;
		}
		else
			printf("selftest: %s: %d failures found, as expected\n", cases[c].what, found);
	}
	quiet = false;
	if (bad == 0)
		printf("selftest ok\n");
	return bad == 0 ? 0 : 1;
}

/* one admin query's first value as a number */
static long long
admin_value(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);
	long long	v;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		fprintf(stderr, "queue: %s: %s", sql, PQerrorMessage(conn));
		exit(2);
	}
	v = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

static void
usage(const char *prog)
{
	fprintf(stderr, "usage: %s -d conninfo -a admin_conninfo [-m queue|acquire|try] [-c clients] "
			"[-r requests] [-n names] [-w work_us] [-p poll_min_ms] [-P poll_max_ms] "
			"[-h hold_s] [-t timeout_s] [-U role] [-S pool_size] [-C connects] [-l log]\n", prog);
	exit(2);
}

int
main(int argc, char **argv)
{
	int			opt;
	int			total;
	pthread_t  *threads;
	pthread_t	sampler_thread;
	pthread_attr_t attr;
	PGconn	   *admin;
	long long	dropped_before;
	double		t0,
				t1;
	int			nerrors = 0;

	if (argc == 2 && strcmp(argv[1], "-T") == 0)
		return selftest();
	while ((opt = getopt(argc, argv, "d:a:m:c:r:n:w:p:P:h:t:U:S:C:l:")) != -1)
	{
		switch (opt)
		{
			case 'd':
				conninfo = optarg;
				break;
			case 'a':
				admin_conninfo = optarg;
				break;
			case 'm':
				if (strcmp(optarg, "acquire") == 0)
					mode = MODE_ACQUIRE;
				else if (strcmp(optarg, "try") == 0)
					mode = MODE_TRY;
				else if (strcmp(optarg, "queue") != 0)
					usage(argv[0]);
				break;
			case 'c':
				nclients = atoi(optarg);
				break;
			case 'r':
				nreqs = atoi(optarg);
				break;
			case 'n':
				nnames = atoi(optarg);
				break;
			case 'w':
				work_us = atoi(optarg);
				break;
			case 'p':
				poll_min_ms = atoi(optarg);
				break;
			case 'P':
				poll_max_ms = atoi(optarg);
				break;
			case 'h':
				hold_s = atoi(optarg);
				break;
			case 't':
				timeout_s = atoi(optarg);
				break;
			case 'U':
				role = optarg;
				break;
			case 'S':
				pool_size = atoi(optarg);
				break;
			case 'C':
				max_connects = atoi(optarg);
				break;
			case 'l':
				logpath = optarg;
				break;
			default:
				usage(argv[0]);
		}
	}
	if (!conninfo || !admin_conninfo || !role || nclients < 1 || nreqs < 1 ||
		nnames < 1 || poll_min_ms < 1 || poll_max_ms < poll_min_ms ||
		max_connects < 1 || optind != argc)
		usage(argv[0]);
	/* a request asked for again well within its hold, or the test is wrong */
	if (mode == MODE_QUEUE && poll_max_ms * 3 > hold_s * 1000)
	{
		fprintf(stderr, "queue: -P must be at most a third of -h\n");
		exit(2);
	}

	total = nclients * nreqs;
	reqs = calloc(total, sizeof(Req));
	errors = calloc(nclients, sizeof(char *));
	threads = calloc(nclients, sizeof(pthread_t));

	admin = PQconnectdb(admin_conninfo);
	if (PQstatus(admin) != CONNECTION_OK)
	{
		fprintf(stderr, "queue: admin: %s", PQerrorMessage(admin));
		exit(2);
	}
	dropped_before = admin_value(admin, "SELECT queue_dropped FROM dlock_stats");

	sem_init(&connect_sem, 0, max_connects);
	pthread_barrier_init(&start_barrier, NULL, nclients + 1);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	if (pthread_create(&sampler_thread, NULL, sampler, NULL) != 0)
	{
		perror("pthread_create");
		exit(2);
	}
	for (int t = 0; t < nclients; t++)
		if (pthread_create(&threads[t], &attr, client, (void *) (long) t) != 0)
		{
			perror("pthread_create");
			exit(2);
		}
	t0 = now_ms();
	pthread_barrier_wait(&start_barrier);
	t1 = now_ms();
	printf("connect_s=%.1f\n", (t1 - t0) / 1e3);
	for (int t = 0; t < nclients; t++)
		pthread_join(threads[t], NULL);
	stop_sampler = 1;
	pthread_join(sampler_thread, NULL);

	/* ---- per request ---- */
	for (int t = 0; t < nclients; t++)
		if (errors[t])
		{
			if (nerrors++ < 5)
				fprintf(stderr, "queue: thread %d: %s", t, errors[t]);
		}
	if (nerrors > 0)
		fail("%d client threads stopped on an error (first ones above)", nerrors);
	check_history(total);

	/* ---- the server ---- */
	if (s_samples == 0)
		fail("no pg_stat_activity sample");
	if (mode == MODE_QUEUE)
	{
		long long	dropped = admin_value(admin, "SELECT queue_dropped FROM dlock_stats") - dropped_before;

		if (s_queued == 0)
			fail("no request was ever seen queued (%d samples): the run did not queue", s_samples);
		if (s_app_waiting > 0)
			fail("up to %d backends of role %s waited in a dlock call at once", s_app_waiting, role);
		if (pool_size > 0 && s_app_conns > pool_size)
			fail("up to %d server connections of role %s at once, the pool is %d", s_app_conns, role, pool_size);
		if (dropped != 0)
			fail("%lld queued requests dropped for their hold", dropped);
		if (nhandoffs == 0)
			fail("no handoff to a waiting request: nothing was measured");
	}
	if (nerrors == 0 && nlost == 0)
	{
		long long	left = admin_value(admin,
									   "SELECT (SELECT count(*) FROM dlock_locks WHERE name LIKE 'qbench:%')"
									   " + (SELECT count(*) FROM dlock_waiters WHERE name LIKE 'qbench:%')");

		if (left != 0)
			fail("%lld leases or queued requests left at the end", left);
	}
	PQfinish(admin);

	if (logpath)
	{
		FILE	   *f = fopen(logpath, "w");

		if (!f)
		{
			perror(logpath);
			exit(2);
		}
		fprintf(f, "thread seq name token immediate polls t_send t_ret t_learn t_rel_send t_rel_ret released lost\n");
		for (int i = 0; i < total; i++)
		{
			Req		   *r = &reqs[i];

			fprintf(f, "%d %d %d %lld %d %d %.3f %.3f %.3f %.3f %.3f %d %d\n",
					r->thread, r->seq, r->name, r->token, r->immediate, r->polls,
					r->t_send - first_send, r->t_ret - first_send, r->t_learn - first_send,
					r->t_rel_send - first_send, r->t_rel_ret - first_send, r->released, r->lost);
		}
		fclose(f);
	}

	qsort(lat_send, nhandoffs, sizeof(double), cmp_double);
	qsort(lat_ret, nhandoffs, sizeof(double), cmp_double);
	{
		double		span = (last_ret - first_send) / 1e3;

		printf("mode=%s clients=%d requests=%d names=%d work_us=%d poll_ms=%d..%d\n",
			   mode_names[mode], nclients, total, nnames, work_us,
			   poll_min_ms, poll_max_ms);
		printf("run_s=%.2f granted=%d immediate=%d lost=%d errors=%d polls=%lld polls_per_s=%.0f\n",
			   span, ngranted, nimmediate, nlost, nerrors, polls, span > 0 ? polls / span : 0);
		printf("grants_per_s=%.1f handoffs=%d handoffs_per_s=%.1f\n",
			   span > 0 ? ngranted / span : 0, nhandoffs, span > 0 ? nhandoffs / span : 0);
		printf("handoff_from_send_ms p50=%.2f p90=%.2f p99=%.2f max=%.2f\n",
			   pct(lat_send, nhandoffs, 0.5), pct(lat_send, nhandoffs, 0.9),
			   pct(lat_send, nhandoffs, 0.99), pct(lat_send, nhandoffs, 1));
		printf("handoff_from_return_ms p50=%.2f p90=%.2f p99=%.2f max=%.2f negative=%d\n",
			   pct(lat_ret, nhandoffs, 0.5), pct(lat_ret, nhandoffs, 0.9),
			   pct(lat_ret, nhandoffs, 0.99), pct(lat_ret, nhandoffs, 1), nneg);
		printf("samples=%d max_role_server_conns=%d max_role_dlock_waits=%d max_client_backends=%d max_queued=%lld fifo_pairs=%d\n",
			   s_samples, s_app_conns, s_app_waiting, s_backends, s_queued, fifo_pairs);
	}
	if (nfailed == 0)
		printf("check ok\n");
	return nfailed == 0 ? 0 : 1;
}
