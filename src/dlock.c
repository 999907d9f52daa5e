/*
 * dlock.c
 *		Module load: settings and shared-memory hooks.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include "dlock.h"
#include "shmem.h"

PG_MODULE_MAGIC;

int			dlock_max_locks = 16384;
int			dlock_default_ttl_ms = 30000;
char	   *dlock_owner_setting = NULL;
bool		dlock_durable = true;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
dlock_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	dlock_shmem_request();
}

static void
dlock_shmem_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	dlock_shmem_startup();
}

void
dlock_require_preload(void)
{
	if (!dlock_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock must be loaded via shared_preload_libraries"),
				 errhint("Add dlock to shared_preload_libraries in postgresql.conf and restart the server.")));
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

	DefineCustomIntVariable("dlock.max_locks",
							"Maximum number of leases held or awaited at once, over all databases.",
							NULL,
							&dlock_max_locks,
							16384, 16, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dlock.default_ttl",
							"Lease time used when a call gives no ttl.",
							NULL,
							&dlock_default_ttl_ms,
							30000, 1, (int) (DLOCK_TTL_MAX / 1000),
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomStringVariable("dlock.owner",
							   "Owner string used when a call gives no owner; empty means one unique to the session.",
							   NULL,
							   &dlock_owner_setting,
							   "",
							   PGC_USERSET, 0,
							   NULL, NULL, NULL);
	DefineCustomBoolVariable("dlock.durable",
							 "Store new leases in the lease table, so they survive a restart or crash.",
							 "When off, new leases live in shared memory only: faster, but lost on restart.",
							 &dlock_durable,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	MarkGUCPrefixReserved("dlock");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = dlock_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = dlock_shmem_startup_hook;
}
