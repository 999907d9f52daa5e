/*
 * overdue.c
 *		A lease's pinners kept past dlock.fence_grace: found, and terminated
 *		when the waiter's role may.
 *
 * A transaction that renews, extends or fences a lease pins it: the lease
 * cannot end before that transaction does.  A pinner whose transaction is
 * still open dlock.fence_grace after the lease's end, while others wait for
 * the name, is overdue.  The name's head waiter looks for such pinners each
 * time it looks at the name, and ends the backends its role could end with
 * pg_terminate_backend(); one it may not end keeps the name until its
 * transaction ends, and is logged.  Each pinner is dealt with once per wait.
 * Below wait.c in the layers: it reads the waiter's slot (wait.h's
 * DLockWaiter) but calls nothing of wait.c.
 *
 * Locking: dlock_find_overdue runs under the name's partition lock, which its
 * caller holds; the role checks read catalogs, with no LWLock held; the
 * signal goes out under the partition lock, taken again.  What a wait dealt
 * with is this backend's own.
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/memutils.h"

#include "overdue.h"
#include "settings.h"

/*
 * Overdue pinners this wait has dealt with (signalled, or found it may not
 * end), so that each is judged and logged once; MaxBackends of them.
 */
static int *dealt_with = NULL;
static int	ndealt = 0;

/* whether the waiting transaction pins leases (see dlock_find_overdue) */
static bool waiter_holds_pins = false;

/* Once per backend, with its waiter slot (dlock_wait_prepare). */
void
dlock_overdue_prepare(void)
{
	dealt_with = MemoryContextAlloc(TopMemoryContext,
									sizeof(int) * MaxBackends);
}

/* A new wait, by a transaction that pins leases itself or not. */
void
dlock_overdue_begin(bool holds_pins)
{
	ndealt = 0;
	waiter_holds_pins = holds_pins;
}

static bool
dealt_with_pid(int pid)
{
	for (int i = 0; i < ndealt; i++)
	{
		if (dealt_with[i] == pid)
			return true;
	}
	return false;
}

/* The sooner of two times, 0 being never */
int64
dlock_sooner(int64 a, int64 b)
{
	return (a == 0 || (b != 0 && b < a)) ? b : a;
}

/*
 * The backends whose transactions pin one of head's leases past its end for
 * longer than dlock.fence_grace, while we wait, and that this wait has not
 * dealt with yet: at most max into *out.  *look_at is when the head waiter
 * must look again (0: when woken), as head_timer() but for the pinned
 * leases overdue already: their pinners, once dealt with, end (or not) on
 * their own, and their unpin settles the name, which wakes it.
 *
 * A waiter whose own transaction pins leases may be one side of a wait
 * cycle, whose other side may be about to terminate it; so that only one
 * side goes, it gives a pinner with a higher pid one more grace.
 */
int
dlock_find_overdue(DLockEntry *head, int64 now, DLockOverdue *out, int max,
				   int64 *look_at)
{
	dlist_mutable_iter iter;
	DLockEntry *lease;
	int			n = 0;
	int64		grace = (int64) dlock_fence_grace_ms * 1000;

	*look_at = 0;
	dlock_foreach_lease(lease, head, iter)
	{
		int64		at = lease->pins == 0 ? dlock_free_at(lease) : dlock_overdue_at(lease);

		if (lease->pins == 0 || at > now)
		{
			*look_at = dlock_sooner(*look_at, at);
			continue;
		}
		for (int i = 0; i < DLOCK_MAX_PINNERS; i++)
		{
			int			pid = lease->pinners[i].pid;

			if (pid == 0 || pid == MyProcPid || dealt_with_pid(pid))
				continue;
			if (waiter_holds_pins && pid > MyProcPid && at + grace > now)
				*look_at = dlock_sooner(*look_at, at + grace);
			else if (n == max)
				*look_at = now; /* the rest at the next look */
			else
			{
				out[n].pid = pid;
				out[n].token = lease->token;
				out[n].overdue_ms = (now - lease->expires) / 1000;
				n++;
			}
		}
	}
	return n;
}

