-- Lease lifetimes: the lifetime argument, its default, what dlock_locks
-- shows, and the end of a transaction lease.  (Ends with a session and
-- across crashes: test/tap/034_lifetimes.pl; concurrency:
-- test/isolation/specs/lifetimes.spec.)

-- an invalid lifetime: 22023, with the accepted values in the hint
SELECT sqlstate_of($$SELECT dlock_try('lt', lifetime => 'forever')$$);
SELECT sqlstate_of($$SELECT dlock_acquire('lt', lifetime => '')$$);
SELECT sqlstate_of($$SELECT dlock_try_all(ARRAY['lt'], lifetime => 'Session')$$);
SELECT sqlstate_of($$SELECT dlock_acquire_all(ARRAY['lt'], lifetime => 'ttl ')$$);
SELECT dlock_acquire('lt', '1 hour', '1s', 'o', lifetime => 'xact');
SELECT count(*) AS nothing_taken FROM dlock_locks WHERE name = 'lt';

-- each lifetime is shown; only a ttl lease is durable, with a row
SELECT dlock_try('lt_ttl', '1 hour', 'o', lifetime => 'ttl') > 0 AS ttl,
	   dlock_acquire('lt_session', '1 hour', '1s', 'o', lifetime => 'session') > 0 AS session;
SELECT name, owner, lifetime, durable, version, pid = pg_backend_pid() AS my_pid
FROM dlock_locks WHERE name LIKE 'lt\_%' ORDER BY name;
SELECT name FROM dlock_leases WHERE name LIKE 'lt\_%' ORDER BY name;

-- re-acquiring extends the lease as it is: its lifetime stays
SELECT dlock_try('lt_ttl', '1 hour', 'o', lifetime => 'transaction') > 0 AS extended;
SELECT lifetime FROM dlock_locks WHERE name = 'lt_ttl';

-- NULL: 'session' for the owner generated for this session (even with
-- dlock.owner set), 'ttl' for any other owner
SELECT dlock_try('lt_default') > 0 AS generated,
	   dlock_try('lt_named', owner => 'o') > 0 AS named,
	   dlock_try('lt_generated_ttl', owner => dlock_owner(), lifetime => 'ttl') > 0 AS generated_ttl;
SELECT dlock_owner() AS generated \gset
SET dlock.owner = 'configured';
SELECT dlock_try('lt_configured') > 0 AS configured,
	   dlock_try('lt_generated', owner => :'generated') > 0 AS generated;
RESET dlock.owner;
SELECT name, owner = dlock_owner() AS generated_owner, lifetime, durable
FROM dlock_locks WHERE name IN ('lt_default', 'lt_named', 'lt_generated_ttl', 'lt_configured', 'lt_generated')
ORDER BY name;

-- the all-or-nothing calls take the lifetime too
SELECT array_length(dlock_try_all(ARRAY['lt_a', 'lt_b'], '1 hour', 'o', lifetime => 'session'), 1) AS taken,
	   array_length(dlock_acquire_all(ARRAY['lt_c'], '1 hour', '1s', 'o', lifetime => 'ttl'), 1) AS taken_too;
SELECT name, lifetime FROM dlock_locks WHERE name IN ('lt_a', 'lt_b', 'lt_c') ORDER BY name;

-- a transaction lease lasts until its transaction ends, renewed or not
BEGIN;
SELECT dlock_try('lt_xact', '1 hour', 'o', lifetime => 'transaction') > 0 AS taken;
SELECT array_length(dlock_acquire_all(ARRAY['lt_xa', 'lt_xb'], '1 hour', NULL, 'o',
									  lifetime => 'transaction'), 1) AS taken_all;
SELECT name, lifetime, durable, pid = pg_backend_pid() AS my_pid
FROM dlock_locks WHERE name LIKE 'lt\_x%' ORDER BY name;
SELECT dlock_renew('lt_xact', '2 hours', 'o') IS NOT NULL AS renewed;
COMMIT;
SELECT count(*) AS after_commit FROM dlock_locks WHERE name LIKE 'lt\_x%';

-- in autocommit it ends with its own statement
SELECT dlock_try('lt_auto', '1 hour', 'o', lifetime => 'transaction') > 0 AS taken;
SELECT count(*) AS after_statement FROM dlock_locks WHERE name = 'lt_auto';

-- with a minimum hold, a transaction lease whose transaction ended stays
-- until the hold's end, marked released and bound to nothing: its owner
-- cannot renew it, release it or take it again (a try gets NULL, an acquire
-- waits for its end), its token still fences, a force release ends it
SELECT dlock_try('lt_hold', '2 hours', 'o', lifetime => 'transaction', min_hold => '1 hour') AS t \gset
SELECT token = :t AS same_token, released_at IS NOT NULL AS released, pid = pg_backend_pid() AS my_pid
FROM dlock_locks WHERE name = 'lt_hold';
SELECT dlock_renew('lt_hold', '2 hours', 'o') IS NULL AS not_renewed;
SELECT dlock_release('lt_hold', 'o') AS released_again;
SELECT dlock_try('lt_hold', '2 hours', 'o') IS NULL AS not_taken_again;
SELECT dlock_acquire('lt_hold', '2 hours', '10 ms', 'o') IS NULL AS acquire_timed_out;
SELECT count(*) AS fenced FROM (SELECT dlock_fence('lt_hold', :t)) f;
SELECT token = :t AS same_token, released_at IS NOT NULL AS released,
	   expires_at <= granted_at + min_hold + interval '1 second' AS ends_with_the_hold
FROM dlock_locks WHERE name = 'lt_hold';
SELECT dlock_force_release('lt_hold') AS forced;
SELECT count(*) AS gone FROM dlock_locks WHERE name = 'lt_hold';
-- an acquisition by its owner during the hold is granted a new lease at its end
SELECT dlock_try('lt_short', '1 hour', 'o', lifetime => 'transaction', min_hold => '200 ms') AS t \gset
SELECT dlock_acquire('lt_short', '1 hour', '1 minute', 'o') > :t AS new_lease_after_the_hold;
SELECT lifetime, released_at IS NULL AS held FROM dlock_locks WHERE name = 'lt_short';
SELECT dlock_release('lt_short', 'o') AS released;

-- PREPARE TRANSACTION is refused while one is held (0A000)
BEGIN;
SELECT dlock_try('lt_prepare', '1 hour', 'o', lifetime => 'transaction') > 0 AS taken;
PREPARE TRANSACTION 'lt';
\echo :SQLSTATE
SELECT count(*) AS after_prepare FROM dlock_locks WHERE name = 'lt_prepare';
SELECT count(*) AS prepared FROM pg_prepared_xacts;

-- tidy up
SELECT dlock_release_all(ARRAY['lt_ttl', 'lt_session', 'lt_named', 'lt_a', 'lt_b', 'lt_c'], 'o') AS released;
SELECT dlock_release('lt_default'), dlock_release('lt_generated_ttl'), dlock_release('lt_generated'),
	   dlock_release('lt_configured', 'configured');
SELECT count(*) AS left_over FROM dlock_locks WHERE name LIKE 'lt%';
