-- Shared leases, semaphores and all-or-nothing multi-locks, in one session
-- speaking for several owners.

-- Shared: any number of readers, each with its own lease and token.
SELECT dlock_try('m_doc', '1 minute', 'r1', 'shared') AS r1 \gset
SELECT dlock_try('m_doc', '1 minute', 'r2', 'shared') AS r2 \gset
SELECT :r2 > :r1 AS tokens_grow;
SELECT dlock_try('m_doc', '1 minute', 'r1', 'shared') = :r1 AS reacquire_same_token;
SELECT owner, mode, permits, durable FROM dlock_locks WHERE name = 'm_doc' ORDER BY token;
SELECT owner, mode, permits, version FROM dlock_leases WHERE name = 'm_doc' ORDER BY token;
-- a writer is refused while readers hold it
SELECT dlock_try('m_doc', '1 minute', 'w') IS NULL AS writer_refused;
-- a holder cannot change mode in place
SELECT sqlstate_of($$SELECT dlock_try('m_doc', '1 minute', 'r1')$$);
-- each reader's token fences for that reader; a released reader's does not
SELECT dlock_fence('m_doc', :r1), dlock_fence('m_doc', :r2);
SELECT dlock_release('m_doc', 'r1', :r1) AS r1_released;
SELECT sqlstate_of(format('SELECT dlock_fence(%L, %s)', 'm_doc', :r1));
SELECT dlock_try('m_doc', '1 minute', 'w') IS NULL AS writer_still_refused;
SELECT dlock_release('m_doc', 'r2') AS r2_released;
SELECT dlock_try('m_doc', '1 minute', 'w') AS w \gset
SELECT :w > :r2 AS writer_granted_with_larger_token;
-- a reader is refused while the writer holds it; the writer's token fences
SELECT dlock_try('m_doc', '1 minute', 'r3', 'shared') IS NULL AS reader_refused;
SELECT dlock_fence('m_doc', :w);
SELECT sqlstate_of(format('SELECT dlock_fence(%L, %s)', 'm_doc', :r2));
SELECT dlock_release('m_doc', 'w') AS w_released;
SELECT count(*) AS rows_left FROM dlock_leases WHERE name = 'm_doc';

-- A reader whose lease expires frees its place for a writer.
SELECT dlock_try('m_short', '50 milliseconds', 'r', 'shared') IS NOT NULL AS reader;
SELECT pg_sleep(0.1);
SELECT dlock_try('m_short', '1 minute', 'w') IS NOT NULL AS writer_after_expiry;
SELECT dlock_release('m_short', 'w');

-- Semaphores: up to N holders.
SELECT dlock_try('m_sem', '1 minute', 'a', permits => 2) IS NOT NULL AS a,
	   dlock_try('m_sem', '1 minute', 'b', permits => 2) IS NOT NULL AS b,
	   dlock_try('m_sem', '1 minute', 'c', permits => 2) IS NULL AS c_refused;
SELECT dlock_try('m_sem', '1 minute', 'a', permits => 2) IS NOT NULL AS a_extends;
SELECT owner, mode, permits FROM dlock_locks WHERE name = 'm_sem' ORDER BY token;
SELECT owner, permits FROM dlock_leases WHERE name = 'm_sem' ORDER BY token;
-- declarations must agree while the name is in use
SELECT sqlstate_of($$SELECT dlock_try('m_sem', '1 minute', 'c', permits => 3)$$);
SELECT sqlstate_of($$SELECT dlock_try('m_sem', '1 minute', 'c')$$);
SELECT sqlstate_of($$SELECT dlock_acquire('m_sem', '1 minute', '1 second', 'c', 'shared')$$);
SELECT sqlstate_of($$SELECT dlock_try('m_doc2', '1 minute', 'x', 'shared') IS NOT NULL$$),
	   sqlstate_of($$SELECT dlock_try('m_doc2', '1 minute', 'y', permits => 1)$$);