/*
 * Whether this waiter's role may end backend pid, by the rules of
 * pg_terminate_backend(): a superuser's backend only if it is a superuser,
 * any other if it has the privileges of that backend's role or of
 * pg_signal_backend.  Reads catalogs: not under a partition lock.
 */
static bool
may_terminate(int pid)
{
	PGPROC	   *proc = BackendPidGetProc(pid);
	Oid			roleid;

	if (proc == NULL)
		return false;			/* gone, and its pins with it */
	roleid = proc->roleId;
	if (superuser_arg(roleid) && !superuser())
		return false;
	return has_privs_of_role(GetUserId(), roleid) ||
		has_privs_of_role(GetUserId(), ROLE_PG_SIGNAL_BACKEND);
}

/*
 * Terminates the backend of one overdue pinner if it still pins that lease
 * and we still wait.  The signal goes out under the partition lock: a
 * pinner drops its pins under that lock when its transaction ends, so the
 * signal reaches the pinning transaction (or ends the session as its commit
 * finishes), never a later one.  Returns whether it was sent, in *err errno.
 */
static bool
terminate_pinner(const DLockWaiter *w, const DLockOverdue *overdue, int *err)
{
	LWLock	   *lock = dlock_partition_lock(w->hash);
	DLockEntry *lease;
	bool		pinning = false;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	lease = dlock_find_lease(&w->key, w->hash, overdue->token);
	if (w->state == DLOCK_WAIT_QUEUED && lease != NULL &&
		dlock_overdue_at(lease) <= dlock_mono_now())
	{
		for (int i = 0; i < DLOCK_MAX_PINNERS; i++)
			pinning |= (lease->pinners[i].pid == overdue->pid);
	}
	*err = 0;
	if (pinning && kill(overdue->pid, SIGTERM) != 0)
		*err = errno;
	LWLockRelease(lock);
	return pinning;
}

/*
 * Ends the backends found by dlock_find_overdue() that this waiter's role
 * may end: their transactions roll back, their pins go, and the name moves
 * on.
 * This bounds how long a holder that hangs inside a renewing or fencing
 * transaction keeps its name, and breaks wait cycles through pins, which the
 * deadlock detector cannot see.  A pinner the role may not end keeps the
 * name until its transaction ends: it is logged, once.
 */
void
dlock_terminate_overdue(const DLockWaiter *w, const DLockOverdue *overdue,
						int n)
{
	for (int i = 0; i < n; i++)
	{
		int			err;

		Assert(ndealt < MaxBackends);
		dealt_with[ndealt++] = overdue[i].pid;
		if (!may_terminate(overdue[i].pid))
		{
			ereport(LOG,
					(errmsg("dlock: backend %d has pinned lease \"%.*s\" (token " UINT64_FORMAT ") for " INT64_FORMAT " ms after the lease ended, while others wait; role \"%s\" waiting for it may not terminate that backend",
							overdue[i].pid, w->key.len, w->key.name, overdue[i].token,
							overdue[i].overdue_ms, GetUserNameFromId(GetUserId(), false)),
					 errhint("A waiter terminates such a backend only if its role could call pg_terminate_backend() on it.")));
			continue;
		}
		if (!terminate_pinner(w, &overdue[i], &err))
			continue;
		ereport(LOG,
				(errmsg("dlock: terminating backend %d: its transaction has pinned lease \"%.*s\" (token " UINT64_FORMAT ") for " INT64_FORMAT " ms after the lease ended, while others wait",
						overdue[i].pid, w->key.len, w->key.name, overdue[i].token,
						overdue[i].overdue_ms),
				 errhint("A transaction that renews or fences a lease must end within dlock.fence_grace of the lease's end.")));
		if (err != 0)
		{
			errno = err;
			ereport(WARNING,
					(errmsg("could not send signal to process %d: %m", overdue[i].pid)));
		}
	}
}
