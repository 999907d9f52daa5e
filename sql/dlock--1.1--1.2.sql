/* dlock 1.1 -> 1.2 */

\echo Use "ALTER EXTENSION dlock UPDATE TO '1.2'" to load this file. \quit

-- When the grace after a promotion ends (no new lease is granted before),
-- or NULL when none runs (always on a standby, which grants nothing).
CREATE FUNCTION dlock_grace() RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dlock_grace' LANGUAGE C VOLATILE;

-- A minimum hold (min_hold): a lease released before its grant plus min_hold
-- ends only then, so a job run once per period by hosts whose start times
-- differ by less than that runs once.  Its row keeps the hold (a restart
-- keeps it) and when its owner released it within the hold.  Both columns
-- are NULL when there is none; adding them rewrites nothing.
ALTER TABLE dlock_leases
	ADD COLUMN min_hold interval,
	ADD COLUMN released_at timestamptz;

-- The acquiring functions take min_hold last (NULL: none).
DROP FUNCTION dlock_try(text, interval, text, text, integer);
CREATE FUNCTION dlock_try(name text,
						  ttl interval DEFAULT NULL,
						  owner text DEFAULT dlock_owner(),
						  mode text DEFAULT 'exclusive',
						  permits integer DEFAULT NULL,
						  min_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_try' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_acquire(text, interval, interval, text, text, integer);
CREATE FUNCTION dlock_acquire(name text,
							  ttl interval DEFAULT NULL,
							  timeout interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  permits integer DEFAULT NULL,
							  min_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_acquire' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_try_all(text[], interval, text, text);
CREATE FUNCTION dlock_try_all(names text[],
							  ttl interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  min_hold interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_try_all' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_acquire_all(text[], interval, interval, text, text);
CREATE FUNCTION dlock_acquire_all(names text[],
								  ttl interval DEFAULT NULL,
								  timeout interval DEFAULT NULL,
								  owner text DEFAULT dlock_owner(),
								  mode text DEFAULT 'exclusive',
								  min_hold interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_acquire_all' LANGUAGE C VOLATILE;

-- dlock_locks shows each lease's min_hold and, for one its owner released
-- within that hold, when (it lasts until expires_at).
DROP VIEW dlock_locks;
DROP FUNCTION dlock_list_locks();
CREATE FUNCTION dlock_list_locks(
	OUT name text, OUT owner text, OUT token bigint,
	OUT granted_at timestamptz, OUT expires_at timestamptz,
	OUT role regrole, OUT pid integer, OUT waiters integer,
	OUT version bigint, OUT durable boolean, OUT mode text,
	OUT permits integer, OUT min_hold interval, OUT released_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_list_locks' LANGUAGE C VOLATILE;
CREATE VIEW dlock_locks AS
	SELECT * FROM dlock_list_locks();
GRANT SELECT ON dlock_locks TO PUBLIC;
COMMENT ON VIEW dlock_locks IS 'live dlock leases of this database';
