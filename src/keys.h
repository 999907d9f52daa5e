/*
 * keys.h
 *		What a lease is known by: its key and the key's hash, its owner, the
 *		words for its mode and lifetime: see keys.c.
 */
#ifndef DLOCK_KEYS_H
#define DLOCK_KEYS_H

#include "dlock.h"

/* the engine's partitions: the low bits of a key's hash pick one */
#define DLOCK_PARTITIONS	64	/* power of two */

typedef struct DLockKey
{
	uint64		token;			/* 0: the name's head; else a further lease */
	Oid			dbid;
	uint16		len;
	char		name[DLOCK_NAME_MAX];
} DLockKey;

typedef enum DLockMode
{
	DLOCK_EXCLUSIVE,
	DLOCK_SHARED
} DLockMode;

/*
 * How a lease ends besides its TTL: with the backend that took it, or with
 * the transaction that took it (lifetime.c).
 */
typedef enum DLockLifetime
{
	DLOCK_LIFETIME_TTL,
	DLOCK_LIFETIME_SESSION,
	DLOCK_LIFETIME_TRANSACTION
} DLockLifetime;

typedef struct DLockOwner
{
	uint16		len;
	char		str[DLOCK_OWNER_MAX];
} DLockOwner;

extern void dlock_make_key(DLockKey *key, const char *name, int len);
extern uint32 dlock_key_hash(const DLockKey *key);
extern bool dlock_owner_equal(const DLockOwner *a, const DLockOwner *b);
extern const char *dlock_mode_name(DLockMode mode);
extern const char *dlock_lifetime_name(DLockLifetime lifetime);

#endif							/* DLOCK_KEYS_H */
