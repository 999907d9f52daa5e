-- dlock, uncontended: one cycle = dlock_try + dlock_release on a random name
-- (name and owner are bind parameters, as the advisory lock's key is)
\set k random(1, 100000)
SELECT dlock_try(:k, '30 s', :client_id);
SELECT dlock_release(:k, :client_id);
