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

-- Below, the four acquiring functions, dlock_list_locks, dlock_locks and
-- dlock_stats (function and view) are dropped and created again with new
-- columns and parameters, with the
-- extension's own privileges.  Privileges an administrator changed on them
-- are not carried over (a GRANT or REVOKE made here would be recorded as the
-- extension's initial privileges, which pg_dump leaves out), so each one is
-- named in a WARNING, with the statement that re-applies it after the update.
DO $$
DECLARE
	obj record;
	fresh aclitem[];
BEGIN
	FOR obj IN
		SELECT 'FUNCTION' AS kind, p.oid::regprocedure::text AS name, p.proacl AS acl,
			   acldefault('f', p.proowner) AS dflt
		FROM pg_proc p
		WHERE p.oid IN ('dlock_try(text, interval, text, text, integer)'::regprocedure,
						'dlock_acquire(text, interval, interval, text, text, integer)'::regprocedure,
						'dlock_try_all(text[], interval, text, text)'::regprocedure,
						'dlock_acquire_all(text[], interval, interval, text, text)'::regprocedure,
						'dlock_list_locks()'::regprocedure,
						'dlock_stats()'::regprocedure)
		UNION ALL
		SELECT 'TABLE', c.oid::regclass::text, c.relacl,
			   acldefault('r', c.relowner) || makeaclitem(0, c.relowner, 'SELECT', false)
		FROM pg_class c WHERE c.oid IN ('dlock_locks'::regclass, 'dlock_stats'::regclass)
	LOOP
		fresh := obj.dflt;
		IF obj.acl IS NULL OR (obj.acl @> fresh AND obj.acl <@ fresh) THEN
			CONTINUE;
		END IF;
		RAISE WARNING 'dlock 1.2 creates % again with the extension''s privileges; it had %',
			obj.name, obj.acl
			USING HINT = 'After the update, re-apply what you had changed, e.g. REVOKE EXECUTE ON FUNCTION dlock_try FROM PUBLIC, or GRANT ... TO a role.';
	END LOOP;
END
$$;

-- lifetime: what ends a new lease besides its ttl.  'ttl' nothing else;
-- 'session' also the exit of the backend that took it; 'transaction' also
-- the end of the transaction that took it.  NULL: 'session' when owner is
-- the owner generated for this session (dlock_owner() without dlock.owner),
-- else 'ttl'.  Session and transaction leases have no row in dlock_leases.
-- min_hold, after it: see dlock_lease_holds above (NULL: none).
DROP FUNCTION dlock_try(text, interval, text, text, integer);
CREATE FUNCTION dlock_try(name text,
						  ttl interval DEFAULT NULL,
						  owner text DEFAULT dlock_owner(),
						  mode text DEFAULT 'exclusive',
						  permits integer DEFAULT NULL,
						  lifetime text DEFAULT NULL,
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
							  lifetime text DEFAULT NULL,
							  min_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_acquire' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_try_all(text[], interval, text, text);
CREATE FUNCTION dlock_try_all(names text[],
							  ttl interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  lifetime text DEFAULT NULL,
							  min_hold interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_try_all' LANGUAGE C VOLATILE;

DROP FUNCTION dlock_acquire_all(text[], interval, interval, text, text);
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
DROP VIEW dlock_locks;
DROP FUNCTION dlock_list_locks();
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

-- Queued requests that hold no backend: dlock_enqueue grants at once, as
-- dlock_try, when it can; else the request joins the name's queue (the one
-- blocked dlock_acquire callers wait in, same FIFO) and the call returns
-- NULL at once, holding nothing.  When its turn comes the lease is granted
-- to owner, memory-only, its ttl counted from then; owner learns its token by
-- calling dlock_enqueue (or dlock_try) again, or from the "granted" event.
-- Asked again while queued, the request keeps its place and its hold
-- restarts; not asked again within hold, it leaves the queue.
-- dlock_dequeue leaves the queue.
CREATE FUNCTION dlock_enqueue(name text,
							  ttl interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  permits integer DEFAULT NULL,
							  hold interval DEFAULT '30 seconds')
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_enqueue_request' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_dequeue(name text, owner text DEFAULT dlock_owner())
RETURNS boolean
AS 'MODULE_PATHNAME', 'dlock_dequeue' LANGUAGE C VOLATILE;

-- dlock_waiters shows queued requests too (pid NULL, deadline the end of
-- their hold); dlock_stats counts them: queued now, and dropped since the
-- start or reset because their hold ran out.
COMMENT ON VIEW dlock_waiters IS 'sessions waiting in dlock_acquire and requests queued by dlock_enqueue, in queue order';
DROP VIEW dlock_stats;
DROP FUNCTION dlock_stats();
CREATE FUNCTION dlock_stats(
	OUT grants bigint, OUT immediate_grants bigint, OUT waits bigint,
	OUT wait_timeouts bigint, OUT releases bigint, OUT renewals bigint,
	OUT expired_by_worker bigint, OUT expired_by_sweep bigint,
	OUT expired_by_caller bigint, OUT leases bigint, OUT waiting bigint,
	OUT queued bigint, OUT queue_dropped bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'dlock_stats' LANGUAGE C VOLATILE;
CREATE VIEW dlock_stats AS
	SELECT * FROM dlock_stats();
GRANT SELECT ON dlock_stats TO PUBLIC;
