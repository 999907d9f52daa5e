-- hot key: every client tries the one name 'hot'; release only when granted
-- (pgbench transactions = tries; executions of the release = grants)
SELECT (dlock_try('hot', '30 s', :client_id) IS NOT NULL)::int AS got \gset
\if :got
SELECT dlock_release('hot', :client_id);
\endif
