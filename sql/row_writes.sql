-- A grant's row and a release's deletion are written with the heap and
-- index access methods while the lease table is as the extension made it,
-- and through SQL once its owner adds an index, a trigger or a rule.  Either
-- way the table and every index on it agree.
CREATE EXTENSION amcheck;

-- written directly: many grants, half of them released; leases taken and
-- released in one statement, and in one transaction
SELECT count(dlock_try('rw' || i, '1 hour', 'o')) FROM generate_series(1, 20) i;
SELECT count(*) FILTER (WHERE dlock_release('rw' || i, 'o')) FROM generate_series(1, 20, 2) i;
SELECT dlock_try('same', '1 hour', 'o') IS NOT NULL AS taken, dlock_release('same', 'o') AS released;
BEGIN;
SELECT dlock_try('x1', '1 hour', 'o') IS NOT NULL AS taken;
SELECT dlock_release('x1', 'o') AS released;
SELECT dlock_try('x1', '1 hour', 'o') IS NOT NULL AS taken_again;
COMMIT;
SELECT count(*) AS rows, count(*) FILTER (WHERE name = 'x1') AS x1 FROM dlock_leases
WHERE left(name, 2) = 'rw' OR name IN ('x1', 'same');
SELECT bt_index_check('dlock_leases_pkey', true);
-- each row is found by its key
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS found_by_key FROM generate_series(2, 20, 2) i
WHERE EXISTS (SELECT FROM dlock_leases WHERE name = 'rw' || i);
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*) AS released FROM dlock_leases WHERE name IN ('rw1', 'rw3', 'same');

-- a trigger the table's owner adds sees every row write
CREATE TABLE rw_log (op text, name text);
CREATE FUNCTION rw_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO rw_log VALUES (TG_OP, coalesce(NEW.name, OLD.name));
	RETURN NULL;
END $$;
CREATE TRIGGER rw_log AFTER INSERT OR DELETE ON dlock_leases
	FOR EACH ROW EXECUTE FUNCTION rw_log();
SELECT dlock_try('t1', '1 hour', 'o') IS NOT NULL AS taken;
SELECT dlock_release('t1', 'o') AS released;
SELECT op, name FROM rw_log ORDER BY op DESC;
DROP TRIGGER rw_log ON dlock_leases;
DROP FUNCTION rw_log();
DROP TABLE rw_log;

-- an index the owner adds is kept too
CREATE INDEX rw_expiry ON dlock_leases (expires_at);
SELECT dlock_try('i1', '1 hour', 'o') IS NOT NULL AS taken;
SELECT dlock_try('i2', '1 hour', 'o') IS NOT NULL AS taken;
SELECT dlock_release('i1', 'o') AS released;
SELECT bt_index_check('rw_expiry', true);
SELECT bt_index_check('dlock_leases_pkey', true);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT name FROM dlock_leases WHERE expires_at > now() AND name IN ('i1', 'i2');
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX rw_expiry;

-- directly again once the table is as it was
SELECT dlock_release('i2', 'o') AS released;
SELECT count(*) FILTER (WHERE dlock_release('rw' || i, 'o')) FROM generate_series(2, 20, 2) i;
SELECT dlock_release('x1', 'o') AS released;
SELECT count(*) AS rows FROM dlock_leases WHERE left(name, 2) = 'rw' OR name IN ('x1', 'same', 't1', 'i1', 'i2');
SELECT bt_index_check('dlock_leases_pkey', true);
DROP EXTENSION amcheck;

-- A table its owner changed in other ways takes SQL too, so each change
-- acts as it would on an INSERT or DELETE: each case in a transaction
-- rolled back.  Which way a write went shows in the session's prepared
-- statements (a fresh session has none).
CREATE VIEW rw_through_sql AS
SELECT count(*) FILTER (WHERE ident ~ 'INSERT INTO \S*dlock_leases') > 0 AS inserts,
	   count(*) FILTER (WHERE ident ~ '^DELETE FROM \S*dlock_leases WHERE name') > 0 AS deletes
FROM pg_backend_memory_contexts;
-- a CHECK constraint (terse: the failing row's details vary)
\set VERBOSITY terse
BEGIN;
ALTER TABLE dlock_leases ADD CONSTRAINT rw_short CHECK (length(name) < 8) NOT VALID;
SELECT dlock_try('long name', '1 hour', 'o') IS NOT NULL AS taken;
ROLLBACK;
-- a NOT NULL constraint (on a column a plain lock leaves null)
BEGIN;
DO $$ BEGIN UPDATE dlock_leases SET permits = 0 WHERE permits IS NULL; END $$;
ALTER TABLE dlock_leases ALTER permits SET NOT NULL;
SELECT dlock_try('nn', '1 hour', 'o') IS NOT NULL AS taken;
ROLLBACK;
\set VERBOSITY default
-- a column of another type: the value is converted (here to local time)
BEGIN;
SET LOCAL TimeZone = 'Asia/Tokyo';
ALTER TABLE dlock_leases ALTER expires_at TYPE timestamp;
SELECT dlock_try('ts', '1 hour', 'o') IS NOT NULL AS taken;
SELECT expires_at - localtimestamp BETWEEN '59 minutes' AND '61 minutes' AS local_expiry
FROM dlock_leases WHERE name = 'ts';
ROLLBACK;
-- replica identity NOTHING, in a publication of deletes (no warning about
-- wal_level, whose hint differs between versions)
BEGIN;
SET LOCAL client_min_messages = error;
ALTER TABLE dlock_leases REPLICA IDENTITY NOTHING;
CREATE PUBLICATION rw_pub FOR TABLE dlock_leases;
SELECT dlock_try('ri', '1 hour', 'o') IS NOT NULL AS taken;
SELECT dlock_release('ri', 'o') AS released;
ROLLBACK;
-- the default replica identity, in a publication filtering on another column
BEGIN;
SET LOCAL client_min_messages = error;
CREATE PUBLICATION rw_pub FOR TABLE dlock_leases WHERE (owner <> 'nobody');
SELECT dlock_try('ri', '1 hour', 'o') IS NOT NULL AS taken;
SELECT dlock_release('ri', 'o') AS released;
ROLLBACK;
-- another table access method (a copy of heap)
CREATE ACCESS METHOD rw_heap TYPE TABLE HANDLER heap_tableam_handler;
\c
BEGIN;
ALTER TABLE dlock_leases SET ACCESS METHOD rw_heap;
SELECT dlock_try('am', '1 hour', 'o') IS NOT NULL AS taken, dlock_release('am', 'o') AS released;
SELECT * FROM rw_through_sql;
ROLLBACK;
DROP ACCESS METHOD rw_heap;
-- and directly once the table is as the extension made it again
\c
SELECT dlock_try('back', '1 hour', 'o') IS NOT NULL AS taken, dlock_release('back', 'o') AS released;
SELECT * FROM rw_through_sql;
SELECT count(*) AS rows FROM dlock_leases WHERE name IN ('long name', 'nn', 'ts', 'ri', 'am', 'back');
DROP VIEW rw_through_sql;
