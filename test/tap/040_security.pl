# Security and hostile use across roles, databases and sessions.
#
#  1. privileges: application roles cannot change dlock's table, functions,
#     views or extension except through the functions (42501), and
#     dlock_force_release / dlock_stats_reset are not executable by PUBLIC;
#  2. ownership: a lease belongs to its owner string and role: another role
#     presenting the owner string can neither renew, release nor fence it;
#     members of the role (and superusers) can;
#  3. dlock_force_release: grantable, breaks any lease at commit, logs who
#     broke what, wakes the next waiter;
#  4. search_path hijacking: objects a user creates in public (functions,
#     operators, an aggregate) or pg_temp are never called by dlock, whatever
#     search_path the caller, the role or the database sets, including the
#     rebuild after a restart and the worker's sweepers;
#  5. databases: the same name in two databases never interacts; at most 64
#     databases can use dlock at once (clean error, slots of dropped ones
#     are reused);
#  6. exhaustion: dlock.max_locks filled from several roles, 250 waiters on
#     one name (handed on in queue order), a waiter storm under
#     statement_timeout, cancels, hang-ups and terminations: clear errors,
#     live leases intact, everything usable afterwards;
#  7. hostile values that need more than one session: a timeout whose
#     deadline is past the end of timestamps, two sessions of one holder
#     extending a lease at once, a rolled-back renewal;
#  8. cost: memory of one backend over 100,000 statements, and savepoint
#     rollbacks in a transaction with many dlock calls.
use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use Time::HiRes qw(time sleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/../..');
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';

my $node = PostgreSQL::Test::Cluster->new('security');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
max_connections = 300
dlock.max_locks = 400
fsync = off
log_min_messages = log
});
$node->start;
my $log_offset = 0;

my $super = $node->safe_psql('postgres', 'SELECT current_user');

# ---------------------------------------------------------------- helpers

# Runs SQL as a role; returns 'ok' and the output, or the SQLSTATE and the
# error message.
sub run_as
{
	my ($db, $role, $sql) = @_;
	my ($out, $err);
	$node->psql(
		$db, "\\set VERBOSITY verbose\n$sql",
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		extra_params => [ '-U', $role ]);
	if ($err =~ /ERROR:\s+([0-9A-Z]{5}):\s*(.*)/)
	{
		return wantarray ? ($1, $2) : $1;
	}
	return wantarray ? ('ok', $out) : 'ok';
}

# One value, as a role; dies on error.
sub value_as
{
	my ($db, $role, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', $role ]);
}

sub no_crash
{
	return !$node->log_contains(
		qr/terminated by signal|server process .* exited with exit code|PANIC|TRAP:/, 0);
}

# Waits up to 10 s for a line of the server log after $offset.
sub log_has
{
	my ($re, $offset) = @_;
	for (1 .. 100)
	{
		return 1 if $node->log_contains($re, $offset);
		sleep 0.1;
	}
	return 0;
}

# A psql session in the background, for calls that wait.
sub session
{
	my ($db, $role) = @_;
	my $s = $node->background_psql($db, on_error_stop => 0,
		extra_params => [ '-U', $role ]);
	return $s;
}

sub build_fuzz
{
	my $rc = system('make', '-s', '-C', "$top/test/load", "PG_CONFIG=$pg_config", 'dlock_fuzz');
	return $rc == 0 && -x "$top/test/load/dlock_fuzz";
}

# ---------------------------------------------------------------- setup

$node->safe_psql('postgres', q{
CREATE EXTENSION dlock;
CREATE ROLE app1 LOGIN;
CREATE ROLE app2 LOGIN;
CREATE ROLE app1_member LOGIN IN ROLE app1;
CREATE ROLE app1_noinherit LOGIN NOINHERIT IN ROLE app1;
CREATE ROLE breaker LOGIN;
CREATE ROLE attacker LOGIN;
CREATE DATABASE db2;
});
$node->safe_psql('db2', 'CREATE EXTENSION dlock');

###
### 1. privileges
###
for my $f ('dlock_force_release(text)', 'dlock_stats_reset()')
{
	is($node->safe_psql('postgres',
			"SELECT has_function_privilege('app1', '$f', 'EXECUTE')"),
		'f', "$f is not executable by PUBLIC after CREATE EXTENSION");
}
is($node->safe_psql('postgres',
		"SELECT has_function_privilege('app1', 'dlock_try(text, interval, text, text, integer, text, interval)', 'EXECUTE')"),
	't', 'dlock_try is executable by PUBLIC');

value_as('postgres', 'app1', "SELECT dlock_try('priv', '1 hour', 'a1')");
my $rows_before = $node->safe_psql('postgres', 'SELECT name, owner, token, version FROM dlock_leases ORDER BY name');

my @denied = (
	q{SELECT * FROM dlock_leases},
	q{INSERT INTO dlock_leases VALUES ('x', 'o', 10, 1, now(), now() + interval '1 day', interval '1 day', 1)},
	q{UPDATE dlock_leases SET expires_at = now() + interval '10 years'},
	q{DELETE FROM dlock_leases},
	q{TRUNCATE dlock_leases},
	q{BEGIN; LOCK TABLE dlock_leases IN ACCESS EXCLUSIVE MODE; COMMIT;},
	q{COPY dlock_leases FROM STDIN},
	q{ALTER TABLE dlock_leases ADD COLUMN evil int},
	q{ALTER TABLE dlock_leases DISABLE TRIGGER ALL},
	q{CREATE INDEX ON dlock_leases (owner)},
	q{CREATE RULE r AS ON INSERT TO dlock_leases DO INSTEAD NOTHING},
	q{DROP TABLE dlock_leases},
	q{COMMENT ON TABLE dlock_leases IS 'mine'},
	q{SELECT * FROM dlock_lease_holds},
	q{INSERT INTO dlock_lease_holds VALUES ('x', 10, interval '1 day')},
	q{UPDATE dlock_lease_holds SET released_at = NULL},
	q{DELETE FROM dlock_lease_holds},
	q{TRUNCATE dlock_lease_holds},
	q{DROP TABLE dlock_lease_holds},
	q{CREATE OR REPLACE FUNCTION dlock_owner() RETURNS text LANGUAGE sql AS $$SELECT 'x'$$},
	q{ALTER FUNCTION dlock_try(text, interval, text, text, integer, text, interval) SECURITY DEFINER},
	q{DROP FUNCTION dlock_release(text, text, bigint)},
	q{CREATE OR REPLACE VIEW dlock_locks AS SELECT 1 AS name},
	q{DROP VIEW dlock_waiters},
	q{DROP EXTENSION dlock},
	q{ALTER EXTENSION dlock DROP FUNCTION dlock_sweep()},
	q{SELECT dlock_force_release('priv')},
	q{SELECT dlock_stats_reset()});
for my $sql (@denied)
{
	my ($state, $msg) = run_as('postgres', 'app1', $sql);
	is($state, '42501', "app role: $sql fails with 42501") or diag("got $state: $msg");
}
# a CREATE TRIGGER needs ownership too (the function must exist first)
value_as('postgres', $super, q{CREATE FUNCTION public.evil_trigger() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$});
is(run_as('postgres', 'app1',
		q{CREATE TRIGGER evil BEFORE INSERT ON dlock_leases FOR EACH ROW EXECUTE FUNCTION public.evil_trigger()}),
	'42501', 'app role: CREATE TRIGGER on dlock_leases fails with 42501');
# GRANT and REVOKE by a non-owner only warn: the privileges stay as they were
run_as('postgres', 'app1', q{REVOKE EXECUTE ON FUNCTION dlock_try(text, interval, text, text, integer, text, interval) FROM PUBLIC});
run_as('postgres', 'app1', q{GRANT EXECUTE ON FUNCTION dlock_force_release(text) TO app1});
is($node->safe_psql('postgres',
		q{SELECT has_function_privilege('app2', 'dlock_try(text, interval, text, text, integer, text, interval)', 'EXECUTE')
		  AND NOT has_function_privilege('app1', 'dlock_force_release(text)', 'EXECUTE')}),
	't', 'GRANT and REVOKE by an application role change no privilege of dlock');
is($node->safe_psql('postgres', 'SELECT name, owner, token, version FROM dlock_leases ORDER BY name'),
	$rows_before, 'the lease table is unchanged by the refused statements');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_trigger WHERE tgrelid = 'dlock_leases'::regclass AND NOT tgisinternal"),
	'0', 'no trigger on the lease table');
