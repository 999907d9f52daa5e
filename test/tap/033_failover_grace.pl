# No two holders across a failover with asynchronous replication: the grace
# after a promotion and the ttl bound that makes it cover every lost lease.
#
#  1. A primary streams to an asynchronous standby (dlock.failover_grace =
#     10 s).  A holds leases that reach the standby; the standby is stopped
#     (the stream is cut); A takes x on the primary, which dies.  The
#     standby is started and promoted: x was lost with the WAL it never got.
#     Without the grace B is granted x at once (two holders: issue 28's
#     example).  With it, during the grace: B's try of x and of any other
#     name returns NULL, as does a try of several names; B's acquire with a
#     timeout shorter than the grace returns NULL after its timeout; A's
#     restored leases are renewed, re-acquired, fenced and released as
#     usual; dlock_grace() shows the end, the log its start.
#  2. A clean restart inside the grace resumes it, to the same end.
#  3. B's acquire with a longer timeout waits and is granted x once the grace
#     ended, not before; the log shows the end.  A clean restart and a crash
#     restart after it, on the same timeline, begin no new grace.
#  4. The ttl bound on the new primary (wal_level replica, no synchronous
#     standby): a grant, a renewal or the default ttl above the grace fails
#     with SQLSTATE 22023; with synchronous_standby_names (a synchronous
#     standby connected) a durable one is granted, a memory-only one (on no
#     standby) still not; dlock.failover_grace = 0 lifts the bound.
#  5. dlock.failover_grace = 0 on a standby: promoted, it grants at once.
# With dlock.flush_grants = on: a commit that skips its flush reaches a
# standby only once flushed, and a crash restart would begin a crash grace;
# this test is about the failover grace (038_crash_grace: the crash grace).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $grace_ms = 10_000;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.failover_grace = '${grace_ms}ms'
dlock.flush_grants = on
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION dlock; CREATE TABLE jobs (id int, fence bigint)');

# name:owner:token of the leases of a node
sub leases
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(name || ':' || owner || ':' || token, ' ' ORDER BY name) FROM dlock_locks");
}

# psql's exit code, stderr; with the SQLSTATE in it
sub fails
{
	my ($node, $sql) = @_;
	my ($out, $err);
	my $ret = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$out, stderr => \$err);
	return ($ret, $err);
}

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

###
### 1. the cut, the failover, the grace
###
my $held = $primary->safe_psql('postgres', "SELECT dlock_try('held', '9 s', 'A')");
my $held2 = $primary->safe_psql('postgres', "SELECT dlock_try('held2', '9 s', 'A')");
$primary->wait_for_catchup($standby, 'replay');
$standby->stop;    # the stream is cut
my $lost = $primary->safe_psql('postgres', "SELECT dlock_try('x', '9 s', 'A')");
like($lost, qr/^\d+$/, 'old primary: A holds x, which never reaches the standby');
$primary->stop('immediate');

$standby->start;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'standby promoted');

# the issue's example: on the old code B is granted x here, while A holds it
is($standby->safe_psql('postgres', "SELECT dlock_try('x', '9 s', 'B')"),
	'', 'new primary, in the grace: B does not get x, which A may still hold');
my $end = $standby->safe_psql('postgres', 'SELECT dlock_grace()');
isnt($end, '', "new primary: dlock_grace() shows the grace's end ($end)");
is($standby->safe_psql('postgres',
		"SELECT dlock_grace() > clock_timestamp() AND dlock_grace() <= clock_timestamp() + interval '${grace_ms} ms'"),
	't', 'new primary: the grace ends within dlock.failover_grace from now');
ok($standby->log_contains(qr/LOG:  dlock grants no new lease until .* the end of its grace after the switch to timeline 2/),
	'new primary: the log shows the grace and its end');
is($standby->safe_psql('postgres', "SELECT dlock_try('fresh', '9 s', 'B')"),
	'', 'in the grace: a try of a name nobody held returns NULL too');
is($standby->safe_psql('postgres', "SELECT dlock_try_all(ARRAY['m1', 'm2'], '9 s', 'B')"),
	'', 'in the grace: a try of several names returns NULL');
