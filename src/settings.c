/*
 * settings.c
 *		dlock's settings (GUCs): their variables, defaults and limits.
 *
 * The bottom of the layers: every part reads these variables, and nothing
 * here calls into another part.
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "dlock.h"
#include "settings.h"

int			dlock_max_locks = 16384;
int			dlock_max_locks_per_database = 0;
int			dlock_default_ttl_ms = 30000;
char	   *dlock_owner_setting = NULL;
bool		dlock_durable = true;
int			dlock_lock_delay_ms = 0;
bool		dlock_worker_enabled = true;
int			dlock_worker_batch = 1000;
int			dlock_fence_grace_ms = 10000;
int			dlock_token_block = 1000000;
int			dlock_failover_grace_ms = 300000;
bool		dlock_flush_grants = false;
bool		dlock_defer_rows = true;
bool		dlock_events = false;

/* Refuses an owner that calls would refuse, at SET time. */
static bool
check_owner(char **newval, void **extra, GucSource source)
{
	if (*newval != NULL && strlen(*newval) > DLOCK_OWNER_MAX)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("It has %zu bytes; the limit is %d.", strlen(*newval),
							DLOCK_OWNER_MAX);
		return false;
	}
	return true;
}

/* what a lease is: its limits, defaults and durability */
static void
define_lease_settings(void)
{
	DefineCustomIntVariable("dlock.max_locks",
							"Maximum number of leases held or awaited at once, over all databases.",
							NULL,
							&dlock_max_locks,
							16384, 16, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	/*
	 * Only new entries are checked against it, so it can change on reload: a
	 * database left above a lowered share keeps what it has.
	 */
	DefineCustomIntVariable("dlock.max_locks_per_database",
							"Maximum number of leases held or awaited at once in one database; 0 means no limit but dlock.max_locks.",
							NULL,
							&dlock_max_locks_per_database,
							0, 0, 100000000,
							PGC_SIGHUP, 0,
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
							   check_owner, NULL, NULL);
	DefineCustomBoolVariable("dlock.durable",
							 "Store new leases in the lease table, so they survive a restart or crash.",
							 "When off, new leases live in shared memory only: faster, but lost on restart.",
							 &dlock_durable,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("dlock.lock_delay",
							"After a lease expires (rather than being released), its name stays blocked this long.",
							"As in Chubby and Consul: gives a holder that lost its lease time to notice before another starts.",
							&dlock_lock_delay_ms,
							0, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* the server's side: the worker, fencing, failover and crash, events */
static void
define_server_settings(void)
{
	DefineCustomBoolVariable("dlock.worker",
							 "Let the background worker expire leases on time and clean expired rows.",
							 NULL,
							 &dlock_worker_enabled,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("dlock.worker_batch",
							"Most leases the worker expires in one partition before letting other calls in.",
							NULL,
							&dlock_worker_batch,
							1000, 1, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dlock.fence_grace",
							"How long a transaction may keep pinning a lease that has ended while others wait for its name.",
							"After that the waiter terminates the pinning backend, so a holder that hangs inside a renewing or fencing transaction cannot keep the name forever.",
							&dlock_fence_grace_ms,
							10000, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	/*
	 * A running grace keeps the length it began with; a lowered bound
	 * covers only leases granted after the reload.
	 */
	DefineCustomIntVariable("dlock.failover_grace",
							"How long a promoted standby grants no new lease; also the longest ttl a primary without synchronous standbys grants.",
							"0 means no grace and no bound: for clusters that fail over only to a synchronous standby.",
							&dlock_failover_grace_ms,
							300000, 0, (int) (DLOCK_TTL_MAX / 1000),
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	/*
	 * Read at each commit that wrote a grant, renewal or extension: a session
	 * that flushes its own adds nothing to the crash grace (grace.c).
	 */
	DefineCustomBoolVariable("dlock.flush_grants",
							 "Make every durable grant, renewal and extension wait for its WAL flush, as before 1.2.",
							 "Off: one whose ttl is within dlock.failover_grace may return before its flush, and a crash restart grants no new lease until every lease it may have lost has ended.",
							 &dlock_flush_grants,
							 false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	/* read when a lease is granted (acquire.c) */
	DefineCustomBoolVariable("dlock.defer_rows",
							 "Leave a durable lease's row to its first renewal, extension or fence when its grant may skip the WAL flush.",
							 "A lease released before then writes no row.  A crash loses it, and a grace keeps its name from anyone else until it would have ended; a clean shutdown keeps it for the next start.",
							 &dlock_defer_rows,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	/* read when a lease is granted: its events follow the grantee's setting */
	DefineCustomBoolVariable("dlock.events",
							 "Send each grant and end of the leases this session is granted with NOTIFY on channel dlock.",
							 "Set it for a database (ALTER DATABASE ... SET) to see every lease of that database.",
							 &dlock_events,
							 false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("dlock.token_block",
							"Fencing tokens reserved in the token file at a time (a developer option, for tests).",
							NULL,
							&dlock_token_block,
							1000000, 2, 1000000000,
							PGC_SIGHUP, GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							NULL, NULL, NULL);
}

void
dlock_settings_define(void)
{
	define_lease_settings();
	define_server_settings();
	MarkGUCPrefixReserved("dlock");
}
