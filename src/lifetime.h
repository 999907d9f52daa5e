/*
 * lifetime.h
 *		Leases that end with the session or the transaction that took them:
 *		see lifetime.c.
 */
#ifndef DLOCK_LIFETIME_H
#define DLOCK_LIFETIME_H

#include "engine.h"

extern Size dlock_lifetime_shmem_size(void);
extern void dlock_lifetime_shmem_init(void);

extern void dlock_lifetime_prepare(const DLockRequest *req);
extern const DLockBackend *dlock_lifetime_backend(void);
extern bool dlock_backend_alive(const DLockBackend *backend);
extern void dlock_lifetime_bound(const DLockRequest *req, uint64 token);
extern void dlock_lifetime_end(const DLockKey *key, uint32 hash, uint64 token);

#endif							/* DLOCK_LIFETIME_H */