SELECT dlock_release('m_doc2', 'x');
SELECT dlock_release('m_sem', 'a') AS a_released;
SELECT dlock_try('m_sem', '1 minute', 'c', permits => 2) IS NOT NULL AS c_gets_a_permit;
-- force_release breaks every lease on the name
SELECT dlock_force_release('m_sem') AS forced;
SELECT count(*) AS leases_left FROM dlock_locks WHERE name = 'm_sem';
SELECT count(*) AS rows_left FROM dlock_leases WHERE name = 'm_sem';

-- Bad arguments
SELECT sqlstate_of($$SELECT dlock_try('m_bad', '1 minute', 'x', 'bogus')$$);
SELECT sqlstate_of($$SELECT dlock_try('m_bad', '1 minute', 'x', NULL)$$);
SELECT sqlstate_of($$SELECT dlock_try('m_bad', '1 minute', 'x', permits => 0)$$);
SELECT sqlstate_of($$SELECT dlock_try('m_bad', '1 minute', 'x', 'shared', 2)$$);
SELECT sqlstate_of($$SELECT dlock_try_all(NULL)$$);
SELECT sqlstate_of($$SELECT dlock_try_all(ARRAY['a', NULL])$$);
SELECT sqlstate_of($$SELECT dlock_try_all(ARRAY['a', ''])$$);
SELECT sqlstate_of($$SELECT dlock_try_all(ARRAY['a', repeat('x', 201)])$$);
SELECT sqlstate_of($$SELECT dlock_try_all(ARRAY['a'], mode => 'bogus')$$);
SELECT count(*) AS nothing_held FROM dlock_locks WHERE name LIKE 'm_bad%' OR name = 'a';

-- All or nothing.
SELECT dlock_try_all(ARRAY['m_x', 'm_y', 'm_z'], '1 minute', 'm') AS xyz \gset
SELECT cardinality(:'xyz'::bigint[]) AS n,
	   (SELECT array_agg(token ORDER BY name) FROM dlock_locks
		WHERE name IN ('m_x', 'm_y', 'm_z')) = :'xyz'::bigint[] AS tokens_in_caller_order;
SELECT dlock_release_all(ARRAY['m_z', 'm_x', 'm_y', 'm_none'], 'm') AS released;
-- one name taken by someone else: nothing is granted
SELECT dlock_try('m_y', '1 minute', 'other') IS NOT NULL AS other_has_y;
SELECT dlock_try_all(ARRAY['m_x', 'm_y', 'm_z'], '1 minute', 'm') IS NULL AS none_granted;
SELECT dlock_acquire_all(ARRAY['m_z', 'm_y', 'm_x'], '1 minute', '100 milliseconds', 'm')
	IS NULL AS timed_out;
SELECT name, owner FROM dlock_locks WHERE name IN ('m_x', 'm_y', 'm_z') ORDER BY name;
SELECT name, owner FROM dlock_leases WHERE name IN ('m_x', 'm_y', 'm_z') ORDER BY name;
SELECT dlock_release('m_y', 'other');
-- a held name is extended, not refused; an extension undone with the rest
SELECT dlock_try('m_x', '1 minute', 'm') AS x \gset
SELECT dlock_try('m_z', '1 minute', 'other') IS NOT NULL AS other_has_z;
SELECT expires_at AS x_expires FROM dlock_locks WHERE name = 'm_x' \gset
SELECT dlock_try_all(ARRAY['m_x', 'm_z'], '1 hour', 'm') IS NULL AS none_granted;
SELECT token = :x AS same_lease,
	   abs(extract(epoch FROM expires_at - :'x_expires')) < 0.01 AS expiry_restored
