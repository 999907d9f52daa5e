/*
 * credits.h
 *		Entry credits: dlock.max_locks and dlock.max_locks_per_database
 *		counted per partition in batches: see credits.c.
 */
#ifndef DLOCK_CREDITS_H
#define DLOCK_CREDITS_H

extern Size dlock_credits_shmem_size(void);
extern void dlock_credits_shmem_init(void);
extern bool dlock_credit_take(int part, int db, bool share);
extern void dlock_credit_give(int part, int db);
extern bool dlock_full_in_database(void);
extern uint32 dlock_entry_count(void);

#endif							/* DLOCK_CREDITS_H */
