/* dlock 1.0 -> 1.1 */

\echo Use "ALTER EXTENSION dlock UPDATE TO '1.1'" to load this file. \quit

-- dlock_leases is a queue: every grant inserts a row and every release
-- deletes one, so it gathers dead rows at the rate of the cycles and holds
-- few live ones.  The default trigger (20 % of a table that is almost empty,
-- plus 50 rows) fires at every autovacuum round while the cost delay makes
-- each vacuum of a busy table lag behind; a fixed threshold and no delay
-- keep it to one round of the launcher's dead rows.  These settings take a
-- SHARE UPDATE EXCLUSIVE lock only: grants and releases go on during the
-- update.
ALTER TABLE dlock_leases SET (
	autovacuum_vacuum_scale_factor = 0,
	autovacuum_vacuum_threshold = 1000,
	autovacuum_vacuum_cost_delay = 0,
	autovacuum_analyze_scale_factor = 0,
	autovacuum_analyze_threshold = 10000
);
