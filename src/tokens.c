/*
 * tokens.c
 *		Fencing tokens that never go backwards (cluster-wide).
 *
 * Tokens are handed out from blocks reserved in a small file in the data
 * directory, fsync'ed before any token of the block is used, so a crash
 * (even with synchronous_commit off, even for a transaction that never
 * committed) cannot reissue one.  The WAL timeline sits in the high bits, so
 * a promoted standby's tokens are above any the old primary issued, whether
 * or not that WAL ever reached the standby.
 *
 * A timeline id can be used by two histories: one discarded by pg_rewind
 * leaves no history file behind (without a shared WAL archive), and the next
 * promotion picks its id again.  So on each new timeline the counter below
 * the timeline bits starts no lower than the wall clock, in 10 microsecond
 * units since 2020: the history promoted later starts above every token of
 * the earlier one, as long as that one issued fewer than 100,000 tokens a
 * second on average between the two promotions and the members' clocks
 * differ by less than the time between them.
 *
 * Locking: inside a reserved block a token is one compare-and-swap on
 * next, with no lock; reservations (file writes) and raises of the floor
 * take the token LWLock, never while a partition lock is held.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "settings.h"
#include "tokens.h"


#define TOKEN_FILE			"pg_dlock.tokens"
#define TOKEN_FILE_TMP		"pg_dlock.tokens.tmp"
#define TOKEN_TLI_SHIFT		48
#define TOKEN_CLOCK_UNIT	10	/* microseconds */
/* 2020-01-01 in microseconds since the PostgreSQL epoch (2000-01-01) */
#define TOKEN_CLOCK_EPOCH	INT64CONST(631152000000000)
/* leaves 2^40 tokens of room below the next timeline */
#define TOKEN_CLOCK_MAX		((UINT64CONST(1) << TOKEN_TLI_SHIFT) - (UINT64CONST(1) << 40))

/*
 * next is the one shared line every grant must write (one cluster-wide
 * order).  ShmemInitStruct starts each allocation on a cache line and rounds
 * it up to whole lines, so the line holds only this struct, whose other
 * fields a grant reads anyway and only a new block writes.
 */
typedef struct TokenState
{
	LWLock	   *lock;			/* serializes reservations and floor raises */
	pg_atomic_uint64 next;		/* next token to hand out */
	pg_atomic_uint64 reserved_end;	/* the file covers every token below this;
									 * only published after fsync */
} TokenState;

StaticAssertDecl(sizeof(TokenState) <= PG_CACHE_LINE_SIZE,
				 "the token state must fit in one cache line");

static TokenState *tokens = NULL;

Size
dlock_token_shmem_size(void)
{
	return MAXALIGN(sizeof(TokenState));
}

/*
 * Every process that attaches; the caller holds AddinShmemInitLock.  The
 * first, the postmaster (at start and after a crash), reads the file.
 */
void
dlock_token_shmem_init(LWLock *lock)
{
	FILE	   *file;
	uint64		end = 0;
	bool		found;

	tokens = ShmemInitStruct("dlock tokens", dlock_token_shmem_size(), &found);
	if (found)
		return;
	tokens->lock = lock;

	file = AllocateFile(TOKEN_FILE, "r");
	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", TOKEN_FILE)));
	}
	else
	{
		if (fscanf(file, UINT64_FORMAT, &end) != 1)
			ereport(FATAL,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("file \"%s\" does not hold a token reservation", TOKEN_FILE),
					 errhint("Fencing tokens could go backwards: restore the file, or write into it a number above every token ever issued.")));
		FreeFile(file);
	}
	/* Anything below the reservation may have been handed out already. */
	pg_atomic_init_u64(&tokens->next, end);
	pg_atomic_init_u64(&tokens->reserved_end, end);
}

/* Moves next up to floor if it is below; the caller holds the token lock. */
static void
raise_next(uint64 floor)
{
	uint64		cur = pg_atomic_read_u64(&tokens->next);

	while (cur < floor &&
		   !pg_atomic_compare_exchange_u64(&tokens->next, &cur, floor))
		;
}