is($standby->safe_psql('postgres', q{
SET dlock.durable = off;
SELECT dlock_try('mem', '9 s', 'B')}),
	'', 'in the grace: a memory-only try returns NULL');
is($standby->safe_psql('postgres', q{
SELECT dlock_acquire('fresh', '9 s', '1 second', 'B') IS NULL,
	   clock_timestamp() - statement_timestamp() >= interval '1 second'}),
	"t|t", 'in the grace: an acquire with a shorter timeout returns NULL at its timeout');
my ($lt_ret, $lt_out, $lt_err) = $standby->psql('postgres', q{
SET lock_timeout = '200ms';
SELECT dlock_acquire('fresh', '9 s', NULL, 'B')});
ok($lt_ret != 0 && $lt_err =~ /canceling statement due to lock timeout/,
	'in the grace: lock_timeout ends an acquire without a timeout of its own');
like($lt_err, qr/DETAIL:  dlock grants no new lease until .*, the end of its grace after the switch to timeline 2\./,
	'its detail names the grace\'s end and what began it');

# A's replicated leases are served as usual
is(leases($standby), "held:A:$held held2:A:$held2",
	'in the grace: dlock_locks shows the restored leases');
isnt($standby->safe_psql('postgres', "SELECT dlock_renew('held', '9 s', 'A')"),
	'', 'in the grace: A renews a restored lease');
is($standby->safe_psql('postgres', "SELECT dlock_try('held', '9 s', 'A')"),
	$held, 'in the grace: A re-acquires it (extends), same token');
is($standby->safe_psql('postgres',
		"BEGIN; SELECT count(*) FROM dlock_fence('held', $held); INSERT INTO jobs VALUES (1, $held); COMMIT; SELECT count(*) FROM jobs"),
	"1\n1", 'in the grace: A fences with its token');
is($standby->safe_psql('postgres', "SELECT dlock_release('held2', 'A', $held2)"),
	't', 'in the grace: A releases a restored lease');
is($standby->safe_psql('postgres', "SELECT dlock_try('held2', '9 s', 'B')"),
	'', 'in the grace: the released name is not granted to B either');

###
### 2. a restart inside the grace resumes it
###
ok(-f $standby->data_dir . '/pg_dlock.grace', 'the grace is kept in pg_dlock.grace');
$standby->restart;
is($standby->safe_psql('postgres', 'SELECT dlock_grace()'),
	$end, 'after a restart inside the grace: the same end');
is($standby->safe_psql('postgres', "SELECT dlock_try('x', '9 s', 'B')"),
	'', 'after a restart inside the grace: B still does not get x');
ok($standby->log_contains(qr/its grace after the switch to timeline 2 goes on after the restart/),
	'the log says the grace goes on');

###
### 3. the end of the grace
###
my ($token, $after_end) = split /\|/, $standby->safe_psql('postgres',
	"SELECT dlock_acquire('x', '9 s', '1 minute', 'B'), clock_timestamp() >= timestamptz '$end'");
cmp_ok($token, '>', $lost, 'after the grace: B is granted x, with a token above A\'s');
is($token >> 48, 2, 'after the grace: the token is on timeline 2');
is($after_end, 't', 'B\'s acquire returned only once the grace had ended');
is($standby->safe_psql('postgres', 'SELECT dlock_grace()'), '', 'dlock_grace() is NULL again');
ok($standby->wait_for_log(qr/LOG:  dlock grace after the switch to timeline 2 ended: new leases are granted again/),
	'the log shows the end');
like($standby->safe_psql('postgres', "SELECT dlock_try('fresh', '9 s', 'B')"),
	qr/^\d+$/, 'after the grace: a try is granted at once');

$standby->restart;
is($standby->safe_psql('postgres', 'SELECT dlock_grace()'), '',
	'a clean restart after the grace begins no new one');
like($standby->safe_psql('postgres', "SELECT dlock_try('after-restart', '9 s', 'B')"),
	qr/^\d+$/, 'after a clean restart: granted at once');
$standby->stop('immediate');
$standby->start;
is($standby->safe_psql('postgres', 'SELECT dlock_grace()'), '',
	'a crash restart on the same timeline begins no new grace');