is(value_as('postgres', 'app1', q{SELECT dlock_release('priv', 'a1')}), 't',
	'the functions still work for the role afterwards');

###
### 2. ownership: role + owner string
###
my $tok = value_as('postgres', 'app1', q{SELECT dlock_try('job', '1 hour', 'shared')});
like($tok, qr/^\d+$/, 'app1 takes job with owner "shared"');
is(value_as('postgres', 'app2', q{SELECT dlock_try('job', '1 hour', 'shared') IS NULL}), 't',
	'app2 with the same owner string: try returns NULL');
is(value_as('postgres', 'app2', q{SELECT dlock_acquire('job', '1 hour', '0', 'shared') IS NULL}), 't',
	'app2 with the same owner string: acquire without waiting returns NULL');
is(value_as('postgres', 'app2', q{SELECT dlock_renew('job', '1 hour', 'shared') IS NULL}), 't',
	'app2 with the same owner string: renew returns NULL');
is(value_as('postgres', 'app2', q{SELECT dlock_release('job', 'shared')}), 'f',
	'app2 with the same owner string: release returns false');
is(value_as('postgres', 'app2', qq{SELECT dlock_release('job', 'shared', $tok)}), 'f',
	'app2 with the owner string and the token: release returns false');
is(run_as('postgres', 'app2', qq{SELECT dlock_fence('job', $tok)}), '42501',
	'app2 with the token: dlock_fence fails with 42501');
value_as('postgres', $super, q{
	CREATE TABLE public.fenced_jobs (id int, fence bigint);
	CREATE TRIGGER fenced BEFORE INSERT ON public.fenced_jobs
		FOR EACH ROW EXECUTE FUNCTION dlock_fenced('job', 'fence');
	GRANT INSERT ON public.fenced_jobs TO PUBLIC;});
is(run_as('postgres', 'app2', qq{INSERT INTO public.fenced_jobs VALUES (1, $tok)}), '42501',
	'app2 writing with the token through dlock_fenced fails with 42501');
is(run_as('postgres', 'app1', qq{INSERT INTO public.fenced_jobs VALUES (1, $tok)}), 'ok',
	'app1 writing with the token through dlock_fenced succeeds');
# a forged session owner of another role's session
is(value_as('postgres', 'app1', q{SELECT dlock_try('job-s', lifetime => 'ttl') IS NOT NULL}), 't', 'app1 takes job-s with its session owner');
my $forged = value_as('postgres', 'app1', q{SELECT owner FROM dlock_locks WHERE name = 'job-s'});
is(value_as('postgres', 'app2', qq{SELECT dlock_release('job-s', '$forged')}), 'f',
	'app2 presenting app1\'s session owner string cannot release');
is(value_as('postgres', 'app1', qq{SELECT dlock_release('job-s', '$forged')}), 't',
	'app1 presenting its own session owner string from another session can');

# members of the role act as the holder; a NOINHERIT member only after SET ROLE
is(value_as('postgres', 'app1_member', q{SELECT dlock_renew('job', '1 hour', 'shared') IS NOT NULL}), 't',
	'a member of app1 can renew app1\'s lease');
