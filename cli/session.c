/*
 * session.c
 *		The libpq session of the dlock command: the connection (asynchronous,
 *		with keepalives and a deadline), one query at a time with a deadline,
 *		the last error for messages, and the SQL.
 *
 * The SQL names the extension's objects with its schema, found once on the
 * first connection, and the built-in ones with pg_catalog, so the server's
 * search_path does not matter (setting search_path instead would not survive
 * PgBouncer's transaction pooling).
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop.h"
#include "msg.h"
#include "session.h"

#define DEFAULT_CONNECT_MS	30000	/* when connect_timeout is not set */

const char *conninfo = NULL;
PGconn	   *conn = NULL;
char		last_error[1024];

/* whether the extension's schema is known (and the queries built) */
static bool have_schema = false;

/* the extension's version in the database, as installed (e.g. "1.2") */
static char ext_version[32];

/* the server's clock when the schema was looked up (session.h) */
char		first_server_clock[40];

/*
 * Copies a libpq message into buf as one line: no trailing newline, and
 * newlines and tabs turned into single spaces.
 */
static void
one_line(char *buf, size_t len, const char *text)
{
	char	   *out = buf;
	bool		space = false;

	if (text == NULL)
		text = "unknown error";

	for (; *text &&out < buf + len - 1; text ++)
	{
		if (*text == '\n' || *text == '\t' || *text == ' ')
		{
			if (!space)
				*out++ = ' ';
			space = true;
		}
		else
		{
			*out++ = *text;
			space = false;
		}
	}
	while (out > buf && out[-1] == ' ')
		out--;
	*out = '\0';
}

static void
set_error(const char *text)
{
	one_line(last_error, sizeof(last_error), text);
}

/* Server notices and warnings go to stderr with our prefix. */
static void
notice_processor(void *arg, const char *message)
{
	char		buf[1024];

	(void) arg;
	one_line(buf, sizeof(buf), message);
	msg("server: %s", buf);
}

/* The interval text PostgreSQL reads: "1500 milliseconds". */
void
interval_text(ms_t ms, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRId64 " milliseconds", ms);
}

/* ---------------------------------------------------------------- libpq */

void
close_conn(void)
{
	if (conn != NULL)
		PQfinish(conn);
	conn = NULL;
}

/* connect_timeout of the connection's settings, or our default. */
static ms_t
connect_timeout_ms(PGconn *c)
{
	PQconninfoOption *opts = PQconninfo(c);
	ms_t		result = DEFAULT_CONNECT_MS;

	if (opts == NULL)
		return result;
	for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
	{
		if (strcmp(o->keyword, "connect_timeout") == 0 && o->val && o->val[0])
		{
			long		v = strtol(o->val, NULL, 10);

			if (v > 0)
				result = (ms_t) (v < 2 ? 2 : v) * 1000;
		}
	}
	PQconninfoFree(opts);
	return result;
}

static bool find_schema(ms_t deadline);

/*
 * Connects (asynchronously, so signals and kill deadlines are served while
 * it runs).  deadline 0: connect_timeout or DEFAULT_CONNECT_MS from now.
 * The first connection also finds the extension's schema (and exits if it
 * is not installed).  Sets conn; returns false and sets last_error on
 * failure.
 */
