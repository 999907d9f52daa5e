/*
 * compat.h
 *		What differs between the PostgreSQL major versions dlock builds
 *		against, behind PG_VERSION_NUM, in one place.
 *
 * Built and tested on 15, 17 and 18.  16 is placed by the release each
 * change came in (16 renamed rd_node; the rest came in 17 or 18), not by a
 * build: Debian has no 16 here (see docs/versions.md).
 * Everything else dlock calls is the same on all of them: shmem_request_hook
 * and named LWLock tranches (15 on), background worker registration, wait
 * event PG_WAIT_EXTENSION (17's custom wait event names are not used, so
 * the waits show as "Extension" everywhere), GetWALInsertionTimeLine() for
 * the token base (15 on), heap_insert/heap_delete/index_insert, SPI.
 */
#ifndef DLOCK_COMPAT_H
#define DLOCK_COMPAT_H

#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#if PG_VERSION_NUM >= 170000
#include "storage/procnumber.h"
#else
#include "storage/backendid.h"
#endif
/* 16 moved the varlena macros (VARDATA_ANY...) out of postgres.h */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * This backend's index among the MaxBackends regular backends (client
 * backends, background workers, autovacuum, WAL senders), from 0; -1 when
 * it has none.  17 numbers every PGPROC from 0 (MyProcNumber), with the
 * regular backends first; 15 and 16 give regular backends a BackendId from
 * 1 (MyBackendId).
 */
#if PG_VERSION_NUM >= 170000
#define DLockMyProcIndex()	((int) MyProcNumber)
#else
#define DLockMyProcIndex() \
	(MyBackendId == InvalidBackendId ? -1 : (int) MyBackendId - 1)
#endif

/*
 * A wait event set for the life of the backend, in TopMemoryContext.  17
 * takes a resource owner instead of a memory context (NULL: owned by none,
 * and allocated in TopMemoryContext).
 */
#if PG_VERSION_NUM >= 170000
#define DLockCreateWaitEventSet(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define DLockCreateWaitEventSet(nevents) \
	CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/*
 * A function that does not return: 18 has pg_noreturn (C11 _Noreturn), put
 * before the declaration, instead of the pg_attribute_noreturn() of 15 to
 * 17, put after it; GCC and clang take that attribute before it too.
 */
#if PG_VERSION_NUM < 180000
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * Whether transaction xid has ended, without waiting: 18 added whether to
 * log the failure to get its lock (log_lock_failures); dlock does not.
 */
#if PG_VERSION_NUM >= 180000
#define DLockConditionalXactLockTableWait(xid) \
	ConditionalXactLockTableWait((xid), false)
#else
#define DLockConditionalXactLockTableWait(xid) \
	ConditionalXactLockTableWait(xid)
#endif

/* A relation's file number: 16 renamed RelFileNode (rd_node) RelFileLocator. */
#if PG_VERSION_NUM >= 160000
#define DLockRelFileNumber(rel)	((Oid) (rel)->rd_locator.relNumber)
#else
#define DLockRelFileNumber(rel)	((Oid) (rel)->rd_node.relNode)
#endif

/*
 * Infinite intervals (17): every field at its maximum is +infinity, every
 * field at its minimum -infinity.  Before 17 the same values are the
 * largest and smallest finite intervals, which 17 reads as infinite (after
 * pg_upgrade too), so dlock takes them as infinite on every version: an
 * interval gets the same answer whatever the server's version.
 */
#if PG_VERSION_NUM < 170000
#define INTERVAL_IS_NOBEGIN(i) \
	((i)->month == PG_INT32_MIN && (i)->day == PG_INT32_MIN && \
	 (i)->time == PG_INT64_MIN)
#define INTERVAL_IS_NOEND(i) \
	((i)->month == PG_INT32_MAX && (i)->day == PG_INT32_MAX && \
	 (i)->time == PG_INT64_MAX)
#define INTERVAL_NOT_FINITE(i) (INTERVAL_IS_NOBEGIN(i) || INTERVAL_IS_NOEND(i))
#endif

#endif							/* DLOCK_COMPAT_H */
