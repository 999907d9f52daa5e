-- dlock_fence: only the live lease's token passes; one SQLSTATE for the rest.

SELECT dlock_try('f1', '1 minute', 'w') AS t1 \gset
SELECT sqlstate_of(format('SELECT dlock_fence(%L, %s)', 'f1', :t1));
SELECT sqlstate_of(format('SELECT dlock_fence(%L, %s)', 'f1', :t1 - 1));
SELECT sqlstate_of(format('SELECT dlock_fence(%L, %s)', 'f1', :t1 + 1000));
SELECT sqlstate_of(format('SELECT dlock_fence(%L, %s)', 'nowhere', :t1));
SELECT sqlstate_of($$SELECT dlock_fence('f1', NULL)$$);
SELECT sqlstate_of($$SELECT dlock_fence(NULL, 1)$$);
SELECT dlock_try('f2', '50 milliseconds', 'w') AS t2 \gset
SELECT pg_sleep(0.1);
SELECT sqlstate_of(format('SELECT dlock_fence(%L, %s)', 'f2', :t2));

-- a fence pins the lease until the transaction ends, even past its TTL
SELECT dlock_try('f3', '100 milliseconds', 'w') AS t3 \gset
BEGIN;
SELECT dlock_fence('f3', :t3);
SELECT pg_sleep(0.2);
SELECT dlock_try('f3', '1 minute', 'thief') IS NULL AS not_taken_while_fenced;
SELECT count(*) AS still_listed FROM dlock_locks WHERE name = 'f3';
COMMIT;
SELECT dlock_try('f3', '1 minute', 'thief') > :t3 AS taken_after_commit;

-- the trigger: writes must carry the live token
CREATE TABLE jobs (id int PRIMARY KEY, payload text, fence bigint);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON jobs
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('f1', 'fence');
SELECT sqlstate_of(format('INSERT INTO jobs VALUES (1, %L, %s)', 'ok', :t1));
SELECT sqlstate_of(format('INSERT INTO jobs VALUES (2, %L, %s)', 'stale', :t1 - 1));
SELECT sqlstate_of($$INSERT INTO jobs VALUES (3, 'no token', NULL)$$);
SELECT sqlstate_of(format('UPDATE jobs SET payload = %L, fence = %s', 'updated', :t1));
SELECT sqlstate_of($$UPDATE jobs SET payload = 'lower', fence = fence - 1$$);
-- a DELETE needs the transaction to have fenced first
SELECT sqlstate_of($$DELETE FROM jobs$$);
BEGIN;
SELECT dlock_fence('f1', :t1);
DELETE FROM jobs WHERE id = 1;
COMMIT;
SELECT count(*) AS rows_left FROM jobs;
-- once the lease is gone, nothing can be written with its token
SELECT dlock_release('f1', 'w');
SELECT sqlstate_of(format('INSERT INTO jobs VALUES (4, %L, %s)', 'late', :t1));

-- the max-token rule per row: a row written with a token refuses lower ones,
-- and the lock name can come from a column
CREATE TABLE accounts (name text PRIMARY KEY, balance int, fence bigint);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON accounts
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'fence');
SELECT dlock_try('acct-a', '1 minute', 'w') AS ta \gset
SELECT sqlstate_of(format('INSERT INTO accounts VALUES (%L, 10, %s)', 'acct-a', :ta));
SELECT sqlstate_of(format('INSERT INTO accounts VALUES (%L, 10, %s)', 'acct-b', :ta));
SELECT dlock_release('acct-a', 'w');
SELECT dlock_try('acct-a', '1 minute', 'w') AS ta2 \gset
SELECT sqlstate_of(format('UPDATE accounts SET balance = 20, fence = %s WHERE name = %L', :ta2, 'acct-a'));
SELECT name, balance, fence = :ta2 AS newest FROM accounts;