like($standby->safe_psql('postgres', "SELECT dlock_try('after-crash', '9 s', 'B')"),
	qr/^\d+$/, 'after a crash restart: granted at once');

###
### 4. the ttl bound
###
my ($ret, $err) = fails($standby, "SELECT dlock_try('long', '1 hour', 'B')");
ok($ret != 0 && $err =~ /22023/ && $err =~ /ttl must be at most dlock.failover_grace \(10000 ms\)/,
	'no synchronous standby: a ttl above the grace fails with 22023') or diag($err);
like($err, qr/DETAIL:  A failover to an asynchronous standby could lose this lease/, 'its detail says why');
like($err, qr/HINT:  Use a shorter ttl and renew/, 'its hint says what to do');
($ret, $err) = fails($standby, "SELECT dlock_renew('fresh', '11 s', 'B')");
ok($ret != 0 && $err =~ /22023/, 'a renewal above the grace fails with 22023') or diag($err);
($ret, $err) = fails($standby, "SET dlock.default_ttl = '1 min'; SELECT dlock_try('long', owner => 'B')");
ok($ret != 0 && $err =~ /22023/, 'a default ttl above the grace fails with 22023') or diag($err);
like($standby->safe_psql('postgres', "SELECT dlock_try('ten', '10 s', 'B')"),
	qr/^\d+$/, 'a ttl equal to the grace is granted');

# a synchronous standby of the new primary
$standby->backup('backup2');
my $standby2 = PostgreSQL::Test::Cluster->new('standby2');
$standby2->init_from_backup($standby, 'backup2', has_streaming => 1);
# promoted in part 5: no grace there
$standby2->append_conf('postgresql.conf', 'dlock.failover_grace = 0');
$standby2->start;
$standby->append_conf('postgresql.conf', "synchronous_standby_names = '*'");
$standby->reload;
ok($standby->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'"),
	'the synchronous standby is connected');
my $long = $standby->safe_psql('postgres', "SELECT dlock_try('long', '1 hour', 'B')");
like($long, qr/^\d+$/, 'synchronous standby: a durable lease of an hour is granted');
isnt($standby->safe_psql('postgres', "SELECT dlock_renew('long', '2 hours', 'B')"),
	'', 'synchronous standby: and renewed for longer');
($ret, $err) = fails($standby, "SET dlock.durable = off; SELECT dlock_try('long-mem', '1 hour', 'B')");
ok($ret != 0 && $err =~ /22023/,
	'synchronous standby: a memory-only lease (on no standby) above the grace still fails')
  or diag($err);

$standby->append_conf('postgresql.conf', "synchronous_standby_names = ''\ndlock.failover_grace = 0");
$standby->reload;
ok($standby->poll_query_until('postgres', "SELECT current_setting('dlock.failover_grace') = '0'"),
	'dlock.failover_grace = 0 reloaded');
like($standby->safe_psql('postgres', "SET dlock.durable = off; SELECT dlock_try('long-mem', '1 hour', 'B')"),
	qr/^\d+$/, 'dlock.failover_grace = 0: no ttl bound');

###
### 5. dlock.failover_grace = 0: no grace after a promotion
###
$standby->wait_for_catchup($standby2, 'replay');
$standby->stop('immediate');
$standby2->promote;
ok($standby2->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'standby2 promoted');
like($standby2->safe_psql('postgres', "SELECT dlock_try('fresh2', '9 s', 'C')"),
	qr/^\d+$/, 'dlock.failover_grace = 0: a grant right after the promotion');
is($standby2->safe_psql('postgres', 'SELECT dlock_grace()'), '', 'dlock_grace() is NULL');
is($standby2->safe_psql('postgres', "SELECT dlock_try('long', '1 hour', 'C')"),
	'', 'the lease of an hour granted under synchronous replication is held (restored)');
ok($standby2->log_contains(qr/dlock grants new leases at once after the switch to timeline 3: dlock.failover_grace is 0/),
	'the log says there is no grace');

ok(!$standby->log_contains(qr/PANIC|TRAP|terminated by signal/), 'no crash in the log');
$standby2->stop;
done_testing();
