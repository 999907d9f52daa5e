/*
 * session.h
 *		The libpq session: one connection at a time, queries with deadlines,
 *		and the SQL, named with the extension's schema.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_SESSION_H
#define DLOCK_SESSION_H

#include <stddef.h>

#include <libpq-fe.h>

#include "cli.h"

extern const char *conninfo;	/* -d; NULL: libpq's defaults */

/* the connection; NULL when there is none */
extern PGconn *conn;

/* last connection or query error, for messages */
extern char last_error[1024];

/*
 * The server's clock (epoch seconds, as text) on the first connection, before
 * any call of ours: what granted_at of a lease we took is not before.
 */
extern char first_server_clock[40];

typedef enum
{
	Q_OK,						/* *res is the result, possibly an error */
	Q_CONNLOST,					/* the connection failed */
	Q_TIMEOUT,					/* no answer by the deadline */
	Q_ABANDONED					/* io_abandoned() (loop.c) */
} QStatus;

enum
{
	SQL_TRY,
	SQL_ACQUIRE,
	SQL_TRY_12,					/* with lifetime and min_hold (extension 1.2) */
	SQL_ACQUIRE_12,
	SQL_RENEW,
	SQL_RELEASE,
	SQL_HOLDER,
	SQL_STATUS,
	SQL_BACKENDS_LEFT,
	SQL_GRANTED_TO,
	SQL_ENQUEUE,				/* extension 1.2 */
	SQL_DEQUEUE,
	NUM_SQL
};

/* the queries, once the schema is known */
extern char *queries[NUM_SQL];

extern bool connect_db(ms_t deadline);
extern void require_version(int major, int minor, const char *what);
extern void close_conn(void);
extern QStatus run_query(const char *sql, int nparams, const char *const *values,
						 ms_t deadline, PGresult **res);
extern bool is_argument_error(PGresult *res);
extern void report_holder(const char *name, ms_t deadline);
extern void interval_text(ms_t ms, char *buf, size_t len);

#endif							/* DLOCK_SESSION_H */
