/*
 * keys.c
 *		What a lease is known by: its key (database, name, token) and the
 *		key's hash, which picks the partition; owners compared; the words for
 *		modes and lifetimes.
 *
 * Functions of their arguments (and of the backend's database) alone, with
 * no state of their own: below the engine in the layers, they call no other
 * file of dlock.
 *
 * Locking: none.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"

#include "keys.h"

/* Callers check names first; a name that does not fit is a bug, not a crash. */
void
dlock_make_key(DLockKey *key, const char *name, int len)
{
	if (unlikely(len < 1 || len > DLOCK_NAME_MAX))
		elog(ERROR, "dlock lock name of %d bytes", len);
	memset(key, 0, sizeof(DLockKey));
	key->dbid = MyDatabaseId;
	key->len = len;
	memcpy(key->name, name, len);
}

const char *
dlock_mode_name(DLockMode mode)
{
	return mode == DLOCK_SHARED ? "shared" : "exclusive";
}

const char *
dlock_lifetime_name(DLockLifetime lifetime)
{
	switch (lifetime)
	{
		case DLOCK_LIFETIME_SESSION:
			return "session";
		case DLOCK_LIFETIME_TRANSACTION:
			return "transaction";
		default:
			return "ttl";
	}
}

/*
 * Every lease of a name hashes to the name's partition: the token only
 * changes the bits above the partition number.
 */
uint32
dlock_key_hash(const DLockKey *key)
{
	uint32		hash;

	hash = hash_combine(hash_bytes_uint32(key->dbid),
						hash_bytes((const unsigned char *) key->name, key->len));
	if (key->token != 0)
		hash ^= (uint32) hash_bytes_extended((const unsigned char *) &key->token,
											 sizeof(uint64), 0) &
			~(uint32) (DLOCK_PARTITIONS - 1);
	return hash;
}

bool
dlock_owner_equal(const DLockOwner *a, const DLockOwner *b)
{
	return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}
