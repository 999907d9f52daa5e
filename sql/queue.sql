-- Queued requests that hold no backend: dlock_enqueue and dlock_dequeue.
-- Every call returns at once; the request waits in the name's queue with
-- no backend (dlock_waiters: pid NULL) until its turn, and its owner
-- collects the lease by asking again.
CREATE FUNCTION queue_state(lock text) RETURNS TABLE (owner text, pos int, pid int, mode text)
LANGUAGE sql AS $$
	SELECT owner, queue_position, pid, mode FROM dlock_waiters
	WHERE name = lock ORDER BY queue_position
$$;
-- Entries (beyond those earlier tests left) and queued requests in use:
-- nothing is left behind while both are 0.
CREATE TEMP TABLE usage_before AS SELECT leases FROM dlock_stats;
CREATE FUNCTION queue_usage(OUT leases bigint, OUT queued bigint)
LANGUAGE sql AS $$
	SELECT s.leases - b.leases, s.queued FROM dlock_stats s, usage_before b
$$;
SELECT * FROM queue_usage();

-- Hostile input: the class-22 SQLSTATE, and nothing queued.
\set VERBOSITY sqlstate
SELECT dlock_enqueue(NULL);
SELECT dlock_enqueue('');
SELECT dlock_enqueue(repeat('x', 201));
SELECT dlock_enqueue('q', owner => NULL);
SELECT dlock_enqueue('q', owner => '');
SELECT dlock_enqueue('q', owner => repeat('o', 129));
SELECT dlock_enqueue('q', ttl => '-1 s');
SELECT dlock_enqueue('q', ttl => '8 days');
SELECT dlock_enqueue('q', mode => NULL);
SELECT dlock_enqueue('q', mode => 'wide');
SELECT dlock_enqueue('q', permits => 0);
SELECT dlock_enqueue('q', mode => 'shared', permits => 2);
SELECT dlock_enqueue('q', hold => NULL);
SELECT dlock_enqueue('q', hold => '0');
SELECT dlock_enqueue('q', hold => '-1 s');
SELECT dlock_enqueue('q', hold => '8 days');
SELECT dlock_enqueue('q', hold => '-1 month');
SELECT dlock_dequeue(NULL);
SELECT dlock_dequeue('');
SELECT dlock_dequeue('q', NULL);
SELECT dlock_dequeue(repeat('x', 201));
\set VERBOSITY default
-- the same, with a holder, so each would otherwise have queued
SELECT dlock_try('q', '1 hour', 'holder') > 0 AS held;
\set VERBOSITY sqlstate
SELECT dlock_enqueue('q', '1 min', 'w', hold => '0');
SELECT dlock_enqueue('q', '1 min', 'w', hold => NULL);
SELECT dlock_enqueue('q', '1 min', 'w', permits => 2);
\set VERBOSITY default
SELECT * FROM queue_state('q');
SELECT dlock_release('q', 'holder');
SELECT * FROM queue_usage();

-- Free and nobody queued: granted at once, as dlock_try (durable by default).
SELECT dlock_enqueue('free', '1 hour', 'a') AS free_token \gset
SELECT token = :free_token AS token_returned, durable, pid = pg_backend_pid() AS our_pid
FROM dlock_locks WHERE name = 'free';
SELECT * FROM queue_state('free');
-- asked again by its holder: the same token, as dlock_try returns it
SELECT dlock_enqueue('free', '1 hour', 'a') = :free_token AS same_token;
SELECT dlock_release('free', 'a');

-- Taken: the request is queued and the call returns NULL at once.
SELECT dlock_try('job', '1 hour', 'a') > 0 AS a_holds;
SELECT dlock_enqueue('job', '1 hour', 'b') AS b_token;
SELECT dlock_enqueue('job', '1 hour', 'c') AS c_token;
SELECT dlock_enqueue('job', '1 hour', 'd', hold => '1 hour') AS d_token;
SELECT * FROM queue_state('job');
SELECT owner, deadline > now() + '50 minutes' AS hold_of_an_hour FROM dlock_waiters
WHERE name = 'job' ORDER BY queue_position;
SELECT waiters FROM dlock_locks WHERE name = 'job';
SELECT * FROM queue_usage();
-- dlock_try by a queued owner does not jump the queue
SELECT dlock_try('job', '1 hour', 'c') AS c_try;
-- asked again: b keeps its place (first), not a second request
SELECT dlock_enqueue('job', '1 hour', 'b') AS b_again;
SELECT * FROM queue_state('job');
-- c leaves; leaving again finds nothing
SELECT dlock_dequeue('job', 'c') AS c_left;
SELECT dlock_dequeue('job', 'c') AS c_left_again;
SELECT dlock_dequeue('nothing here', 'c') AS no_name;
SELECT * FROM queue_state('job');

