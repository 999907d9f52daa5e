/*
 * api.c
 *		SQL-callable functions: argument checks, then the lease operations.
 *		The fencing functions and triggers are in fence.c, the views in views.c.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "common/int.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "args.h"
#include "compat.h"
#include "grace.h"
#include "lease.h"
#include "queue.h"
#include "settings.h"
#include "store.h"
#include "wait.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(dlock_preload_check);
PG_FUNCTION_INFO_V1(dlock_owner);
PG_FUNCTION_INFO_V1(dlock_try);
PG_FUNCTION_INFO_V1(dlock_acquire);
PG_FUNCTION_INFO_V1(dlock_enqueue_request);
PG_FUNCTION_INFO_V1(dlock_dequeue);
PG_FUNCTION_INFO_V1(dlock_renew);
PG_FUNCTION_INFO_V1(dlock_release);
PG_FUNCTION_INFO_V1(dlock_try_all);
PG_FUNCTION_INFO_V1(dlock_acquire_all);
PG_FUNCTION_INFO_V1(dlock_release_all);
PG_FUNCTION_INFO_V1(dlock_sweep);
PG_FUNCTION_INFO_V1(dlock_force_release);

Datum
dlock_preload_check(PG_FUNCTION_ARGS)
{
	dlock_require_preload();
	PG_RETURN_VOID();
}

/*
 * The owner generated for this session, unique to it.  Built once: every
 * acquire without a lifetime compares its owner with it, and an snprintf
 * per call was a quarter of dlock's own instructions per lease cycle.
 */
static const DLockOwner *
generated_owner(void)
{
	static DLockOwner owner;

	if (owner.len == 0)
		owner.len = snprintf(owner.str, DLOCK_OWNER_MAX, "session:%d:" INT64_FORMAT,
							 MyProcPid, (int64) MyStartTimestamp);
	return &owner;
}

/* The session's default owner: dlock.owner, else the generated one. */
static void
default_owner(DLockOwner *owner)
{
	/* its check hook keeps dlock.owner within DLOCK_OWNER_MAX */
	if (dlock_owner_setting != NULL && dlock_owner_setting[0] != '\0')
	{
		owner->len = strlen(dlock_owner_setting);
		memcpy(owner->str, dlock_owner_setting, owner->len);
	}
	else
	{
		const DLockOwner *generated = generated_owner();

		owner->len = generated->len;
		memcpy(owner->str, generated->str, generated->len);
	}
}

Datum
dlock_owner(PG_FUNCTION_ARGS)
{
	DLockOwner	owner;

	default_owner(&owner);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(owner.str, owner.len));
}

static int64
ttl_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval   *span;
	int64		ttl;

	if (PG_ARGISNULL(argno))
	{
		ttl = (int64) dlock_default_ttl_ms * 1000;
		dlock_grace_check_ttl(ttl, dlock_durable);
		return ttl;
	}

	span = PG_GETARG_INTERVAL_P(argno);
	if (INTERVAL_NOT_FINITE(span))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be finite"),
				 errhint("Renew long leases instead of asking for a longer ttl.")));
	ttl = dlock_interval_usecs(span);
	if (ttl > DLOCK_TTL_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be at most 7 days"),
				 errhint("Renew long leases instead of asking for a longer ttl.")));
	if (ttl <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be positive")));
	dlock_grace_check_ttl(ttl, dlock_durable);
	return ttl;
}

/*
 * Timeout in microseconds; -1 waits without limit, as does 'infinity' (a
 * negative timeout, '-infinity' too, is refused).
 */