bool
connect_db(ms_t deadline)
{
	/*
	 * Keepalives notice a dead TCP peer within about 10 s; they come before
	 * dbname, so a conninfo string that sets them wins.
	 */
	const char *keys[8];
	const char *vals[8];
	int			n = 0;
	PostgresPollingStatusType st;

	close_conn();
	keys[n] = "keepalives_idle";
	vals[n++] = "5";
	keys[n] = "keepalives_interval";
	vals[n++] = "2";
	keys[n] = "keepalives_count";
	vals[n++] = "3";
	keys[n] = "fallback_application_name";
	vals[n++] = "dlock";
	if (conninfo != NULL)
	{
		keys[n] = "dbname";
		vals[n++] = conninfo;
	}
	keys[n] = NULL;
	vals[n] = NULL;

	conn = PQconnectStartParams(keys, vals, 1);
	if (conn == NULL)
	{
		set_error("out of memory");
		return false;
	}
	if (PQstatus(conn) == CONNECTION_BAD)
	{
		set_error(PQerrorMessage(conn));
		close_conn();
		return false;
	}
	if (deadline == 0)
		deadline = now_ms() + connect_timeout_ms(conn);

	st = PGRES_POLLING_WRITING;
	for (;;)
	{
		int			r;

		if (st == PGRES_POLLING_OK)
			break;
		if (st == PGRES_POLLING_FAILED)
		{
			set_error(PQerrorMessage(conn));
			close_conn();
			return false;
		}
		r = wait_io(PQsocket(conn), st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
					deadline);
		if (r <= 0)
		{
			set_error(r == 0 ? "timed out connecting to the server" : "interrupted");
			close_conn();
			return false;
		}
		st = PQconnectPoll(conn);
	}
	PQsetNoticeProcessor(conn, notice_processor, NULL);
	if (PQsetnonblocking(conn, 1) != 0)
	{
		set_error(PQerrorMessage(conn));
		close_conn();
		return false;
	}
	if (!have_schema && !find_schema(deadline))
		return false;
	return true;
}

/*
 * Runs one parameterised query (text parameters) on conn.  Unless it returns
 * Q_OK, the connection is closed, because its state is unknown, and
 * last_error says why.
 */
QStatus
run_query(const char *sql, int nparams, const char *const *values, ms_t deadline,
		  PGresult **res)
{
	PGresult   *r;

	*res = NULL;
	if (conn == NULL)
	{
		set_error("not connected");
		return Q_CONNLOST;
	}
	if (!PQsendQueryParams(conn, sql, nparams, NULL, values, NULL, NULL, 0))
	{
		set_error(PQerrorMessage(conn));
		close_conn();
		return Q_CONNLOST;
	}
	for (;;)
	{
		int			f = PQflush(conn);
		int			w;

		if (f == 0)
			break;
		if (f < 0)
		{
			set_error(PQerrorMessage(conn));
			close_conn();
			return Q_CONNLOST;
		}
		w = wait_io(PQsocket(conn), POLLOUT | POLLIN, deadline);
		if (w <= 0)
			goto not_done;
		if (!PQconsumeInput(conn))
		{
			set_error(PQerrorMessage(conn));
			close_conn();
			return Q_CONNLOST;
		}
	}
	for (;;)
	{
		while (PQisBusy(conn))
		{
			int			w = wait_io(PQsocket(conn), POLLIN, deadline);

			if (w <= 0)
				goto not_done;
			if (!PQconsumeInput(conn))
			{
				set_error(PQerrorMessage(conn));
				if (*res)
					PQclear(*res);
				*res = NULL;
				close_conn();
				return Q_CONNLOST;
			}
		}
		r = PQgetResult(conn);
		if (r == NULL)
			break;
		if (*res == NULL)
			*res = r;
		else
			PQclear(r);
	}
	if (PQstatus(conn) == CONNECTION_BAD || *res == NULL)
	{
		set_error(*res ? PQresultErrorMessage(*res) : PQerrorMessage(conn));
		if (*res)
			PQclear(*res);
		*res = NULL;
		close_conn();
		return Q_CONNLOST;
	}
	if (PQresultStatus(*res) != PGRES_TUPLES_OK)
		set_error(PQresultErrorMessage(*res));
	return Q_OK;

not_done:
	if (*res)
		PQclear(*res);
	*res = NULL;
	if (io_abandoned())
	{
		set_error("interrupted");
		close_conn();
		return Q_ABANDONED;
	}
	set_error("no answer from the server in time");
	close_conn();
	return Q_TIMEOUT;
}

/* Whether a Q_OK result is an error of SQLSTATE class 22 (bad argument). */
bool
is_argument_error(PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return state != NULL && strncmp(state, "22", 2) == 0;
}

/* ---------------------------------------------------------------- the SQL */

/*
 * The SQL does not depend on the server's search_path: the extension's
 * objects are named with its schema, built-in functions, operators and the
 * type text with pg_catalog (the other type names used are keywords, which
 * always mean pg_catalog's types).
 */
#define OP(o) " OPERATOR(pg_catalog." o ") "

