/*
 * test/ha/client.c
 *		One load client of the HA harness (test/ha/run.sh).
 *
 * usage: client ID CONNINFO HISTORY SECONDS TTL_SECONDS NAME...
 *
 * Reaches the current leader through CONNINFO (a libpq multi-host string with
 * target_session_attrs=read-write), and until SECONDS have passed (or
 * SIGTERM) takes a lease on a random NAME as owner "cID", writes its fenced
 * row (table ha_NAME, one row, trigger dlock_fenced(NAME, 'token')) a few
 * times in the same transaction as dlock_fence, renews it every TTL/3 and
 * releases it.  Every call goes to HISTORY, one line each:
 *
 *	mono_start mono_end wall_start wall_end client op name token result host
 *
 * (monotonic and wall clock in seconds; op is grant, renew, release, write,
 * connect or grace; result is the token, the new expiry's epoch, t/f, the
 * row's previous token for a write, the end's epoch of the server's grace
 * after a promotion (dlock_grace(), read after every connect), NULL, or
 * ERR:<SQLSTATE or "conn">).  Every call
 * has a deadline of its own, enforced here (a frozen server still accepts TCP),
 * after which the connection is dropped.  On a lost connection the client
 * reconnects and goes on with the same owner: a grant is retried (re-acquire
 * by the same owner is idempotent) and a renewal is tried again on the new
 * leader, which tells whether the lease survived the failover.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define CALL_DEADLINE 6.0		/* seconds a call may take */

static PGconn *conn;
static FILE *hist;
static int	client_id;
static volatile sig_atomic_t stop;

static double
clock_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
on_term(int sig)
{
	stop = 1;
}

static void
sleep_s(double s)
{
	struct timespec ts = {(time_t) s, (long) ((s - (time_t) s) * 1e9)};

	nanosleep(&ts, NULL);
}

static void
record(double m0, double w0, const char *op, const char *name, long long token,
	   const char *result)
{
	fprintf(hist, "%.6f %.6f %.6f %.6f c%d %s %s %lld %s %s\n",
			m0, clock_s(CLOCK_MONOTONIC), w0, clock_s(CLOCK_REALTIME),
			client_id, op, name, token, result,
			conn && PQstatus(conn) == CONNECTION_OK ? PQhost(conn) : "-");
	fflush(hist);
}

static void
drop_conn(void)
{
	if (conn)
		PQfinish(conn);
	conn = NULL;
}

static void call(const char *op, const char *name, long long token,
				 const char *sql, char *out, size_t outlen);

static void
ensure_conn(const char *conninfo)
{
	char		r[64];

	while (!conn && !stop)
	{
		double		m0 = clock_s(CLOCK_MONOTONIC),
					w0 = clock_s(CLOCK_REALTIME);

		conn = PQconnectdb(conninfo);
		if (PQstatus(conn) != CONNECTION_OK)
		{
			record(m0, w0, "connect", "-", 0, "ERR:conn");
			drop_conn();
			sleep_s(0.3);
			continue;
		}
		record(m0, w0, "connect", "-", 0, "ok");
		call("grace", "-", 0, "SELECT extract(epoch FROM dlock_grace())", r, sizeof(r));
	}
}

/*
 * Runs sql (one or more statements) with a deadline.  Returns the value of the
 * first column of the last row returned ("NULL" for a null), or "ERR:..."; the
 * result is written into out.  A connection lost or a deadline passed drops
 * the connection.
 */
static void
run(const char *sql, char *out, size_t outlen)
{
	double		deadline = clock_s(CLOCK_MONOTONIC) + CALL_DEADLINE;
	PGresult   *res;
	int			lost = 0;

	out[0] = '\0';
	if (!conn || !PQsendQuery(conn, sql))
	{
		snprintf(out, outlen, "ERR:conn");
		drop_conn();
		return;
	}
	for (;;)
	{
		while (PQisBusy(conn))
		{
			struct pollfd pfd = {PQsocket(conn), POLLIN, 0};
			double		left = deadline - clock_s(CLOCK_MONOTONIC);

			if (left <= 0 || (poll(&pfd, 1, (int) (left * 1000) + 1) < 0 && errno != EINTR))
			{
				snprintf(out, outlen, "ERR:conn");
				drop_conn();
				return;
			}
			if (!PQconsumeInput(conn))
			{
				snprintf(out, outlen, "ERR:conn");
				drop_conn();
				return;
			}
		}
		res = PQgetResult(conn);
		if (!res)
			break;
		switch (PQresultStatus(res))
		{
			case PGRES_TUPLES_OK:
				if (strncmp(out, "ERR:", 4) == 0)
					break;
				if (PQntuples(res) > 0 && !PQgetisnull(res, PQntuples(res) - 1, 0))
					snprintf(out, outlen, "%s", PQgetvalue(res, PQntuples(res) - 1, 0));
				else
					snprintf(out, outlen, "NULL");
				break;
			case PGRES_COMMAND_OK:
				break;
			default:
				{
					const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);

					snprintf(out, outlen, "ERR:%s", st ? st : "conn");
					if (!st)
						lost = 1;
				}
		}
		PQclear(res);
	}
	if (out[0] == '\0')
		snprintf(out, outlen, "ok");
	if (lost || PQstatus(conn) != CONNECTION_OK)
	{
		if (strncmp(out, "ERR:", 4) != 0)
			snprintf(out, outlen, "ERR:conn");
		drop_conn();
	}
}

