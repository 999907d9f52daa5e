-- The lease table holds dlock.max_locks (1000 in the test config) leases.
-- Expired leases are reclaimed first; live leases are never evicted.
-- Earlier tests left under 100 leases; exact counts depend on them.
SELECT count(*) < 100 AS few_before FROM dlock_locks;
SELECT count(*) AS long_lived FROM generate_series(1, 500) g
WHERE dlock_try('live-' || g, '1 hour') IS NOT NULL;

-- Fill the rest with short leases, one call at a time, until it is full.
DO $$
DECLARE
	n int := 0;
BEGIN
	LOOP
		BEGIN
			PERFORM dlock_try('short-' || n, '300 milliseconds');
			n := n + 1;
		EXCEPTION WHEN out_of_memory THEN
			RAISE NOTICE 'full after % short leases: %', CASE WHEN n BETWEEN 400 AND 500
				THEN 'between 400 and 500' ELSE n::text END, SQLERRM;
			EXIT;
		END;
	END LOOP;
END $$;

-- Full of live leases: a new name fails with 53200 and a hint.
DO $$
DECLARE
	st text;
	msg text;
	hint text;
BEGIN
	PERFORM dlock_try('one-too-many', '1 hour');
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		hint = PG_EXCEPTION_HINT;
	RAISE NOTICE '%: % (hint: %)', st, msg, hint;
END $$;
-- A held name is still renewable and re-acquirable when full.
SELECT dlock_try('live-1', '1 hour') IS NOT NULL AS holder_still_served;
SELECT dlock_renew('live-2', '1 hour') IS NOT NULL AS renewal_still_served;

SELECT pg_sleep(0.4);
-- The short leases have expired: their slots are reclaimed for new names.
SELECT count(*) AS after_reclaim FROM generate_series(1, 400) g
WHERE dlock_try('late-' || g, '1 hour') IS NOT NULL;
SELECT count(*) AS live_kept FROM dlock_locks WHERE name LIKE 'live-%';
SELECT count(*) FROM dlock_locks WHERE name LIKE 'short-%';
