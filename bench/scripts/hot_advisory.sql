-- hot key: every client tries advisory lock 7; unlock only when granted
SELECT pg_try_advisory_lock(7)::int AS got \gset
\if :got
SELECT pg_advisory_unlock(7);
\endif
