/*
 * dlock.h
 *		Limits and settings shared by every part of dlock.
 *
 * Layers, each calling only those below it (the include graph is acyclic):
 *
 *	dlock.c			module load, settings, setup of all shared memory
 *	api.c, fence.c	SQL entry points: argument checks (args.h), views
 *	worker.c		the background worker: expiries, sweeps
 *	lease.c			the rules of a lease: acquire, renew, release, fence
 *	xact.c			lease changes that follow the caller's transaction
 *	store.c			the lease table (durable rows) and its rebuild
 *	wait.c			FIFO queues of waiters and the handoff of a freed lease
 *	engine.c		the partitioned shared hash of leases, expiry heaps
 *	tokens.c		fencing tokens that never go backwards
 *
 * Glossary:
 *	name		what is locked: a string, per database
 *	head entry	a name's entry in the shared hash (key token 0): its first
 *				lease, its kind (lock or semaphore) and its queue of waiters
 *	lease		a grant of a name to an owner for a TTL; further leases of a
 *				name (shared holders, semaphore permits) are entries of
 *				their own, keyed by name and token
 *	owner		the string a lease is held by (with the role that took it)
 *	token		a lease's fencing token: unique, larger than any issued
 *				before it in the cluster, across crashes and promotion
 *	pin			an open transaction's hold on a lease it renewed, extended
 *				or fenced: the lease cannot end before that transaction does
 *	durable		a lease with a row in the lease table (the default); a
 *				memory-only lease is lost with shared memory
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
