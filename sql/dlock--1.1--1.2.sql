/* dlock 1.1 -> 1.2 */

\echo Use "ALTER EXTENSION dlock UPDATE TO '1.2'" to load this file. \quit

-- When the grace after a promotion ends (no new lease is granted before),
-- or NULL when none runs (always on a standby, which grants nothing).
CREATE FUNCTION dlock_grace() RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dlock_grace' LANGUAGE C VOLATILE;

-- A minimum hold (min_hold): a lease released before its grant plus min_hold
-- ends only then, so a job run once per period by hosts whose start times
-- differ by less than that runs once.  A durable lease with a hold has a row
-- here too, written in its row's transaction (a restart keeps the hold), and
-- when its owner released it within the hold; a lease without one has none.
-- A table of its own, not columns of dlock_leases: adding columns takes an
-- ACCESS EXCLUSIVE lock on dlock_leases, so the update would wait for every
-- open grant's transaction and every grant and release would queue behind
-- it.  Written only by the functions below, as its owner; not dumped, as
-- dlock_leases is not (a restore brings back no leases, so no holds).
CREATE TABLE dlock_lease_holds (
	name text NOT NULL,
	token bigint NOT NULL,		-- its lease's (name, token) in dlock_leases
	min_hold interval NOT NULL,
	released_at timestamptz,	-- released within the hold; NULL: not
	PRIMARY KEY (name, token)
);
REVOKE ALL ON dlock_lease_holds FROM PUBLIC;

-- lifetime: what ends a new lease besides its ttl.  'ttl' nothing else;
-- 'session' also the exit of the backend that took it; 'transaction' also
-- the end of the transaction that took it.  NULL: 'session' when owner is
-- the owner generated for this session (dlock_owner() without dlock.owner),
-- else 'ttl'.  Session and transaction leases have no row in dlock_leases.
-- min_hold, after it: see dlock_lease_holds above (NULL: none).
ALTER FUNCTION dlock_try(text, interval, text, text, integer) RENAME TO dlock_try_1_1;
CREATE FUNCTION dlock_try(name text,
						  ttl interval DEFAULT NULL,
						  owner text DEFAULT dlock_owner(),
						  mode text DEFAULT 'exclusive',
						  permits integer DEFAULT NULL,
						  lifetime text DEFAULT NULL,
						  min_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_try' LANGUAGE C VOLATILE;

ALTER FUNCTION dlock_acquire(text, interval, interval, text, text, integer)
	RENAME TO dlock_acquire_1_1;
CREATE FUNCTION dlock_acquire(name text,
							  ttl interval DEFAULT NULL,
							  timeout interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  permits integer DEFAULT NULL,
							  lifetime text DEFAULT NULL,
							  min_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_acquire' LANGUAGE C VOLATILE;

ALTER FUNCTION dlock_try_all(text[], interval, text, text) RENAME TO dlock_try_all_1_1;
CREATE FUNCTION dlock_try_all(names text[],
							  ttl interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  lifetime text DEFAULT NULL,
							  min_hold interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_try_all' LANGUAGE C VOLATILE;

ALTER FUNCTION dlock_acquire_all(text[], interval, interval, text, text)
	RENAME TO dlock_acquire_all_1_1;
CREATE FUNCTION dlock_acquire_all(names text[],
								  ttl interval DEFAULT NULL,
								  timeout interval DEFAULT NULL,
								  owner text DEFAULT dlock_owner(),
								  mode text DEFAULT 'exclusive',
								  lifetime text DEFAULT NULL,
								  min_hold interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_acquire_all' LANGUAGE C VOLATILE;

-- dlock_locks shows each lease's lifetime (pid is NULL once the backend that
-- holds the lease, or that it is bound to, has exited), its min_hold and, for
-- one released within that hold, when (it lasts until expires_at).
ALTER VIEW dlock_locks RENAME TO dlock_locks_1_1;
ALTER FUNCTION dlock_list_locks() RENAME TO dlock_list_locks_1_1;
CREATE FUNCTION dlock_list_locks(
	OUT name text, OUT owner text, OUT token bigint,
	OUT granted_at timestamptz, OUT expires_at timestamptz,
	OUT role regrole, OUT pid integer, OUT waiters integer,
	OUT version bigint, OUT durable boolean, OUT mode text,
	OUT permits integer, OUT lifetime text, OUT min_hold interval,
	OUT released_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_list_locks' LANGUAGE C VOLATILE;
CREATE VIEW dlock_locks AS
	SELECT * FROM dlock_list_locks();
GRANT SELECT ON dlock_locks TO PUBLIC;
COMMENT ON VIEW dlock_locks IS 'live dlock leases of this database';

-- The objects above replace 1.1's, renamed *_1_1 meanwhile: what an
-- administrator granted or revoked on the old ones carries over to the new
-- ones (a function's NULL acl is the default, EXECUTE for PUBLIC; a view's is
-- its owner's only).  Then the old ones go; a user's object that depends on
-- one of them (a view over dlock_locks, a BEGIN ATOMIC function) makes the
-- update fail here, changing nothing.
DO $$
DECLARE
	pair record;
	acl aclitem[];
	item record;
BEGIN
	FOR pair IN
		SELECT kind, old, new FROM (VALUES
			('FUNCTION', 'dlock_try_1_1(text, interval, text, text, integer)',
			 'dlock_try(text, interval, text, text, integer, text, interval)'),
			('FUNCTION', 'dlock_acquire_1_1(text, interval, interval, text, text, integer)',
			 'dlock_acquire(text, interval, interval, text, text, integer, text, interval)'),
			('FUNCTION', 'dlock_try_all_1_1(text[], interval, text, text)',
			 'dlock_try_all(text[], interval, text, text, text, interval)'),
			('FUNCTION', 'dlock_acquire_all_1_1(text[], interval, interval, text, text)',
			 'dlock_acquire_all(text[], interval, interval, text, text, text, interval)'),
			('FUNCTION', 'dlock_list_locks_1_1()', 'dlock_list_locks()'),
			('TABLE', 'dlock_locks_1_1', 'dlock_locks')) AS v(kind, old, new)
	LOOP
		IF pair.kind = 'FUNCTION' THEN
			SELECT proacl INTO acl FROM pg_proc WHERE oid = pair.old::regprocedure;
			pair.new := pair.new::regprocedure::text;
		ELSE
			SELECT relacl INTO acl FROM pg_class WHERE oid = pair.old::regclass;
			pair.new := pair.new::regclass::text;
		END IF;
		IF acl IS NULL AND pair.kind = 'FUNCTION' THEN
			CONTINUE;
		END IF;
		EXECUTE format('REVOKE ALL ON %s %s FROM PUBLIC', pair.kind, pair.new);
		FOR item IN SELECT * FROM aclexplode(acl) LOOP
			EXECUTE format('GRANT %s ON %s %s TO %s%s', item.privilege_type, pair.kind,
						   pair.new,
						   CASE WHEN item.grantee = 0 THEN 'PUBLIC'
						   ELSE quote_ident(pg_get_userbyid(item.grantee)) END,
						   CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
	END LOOP;
END
$$;
DROP VIEW dlock_locks_1_1;
DROP FUNCTION dlock_list_locks_1_1();
DROP FUNCTION dlock_try_1_1(text, interval, text, text, integer);
DROP FUNCTION dlock_acquire_1_1(text, interval, interval, text, text, integer);
DROP FUNCTION dlock_try_all_1_1(text[], interval, text, text);
DROP FUNCTION dlock_acquire_all_1_1(text[], interval, interval, text, text);
