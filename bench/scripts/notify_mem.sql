-- dlock.sql plus one plain pg_notify in each of its two transactions (events
-- off): what NOTIFY itself costs a memory-only cycle, beside dlock_mem_events
\set k random(1, 100000)
SELECT dlock_try(:k, '30 s', :client_id), pg_notify('bench', 'x');
SELECT dlock_release(:k, :client_id), pg_notify('bench', 'x');
