# The wall clock is not the lease clock: a step of it never ends a lease
# early, neither while the server runs nor across a restart, a crash or a
# promotion.
#
# The servers run under libfaketime (Debian package faketime), with a clock
# file that the test rewrites to step their wall clock (FAKETIME_NO_CACHE:
# every call reads it).  CLOCK_MONOTONIC is left alone
# (FAKETIME_DONT_FAKE_MONOTONIC), as a real step of the wall clock leaves it
# alone.  libfaketime only changes what the server's processes see: the test
# itself measures with the real monotonic clock.
#
#  a. Running server, wall clock stepped forward 1 hour, then back: a lease
#     of 10 s is still held after each step, and ends 10 s after its grant.
#  b. Clean restart with the clock 1 hour ahead: the lease comes back, same
#     owner and token, and runs its full ttl (the renewal's, for a renewed
#     one) from the rebuild; a lease that had ended before the shutdown
#     stays ended; the rebuild logs the shutdown checkpoint as the moment it
#     judged the rows by.
#  c. The same across a crash (kill -9 of a backend), with the clock stepped
#     1 more hour forward just before: rows are judged by the last
#     checkpoint before the crash, not by the one recovery writes.
#  d. Promotion of a standby whose clock is 1 hour ahead of the primary's:
#     the leases come back for their full ttl; a lease that had ended
#     before the primary's last commit stays ended.
#  e. A re-created extension (a rebuild in a running server) judges rows by
#     the clock of this server: an expired row is not revived, and a live
#     one keeps the time it has left.
#  f. A first rebuild after a restart that fails (cancelled while it waits
#     for a lock on the table) is redone as a first rebuild.
#  g. A restored lease's row still has the old server's expiry; a sweep
#     writes the expiry shared memory holds into it, so a second restart,
#     with the clock ahead of the row's old expiry, restores the lease again.
#  h. Without libfaketime and with the worker on: the worker's sweeper does
#     that by itself after a rebuild.
# libfaketime and PostgreSQL (15 to 18) do not fully agree: code that runs in a
# signal handler while the process waits can see the real clock, and so can
# processes the postmaster starts from its signal handlers (background
# workers, and after a crash the startup process).  So PostgreSQL's own
# timeouts (statement_timeout) are not used here, and dlock.worker is off;
# every check runs in client backends, which see the faked clock.
# With the worker off, rows of ended leases also stay for the rebuilds to
# judge; waiters time their holders' expiry themselves.
use strict;
use warnings;

use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# writing to a session whose backend was killed must not end the test
$SIG{PIPE} = 'IGNORE';

my ($libfaketime) =
  grep { -e $_ } (glob('/usr/lib/*/faketime/libfaketime.so.1'),
	'/usr/local/lib/faketime/libfaketime.so.1');
plan skip_all => 'libfaketime is not installed (Debian package faketime; tools/setup.sh installs it)'
  unless defined $libfaketime;

my $tmp = $PostgreSQL::Test::Utils::tmp_check;
my $ttl = 10;    # seconds: long enough to outlive a restart on a slow machine

sub mono { return clock_gettime(CLOCK_MONOTONIC); }

# Sets a node's wall clock to the real time plus $offset seconds.
sub set_clock
{
	my ($node, $offset) = @_;
	my $file = "$tmp/clock-" . $node->name;
	open(my $fh, '>', "$file.new") or die "could not write $file.new: $!";
	print $fh sprintf("%+d\n", $offset);
	close($fh);
	rename("$file.new", $file) or die "could not rename $file.new: $!";
	return;
}

# How far the node's wall clock is ahead of the real one, in seconds.
sub clock_offset
{
	my ($node) = @_;
	my $server = $node->safe_psql('postgres', 'SELECT extract(epoch FROM clock_timestamp())');
	return $server - Time::HiRes::time();
}

sub start_faked
{
	my ($node) = @_;
	local $ENV{LD_PRELOAD} = $libfaketime;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = "$tmp/clock-" . $node->name;
	local $ENV{FAKETIME_NO_CACHE} = 1;
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
	$node->start;
	return;
}

sub step
{
	my ($node, $offset) = @_;
	set_clock($node, $offset);
	my $seen = clock_offset($node);
	ok(abs($seen - $offset) < 5, $node->name . ": the server's wall clock is now ${offset} s off")
	  or diag("it is $seen s off");
	return;
}