/*
 * Where a new timeline's tokens start: its base plus the wall clock (the
 * counter stays below the timeline bits until about 2109; after that, and
 * with a clock before 2020, the clock adds nothing).
 */
static uint64
timeline_start(uint64 base)
{
	TimestampTz now = GetCurrentTimestamp();
	uint64		clock = 0;

	if (now > TOKEN_CLOCK_EPOCH)
		clock = (uint64) (now - TOKEN_CLOCK_EPOCH) / TOKEN_CLOCK_UNIT;
	if (clock > TOKEN_CLOCK_MAX)
		clock = 0;
	return base + clock;
}

static void
reserve_tokens(uint64 end)
{
	FILE	   *file;

	file = AllocateFile(TOKEN_FILE_TMP, PG_BINARY_W);
	if (file == NULL ||
		fprintf(file, UINT64_FORMAT "\n", end) < 0 ||
		fflush(file) != 0 ||
		pg_fsync(fileno(file)) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", TOKEN_FILE_TMP)));
	if (FreeFile(file) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", TOKEN_FILE_TMP)));
	(void) durable_rename(TOKEN_FILE_TMP, TOKEN_FILE, ERROR);
}

/*
 * Returns a token above every token handed out before, or 0 when none is
 * reserved (the block is used up, or a promotion moved the base).  Callers
 * may hold a partition lock, so this never writes the file and never fails:
 * on 0 they let go of their locks and call dlock_token_prefetch().  Inside
 * the reserved block a token is one compare-and-swap, so concurrent grants
 * on different names do not queue on a lock.
 */
uint64
dlock_token_next(void)
{
	uint64		base = (uint64) GetWALInsertionTimeLine() << TOKEN_TLI_SHIFT;

	for (;;)
	{
		uint64		cur = pg_atomic_read_u64(&tokens->next);

		/* reserved_end only grows, so a token below it is on disk */
		if (cur < base || cur >= pg_atomic_read_u64(&tokens->reserved_end))
			return 0;
		if (pg_atomic_compare_exchange_u64(&tokens->next, &cur, cur + 1))
			return cur;
	}
}

/*
 * Reserves the next block ahead of need (or at once when none is left), by
 * a caller that holds no lock: the file write may fail.  Every call that may
 * grant runs it first, so grants under a partition lock or in a commit
 * callback find tokens reserved.
 */
void
dlock_token_prefetch(void)
{
	uint64		base = (uint64) GetWALInsertionTimeLine() << TOKEN_TLI_SHIFT;
	uint64		block = (uint64) dlock_token_block;
	uint64		end = pg_atomic_read_u64(&tokens->reserved_end);
	uint64		next = pg_atomic_read_u64(&tokens->next);

	if (next >= base && next + block / 2 < end)
		return;
	LWLockAcquire(tokens->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(&tokens->next) < base)
		raise_next(timeline_start(base));
	end = pg_atomic_read_u64(&tokens->reserved_end);
	if (pg_atomic_read_u64(&tokens->next) + block / 2 >= end)
	{
		end = Max(end, pg_atomic_read_u64(&tokens->next)) + block;
		/* a failed write must not leave the token lock held */
		PG_TRY();
		{
			reserve_tokens(end);
		}
		PG_CATCH();
		{
			LWLockRelease(tokens->lock);
			PG_RE_THROW();
		}
		PG_END_TRY();
		pg_write_barrier();
		pg_atomic_write_u64(&tokens->reserved_end, end);
	}
	LWLockRelease(tokens->lock);
}

/* Tokens already stored in a lease table are never handed out again. */
void
dlock_token_raise_floor(uint64 floor)
{
	LWLockAcquire(tokens->lock, LW_EXCLUSIVE);
	raise_next(floor);
	LWLockRelease(tokens->lock);
}

/* Every token below this is reserved in the file (for the database floors). */
uint64
dlock_token_reserved_end(void)
{
	return pg_atomic_read_u64(&tokens->reserved_end);
}
