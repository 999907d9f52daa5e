/*
 * cli.h
 *		What every file of the dlock command shares: its exit statuses, the
 *		millisecond clock and messages on stderr.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Exit statuses of dlock itself (see usage() in args.c, and README.md). */
#define EXIT_RELEASE_NONE	1	/* release: nothing released; status: free */
#define EXIT_USAGE			64	/* EX_USAGE */
#define EXIT_BUSY			69	/* EX_UNAVAILABLE: lock busy */
#define EXIT_SERVER			70	/* the server refused a call (SQL error) */
#define EXIT_OSERR			71	/* EX_OSERR: fork, pipe ... failed */
#define EXIT_TIMEOUT		75	/* EX_TEMPFAIL: --timeout passed */
#define EXIT_LOST			76	/* the lease was lost while held */
#define EXIT_CONN			77	/* could not connect, or the connection was
								 * lost and not recovered in time */
#define EXIT_NOEXEC			126 /* command found but not executable */
#define EXIT_NOTFOUND		127 /* command not found */

typedef int64_t ms_t;

#if defined(__GNUC__) || defined(__clang__)
#define DLOCK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define DLOCK_NORETURN __attribute__((noreturn))
#else
#define DLOCK_PRINTF(f, a)
#define DLOCK_NORETURN
#endif

#define NEVER	INT64_MAX

#define RELEASE_WINDOW_MS	5000	/* at exit: how long to try to release */

extern const char *progname;
extern bool verbose;			/* -v */

/* "dlock: " and the message on stderr, as one line */
extern void msg(const char *fmt,...) DLOCK_PRINTF(1, 2);
extern void msg_va(const char *fmt, va_list ap) DLOCK_PRINTF(1, 0);

#define vmsg(...) do { if (verbose) msg(__VA_ARGS__); } while (0)

static inline ms_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (ms_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline ms_t
min_ms(ms_t a, ms_t b)
{
	return a < b ? a : b;
}

#endif							/* DLOCK_CLI_H */
