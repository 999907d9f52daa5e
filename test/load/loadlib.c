/*
 * loadlib.c
 *		What the load drivers of test/load share; see loadlib.h.
 */
#include "loadlib.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

/* ---------- options ---------- */

bool
load_option(LoadOptions *o, int opt, const char *arg)
{
	switch (opt)
	{
		case 'd':
			o->conninfo = arg;
			return true;
		case 'c':
			o->clients = atoi(arg);
			return true;
		case 't':
			o->seconds = atoi(arg);
			return true;
		case 's':
			o->seed = strtoull(arg, NULL, 10);
			return true;
		case 'n':
			o->names = atoi(arg);
			return true;
		default:
			return false;
	}
}

/* ---------- clocks ---------- */

int64_t
load_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
load_sleep_us(int64_t us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---------- random numbers ---------- */

/* splitmix64: tiny, deterministic, good enough */
uint64_t
load_splitmix64(uint64_t *state)
{
	uint64_t	z = (*state += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

int
load_splitmix_int(uint64_t *state, int n)
{
	return (int) (load_splitmix64(state) % (uint64_t) n);
}

/* ---------- connections and queries ---------- */

PGconn *
load_connect(const char *conninfo, const char *dbname, const char *user,
			 const char *appname)
{
	/* libpq expands the first dbname and ignores NULL or empty values */
	const char *keys[] = {"dbname", "dbname", "user", "application_name", NULL};
	const char *vals[] = {conninfo, dbname, user, appname, NULL};

	return PQconnectdbParams(keys, vals, 1);
}

bool
load_ok(const PGresult *res)
{
	ExecStatusType s = PQresultStatus(res);

	return s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK;
}

const char *load_must_fmt = "query failed: %s\n%s";

static PGresult *
must_succeed(PGconn *conn, const char *sql, PGresult *res)
{
	if (!load_ok(res))
	{
		fprintf(stderr, load_must_fmt, sql, PQerrorMessage(conn));
		exit(2);
	}
	return res;
}

PGresult *
load_must(PGconn *conn, const char *sql)
{
	return must_succeed(conn, sql, PQexec(conn, sql));
}

PGresult *
load_must_params(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	return must_succeed(conn, sql,
						PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0));
}

int64_t
load_int64(const PGresult *res, int row, int col)
{
	return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

const char *
load_i64(char *buf, int64_t v)
{
	sprintf(buf, "%" PRId64, v);
	return buf;
}

const char *
load_sqlstate(const PGresult *res, const char *none)
{
	const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return s ? s : none;
}

bool
load_is_state(const PGresult *res, const char *state)
{
	const char *s = load_sqlstate(res, NULL);

	return s != NULL && strcmp(s, state) == 0;
}

void
load_cancel(PGconn *conn)
{
	PGcancel   *cn = PQgetCancel(conn);
	char		errbuf[256];

	if (cn)
	{
		PQcancel(cn, errbuf, sizeof(errbuf));
		PQfreeCancel(cn);
	}
}

/* ---------- client processes ---------- */

void *
load_shared(size_t size, bool noreserve)
{
	void	   *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
						 MAP_SHARED | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0), -1, 0);

	if (p == MAP_FAILED)
	{
		perror("mmap");
		exit(2);
	}
	return p;
}

int
load_reap(int n, const pid_t *pids, int *status, int64_t deadline,
		  void (*on_hang) (int i, pid_t pid))
{
	bool	   *done = calloc(n, sizeof(bool));
	int			running = n;
	int			hung = 0;

	for (int i = 0; i < n; i++)
		status[i] = -1;
	while (running > 0)
	{
		int			st;
		pid_t		pid = waitpid(-1, &st, WNOHANG);

		if (pid > 0)
		{
			for (int i = 0; i < n; i++)
				if (pids[i] == pid && !done[i])
				{
					status[i] = st;
					done[i] = true;
					running--;
				}
			continue;
		}
		if (pid < 0 && errno == ECHILD)
			break;
		if (load_now_us() > deadline)
		{
			for (int i = 0; i < n; i++)
				if (!done[i])
				{
					if (on_hang)
						on_hang(i, pids[i]);
					kill(pids[i], SIGKILL);
					hung++;
				}
			deadline = INT64_MAX;
		}
		load_sleep_us(20000);
	}
	free(done);
	return hung;
}