static int64
timeout_arg(FunctionCallInfo fcinfo, int argno)
{
	int64		timeout;

	if (PG_ARGISNULL(argno))
		return -1;
	timeout = dlock_interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (timeout == PG_INT64_MAX)
		return -1;				/* longer than anyone can wait */
	if (timeout < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative")));
	return timeout;
}

/*
 * The min_hold argument, into the request (after its ttl): NULL or zero is
 * none.  A hold longer than the lease could last is refused, as ShedLock
 * refuses lockAtLeastFor above lockAtMostFor.  An argument past the
 * function's own (its SQL from before 1.2) is none.
 */
static void
min_hold_arg(FunctionCallInfo fcinfo, int argno, DLockRequest *req)
{
	int64		min_hold;

	req->min_hold = 0;
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return;
	min_hold = dlock_interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (min_hold < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_hold must not be negative"),
				 errhint("Give NULL or zero for no minimum hold.")));
	if (min_hold > req->ttl)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_hold must not be longer than the ttl"),
				 errdetail("A lease released early is held until its grant plus min_hold, and no lease outlives its ttl (here " INT64_FORMAT " ms%s).",
						   req->ttl / 1000,
						   PG_ARGISNULL(1) ? ", from dlock.default_ttl" : ""),
				 errhint("Ask for a ttl at least as long as min_hold.")));
	req->min_hold = min_hold;
}

/* The owner argument, into the request */
static void
owner_arg(FunctionCallInfo fcinfo, int argno, DLockRequest *req)
{
	char	   *data;
	int			len;

	dlock_text_arg(fcinfo, argno, ARG_OWNER, &data, &len);
	req->owner.len = len;
	memcpy(req->owner.str, data, len);
}

/* mode and permits arguments; mode_argno < 0 when the function has none */
static void
mode_args(FunctionCallInfo fcinfo, DLockRequest *req, int mode_argno, int permits_argno)
{
	req->mode = DLOCK_EXCLUSIVE;
	req->permits = 0;
	if (mode_argno >= 0)
	{
		text	   *mode;
		int			len;

		if (PG_ARGISNULL(mode_argno))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("mode must not be null")));
		/* compared in place: every dlock_try passes its default */
		mode = PG_GETARG_TEXT_PP(mode_argno);
		len = VARSIZE_ANY_EXHDR(mode);
		if (len == 6 && memcmp(VARDATA_ANY(mode), "shared", 6) == 0)
			req->mode = DLOCK_SHARED;
		else if (len != 9 || memcmp(VARDATA_ANY(mode), "exclusive", 9) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid lock mode \"%s\"", text_to_cstring(mode)),
					 errhint("Use 'exclusive' or 'shared'.")));
	}
	if (permits_argno >= 0 && !PG_ARGISNULL(permits_argno))
	{
		req->permits = PG_GETARG_INT32(permits_argno);
		if (req->permits < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("permits must be at least 1")));
		if (req->mode == DLOCK_SHARED)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a semaphore has no shared mode"),
					 errhint("Give permits for a semaphore, or mode => 'shared' for a read lock, not both.")));
	}
}

/*
 * The lifetime argument, after the owner's (the function has fewer
 * arguments while the library serves an older version's SQL).  NULL is
 * 'session' for the owner generated for this session, which no other
 * session can act for, else 'ttl'.  A session or transaction lease has no
 * row, so its ttl is bounded as a memory-only lease's is.
 */
static void
lifetime_arg(FunctionCallInfo fcinfo, int argno, DLockRequest *req)
{
	req->lifetime = DLOCK_LIFETIME_TTL;
	if (argno >= PG_NARGS() || PG_ARGISNULL(argno))
	{
		if (dlock_owner_equal(generated_owner(), &req->owner))
			req->lifetime = DLOCK_LIFETIME_SESSION;
	}
	else
	{
		text	   *arg = PG_GETARG_TEXT_PP(argno);
		const char *data = VARDATA_ANY(arg);
		int			len = VARSIZE_ANY_EXHDR(arg);

		if (len == 7 && memcmp(data, "session", 7) == 0)
			req->lifetime = DLOCK_LIFETIME_SESSION;
		else if (len == 11 && memcmp(data, "transaction", 11) == 0)
			req->lifetime = DLOCK_LIFETIME_TRANSACTION;
		else if (len != 3 || memcmp(data, "ttl", 3) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid lease lifetime \"%s\"", text_to_cstring(arg)),
					 errhint("Use 'ttl', 'session' or 'transaction' (or NULL for the default).")));
	}
	if (req->lifetime != DLOCK_LIFETIME_TTL && req->durable)
	{
		req->durable = false;
		dlock_grace_check_ttl(req->ttl, false);
	}
}

