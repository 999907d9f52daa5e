-- dlock, uncontended: a session lease (memory-only, no row, ends with the
-- session) taken and released on a random name, like advisory.sql's
\set k random(1, 100000)
SELECT dlock_try(:k, '30 s', :client_id, lifetime => 'session');
SELECT dlock_release(:k, :client_id);
