/*
 * dlock.c
 *		Module load: defines the settings, registers the worker and the drop
 *		hooks, and sets up all shared memory (each part sizes its own).
 *
 * The top of the layers: it calls into the parts and none calls into it.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"

#include "engine.h"
#include "events.h"
#include "grace.h"
#include "lifetime.h"
#include "listen.h"
#include "settings.h"
#include "store.h"
#include "tokens.h"
#include "wait.h"
#include "worker.h"

PG_MODULE_MAGIC;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

/* All of dlock's shared memory: each part sizes and sets up its own. */
static void
dlock_shmem_request_hook(void)
{
	Size		size = dlock_engine_shmem_size();

	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	size = add_size(size, dlock_credits_shmem_size());
	size = add_size(size, dlock_counters_shmem_size());
	size = add_size(size, dlock_watch_shmem_size());
	size = add_size(size, dlock_token_shmem_size());
	size = add_size(size, dlock_db_shmem_size());
	size = add_size(size, dlock_wait_shmem_size());
	size = add_size(size, dlock_grace_shmem_size());
	size = add_size(size, dlock_events_shmem_size());
	size = add_size(size, dlock_lifetime_shmem_size());
	size = add_size(size, dlock_listen_shmem_size());
	RequestAddinShmemSpace(size);
	/* the partition locks, then the token lock and the grace lock */
	RequestNamedLWLockTranche("dlock", DLOCK_PARTITIONS + 3);
}

static void
dlock_shmem_startup_hook(void)
{
	LWLockPadded *locks;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	locks = GetNamedLWLockTranche("dlock");
	dlock_engine_shmem_init(locks);
	dlock_credits_shmem_init();
	dlock_counters_shmem_init();
	dlock_watch_shmem_init();
	dlock_token_shmem_init(&locks[DLOCK_PARTITIONS].lock);
	dlock_db_shmem_init();
	dlock_wait_shmem_init();
	dlock_grace_shmem_init(&locks[DLOCK_PARTITIONS + 1].lock);
	/* after the grace: it raises the longest unflushed ttl */
	dlock_deferred_startup();
	dlock_events_shmem_init(&locks[DLOCK_PARTITIONS + 2].lock);
	dlock_lifetime_shmem_init();
	dlock_listen_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

void
_PG_init(void)
{
	/*
	 * Loaded by a backend (CREATE EXTENSION, LOAD) rather than at server
	 * start: define nothing, since postmaster settings cannot be added now.
	 * Every function then reports the missing preload.
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;

	dlock_settings_define();

	dlock_worker_register();
	dlock_store_hook_drops();
	dlock_listen_hook();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = dlock_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = dlock_shmem_startup_hook;
}
