/* dlock 1.0: distributed leases with fencing tokens */

\echo Use "CREATE EXTENSION dlock" to load this file. \quit

-- Refuse to install into a server that did not preload the library.
CREATE FUNCTION dlock_preload_check() RETURNS void
AS 'MODULE_PATHNAME', 'dlock_preload_check' LANGUAGE C;
SELECT dlock_preload_check();
DROP FUNCTION dlock_preload_check();

-- The lease table: one row per durable lease, the source of truth after a
-- restart or crash.  Written only by the functions below, as its owner;
-- a row's version goes up on every change (compare-and-set).
CREATE TABLE dlock_leases (
	name text NOT NULL,
	owner text NOT NULL,
	role oid NOT NULL,
	token bigint NOT NULL,
	granted_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	ttl interval NOT NULL,		-- of the last grant or renewal: a rebuild
								-- after a restart runs the lease this long
	version bigint NOT NULL,
	mode text NOT NULL,			-- 'exclusive' or 'shared'
	permits integer,			-- a semaphore's size; NULL for a plain lock
	-- No CHECK constraints: each would be re-read and planned on every
	-- write (a third of a durable grant's cost); the rebuild checks rows.
	PRIMARY KEY (name, token)
);
REVOKE ALL ON dlock_leases FROM PUBLIC;

-- At least the highest fencing token handed out in this database.  The token
-- file in the data directory is the cluster's floor; pg_upgrade, a dump and
-- restore or a logical copy do not carry it, but they carry this table, so
-- new tokens start above every one issued here before.
CREATE TABLE dlock_token_floor (floor bigint NOT NULL);
INSERT INTO dlock_token_floor VALUES (0);
REVOKE ALL ON dlock_token_floor FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('dlock_token_floor', '');

CREATE FUNCTION dlock_owner() RETURNS text
AS 'MODULE_PATHNAME', 'dlock_owner' LANGUAGE C STABLE;

-- ttl NULL means the dlock.default_ttl setting.  mode 'shared' takes a read
-- lease; permits N makes the name a semaphore of N leases.
CREATE FUNCTION dlock_try(name text,
						  ttl interval DEFAULT NULL,
						  owner text DEFAULT dlock_owner(),
						  mode text DEFAULT 'exclusive',
						  permits integer DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_try' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_acquire(name text,
							  ttl interval DEFAULT NULL,
							  timeout interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive',
							  permits integer DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_acquire' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_renew(name text,
							ttl interval DEFAULT NULL,
							owner text DEFAULT dlock_owner())
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dlock_renew' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_release(name text,
							  owner text DEFAULT dlock_owner(),
							  token bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dlock_release' LANGUAGE C VOLATILE;

-- All or nothing: every name is granted, or none (NULL).  Tokens come back
-- in the order of names.
CREATE FUNCTION dlock_try_all(names text[],
							  ttl interval DEFAULT NULL,
							  owner text DEFAULT dlock_owner(),
							  mode text DEFAULT 'exclusive')
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_try_all' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_acquire_all(names text[],
								  ttl interval DEFAULT NULL,
								  timeout interval DEFAULT NULL,
								  owner text DEFAULT dlock_owner(),
								  mode text DEFAULT 'exclusive')
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dlock_acquire_all' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_release_all(names text[],
								  owner text DEFAULT dlock_owner())
RETURNS integer
AS 'MODULE_PATHNAME', 'dlock_release_all' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_list_locks(
	OUT name text, OUT owner text, OUT token bigint,
	OUT granted_at timestamptz, OUT expires_at timestamptz,
	OUT role regrole, OUT pid integer, OUT waiters integer,
	OUT version bigint, OUT durable boolean, OUT mode text,
	OUT permits integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_list_locks' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_list_waiters(
	OUT pid integer, OUT name text, OUT owner text, OUT role regrole,
	OUT waiting_since timestamptz, OUT queue_position integer,
	OUT deadline timestamptz, OUT mode text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_list_waiters' LANGUAGE C VOLATILE;

-- Fencing: the token must be a live lease's; that lease then stays until
-- the calling transaction ends.  Raises SQLSTATE DL001 otherwise.
CREATE FUNCTION dlock_fence(name text, token bigint) RETURNS void
AS 'MODULE_PATHNAME', 'dlock_fence' LANGUAGE C VOLATILE;

-- Row triggers: dlock_fenced('lock name or column', 'token column') and
-- dlock_versioned('version column').
CREATE FUNCTION dlock_fenced() RETURNS trigger
AS 'MODULE_PATHNAME', 'dlock_fenced' LANGUAGE C;
CREATE FUNCTION dlock_versioned() RETURNS trigger
AS 'MODULE_PATHNAME', 'dlock_versioned' LANGUAGE C;

-- Breaks every lease on a name whoever holds it (at commit); logged.
CREATE FUNCTION dlock_force_release(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'dlock_force_release' LANGUAGE C VOLATILE;
REVOKE EXECUTE ON FUNCTION dlock_force_release(text) FROM PUBLIC;

-- Ends due leases now and deletes rows of ended ones in this database.
CREATE FUNCTION dlock_sweep() RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_sweep' LANGUAGE C VOLATILE;

-- Cumulative counters for the whole cluster, since start or reset.
CREATE FUNCTION dlock_stats(
	OUT grants bigint, OUT immediate_grants bigint, OUT waits bigint,
	OUT wait_timeouts bigint, OUT releases bigint, OUT renewals bigint,
	OUT expired_by_worker bigint, OUT expired_by_sweep bigint,
	OUT expired_by_caller bigint, OUT leases bigint, OUT waiting bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'dlock_stats' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock_stats_reset() RETURNS void
AS 'MODULE_PATHNAME', 'dlock_stats_reset' LANGUAGE C VOLATILE;
REVOKE EXECUTE ON FUNCTION dlock_stats_reset() FROM PUBLIC;

CREATE VIEW dlock_locks AS
	SELECT * FROM dlock_list_locks();
CREATE VIEW dlock_waiters AS
	SELECT * FROM dlock_list_waiters();

CREATE VIEW dlock_stats AS
	SELECT * FROM dlock_stats();

-- Anyone may see who holds and who waits, as with pg_locks.
GRANT SELECT ON dlock_locks, dlock_waiters, dlock_stats TO PUBLIC;

COMMENT ON VIEW dlock_locks IS 'live dlock leases of this database';
COMMENT ON VIEW dlock_waiters IS 'sessions waiting in dlock_acquire, in queue order';
