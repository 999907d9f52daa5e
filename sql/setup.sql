-- Installing, dropping and re-creating the extension.
CREATE EXTENSION dlock;
SELECT extversion FROM pg_extension WHERE extname = 'dlock';
DROP EXTENSION dlock;
CREATE EXTENSION dlock;

-- The API's signatures, argument names and defaults.
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dlock')
ORDER BY 1;

SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relname IN ('dlock_locks', 'dlock_waiters') AND a.attnum > 0
ORDER BY c.relname, a.attnum;

-- Settings with their defaults (max_locks, failover_grace and defer_rows are set by the test config).
SELECT name, setting, unit, context FROM pg_settings
WHERE name LIKE 'dlock.%' ORDER BY name;

-- Used by later tests: runs a statement, returns 'ok' or its SQLSTATE and message.
CREATE FUNCTION sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
