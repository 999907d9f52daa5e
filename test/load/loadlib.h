/*
 * loadlib.h
 *		What the load drivers of test/load (dlock_stress, dlock_fuzz,
 *		crashload) share: their common options, clocks, random numbers,
 *		connecting, running a query and reading its result, SQLSTATEs,
 *		memory shared with forked clients, and waiting for those clients.
 *
 * Each driver keeps its own messages: where the library prints something
 * on a driver's behalf, the driver chose the words.
 */
#ifndef LOADLIB_H
#define LOADLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libpq-fe.h>

/* ---------- options ---------- */

/* The options every driver takes, under the same letters. */
typedef struct LoadOptions
{
	const char *conninfo;		/* -d: libpq connection string ("" = the
								 * PG* environment) */
	int			clients;		/* -c: client processes */
	int			seconds;		/* -t: how long the clients run */
	uint64_t	seed;			/* -s: seed of the random choices */
	int			names;			/* -n: how many names */
} LoadOptions;

/*
 * Stores option opt (as getopt returned it; -d, -c, -t, -s or -n) with
 * argument arg in *o.  False for any other option.
 */
extern bool load_option(LoadOptions *o, int opt, const char *arg);

/* The long names of those options, for getopt_long's table. */
#define LOAD_LONG_OPTIONS \
	{"conninfo", required_argument, NULL, 'd'}, \
	{"clients", required_argument, NULL, 'c'}, \
	{"duration", required_argument, NULL, 't'}, \
	{"seed", required_argument, NULL, 's'}, \
	{"names", required_argument, NULL, 'n'}

/* ---------- clocks ---------- */

/* CLOCK_MONOTONIC in microseconds. */
extern int64_t load_now_us(void);

/* Sleeps us microseconds, also when a signal interrupts the sleep. */
extern void load_sleep_us(int64_t us);

/* ---------- random numbers (the same sequence for the same seed) ---------- */

/* splitmix64: the next number of the sequence in *state. */
extern uint64_t load_splitmix64(uint64_t *state);

/* A number in [0, n) from load_splitmix64. */
extern int	load_splitmix_int(uint64_t *state, int n);

/* ---------- connections and queries ---------- */

/*
 * Connects with conninfo (a connection string, or "" for the PG*
 * environment), with dbname and user in its place when they are not NULL
 * or empty, and application_name appname.  Returns the connection whatever
 * its status: check PQstatus.
 */
extern PGconn *load_connect(const char *conninfo, const char *dbname,
							const char *user, const char *appname);

/* The result of a statement that succeeded: tuples, or a command. */
extern bool load_ok(const PGresult *res);

/*
 * What load_must prints to stderr before it exits with status 2, given the
 * statement and the connection's error message; each driver sets its own.
 */
extern const char *load_must_fmt;

/*
 * Runs sql, a simple query, and returns its result (the caller clears it).
 * When the statement fails, prints load_must_fmt and exits with status 2.
 */
extern PGresult *load_must(PGconn *conn, const char *sql);

/* The same for one statement with nparams text parameters. */
extern PGresult *load_must_params(PGconn *conn, const char *sql, int nparams,
								  const char *const *params);

/* The value at (row, col) read as an integer (strtoll). */
extern int64_t load_int64(const PGresult *res, int row, int col);

/* v in decimal, in buf (at least 21 bytes); returns buf. */
extern const char *load_i64(char *buf, int64_t v);

/* The result's SQLSTATE, or none when it has none (or res is NULL). */
extern const char *load_sqlstate(const PGresult *res, const char *none);

/* Whether the result is an error with SQLSTATE state. */
extern bool load_is_state(const PGresult *res, const char *state);

/* Asks the server to cancel the connection's running statement. */
extern void load_cancel(PGconn *conn);

/* ---------- client processes ---------- */

/*
 * size bytes of zeroed memory shared with the processes forked after this
 * call; noreserve: no swap reserved (for a large map mostly left unused).
 * Exits with status 2 (after perror("mmap")) if there is none.
 */
extern void *load_shared(size_t size, bool noreserve);

/*
 * Waits for the n child processes pids[] and stores their wait statuses in
 * status[].  Those still running when load_now_us() passes deadline are
 * hung: on_hang(i, pids[i]) is called for each (unless on_hang is NULL),
 * then they are killed with SIGKILL and reaped.  Returns how many were hung.
 */
extern int	load_reap(int n, const pid_t *pids, int *status, int64_t deadline,
					  void (*on_hang) (int i, pid_t pid));

#endif							/* LOADLIB_H */
