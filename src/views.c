/*
 * views.c
 *		SQL-callable views of the shared state: live leases (dlock_locks),
 *		waiters and queued requests (dlock_waiters), the counters
 *		(dlock_stats) and their reset.
 *
 * Locking: views take all partition locks in order (shared), copy what they
 * show, and release them before returning rows.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "args.h"
#include "lifetime.h"
#include "store.h"
#include "wait.h"

PG_FUNCTION_INFO_V1(dlock_list_locks);
PG_FUNCTION_INFO_V1(dlock_list_waiters);
PG_FUNCTION_INFO_V1(dlock_stats);
PG_FUNCTION_INFO_V1(dlock_stats_reset);

/*
 * Rows of the dlock_locks view: live leases of the current database.
 * Entries are copied under the partition locks and turned into tuples after.
 */
Datum
dlock_list_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	DLockEntry *entry;
	DLockEntry *copies = NULL;
	int			ncopies = 0;
	int			maxcopies = 64;
	int64		now;
	TimestampTz wall_now;

	dlock_require_preload();
	InitMaterializedSRF(fcinfo, 0);
	/* A standby has no grants of its own: show the replicated table. */
	if (RecoveryInProgress())
	{
		dlock_store_list(rsinfo->setResult, rsinfo->setDesc);
		return (Datum) 0;
	}
	dlock_store_ensure_loaded();
	copies = palloc(sizeof(DLockEntry) * maxcopies);

	dlock_lock_all_partitions(LW_SHARED);
	now = dlock_mono_now();
	wall_now = GetCurrentTimestamp();
	dlock_scan_begin(&status);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId || !dlock_is_live(entry, now))
			continue;
		if (ncopies == maxcopies)
		{
			maxcopies *= 2;
			copies = repalloc_huge(copies, sizeof(DLockEntry) * maxcopies);
		}
		copies[ncopies] = *entry;
		/*
		 * its holder as it is now: a backend that exits ends its session
		 * leases before it stops counting as alive, but may do both as soon
		 * as the locks are released
		 */
		if (!dlock_backend_alive(&entry->holder_backend))
			copies[ncopies].holder_pid = 0;
		/* what the name has: show it on each of its leases */
		copies[ncopies].nwaiters = dlock_head_of(entry)->nwaiters;
		copies[ncopies].permits = dlock_head_of(entry)->permits;
		ncopies++;
	}
	dlock_unlock_all_partitions();

	for (int i = 0; i < ncopies; i++)
	{
		DLockEntry *e = &copies[i];
		Datum		values[15];
		bool		nulls[15] = {0};
		Interval   *min_hold = palloc0(sizeof(Interval));

		values[0] = PointerGetDatum(cstring_to_text_with_len(e->key.name, e->key.len));
		values[1] = PointerGetDatum(cstring_to_text_with_len(e->owner.str, e->owner.len));
		values[2] = Int64GetDatum((int64) e->token);
		values[3] = TimestampTzGetDatum(e->granted_at);
		values[4] = TimestampTzGetDatum(dlock_mono_to_wall(e->expires, now, wall_now));
		values[5] = ObjectIdGetDatum(e->roleid);
		/* only while it is that backend: a later one may have its pid */
		values[6] = Int32GetDatum(e->holder_pid);
		nulls[6] = (e->holder_pid == 0);
		values[7] = Int32GetDatum(e->nwaiters);
		values[8] = Int64GetDatum(e->version);
		/* a deferred lease is durable with no row (no version) yet */
		nulls[8] = !e->durable;
		values[9] = BoolGetDatum(e->durable || e->deferred);
		values[10] = PointerGetDatum(cstring_to_text(dlock_mode_name((DLockMode) e->mode)));
		values[11] = Int32GetDatum(e->permits);
		nulls[11] = (e->permits == 0);
		/* (older SQL has fewer columns: the descriptor says how many are read) */
		values[12] = PointerGetDatum(cstring_to_text(dlock_lifetime_name((DLockLifetime) e->lifetime)));
		min_hold->time = e->min_hold;
		values[13] = IntervalPGetDatum(min_hold);
		nulls[13] = (e->min_hold == 0);
		values[14] = TimestampTzGetDatum(e->released_at);
		nulls[14] = (e->released_at == 0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

typedef struct WaiterRow
{
	DLockWaiter w;
	int			position;
} WaiterRow;

static int
waiter_row_cmp(const void *a, const void *b)
{
	const WaiterRow *ra = a;
	const WaiterRow *rb = b;
	int			r = memcmp(ra->w.key.name, rb->w.key.name, Min(ra->w.key.len, rb->w.key.len));

	if (r != 0)
		return r;
	if (ra->w.key.len != rb->w.key.len)
		return ra->w.key.len < rb->w.key.len ? -1 : 1;
	return ra->position - rb->position;
}

/*
 * Rows of the dlock_waiters view, in queue order per name: blocked backends
 * and queued requests (pid NULL, deadline the end of the hold).  It looks at
 * the waiter slots, not the whole lease table, so polling it costs the same
 * with a million leases as with none.
 */
Datum
dlock_list_waiters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DLockWaiter *slots;
	WaiterRow  *rows;
	int			nrows = 0;
	int			maxrows = 64;
	int			nslots;

	dlock_require_preload();
	InitMaterializedSRF(fcinfo, 0);
	if (RecoveryInProgress())
		return (Datum) 0;
	dlock_store_ensure_loaded();
	slots = dlock_waiter_slots(&nslots);
	rows = palloc(sizeof(WaiterRow) * maxrows);

	dlock_lock_all_partitions(LW_SHARED);
	for (int i = 0; i < nslots; i++)
	{
		DLockWaiter *w = &slots[i];
		dlist_iter	iter;
		int			position = 0;

		if (w->state != DLOCK_WAIT_QUEUED || w->key.dbid != MyDatabaseId)
			continue;
		if (nrows == maxrows)
			rows = repalloc_huge(rows, sizeof(WaiterRow) * (maxrows *= 2));
		dlist_foreach(iter, &w->head->u.h.waiters)
		{
			position++;
			if (iter.cur == &w->node)
				break;
		}
		rows[nrows].w = *w;
		rows[nrows].position = position;
		nrows++;
	}
	dlock_unlock_all_partitions();
	qsort(rows, nrows, sizeof(WaiterRow), waiter_row_cmp);

	for (int i = 0; i < nrows; i++)
	{
		DLockWaiter *w = &rows[i].w;
		Datum		values[8];
		bool		nulls[8] = {0};

		values[0] = Int32GetDatum(w->pid);
		nulls[0] = (w->proc == NULL);
		values[1] = PointerGetDatum(cstring_to_text_with_len(w->key.name, w->key.len));
		values[2] = PointerGetDatum(cstring_to_text_with_len(w->owner.str, w->owner.len));
		values[3] = ObjectIdGetDatum(w->roleid);
		values[4] = TimestampTzGetDatum(w->since);
		values[5] = Int32GetDatum(rows[i].position);
		if (w->deadline_wall != 0)
			values[6] = TimestampTzGetDatum(w->deadline_wall);
		else
			nulls[6] = true;
		values[7] = PointerGetDatum(cstring_to_text(dlock_mode_name((DLockMode) w->mode)));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

Datum
dlock_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[DLOCK_NUM_STATS + 3];
	bool		nulls[DLOCK_NUM_STATS + 3] = {0};
	uint64		counters[DLOCK_NUM_STATS];
	DLockWaiter *slots;
	int			nslots;
	int			waiting = 0;

	dlock_require_preload();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	/* counters, leases, waiting, then newer columns (older SQL reads fewer) */
	dlock_counters_read(counters);
	for (int i = 0; i < DLOCK_STAT_QUEUE_DROPPED; i++)
		values[i] = Int64GetDatum((int64) counters[i]);
	values[DLOCK_STAT_QUEUE_DROPPED] = Int64GetDatum((int64) dlock_entry_count());
	/* a racy count is fine for a gauge; the backends' slots come first */
	slots = dlock_waiter_slots(&nslots);
	for (int i = 0; i < MaxBackends; i++)
		waiting += (slots[i].state == DLOCK_WAIT_QUEUED);
	values[DLOCK_STAT_QUEUE_DROPPED + 1] = Int64GetDatum(waiting);
	values[DLOCK_STAT_QUEUE_DROPPED + 2] = Int64GetDatum((int64) dlock_queued_count());
	values[DLOCK_STAT_QUEUE_DROPPED + 3] = Int64GetDatum(counters[DLOCK_STAT_QUEUE_DROPPED]);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

Datum
dlock_stats_reset(PG_FUNCTION_ARGS)
{
	dlock_require_preload();
	dlock_counters_reset();
	PG_RETURN_VOID();
}