-- an UPDATE must carry a token of its own: it sets the token column, or its
-- transaction fenced the token the row keeps; otherwise it is refused
CREATE TABLE tasks (id int PRIMARY KEY, payload text, fence bigint NOT NULL);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON tasks
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('f-upd', 'fence');
SELECT dlock_try('f-upd', '1 minute', 'w1') AS u1 \gset
INSERT INTO tasks VALUES (2, 'by w1', :u1);
SELECT dlock_release('f-upd', 'w1');
SELECT dlock_try('f-upd', '1 minute', 'w2') AS u2 \gset
INSERT INTO tasks VALUES (1, 'by w2', :u2);
-- w1 lost the lease; it writes without naming the column, over w2's live token
UPDATE tasks SET payload = 'STALE write by w1' WHERE id = 1;
-- naming the column puts its value to the test: the row's own token passes
-- while its lease lives (the trigger checks values, not who writes them)
SELECT sqlstate_of($$UPDATE tasks SET payload = 'by w2, token kept', fence = fence WHERE id = 1$$);
-- a transaction that fenced the row's token may leave the column alone
BEGIN;
SELECT dlock_fence('f-upd', :u2);
SELECT sqlstate_of($$UPDATE tasks SET payload = 'by w2, fenced' WHERE id = 1$$);
-- ... but not on a row that keeps another token: it must set its own
SELECT sqlstate_of($$UPDATE tasks SET payload = 'by w2 over w1' WHERE id = 2$$);
COMMIT;
SELECT sqlstate_of(format('UPDATE tasks SET payload = %L, fence = %s WHERE id = 2', 'by w2 over w1', :u2));
-- an earlier trigger that sets the token gives the UPDATE a token of its own
CREATE FUNCTION stamp_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.fence := current_setting('test.token')::bigint;
	RETURN NEW;