static void
check_primary(void)
{
	dlock_require_preload();
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot change dlock leases during recovery"),
				 errhint("Call dlock functions on the primary.")));
}

/*
 * Fills a request from the (name, ttl, owner) arguments; ttl_argno < 0
 * when the function has no ttl.
 */
static void
build_request(FunctionCallInfo fcinfo, DLockRequest *req,
			  int name_argno, int ttl_argno, int owner_argno)
{
	char	   *data;
	int			len;

	check_primary();
	dlock_store_ensure_loaded();

	dlock_text_arg(fcinfo, name_argno, ARG_NAME, &data, &len);
	dlock_set_name(req, data, len);

	owner_arg(fcinfo, owner_argno, req);

	req->roleid = GetUserId();
	req->ttl = ttl_argno >= 0 ? ttl_arg(fcinfo, ttl_argno) : 0;
	req->min_hold = 0;
	req->durable = dlock_durable;
	req->mode = DLOCK_EXCLUSIVE;
	req->permits = 0;
	req->lifetime = DLOCK_LIFETIME_TTL;
}

/* dlock_try(name, ttl, owner, mode, permits, lifetime, min_hold) */
Datum
dlock_try(PG_FUNCTION_ARGS)
{
	DLockRequest req;
	uint64		token;

	build_request(fcinfo, &req, 0, 1, 2);
	mode_args(fcinfo, &req, 3, 4);
	lifetime_arg(fcinfo, 5, &req);
	min_hold_arg(fcinfo, 6, &req);
	token = dlock_lease_acquire(&req, 0);
	if (token == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) token);
}

/* dlock_acquire(name, ttl, timeout, owner, mode, permits, lifetime, min_hold) */
Datum
dlock_acquire(PG_FUNCTION_ARGS)
{
	DLockRequest req;
	int64		timeout;
	uint64		token;

	build_request(fcinfo, &req, 0, 1, 3);
	mode_args(fcinfo, &req, 4, 5);
	lifetime_arg(fcinfo, 6, &req);
	min_hold_arg(fcinfo, 7, &req);
	timeout = timeout_arg(fcinfo, 2);
	token = dlock_lease_acquire(&req, timeout);
	if (token == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) token);
}

/* dlock_enqueue(name, ttl, owner, mode, permits, hold); see queue.c */
Datum
dlock_enqueue_request(PG_FUNCTION_ARGS)
{
	DLockRequest req;
	uint64		token;

	build_request(fcinfo, &req, 0, 1, 2);
	mode_args(fcinfo, &req, 3, 4);
	/* a lease granted to a queued request is memory-only */
	dlock_grace_check_ttl(req.ttl, false);
	token = dlock_lease_enqueue(&req, dlock_hold_arg(fcinfo, 5));
	if (token == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) token);
}

/* dlock_dequeue(name, owner) */
Datum
dlock_dequeue(PG_FUNCTION_ARGS)
{
	DLockRequest req;

	build_request(fcinfo, &req, 0, -1, 1);
	PG_RETURN_BOOL(dlock_queue_leave(&req));
}

/* dlock_renew(name, ttl, owner) */
Datum
dlock_renew(PG_FUNCTION_ARGS)
{
	DLockRequest req;
	TimestampTz expires_at;

	build_request(fcinfo, &req, 0, 1, 2);
	if (!dlock_lease_renew(&req, &expires_at))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(expires_at);
}

/* dlock_release(name, owner, token) */
Datum
dlock_release(PG_FUNCTION_ARGS)
{
	DLockRequest req;
	int64		token = 0;

	build_request(fcinfo, &req, 0, -1, 1);
	if (!PG_ARGISNULL(2))
	{
		token = PG_GETARG_INT64(2);
		if (token <= 0)
			PG_RETURN_BOOL(false);	/* no lease ever has such a token */
	}
	PG_RETURN_BOOL(dlock_lease_release(&req, (uint64) token));
}

