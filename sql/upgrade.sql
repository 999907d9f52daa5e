-- The upgrade chain: dlock 1.0 updated to the current version must be the
-- same extension as a fresh install of it (members, function definitions,
-- grants, comments, tables, indexes, views, storage options, dumped tables).
-- Runs in a database of its own, so the regression database keeps its
-- extension.
SELECT current_database() AS regress_db \gset
CREATE DATABASE dlock_upgrade;
\c dlock_upgrade

-- Everything about the extension that an install decides, by name (OIDs
-- differ between installs).
CREATE FUNCTION ext_image() RETURNS TABLE (kind text, object text, detail text)
LANGUAGE sql AS $$
	WITH ext AS (SELECT * FROM pg_extension WHERE extname = 'dlock'),
	members AS (
		SELECT d.classid, d.objid, d.objsubid
		FROM pg_depend d, ext
		WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
		  AND d.deptype = 'e')
	SELECT 'member', pg_describe_object(classid, objid, objsubid),
		   pg_catalog.obj_description(objid, (SELECT relname FROM pg_class WHERE oid = classid))
	FROM members
	UNION ALL
	SELECT 'function', p.oid::regprocedure::text,
		   pg_get_functiondef(p.oid) || ' acl ' || coalesce(p.proacl::text, 'default')
	FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
	WHERE p.prokind <> 'a'
	UNION ALL
	SELECT 'relation', c.relname,
		   c.relkind::text || ' acl ' || coalesce(c.relacl::text, 'default') ||
		   ' options ' || coalesce(c.reloptions::text, 'none') ||
		   ' persistence ' || c.relpersistence::text
	FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	UNION ALL
	SELECT 'column', c.relname || '.' || a.attname,
		   format_type(a.atttypid, a.atttypmod) ||
		   CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
		   coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), '') ||
		   ' acl ' || coalesce(a.attacl::text, 'default')
	FROM members m
	JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
	UNION ALL
	SELECT 'index', i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
	FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
	UNION ALL
	SELECT 'constraint', con.conrelid::regclass::text || '.' || con.conname,
		   pg_get_constraintdef(con.oid)
	FROM members m JOIN pg_constraint con ON m.classid = 'pg_class'::regclass AND con.conrelid = m.objid
	UNION ALL
	SELECT 'trigger', t.tgrelid::regclass::text || '.' || t.tgname, pg_get_triggerdef(t.oid)
	FROM members m JOIN pg_trigger t ON m.classid = 'pg_class'::regclass AND t.tgrelid = m.objid
	UNION ALL
	SELECT 'view', c.relname, pg_get_viewdef(c.oid)
	FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	WHERE c.relkind = 'v'
	UNION ALL
	SELECT 'dumped table', cfg::regclass::text,
		   coalesce((ext.extcondition)[array_position(ext.extconfig, cfg)], '')
	FROM ext, unnest(ext.extconfig) AS cfg
	UNION ALL
	SELECT 'extension', extname,
		   'version ' || extversion || ' relocatable ' || extrelocatable ||
		   ' schema ' || extnamespace::regnamespace::text
	FROM ext
$$;

-- 1.0, then the chain of upgrade scripts
CREATE EXTENSION dlock VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'dlock';
-- the library serves 1.0's SQL until the update runs
SELECT dlock_try('up:before', '1 minute', 'u') > 0 AS granted;
-- Objects of a user's over what 1.2 drops and creates again (the four
-- acquiring functions, dlock_list_locks, the dlock_locks view): a view over
-- dlock_locks depends on it, so the update fails and changes nothing until
-- the view is dropped; a function that calls dlock_try in its body's text
-- does not, and calls the new one after; a REVOKE on a function the update
-- re-creates is undone (the new one has the extension's privileges).
CREATE VIEW my_locks AS SELECT name, owner FROM dlock_locks;
CREATE FUNCTION my_take() RETURNS bigint LANGUAGE sql
AS $$SELECT dlock_try('up:mine', '1 minute', 'u')$$;
REVOKE EXECUTE ON FUNCTION dlock_try(text, interval, text, text, integer) FROM PUBLIC;
\set VERBOSITY terse
ALTER EXTENSION dlock UPDATE;
\set VERBOSITY default
SELECT extversion AS still, has_function_privilege('public',
	'dlock_try(text, interval, text, text, integer)', 'EXECUTE') AS public_may_execute
FROM pg_extension WHERE extname = 'dlock';
DROP VIEW my_locks;
ALTER EXTENSION dlock UPDATE;
SELECT my_take() > 0 AS my_function_calls_the_new_one;
SELECT dlock_release('up:mine', 'u');
SELECT has_function_privilege('public', 'dlock_try(text, interval, text, text, integer, text, interval)',
							  'EXECUTE') AS public_may_execute_again;
DROP FUNCTION my_take();
SELECT extversion = default_version AS at_default_version
FROM pg_extension, pg_available_extensions
WHERE extname = 'dlock' AND name = 'dlock';
-- the lease taken before the update is still held, by the same token
SELECT count(*) AS held FROM dlock_locks WHERE name = 'up:before' AND owner = 'u';
SELECT dlock_release('up:before', 'u');
CREATE TABLE upgraded AS SELECT * FROM ext_image();

-- a fresh install of the current version
DROP EXTENSION dlock;
CREATE EXTENSION dlock;
CREATE TABLE fresh AS SELECT * FROM ext_image();

-- what differs between the two (no rows)
(SELECT 'only upgraded' AS side, * FROM upgraded EXCEPT SELECT 'only upgraded', * FROM fresh)
UNION ALL
(SELECT 'only fresh', * FROM fresh EXCEPT SELECT 'only fresh', * FROM upgraded)
ORDER BY 1, 2, 3;

-- the image is not empty: it holds every kind of object the extension has
-- (17 and later also record the row types of its tables and views, and their
-- array types, as members: expected/upgrade_1.out; 18 catalogs NOT NULL
-- constraints: expected/upgrade_2.out)
SELECT kind, count(*) FROM fresh GROUP BY kind ORDER BY kind;

-- the settings 1.1 gave the lease table
SELECT reloptions FROM pg_class WHERE relname = 'dlock_leases';

\c :regress_db
DROP DATABASE dlock_upgrade;
