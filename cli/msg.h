/*
 * msg.h
 *		The messages of the dlock command on stderr, and its exit statuses.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_MSG_H
#define DLOCK_MSG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "cli.h"

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

extern const char *progname;
extern bool verbose;			/* -v */

/* "dlock: " and the message on stderr, as one line */
extern void msg(const char *fmt,...) DLOCK_PRINTF(1, 2);
extern void msg_va(const char *fmt, va_list ap) DLOCK_PRINTF(1, 0);

#define vmsg(...) do { if (verbose) msg(__VA_ARGS__); } while (0)

extern const char *fmt_ms(ms_t ms, char *buf, size_t len);

#endif							/* DLOCK_MSG_H */
