-- dlock.events: off by default; a session, a role or a database may set it
SHOW dlock.events;
SET dlock.events = on;
SHOW dlock.events;
RESET dlock.events;
SET dlock.events = maybe;
CREATE ROLE dlock_events_role;
ALTER ROLE dlock_events_role SET dlock.events = on;
SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
 WHERE r.rolname = 'dlock_events_role';
SET ROLE dlock_events_role;
SHOW dlock.events;  -- a role's setting applies at login, not at SET ROLE
RESET ROLE;
DROP ROLE dlock_events_role;

-- Off, nothing is sent: psql would print a line for any notification this
-- session receives.  (With it on, the payloads carry tokens and pids that
-- differ on every run: test/tap/035_events.pl checks them.)
LISTEN dlock;
SELECT dlock_try('ev_off', '1 hour', 'o') > 0 AS granted;
SELECT dlock_release('ev_off', 'o');
SELECT dlock_try('ev_off', '1 hour', 'o') > 0 AS granted;
SET dlock.events = on;
-- a lease's events follow the setting it was granted with
SELECT dlock_force_release('ev_off');
BEGIN;
SELECT dlock_try('ev_rb', '1 hour', 'o') > 0 AS granted;
ROLLBACK;
RESET dlock.events;
UNLISTEN dlock;