is(run_as('postgres', 'app1_member', qq{BEGIN; SELECT dlock_fence('job', $tok); COMMIT;}), 'ok',
	'a member of app1 can fence with the token');
is(value_as('postgres', 'app1_member', q{SELECT dlock_try('job', '1 hour', 'shared') IS NULL}), 't',
	'a member of app1 is still another holder for try (no token)');
is(value_as('postgres', 'app1_noinherit', q{SELECT dlock_renew('job', '1 hour', 'shared') IS NULL}), 't',
	'a NOINHERIT member of app1 cannot renew without SET ROLE');
is(value_as('postgres', 'app1_noinherit', q{SET ROLE app1; SELECT dlock_renew('job', '1 hour', 'shared') IS NOT NULL}), 't',
	'... and can after SET ROLE app1');
is(value_as('postgres', 'app1', q{SELECT role FROM dlock_locks WHERE name = 'job'}), 'app1',
	'dlock_locks names the role that took the lease');
is(value_as('postgres', 'app1_member', q{SELECT dlock_release('job', 'shared')}), 't',
	'a member of app1 can release app1\'s lease');
is(value_as('postgres', 'app1', q{SELECT dlock_renew('job', '1 hour', 'shared') IS NULL}), 't',
	'the lease released by the member is gone for app1 too');

# superusers have the privileges of every role
value_as('postgres', 'app2', q{SELECT dlock_try('su', '1 hour', 'x')});
is($node->safe_psql('postgres', q{SELECT dlock_release('su', 'x')}), 't',
	'a superuser presenting the owner string can release another role\'s lease');

###
### 3. dlock_force_release
###
$tok = value_as('postgres', 'app1', q{SELECT dlock_try('victim', '1 hour', 'holder-1')});
is(run_as('postgres', 'breaker', q{SELECT dlock_force_release('victim')}), '42501',
	'force_release without a grant: 42501');
$node->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION dlock_force_release(text) TO breaker');
my $waiter = session('postgres', 'app2');
$waiter->query_until(qr/queued/, "\\echo queued\nSELECT dlock_acquire('victim', '1 minute', '30 s', 'next');\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock_waiters WHERE name = 'victim'}),
	'app2 waits on victim');
is(value_as('postgres', 'breaker', q{BEGIN; SELECT dlock_force_release('victim'); ROLLBACK;}), 't',
	'force_release in a transaction returns true');
is(value_as('postgres', 'app1', q{SELECT token FROM dlock_locks WHERE name = 'victim'}), $tok,
	'... and a rollback keeps the lease');
$log_offset = -s $node->logfile;
my $t0 = time;
is(value_as('postgres', 'breaker', q{SELECT dlock_force_release('victim')}), 't',
	'a granted role force-releases another role\'s lease');
