-- transaction advisory lock, uncontended: released by COMMIT
\set k random(1, 100000)
BEGIN;
SELECT pg_try_advisory_xact_lock(:k);
COMMIT;
