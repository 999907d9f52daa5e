# Loading dlock with and without shared_preload_libraries.
#
# Without the preload, CREATE EXTENSION must fail cleanly (SQLSTATE 55000
# with a hint naming shared_preload_libraries), and neither LOAD nor a
# direct call of the C functions may crash the server.  With the preload,
# the extension installs, works, and can be dropped and created again.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# True when the server log has no sign of a backend crash after $offset.
sub no_crash_since
{
	my ($node, $offset) = @_;
	return !$node->log_contains(
		qr/terminated by signal|all server processes terminated|server process .* exited with exit code/,
		$offset);
}

###
### (a) dlock not in shared_preload_libraries
###
my $plain = PostgreSQL::Test::Cluster->new('no_preload');
$plain->init;
$plain->start;
my $log_offset = -s $plain->logfile;
my $started = $plain->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

my ($ret, $out, $err);
$ret = $plain->psql(
	'postgres',
	"\\set VERBOSITY verbose\nCREATE EXTENSION dlock;",
	stdout => \$out,
	stderr => \$err);
isnt($ret, 0, 'CREATE EXTENSION dlock fails without the preload');
like($err, qr/\b55000\b/, 'the error has SQLSTATE 55000 (object_not_in_prerequisite_state)');
like($err, qr/HINT:.*shared_preload_libraries/, 'the hint mentions shared_preload_libraries');
is($plain->safe_psql('postgres', "SELECT count(*) FROM pg_extension WHERE extname = 'dlock'"),
	'0', 'nothing of the extension is left behind');
is($plain->safe_psql('postgres', 'SELECT 1'), '1', 'the server still answers after the failed CREATE EXTENSION');

$ret = $plain->psql('postgres', "LOAD 'dlock'; SELECT 1;", stdout => \$out, stderr => \$err);
is($ret, 0, "LOAD 'dlock' succeeds without the preload") or diag($err);
is($out, '1', "the session that ran LOAD 'dlock' keeps working");

# Call the C functions directly, bypassing the install script's check:
# each must raise the same clean error instead of touching missing memory.
$plain->safe_psql('postgres', q{
CREATE FUNCTION public.raw_try(text, interval, text) RETURNS bigint
	AS 'dlock', 'dlock_try' LANGUAGE C;
CREATE FUNCTION public.raw_acquire(text, interval, interval, text) RETURNS bigint
	AS 'dlock', 'dlock_acquire' LANGUAGE C;
CREATE FUNCTION public.raw_release(text, text, bigint) RETURNS boolean
	AS 'dlock', 'dlock_release' LANGUAGE C;
CREATE FUNCTION public.raw_list_locks() RETURNS SETOF record
	AS 'dlock', 'dlock_list_locks' LANGUAGE C;
CREATE FUNCTION public.raw_try_all(text[], interval, text, text) RETURNS bigint[]
	AS 'dlock', 'dlock_try_all' LANGUAGE C;
CREATE FUNCTION public.raw_release_all(text[], text) RETURNS integer
	AS 'dlock', 'dlock_release_all' LANGUAGE C;
});
for my $call (
	q{SELECT public.raw_try('x', '1 minute', 'me')},
	q{SELECT public.raw_acquire('x', '1 minute', '1 second', 'me')},
	q{SELECT public.raw_release('x', 'me', NULL)},
	q{SELECT public.raw_try_all(ARRAY['x'], '1 minute', 'me', 'shared')},
	q{SELECT public.raw_release_all(ARRAY['x'], 'me')},
	q{SELECT * FROM public.raw_list_locks() AS t(name text, owner text, token bigint, granted_at timestamptz, expires_at timestamptz, role regrole, pid integer, waiters integer)})
{
	$ret = $plain->psql('postgres', "\\set VERBOSITY verbose\n$call;", stderr => \$err);
	ok($ret != 0 && $err =~ /\b55000\b/, "without the preload, $call fails with 55000")
	  or diag("ret=$ret stderr=$err");
}

is($plain->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$started, 'the postmaster is the same one as before');
ok(no_crash_since($plain, $log_offset), 'no backend crashed (server log)')
  or diag(slurp_file($plain->logfile, $log_offset));
$plain->stop;

###
### (b) dlock in shared_preload_libraries
###
my $node = PostgreSQL::Test::Cluster->new('preload');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'");
$node->start;
$log_offset = -s $node->logfile;

$ret = $node->psql('postgres', 'CREATE EXTENSION dlock', stderr => \$err);
is($ret, 0, 'CREATE EXTENSION dlock works with the preload') or diag($err);
is($node->safe_psql('postgres', q{SELECT dlock_try('x') IS NOT NULL}),
	't', 'dlock_try gets a token');
$ret = $node->psql('postgres', 'DROP EXTENSION dlock; CREATE EXTENSION dlock;', stderr => \$err);
is($ret, 0, 'DROP EXTENSION and CREATE EXTENSION again work') or diag($err);
is($node->safe_psql('postgres', q{SELECT dlock_owner() <> ''}),
	't', 'dlock_owner() is not empty');
ok(no_crash_since($node, $log_offset), 'no backend crashed (server log)')
  or diag(slurp_file($node->logfile, $log_offset));
$node->stop;

done_testing();
