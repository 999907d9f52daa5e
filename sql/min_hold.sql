-- A minimum hold (min_hold): a release before the grant plus min_hold ends
-- the lease then, not at once.  Times here are long, so nothing depends on
-- how fast the test runs; the end of a hold is in the isolation test
-- min_hold and in test/tap/034_min_hold.pl.
\set VERBOSITY default

-- Arguments: negative, longer than the ttl (given, or dlock.default_ttl's),
-- on every acquiring function: 22023 with a hint.
SELECT dlock_try('mh', '1 minute', 'a', min_hold => '-1 second');
SELECT dlock_try('mh', '1 minute', 'a', min_hold => '61 seconds');
SET dlock.default_ttl = '10s';
SELECT dlock_acquire('mh', owner => 'a', min_hold => '11 seconds');
RESET dlock.default_ttl;
SELECT dlock_try_all('{mh,mh2}', '1 minute', 'a', min_hold => '2 minutes');
SELECT dlock_acquire_all('{mh,mh2}', '1 minute', '1 second', 'a', min_hold => '-1 day');
\set VERBOSITY terse
SELECT count(*) AS nothing_granted FROM dlock_locks WHERE name IN ('mh', 'mh2');
-- NULL and zero are no hold; a hold as long as the ttl is allowed
SELECT dlock_try('mh0', '1 hour', 'a', min_hold => '0') > 0 AS zero_ok;
SELECT dlock_release('mh0', 'a') AS released_at_once;
SELECT dlock_try('mh0', '1 hour', 'a', min_hold => NULL) > 0 AS null_ok;
-- a lease without a hold has no hold row
SELECT count(*) AS no_hold_row FROM dlock_lease_holds WHERE name = 'mh0';
SELECT dlock_release('mh0', 'a') AS released_at_once;
SELECT dlock_try('mh0', '1 hour', 'a', min_hold => '1 hour') > 0 AS ttl_long_ok;
SELECT dlock_release('mh0', 'a') AS released;
SELECT count(*) AS still_held FROM dlock_locks WHERE name = 'mh0';
SELECT dlock_force_release('mh0');

-- Released within the hold: held until granted_at + min_hold, by the same
-- owner and token, shown released; its rows say the same (the lease row its
-- expiry, the hold row the hold and the release).
SELECT dlock_try('mh', '2 hours', 'a', min_hold => '1 hour') AS t \gset
SELECT min_hold, released_at FROM dlock_locks WHERE name = 'mh';
SELECT token = :t AS hold_row, min_hold, released_at FROM dlock_lease_holds WHERE name = 'mh';
SELECT dlock_release('mh', 'a', :t) AS released;
SELECT owner, token = :t AS same_token, min_hold,
       released_at BETWEEN granted_at AND now() + '1 minute' AS released_now,
       expires_at - granted_at BETWEEN '59 minutes 59 seconds' AND '1 hour' AS ends_at_hold
FROM dlock_locks WHERE name = 'mh';
SELECT l.version = r.version AS same_version, h.min_hold, h.released_at = l.released_at AS same_release,
       r.expires_at - r.granted_at BETWEEN '59 minutes 59 seconds' AND '1 hour' AS row_ends_at_hold,
       r.ttl BETWEEN '59 minutes' AND '1 hour' AS row_ttl_is_what_is_left
FROM dlock_locks l JOIN dlock_leases r USING (name, token)
JOIN dlock_lease_holds h USING (name, token) WHERE name = 'mh';
-- nobody else gets it meanwhile; the owner cannot release it twice
SELECT dlock_try('mh', '1 minute', 'b') IS NULL AS other_refused;
SELECT dlock_acquire('mh', '1 minute', '10 ms', 'b') IS NULL AS other_times_out;
SELECT dlock_release('mh', 'a') AS released_twice;
-- the token still fences
SELECT dlock_fence('mh', :t);

-- A renewal takes the lease back: held again, with its new expiry, not
-- released; granted_at and the hold do not move; a release then again
-- holds it to granted_at + min_hold.
SELECT granted_at AS g FROM dlock_locks WHERE name = 'mh' \gset
SELECT dlock_renew('mh', '90 minutes', 'a') - now() > '89 minutes' AS renewed;
SELECT released_at IS NULL AS taken_back, granted_at = :'g' AS same_grant, min_hold,
       expires_at - now() > '89 minutes' AS new_expiry
FROM dlock_locks WHERE name = 'mh';
SELECT h.released_at IS NULL AS row_taken_back, l.version = r.version AS same_version
FROM dlock_locks l JOIN dlock_leases r USING (name, token)
JOIN dlock_lease_holds h USING (name, token) WHERE name = 'mh';
SELECT dlock_release('mh', 'a') AS released_again;
SELECT released_at IS NOT NULL AS released, expires_at - granted_at <= '1 hour' AS ends_at_hold
FROM dlock_locks WHERE name = 'mh';
-- re-acquiring by the owner is an extension: it takes the lease back too
SELECT dlock_try('mh', '2 hours', 'a') = :t AS same_token;
SELECT released_at IS NULL AS taken_back, expires_at - now() > '119 minutes' AS extended
FROM dlock_locks WHERE name = 'mh';

-- In a transaction: the release applies at commit, and a rollback forgets it.
BEGIN;
SELECT dlock_release('mh', 'a') AS released_in_xact;
SELECT released_at IS NULL AS not_yet FROM dlock_locks WHERE name = 'mh';
ROLLBACK;
SELECT l.released_at IS NULL AS rolled_back, h.released_at IS NULL AS row_rolled_back,
       l.version = r.version AS same_version
FROM dlock_locks l JOIN dlock_leases r USING (name, token)
JOIN dlock_lease_holds h USING (name, token) WHERE name = 'mh';

-- A force release ends a lease within its hold at once.
SELECT dlock_release('mh', 'a') AS released;
SELECT dlock_force_release('mh') AS forced;
SELECT count(*) AS gone FROM dlock_locks WHERE name = 'mh';
SELECT count(*) AS row_gone FROM dlock_leases WHERE name = 'mh';
SELECT count(*) AS hold_row_gone FROM dlock_lease_holds WHERE name = 'mh';
SELECT dlock_try('mh', '1 minute', 'b') > :t AS next_holder;
SELECT dlock_release('mh', 'b');

-- So does a force release in the transaction that released it within its
-- hold (the release is pending, not applied, when the force release runs);
-- one rolled back to a savepoint leaves the release within the hold.
SELECT dlock_try('mh', '2 hours', 'a', min_hold => '1 hour') AS t \gset
BEGIN;
SELECT dlock_release('mh', 'a') AS released;
SAVEPOINT s;
SELECT dlock_force_release('mh') AS forced;
ROLLBACK TO s;
COMMIT;
SELECT token = :t AS same_token, released_at IS NOT NULL AS released_within_hold
FROM dlock_locks WHERE name = 'mh';
SELECT dlock_try('mh', '2 hours', 'a') = :t AS taken_back;
BEGIN;
SELECT dlock_release('mh', 'a') AS released;
SELECT dlock_force_release('mh') AS forced;
COMMIT;
SELECT count(*) AS gone FROM dlock_locks WHERE name = 'mh';
SELECT count(*) AS row_gone FROM dlock_leases WHERE name = 'mh';
SELECT count(*) AS hold_row_gone FROM dlock_lease_holds WHERE name = 'mh';
SELECT dlock_try('mh', '1 minute', 'b') > :t AS next_holder;
SELECT dlock_release('mh', 'b');

-- Past the hold, a release ends the lease at once.
SELECT dlock_try('mh', '1 hour', 'a', min_hold => '10 ms') IS NOT NULL AS granted;
SELECT pg_sleep(0.05);
SELECT dlock_release('mh', 'a') AS released;
SELECT count(*) AS gone_at_once FROM dlock_locks WHERE name = 'mh';
SELECT count(*) AS hold_row_gone FROM dlock_lease_holds WHERE name = 'mh';

-- A lease that ends by expiry leaves its rows to the sweep, or to the next
-- grant on its name, which deletes the lease row only: the sweep deletes
-- the hold rows whose lease rows are gone.
SELECT dlock_try('mx1', '100 ms', 'a', min_hold => '50 ms') IS NOT NULL AS granted,
       dlock_try('mx2', '100 ms', 'a', min_hold => '50 ms') IS NOT NULL AS granted;
SELECT dlock_release('mx1', 'a') AS released_within_hold;
SELECT pg_sleep(0.3);
SELECT dlock_try('mx2', '1 minute', 'b') IS NOT NULL AS next_grant;
SELECT owner AS the_next_grant_s_row_only FROM dlock_leases WHERE name = 'mx2';
SELECT dlock_sweep() >= 0 AS swept;
SELECT count(*) AS hold_rows_left FROM dlock_lease_holds WHERE name IN ('mx1', 'mx2');
SELECT dlock_release('mx2', 'b');

-- Memory-only leases, shared leases and permits: the same rule per lease.
SET dlock.durable = off;
SELECT dlock_try('mem', '1 hour', 'a', min_hold => '30 minutes') IS NOT NULL AS granted;
SELECT dlock_release('mem', 'a') AS released;
SELECT durable, released_at IS NOT NULL AS released, min_hold FROM dlock_locks WHERE name = 'mem';
SELECT dlock_force_release('mem');
RESET dlock.durable;
SELECT dlock_try('doc', '1 hour', 'r1', 'shared', min_hold => '30 minutes') IS NOT NULL AS r1,
       dlock_try('doc', '1 hour', 'r2', 'shared') IS NOT NULL AS r2;
SELECT dlock_release('doc', 'r1') AS r1_released, dlock_release('doc', 'r2') AS r2_released;
SELECT owner, released_at IS NOT NULL AS released FROM dlock_locks WHERE name = 'doc' ORDER BY owner;
SELECT dlock_try('doc', '1 minute', 'w') IS NULL AS writer_waits_for_the_hold,
       dlock_try('doc', '1 minute', 'r3', 'shared') IS NOT NULL AS reader_shares;
SELECT dlock_force_release('doc');
SELECT dlock_try('pool', '1 hour', 'p1', permits => 2, min_hold => '30 minutes') IS NOT NULL AS p1,
       dlock_try('pool', '1 hour', 'p2', permits => 2) IS NOT NULL AS p2;
SELECT dlock_release('pool', 'p1') AS p1_released, dlock_release('pool', 'p2') AS p2_released;
SELECT dlock_try('pool', '1 minute', 'p3', permits => 2) IS NOT NULL AS p3_gets_the_free_permit,
       dlock_try('pool', '1 minute', 'p4', permits => 2) IS NULL AS p4_not_the_held_one;
SELECT dlock_force_release('pool');

-- Several names at once: each lease keeps the hold.
SELECT array_length(dlock_try_all('{m1,m2}', '1 hour', 'a', min_hold => '30 minutes'), 1) AS two;
SELECT array_length(dlock_acquire_all('{m3}', '1 hour', NULL, 'a', min_hold => '30 minutes'), 1) AS one;
SELECT dlock_release_all('{m1,m2,m3}', 'a') AS released;
SELECT name, min_hold, released_at IS NOT NULL AS released FROM dlock_locks
WHERE name IN ('m1', 'm2', 'm3') ORDER BY name;
SELECT dlock_force_release(n) FROM unnest('{m1,m2,m3}'::text[]) AS n;
SELECT count(*) AS none_left FROM dlock_locks
WHERE name IN ('mh', 'mh0', 'mh2', 'mem', 'doc', 'pool', 'm1', 'm2', 'm3');
