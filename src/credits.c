/*
 * credits.c
 *		Entry credits: dlock.max_locks and dlock.max_locks_per_database
 *		counted per partition in batches.
 *
 * Every entry of engine.c's table (a lease, a name's head, a queued
 * waiter's reservation) uses one, counted against dlock.max_locks and its
 * database's dlock.max_locks_per_database.  A partition takes credits from
 * the shared counts in batches and keeps those not in use as spare, per
 * database, in cache lines of its own: an entry made or removed takes or
 * gives back a spare one there, and the shared counts are written once per
 * batch.  Batches shrink to one near a limit, and a partition keeps at most
 * 2 * CREDIT_BATCH spare per database, giving back the rest.  When a limit
 * leaves no credit to take, a spare one is taken from another partition
 * (with a compare-and-swap, as that partition's lock is not held): every
 * credit not in use can be found, so with no other call running the entry
 * beyond a limit is refused exactly.  The entries never exceed the credits
 * taken, so the hash never outgrows its allocation.
 *
 * Below engine.c, beside counters.c: it calls no other file of dlock but
 * settings.c.  Its state is in shared memory of its own, zero at every start
 * and after every crash restart (the rebuild takes the credits again).
 *
 * Locking: a partition's credits are taken and given back by a caller
 * holding that partition's lock (engine.c's) exclusively, which guards its
 * entry count; its spare credits are atomics, as other partitions take
 * from them, and so are the shared counts.
 */
#include "postgres.h"

#include "port/atomics.h"
#include "storage/shmem.h"

#include "credits.h"
#include "keys.h"
#include "settings.h"

#define CREDIT_BATCH	16

/*
 * A partition's credits, in cache lines of their own: grants and releases
 * in different partitions write no line in common.
 */
typedef struct DLockCreditPartition
{
	/* its entries and waiters' reservations */
	uint32		entries pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	/* entry credits taken for each database slot, not in use */
	pg_atomic_uint32 spare[DLOCK_MAX_DATABASES];
} DLockCreditPartition;

typedef struct DLockCredits
{
	/*
	 * Entry credits the partitions took, in all (at most dlock.max_locks) and
	 * per database slot: written once per batch of credits
	 */
	pg_atomic_uint32 claimed pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	pg_atomic_uint32 db_claimed[DLOCK_MAX_DATABASES];
	DLockCreditPartition parts[DLOCK_PARTITIONS];
} DLockCredits;

static DLockCredits *shared = NULL;

/* the last reservation this backend was refused hit its database's share */
static bool full_in_database = false;

Size
dlock_credits_shmem_size(void)
{
	return sizeof(DLockCredits);
}

/* Every process that attaches; the caller holds AddinShmemInitLock. */
void
dlock_credits_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("dlock credits", dlock_credits_shmem_size(), &found);
	if (found)
		return;
	pg_atomic_init_u32(&shared->claimed, 0);
	for (int db = 0; db < DLOCK_MAX_DATABASES; db++)
		pg_atomic_init_u32(&shared->db_claimed[db], 0);
	for (int i = 0; i < DLOCK_PARTITIONS; i++)
	{
		DLockCreditPartition *part = &shared->parts[i];

		part->entries = 0;
		for (int db = 0; db < DLOCK_MAX_DATABASES; db++)
			pg_atomic_init_u32(&part->spare[db], 0);
	}
}

/* Credits to take at once from a count with free left: fewer near its limit */
static uint32
batch_size(uint32 free)
{
	return Max(1, Min(CREDIT_BATCH, free / (2 * DLOCK_PARTITIONS)));
}

/* Takes up to want credits from count, capped at limit; how many (0: none) */
static uint32
take_credits(pg_atomic_uint32 *count, uint32 limit, uint32 want)
{
	uint32		cur = pg_atomic_read_u32(count);
	uint32		n;

	do
	{
		if (cur >= limit)
			return 0;
		n = Min(want, batch_size(limit - cur));
	} while (!pg_atomic_compare_exchange_u32(count, &cur, cur + n));
	return n;
}

static void
give_back(int db, uint32 n)
{
	pg_atomic_fetch_sub_u32(&shared->db_claimed[db], n);
	pg_atomic_fetch_sub_u32(&shared->claimed, n);
}