-- a releases: the head of the queue (b, away) is granted, memory-only,
-- with no backend; d moves up.
SELECT dlock_release('job', 'a');
SELECT owner, pid, durable, lifetime FROM dlock_locks WHERE name = 'job';
SELECT * FROM queue_state('job');
-- b collects its token, from dlock_enqueue or dlock_try alike
SELECT dlock_enqueue('job', '1 hour', 'b') = token AS b_collects,
	   dlock_try('job', '1 hour', 'b') = token AS b_try_same
FROM dlock_locks WHERE name = 'job';
SELECT dlock_release('job', 'b');
SELECT owner, pid IS NULL AS no_backend FROM dlock_locks WHERE name = 'job';
SELECT * FROM queue_state('job');
SELECT dlock_enqueue('job', '1 hour', 'd') = token AS d_collects FROM dlock_locks WHERE name = 'job';
SELECT dlock_release('job', 'd');
SELECT * FROM queue_usage();

-- Shared runs and FIFO across modes: a run of shared requests at the front
-- is granted together; an exclusive one stops the run, and a shared one
-- behind it waits its turn.
SELECT dlock_try('rw', '1 hour', 'w') > 0 AS writer_holds;
SELECT dlock_enqueue('rw', '1 hour', 'r1', 'shared'),
	   dlock_enqueue('rw', '1 hour', 'r2', 'shared'),
	   dlock_enqueue('rw', '1 hour', 'w2'),
	   dlock_enqueue('rw', '1 hour', 'r3', 'shared');
SELECT * FROM queue_state('rw');
SELECT dlock_release('rw', 'w');
SELECT owner, mode FROM dlock_locks WHERE name = 'rw' ORDER BY owner;
SELECT * FROM queue_state('rw');
-- a fresh shared request queues behind them too (FIFO), not granted at once
SELECT dlock_enqueue('rw', '1 hour', 'r4', 'shared') AS r4_token;
SELECT * FROM queue_state('rw');
SELECT dlock_release('rw', 'r1'), dlock_release('rw', 'r2');
SELECT owner, mode FROM dlock_locks WHERE name = 'rw' ORDER BY owner;
SELECT * FROM queue_state('rw');
SELECT dlock_release('rw', 'w2');
SELECT owner, mode FROM dlock_locks WHERE name = 'rw' ORDER BY owner;
SELECT dlock_release('rw', 'r3'), dlock_release('rw', 'r4');

-- A semaphore: one permit free and nobody queued, granted at once; a
-- request for another kind is refused as dlock_try refuses it.
SELECT dlock_try('sem', '1 hour', 's1', permits => 2) > 0 AS s1_holds;
SELECT dlock_enqueue('sem', '1 hour', 's2', permits => 2) > 0 AS s2_at_once;
SELECT dlock_enqueue('sem', '1 hour', 's3', permits => 2) AS s3_token;
SELECT dlock_enqueue('sem', '1 hour', 's4');
SELECT dlock_release('sem', 's1');
SELECT owner FROM dlock_locks WHERE name = 'sem' ORDER BY owner;
SELECT dlock_release('sem', 's2'), dlock_release('sem', 's3');
SELECT * FROM queue_usage();

