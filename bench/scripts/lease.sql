-- hand-written lease table (logged or UNLOGGED, see run.sh), uncontended
\set k random(1, 100000)
INSERT INTO lease VALUES (:k, :client_id, now() + interval '30 s') ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at WHERE lease.expires_at < now() RETURNING owner;
DELETE FROM lease WHERE name = :k AND owner = :client_id;