/* a call recorded in the history; returns its result in out */
static void
call(const char *op, const char *name, long long token, const char *sql,
	 char *out, size_t outlen)
{
	double		m0 = clock_s(CLOCK_MONOTONIC),
				w0 = clock_s(CLOCK_REALTIME);

	run(sql, out, outlen);
	/* a read-only server (a demoted leader) counts as a lost connection */
	if (strcmp(out, "ERR:25006") == 0)
		drop_conn();
	record(m0, w0, op, name, token, out);
}

static int
is_conn_err(const char *r)
{
	return strcmp(r, "ERR:conn") == 0 || strncmp(r, "ERR:57P", 7) == 0 ||
		strncmp(r, "ERR:08", 6) == 0 || strcmp(r, "ERR:25006") == 0;
}

int
main(int argc, char **argv)
{
	const char *conninfo;
	double		end,
				ttl;
	char		owner[32],
				sql[1024],
				r[256];
	int			nnames;

	if (argc < 7)
	{
		fprintf(stderr, "usage: client ID CONNINFO HISTORY SECONDS TTL NAME...\n");
		return 2;
	}
	client_id = atoi(argv[1]);
	conninfo = argv[2];
	hist = fopen(argv[3], "a");
	if (!hist)
	{
		perror(argv[3]);
		return 1;
	}
	end = clock_s(CLOCK_MONOTONIC) + atof(argv[4]);
	ttl = atof(argv[5]);
	nnames = argc - 6;
	snprintf(owner, sizeof(owner), "c%d", client_id);
	signal(SIGTERM, on_term);
	signal(SIGPIPE, SIG_IGN);
	srandom(getpid());

	while (!stop && clock_s(CLOCK_MONOTONIC) < end)
	{
		const char *name = argv[6 + random() % nnames];
		long long	token = 0;
		int			tries;

		ensure_conn(conninfo);
		if (stop)
			break;
		/* take the lease, retrying with the same owner after a lost connection */
		snprintf(sql, sizeof(sql),
				 "SELECT dlock_acquire(name => '%s', ttl => make_interval(secs => %g), "
				 "timeout => '1 second', owner => '%s')", name, ttl, owner);
		for (tries = 0; tries < 20 && !stop; tries++)
		{
			ensure_conn(conninfo);
			call("grant", name, 0, sql, r, sizeof(r));
			if (!is_conn_err(r))
				break;
		}
		if (strncmp(r, "ERR:", 4) == 0 || strcmp(r, "NULL") == 0)
		{
			sleep_s(0.05 + (random() % 100) / 1000.0);
			continue;
		}
		token = atoll(r);

		/* hold it: fenced writes and renewals, 1 to 4 rounds */
		for (int round = 1 + random() % 4; round > 0 && !stop; round--)
		{
			int			held = 1;

			snprintf(sql, sizeof(sql),
					 "BEGIN; SELECT dlock_fence(name => '%s', token => %lld); "
					 "UPDATE ha_%s r SET token = %lld, seq = r.seq + 1, writer = '%s' "
					 "FROM (SELECT token AS prev FROM ha_%s FOR UPDATE) p RETURNING p.prev; COMMIT",
					 name, token, name, token, owner, name);
			call("write", name, token, sql, r, sizeof(r));
			if (strcmp(r, "ERR:DL001") == 0)
				break;			/* the lease is gone */
			sleep_s(ttl / 3);
			snprintf(sql, sizeof(sql),
					 "SELECT extract(epoch FROM dlock_renew(name => '%s', "
					 "ttl => make_interval(secs => %g), owner => '%s'))",
					 name, ttl, owner);
			for (tries = 0; tries < 20 && !stop; tries++)
			{
				ensure_conn(conninfo);
				call("renew", name, token, sql, r, sizeof(r));
				if (!is_conn_err(r))
					break;
			}
			if (strncmp(r, "ERR:", 4) == 0 || strcmp(r, "NULL") == 0)
				held = 0;
			if (!held)
				break;
		}
		snprintf(sql, sizeof(sql),
				 "SELECT dlock_release(name => '%s', owner => '%s', token => %lld)",
				 name, owner, token);
		ensure_conn(conninfo);
		call("release", name, token, sql, r, sizeof(r));
	}
	drop_conn();
	fclose(hist);
	return 0;
}