/* the extension's schema, quoted as an identifier; the server's clock */
static const char *const sql_schema =
"SELECT pg_catalog.quote_ident(n.nspname), e.extversion,"
" EXTRACT(epoch FROM pg_catalog.clock_timestamp())::pg_catalog.text"
" FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n"
" ON n.oid" OP("=") "e.extnamespace WHERE e.extname" OP("=") "'dlock'";

/* @ stands for the extension's schema */
static const char *const sql_templates[NUM_SQL] = {
	[SQL_TRY] =
	"SELECT @.dlock_try($1, $2::interval, $3, $4, $5::integer)",
	[SQL_ACQUIRE] =
	"SELECT @.dlock_acquire($1, $2::interval, $3::interval, $4, $5, $6::integer)",
	[SQL_TRY_12] =
	"SELECT @.dlock_try($1, $2::interval, $3, $4, $5::integer,"
	" lifetime => $6, min_hold => $7::interval)",
	[SQL_ACQUIRE_12] =
	"SELECT @.dlock_acquire($1, $2::interval, $3::interval, $4, $5, $6::integer,"
	" lifetime => $7, min_hold => $8::interval)",
	[SQL_RENEW] =
	"SELECT @.dlock_renew($1, $2::interval, $3)",
	[SQL_RELEASE] =
	"SELECT @.dlock_release($1, $2, $3::bigint)",
	[SQL_HOLDER] =
	"SELECT owner, token, pg_catalog.round(EXTRACT(epoch FROM expires_at" OP("-")
	"pg_catalog.clock_timestamp())::numeric, 1), waiters"
	" FROM @.dlock_locks WHERE name" OP("=") "$1",
	[SQL_STATUS] =
	"SELECT name, state, owner, token, pid, since, expires, remaining FROM ("
	" SELECT name, 0 AS pos,"
	"  'holder'" OP("||") "CASE WHEN mode" OP("=") "'shared' THEN ' (shared)'"
	"  WHEN permits IS NOT NULL THEN ' (of '" OP("||") "permits" OP("||") "')'"
	"  ELSE '' END"
	/* released within its minimum hold (1.2; as a whole row, for 1.0's view) */
	"  " OP("||") "CASE WHEN (pg_catalog.to_jsonb(l)" OP("->>") "'released_at') IS NOT NULL"
	"  THEN ', released' ELSE '' END AS state,"
	"  owner, token::pg_catalog.text AS token, pid::pg_catalog.text AS pid,"
	"  pg_catalog.to_char(granted_at, 'YYYY-MM-DD HH24:MI:SS') AS since,"
	"  pg_catalog.to_char(expires_at, 'YYYY-MM-DD HH24:MI:SS') AS expires,"
	"  pg_catalog.round(EXTRACT(epoch FROM expires_at" OP("-") "pg_catalog.clock_timestamp())"
	"   ::numeric, 1)::pg_catalog.text" OP("||") "'s' AS remaining"
	" FROM @.dlock_locks l WHERE $1::pg_catalog.text IS NULL OR name" OP("=") "$1"
	" UNION ALL"
	" SELECT name, queue_position,"
	"  'waiting '" OP("||") "queue_position"
	"  " OP("||") "CASE WHEN mode" OP("=") "'shared' THEN ' (shared)' ELSE '' END,"
	"  owner, NULL, pid::pg_catalog.text,"
	"  pg_catalog.to_char(waiting_since, 'YYYY-MM-DD HH24:MI:SS'),"
	"  pg_catalog.to_char(deadline, 'YYYY-MM-DD HH24:MI:SS'),"
	"  pg_catalog.round(EXTRACT(epoch FROM deadline" OP("-") "pg_catalog.clock_timestamp())"
	"   ::numeric, 1)::pg_catalog.text" OP("||") "'s'"
	" FROM @.dlock_waiters WHERE $1::pg_catalog.text IS NULL OR name" OP("=") "$1"
	") s ORDER BY name, pos, pg_catalog.length(token), token",
	/*
	 * How many of the backends in $1 still run, and the server's clock after
	 * it looked (an aggregate's output is computed after its input is read).
	 */
	[SQL_BACKENDS_LEFT] =
	"SELECT pg_catalog.count(*),"
	" EXTRACT(epoch FROM pg_catalog.clock_timestamp())::pg_catalog.text"
	" FROM pg_catalog.pg_stat_activity WHERE pid" OP("=") "ANY ($1::integer[])",

	/*
	 * The lease on $1 of owner $2 granted between $4 and $5 (server clock,
	 * epoch seconds) whose backend is gone (pid NULL, extension 1.2) or is
	 * one of $3.
	 */
	[SQL_GRANTED_TO] =
	"SELECT token FROM @.dlock_locks"
	" WHERE name" OP("=") "$1 AND owner" OP("=") "$2"
	" AND (pid IS NULL OR pid" OP("=") "ANY ($3::integer[]))"
	" AND EXTRACT(epoch FROM granted_at) BETWEEN $4::numeric AND $5::numeric",
	[SQL_ENQUEUE] =
	"SELECT @.dlock_enqueue($1, $2::interval, $3, $4, $5::integer, $6::interval)",
	/* whether a queued request left, and the server's clock after it did */
	[SQL_DEQUEUE] =
	"SELECT @.dlock_dequeue($1, $2),"
	" EXTRACT(epoch FROM pg_catalog.clock_timestamp())::pg_catalog.text",
};

