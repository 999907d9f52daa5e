# Durable grants without a WAL flush, and the grace after a crash restart.
#
# The WAL writer is stopped (SIGSTOP) so that commits which skip the flush
# stay in the WAL buffers; pg_current_wal_flush_lsn shows they are not on
# disk before the crash.  The crash is a kill -9 of that WAL writer: with
# restart_after_crash = off the postmaster stops every process and exits
# (a server crash; the test starts it again), with it on, the postmaster
# reinitialises shared memory (as after any backend crash).
#
#  1. Server crash.  Leases with dlock.flush_grants = on and with a ttl
#     above dlock.failover_grace (flushed), then leases of 12 s (not
#     flushed: beyond the flushed LSN); pg_dlock.grace records 12 s before
#     the crash.  After the restart: none of the unflushed leases is back,
#     the flushed ones are; the log shows a grace after a crash restart;
#     during it B's try of a lost name and of a fresh one returns NULL, an
#     acquire under lock_timeout fails with 55P03, A renews its restored
#     lease; B's acquire waits and is granted x once the grace ended.
#  2. A fenced write after an unflushed grant flushes it: after a crash
#     both the grant and the write are there.
#  3. A clean restart after unflushed grants: the leases are there, no
#     grace.
#  4. dlock.flush_grants = on: grants are flushed, survive a crash, and
#     the crash begins no grace.
#  4b. A lease granted to a queued request (no row, never flushed) is lost
#     in a crash: the crash grace covers it, even with flush_grants = on.
#  5. A backend crash (the postmaster reinitialises shared memory): the
#     unflushed lease is lost and a grace begins.
#  6. Rows of ended leases left to sweep: a grant of another name deletes
#     none of them and skips the flush; one of their name deletes them and
#     is flushed.
use strict;
use warnings;

use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('crash_grace');
$node->init;
# wal_level minimal: no standby, so a ttl above dlock.failover_grace is
# granted (and flushed)
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.failover_grace = '20s'
# grants write their rows without waiting for the flush (deferred rows:
# 054_deferred_rows)
dlock.defer_rows = off
wal_level = minimal
max_wal_senders = 0
autovacuum = off
restart_after_crash = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock; CREATE TABLE jobs (token bigint)');

sub walwriter
{
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
	die "no walwriter" unless $pid =~ /^\d+$/;
	return $pid;
}

sub lsn { return $node->safe_psql('postgres', "SELECT $_[0]()") }

# whether pg_current_wal_flush_lsn is at most $lsn
sub flushed_at_most
{
	my ($lsn) = @_;
	return $node->safe_psql('postgres', "SELECT pg_current_wal_flush_lsn() <= '$lsn'");
}

# Crashes the server by a kill -9 of the (stopped) WAL writer.  With
# restart_after_crash off the postmaster exits, and is started again.
sub crash
{
	my ($ww, $reinit) = @_;
	my $pm = $node->{_pid};
	my $offset = -s $node->logfile;
	kill 'KILL', $ww;
	if ($reinit)
	{
		$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
		$node->poll_query_until('postgres', 'SELECT true') or die "not back";
		return;
	}
	for (my $i = 0; $i < 600 && kill(0, $pm); $i++) { usleep(100_000) }
	die "postmaster still runs" if kill(0, $pm);
	$node->_update_pid(-1);
	$node->start;
}

sub leases
{
	return $node->safe_psql('postgres',
		"SELECT string_agg(name || ':' || owner || ':' || token, ' ' ORDER BY name) FROM dlock_locks");
}

###
### 1. a server crash loses the unflushed grants, and a grace covers them
###
my $kept = $node->safe_psql('postgres', "SET dlock.flush_grants = on; SELECT dlock_try('kept', '18 s', 'A')");
my $long = $node->safe_psql('postgres', "SELECT dlock_try('long', '1 min', 'A')");
my $ww = walwriter();
kill 'STOP', $ww;
my $before = lsn('pg_current_wal_insert_lsn');
is(flushed_at_most($before), 't', 'the flushed grants are the last WAL on disk');
my @lost = map { $node->safe_psql('postgres', "SELECT dlock_try('lost$_', '12 s', 'A')") } 1 .. 3;
ok((grep { /^\d+$/ } @lost) == 3, 'A is granted three leases of 12 s');
cmp_ok(lsn('pg_current_wal_insert_lsn'), 'ne', $before, 'their commits wrote WAL');
is(flushed_at_most($before), 't', 'none of their commits is flushed');
like(slurp_file($node->data_dir . '/pg_dlock.grace'), qr/^\d+ \d+ \d+ 12000000 /,
	'pg_dlock.grace records 12 s, the longest unflushed ttl, before the commits');
crash($ww, 0);

is(leases(), "kept:A:$kept long:A:$long",
	'after the crash: the flushed leases are back, none of the unflushed ones');