/* Takes one spare credit of database slot db from partition part. */
static bool
take_spare(int part, int db)
{
	pg_atomic_uint32 *spare = &shared->parts[part].spare[db];
	uint32		cur = pg_atomic_read_u32(spare);

	while (cur > 0)
	{
		if (pg_atomic_compare_exchange_u32(spare, &cur, cur - 1))
			return true;
	}
	return false;
}

/* One spare credit of db from any partition, part's first. */
static bool
steal(int part, int db)
{
	for (int i = 0; i < DLOCK_PARTITIONS; i++)
	{
		if (take_spare((part + i) % DLOCK_PARTITIONS, db))
			return true;
	}
	return false;
}

/*
 * Counts one more entry of the database in slot db, in partition part,
 * against dlock.max_locks and, with share, against
 * dlock.max_locks_per_database.  False when over.  The caller holds the
 * partition's lock exclusively.
 */
bool
dlock_credit_take(int part, int db, bool share)
{
	pg_atomic_uint32 *db_claimed = &shared->db_claimed[db];
	uint32		limit = PG_UINT32_MAX;
	uint32		n;
	uint32		got;

	full_in_database = false;
	if (share && dlock_max_locks_per_database > 0)
		limit = (uint32) dlock_max_locks_per_database;

	if (limit != PG_UINT32_MAX && pg_atomic_read_u32(db_claimed) > limit)
	{
		/* a lowered share: credits spare anywhere go back first */
		for (int i = 0; i < DLOCK_PARTITIONS; i++)
		{
			uint32		spare = pg_atomic_exchange_u32(&shared->parts[i].spare[db], 0);

			if (spare > 0)
				give_back(db, spare);
		}
	}
	else if (take_spare(part, db))
		goto counted;

	n = take_credits(db_claimed, limit, CREDIT_BATCH);
	if (n == 0)
	{
		/* at its share: a spare credit of the database, unless above it */
		if (pg_atomic_read_u32(db_claimed) <= limit && steal(part, db))
			goto counted;
		full_in_database = true;
		return false;
	}
	got = take_credits(&shared->claimed, (uint32) dlock_max_locks, n);
	if (got < n)
		pg_atomic_fetch_sub_u32(db_claimed, n - got);
	if (got > 1)
		pg_atomic_fetch_add_u32(&shared->parts[part].spare[db], got - 1);
	if (got > 0 || steal(part, db))
		goto counted;

	/* the table is full: a spare credit of another database changes hands */
	for (int other = 0; other < DLOCK_MAX_DATABASES; other++)
	{
		if (other == db || pg_atomic_read_u32(&shared->db_claimed[other]) == 0 ||
			!steal(part, other))
			continue;
		if (take_credits(db_claimed, limit, 1) == 1)
		{
			pg_atomic_fetch_sub_u32(&shared->db_claimed[other], 1);
			goto counted;
		}
		give_back(other, 1);
		full_in_database = true;
		return false;
	}
	return false;

counted:
	shared->parts[part].entries++;
	return true;
}

/*
 * Gives back the credit of an entry of database slot db, in partition part.
 * The caller holds the partition's lock exclusively.
 */
void
dlock_credit_give(int part, int db)
{
	DLockCreditPartition *p = &shared->parts[part];
	uint32		spare;

	p->entries--;
	spare = pg_atomic_add_fetch_u32(&p->spare[db], 1);
	if (spare <= 2 * CREDIT_BATCH)
		return;
	/* keeps a batch (others may be taking some meanwhile) */
	while (spare > CREDIT_BATCH &&
		   !pg_atomic_compare_exchange_u32(&p->spare[db], &spare, CREDIT_BATCH))
		;
	if (spare > CREDIT_BATCH)
		give_back(db, spare - CREDIT_BATCH);
}

/*
 * Whether the last reservation this backend was refused hit its database's
 * share (dlock.max_locks_per_database) rather than the whole table.
 */
bool
dlock_full_in_database(void)
{
	return full_in_database;
}

/*
 * Entries in the table: leases (held, or ended and not yet reclaimed), and
 * heads of names whose own lease ended while others remain or that have
 * only waiters, and queued waiters' reservations.  Summed without the
 * partition locks: exact when no call runs.
 */
uint32
dlock_entry_count(void)
{
	uint32		n = 0;

	for (int i = 0; i < DLOCK_PARTITIONS; i++)
		n += ((volatile DLockCreditPartition *) &shared->parts[i])->entries;
	return n;
}