/* ---------------------------------------------------------------------
 * All-or-nothing: several names at once
 * --------------------------------------------------------------------- */

typedef struct NameArg
{
	int			pos;			/* in the caller's array */
	char	   *data;
	int			len;
	uint64		token;
} NameArg;

/* Byte order, then length: one total order every session agrees on. */
static int
name_cmp(const void *a, const void *b)
{
	const NameArg *na = a;
	const NameArg *nb = b;
	int			r = memcmp(na->data, nb->data, Min(na->len, nb->len));

	if (r != 0)
		return r;
	return na->len < nb->len ? -1 : na->len > nb->len ? 1 : 0;
}

/* The names of the array argument, sorted, with their positions. */
static NameArg *
names_arg(FunctionCallInfo fcinfo, int *count)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	NameArg    *names;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lock names must not be null")));
	array = PG_GETARG_ARRAYTYPE_P(0);
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, count);
	names = palloc(sizeof(NameArg) * Max(*count, 1));
	for (int i = 0; i < *count; i++)
	{
		text	   *t;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("lock name must not be null")));
		t = DatumGetTextPP(elems[i]);
		names[i].pos = i;
		names[i].data = VARDATA_ANY(t);
		names[i].len = VARSIZE_ANY_EXHDR(t);
		names[i].token = 0;
		dlock_check_length(names[i].len, ARG_NAME);
	}
	qsort(names, *count, sizeof(NameArg), name_cmp);
	return names;
}

/*
 * Takes the names in sorted order, so two callers over overlapping names
 * always queue in the same order and cannot deadlock.  Stops at the first
 * name it cannot have in time; returns whether it had them all.
 *
 * While it waits for later names, the leases it has are pinned (they cannot
 * end), and once it has them all it extends them, so every lease returned
 * runs its ttl from the moment the set was complete.
 */
static bool
take_all(NameArg *names, int count, DLockRequest *req, int64 timeout)
{
	int64		deadline = 0;
	uint64		current;

	if (timeout > 0 && pg_add_s64_overflow(dlock_mono_now(), timeout, &deadline))
		timeout = -1;			/* longer than anyone can wait */
	for (int i = 0; i < count; i++)
	{
		int64		wait = timeout;

		if (i > 0 && name_cmp(&names[i], &names[i - 1]) == 0)
		{
			names[i].token = names[i - 1].token;
			continue;
		}
		if (timeout > 0)
			wait = Max(deadline - dlock_mono_now(), 0);
		dlock_set_name(req, names[i].data, names[i].len);
		names[i].token = dlock_lease_acquire(req, wait);
		if (names[i].token == 0)
			return false;
		if (timeout != 0 && i < count - 1 &&
			dlock_lease_fence(req, names[i].token, &current) != DLOCK_FENCE_OK)
			return false;
	}
	for (int i = 0; timeout != 0 && i < count - 1; i++)
	{
		if (i > 0 && name_cmp(&names[i], &names[i - 1]) == 0)
			continue;
		dlock_set_name(req, names[i].data, names[i].len);
		if (dlock_lease_acquire(req, 0) != names[i].token)
			return false;
	}
	return true;
}

/*
 * All or nothing: the grants are made in a subtransaction, so if one name
 * cannot be had in time the ones already granted are undone.  Returns the
 * tokens in the caller's order, or NULL.
 */