-- Hold: a request not asked for again within it leaves the queue; whoever
-- walks the queue drops it (here another owner's call).
SELECT dlock_try('held', '1 hour', 'a') > 0 AS a_holds;
SELECT dlock_enqueue('held', '1 hour', 'short', hold => '100 milliseconds') AS short_token;
SELECT dlock_enqueue('held', '1 hour', 'long', hold => '1 hour') AS long_token;
SELECT queue_dropped AS dropped_before FROM dlock_stats \gset
SELECT pg_sleep(0.2);
SELECT dlock_enqueue('held', '1 hour', 'other') AS other_token;
SELECT * FROM queue_state('held');
SELECT queue_dropped - :dropped_before AS dropped FROM dlock_stats;
-- gone: dequeue finds nothing, a new request goes to the tail
SELECT dlock_dequeue('held', 'short') AS short_left;
SELECT dlock_enqueue('held', '1 hour', 'short', hold => '1 hour') AS short_token;
SELECT * FROM queue_state('held');
-- a request whose hold ran out at the front is skipped at the handoff
SELECT dlock_enqueue('held', '1 hour', 'long', hold => '100 milliseconds') AS long_again;
SELECT pg_sleep(0.2);
SELECT dlock_release('held', 'a');
SELECT owner FROM dlock_locks WHERE name = 'held';
SELECT * FROM queue_state('held');
SELECT dlock_release('held', 'other');
SELECT owner FROM dlock_locks WHERE name = 'held';
SELECT dlock_release('held', 'short');
SELECT * FROM queue_usage();

-- A queued request belongs to the role that made it, as a lease does.
CREATE ROLE dlock_queue_r1;
CREATE ROLE dlock_queue_r2;
SELECT dlock_try('roles', '1 hour', 'a') > 0 AS a_holds;
SET ROLE dlock_queue_r1;
SELECT dlock_enqueue('roles', '1 hour', 'shared-owner') AS r1_token;
SET ROLE dlock_queue_r2;
SELECT dlock_dequeue('roles', 'shared-owner') AS r2_dequeues;
-- r2's own request of the same owner string is a request of its own
SELECT dlock_enqueue('roles', '1 hour', 'shared-owner') AS r2_token;
SELECT owner, queue_position, role FROM dlock_waiters WHERE name = 'roles' ORDER BY queue_position;
SELECT dlock_dequeue('roles', 'shared-owner') AS r2_leaves_own;
SET ROLE dlock_queue_r1;
SELECT dlock_dequeue('roles', 'shared-owner') AS r1_dequeues;
RESET ROLE;
-- a member of the request's role may leave it
SET ROLE dlock_queue_r1;
SELECT dlock_enqueue('roles', '1 hour', 'shared-owner') AS r1_token;
RESET ROLE;
GRANT dlock_queue_r1 TO dlock_queue_r2;
SET ROLE dlock_queue_r2;
SELECT dlock_dequeue('roles', 'shared-owner') AS member_dequeues;
RESET ROLE;
SELECT dlock_release('roles', 'a');
DROP ROLE dlock_queue_r1;
DROP ROLE dlock_queue_r2;

-- A force release of the name leaves its queue: the head is granted.
SELECT dlock_try('forced', '1 hour', 'a') > 0 AS a_holds;
SELECT dlock_enqueue('forced', '1 hour', 'b') AS b_token;
SELECT dlock_force_release('forced');
SELECT owner, pid FROM dlock_locks WHERE name = 'forced';
SELECT dlock_release('forced', 'b');

-- Aborted: a request queued in a transaction that rolls back stays queued
-- (it holds nothing the transaction could take back); a grant at once is
-- taken back as dlock_try's is.
SELECT dlock_try('xact', '1 hour', 'a') > 0 AS a_holds;
BEGIN;
SELECT dlock_enqueue('xact', '1 hour', 'b') AS b_token;
ROLLBACK;
SELECT * FROM queue_state('xact');
SELECT dlock_dequeue('xact', 'b');
SELECT dlock_release('xact', 'a');
BEGIN;
SELECT dlock_enqueue('xact', '1 hour', 'b') > 0 AS b_at_once;
ROLLBACK;
SELECT count(*) AS leases FROM dlock_locks WHERE name = 'xact';

-- Queued requests count against dlock.max_locks (1000 in the test config):
-- they fill the table as leases do, with the same error, 53200.
SELECT dlock_try('crowded', '1 hour', 'a') > 0 AS a_holds;
DO $$
DECLARE
	n int := 0;
BEGIN
	LOOP
		PERFORM dlock_enqueue('crowded', '1 hour', 'w' || n);
		n := n + 1;
	END LOOP;
EXCEPTION WHEN OTHERS THEN
	RAISE NOTICE '%: %', SQLSTATE, SQLERRM;
END $$;
SELECT leases AS entries, queued > 900 AS mostly_queued FROM dlock_stats;
-- a held name is still served when full
SELECT dlock_try('crowded', '1 hour', 'a') > 0 AS holder_served;
SELECT count(*) = (SELECT queued FROM dlock_stats) AS all_listed FROM dlock_waiters WHERE name = 'crowded';
SELECT count(*) FILTER (WHERE dlock_dequeue('crowded', owner)) = count(*) AS all_left
FROM (SELECT owner FROM dlock_waiters WHERE name = 'crowded') w;
SELECT dlock_release('crowded', 'a');

SELECT * FROM queue_usage();
DROP FUNCTION queue_state(text);
DROP FUNCTION queue_usage();
DROP TABLE usage_before;
