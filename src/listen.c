/*
 * listen.c
 *		Which databases have a backend that may be listening to channel
 *		dlock: the event sender sends nothing where nobody would receive it.
 *
 * PostgreSQL keeps who listens to what private to each backend (async.c),
 * so this file watches LISTEN dlock through the utility hook and keeps, in a
 * slot per backend (by its index among MaxBackends), the database it may
 * listen in.  It errs on one side only: a backend counts from the moment it
 * runs LISTEN dlock (before that commits, and even if it rolls back) until
 * it exits, UNLISTEN and DISCARD ALL notwithstanding.  So a change that
 * commits after a LISTEN committed is sent: its event is recorded after that
 * commit, and the sender looks for listeners after it takes the event.
 * Async_Listen called from C, past the utility hook, is not seen.
 *
 * Locking: a backend writes only its own slot, an atomic; the sender reads
 * them all.  A process without a slot that listens sets a flag that counts
 * for every database until the next start.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "tcop/utility.h"

#include "compat.h"
#include "listen.h"

#define CHANNEL		"dlock"

typedef struct ListenShared
{
	pg_atomic_uint32 any;		/* backends counted, in all databases */
	pg_atomic_uint32 slotless;	/* a process without a slot listened */
	pg_atomic_uint32 dbid[FLEXIBLE_ARRAY_MEMBER];	/* per backend */
} ListenShared;

static ListenShared *shared = NULL;
static ProcessUtility_hook_type prev_utility = NULL;
static bool counted = false;	/* this backend */

Size
dlock_listen_shmem_size(void)
{
	return add_size(offsetof(ListenShared, dbid),
					mul_size(MaxBackends, sizeof(pg_atomic_uint32)));
}

void
dlock_listen_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("dlock listeners", dlock_listen_shmem_size(), &found);
	if (found)
		return;
	pg_atomic_init_u32(&shared->any, 0);
	pg_atomic_init_u32(&shared->slotless, 0);
	for (int i = 0; i < MaxBackends; i++)
		pg_atomic_init_u32(&shared->dbid[i], InvalidOid);
}

static void
uncount(int code, Datum arg)
{
	int			i = DLockMyProcIndex();

	pg_atomic_write_u32(&shared->dbid[i], InvalidOid);
	pg_atomic_fetch_sub_u32(&shared->any, 1);
}

/* This backend may listen to dlock from now until it exits. */
static void
count_listener(void)
{
	int			i = DLockMyProcIndex();

	if (counted)
		return;
	if (i < 0 || i >= MaxBackends)
	{
		pg_atomic_write_u32(&shared->slotless, 1);
		counted = true;
		return;
	}
	before_shmem_exit(uncount, (Datum) 0);
	pg_atomic_fetch_add_u32(&shared->any, 1);
	pg_atomic_write_u32(&shared->dbid[i], MyDatabaseId);
	pg_memory_barrier();
	counted = true;
}

static void
listen_utility(PlannedStmt *pstmt, const char *queryString,
			   bool readOnlyTree, ProcessUtilityContext context,
			   ParamListInfo params, QueryEnvironment *queryEnv,
			   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (IsA(stmt, ListenStmt) &&
		strcmp(((ListenStmt *) stmt)->conditionname, CHANNEL) == 0)
		count_listener();
	if (prev_utility)
		prev_utility(pstmt, queryString, readOnlyTree, context, params,
					 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

void
dlock_listen_hook(void)
{
	prev_utility = ProcessUtility_hook;
	ProcessUtility_hook = listen_utility;
}

bool
dlock_listened(Oid dbid)
{
	pg_memory_barrier();
	if (pg_atomic_read_u32(&shared->slotless) != 0)
		return true;
	if (pg_atomic_read_u32(&shared->any) == 0)
		return false;
	for (int i = 0; i < MaxBackends; i++)
	{
		if (pg_atomic_read_u32(&shared->dbid[i]) == dbid)
			return true;
	}
	return false;
}