# Takes a lease; returns its token and the real monotonic time before the
# call (the lease ends no earlier than that plus its ttl).
sub take
{
	my ($node, $name, $owner, $secs) = @_;
	my $before = mono();
	my $token = $node->safe_psql('postgres', "SELECT dlock_try('$name', '$secs s', '$owner')");
	ok($token =~ /^\d+$/, "$owner takes $name for $secs s") or diag("got '$token'");
	return ($token, $before);
}

# name:owner:token:seconds left, of the node's leases ("" when none).
sub leases
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT string_agg(name || ':' || owner || ':' || token || ':'
			|| round(extract(epoch FROM expires_at - clock_timestamp())), ' ' ORDER BY name)
		  FROM dlock_locks});
}

# Checks that $name is held until $from + $secs (real monotonic time) and
# no longer than a little after: another owner's acquire is granted then.
sub ends_on_time
{
	my ($node, $name, $from, $secs, $what) = @_;
	is($node->safe_psql('postgres', "SELECT dlock_try('$name', '1 s', 'other') IS NULL"),
		't', "$what: $name is still held");
	my $got = $node->safe_psql('postgres',
		"SELECT dlock_acquire('$name', '1 s', '60 s', 'other') IS NOT NULL");
	my $ended = mono() - $from;
	is($got, 't', "$what: another owner gets $name once it ends");
	cmp_ok($ended, '>=', $secs, "$what: $name was held for its $secs s");
	cmp_ok($ended, '<', $secs + 3, "$what: $name ended on time (after ${\ sprintf('%.2f', $ended)} s)");
	$node->safe_psql('postgres', "SELECT dlock_release('$name', 'other')");
	return;
}

# A query: whether the row of $name's lease says what shared memory does.
sub row_agrees
{
	my ($name) = @_;
	return "SELECT abs(extract(epoch FROM r.expires_at - l.expires_at)) < 1"
	  . " FROM dlock_leases r JOIN dlock_locks l USING (name, token) WHERE name = '$name'";
}

# The moment the first rebuild since $offset in the log judged rows by,
# compared with $expected (a timestamptz expression) by the server.
sub rebuild_reference_is
{
	my ($node, $offset, $count, $expected, $what) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my ($n, $since) = $log =~
	  /dlock restored (\d+) leases? of \S+, (?:each )?for its full ttl\n.*DETAIL:  Rows that expired before (.+?), when/;
	is($n, $count, "$what: the rebuild logs $count leases restored");
	if (!defined $since)
	{
		fail("$what: the rebuild logs the moment it judged rows by");
		return;
	}
	is($node->safe_psql('postgres', "SELECT timestamptz '$since' = ($expected)"),
		't', "$what: rows were judged by $expected")
	  or diag("logged: $since");
	return;
}

my $node = PostgreSQL::Test::Cluster->new('clock');
$node->init;
# every grant flushed: c checks that a lease taken just before a crash comes
# back (038_crash_grace covers what an unflushed one does)
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.worker = off
dlock.flush_grants = on
restart_after_crash = on
});
set_clock($node, 0);
start_faked($node);
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
cmp_ok(abs(clock_offset($node)), '<', 5, 'the server runs under libfaketime, on time for now');

###
### a. the wall clock steps while the server runs
###
my ($tok, $from) = take($node, 'run-fwd', 'A', $ttl);
step($node, 3600);
is($node->safe_psql('postgres',
		"SELECT expires_at BETWEEN clock_timestamp() AND clock_timestamp() + interval '$ttl s' FROM dlock_locks WHERE name = 'run-fwd'"),
	't', 'a: dlock_locks shows the expiry in the stepped clock');
ends_on_time($node, 'run-fwd', $from, $ttl, 'a, 1 hour forward');

($tok, $from) = take($node, 'run-back', 'A', $ttl);
step($node, 0);
ends_on_time($node, 'run-back', $from, $ttl, 'a, 1 hour back');

