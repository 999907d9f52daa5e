/*
 * dlock.h
 *		Limits and settings shared by every part of dlock.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include "datatype/timestamp.h"

/* Longest lock name and owner, in bytes (documented in the README). */
#define DLOCK_NAME_MAX		200
#define DLOCK_OWNER_MAX		128

/* Databases of a cluster that can use dlock at once. */
#define DLOCK_MAX_DATABASES	64

/* Longest lease a single grant or renewal may ask for. */
#define DLOCK_TTL_MAX		(INT64CONST(7) * USECS_PER_DAY)

/* Settings (GUCs) */
extern int	dlock_max_locks;
extern int	dlock_max_locks_per_database;
extern int	dlock_default_ttl_ms;
extern char *dlock_owner_setting;
extern bool dlock_durable;
extern int	dlock_lock_delay_ms;
extern bool dlock_worker_enabled;
extern int	dlock_worker_batch;
extern int	dlock_fence_grace_ms;
extern int	dlock_token_block;

/* Raises a clean ERROR when the library was not preloaded. */
extern void dlock_require_preload(void);

/* An interval in microseconds, a month counted as 30 days; saturates. */
extern int64 dlock_interval_usecs(const Interval *span);

#endif							/* DLOCK_H */
