-- Grants, conflicts, idempotent re-acquisition, release and renewal.
\set VERBOSITY terse

-- The default owner is unique to the session unless dlock.owner is set.
SELECT dlock_owner() = 'session:' || pg_backend_pid() || ':' ||
       (SELECT (extract(epoch FROM backend_start) * 1000000)::bigint - 946684800000000
        FROM pg_stat_activity WHERE pid = pg_backend_pid()) AS session_owner;
SET dlock.owner = 'worker-7';
SELECT dlock_owner();
RESET dlock.owner;

-- A free name is granted with a token; another owner gets NULL.
SELECT dlock_try('job') AS t1 \gset
SELECT :t1 > 0 AS granted;
SELECT dlock_try('job', owner => 'someone-else') IS NULL AS other_owner_refused;
SELECT dlock_acquire('job', timeout => '0', owner => 'someone-else') IS NULL AS zero_timeout_refused;

-- The holder re-acquiring gets the same token and a longer lease.
SELECT expires_at AS e1 FROM dlock_locks WHERE name = 'job' \gset
SELECT pg_sleep(0.01);
SELECT dlock_try('job') = :t1 AS same_token_try;
SELECT dlock_acquire('job', '1 minute') = :t1 AS same_token_acquire;
SELECT expires_at > :'e1' AS extended, expires_at - granted_at > '55 seconds' AS one_minute
FROM dlock_locks WHERE name = 'job';

-- What the view shows about a lease.
SELECT name, owner = dlock_owner() AS mine, token = :t1 AS token_ok,
       role, pid = pg_backend_pid() AS pid_ok, waiters
FROM dlock_locks;

-- Tokens grow across names.
SELECT dlock_try('other') > :t1 AS larger_token;

-- Release: only the holder, only with its token, only once.
SELECT dlock_release('job', 'someone-else') AS wrong_owner;
SELECT dlock_release('job', token => :t1 + 1000) AS wrong_token;
SELECT dlock_release('job', token => 0) AS zero_token;
SELECT dlock_release('job', token => -5) AS negative_token;
SELECT dlock_release('job', token => :t1) AS released;
SELECT dlock_release('job') AS released_twice;
SELECT count(*) AS job_rows FROM dlock_locks WHERE name = 'job';
SELECT dlock_release('never-taken') AS never_taken;

-- A new grant of a released name gets a new, larger token.
SELECT dlock_try('job') > :t1 AS new_token_after_release;
SELECT dlock_release('job');

-- Renewal extends only the holder's live lease.
SELECT dlock_try('renewed', '10 seconds') AS t2 \gset
SELECT dlock_renew('renewed', '2 minutes') > now() + interval '100 seconds' AS renewed;
SELECT expires_at - now() > '100 seconds' AS view_shows_renewal FROM dlock_locks WHERE name = 'renewed';
SELECT dlock_renew('renewed', owner => 'someone-else') IS NULL AS other_cannot_renew;
SELECT dlock_renew('not-held') IS NULL AS cannot_renew_free_name;
SELECT token = :t2 AS renewal_keeps_token FROM dlock_locks WHERE name = 'renewed';

-- Without ttl, dlock.default_ttl applies.
SET dlock.default_ttl = '45s';
SELECT dlock_try('defaulted') IS NOT NULL;
SELECT expires_at - granted_at BETWEEN '44 seconds' AND '45.01 seconds' AS default_ttl_used
FROM dlock_locks WHERE name = 'defaulted';
RESET dlock.default_ttl;

-- An expired lease is free at once, with no sweeper: the next caller gets
-- a new token; the old holder can neither renew nor release it.
SELECT dlock_try('short', '50 milliseconds', 'old-holder') AS t3 \gset
SELECT pg_sleep(0.1);
SELECT count(*) AS expired_not_listed FROM dlock_locks WHERE name = 'short';
SELECT dlock_renew('short', owner => 'old-holder') IS NULL AS no_resurrection;
SELECT dlock_release('short', 'old-holder') AS late_release;
SELECT dlock_try('short', owner => 'new-holder') > :t3 AS takeover_new_token;
SELECT dlock_release('short', 'old-holder') AS old_release_harmless;
SELECT owner FROM dlock_locks WHERE name = 'short';

-- The holder's own expired lease: re-acquiring is a new grant.
SELECT dlock_try('own', '50 milliseconds') AS t4 \gset
SELECT pg_sleep(0.1);
SELECT dlock_try('own') > :t4 AS own_expired_new_token;

-- Names are exact: case, spaces and multibyte text are distinct names.
SELECT dlock_try('Name') IS NOT NULL, dlock_try('name') IS NOT NULL,
       dlock_try('name ') IS NOT NULL, dlock_try('näme') IS NOT NULL,
       dlock_try(E'tab\there') IS NOT NULL;
SELECT count(*) FROM dlock_locks WHERE lower(name) LIKE 'n%me%';

-- The longest name (200 bytes) is accepted, in any encoding.
SELECT dlock_try(repeat('x', 200)) IS NOT NULL AS ascii_200;
SELECT dlock_try(repeat('é', 100)) IS NOT NULL AS multibyte_200;
SELECT length(name), octet_length(name) FROM dlock_locks WHERE octet_length(name) = 200 ORDER BY 1;

-- Explicit owners let any session act as the holder.
SELECT dlock_try('shared-job', owner => 'svc-a') IS NOT NULL;
SELECT dlock_release('shared-job', 'svc-a');

-- No waiters in a single session.
SELECT count(*) FROM dlock_waiters;

-- Application roles can see the views; failed renewals are not counted.
SELECT dlock_stats_reset();
SELECT dlock_try('counted', '1 minute', 'me') IS NOT NULL;
SELECT dlock_renew('counted', '1 minute', 'someone-else') IS NULL AS refused;
SELECT dlock_renew('nothing-here', '1 minute', 'me') IS NULL AS refused;
SELECT dlock_renew('counted', '1 minute', 'me') IS NOT NULL AS renewed;
SELECT renewals FROM dlock_stats;
CREATE ROLE dlock_viewer;
SET ROLE dlock_viewer;
SELECT name, owner FROM dlock_locks WHERE name = 'counted';
SELECT count(*) FROM dlock_waiters;
SELECT renewals FROM dlock_stats;
RESET ROLE;
DROP ROLE dlock_viewer;
SELECT dlock_release('counted', 'me');
