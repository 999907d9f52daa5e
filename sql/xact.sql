-- Lease changes follow the caller's transaction.

-- An acquisition is visible to others at once and undone by ROLLBACK.
BEGIN;
SELECT dlock_try('x1') IS NOT NULL AS granted;
SELECT count(*) AS visible_before_commit FROM dlock_locks WHERE name = 'x1';
ROLLBACK;
SELECT count(*) AS undone FROM dlock_locks WHERE name = 'x1';

-- A release takes effect at commit; ROLLBACK keeps the lease.
SELECT dlock_try('x2') AS t2 \gset
BEGIN;
SELECT dlock_release('x2') AS released;
SELECT count(*) AS still_held_until_commit FROM dlock_locks WHERE name = 'x2';
SELECT dlock_release('x2') AS second_release_in_same_xact;
SELECT dlock_renew('x2') IS NULL AS renew_after_release;
ROLLBACK;
SELECT token = :t2 AS kept_after_rollback FROM dlock_locks WHERE name = 'x2';
BEGIN;
SELECT dlock_release('x2');
COMMIT;
SELECT count(*) AS released_at_commit FROM dlock_locks WHERE name = 'x2';

-- A renewal takes effect at commit; ROLLBACK keeps the old expiry.
SELECT dlock_try('x3', '10 seconds') IS NOT NULL;
BEGIN;
SELECT dlock_renew('x3', '1 hour') > now() + interval '50 minutes' AS renew_returns_new_expiry;
SELECT expires_at < now() + interval '1 minute' AS old_expiry_until_commit FROM dlock_locks WHERE name = 'x3';
ROLLBACK;
SELECT expires_at < now() + interval '1 minute' AS renewal_undone FROM dlock_locks WHERE name = 'x3';
BEGIN;
SELECT dlock_renew('x3', '1 hour') IS NOT NULL;
COMMIT;
SELECT expires_at > now() + interval '50 minutes' AS renewed_at_commit FROM dlock_locks WHERE name = 'x3';

-- Savepoints: ROLLBACK TO undoes what was done inside, nothing else.
BEGIN;
SELECT dlock_try('x4') IS NOT NULL AS outer_grant;
SAVEPOINT a;
SELECT dlock_try('x5') IS NOT NULL AS inner_grant;
SELECT dlock_release('x3') AS inner_release;
ROLLBACK TO a;
SELECT name FROM dlock_locks WHERE name IN ('x4', 'x5') ORDER BY 1;
COMMIT;
SELECT name FROM dlock_locks WHERE name IN ('x3', 'x4', 'x5') ORDER BY 1;

-- RELEASE SAVEPOINT keeps the inner changes for the outer commit or rollback.
BEGIN;
SAVEPOINT b;
SELECT dlock_try('x6') IS NOT NULL;
RELEASE SAVEPOINT b;
SAVEPOINT c;
SELECT dlock_release('x4');
RELEASE SAVEPOINT c;
ROLLBACK;
SELECT name FROM dlock_locks WHERE name IN ('x4', 'x6') ORDER BY 1;

-- Re-acquiring extends the lease at commit, like a renewal: inside the
-- transaction the old expiry stands (the lease is pinned), a rolled-back
-- savepoint leaves it, and a committed one applies.
SELECT dlock_try('x7', '10 seconds') AS t7 \gset
BEGIN;
SAVEPOINT d;
SELECT dlock_try('x7', '1 hour') = :t7 AS same_token;
SELECT expires_at < now() + interval '1 minute' AS not_yet_extended FROM dlock_locks WHERE name = 'x7';
ROLLBACK TO d;
SELECT expires_at < now() + interval '1 minute' AS unchanged FROM dlock_locks WHERE name = 'x7';
COMMIT;
SELECT expires_at < now() + interval '1 minute' AS not_extended FROM dlock_locks WHERE name = 'x7';
BEGIN;
SAVEPOINT d;
SELECT dlock_try('x7', '1 hour') = :t7 AS same_token;
RELEASE d;
COMMIT;
SELECT expires_at > now() + interval '50 minutes' AS extended FROM dlock_locks WHERE name = 'x7';
SELECT dlock_try('x7', '10 seconds') = :t7 AS shortened_again;

-- Release then take again in one transaction: still held after commit.
BEGIN;
SELECT dlock_release('x7') AS released;
SELECT dlock_try('x7') = :t7 AS retaken_same_token;
COMMIT;
SELECT token = :t7 AS held_after_commit FROM dlock_locks WHERE name = 'x7';

-- ... and if the re-take is rolled back to a savepoint, the release stands.
BEGIN;
SELECT dlock_release('x7') AS released;
SAVEPOINT e;
SELECT dlock_try('x7') IS NOT NULL AS retaken;
ROLLBACK TO e;
COMMIT;
SELECT count(*) AS released_at_commit FROM dlock_locks WHERE name = 'x7';

-- A PL/pgSQL exception block undoes the acquisitions made inside it.
DO $$
BEGIN
	PERFORM dlock_try('x8');
	BEGIN
		PERFORM dlock_try('x9');
		PERFORM 1 / 0;
	EXCEPTION WHEN division_by_zero THEN
		RAISE NOTICE 'caught';
	END;
END $$;
SELECT name FROM dlock_locks WHERE name IN ('x8', 'x9') ORDER BY 1;

-- An error later in the same statement undoes the acquisition.
SELECT dlock_try('x10'), 1 / 0;
SELECT count(*) AS undone_by_error FROM dlock_locks WHERE name = 'x10';

-- An acquisition made in an aborted transaction is not kept by later commands.
BEGIN;
SELECT dlock_try('x11') IS NOT NULL;
SELECT 1 / 0;
COMMIT;
SELECT count(*) AS undone_by_failed_xact FROM dlock_locks WHERE name = 'x11';

-- The same rules hold in a transaction with many changes (where they are
-- indexed by lease): releases, a re-take that cancels one, a savepoint.
BEGIN;
SELECT count(*) AS taken FROM generate_series(1, 40) g WHERE dlock_try('many-' || g) IS NOT NULL;
SELECT count(*) AS released FROM generate_series(1, 40) g WHERE dlock_release('many-' || g);
SELECT dlock_release('many-5') AS released_twice;
SELECT dlock_try('many-5') IS NOT NULL AS retaken;
SAVEPOINT s;
SELECT dlock_try('many-6') IS NOT NULL AS retaken_in_savepoint;
ROLLBACK TO s;
COMMIT;
SELECT name FROM dlock_locks WHERE name LIKE 'many-%' ORDER BY name;
