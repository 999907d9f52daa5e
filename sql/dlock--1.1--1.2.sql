/* dlock 1.1 -> 1.2 */

\echo Use "ALTER EXTENSION dlock UPDATE TO '1.2'" to load this file. \quit

-- When the grace after a promotion ends (no new lease is granted before),
-- or NULL when none runs (always on a standby, which grants nothing).
CREATE FUNCTION dlock_grace() RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dlock_grace' LANGUAGE C VOLATILE;

-- lifetime: what ends a new lease besides its ttl.  'ttl' nothing else;
-- 'session' also the exit of the backend that took it; 'transaction' also
-- the end of the transaction that took it.  NULL: 'session' when owner is
-- the owner generated for this session (dlock_owner() without dlock.owner),
-- else 'ttl'.  Session and transaction leases have no row in dlock_leases.
DROP FUNCTION dlock_try(text, interval, text, text, integer);
CREATE FUNCTION dlock_try(name text,
						  ttl interval DEFAULT NULL,
						  owner text DEFAULT dlock_owner(),
						  mode text DEFAULT 'exclusive',
						  permits integer DEFAULT NULL,
						  lifetime text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_try' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_acquire(text, interval, interval, text, text, integer);
CREATE FUNCTION dlock_acquire(name text,
							  ttl interval DEFAULT NULL,
							  timeout interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  permits integer DEFAULT NULL,
							  lifetime text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_acquire' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_try_all(text[], interval, text, text);
CREATE FUNCTION dlock_try_all(names text[],
							  ttl interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  lifetime text DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_try_all' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_acquire_all(text[], interval, interval, text, text);
CREATE FUNCTION dlock_acquire_all(names text[],
								  ttl interval DEFAULT NULL,
								  timeout interval DEFAULT NULL,
								  owner text DEFAULT dlock_owner(),
								  mode text DEFAULT 'exclusive',
								  lifetime text DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_acquire_all' LANGUAGE C VOLATILE;

-- dlock_locks: each lease's lifetime, last; pid is NULL once the backend
-- that holds the lease (or that it is bound to) has exited.
DROP VIEW dlock_locks;
DROP FUNCTION dlock_list_locks();
CREATE FUNCTION dlock_list_locks(
	OUT name text, OUT owner text, OUT token bigint,
	OUT granted_at timestamptz, OUT expires_at timestamptz,
	OUT role regrole, OUT pid integer, OUT waiters integer,
	OUT version bigint, OUT durable boolean, OUT mode text,
	OUT permits integer, OUT lifetime text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_list_locks' LANGUAGE C VOLATILE;
CREATE VIEW dlock_locks AS
	SELECT * FROM dlock_list_locks();
GRANT SELECT ON dlock_locks TO PUBLIC;
COMMENT ON VIEW dlock_locks IS 'live dlock leases of this database';