my $woken = $waiter->query(q{SELECT 'woken'});
my $wake_s = time - $t0;
like($woken, qr/^(\d+)\s+woken$/s, 'the waiter got the lease') or diag($woken);
$woken =~ /^(\d+)/;
cmp_ok($1 // 0, '>', $tok, 'with a new, larger token');
cmp_ok($wake_s, '<', 5, sprintf('promptly (%.2f s after the force_release)', $wake_s));
ok(log_has(
		qr/LOG:  dlock lease "victim" of owner "holder-1" \(role app1, token $tok\) force-released by role breaker/,
		$log_offset),
	'the server log names the lease, its holder and who broke it');
is(value_as('postgres', 'app1', q{SELECT dlock_renew('victim', '1 hour', 'holder-1') IS NULL}), 't',
	'the old holder can no longer renew');
is(value_as('postgres', 'app1', qq{SELECT dlock_release('victim', 'holder-1', $tok)}), 'f',
	'... nor release');
is(value_as('postgres', 'breaker', q{SELECT dlock_force_release('victim-free')}), 'f',
	'force_release of a free name returns false');
# a name with control characters is logged as it is, inside the quotes
value_as('postgres', 'app1', q{SELECT dlock_try(E'ctl\x01name', '1 hour', E'own\x02er')});
$log_offset = -s $node->logfile;
is(value_as('postgres', 'breaker', q{SELECT dlock_force_release(E'ctl\x01name')}), 't',
	'force_release of a name with control characters');
ok(log_has(qr/dlock lease "ctl\x01name" of owner "own\x02er" \(role app1/, $log_offset),
	'... logged with the exact name and owner');
$node->safe_psql('postgres', 'REVOKE EXECUTE ON FUNCTION dlock_force_release(text) FROM breaker');
is(run_as('postgres', 'breaker', q{SELECT dlock_force_release('victim')}), '42501',
	'after REVOKE: 42501 again');
$waiter->query(q{SELECT dlock_release('victim', 'next')});
$waiter->quit;

###
### 4. search_path hijacking
###
# The attacker may create objects in public of postgres (as under PostgreSQL
# 14's defaults) and owns the database hijack, whose default search_path it
# sets; the trap records every call in a sequence and a table, and is armed.
$node->safe_psql('postgres', 'GRANT CREATE ON SCHEMA public TO attacker');
$node->safe_psql('postgres', 'CREATE DATABASE hijack OWNER attacker');
$node->safe_psql('hijack', 'CREATE EXTENSION dlock');
$node->safe_psql('hijack', 'GRANT EXECUTE ON FUNCTION dlock_force_release(text) TO breaker');
$node->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION dlock_force_release(text) TO breaker');

my $trap = q{
CREATE SEQUENCE public.hijack_hits;
CREATE TABLE public.hijack_log (what text, who text);
GRANT USAGE, UPDATE, SELECT ON SEQUENCE public.hijack_hits TO PUBLIC;
GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC;
CREATE FUNCTION public.hijack_note(what text) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
	PERFORM pg_catalog.nextval('public.hijack_hits');
	INSERT INTO public.hijack_log VALUES (what, pg_catalog.current_user());
END $f$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql VOLATILE AS $f$
BEGIN PERFORM public.hijack_note('clock_timestamp()'); RETURN pg_catalog.clock_timestamp(); END $f$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql VOLATILE AS $f$
BEGIN PERFORM public.hijack_note('now()'); RETURN pg_catalog.now(); END $f$;
CREATE FUNCTION public.hj_texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.hijack_note('text = text'); RETURN $1 OPERATOR(pg_catalog.=) $2; END $f$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.hj_texteq);
CREATE FUNCTION public.hj_int8eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.hijack_note('bigint = bigint'); RETURN $1 OPERATOR(pg_catalog.=) $2; END $f$;
CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.hj_int8eq);
CREATE FUNCTION public.hj_int8le(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.hijack_note('bigint <= bigint'); RETURN $1 OPERATOR(pg_catalog.<=) $2; END $f$;
CREATE OPERATOR public.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.hj_int8le);
CREATE FUNCTION public.hj_int84pl(bigint, integer) RETURNS bigint LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.hijack_note('bigint + integer'); RETURN $1 OPERATOR(pg_catalog.+) $2; END $f$;
CREATE OPERATOR public.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = public.hj_int84pl);
CREATE FUNCTION public.hj_tsgt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.hijack_note('timestamptz > timestamptz'); RETURN $1 OPERATOR(pg_catalog.>) $2; END $f$;
CREATE OPERATOR public.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.hj_tsgt);
CREATE FUNCTION public.hj_tsle(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.hijack_note('timestamptz <= timestamptz'); RETURN $1 OPERATOR(pg_catalog.<=) $2; END $f$;
CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.hj_tsle);
CREATE FUNCTION public.hj_count(bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.hijack_note('count(*)'); RETURN $1 OPERATOR(pg_catalog.+) 1; END $f$;
CREATE AGGREGATE public.count(*) (SFUNC = public.hj_count, STYPE = bigint, INITCOND = '0');
};
for my $db ('postgres', 'hijack')
{
	is(run_as($db, 'attacker', $trap), 'ok', "$db: the attacker creates its trap in public");
	# armed: the attacker's own unqualified calls hit it
	value_as($db, 'attacker', q{SET search_path = public, pg_catalog;
		SELECT clock_timestamp() IS NOT NULL, 'a'::text = 'a'::text, 1::bigint <= 2::bigint, (SELECT count(*) FROM pg_class) > 0});
	is(value_as($db, 'attacker', q{SELECT count(DISTINCT what) FROM public.hijack_log}), '4',
		"$db: the trap is armed (it catches clock_timestamp(), text =, bigint <= and count(*))");
	value_as($db, 'attacker', q{TRUNCATE public.hijack_log; ALTER SEQUENCE public.hijack_hits RESTART});
}
$node->safe_psql('hijack', q{ALTER DATABASE hijack SET search_path = public, pg_catalog});
$node->safe_psql('postgres', q{ALTER ROLE app1 SET search_path = public, pg_catalog});

# Every dlock path that runs SQL of its own, with a hostile search_path.
# (From here on, the test's own statements in these databases qualify their
# operators and aggregates: only what dlock runs may reach the trap.)
my $calls = q{
SELECT dlock_try('hj-1', '1 minute', 'x') IS NOT NULL;
SELECT dlock_try('hj-1', '2 minutes', 'x') IS NOT NULL;
SELECT dlock_renew('hj-1', '1 minute', 'x') IS NOT NULL;
BEGIN; SELECT dlock_renew('hj-1', '3 minutes', 'x') IS NOT NULL; ROLLBACK;
SELECT dlock_renew('hj-1', '1 minute', 'x') IS NOT NULL;
SELECT dlock_release('hj-1', 'x');
SELECT dlock_try('hj-2', '10 ms', 'x') IS NOT NULL;
SELECT pg_sleep(0.05);
SELECT dlock_sweep() >= 0;
SELECT dlock_try('hj-2', '1 minute', 'y') IS NOT NULL;
SELECT pg_catalog.count(*) FROM dlock_locks;
SELECT pg_catalog.count(*) FROM dlock_waiters;
SELECT dlock_acquire('hj-3', '1 minute', '0', 'x') IS NOT NULL;
SELECT dlock_release('hj-3', 'x', (SELECT token FROM dlock_locks WHERE name OPERATOR(pg_catalog.=) 'hj-3'));
};
my @paths = (
	'public, pg_catalog',
	'pg_temp, public, pg_catalog',
	'"$user", public, pg_catalog');
for my $db ('postgres', 'hijack')
{
	for my $role ('attacker', 'app1', $super)
	{
		for my $path (@paths)
		{
			# pg_temp objects too: a temp table named like dlock's table and
			# a temp function named like the one dlock calls
			my ($state, $msg) = run_as($db, $role, qq{
				CREATE TEMP TABLE dlock_leases (LIKE pg_catalog.pg_class);
				CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
					\$\$BEGIN PERFORM public.hijack_note('pg_temp.clock_timestamp()'); RETURN pg_catalog.clock_timestamp(); END\$\$;
				SET search_path = $path;
				$calls
				SELECT dlock_release('hj-2', 'y');
				SELECT pg_catalog.count(*) FROM pg_temp.dlock_leases;});
			is($state, 'ok', "$db as $role, search_path $path: every call works") or diag($msg);
		}
	}
	# force_release, as a role that may, with the hostile path
	value_as($db, 'app2', q{SELECT dlock_try('hj-4', '1 minute', 'x')});
	is(value_as($db, 'breaker', q{SET search_path = public, pg_catalog; SELECT dlock_force_release('hj-4')}), 't',
		"$db: force_release with a hostile search_path");
	# leases left for the rebuild after the restart and for the sweepers
	value_as($db, 'app2', q{SELECT dlock_try('hj-rebuild', '1 hour', 'x'), dlock_try('hj-expiring', '1 s', 'x')});
}
# the rebuild after a restart runs in the first backend that calls dlock
$node->restart;
for my $db ('postgres', 'hijack')
{
	is(value_as($db, 'attacker', q{SET search_path = public, pg_catalog;
		SELECT pg_catalog.count(*) FROM dlock_locks WHERE name OPERATOR(pg_catalog.=) 'hj-rebuild'}), '1',
		"$db: rebuilt after the restart, first call by the attacker with its search_path");
}
# the worker's sweeper runs in hijack, whose database search_path is hostile
ok($node->poll_query_until('hijack',
		q{SELECT pg_catalog.count(*) OPERATOR(pg_catalog.=) 0 FROM dlock_leases WHERE name OPERATOR(pg_catalog.=) 'hj-expiring'}),
	'hijack: the sweeper deleted the expired row');
