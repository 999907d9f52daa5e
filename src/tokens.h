/*
 * tokens.h
 *		Fencing tokens that never go backwards (cluster-wide): see tokens.c.
 */
#ifndef DLOCK_TOKENS_H
#define DLOCK_TOKENS_H

#include "storage/lwlock.h"

extern Size dlock_token_shmem_size(void);
extern void dlock_token_shmem_init(LWLock *lock);
extern uint64 dlock_token_next(void);
extern void dlock_token_prefetch(void);
extern void dlock_token_raise_floor(uint64 floor);
extern uint64 dlock_token_reserved_end(void);

#endif							/* DLOCK_TOKENS_H */
