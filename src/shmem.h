/*
 * shmem.h
 *		The shared-memory lease table: a partitioned hash of named leases.
 *
 * An entry exists while its name is held or has waiters.  Every field of an
 * entry, and the queue of waiters hanging off it, is protected by the LWLock
 * of the entry's partition.
 */
#ifndef DLOCK_SHMEM_H
#define DLOCK_SHMEM_H

#include "lib/ilist.h"
#include "lib/pairingheap.h"
#include "storage/lwlock.h"
#include "utils/hsearch.h"

#include "dlock.h"

#define DLOCK_PARTITIONS	64		/* power of two */

typedef struct DLockKey
{
	Oid			dbid;
	uint16		len;
	char		name[DLOCK_NAME_MAX];
} DLockKey;

typedef struct DLockOwner
{
	uint16		len;
	char		str[DLOCK_OWNER_MAX];
} DLockOwner;

typedef struct DLockEntry
{
	DLockKey	key;			/* hash key: must be first */
	uint64		token;			/* fencing token of the lease; 0 = free */
	int64		expires;		/* monotonic clock, microseconds; set it with
								 * dlock_set_expires() */
	int32		pins;			/* open transactions that renewed or fenced
								 * the lease: it cannot end before they do */
	bool		in_heap;		/* in its partition's expiry heap */
	pairingheap_node heap_node;
	TimestampTz granted_at;		/* wall clock, for display */
	Oid			roleid;			/* role that took the lease */
	int			holder_pid;		/* backend that took or last extended it */
	bool		durable;		/* stored in the lease table */
	int64		version;		/* version of its table row, as last written */
	int			nwaiters;
	dlist_head	waiters;		/* DLockWaiter, FIFO */
	DLockOwner	owner;
} DLockEntry;

/* cumulative counters, shown by dlock_stats */
typedef enum DLockStat
{
	DLOCK_STAT_GRANTS,
	DLOCK_STAT_IMMEDIATE,
	DLOCK_STAT_WAITS,
	DLOCK_STAT_TIMEOUTS,
	DLOCK_STAT_RELEASES,
	DLOCK_STAT_RENEWALS,
	DLOCK_STAT_EXPIRED_BY_WORKER,
	DLOCK_STAT_EXPIRED_BY_SWEEP,
	DLOCK_STAT_EXPIRED_BY_CALLER,
	DLOCK_NUM_STATS
} DLockStat;

extern void dlock_count(DLockStat stat);
extern void dlock_counters_read(uint64 *values);
extern void dlock_counters_reset(void);
extern uint32 dlock_entry_count(void);

extern void dlock_shmem_request(void);
extern void dlock_shmem_startup(void);
extern bool dlock_shmem_ready(void);

extern int64 dlock_mono_now(void);
extern TimestampTz dlock_mono_to_wall(int64 mono, int64 mono_now, TimestampTz wall_now);

extern void dlock_make_key(DLockKey *key, const char *name, int len);
extern uint32 dlock_key_hash(const DLockKey *key);
extern LWLock *dlock_partition_lock(uint32 hash);
extern void dlock_lock_all_partitions(LWLockMode mode);
extern void dlock_unlock_all_partitions(void);

extern DLockEntry *dlock_find(const DLockKey *key, uint32 hash);
extern DLockEntry *dlock_find_or_create(const DLockKey *key, uint32 hash, bool *found);
extern void dlock_remove(DLockEntry *entry, uint32 hash);
extern void dlock_scan_begin(HASH_SEQ_STATUS *status);

extern bool dlock_owner_equal(const DLockOwner *a, const DLockOwner *b);
extern bool dlock_is_live(const DLockEntry *entry, int64 now);
extern bool dlock_is_free(const DLockEntry *entry, int64 now);
extern int64 dlock_free_at(const DLockEntry *entry);
extern void dlock_grant(DLockEntry *entry, uint32 hash, const DLockOwner *owner,
						Oid roleid, int pid, int64 ttl, int64 now, bool durable);
extern void dlock_set_expires(DLockEntry *entry, uint32 hash, int64 expires);
extern void dlock_pin(DLockEntry *entry, uint32 hash, int delta);
extern DLockEntry *dlock_earliest(int partition);

#endif							/* DLOCK_SHMEM_H */
