-- hot key: every client tries the lease row 'hot'; delete only when granted
WITH a AS (INSERT INTO lease VALUES ('hot', :client_id, now() + interval '30 s') ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at WHERE lease.expires_at < now() RETURNING owner) SELECT (count(*) > 0)::int AS got FROM a \gset
\if :got
DELETE FROM lease WHERE name = 'hot' AND owner = :client_id;
\endif