for my $db ('postgres', 'hijack')
{
	my $hits = $node->safe_psql($db,
		q{SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.hijack_hits)
		  || ' ' || coalesce((SELECT string_agg(DISTINCT what || ' as ' || who, ', ') FROM public.hijack_log), '')});
	is($hits, '0 ', "$db: no dlock function ever called an object of public or pg_temp")
	  or diag("hijacked calls (count, what as whom): $hits");
}
$node->safe_psql('postgres', q{ALTER ROLE app1 RESET search_path});
for my $db ('postgres', 'hijack')
{
	value_as($db, 'app2', q{SELECT dlock_release('hj-rebuild', 'x')});
}

###
### 5. databases
###
my $ta = value_as('postgres', 'app1', q{SELECT dlock_try('same', '1 hour', 'o')});
my $tb = value_as('db2', 'app1', q{SELECT dlock_try('same', '1 hour', 'o')});
ok($ta =~ /^\d+$/ && $tb =~ /^\d+$/ && $ta != $tb,
	'the same name, owner and role are granted in two databases, with different tokens');
is(value_as('db2', 'app2', q{SELECT dlock_try('same', '1 hour', 'other') IS NULL}), 't',
	'in db2 the name is held');
my $w2 = session('postgres', 'app2');
$w2->query_until(qr/queued/, "\\echo queued\nSELECT dlock_acquire('same', '1 minute', '20 s', 'w');\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock_waiters WHERE name = 'same'}),
	'a waiter on "same" in postgres');
is(value_as('db2', 'app1', q{SELECT count(*) FROM dlock_waiters}), '0',
	'db2 does not list the waiter of postgres');
is(value_as('db2', 'app1', q{SELECT count(*) FROM dlock_locks WHERE name = 'same' AND token = } . $tb), '1',
	'db2 lists only its own lease');
is(value_as('db2', 'app1', q{SELECT dlock_release('same', 'o')}), 't', 'released in db2');
sleep 0.3;
is(value_as('postgres', 'app1', q{SELECT count(*) FROM dlock_waiters WHERE name = 'same'}), '1',
	'the release in db2 did not wake the waiter in postgres');
is(run_as('db2', 'app1', qq{BEGIN; SELECT dlock_fence('same', $ta); COMMIT;}), 'DL001',
	'a token of postgres does not fence the same name in db2');
$node->safe_psql('db2', 'GRANT EXECUTE ON FUNCTION dlock_force_release(text) TO breaker');
value_as('db2', 'app2', q{SELECT dlock_try('same', '1 hour', 'z')});
is(value_as('db2', 'breaker', q{SELECT dlock_force_release('same')}), 't', 'force_release in db2');
is(value_as('postgres', 'app1', qq{SELECT token FROM dlock_locks WHERE name = 'same'}), $ta,
	'... leaves the lease of postgres alone');
is(value_as('postgres', 'app1', q{SELECT dlock_release('same', 'o')}), 't', 'released in postgres');
like($w2->query(q{SELECT 'after'}), qr/^\d+\s+after$/s, 'only that wakes the waiter in postgres');
$w2->query(q{SELECT dlock_release('same', 'w')});
$w2->quit;

# at most 64 databases use dlock at once
my $used = 3;    # postgres, db2, hijack
my ($limit_state, $limit_msg, $ndb) = ('', '', 0);
for my $i (1 .. 70)
{
	$node->safe_psql('postgres', "CREATE DATABASE many$i");
	$node->safe_psql("many$i", 'CREATE EXTENSION dlock');
	($limit_state, $limit_msg) = run_as("many$i", 'app1', q{SELECT dlock_try('x', '1 s', 'o')});
	$ndb = $i;
	last if $limit_state ne 'ok';
}
is($limit_state, '53400', "database " . ($used + $ndb) . " fails with 53400 (configuration_limit_exceeded)") or diag($limit_msg);
like($limit_msg, qr/too many databases/, '... saying so');
is($used + $ndb, 65, 'the 65th database is the first refused');
is(value_as('postgres', 'app1', q{SELECT dlock_try('still', '1 s', 'o') IS NOT NULL}), 't',
	'the databases that have a slot keep working');
$node->safe_psql('postgres', 'DROP DATABASE many1 WITH (FORCE)');
is(run_as("many$ndb", 'app1', q{SELECT dlock_try('x', '1 s', 'o')}), 'ok',
	'after dropping a database its slot is reused');
# the exhaustion tests below count entries: no lease of these may end
# (and free one) in the middle of them
run_as("many$ndb", 'app1', q{SELECT dlock_release('x', 'o')});
value_as('postgres', 'app1', q{SELECT dlock_release('still', 'o')});
for my $i (2 .. $ndb)
{
	$node->safe_psql('postgres', "DROP DATABASE many$i WITH (FORCE)");
}

