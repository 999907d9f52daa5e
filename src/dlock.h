/*
 * dlock.h
 *		Limits shared by every part of dlock, and the map of its parts.
 *
 * Layers, top to bottom, each calling only those below it (tools/layers.sh
 * checks the calls, `make check-layers`; the include graph is acyclic too):
 *
 *	dlock.c			module load: settings, worker, setup of all shared memory
 *	api.c, views.c, fence.c
 *				SQL entry points: lease calls, views, fencing
 *	worker.c		the background worker: expiries, sweeps
 *	acquire.c		acquiring a lease: granted, extended, queued
 *	lease.c			what a holder does with it: renew, release, force, fence
 *	xact.c			lease changes that follow the caller's transaction
 *	lifetime.c		leases that end with their session or transaction; telling
 *					backends apart (lifetime.h)
 *	the store, the lease table (durable rows; store.h), top to bottom:
 *	  rebuild.c		shared memory rebuilt from the table after a start
 *	  deferred.c	leases whose rows are deferred, kept across a clean
 *					restart in a file the postmaster writes at shutdown
 *	  sweep.c		rows of ended leases deleted, restored rows' expiries moved
 *	  rows.c		a lease's row writes, and what their commit waits for
 *	  floor.c		the per-database token floor (dlock_token_floor)
 *	  dbslots.c		per-database slots; drops of a database or the extension
 *	  table.c		the table's lookup, SPI as its owner, direct-path shape
 *	grace.c			no new grant after a promotion or a crash until lost
 *					leases ended; the ttl bound that needs
 *					(dlock.failover_grace); which commits may skip the flush
 *	args.c			the entry points' checks (args.h): preload, arguments
 *	grantwait.c		acting on another session's lease: the wait for its
 *					granting transaction, the bound on pinners
 *	queue.c			queued requests that hold no backend (dlock_enqueue):
 *					joined, kept, left, dropped when their hold runs out
 *	wait.c			FIFO queues of waiters and the handoff of a freed lease
 *	overdue.c		a lease's pinners kept past dlock.fence_grace: found, and
 *					terminated when the waiter's role may
 *	events.c		change events (dlock.events): recorded at commit or when a
 *					lease ends, kept until a sender NOTIFYs them
 *	listen.c		which databases may have a backend listening to the events
 *					(LISTEN dlock, seen by the utility hook)
 *	engine.c		the partitioned shared hash of leases, expiry heaps
 *	keys.c			a lease's key and its hash, owners, mode and lifetime words
 *	credits.c		entry credits: dlock.max_locks and
 *					dlock.max_locks_per_database counted per partition in
 *					batches
 *	counters.c		the cumulative counters of dlock_stats
 *	watch.c			the expiry watcher: when the worker looks next, its wake-up
 *	tokens.c		fencing tokens that never go backwards
 *	settings.c		the settings (GUCs, settings.h), read by every layer
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
 *	min hold	a lease's minimum hold (min_hold): released before its grant
 *				plus min_hold, it stays its owner's, marked released, until
 *				then (lease.c, xact.c, wait.c: dlock_handoff_hold)
 *	durable		a lease with a row in the lease table (the default); a
 *				memory-only lease is lost with shared memory
 *	deferred	a durable lease whose row its first renewal, extension or
 *				fence writes (dlock.defer_rows); a crash loses it (the crash
 *				grace covers it), a clean restart keeps it (deferred.c);
 *				adopting it is writing that row (dlock_adopt)
 *	queued request  a request waiting in a name's queue with no backend
 *				(dlock_enqueue), kept while asked again within its hold;
 *				granted, its lease is memory-only
 *	lifetime	what ends a lease besides its TTL: nothing ('ttl'), the exit
 *				of the backend it is bound to ('session'), the end of the
 *				transaction that took it ('transaction'); the last two are
 *				memory-only
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

#endif							/* DLOCK_H */
