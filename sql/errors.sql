-- Bad arguments get clear errors with the right SQLSTATE and change nothing.

-- names
SELECT sqlstate_of($$SELECT dlock_try(NULL)$$);
SELECT sqlstate_of($$SELECT dlock_try('')$$);
SELECT sqlstate_of($$SELECT dlock_try(repeat('x', 201))$$);
SELECT sqlstate_of($$SELECT dlock_try(repeat('é', 101))$$);
SELECT sqlstate_of($$SELECT dlock_try(repeat('x', 1000000))$$);
SELECT sqlstate_of($$SELECT dlock_acquire(NULL)$$);
SELECT sqlstate_of($$SELECT dlock_renew('')$$);
SELECT sqlstate_of($$SELECT dlock_release(NULL)$$);

-- ttl: NULL means the default; it must be positive and at most 7 days
SELECT sqlstate_of($$SELECT dlock_try('e1', NULL)$$);
SELECT sqlstate_of($$SELECT dlock_try('e2', '0')$$);
SELECT sqlstate_of($$SELECT dlock_try('e3', '-1 second')$$);
SELECT sqlstate_of($$SELECT dlock_try('e4', '1 microsecond')$$);
SELECT sqlstate_of($$SELECT dlock_try('e5', '7 days')$$);
SELECT sqlstate_of($$SELECT dlock_try('e6', '7 days 1 microsecond')$$);
SELECT sqlstate_of($$SELECT dlock_try('e7', '1 month')$$);
SELECT sqlstate_of($$SELECT dlock_try('e8', '5000 years')$$);
SELECT sqlstate_of($$SELECT dlock_try('e9', '1 day -23 hours')$$);
SELECT sqlstate_of($$SELECT dlock_renew('e1', '-1 day')$$);
SELECT sqlstate_of($$SELECT dlock_acquire('e10', '0')$$);

-- intervals too large for microseconds keep their sign
SELECT sqlstate_of($$SELECT dlock_try('e20', '-178956970 years -8 months')$$);
SELECT sqlstate_of($$SELECT dlock_try('e21', '178956970 years 7 months')$$);
SELECT sqlstate_of($$SELECT dlock_acquire('e22', '1s', '-178956970 years -8 months')$$);

-- timeout: NULL waits without limit, negative is refused
SELECT sqlstate_of($$SELECT dlock_acquire('e11', '1s', '-1 millisecond')$$);
SELECT sqlstate_of($$SELECT dlock_acquire('e12', '1s', '0')$$);
SELECT sqlstate_of($$SELECT dlock_acquire('e13', '1s', '5000 years')$$);

-- owners
SELECT sqlstate_of($$SELECT dlock_try('e14', owner => NULL)$$);
SELECT sqlstate_of($$SELECT dlock_try('e15', owner => '')$$);
SELECT sqlstate_of($$SELECT dlock_try('e16', owner => repeat('o', 129))$$);
SELECT sqlstate_of($$SELECT dlock_try('e17', owner => repeat('o', 128))$$);
SELECT sqlstate_of($$SELECT dlock_release('e17', NULL)$$);
-- dlock.owner over 128 bytes is refused when set
SELECT sqlstate_of($$SET dlock.owner = 'a-very-long-owner-setting-that-goes-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on'$$);
SELECT dlock_owner() LIKE 'session:%' AS owner_unchanged;

-- tokens are positive: fencing with anything else names the token as given
DO $$
DECLARE
	detail text;
BEGIN
	PERFORM dlock_fence('e1', -1);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
	RAISE NOTICE '%: % (%)', SQLSTATE, SQLERRM, detail;
END $$;
SELECT sqlstate_of($$SELECT dlock_fence('e1', 0)$$);

-- tokens in release: anything that is not a live lease's token is false
SELECT dlock_release('e1', token => 9223372036854775807) AS max_bigint;
SELECT dlock_release('e1', token => -9223372036854775808) AS min_bigint;

-- none of the refused calls left a lease behind
SELECT name FROM dlock_locks WHERE name LIKE 'e%' ORDER BY name;
SELECT count(*) AS waiters FROM dlock_waiters;

-- PREPARE TRANSACTION with lease changes pending is refused
BEGIN;
SELECT dlock_try('prepared') IS NOT NULL;
PREPARE TRANSACTION 'p1';
SELECT count(*) AS prepared_lease_undone FROM dlock_locks WHERE name = 'prepared';
SELECT count(*) FROM pg_prepared_xacts;
-- a transaction that did not touch leases can still be prepared
BEGIN;
SELECT count(*) FROM dlock_locks WHERE name = 'nothing';
PREPARE TRANSACTION 'p2';
ROLLBACK PREPARED 'p2';