END $$;
CREATE TRIGGER a_stamp BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION stamp_token();
SELECT dlock_release('f-upd', 'w2');
SELECT dlock_try('f-upd', '1 minute', 'w3') AS u3 \gset
SELECT set_config('test.token', :'u3', false) IS NOT NULL AS stamped;
SELECT sqlstate_of($$UPDATE tasks SET payload = 'by w3, stamped' WHERE id = 1$$);
DROP TRIGGER a_stamp ON tasks;
-- row 2 keeps w2's token, whose lease ended: naming the column with the
-- row's value fails now
SELECT sqlstate_of($$UPDATE tasks SET payload = 'stale w2', fence = fence WHERE id = 2$$);
-- upserts, MERGE and views: what counts is the columns they set.  The
-- upsert's new row fences w3's token; the row it updates keeps w2's.
SELECT sqlstate_of(format('INSERT INTO tasks VALUES (2, %L, %s)
	ON CONFLICT (id) DO UPDATE SET payload = excluded.payload', 'upsert by w3', :u3));
SELECT sqlstate_of(format('INSERT INTO tasks VALUES (2, %L, %s)
	ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, fence = excluded.fence', 'upsert by w3', :u3));
SELECT sqlstate_of($$MERGE INTO tasks t USING (VALUES (1)) v(id) ON t.id = v.id
	WHEN MATCHED THEN UPDATE SET payload = 'merged'$$);
CREATE VIEW task_payloads AS SELECT id, payload FROM tasks;
CREATE VIEW task_tokens AS SELECT id, payload, fence AS tok FROM tasks;
SELECT sqlstate_of($$UPDATE task_payloads SET payload = 'through a view' WHERE id = 1$$);
SELECT sqlstate_of(format('UPDATE task_tokens SET payload = %L, tok = %s WHERE id = 1', 'view by w3', :u3));
SELECT id, payload, fence = :u3 AS w3_token FROM tasks ORDER BY id;
DROP VIEW task_payloads, task_tokens;
DROP TABLE tasks;
DROP FUNCTION stamp_token();
SELECT dlock_release('f-upd', 'w3');

-- wrong uses of the triggers
CREATE TABLE bad (id int, v text);
CREATE TRIGGER t BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION dlock_fenced('f1');
SELECT sqlstate_of($$INSERT INTO bad VALUES (1, 'x')$$);
DROP TRIGGER t ON bad;
CREATE TRIGGER t BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION dlock_fenced('f1', 'nosuch');
SELECT sqlstate_of($$INSERT INTO bad VALUES (1, 'x')$$);
DROP TRIGGER t ON bad;
CREATE TRIGGER t BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION dlock_fenced('f1', 'v');
SELECT sqlstate_of($$INSERT INTO bad VALUES (1, 'x')$$);
DROP TRIGGER t ON bad;
-- a trigger for UPDATE OF some columns lets updates of the others through
CREATE TRIGGER t BEFORE INSERT OR UPDATE OF v ON bad
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('f1', 'id');
SELECT sqlstate_of($$INSERT INTO bad VALUES (1, 'x')$$);
DROP TRIGGER t ON bad;
CREATE TRIGGER t AFTER INSERT ON bad FOR EACH ROW EXECUTE FUNCTION dlock_versioned('id');
SELECT sqlstate_of($$INSERT INTO bad VALUES (1, 'x')$$);
DROP TABLE bad;

-- optimistic versioned rows
CREATE TABLE docs (id int PRIMARY KEY, body text, version bigint);
CREATE TRIGGER versioned BEFORE INSERT OR UPDATE ON docs
	FOR EACH ROW EXECUTE FUNCTION dlock_versioned('version');
INSERT INTO docs (id, body) VALUES (1, 'v1');
SELECT version FROM docs;
UPDATE docs SET body = 'v2', version = 1 WHERE id = 1;        -- states what it read
SELECT body, version FROM docs;
SELECT sqlstate_of($$UPDATE docs SET body = 'stale', version = 1 WHERE id = 1$$);
UPDATE docs SET body = 'v3', version = version + 1 WHERE id = 1 AND version = 2;   -- the classic form
SELECT body, version FROM docs;
UPDATE docs SET body = 'v4' WHERE id = 1;                     -- version left alone
SELECT body, version FROM docs;

DROP TABLE jobs, accounts, docs;
SELECT dlock_release('acct-a', 'w'), dlock_release('f3', 'thief');

-- bulk writes through the fencing trigger: one pin and one logged op per
-- name and token per transaction, not per row, so memory stays flat (it
-- grew by about 600 bytes a row, and each DELETE row scanned them all)
CREATE TABLE bulk (id int, name text, tok bigint);
INSERT INTO bulk SELECT g, 'bulk-lock', 0 FROM generate_series(1, 20000) g;
CREATE TRIGGER fenced BEFORE UPDATE OR DELETE ON bulk
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'tok');
SELECT dlock_try('bulk-lock', '1 hour', 'bulk') AS bulk_tok \gset
BEGIN;
UPDATE bulk SET tok = :bulk_tok;
DELETE FROM bulk WHERE id <= 10000;
-- (the transaction's memory context and those directly under it: 15 to 17
-- name a context's parent, 18 gives each context its path of ids instead)
SELECT current_setting('server_version_num')::int >= 180000 AS context_paths \gset
\if :context_paths
WITH c AS MATERIALIZED (SELECT * FROM pg_backend_memory_contexts),
	t AS (SELECT * FROM c WHERE name = 'TopTransactionContext')
SELECT sum(c.total_bytes) < 1024 * 1024 AS flat_memory FROM c, t
WHERE c.level <= t.level + 1 AND c.path[t.level] = t.path[t.level] \gset
\else
SELECT sum(total_bytes) < 1024 * 1024 AS flat_memory FROM pg_backend_memory_contexts
WHERE name = 'TopTransactionContext' OR parent = 'TopTransactionContext' \gset
\endif
SELECT :'flat_memory' AS flat_memory;
SELECT count(*) AS rows_fenced FROM bulk WHERE tok = :bulk_tok;
COMMIT;
DROP TABLE bulk;
SELECT dlock_release('bulk-lock', 'bulk');
