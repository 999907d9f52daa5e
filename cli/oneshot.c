/*
 * oneshot.c
 *		"dlock try", "dlock release" and "dlock status": each connects, runs
 *		one query, prints its answer and exits.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"
#include "oneshot.h"
#include "session.h"

/* Connects for the one-shot commands, or exits. */
static void
connect_or_exit(void)
{
	if (!connect_db(0))
	{
		msg("cannot connect to the server: %s", last_error);
		exit(EXIT_CONN);
	}
}

/* Runs a one-shot query, or exits with a message. */
static PGresult *
query_or_exit(const char *sql, int nparams, const char *const *vals, const char *what)
{
	PGresult   *res;
	QStatus		qs = run_query(sql, nparams, vals, NEVER, &res);

	if (qs != Q_OK)
	{
		msg("%s: %s", what, last_error);
		exit(EXIT_CONN);
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		bool		arg = is_argument_error(res);

		msg("%s: %s", what, last_error);
		PQclear(res);
		exit(arg ? EXIT_USAGE : EXIT_SERVER);
	}
	return res;
}

/* "dlock try": returns the exit status. */
int
cmd_try(const Args *a)
{
	char		ttl_text[64];
	const char *vals[5];
	PGresult   *res;

	interval_text(a->ttl_ms, ttl_text, sizeof(ttl_text));
	vals[0] = a->name;
	vals[1] = ttl_text;
	vals[2] = a->owner;
	vals[3] = a->mode;
	vals[4] = a->permits;
	connect_or_exit();
	res = query_or_exit(queries[SQL_TRY], 5, vals, "cannot take the lease");
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		report_holder(a->name, now_ms() + RELEASE_WINDOW_MS);
		close_conn();
		return EXIT_BUSY;
	}
	printf("%s %s\n", PQgetvalue(res, 0, 0), a->owner);
	PQclear(res);
	close_conn();
	return 0;
}

/* "dlock release": returns the exit status. */
int
cmd_release(const Args *a)
{
	const char *vals[3] = {a->name, a->owner, a->token};
	PGresult   *res;
	bool		released;

	connect_or_exit();
	res = query_or_exit(queries[SQL_RELEASE], 3, vals, "cannot release the lease");
	released = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	close_conn();
	if (!released)
	{
		msg("%s: %s holds no live lease on it%s", a->name, a->owner,
			a->token ? " with that token" : "");
		return EXIT_RELEASE_NONE;
	}
	return 0;
}

/* "dlock status": returns the exit status. */
int
cmd_status(const Args *a)
{
	static const char *const headers[] = {
		"NAME", "STATE", "OWNER", "TOKEN", "PID", "SINCE", "EXPIRES/DEADLINE", "LEFT"
	};
	const int	ncols = 8;
	const char *vals[1] = {a->name};
	PGresult   *res;
	int			width[8];
	int			nrows;
	bool		held = false;

	connect_or_exit();
	res = query_or_exit(queries[SQL_STATUS], 1, vals, "cannot read dlock_locks and dlock_waiters");
	nrows = PQntuples(res);
	if (PQnfields(res) != ncols)
	{
		msg("unexpected result from the server");
		exit(EXIT_SERVER);
	}
	for (int c = 0; c < ncols; c++)
	{
		width[c] = (int) strlen(headers[c]);
		for (int r = 0; r < nrows; r++)
		{
			int			len = PQgetisnull(res, r, c) ? 1 : (int) strlen(PQgetvalue(res, r, c));

			if (len > width[c])
				width[c] = len;
		}
	}
	for (int c = 0; c < ncols; c++)
		printf("%-*s%s", c == ncols - 1 ? 0 : width[c], headers[c], c == ncols - 1 ? "\n" : "  ");
	for (int r = 0; r < nrows; r++)
	{
		if (strncmp(PQgetvalue(res, r, 1), "holder", 6) == 0)
			held = true;
		for (int c = 0; c < ncols; c++)
			printf("%-*s%s", c == ncols - 1 ? 0 : width[c],
				   PQgetisnull(res, r, c) ? "-" : PQgetvalue(res, r, c),
				   c == ncols - 1 ? "\n" : "  ");
	}
	PQclear(res);
	close_conn();
	if (a->name != NULL && !held)
		return EXIT_RELEASE_NONE;
	return 0;
}