###
### b. a clean restart, with the clock 1 hour ahead
###
# checkpoint times are whole seconds: 'gone' ends more than 1 s before
take($node, 'gone', 'A', 1);
usleep(2_100_000);
my ($held) = take($node, 'held', 'A', $ttl);
my ($renewed) = take($node, 'renewed', 'B', $ttl);
isnt($node->safe_psql('postgres', "SELECT dlock_renew('renewed', '20 s', 'B')"), '', 'B renews its lease for 20 s');
$node->stop('fast');
set_clock($node, 3600);
my $offset = -s $node->logfile;
start_faked($node);
cmp_ok(abs(clock_offset($node) - 3600), '<', 5, 'b: the server restarted 1 hour ahead');

$from = mono();
my $after = leases($node);
like($after, qr/(^| )held:A:$held:(9|10)( |$)/,
	"b: the lease comes back, same owner and token, for its full $ttl s from the rebuild")
  or diag("leases: $after");
like($after, qr/(^| )renewed:B:$renewed:(19|20)( |$)/, 'b: the renewed lease comes back for the renewal\'s 20 s')
  or diag("leases: $after");
unlike($after, qr/(^| )gone:/, 'b: the lease that had ended before the shutdown stays ended');
# the shutdown checkpoint, written 1 hour behind the clock now
rebuild_reference_is($node, $offset, 2,
	"SELECT checkpoint_time FROM pg_control_checkpoint()"
	  . " WHERE checkpoint_time BETWEEN now() - interval '61 minutes' AND now() - interval '59 minutes'",
	'b');
ends_on_time($node, 'held', $from, $ttl, 'b');
$node->safe_psql('postgres', "SELECT dlock_release('renewed', 'B')");

###
### c. a crash, with the clock stepped 1 more hour forward first
###
take($node, 'gone2', 'A', 1);
usleep(2_100_000);
# the rebuild judges rows by this checkpoint, which 'gone2' did not outlive
$node->safe_psql('postgres', 'CHECKPOINT');
my $checkpoint = $node->safe_psql('postgres', 'SELECT checkpoint_time FROM pg_control_checkpoint()');
($held) = take($node, 'held2', 'A', $ttl);

step($node, 7200);
$offset = -s $node->logfile;
my $victim = $node->background_psql('postgres');
my $pid = $victim->query_safe('SELECT pg_backend_pid()');
kill 'KILL', $pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
eval { $victim->quit; };
ok($node->poll_query_until('postgres', 'SELECT true'), 'c: the server is back after the crash');
cmp_ok(abs(clock_offset($node) - 7200), '<', 5, 'c: its clock is 2 hours ahead');

$from = mono();
$after = leases($node);
like($after, qr/(^| )held2:A:$held:(9|10)( |$)/,
	"c: the lease comes back, same owner and token, for its full $ttl s from the rebuild")
  or diag("leases: $after");
unlike($after, qr/(^| )gone2:/, 'c: the lease that had ended before the last checkpoint stays ended');
# not the end-of-recovery checkpoint, written since in the new clock
rebuild_reference_is($node, $offset, 1, "timestamptz '$checkpoint'", 'c');
ends_on_time($node, 'held2', $from, $ttl, 'c');

###
### d. promotion of a standby whose clock is 1 hour ahead
###
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.worker = off
autovacuum = off
# the restored lease's end is timed by new grants after the promotion: no
# grace holds them (033_failover_grace.pl)
dlock.failover_grace = 0
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
set_clock($standby, 3600);
start_faked($standby);
cmp_ok(abs(clock_offset($standby) - 3600), '<', 5, 'd: the standby\'s clock is 1 hour ahead');

take($primary, 'pgone', 'A', 1);
usleep(1_500_000);
($held) = take($primary, 'pheld', 'A', $ttl);
$primary->wait_for_catchup($standby, 'replay');
my $last_commit = $standby->safe_psql('postgres', 'SELECT pg_last_xact_replay_timestamp()');
$primary->stop('immediate');
$offset = -s $standby->logfile;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'd: the standby is promoted');
$from = mono();
$after = leases($standby);
like($after, qr/(^| )pheld:A:$held:(9|10)( |$)/,
	"d: the lease comes back, same owner and token, for its full $ttl s from the rebuild")
  or diag("leases: $after");