ok($node->log_contains(qr/LOG:  dlock grants no new lease until .*, the end of its grace after a crash restart/),
	'the log shows a grace after a crash restart');
my $end = $node->safe_psql('postgres', 'SELECT dlock_grace()');
is($node->safe_psql('postgres',
		"SELECT dlock_grace() > clock_timestamp() AND dlock_grace() <= clock_timestamp() + interval '12 s'"),
	't', "dlock_grace() shows its end ($end), within 12 s");
is($node->safe_psql('postgres', "SELECT dlock_try('lost1', '12 s', 'B')"),
	'', 'in the grace: B does not get lost1, which A may still think it holds');
is($node->safe_psql('postgres', "SELECT dlock_try('fresh', '12 s', 'B')"),
	'', 'in the grace: a try of a name nobody held returns NULL too');
my ($ret, $out, $err) = $node->psql('postgres', q{
\set VERBOSITY verbose
SET lock_timeout = '200ms';
SELECT dlock_acquire('lost2', '12 s', NULL, 'B')});
ok($ret != 0 && $err =~ /55P03/ && $err =~ /canceling statement due to lock timeout/,
	'in the grace: lock_timeout ends an acquire with 55P03') or diag($err);
like($err, qr/DETAIL:  dlock grants no new lease until .*, the end of its grace after a crash restart\./,
	'its detail names the crash grace');
isnt($node->safe_psql('postgres', "SELECT dlock_renew('kept', '18 s', 'A')"),
	'', 'in the grace: A renews its restored lease');
my ($token, $after_end) = split /\|/, $node->safe_psql('postgres',
	"SELECT dlock_acquire('lost1', '12 s', '1 minute', 'B'), clock_timestamp() >= timestamptz '$end'");
cmp_ok($token, '>', $lost[0], 'after the grace: B is granted lost1, with a token above A\'s');
is($after_end, 't', 'B\'s acquire returned only once the grace had ended');
ok($node->log_contains(qr/LOG:  dlock grace after a crash restart ended/), 'the log shows its end');

###
### 2. a fenced write flushes the grant it used
###
$ww = walwriter();
kill 'STOP', $ww;
$before = lsn('pg_current_wal_insert_lsn');
my $fenced = $node->safe_psql('postgres', "SELECT dlock_try('fenced', '12 s', 'A')");
is(flushed_at_most($before), 't', 'the grant is not flushed');
$node->safe_psql('postgres',
	"BEGIN; SELECT count(*) FROM dlock_fence('fenced', $fenced); INSERT INTO jobs VALUES ($fenced); COMMIT");
is(flushed_at_most($before), 'f', 'the fenced write\'s commit flushed the WAL, the grant with it');
crash($ww, 0);
is($node->safe_psql('postgres',
		"SELECT (SELECT token FROM dlock_locks WHERE name = 'fenced'), (SELECT token FROM jobs)"),
	"$fenced|$fenced", 'after the crash: the grant and its fenced write are both there');

###
### 3. a clean restart begins no grace
###
# wait out the grace this crash began (it covered 'fenced')
$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;
my $clean = $node->safe_psql('postgres', "SELECT dlock_try('clean', '12 s', 'A')");
my $offset = -s $node->logfile;
$node->restart;
is($node->safe_psql('postgres', 'SELECT dlock_grace()'), '', 'after a clean restart: no grace');
is($node->safe_psql('postgres', "SELECT token FROM dlock_locks WHERE name = 'clean'"),
	$clean, 'the unflushed lease was flushed by the shutdown: it is back');
like($node->safe_psql('postgres', "SELECT dlock_try('after-clean', '12 s', 'B')"),
	qr/^\d+$/, 'a fresh name is granted at once');
ok(!$node->log_contains(qr/grace after a crash restart/, $offset), 'the log shows no grace');

###
### 4. dlock.flush_grants = on: grants survive a crash, which begins no grace
###
$node->append_conf('postgresql.conf', 'dlock.flush_grants = on');
$node->restart;    # clean: the longest unflushed ttl is back to 0
$ww = walwriter();
kill 'STOP', $ww;
my $flushed = $node->safe_psql('postgres', "SELECT dlock_try('flushed', '12 s', 'A')");
is(flushed_at_most(lsn('pg_current_wal_insert_lsn')), 't', 'flush_grants: the grant\'s commit is flushed');
$offset = -s $node->logfile;
crash($ww, 0);
is($node->safe_psql('postgres', "SELECT token FROM dlock_locks WHERE name = 'flushed'"),
	$flushed, 'flush_grants: the lease survives the crash');
is($node->safe_psql('postgres', 'SELECT dlock_grace()'), '', 'flush_grants: no grace after the crash');
like($node->safe_psql('postgres', "SELECT dlock_try('after-flushed', '12 s', 'B')"),
	qr/^\d+$/, 'flush_grants: a fresh name is granted at once');