FROM dlock_locks WHERE name = 'm_x';
SELECT dlock_release('m_z', 'other');
SELECT dlock_try_all(ARRAY['m_x', 'm_z'], '1 hour', 'm') AS xz \gset
SELECT (:'xz'::bigint[])[1] = :x AS x_extended_same_token;
-- duplicates are taken once; an empty list is granted at once
SELECT (t[1] = t[2]) AS same_token FROM dlock_try_all(ARRAY['m_w', 'm_w'], '1 minute', 'm') t;
SELECT dlock_try_all('{}'::text[]) AS empty;
SELECT dlock_release_all(ARRAY['m_x', 'm_z', 'm_w'], 'm') AS released;
-- shared multi-locks share
SELECT dlock_try_all(ARRAY['m_a', 'm_b'], '1 minute', 'p', 'shared') IS NOT NULL AS p,
	   dlock_try_all(ARRAY['m_b', 'm_a'], '1 minute', 'q', 'shared') IS NOT NULL AS q,
	   dlock_try_all(ARRAY['m_a'], '1 minute', 'r') IS NULL AS writer_refused;
SELECT dlock_release_all(ARRAY['m_a', 'm_b'], 'p') + dlock_release_all(ARRAY['m_a', 'm_b'], 'q')
	AS released;
-- inside a transaction that rolls back, a multi-lock is undone too
BEGIN;
SELECT cardinality(dlock_try_all(ARRAY['m_t1', 'm_t2'], '1 minute', 'm')) AS n;
ROLLBACK;
SELECT count(*) AS after_rollback FROM dlock_locks WHERE name LIKE 'm_t%';
-- and in a plpgsql exception block, an error after it undoes it with the block
DO $$
BEGIN
	BEGIN
		PERFORM dlock_try_all(ARRAY['m_e1', 'm_e2'], '1 minute', 'm');
		PERFORM 1 / 0;
	EXCEPTION WHEN division_by_zero THEN
		RAISE NOTICE 'block rolled back';
	END;
END $$;
SELECT count(*) AS after_block FROM dlock_locks WHERE name LIKE 'm_e%';

-- Further leases end on time too: a sweep ends them and deletes their rows.
SELECT count(dlock_try('m_exp', '50 milliseconds', 'r' || i, 'shared')) AS readers,
	   count(dlock_try('m_exps', '50 milliseconds', 'p' || i, permits => 3)) AS permits
FROM generate_series(1, 3) i;
SELECT count(*) AS rows_before FROM dlock_leases WHERE name IN ('m_exp', 'm_exps');
SELECT pg_sleep(0.1);
SELECT dlock_sweep() >= 0 AS swept;
SELECT count(*) AS leases_after FROM dlock_locks WHERE name IN ('m_exp', 'm_exps');
SELECT count(*) AS rows_after FROM dlock_leases WHERE name IN ('m_exp', 'm_exps');
-- and the name may be declared anew at once
SELECT dlock_try('m_exps', '1 minute', 'p', permits => 5) IS NOT NULL AS redeclared;
SELECT dlock_release('m_exps', 'p');

-- The fencing trigger takes a shared holder's token for that holder's writes.
CREATE TABLE m_notes (id int PRIMARY KEY, body text, fence bigint);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON m_notes
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('m_rdoc', 'fence');
SELECT dlock_try('m_rdoc', '1 minute', 'r1', 'shared') AS f1 \gset
SELECT dlock_try('m_rdoc', '1 minute', 'r2', 'shared') AS f2 \gset
SELECT sqlstate_of(format('INSERT INTO m_notes VALUES (1, %L, %s)', 'by r1', :f1));
SELECT sqlstate_of(format('INSERT INTO m_notes VALUES (2, %L, %s)', 'by r2', :f2));
SELECT dlock_release('m_rdoc', 'r1');
SELECT sqlstate_of(format('INSERT INTO m_notes VALUES (3, %L, %s)', 'late r1', :f1));
SELECT id, body FROM m_notes ORDER BY id;
SELECT dlock_release('m_rdoc', 'r2');
DROP TABLE m_notes;

SELECT count(*) AS leases_left FROM dlock_locks WHERE name LIKE 'm\_%';
SELECT count(*) AS rows_left FROM dlock_leases WHERE name LIKE 'm\_%';
