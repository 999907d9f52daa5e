-- hot key, shared: every client takes a shared lease on the one name 'hot'
-- and releases it (readers coexist: every try should be granted)
SELECT (dlock_try('hot', '30 s', :client_id, 'shared') IS NOT NULL)::int AS got \gset
\if :got
SELECT dlock_release('hot', :client_id);
\endif