###
### 6. exhaustion
###
# dlock.max_locks = 400 for the whole cluster: filled by four roles
my @fillers = ('app1', 'app2', 'app1_member', 'breaker');
$node->safe_psql('postgres', 'SELECT dlock_sweep()');
my $fill = q{
DO $$
DECLARE n int := 0;
BEGIN
	LOOP
		BEGIN
			PERFORM set_config('dlock.durable', (n % 2 = 0)::text, true);
			PERFORM dlock_try('fill-' || current_user || '-' || n, '1 hour', 'f');
			n := n + 1;
			EXIT WHEN n >= 150;
		EXCEPTION WHEN out_of_memory THEN
			RAISE NOTICE 'full at %', n;
			EXIT;
		END;
	END LOOP;
END $$;
};
for my $r (@fillers)
{
	value_as('postgres', $r, $fill);
}
my $filled = $node->safe_psql('postgres', q{SELECT count(*) FROM dlock_locks WHERE name LIKE 'fill-%'});
my $leases = $node->safe_psql('postgres', 'SELECT leases FROM dlock_stats');
is($leases, '400', "the table is full: 400 entries ($filled fill- leases from four roles)");
my $snap = $node->safe_psql('postgres', q{SELECT string_agg(name || ':' || token, ',' ORDER BY name) FROM dlock_locks});
for my $r (@fillers, $super)
{
	my ($state, $msg) = run_as('postgres', $r, q{SELECT dlock_try('one-more', '1 hour', 'x')});
	is($state, '53200', "full: a new name for $r fails with 53200") or diag($msg);
}
my ($state, $msg) = run_as('db2', 'app1', q{SELECT dlock_try('one-more', '1 hour', 'x')});
is($state, '53200', 'full: also in another database (the table is per cluster)');
my $hint = $node->psql('postgres', q{SELECT dlock_try('one-more', '1 hour', 'x')}, stderr => \my $err);
like($err, qr/HINT:.*dlock\.max_locks/, 'the error has a hint naming dlock.max_locks');
is(value_as('postgres', 'app1', q{SELECT dlock_try('fill-app1-0', '1 hour', 'f') IS NOT NULL}), 't',
	'full: the holder re-acquires');
is(value_as('postgres', 'app1', q{SELECT dlock_renew('fill-app1-1', '1 hour', 'f') IS NOT NULL}), 't',
	'full: the holder renews');
is(value_as('postgres', 'app2', q{SELECT dlock_acquire('fill-app1-0', '1 hour', '100 ms', 'w') IS NULL}), 't',
	'full: waiting on a held name still works (and times out)');
is(value_as('postgres', 'app2', q{SELECT count(*) > 0 FROM dlock_locks}), 't', 'full: dlock_locks works');
is($node->safe_psql('postgres', q{SELECT string_agg(name || ':' || token, ',' ORDER BY name) FROM dlock_locks}),
	$snap, 'full: the refused calls changed no live lease');
value_as('postgres', 'app2', q{SELECT dlock_release('fill-app2-' || g, 'f') FROM generate_series(0, 4) g});
is(value_as('postgres', 'app1', q{SELECT count(dlock_try('after-' || g, '1 hour', 'x')) FROM generate_series(1, 5) g}), '5',
	'five releases make room for five new names');
is(run_as('postgres', 'app1', q{SELECT dlock_try('after-6', '1 hour', 'x')}), '53200', '... and no more');
for my $r (@fillers)
{
	value_as('postgres', $r, q{SELECT count(dlock_release(name, 'f')) FROM dlock_locks WHERE name LIKE 'fill-' || current_user || '-%'});
}
value_as('postgres', 'app1', q{SELECT count(dlock_release(name, 'x')) FROM dlock_locks WHERE name LIKE 'after-%'});
is(value_as('postgres', 'app1', q{SELECT count(dlock_try('again-' || g, '1 s', 'x')) FROM generate_series(1, 300) g}), '300',
	'after the releases, 300 new names are granted');
value_as('postgres', 'app1', q{SELECT count(dlock_release(name, 'x')) FROM dlock_locks WHERE name LIKE 'again-%'});

# herds of waiters on one name: 250 sessions (max_connections is 300)
SKIP:
{
	skip 'dlock_fuzz did not build', 9 unless build_fuzz();
	my $herd = sub {
		my ($mode, $n, @extra) = @_;
		my ($out, $err2);
		my $t = time;
		IPC::Run::run([ "$top/test/load/dlock_fuzz", '-d', $node->connstr('postgres'),
				'--roles', 'app1,app2,app1_member,breaker', '--herd', $n,
				'--herd-name', "herd-$mode", '--herd-mode', $mode, @extra ],
			'>', \$out, '2>', \$err2);
		my $rc = $? >> 8;
		diag(sprintf("herd %s of %d (%.1f s):\n%s%s", $mode, $n, time - $t, $out, $err2));
		return ($rc, $out);
	};
	my ($rc, $out) = $herd->('chain', 250);
	is($rc, 0, '250 waiters: every one granted in queue order, nothing left queued');
	like($out, qr/250 granted/, '... all 250 granted');

	$log_offset = -s $node->logfile;
	my $keep = value_as('postgres', 'app1', q{SELECT dlock_try('bystander', '1 hour', 'b')});
	($rc, $out) = $herd->('timeout', 250, '--herd-timeout', '400');
	is($rc, 0, '250 waiters under statement_timeout: each gets 57014, the holder keeps the lease');
	like($out, qr/0 granted, 250 timed out/, '... all 250 timed out');

	($rc, $out) = $herd->('storm', 250, '--herd-timeout', '300', '--seed', '7');
	is($rc, 0, 'a storm of 250: timeouts, own timeouts, cancels, hang-ups and terminations; the rest granted in order');

	is(value_as('postgres', 'app1', q{SELECT token FROM dlock_locks WHERE name = 'bystander'}), $keep,
		'a lease on another name was not disturbed by the herds');
	value_as('postgres', 'app1', q{SELECT dlock_release('bystander', 'b')});
	is($node->safe_psql('postgres', 'SELECT count(*) FROM dlock_waiters'), '0', 'no waiter left');
	is($node->safe_psql('postgres', 'SELECT waiting FROM dlock_stats'), '0', 'dlock_stats.waiting is 0');
	ok(no_crash(), 'no backend crashed during the herds');
}

