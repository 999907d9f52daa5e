-- hot key, semaphore of 8 permits: every client tries the one name 'hot';
-- release only when granted (transactions = tries; releases = grants)
SELECT (dlock_try('hot', '30 s', :client_id, permits => 8) IS NOT NULL)::int AS got \gset
\if :got
SELECT dlock_release('hot', :client_id);
\endif
