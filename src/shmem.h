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
	int64		expires;		/* monotonic clock, microseconds */
	TimestampTz granted_at;		/* wall clock, for display */
	Oid			roleid;			/* role that took the lease */
	int			holder_pid;		/* backend that took or last extended it */
	bool		durable;		/* stored in the lease table */
	int64		version;		/* version of its table row, as last written */
	int			nwaiters;
	dlist_head	waiters;		/* DLockWaiter, FIFO */
	DLockOwner	owner;
} DLockEntry;

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
extern void dlock_grant(DLockEntry *entry, const DLockOwner *owner, Oid roleid,
						int pid, int64 ttl, int64 now, bool durable);

#endif							/* DLOCK_SHMEM_H */
