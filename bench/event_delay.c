/*
 * event_delay.c
 *		How long a change event takes from its commit to a listener.
 *
 * Two connections: L runs LISTEN dlock; C, with dlock.events = on and
 * memory-only leases, takes and releases the name bench_event_delay in turn.
 * Each call commits on its own (autocommit), so when its result is read the
 * change has committed; the delay of its event is from then (t1) to when L
 * has read that event (t2): the sender's pause and transaction, NOTIFY's
 * signal to L's backend, and the trip to the client.  Events of other names
 * (a load that runs meanwhile) are read and skipped.
 *
 * usage: event_delay "conninfo" [iterations]
 *   iterations: measured events (default 1000; half grants, half releases)
 * Output: one line, "key=value" pairs, times in microseconds.
 *
 * usage: event_delay "conninfo" listen
 *   A listener for a throughput run (bench/run.sh): LISTEN dlock, read and
 *   count every notification until SIGTERM, then print "events=N".
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#define NAME		"bench_event_delay"
#define WAIT_MS		10000		/* for one event, at most */

static volatile sig_atomic_t stop = 0;

static void
on_term(int sig)
{
	stop = 1;
}

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void
die(PGconn *conn, const char *what)
{
	fprintf(stderr, "event_delay: %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

static void
run(PGconn *conn, const char *sql, ExecStatusType expect)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != expect)
		die(conn, sql);
	PQclear(res);
}

/* Reads L's notifications until the event `kind` of NAME arrives. */
static void
await_event(PGconn *listener, const char *kind)
{
	char		want[64];
	double		deadline = now_us() + WAIT_MS * 1000.0;

	snprintf(want, sizeof(want), "{\"event\": \"%s\", \"name\": \"" NAME "\"", kind);
	for (;;)
	{
		PGnotify   *n;
		struct pollfd pfd = {PQsocket(listener), POLLIN, 0};

		while ((n = PQnotifies(listener)) != NULL)
		{
			int			found = strncmp(n->extra, want, strlen(want)) == 0;

			PQfreemem(n);
			if (found)
				return;
		}
		if (now_us() > deadline)
			die(NULL, "an event did not arrive within 10 s\n");
		if (poll(&pfd, 1, 100) < 0 && errno != EINTR)
			die(NULL, "poll failed\n");
		if (!PQconsumeInput(listener))
			die(listener, "reading notifications");
	}
}

/* Counts L's notifications until SIGTERM. */
static void
count_events(PGconn *listener)
{
	long		count = 0;

	signal(SIGTERM, on_term);
	for (;;)
	{
		PGnotify   *n;
		struct pollfd pfd = {PQsocket(listener), POLLIN, 0};

		while ((n = PQnotifies(listener)) != NULL)
		{
			count++;
			PQfreemem(n);
		}
		if (stop)
			break;				/* after counting what was read last */
		if (poll(&pfd, 1, 100) < 0 && errno != EINTR)
			die(NULL, "poll failed\n");
		if (!PQconsumeInput(listener))
			die(listener, "reading notifications");
	}
	printf("events=%ld\n", count);
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

static double
pct(const double *v, int n, double p)
{
	int			i = (int) (p * n + 0.999999) - 1;	/* nearest rank */

	return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

int
main(int argc, char **argv)
{
	const char *conninfo = argc > 1 ? argv[1] : "";
	int			iters = argc > 2 ? atoi(argv[2]) : 1000;
	PGconn	   *listener = PQconnectdb(conninfo);
	PGconn	   *client;
	double	   *delay;
	double		sum = 0;
	int			n = 0;

	if (PQstatus(listener) != CONNECTION_OK)
		die(listener, "connecting");
	run(listener, "LISTEN dlock", PGRES_COMMAND_OK);
	if (argc > 2 && strcmp(argv[2], "listen") == 0)
	{
		count_events(listener);
		PQfinish(listener);
		return 0;
	}
	if (iters < 2)
		iters = 2;
	client = PQconnectdb(conninfo);
	if (PQstatus(client) != CONNECTION_OK)
		die(client, "connecting");
	delay = malloc(sizeof(double) * iters);
	run(client, "SET dlock.events = on", PGRES_COMMAND_OK);
	run(client, "SET dlock.durable = off", PGRES_COMMAND_OK);
	run(client, "SELECT dlock_release('" NAME "', 'probe')", PGRES_TUPLES_OK);
	while (n < iters)
	{
		int			grant = (n % 2 == 0);
		double		t1;

		run(client, grant ? "SELECT dlock_try('" NAME "', '30 s', 'probe')"
			: "SELECT dlock_release('" NAME "', 'probe')", PGRES_TUPLES_OK);
		t1 = now_us();
		await_event(listener, grant ? "granted" : "released");
		delay[n] = now_us() - t1;
		sum += delay[n];
		n++;
	}
	qsort(delay, n, sizeof(double), cmp_double);
	printf("n=%d p50=%.0f p90=%.0f p99=%.0f max=%.0f mean=%.0f\n", n,
		   pct(delay, n, 0.50), pct(delay, n, 0.90), pct(delay, n, 0.99),
		   delay[n - 1], sum / n);
	PQfinish(client);
	PQfinish(listener);
	return 0;
}
