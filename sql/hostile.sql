-- Hostile input in one session: NULL in every argument, names and owners at
-- and past their limits, control characters and multibyte text, TTLs and
-- timeouts from zero to the largest intervals PostgreSQL has, odd tokens.
-- Each call gets its documented result or a clear error with the right
-- SQLSTATE; none of them disturbs a lease it does not own, and many calls
-- leave the backend's memory where it was.
\set VERBOSITY terse

-- 'ok: <result>' or '<SQLSTATE>: <message>' (plus the detail when asked).
CREATE FUNCTION hostile_call(q text, with_detail boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r text;
	st text;
	msg text;
	det text;
BEGIN
	EXECUTE q INTO r;
	RETURN 'ok: ' || coalesce(r, 'NULL');
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || msg ||
		CASE WHEN with_detail AND det <> '' THEN ' (' || det || ')' ELSE '' END;
END $$;

-- Every name below contains 'h-' (leases of earlier tests come and go).
SELECT count(*) AS leases_at_start FROM dlock_locks WHERE name LIKE '%h-%';
-- A lease that nothing below may touch, and its row.
SELECT dlock_try('h-sentinel', '1 hour', 'guard') AS sentinel \gset
SELECT expires_at AS sentinel_expires FROM dlock_locks WHERE name = 'h-sentinel' \gset

-- The largest and smallest intervals PostgreSQL 15 and 16 can represent;
-- from 17 on the same values are 'infinity' and '-infinity'.  dlock takes
-- them as infinite on every version: an infinite ttl is refused (22023),
-- an infinite timeout waits without limit, a negative one is refused.
-- (Kept as input text: PostgreSQL 15 prints the smallest one in a form its
-- own input rejects.  17 prints them as infinity and -infinity, and GUC
-- range errors there name the unit of both bounds: expected/hostile_1.out.)
\set max_iv '178956970 years 7 months 2147483647 days 2562047788 hours 54.775807 seconds'
\set min_iv '-178956970 years -8 months -2147483648 days -2562047788 hours -54.775808 seconds'
SELECT :'max_iv'::interval AS max_interval, :'min_iv'::interval AS min_interval;

--
-- NULL in every argument of every function.  A NULL name or owner is 22004;
-- a NULL ttl is dlock.default_ttl, a NULL timeout waits without limit (the
-- names here are free, so nothing waits), a NULL token releases whatever
-- token the lease has.
--
SELECT q AS call, hostile_call(q) AS result FROM (VALUES
	(1, $$SELECT dlock_try(NULL, '1 minute', 'o')$$),
	(2, $$SELECT dlock_try('h-null-ttl', NULL, 'o') > 0$$),
	(3, $$SELECT dlock_try('h-n', '1 minute', NULL)$$),
	(4, $$SELECT dlock_try(NULL, NULL, NULL)$$),
	(5, $$SELECT dlock_try(NULL::text, NULL::interval, NULL::text)$$),
	(6, $$SELECT dlock_acquire(NULL, '1 minute', '0', 'o')$$),
	(7, $$SELECT dlock_acquire('h-null-acq', NULL, '0', 'o') > 0$$),
	(8, $$SELECT dlock_acquire('h-null-timeout', '1 minute', NULL, 'o') > 0$$),
	(9, $$SELECT dlock_acquire('h-n', '1 minute', '0', NULL)$$),
	(10, $$SELECT dlock_acquire(NULL, NULL, NULL, NULL)$$),
	(11, $$SELECT dlock_renew(NULL, '1 minute', 'o')$$),
	(12, $$SELECT dlock_renew('h-null-ttl', NULL, 'o') > now()$$),
	(13, $$SELECT dlock_renew('h-null-ttl', '1 minute', NULL)$$),
	(14, $$SELECT dlock_renew(NULL, NULL, NULL)$$),
	(15, $$SELECT dlock_release(NULL, 'o', 1)$$),
	(16, $$SELECT dlock_release('h-null-ttl', NULL, 1)$$),
	(17, $$SELECT dlock_release(NULL, NULL, NULL)$$),
	(18, $$SELECT dlock_fence(NULL, 1)$$),
	(19, $$SELECT dlock_fence('h-null-ttl', NULL)$$),
	(20, $$SELECT dlock_fence(NULL, NULL)$$),
	(21, $$SELECT dlock_force_release(NULL)$$),
	(22, $$SELECT dlock_fenced()$$),
	(23, $$SELECT dlock_versioned()$$)
) v(n, q) ORDER BY n;
-- a NULL token releases the lease whatever its token (takes effect at commit)
SELECT dlock_release('h-null-ttl', 'o', NULL) AS released_null_token;
SELECT dlock_release('h-null-acq', 'o') AND dlock_release('h-null-timeout', 'o') AS released;

--
-- Names: 1 to 200 bytes, compared byte for byte, never truncated.
--
SELECT q AS call, hostile_call(q, true) AS result FROM (VALUES
	(1, $$SELECT dlock_try('', '1 minute', 'o')$$),
	(2, $$SELECT dlock_try('h-' || repeat('x', 198), '1 minute', 'o') > 0$$),
	(3, $$SELECT dlock_try('h-' || repeat('x', 199), '1 minute', 'o')$$),
	(4, $$SELECT dlock_try(repeat('x', 1048576), '1 minute', 'o')$$),
	(5, $$SELECT dlock_try('h-' || repeat('é', 99), '1 minute', 'o') > 0$$),
	(6, $$SELECT dlock_try('h-' || repeat('é', 99) || 'x', '1 minute', 'o')$$),
	(7, $$SELECT dlock_try('h-' || repeat('€', 66), '1 minute', 'o') > 0$$),
	(8, $$SELECT dlock_try('h-' || repeat('€', 66) || 'x', '1 minute', 'o')$$),
	(9, $$SELECT dlock_try('h-' || repeat('😀', 49) || 'xy', '1 minute', 'o') > 0$$),
	(10, $$SELECT dlock_try('h-' || repeat('😀', 49) || 'xyz', '1 minute', 'o')$$),
	(11, $$SELECT dlock_try('h-' || repeat(E'\x01', 198), '1 minute', 'o') > 0$$),
	(12, $$SELECT dlock_acquire('h-' || repeat('x', 199), '1 minute', '1 hour', 'o')$$),
	(13, $$SELECT dlock_acquire(repeat('y', 1048576), '1 minute', NULL, 'o')$$),
	(14, $$SELECT dlock_renew(repeat('x', 1048576), '1 minute', 'o')$$),
	(15, $$SELECT dlock_release(repeat('x', 1048576), 'o')$$),
	(16, $$SELECT dlock_release('', 'o')$$),
	(17, $$SELECT dlock_fence(repeat('x', 1048576), 1)$$),
	(18, $$SELECT dlock_fence('', 1)$$),
	(19, $$SELECT dlock_force_release('h-' || repeat('x', 199))$$),
	(20, $$SELECT dlock_force_release('')$$)
) v(n, q) ORDER BY n;

-- Names that differ only in control characters, spaces, case or Unicode
-- normalization are different locks, each with its own token.
CREATE TEMP TABLE odd_names (n int, name text);
INSERT INTO odd_names VALUES
	(1, 'h-a'), (2, 'h-a '), (3, ' h-a'), (4, E'h-a\n'), (5, E'h-a\t'), (6, E'h-a\r'),
	(7, E'h-a\x01'), (8, E'h-\x1b[31ma\x1b[0m'), (9, E'h-a\x7f'), (10, 'h-A'),
	(11, 'h-é'), (12, E'h-e\u0301'), (13, E'h-\u200b'), (14, E'\ufeffh-a'),
	(15, 'h-%s%s%s%n%x'), (16, $$h-x'); DELETE FROM dlock_leases; --$$),
	(17, 'h-"quoted" \\ back\slash'), (18, E'h-\u2028'), (19, ' h- ');
SELECT count(*) AS granted, count(DISTINCT t) AS distinct_tokens
FROM (SELECT dlock_try(name, '1 minute', 'o') AS t FROM odd_names) g;
-- the view and the table show every name with its exact bytes
SELECT o.n, l.name = o.name AS same_bytes, octet_length(l.name) AS bytes
FROM odd_names o LEFT JOIN dlock_locks l ON l.name = o.name ORDER BY o.n;
SELECT count(*) AS rows_with_exact_names
FROM odd_names o JOIN dlock_leases l ON l.name = o.name;
-- another owner is refused on each of them
SELECT count(*) AS refused FROM odd_names WHERE dlock_try(name, '1 minute', 'p') IS NULL;
-- format characters stay literal in messages
SELECT hostile_call($$SELECT dlock_fence('h-%s%s%s%n%x', 1)$$);
SELECT count(*) FILTER (WHERE dlock_release(name, 'o')) AS released FROM odd_names;
SELECT count(*) AS odd_left FROM dlock_locks l JOIN odd_names o ON o.name = l.name;
SELECT dlock_release('h-' || repeat('x', 198), 'o') AS r1, dlock_release('h-' || repeat('é', 99), 'o') AS r2,
       dlock_release('h-' || repeat('€', 66), 'o') AS r3, dlock_release('h-' || repeat('😀', 49) || 'xy', 'o') AS r4,
       dlock_release('h-' || repeat(E'\x01', 198), 'o') AS r5;

--
-- Owners: 1 to 128 bytes, same rules, including dlock.owner.
--
SELECT q AS call, hostile_call(q, true) AS result FROM (VALUES
	(1, $$SELECT dlock_try('h-own', '1 minute', '')$$),
	(2, $$SELECT dlock_try('h-own', '1 minute', repeat('o', 128)) > 0$$),
	(3, $$SELECT dlock_try('h-own2', '1 minute', repeat('o', 129))$$),
	(4, $$SELECT dlock_try('h-own2', '1 minute', repeat('o', 1048576))$$),
	(5, $$SELECT dlock_try('h-own3', '1 minute', repeat('é', 64)) > 0$$),
	(6, $$SELECT dlock_try('h-own4', '1 minute', repeat('é', 64) || 'x')$$),
	(7, $$SELECT dlock_try('h-own5', '1 minute', E'\x01\x02\n\t\x1b') > 0$$),
	(8, $$SELECT dlock_renew('h-own', '1 minute', repeat('o', 1048576))$$),
	(9, $$SELECT dlock_release('h-own', repeat('o', 129))$$),
	(10, $$SELECT dlock_acquire('h-own', '1 minute', '0', repeat('o', 129))$$)
) v(n, q) ORDER BY n;
-- an owner differing only in a trailing byte is another owner
SELECT dlock_try('h-own', '1 minute', repeat('o', 127)) IS NULL AS near_owner_refused,
       dlock_release('h-own', repeat('o', 127) || ' ') AS near_owner_release;
SELECT dlock_release('h-own', repeat('o', 128)) AND dlock_release('h-own3', repeat('é', 64))
   AND dlock_release('h-own5', E'\x01\x02\n\t\x1b') AS released;
SET dlock.owner = 'oooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooo';
SELECT octet_length(dlock_owner()) AS owner_bytes, dlock_try('h-guc-owner', '1 minute') > 0 AS granted;
SELECT dlock_release('h-guc-owner') AS released;
SELECT hostile_call($$SET dlock.owner = 'ooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooo'$$, true);
SELECT octet_length(dlock_owner()) AS owner_bytes_unchanged;
SET dlock.owner = E'ctl\x01\x1b';
SELECT dlock_owner() = E'ctl\x01\x1b' AS control_owner;
RESET dlock.owner;

--
-- TTLs: positive and at most 7 days; a month counts as 30 days.
--
SELECT q AS call, hostile_call(q) AS result FROM (VALUES
	(1, $$SELECT dlock_try('h-ttl-1', '0', 'o')$$),
	(2, $$SELECT dlock_try('h-ttl-2', '-1 microsecond', 'o')$$),
	(3, $$SELECT dlock_try('h-ttl-3', '1 microsecond', 'o') > 0$$),
	(4, $$SELECT dlock_try('h-ttl-4', '7 days', 'o') > 0$$),
	(5, $$SELECT dlock_try('h-ttl-5', '168:00:00', 'o') > 0$$),
	(6, $$SELECT dlock_try('h-ttl-6', '7 days 0.000001 seconds', 'o')$$),
	(7, $$SELECT dlock_try('h-ttl-7', '1 mon', 'o')$$),
	(8, $$SELECT dlock_try('h-ttl-8', '1 mon -23 days', 'o') > 0$$),
	(9, $$SELECT dlock_try('h-ttl-9', '1 mon -30 days', 'o')$$),
	(10, $$SELECT dlock_try('h-ttl-10', '-1 mon 30 days 1 second', 'o') > 0$$),
	(11, $$SELECT dlock_try('h-ttl-11', '1000 years', 'o')$$),
	(12, $$SELECT dlock_try('h-ttl-12', '-1000 years', 'o')$$),
	(13, format('SELECT dlock_try(%L, %L, %L)', 'h-ttl-13', :'max_iv', 'o')),
	(14, format('SELECT dlock_try(%L, %L, %L)', 'h-ttl-14', :'min_iv', 'o')),
	(15, $$SELECT dlock_try('h-ttl-15', '2562047788:00:54.775807', 'o')$$),
	(16, $$SELECT dlock_try('h-ttl-16', '-2562047788 hours -54.775808 seconds', 'o')$$),
	(17, $$SELECT dlock_try('h-ttl-17', '-178956970 years -8 months', 'o')$$),
	(18, $$SELECT dlock_acquire('h-ttl-18', '-1 second', '0', 'o')$$),
	(19, $$SELECT dlock_renew('h-ttl-4', '0', 'o')$$),
	(20, $$SELECT dlock_renew('h-ttl-4', '-1 microsecond', 'o')$$),
	(21, format('SELECT dlock_renew(%L, %L, %L)', 'h-ttl-4', :'max_iv', 'o')),
	(22, format('SELECT dlock_renew(%L, %L, %L)', 'h-ttl-4', :'min_iv', 'o')),
	(23, $$SELECT dlock_renew('h-ttl-4', '7 days', 'o') > now() + '6 days 23 hours'$$)
) v(n, q) ORDER BY n;
-- a 1-microsecond lease is over by the next statement: the name is free,
-- and a new holder gets a larger token
SELECT count(*) AS ttl_3_listed FROM dlock_locks WHERE name = 'h-ttl-3';
SELECT dlock_try('h-ttl-3', '1 minute', 'p') > :sentinel AS taken_over;
SELECT expires_at - now() BETWEEN '6 days 23:59' AND '7 days' AS ttl_4_renewed_for_7_days
FROM dlock_locks WHERE name = 'h-ttl-4';
SELECT count(*) FILTER (WHERE dlock_release(name, owner)) AS released
FROM dlock_locks WHERE name LIKE 'h-ttl-%';

-- dlock.default_ttl: 1 ms to 7 days
SET dlock.default_ttl = 0;
SET dlock.default_ttl = '-1s';
SET dlock.default_ttl = '8d';
SET dlock.default_ttl = '7d';
SELECT dlock_try('h-default-ttl', owner => 'o') > 0 AS granted;
SELECT expires_at - granted_at BETWEEN '6 days 23:59:59' AND '7 days 00:00:00.01' AS seven_days
FROM dlock_locks WHERE name = 'h-default-ttl';
SET dlock.default_ttl = 1;
SELECT dlock_renew('h-default-ttl', owner => 'o') IS NOT NULL AS renewed;
SELECT pg_sleep(0.01);
SELECT count(*) AS default_ttl_listed FROM dlock_locks WHERE name = 'h-default-ttl';
RESET dlock.default_ttl;

--
-- Timeouts, on a name another owner holds: 0 and tiny timeouts give NULL
-- at once, negative ones are refused, huge ones wait without limit (until
-- statement_timeout).
--
SELECT dlock_try('h-busy', '1 hour', 'holder') > 0 AS busy_held;
SET statement_timeout = '2s';
SELECT q AS call, hostile_call(q) AS result FROM (VALUES
	(1, $$SELECT dlock_acquire('h-busy', '1 minute', '0', 'o')$$),
	(2, $$SELECT dlock_acquire('h-busy', '1 minute', '1 microsecond', 'o')$$),
	(3, $$SELECT dlock_acquire('h-busy', '1 minute', '10 milliseconds', 'o')$$),
	(4, $$SELECT dlock_acquire('h-busy', '1 minute', '1 mon -30 days', 'o')$$),
	(5, $$SELECT dlock_acquire('h-busy', '1 minute', '-1 microsecond', 'o')$$),
	(6, $$SELECT dlock_acquire('h-busy', '1 minute', '1 day -86400.000001 seconds', 'o')$$),
	(7, $$SELECT dlock_acquire('h-busy', '1 minute', '-1000 years', 'o')$$),
	(8, $$SELECT dlock_acquire('h-busy', '1 minute', '-2562047788 hours -54.775808 seconds', 'o')$$)
) v(n, q) ORDER BY n;
-- the most negative intervals are negative too (each alone: a wait would
-- run into statement_timeout)
SELECT hostile_call(format('SELECT dlock_acquire(%L, %L, %L, %L)', 'h-busy', '1 minute', :'min_iv', 'o'));
SELECT hostile_call($$SELECT dlock_acquire('h-busy', '1 minute', '-178956970 years -8 months', 'o')$$);
SELECT hostile_call($$SELECT dlock_acquire('h-busy', '1 minute', '-2147483648 days', 'o')$$);
SET statement_timeout = '300ms';
SELECT hostile_call(format('SELECT dlock_acquire(%L, %L, %L, %L)', 'h-busy', '1 minute', :'max_iv', 'o'));
SELECT hostile_call($$SELECT dlock_acquire('h-busy', '1 minute', '1000 years', 'o')$$);
SELECT hostile_call($$SELECT dlock_acquire('h-busy', '1 minute', '2562047788:00:54.775807', 'o')$$);
SELECT hostile_call($$SELECT dlock_acquire('h-busy', '1 minute', NULL, 'o')$$);
RESET statement_timeout;
-- nobody is left waiting, the holder keeps the lease
SELECT count(*) AS waiters FROM dlock_waiters;
SELECT owner, waiters FROM dlock_locks WHERE name = 'h-busy';
-- on a free name, any valid timeout is an immediate grant
SELECT dlock_acquire('h-free-1', '1 minute', :'max_iv', 'o') > 0 AS max_timeout,
       dlock_acquire('h-free-2', '1 minute', '1 microsecond', 'o') > 0 AS tiny_timeout,
       dlock_acquire('h-free-3', '1 minute', '1000 years', 'o') > 0 AS long_timeout;
SELECT dlock_release('h-free-1', 'o') AND dlock_release('h-free-2', 'o')
   AND dlock_release('h-free-3', 'o') AS released;

--
-- Tokens: release with any token but the lease's is false; dlock_fence with
-- any token but the live lease's is DL001.  The lease stays as it was.
--
SELECT dlock_try('h-tok', '1 hour', 'o') AS tok \gset
-- (details are shown where they name no token of the live lease)
SELECT q AS call, hostile_call(q, d) AS result FROM (VALUES
	(1, $$SELECT dlock_release('h-tok', 'o', 0)$$, false),
	(2, $$SELECT dlock_release('h-tok', 'o', -1)$$, false),
	(3, $$SELECT dlock_release('h-tok', 'o', 9223372036854775807)$$, false),
	(4, $$SELECT dlock_release('h-tok', 'o', -9223372036854775808)$$, false),
	(5, $$SELECT dlock_release('h-tok', 'o', (SELECT token - 1 FROM dlock_locks WHERE name = 'h-tok'))$$, false),
	(6, $$SELECT dlock_release('h-tok', 'p', (SELECT token FROM dlock_locks WHERE name = 'h-tok'))$$, false),
	(7, $$SELECT dlock_fence('h-tok', 0)$$, false),
	(8, $$SELECT dlock_fence('h-tok', -1)$$, true),
	(9, $$SELECT dlock_fence('h-tok', 9223372036854775807)$$, true),
	(10, $$SELECT dlock_fence('h-tok', -9223372036854775808)$$, true),
	(11, $$SELECT dlock_fence('h-no-such-lock', 0)$$, true),
	(12, $$SELECT dlock_fence('h-no-such-lock', -1)$$, true),
	(13, $$SELECT dlock_release('h-tok', 'o', '9223372036854775808')$$, false),
	(14, $$SELECT dlock_fence('h-tok', 1.5)$$, false)
) v(n, q, d) ORDER BY n;
SELECT token = :tok AS same_token, owner FROM dlock_locks WHERE name = 'h-tok';
BEGIN;
SELECT dlock_fence('h-tok', :tok) AS fenced;
COMMIT;

-- the fencing trigger with odd tokens in the row
CREATE TABLE hostile_rows (id int, fence bigint, small smallint);
CREATE TRIGGER fenced BEFORE INSERT ON hostile_rows
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('h-tok', 'fence');
SELECT q AS call, hostile_call(q) AS result FROM (VALUES
	(1, $$INSERT INTO hostile_rows VALUES (1, 0) RETURNING id$$),
	(2, $$INSERT INTO hostile_rows VALUES (2, -1) RETURNING id$$),
	(3, $$INSERT INTO hostile_rows VALUES (3, 9223372036854775807) RETURNING id$$),
	(4, $$INSERT INTO hostile_rows VALUES (4, -9223372036854775808) RETURNING id$$),
	(5, $$INSERT INTO hostile_rows VALUES (5, NULL) RETURNING id$$)
) v(n, q) ORDER BY n;
SELECT hostile_call(format('INSERT INTO hostile_rows VALUES (6, %s) RETURNING id', :tok)) AS live_token;
DROP TRIGGER fenced ON hostile_rows;
CREATE TRIGGER fenced BEFORE INSERT ON hostile_rows
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('h-tok', 'small');
SELECT hostile_call($$INSERT INTO hostile_rows VALUES (7, NULL, -32768) RETURNING id$$) AS smallint_min;
SELECT count(*) AS rows_written FROM hostile_rows;
DROP TABLE hostile_rows;
SELECT dlock_release('h-tok', 'o', :tok) AS released;

--
-- dlock_force_release: any holder's lease, at commit; a free name is false.
--
SELECT dlock_try('h-forced', '1 hour', 'victim') > 0 AS held;
BEGIN;
SELECT dlock_force_release('h-forced') AS broken;
SELECT dlock_force_release('h-forced') AS broken_twice;
ROLLBACK;
SELECT owner AS kept_after_rollback FROM dlock_locks WHERE name = 'h-forced';
SELECT dlock_force_release('h-forced') AS broken;
SELECT dlock_renew('h-forced', '1 hour', 'victim') IS NULL AS victim_renew_refused,
       dlock_release('h-forced', 'victim') AS victim_release;
SELECT dlock_force_release('h-forced') AS free_name,
       dlock_force_release('h-never-held') AS never_held;

--
-- Nothing above disturbed the sentinel or left anything behind.
--
SELECT token = :sentinel AS same_token, owner,
       abs(extract(epoch FROM expires_at - :'sentinel_expires')) < 0.1 AS same_expiry
FROM dlock_locks WHERE name = 'h-sentinel';
SELECT string_agg(name, ', ' ORDER BY name) AS only_sentinel_and_busy_left
FROM dlock_locks WHERE name LIKE '%h-%';
SELECT token = :sentinel AS row_token, version FROM dlock_leases WHERE name = 'h-sentinel';
SELECT count(*) AS waiters FROM dlock_waiters;
SELECT to_regclass('dlock_leases') IS NOT NULL AS lease_table_still_there;

--
-- Memory: many calls, most of them refused, do not grow the backend.  Each
-- loop runs once to warm caches; then the total of every memory context of
-- the backend is measured before and after 100,000 more calls.  (The
-- setting hostile.scale, 1 unless set, scales the loops: test/valgrind/run.sh
-- sets it lower, since under Valgrind every call is 30 times slower.)
--
CREATE FUNCTION hostile_mem() RETURNS bigint LANGUAGE sql AS
	$$SELECT sum(used_bytes)::bigint FROM pg_backend_memory_contexts$$;
-- One call per iteration, a commit every 100 (a transaction's own log of
-- lease changes is freed at its end, so it is not what is measured here).
CREATE PROCEDURE hostile_loop(n int, durable boolean) LANGUAGE plpgsql AS $$
DECLARE
	t bigint;
	prefix text := CASE WHEN durable THEN 'h-mem-d-' ELSE 'h-mem-m-' END;
BEGIN
	FOR i IN 1 .. n LOOP
		PERFORM set_config('dlock.durable', durable::text, true);
		CASE i % 10
		WHEN 0 THEN
			t := dlock_try(prefix || (i % 97), '1 minute', 'm');
		WHEN 1 THEN
			PERFORM dlock_renew(prefix || ((i - 1) % 97), '1 minute', 'm');
		WHEN 2 THEN
			PERFORM dlock_release(prefix || ((i - 2) % 97), 'm', t);
		WHEN 3 THEN
			PERFORM dlock_acquire('h-sentinel', '1 minute', '0', 'm');
		WHEN 4 THEN
			PERFORM dlock_release('h-sentinel', 'm');
		WHEN 5 THEN
			BEGIN
				PERFORM dlock_try(repeat('x', 201 + i % 1000), '1 minute', 'm');
			EXCEPTION WHEN invalid_parameter_value THEN NULL;
			END;
		WHEN 6 THEN
			BEGIN
				PERFORM dlock_fence('h-sentinel', i);
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
		WHEN 7 THEN
			BEGIN
				PERFORM dlock_acquire('h-mem-x', '-1 second', '0', CASE WHEN i % 20 = 7 THEN 'm' END);
			EXCEPTION WHEN invalid_parameter_value OR null_value_not_allowed THEN NULL;
			END;
		WHEN 8 THEN
			PERFORM count(*) FROM dlock_locks;
		ELSE
			PERFORM count(*) FROM dlock_waiters;
		END CASE;
		IF i % 100 = 0 THEN
			COMMIT;
		END IF;
	END LOOP;
END $$;
SELECT coalesce(nullif(current_setting('hostile.scale', true), ''), '1')::numeric AS scale \gset
CALL hostile_loop(greatest(1000, (2000 * :scale)::int), false);
CALL hostile_loop(greatest(1000, (2000 * :scale)::int), true);
SELECT hostile_mem() AS mem0 \gset
CALL hostile_loop((100000 * :scale)::int, false);
SELECT hostile_mem() AS mem1 \gset
CALL hostile_loop((20000 * :scale)::int, true);
SELECT hostile_mem() AS mem2 \gset
-- at most 64 kB of growth over 100,000 memory-only and 20,000 durable calls
SELECT :mem1 - :mem0 < 65536 AS memory_only_calls_no_growth,
       :mem2 - :mem1 < 65536 AS durable_calls_no_growth;
-- many 1 MB names: the backend gives the memory back
SELECT bool_and(hostile_call(format('SELECT dlock_try(repeat(%L, %s), NULL, %L)', 'x', 1048576 + g, 'm'))
                LIKE '22023: lock name is too long') AS all_refused
FROM generate_series(1, greatest(10, (200 * :scale)::int)) g;
SELECT hostile_mem() - :mem2 < 65536 AS big_names_no_growth;
SELECT 'released' AS mem_leases FROM (SELECT count(dlock_release(name, 'm'))
	FROM dlock_locks WHERE name LIKE 'h-mem-%') r;
SELECT count(*) AS mem_left FROM dlock_locks WHERE name LIKE 'h-mem-%';

-- clean up: earlier and later tests count leases
SELECT dlock_release('h-busy', 'holder') AS busy_released,
       dlock_release('h-sentinel', 'guard', :sentinel) AS sentinel_released;
SELECT count(*) AS leases_left FROM dlock_locks WHERE name LIKE '%h-%';
DROP PROCEDURE hostile_loop(int, boolean);
DROP FUNCTION hostile_mem();
DROP FUNCTION hostile_call(text, boolean);
