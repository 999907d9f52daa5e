-- dlock, uncontended: a transaction lease (memory-only, no row), ended by
-- COMMIT, like advisory_xact.sql's pg_try_advisory_xact_lock
\set k random(1, 100000)
BEGIN;
SELECT dlock_try(:k, '30 s', :client_id, lifetime => 'transaction');
COMMIT;
