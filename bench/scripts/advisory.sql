-- session advisory lock, uncontended: pg_try_advisory_lock + pg_advisory_unlock
\set k random(1, 100000)
SELECT pg_try_advisory_lock(:k);
SELECT pg_advisory_unlock(:k);
