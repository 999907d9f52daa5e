/*
 * cli.h
 *		What every file of the dlock command shares: the millisecond clock and
 *		its type.  The messages and exit statuses are msg.h's.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

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
