/*
 * args.c
 *		What the SQL entry points (api.c, fence.c) check first: the preload,
 *		and their arguments (names, owners, intervals); the interval
 *		conversion serves the lease table's rebuild (rebuild.c) too.
 *
 * Below every file that uses it: it calls only into engine.c.
 */
#include "postgres.h"

#include "common/int.h"
#include "utils/timestamp.h"

#include "args.h"
#include "compat.h"

void
dlock_require_preload(void)
{
	if (!dlock_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock must be loaded via shared_preload_libraries"),
				 errhint("Add dlock to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * Interval to microseconds, counting a month as 30 days.  Out of range, it
 * saturates at the bound on the interval's side, so a huge negative interval
 * stays negative; so do the infinite intervals (see compat.h).
 */
int64
dlock_interval_usecs(const Interval *span)
{
	int64		days;
	int64		result;

	if (INTERVAL_IS_NOEND(span))
		return PG_INT64_MAX;
	if (INTERVAL_IS_NOBEGIN(span))
		return PG_INT64_MIN;
	if (pg_mul_s64_overflow((int64) span->month, DAYS_PER_MONTH, &days) ||
		pg_add_s64_overflow(days, span->day, &days) ||
		pg_mul_s64_overflow(days, USECS_PER_DAY, &result) ||
		pg_add_s64_overflow(result, span->time, &result))
	{
		double		approx = ((double) span->month * DAYS_PER_MONTH + span->day) *
		USECS_PER_DAY + span->time;

		return approx < 0 ? PG_INT64_MIN : PG_INT64_MAX;
	}
	return result;
}

void
dlock_check_length(int len, DLockTextArg what)
{
	int			maxlen = what == ARG_OWNER ? DLOCK_OWNER_MAX : DLOCK_NAME_MAX;

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 what == ARG_OWNER ?
				 errmsg("owner must not be empty") :
				 errmsg("lock name must not be empty")));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 what == ARG_OWNER ?
				 errmsg("owner is too long") :
				 errmsg("lock name is too long"),
				 errdetail("It has %d bytes; the limit is %d.", len, maxlen)));
}

void
dlock_text_arg(FunctionCallInfo fcinfo, int argno, DLockTextArg what, char **data, int *len)
{
	text	   *t;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 what == ARG_OWNER ?
				 errmsg("owner must not be null") :
				 errmsg("lock name must not be null")));
	t = PG_GETARG_TEXT_PP(argno);
	*len = VARSIZE_ANY_EXHDR(t);
	*data = VARDATA_ANY(t);
	dlock_check_length(*len, what);
}

void
dlock_set_name(DLockRequest *req, const char *data, int len)
{
	dlock_make_key(&req->key, data, len);
	req->hash = dlock_key_hash(&req->key);
}

/*
 * A queued request's hold (dlock_enqueue): positive and finite, at most
 * DLOCK_TTL_MAX, as a ttl.
 */
int64
dlock_hold_arg(FunctionCallInfo fcinfo, int argno)
{
	int64		hold;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("hold must not be null")));
	hold = dlock_interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (hold <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("hold must be positive"),
				 errhint("A queued request leaves its queue when not asked for again within its hold.")));
	if (hold > DLOCK_TTL_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("hold must be at most 7 days")));
	return hold;
}
