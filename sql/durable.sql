-- Durable leases are mirrored in dlock_leases, each change a new row version.
SELECT dlock_try('d1', '1 minute', 'o1') AS t1 \gset
SELECT owner, token = :t1 AS token_ok, version,
       date_trunc('second', expires_at - granted_at + interval '1 millisecond') AS ttl,
       ttl AS row_ttl
FROM dlock_leases WHERE name = 'd1';
SELECT version, durable FROM dlock_locks WHERE name = 'd1';

-- renewal and re-acquisition bump the version and store their ttl; the
-- token stays
SELECT dlock_renew('d1', '2 minutes', 'o1') IS NOT NULL;
SELECT token = :t1 AS token_ok, version, expires_at - granted_at > '119 seconds' AS renewed, ttl
FROM dlock_leases WHERE name = 'd1';
SELECT dlock_try('d1', '3 minutes', 'o1') = :t1 AS same_token;
SELECT version, ttl FROM dlock_leases WHERE name = 'd1';
SELECT version FROM dlock_locks WHERE name = 'd1';

-- release deletes the row; a rolled-back grant leaves none
SELECT dlock_release('d1', 'o1');
SELECT count(*) FROM dlock_leases WHERE name = 'd1';
BEGIN;
SELECT dlock_try('d2', '1 minute', 'o1') IS NOT NULL;
SELECT count(*) AS row_in_xact FROM dlock_leases WHERE name = 'd2';
ROLLBACK;
SELECT count(*) AS row_after_rollback FROM dlock_leases WHERE name = 'd2';

-- a takeover of an expired lease writes a row with the new token (the old,
-- expired row is deleted by the takeover or by the worker's sweeper, as
-- timing has it: only live rows are shown)
SELECT dlock_try('d3', '50 milliseconds', 'old') AS t3 \gset
SELECT pg_sleep(0.1);
SELECT dlock_try('d3', '1 minute', 'new') AS t4 \gset
SELECT owner, token = :t4 AS new_token, :t4 > :t3 AS larger
FROM dlock_leases WHERE name = 'd3' AND expires_at > now();

-- memory-only leases never touch the table
SET dlock.durable = off;
SELECT dlock_try('m1', '1 minute', 'o1') IS NOT NULL;
SELECT count(*) AS rows FROM dlock_leases WHERE name = 'm1';
SELECT version, durable FROM dlock_locks WHERE name = 'm1';
-- ... and work in a read-only transaction, where durable ones cannot
BEGIN READ ONLY;
SELECT dlock_try('m2', '1 minute', 'o1') IS NOT NULL AS memory_only_read_only;
COMMIT;
RESET dlock.durable;
BEGIN READ ONLY;
SELECT dlock_try('m3', '1 minute', 'o1');
ROLLBACK;
-- a durable acquire that would wait fails at once, before it queues
SELECT dlock_try('m4', '1 minute', 'holder') IS NOT NULL AS held;
BEGIN READ ONLY;
SET LOCAL statement_timeout = '2s';   -- a wait would end with 57014
SELECT dlock_acquire('m4', '1 minute', '10 seconds', 'o1');
ROLLBACK;
SELECT count(*) AS queued FROM dlock_waiters;
SELECT dlock_release('m4', 'holder');
-- renewing or releasing a lease follows how it was taken, not the setting
SELECT dlock_renew('m1', '2 minutes', 'o1') IS NOT NULL;
SELECT count(*) AS rows FROM dlock_leases WHERE name = 'm1';
SELECT dlock_release('m1', 'o1');
SELECT dlock_release('m2', 'o1');

-- the table can be changed only through the functions
CREATE ROLE dlock_app;
SET ROLE dlock_app;
SELECT dlock_try('app-lease', '1 minute', 'app') IS NOT NULL AS app_can_lock;
INSERT INTO dlock_leases VALUES ('forged', 'me', 0, 1, now(), now() + interval '1 hour', interval '1 hour', 1);
UPDATE dlock_leases SET expires_at = now() + interval '1 year';
DELETE FROM dlock_leases;
SELECT count(*) FROM dlock_leases;
SELECT dlock_release('app-lease', 'app') AS app_can_release;
RESET ROLE;
DROP ROLE dlock_app;
SELECT name FROM dlock_leases WHERE name IN ('d1', 'd2', 'd3', 'm1', 'm2', 'm3', 'app-lease', 'forged')
  AND expires_at > now();   -- (d3's expired row may wait for the sweeper)
SELECT dlock_release('d3', 'new');