/* the queries, once the schema is known */
char	   *queries[NUM_SQL];

/*
 * Finds the extension's schema on a new connection (once) and fills in
 * queries[].  Returns false if the connection failed (closed, last_error
 * set); exits if the extension is not installed.
 */
static bool
find_schema(ms_t deadline)
{
	PGresult   *res;
	const char *schema;

	if (run_query(sql_schema, 0, NULL, deadline, &res) != Q_OK)
		return false;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		msg("cannot look up the dlock extension: %s", last_error);
		exit(EXIT_SERVER);
	}
	if (PQntuples(res) != 1)
	{
		msg("the dlock extension is not installed in database \"%s\" (CREATE EXTENSION dlock)",
			PQdb(conn));
		exit(EXIT_SERVER);
	}
	schema = PQgetvalue(res, 0, 0);
	for (int i = 0; i < NUM_SQL; i++)
	{
		const char *t = sql_templates[i];
		size_t		len = strlen(t) + 1;
		char	   *out;

		for (const char *c = t; *c; c++)
			if (*c == '@')
				len += strlen(schema);
		queries[i] = out = malloc(len);
		if (out == NULL)
		{
			msg("out of memory");
			exit(EXIT_OSERR);
		}
		for (const char *c = t; *c; c++)
		{
			if (*c == '@')
				out = stpcpy(out, schema);
			else
				*out++ = *c;
		}
		*out = '\0';
	}
	snprintf(ext_version, sizeof(ext_version), "%s", PQgetvalue(res, 0, 1));
	snprintf(first_server_clock, sizeof(first_server_clock), "%s", PQgetvalue(res, 0, 2));
	vmsg("the dlock extension %s is in schema %s", ext_version, schema);
	PQclear(res);
	have_schema = true;
	return true;
}

/*
 * Exits (EXIT_SERVER) unless the extension in the database, as installed, is
 * at least major.minor: what is an option that needs its newer SQL.
 * Called once connected.
 */
void
require_version(int major, int minor, const char *what)
{
	int			ma = 0;
	int			mi = 0;

	if (sscanf(ext_version, "%d.%d", &ma, &mi) == 2 &&
		(ma > major || (ma == major && mi >= minor)))
		return;
	msg("%s needs version %d.%d of the dlock extension; database \"%s\" has %s (ALTER EXTENSION dlock UPDATE)",
		what, major, minor, PQdb(conn), ext_version);
	exit(EXIT_SERVER);
}

/* Tells who holds a busy name (best effort, for the message). */
void
report_holder(const char *name, ms_t deadline)
{
	const char *vals[1] = {name};
	PGresult   *res;

	if (conn == NULL)
		return;
	if (run_query(queries[SQL_HOLDER], 1, vals, deadline, &res) != Q_OK)
		return;
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		msg("%s is held by %s (token %s, ends in %s s, %s waiting)", name,
			PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2),
			PQgetvalue(res, 0, 3));
	else if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 1)
		msg("%s is held by %d holders (%s, ...; %s waiting)", name, PQntuples(res),
			PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 3));
	else
		msg("%s is busy (others are queued for it)", name);
	PQclear(res);
}