unlike($after, qr/(^| )pgone:/, 'd: the lease that had ended before the primary\'s last commit stays ended');
rebuild_reference_is($standby, $offset, 1, "timestamptz '$last_commit'", 'd');
ends_on_time($standby, 'pheld', $from, $ttl, 'd');
$standby->stop;

###
### e. a re-created extension: rows are judged by the clock of this server
###
$node->safe_psql('postgres', q{
DROP EXTENSION dlock;
CREATE EXTENSION dlock;
INSERT INTO dlock_leases VALUES
	('expired', 'A', (SELECT oid FROM pg_roles WHERE rolname = current_user), 1,
	 now() - interval '1 minute', clock_timestamp() - interval '1 second', interval '1 hour', 1, 'exclusive', NULL),
	('live', 'A', (SELECT oid FROM pg_roles WHERE rolname = current_user), 2,
	 now(), clock_timestamp() + interval '30 seconds', interval '1 hour', 1, 'exclusive', NULL);
});
$after = leases($node);
like($after, qr/^live:A:\d+:(29|30)$/,
	'e: the live row keeps its 30 s left, not its ttl, and the expired row is not revived')
  or diag("leases: $after");

###
### f. a first rebuild that fails is redone as a first rebuild
###
$node->stop('fast');
start_faked($node);
# a row that expired after the shutdown checkpoint, but before now
sleep 2;
$node->safe_psql('postgres', q{
DELETE FROM dlock_leases;
INSERT INTO dlock_leases VALUES
	('late', 'A', (SELECT oid FROM pg_roles WHERE rolname = current_user), 3,
	 now() - interval '1 minute', clock_timestamp() - interval '1 second', interval '1 hour', 1, 'exclusive', NULL);
});
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE dlock_leases IN ACCESS EXCLUSIVE MODE');
my $caller = $node->background_psql('postgres', on_error_stop => 0);
$caller->query_until(qr/sent/, "\\echo sent\nSELECT dlock_try('f', '1 s', 'A');\n");
ok( $node->poll_query_until('postgres',
		q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
		  WHERE query LIKE 'SELECT dlock_try(''f''%' AND wait_event_type = 'Lock'}),
	'f: the first rebuild waits for the table, and is cancelled');
$caller->query('SELECT 1');
like($caller->{stderr}, qr/canceling statement due to user request/, 'f: the call that made it fails');
$caller->quit;
$locker->query_safe('COMMIT');
$locker->quit;
$after = leases($node);
like($after, qr/^late:A:3:(3599|3600)$/,
	'f: done again, it still judges rows by the shutdown checkpoint and gives the lease its full ttl')
  or diag("leases: $after");
$node->safe_psql('postgres', "SELECT dlock_release('late', 'A')");

###
### g. a second restart soon after the first
###
($held) = take($node, 'twice', 'A', 20);
$node->stop('fast');
set_clock($node, 10800);
start_faked($node);
$after = leases($node);
like($after, qr/^twice:A:$held:(19|20)$/, 'g: after a restart 1 more hour ahead, the lease is back for 20 s')
  or diag("leases: $after");
is($node->safe_psql('postgres', row_agrees('twice')), 'f', "g: its row still has the old server's expiry");
$node->safe_psql('postgres', 'SELECT dlock_sweep()');
is($node->safe_psql('postgres', row_agrees('twice')), 't', 'g: a sweep writes the expiry shared memory holds into the row');
# its shutdown checkpoint is in the new clock, past the row's old expiry
$node->stop('fast');
start_faked($node);
$after = leases($node);
like($after, qr/^twice:A:$held:(19|20)$/, 'g: after a second restart, the lease is back again for 20 s')
  or diag("leases: $after");

###
### h. the worker sends the sweep itself (no libfaketime here: see above)
###
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
# rows written at the grant (dlock.defer_rows off): h is about rows
$plain->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\ndlock.defer_rows = off\n");
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION dlock');
($held) = take($plain, 'moved', 'A', 60);
# the rebuild then runs the lease longer than its row says
sleep 2;
$plain->restart;
like(leases($plain), qr/^moved:A:$held:(59|60)$/, 'h: after a restart, the lease is back for 60 s');
ok($plain->poll_query_until('postgres', row_agrees('moved')),
	"h: the worker's sweeper writes the expiry shared memory holds into the row");
$plain->stop;

$node->stop;
done_testing();
