-- dlock shared leases, uncontended: one cycle = a shared dlock_try + dlock_release on a random name
\set k random(1, 100000)
SELECT dlock_try(:k, '30 s', :client_id, 'shared');
SELECT dlock_release(:k, :client_id);