###
### 4b. a lease granted to a queued request writes no row: the crash grace
###     covers it, even with dlock.flush_grants = on
###
my $qheld = $node->safe_psql('postgres', "SELECT dlock_try('qheld', '12 s', 'A')");
is($node->safe_psql('postgres', "SELECT dlock_enqueue('qheld', '8 s', 'Q')"), '', 'Q queues a request on qheld');
is($node->safe_psql('postgres', "SELECT dlock_release('qheld', 'A')"), 't', 'A releases qheld: granted to Q, away');
# the release's commit does not wait for its flush, and Q's grant writes no
# WAL: a write of the caller's flushes it, so the crash cannot bring A's
# lease back (which would hold qheld past the grace)
$node->safe_psql('postgres', 'INSERT INTO jobs VALUES (0)');
my $qtoken = $node->safe_psql('postgres', "SELECT token FROM dlock_locks WHERE name = 'qheld' AND owner = 'Q'");
cmp_ok($qtoken, '>', $qheld, 'Q holds qheld with a new token');
crash(walwriter(), 0);
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_locks WHERE name = 'qheld' AND owner = 'Q'"),
	'0', 'after the crash: Q\'s lease is gone (it had no row)');
is($node->safe_psql('postgres',
		"SELECT dlock_grace() > clock_timestamp() AND dlock_grace() <= clock_timestamp() + interval '8 s'"),
	't', 'a grace as long as its ttl began');
is($node->safe_psql('postgres', "SELECT dlock_try('qheld', '12 s', 'C')"),
	'', 'in the grace: C does not get qheld, which Q may think it holds');
$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;
cmp_ok($node->safe_psql('postgres', "SELECT dlock_try('qheld', '12 s', 'C')"), '>', $qtoken,
	'after the grace: C is granted qheld, with a token above Q\'s');
$node->safe_psql('postgres', "SELECT dlock_release('qheld', 'C')");

###
### 5. a backend crash: the postmaster reinitialises shared memory
###
$node->append_conf('postgresql.conf', "dlock.flush_grants = off\nrestart_after_crash = on");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('dlock.flush_grants') = 'off'") or die;
$ww = walwriter();
kill 'STOP', $ww;
$before = lsn('pg_current_wal_insert_lsn');
my $reinit = $node->safe_psql('postgres', "SELECT dlock_try('reinit', '12 s', 'A')");
is(flushed_at_most($before), 't', 'the grant is not flushed');
$offset = -s $node->logfile;
crash($ww, 1);
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_locks WHERE name = 'reinit'"),
	'0', 'after the reinitialisation: the unflushed lease is lost');
ok($node->log_contains(qr/dlock grants no new lease until .*, the end of its grace after a crash restart/, $offset),
	'the log shows a grace after the crash');
is($node->safe_psql('postgres', "SELECT dlock_try('reinit', '12 s', 'B')"),
	'', 'in the grace: B does not get the lost name');

###
### 6. rows of ended leases left to sweep: a grant of another name deletes
###    none and skips the flush; a grant of their name deletes them, flushed
###
$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;
$node->append_conf('postgresql.conf', 'dlock.worker = off');
$node->restart;
$node->safe_psql('postgres', "SELECT dlock_try('ended', '1 s', 'A')");
my $ends = $node->safe_psql('postgres', "SELECT expires_at FROM dlock_locks WHERE name = 'ended'");
# (the rebuild restores a row that expired less than a second before the
# server was last known to run: wait longer)
$node->poll_query_until('postgres', "SELECT clock_timestamp() > timestamptz '$ends' + interval '2 s'")
  or die;
# clean: the rebuild finds its row ended, left for a sweep (no worker)
$node->restart;
$node->safe_psql('postgres', "SELECT dlock_try('warm', '12 s', 'B')");
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_leases WHERE name = 'ended'"),
	'1', 'the ended lease\'s row is left to sweep');
$ww = walwriter();
kill 'STOP', $ww;
$before = lsn('pg_current_wal_insert_lsn');
like($node->safe_psql('postgres', "SELECT dlock_try('another', '12 s', 'B')"),
	qr/^\d+$/, 'B is granted another name');
is(flushed_at_most($before), 't', '... which deletes no row: its commit is not flushed');
$before = lsn('pg_current_wal_insert_lsn');
like($node->safe_psql('postgres', "SELECT dlock_try('ended', '12 s', 'B')"),
	qr/^\d+$/, 'B is granted the ended lease\'s name');
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_leases WHERE name = 'ended' AND owner = 'A'"),
	'0', '... deleting its row');
is(flushed_at_most($before), 'f', '... and its commit is flushed');
kill 'CONT', $ww;

ok(!$node->log_contains(qr/PANIC|TRAP/), 'no PANIC or assertion failure in the log');
$node->stop;
done_testing();