###
### 7. hostile values that need several sessions
###
# A timeout whose deadline lies beyond the last timestamp: the waiter waits,
# and dlock_waiters stays readable for everyone.  (justify_hours: with the
# hours in the interval's time field, the subtraction overflowed it in the
# first hour of every UTC day, "interval out of range".)
value_as('postgres', 'app1', q{SELECT dlock_try('far', '1 hour', 'h')});
my $far = session('postgres', 'app2');
$far->query_until(qr/queued/, q{\echo queued
SET statement_timeout = '20s';
SELECT dlock_acquire('far', '1 minute',
	justify_hours(interval '2562047788 hours') - (now() - timestamptz '2000-01-01 00:00:00+00') + interval '1 hour', 'w');
});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'SELECT dlock_acquire(''far''%' AND wait_event_type = 'Extension'}),
	'a waiter with a timeout that ends past the last timestamp is queued');
($state, $msg) = run_as('postgres', 'app1',
	q{SELECT count(*) FROM dlock_waiters WHERE name = 'far' AND (deadline IS NULL OR deadline > now())});
is("$state $msg", "ok 1", 'dlock_waiters stays readable and shows no deadline in the past')
  or diag("got $state: $msg; deadline shown: "
	  . join(' ', run_as('postgres', 'app1', q{SELECT deadline FROM dlock_waiters WHERE name = 'far'})));
# and the smallest interval is a negative timeout, refused at once
($state, $msg) = run_as('postgres', 'app1',
	q{SET statement_timeout = '3s'; SELECT dlock_acquire('far', '1 minute', interval '-178956970 years -8 months -2147483648 days -2562047788 hours -54.775808 seconds', 'w2')});
is($state, '22023', 'the most negative timeout is refused with 22023, not waited on') or diag("got $state: $msg");
$node->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT dlock_acquire(''far''%' AND pid <> pg_backend_pid()});
$far->quit;
value_as('postgres', 'app1', q{SELECT dlock_release('far', 'h')});

# Two sessions of one holder extend a lease at once: one renews in an open
# transaction, the other re-acquires meanwhile and waits for the row.  The
# re-acquisition returns after the renewal commits: the lease must then be
# what both the table and shared memory say, and live as long as asked.
for my $case ([ 'race-a', '2 s', '1 hour' ], [ 'race-b', '1 hour', '3 s' ])
{
	my ($name, $renew_ttl, $try_ttl) = @$case;
	# a lease with its row (a deferred one's renewal would hold off the
	# re-acquisition as a grant in progress does: deferred_adopt)
	value_as('postgres', 'app1', qq{SET dlock.defer_rows = off; SELECT dlock_try('$name', '1 minute', 'h')});
	my $s1 = session('postgres', 'app1');
	$s1->query_safe(qq{BEGIN; SELECT dlock_renew('$name', '$renew_ttl', 'h');});
	my $s2 = session('postgres', 'app1');
	$s2->query_until(qr/sent/, qq{\\echo sent\nSELECT dlock_try('$name', '$try_ttl', 'h') IS NOT NULL AS reacquired;\n});
	ok($node->poll_query_until('postgres',
			qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'SELECT dlock_try(''$name''%' AND wait_event_type = 'Lock'}),
		"$name: the re-acquisition waits for the renewal's row");
	$s1->query_safe('COMMIT');
	like($s2->query(q{SELECT 'done'}), qr/^t\s+done$/s, "$name: the re-acquisition ($try_ttl) returns its token after the renewal ($renew_ttl) commits");
	$s1->quit;
	$s2->quit;
	my $cmp = value_as('postgres', $super, qq{
		SELECT coalesce(abs(extract(epoch FROM l.expires_at - r.expires_at)) < 1, false)
		FROM dlock_leases r LEFT JOIN dlock_locks l USING (name) WHERE r.name = '$name'});
	is($cmp, 't', "$name: the row and shared memory agree on the expiry")
	  or diag(value_as('postgres', $super, qq{SELECT 'memory: ' || coalesce((SELECT expires_at::text FROM dlock_locks WHERE name = '$name'), 'no lease')
		|| ', row: ' || (SELECT expires_at::text FROM dlock_leases WHERE name = '$name') || ', now: ' || clock_timestamp()}));
	if ($name eq 'race-a')
	{
		sleep 2.5;
		is(value_as('postgres', 'app1', qq{SELECT count(*) FROM dlock_locks WHERE name = '$name'}), '1',
			"$name: the lease re-acquired for $try_ttl after the renewal committed is still live 2.5 s later");
	}
	value_as('postgres', $super, qq{SELECT dlock_force_release('$name'); DELETE FROM dlock_leases WHERE name = '$name'});
}

