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
