/* dlock 1.1 -> 1.2 */

\echo Use "ALTER EXTENSION dlock UPDATE TO '1.2'" to load this file. \quit

-- When the grace after a promotion ends (no new lease is granted before),
-- or NULL when none runs (always on a standby, which grants nothing).
CREATE FUNCTION dlock_grace() RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dlock_grace' LANGUAGE C VOLATILE;