# A rolled-back renewal or re-acquisition leaves the row as it was;
# dlock_locks must show the row's version, as the README says.
for my $case (
	[ 'ver-renew',     q{BEGIN; SELECT dlock_renew('ver-renew', '1 hour', 'h'); ROLLBACK;}, 'renewal' ],
	[ 'ver-renew-sp',  q{BEGIN; SAVEPOINT s; SELECT dlock_renew('ver-renew-sp', '1 hour', 'h'); ROLLBACK TO s; COMMIT;}, 'renewal (to a savepoint)' ],
	[ 'ver-try',       q{BEGIN; SELECT dlock_try('ver-try', '2 hours', 'h'); ROLLBACK;}, 're-acquisition' ],
	[ 'ver-acquire-sp', q{BEGIN; SAVEPOINT s; SELECT dlock_acquire('ver-acquire-sp', '2 hours', '0', 'h'); ROLLBACK TO s; COMMIT;}, 're-acquisition (to a savepoint)' ])
{
	my ($name, $sql, $what) = @$case;
	value_as('postgres', 'app1', qq{SET dlock.defer_rows = off; SELECT dlock_try('$name', '1 hour', 'h')});
	value_as('postgres', 'app1', $sql);
	is(value_as('postgres', $super, qq{SELECT l.version || ' ' || r.version FROM dlock_locks l JOIN dlock_leases r USING (name) WHERE name = '$name'}),
		'1 1', "after a rolled-back $what, dlock_locks.version is the row's version");
	value_as('postgres', 'app1', qq{SELECT dlock_release('$name', 'h')});
}

###
### 8. cost
###
# One backend, 100,000 statements of every kind (a third of them refused):
# its memory must not grow.
{
	my @stmts;
	for my $i (1 .. 100_000)
	{
		my $k = $i % 10;
		my $n = $i % 50;
		push @stmts,
			$k == 0 ? "SELECT dlock_try('m$n', '1 minute', 'm');"
		  : $k == 1 ? "SELECT dlock_renew('m$n', '1 minute', 'm');"
		  : $k == 2 ? "SELECT dlock_release('m$n', 'm');"
		  : $k == 3 ? "SELECT dlock_try(repeat('x', 201 + $i % 500), '1 minute', 'm');"
		  : $k == 4 ? "SELECT dlock_acquire('busy', '1 minute', '0', 'm');"
		  : $k == 5 ? "SELECT dlock_fence('busy', $i);"
		  : $k == 6 ? "SELECT dlock_try(NULL, '-1 s', 'm');"
		  : $k == 7 ? "SELECT count(*) FROM dlock_locks;"
		  : $k == 8 ? "SET dlock.durable = " . (($i / 10) % 2 ? 'on' : 'off') . ";"
		  :           "SELECT dlock_release('busy', 'm', -1);";
	}
	my $measure = q{SELECT 'MEM ' || (SELECT sum(used_bytes) FROM pg_backend_memory_contexts) || ' '
		|| substring(pg_read_file('/proc/' || pg_backend_pid() || '/status') from 'RssAnon:\s+(\d+) kB');};
	my $script = "SELECT dlock_try('busy', '1 hour', 'holder');\n"
	  . join("\n", @stmts[ 0 .. 4999 ]) . "\n$measure\n"
	  . join("\n", @stmts) . "\n$measure\n";
	my ($out, $err3);
	my $t = time;
	$node->psql('postgres', $script, stdout => \$out, stderr => \$err3, on_error_stop => 0,
		extra_params => [ '-q' ]);
	my $secs = time - $t;
	my @m = ($out =~ /^MEM (\d+) (\d+)$/mg);
	is(scalar(@m), 4, 'memory measured before and after');
	my ($used0, $rss0, $used1, $rss1) = @m;
	diag(sprintf("100,000 statements in %.1f s: memory contexts %d -> %d bytes used (%+d), RssAnon %d -> %d kB (%+d)",
			$secs, $used0 // 0, $used1 // 0, ($used1 // 0) - ($used0 // 0), $rss0 // 0, $rss1 // 0, ($rss1 // 0) - ($rss0 // 0)));
	cmp_ok(($used1 // 1e12) - ($used0 // 0), '<', 65536, 'memory contexts grew less than 64 kB over 100,000 statements');
	cmp_ok(($rss1 // 1e12) - ($rss0 // 0), '<', 1024, 'anonymous RSS grew less than 1 MB over 100,000 statements');
	$node->safe_psql('postgres', q{SELECT dlock_release('busy', 'holder'); SELECT count(dlock_release(name, 'm')) FROM dlock_locks WHERE name LIKE 'm%'});
}

# Savepoint rollbacks in a transaction that made many dlock calls must not
# cost in proportion to those calls each time (a PL/pgSQL loop with an
# exception block per iteration is the common case).
{
	value_as('postgres', 'app1', q{SET dlock.durable = off; SELECT dlock_try('sp', '1 hour', 'h')});
	my $t = time;
	my $res = value_as('postgres', 'app1', q{
		SET dlock.durable = off;
		BEGIN;
		SELECT count(dlock_renew('sp', '1 hour', 'h')) FROM generate_series(1, 20000);
		DO $$
		DECLARE t timestamptz := clock_timestamp();
		BEGIN
			FOR i IN 1 .. 200 LOOP
				BEGIN
					PERFORM 1 / 0;
				EXCEPTION WHEN division_by_zero THEN NULL;
				END;
			END LOOP;
			PERFORM set_config('my.rollback_secs', extract(epoch FROM clock_timestamp() - t)::text, false);
		END $$;
		SELECT current_setting('my.rollback_secs');
		COMMIT;});
	my ($renewals, $secs) = split /\n/, $res;
	diag(sprintf("20,000 renewals then 200 savepoint rollbacks in one transaction: rollbacks %.2f s, all %.1f s",
			$secs // -1, time - $t));
	cmp_ok($secs // 1e9, '<', 1, '200 savepoint rollbacks after 20,000 dlock calls take less than 1 s');
	value_as('postgres', 'app1', q{SELECT dlock_release('sp', 'h')});
}

ok(no_crash(), 'no backend crashed (server log)')
  or diag(slurp_file($node->logfile));
$node->stop;
done_testing();