static Datum
acquire_all(FunctionCallInfo fcinfo, int ttl_argno, int timeout_argno,
			int owner_argno, int mode_argno, int lifetime_argno)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	DLockRequest req;
	NameArg    *names;
	Datum	   *tokens;
	int			count;
	volatile bool all = false;

	check_primary();
	dlock_store_ensure_loaded();
	names = names_arg(fcinfo, &count);
	memset(&req, 0, sizeof(req));
	owner_arg(fcinfo, owner_argno, &req);
	req.roleid = GetUserId();
	req.ttl = ttl_arg(fcinfo, ttl_argno);
	req.durable = dlock_durable;
	mode_args(fcinfo, &req, mode_argno, -1);
	lifetime_arg(fcinfo, lifetime_argno, &req);
	min_hold_arg(fcinfo, lifetime_argno + 1, &req);
	dlock_xact_register();

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		all = take_all(names, count, &req,
					   timeout_argno >= 0 ? timeout_arg(fcinfo, timeout_argno) : 0);
		if (all)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		ReThrowError(edata);
	}
	PG_END_TRY();

	if (!all)
		PG_RETURN_NULL();
	tokens = palloc(sizeof(Datum) * Max(count, 1));
	for (int i = 0; i < count; i++)
		tokens[names[i].pos] = Int64GetDatum((int64) names[i].token);
	PG_RETURN_ARRAYTYPE_P(construct_array(tokens, count, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* dlock_try_all(names, ttl, owner, mode, lifetime, min_hold) */
Datum
dlock_try_all(PG_FUNCTION_ARGS)
{
	return acquire_all(fcinfo, 1, -1, 2, 3, 4);
}

/* dlock_acquire_all(names, ttl, timeout, owner, mode, lifetime, min_hold) */
Datum
dlock_acquire_all(PG_FUNCTION_ARGS)
{
	return acquire_all(fcinfo, 1, 2, 3, 4, 5);
}

/* dlock_release_all(names, owner): how many of the names were released */
Datum
dlock_release_all(PG_FUNCTION_ARGS)
{
	DLockRequest req;
	NameArg    *names;
	int			count;
	int			released = 0;

	check_primary();
	dlock_store_ensure_loaded();
	names = names_arg(fcinfo, &count);
	memset(&req, 0, sizeof(req));
	owner_arg(fcinfo, 1, &req);
	req.roleid = GetUserId();
	for (int i = 0; i < count; i++)
	{
		if (i > 0 && name_cmp(&names[i], &names[i - 1]) == 0)
			continue;
		dlock_set_name(&req, names[i].data, names[i].len);
		if (dlock_lease_release(&req, 0))
			released++;
	}
	PG_RETURN_INT32(released);
}

/*
 * dlock_sweep(): ends every lease that is due (in all databases, as the
 * worker would), then deletes the rows of ended leases in this database.
 * Returns how many leases of this database it reclaimed.
 */
Datum
dlock_sweep(PG_FUNCTION_ARGS)
{
	int			mine = 0;
	int64		next;

	dlock_require_preload();
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot sweep dlock leases during recovery")));
	dlock_store_ensure_loaded();
	do
	{
		next = dlock_expire_due(dlock_worker_batch, DLOCK_STAT_EXPIRED_BY_SWEEP, &mine);
		CHECK_FOR_INTERRUPTS();
	} while (next != 0 && next <= dlock_mono_now());

	PG_RETURN_INT64(mine + dlock_store_sweep_rows(false));
}

/*
 * dlock_force_release(name): breaks every lease on name whoever holds it,
 * at commit, waking the next waiters.  Not executable by PUBLIC.
 */
Datum
dlock_force_release(PG_FUNCTION_ARGS)
{
	DLockRequest req;
	DLockBroken *broken;
	int			nbroken;
	char	   *name;
	int			len;

	dlock_require_preload();
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot change dlock leases during recovery")));
	dlock_store_ensure_loaded();
	dlock_text_arg(fcinfo, 0, ARG_NAME, &name, &len);
	memset(&req, 0, sizeof(req));
	dlock_set_name(&req, name, len);
	req.roleid = GetUserId();

	nbroken = dlock_lease_force_release(&req, &broken);
	for (int i = 0; i < nbroken; i++)
	{
		char	   *holder_role = GetUserNameFromId(broken[i].roleid, true);

		ereport(LOG,
				(errmsg("dlock lease \"%.*s\" of owner \"%.*s\" (role %s, token " UINT64_FORMAT ") force-released by role %s",
						len, name, broken[i].owner.len, broken[i].owner.str,
						holder_role ? holder_role : "(dropped)", broken[i].token,
						GetUserNameFromId(GetUserId(), false))));
	}
	PG_RETURN_BOOL(nbroken > 0);
}
