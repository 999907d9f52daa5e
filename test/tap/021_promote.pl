# Promotion of a streaming standby: leases survive failover with their
# tokens, and the new primary's tokens exceed every token the old one issued.
#
#  1. Leases taken on the primary reach the standby (asynchronous streaming
#     replication): its dlock_locks shows them, same owners and tokens, and
#     every lease-changing call fails there with SQLSTATE 25006.
#  2. Replay is paused on the standby; more lease changes on the primary are
#     streamed and flushed there but not replayed: dlock_locks on the
#     standby does not show them.
#  3. The stream is cut (the primary's walsender is terminated; a paused
#     standby does not restart its walreceiver), more leases are taken on
#     the primary -- these never reach the standby -- plus tokens from a
#     transaction that never commits and from memory-only mode.  The largest
#     token the old primary ever issued is recorded, and it is stopped.
#  4. The standby is promoted while replay is still paused.  PostgreSQL (15
#     to 18) ends the pause and, before promoting, replays all WAL it has already
#     received (xlogrecovery.c: "After being triggered, we still want to
#     replay all the WAL that was already streamed"): so the changes of step
#     2 are applied, and those of step 3 are not.  On the new primary,
#     dlock_locks is exactly the old primary's lease set as of the cut,
#     same owners and tokens; holders keep using their leases; every new
#     token exceeds the largest the old primary issued -- even tokens it
#     issued after the promotion, still running (split brain) -- and carries
#     the new timeline.
#  5. Failover under load: crashload runs on a second primary streaming to a
#     second standby; the primary is killed mid-run and the standby promoted;
#     "crashload check -f" verifies that every lease on the new primary is
#     one its owner was granted, with that token (asynchronous replication
#     may lose the latest changes), and that new tokens exceed every token
#     any client saw.
#  6. A REPEATABLE READ transaction begun on a standby and still open at the
#     promotion makes the new primary's first dlock call: the leases replayed
#     after its snapshot must be restored all the same.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
max_connections = 20
synchronous_commit = on
# what a promotion restores and how tokens stay above, without the grace
# that holds new grants after it (033_failover_grace.pl) and the ttl bound
# that comes with it; the standby has it from the base backup
dlock.failover_grace = 0
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $ttl = "'10 minutes'";
my $max_issued = 0;    # largest token the old primary handed out

sub note_token
{
	my ($t) = @_;
	$max_issued = $t if defined $t && $t ne '' && $t > $max_issued;
	return $t;
}

# Takes a lease on the primary; returns its token.
sub take
{
	my ($name, $owner) = @_;
	my $t = $primary->safe_psql('postgres',
		"SELECT dlock_try('$name', $ttl, '$owner')");
	ok($t =~ /^\d+$/, "primary: $owner gets $name") or diag("got '$t'");
	return note_token($t);
}

# name|owner|token of the leases of a node, in name order.
sub leases
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT name, owner, token FROM dlock_locks"
		  . " WHERE name !~ '^fresh' ORDER BY name");
}

# Leases that come with the base backup.
take('base:a', 'w1');
take('base:b', 'w2');

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

###
### 1. streamed and replayed
###
my %token;
for my $i (0 .. 19)
{
	$token{"rep:k$i"} = take("rep:k$i", 'w' . ($i % 3));
}
# some released (gone everywhere), some renewed
for my $i (0 .. 4)
{
	is($primary->safe_psql('postgres',
			"SELECT dlock_release('rep:k$i', 'w" . ($i % 3) . "', $token{\"rep:k$i\"})"),
		't', "primary: rep:k$i released");
}
for my $i (10 .. 14)
{
	isnt($primary->safe_psql('postgres',
			"SELECT dlock_renew('rep:k$i', '20 minutes', 'w" . ($i % 3) . "')"),
		'', "primary: rep:k$i renewed");
}
my $on_primary = leases($primary);
is(scalar(split /\n/, $on_primary), 17, 'primary: 17 leases');

$primary->wait_for_catchup($standby, 'replay');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'standby: in recovery');
is(leases($standby), $on_primary,
	'standby: dlock_locks shows the replicated leases, same owners and tokens');
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM dlock_locks WHERE name LIKE 'rep:k1_' AND expires_at > now() + interval '15 minutes'"),
	'5', 'standby: the renewed expiries were replicated');

for my $call (
	"dlock_try('rep:new', $ttl, 'w1')",
	"dlock_try('rep:k5', $ttl, 'w2')",
	"dlock_acquire('rep:new', $ttl, '1 second', 'w1')",
	"dlock_renew('rep:k5', $ttl, 'w2')",
	"dlock_release('rep:k5', 'w2')")
{
	my ($ret, $out, $err);
	$ret = $standby->psql('postgres', "\\set VERBOSITY verbose\nSELECT $call;",
		stdout => \$out, stderr => \$err);
	ok($ret != 0 && $err =~ /\b25006\b/, "standby: $call fails with SQLSTATE 25006")
	  or diag("ret=$ret out=$out err=$err");
}
is(leases($standby), $on_primary, 'standby: the failed calls changed nothing');

# A session that starts on the standby and lives on across the promotion.
my $session = $standby->background_psql('postgres');
is($session->query_safe("SELECT count(*) FROM dlock_locks WHERE name ~ '^rep:'"),
	'15', 'standby session: sees the replicated leases');

###
### 2. streamed, not replayed
###
$standby->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
for my $i (0 .. 4)
{
	take("paused:k$i", 'w' . ($i % 3));
}
is($primary->safe_psql('postgres', "SELECT dlock_release('rep:k5', 'w2', $token{'rep:k5'})"),
	't', 'primary: rep:k5 released after the pause');
my $at_cut = leases($primary);
# (a release's commit does not wait for its WAL: wait for all WAL inserted)
$primary->wait_for_catchup($standby, 'flush', $primary->lsn('insert'));
ok($standby->poll_query_until('postgres',
		"SELECT pg_get_wal_replay_pause_state() = 'paused'"),
	'standby: replay is paused');
is(leases($standby), $on_primary,
	'standby: changes received while paused are not shown (not replayed)');

###
### 3. the stream is cut; changes that never reach the standby
###
$primary->safe_psql('postgres',
	'SELECT pg_terminate_backend(pid) FROM pg_stat_replication');
ok($primary->poll_query_until('postgres',
		'SELECT count(*) = 0 FROM pg_stat_replication'),
	'primary: the walsender is gone');

for my $i (0 .. 4)
{
	take("cut:k$i", 'w' . ($i % 3));
}
is($primary->safe_psql('postgres', "SELECT dlock_release('rep:k6', 'w0', $token{'rep:k6'})"),
	't', 'primary: rep:k6 released after the cut');
# 2000 tokens of a transaction that never commits
note_token($primary->safe_psql('postgres', qq{
BEGIN;
SELECT max(dlock_try('burst:' || i, $ttl, 'w9')) FROM generate_series(1, 2000) i;
ROLLBACK;
}));
# memory-only leases: no row, but a token all the same
note_token($primary->safe_psql('postgres', qq{
SET dlock.durable = off;
SELECT max(dlock_try('mem:' || i, $ttl, 'w9')) FROM generate_series(1, 50) i;
}));
my $last = $primary->safe_psql('postgres', "SELECT dlock_try('last', $ttl, 'w9')");
cmp_ok($last, '>', $max_issued, 'primary: tokens only go up');
note_token($last);
is($primary->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_replication'),
	'0', 'primary: the standby did not reconnect');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_wal_receiver'),
	'0', 'standby: no walreceiver while paused');

###
### 4. promotion while paused
###
is($standby->safe_psql('postgres', 'SELECT pg_get_wal_replay_pause_state()'),
	'paused', 'standby: still paused before the promotion');
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'standby: promoted (the pause ended)');
# (the promotion's checkpoint may still be running: ask the WAL, not pg_control)
my $new_tli = $standby->safe_psql('postgres',
	"SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int");
is($new_tli, 2, "new primary: on timeline 2");

# Split brain: the old primary, still up, goes on handing out tokens after
# the promotion.  Then it dies.
note_token($primary->safe_psql('postgres', qq{
BEGIN;
SELECT max(dlock_try('late:' || i, $ttl, 'w9')) FROM generate_series(1, 1000) i;
COMMIT;
}));
note_token($primary->safe_psql('postgres', "SELECT dlock_try('last2', $ttl, 'w9')"));
note sprintf('largest token the old primary issued: %s (timeline %d, counter %d)',
	$max_issued, $max_issued >> 48, $max_issued & ((1 << 48) - 1));
$primary->stop('immediate');

my $after = leases($standby);
is($after, $at_cut,
	'new primary: exactly the leases the old primary had when the stream was cut, same owners and tokens');
unlike($after, qr/^(cut:|burst:|mem:|last|late:)/m,
	'new primary: no lease granted after the cut');
like($after, qr/^paused:k0\|/m,
	'new primary: leases streamed while replay was paused were applied at the promotion');
like($after, qr/^rep:k6\|w0\|$token{'rep:k6'}$/m,
	'new primary: a release after the cut did not reach it (the lease is still held)');
unlike($after, qr/^rep:k5\|/m, 'new primary: the release streamed while paused was applied');

# new tokens: above everything the old primary issued, on the new timeline
my $first_new;
for my $i (1 .. 20)
{
	my $t = $standby->safe_psql('postgres', "SELECT dlock_try('fresh:k$i', $ttl, 'n1')");
	$first_new //= $t;
	if (!($t =~ /^\d+$/ && $t > $max_issued && ($t >> 48) == $new_tli))
	{
		fail("new primary: token $t of fresh:k$i is above $max_issued, timeline $new_tli");
		last;
	}
}
pass('new primary: 20 new tokens all above the old primary\'s largest')
  if $first_new;
note sprintf('first new token: %s (timeline %d, counter %d)',
	$first_new, $first_new >> 48, $first_new & ((1 << 48) - 1));

my $t = $standby->safe_psql('postgres', "SELECT dlock_try('cut:k0', $ttl, 'n1')");
cmp_ok($t, '>', $max_issued,
	'new primary: a name taken only after the cut is free, with a new token');

# the session opened on the standby before the promotion works on as a primary's
my $st = $session->query_safe("SELECT dlock_try('sess:x', $ttl, 'n2')");
cmp_ok($st, '>', $max_issued,
	'standby session, after the promotion: new token above the old primary\'s largest');
isnt($session->query_safe("SELECT dlock_renew('rep:k11', $ttl, 'w2')"),
	'', 'standby session, after the promotion: a holder renews its lease');
is($session->query_safe("SELECT owner || ' ' || token FROM dlock_locks WHERE name = 'sess:x'"),
	"n2 $st", 'standby session, after the promotion: its new lease is listed');
$session->quit;

# the holders carry on with their leases
isnt($standby->safe_psql('postgres', "SELECT dlock_renew('rep:k7', $ttl, 'w1')"),
	'', 'new primary: a holder renews its lease');
is($standby->safe_psql('postgres', "SELECT dlock_try('rep:k7', $ttl, 'n1')"),
	'', 'new primary: another owner cannot take a held lease');
is($standby->safe_psql('postgres', "SELECT dlock_try('rep:k8', $ttl, 'w2')"),
	$token{'rep:k8'}, 'new primary: the holder re-acquires with its old token');
is($standby->safe_psql('postgres',
		"SELECT dlock_release('rep:k9', 'w0', $token{'rep:k9'})"),
	't', 'new primary: the holder releases with its old token');

ok(!$standby->log_contains(qr/PANIC|TRAP|terminated by signal|ERROR:  (?!cannot change dlock leases during recovery)/),
	'standby: no crash or unexpected error in its log');

# The new primary crashes in turn: its leases (restored ones and its own) and
# its token order survive that too.
my $before_crash = leases($standby);
my $top = $standby->safe_psql('postgres', "SELECT max(token) FROM dlock_locks");
$standby->stop('immediate');
$standby->start;
# rep:k9's release just before the crash was not waited for: if the crash
# lost it, the lease is back, with its owner and token, and nothing else is
my $after_crash = leases($standby);
my $k9 = "rep:k9|w0|$token{'rep:k9'}";
note 'the crash lost the release of rep:k9' if $after_crash =~ s/^\Q$k9\E(?:\n|\z)//m;
is($after_crash, $before_crash, 'new primary, after its own crash: the same leases');
cmp_ok($standby->safe_psql('postgres', "SELECT dlock_try('fresh:after-crash', $ttl, 'n1')"),
	'>', $top, 'new primary, after its own crash: tokens go on upwards');

$standby->stop;

###
### 5. failover under load
###
# crashload's clients work on a fresh primary while it streams to a fresh
# standby; the primary is killed mid-run and the standby promoted.  With
# asynchronous replication the last acknowledged changes may be missing on
# the new primary, but every lease there must be one its owner was granted,
# with that token, and every new token exceeds every token a client saw.
my $tmp = $PostgreSQL::Test::Utils::tmp_check;
my $crashload = "$tmp/crashload";
my ($mout, $merr);
IPC::Run::run([ 'make', '-s', '-C', "$FindBin::RealBin/../load", "O=$tmp", 'crashload' ],
	'>', \$mout, '2>', \$merr)
  or BAIL_OUT("could not build crashload: $mout$merr");

my $primary2 = PostgreSQL::Test::Cluster->new('primary2');
$primary2->init(allows_streaming => 1);
$primary2->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
max_connections = 40
log_statement = none
dlock.failover_grace = 0
});
$primary2->start;
$primary2->safe_psql('postgres', 'CREATE EXTENSION dlock');
$primary2->backup('backup2');
my $standby2 = PostgreSQL::Test::Cluster->new('standby2');
$standby2->init_from_backup($primary2, 'backup2', has_streaming => 1);
$standby2->start;
$primary2->wait_for_catchup($standby2, 'replay');

my $dir = "$tmp/crashload-failover";
my ($lout, $lerr) = ('', '');
my $load = IPC::Run::start(
	[
		$crashload, 'run', '-d', $primary2->connstr('postgres'),
		'-o', $dir, '-c', 8, '-t', 30, '-n', 32, '-p', 'failover:k'
	],
	'>', \$lout, '2>', \$lerr,
	IPC::Run::timeout(90));
my $busy = 0;
for (my $i = 0; $i < 300 && $busy < 8; $i++)
{
	usleep(100_000);
	$busy = grep { -f $_ && (() = slurp_file($_) =~ /\n/g) >= 300 }
	  map { "$dir/client-$_.log" } 1 .. 8;
}
is($busy, 8, 'failover: all 8 clients are busy on the primary');
$primary2->stop('immediate');
eval { $load->finish; };
is($@, '', 'failover: crashload stopped after the primary died') or $load->kill_kill;
note $lout;

$standby2->promote;
ok($standby2->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'failover: standby promoted');
my ($cout, $cerr) = ('', '');
my $ok = IPC::Run::run(
	[ $crashload, 'check', '-f', '-d', $standby2->connstr('postgres'), '-o', $dir ],
	'>', \$cout, '2>', \$cerr);
ok($ok, 'failover: the checker finds no violation') or diag("$cout$cerr");
note $cout;
my ($found, $matched) = $cout =~ /found (\d+), matched (\d+)/;
cmp_ok($found // 0, '>', 0, 'failover: leases replicated before the crash are on the new primary');
like($cout, qr/first new token \d+ \(timeline 2,/, 'failover: new tokens are on timeline 2');
ok(!$standby2->log_contains(qr/PANIC|TRAP|terminated by signal|ERROR:/),
	'failover: no crash or error in the new primary\'s log');
$standby2->stop;

###
### 6. a transaction begun on the standby, still open at the promotion
###
# The new primary rebuilds its leases from the table on first use.  If that
# first use comes from a REPEATABLE READ transaction that began during
# recovery, its snapshot predates leases replayed since: they must still be
# restored (all of the table as of the promotion), or another owner can take
# a name that is held.
my $primary3 = PostgreSQL::Test::Cluster->new('primary3');
$primary3->init(allows_streaming => 1);
$primary3->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dlock'\ndlock.failover_grace = 0");
$primary3->start;
$primary3->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $early = $primary3->safe_psql('postgres', "SELECT dlock_try('early', $ttl, 'w1')");
$primary3->backup('backup3');
my $standby3 = PostgreSQL::Test::Cluster->new('standby3');
$standby3->init_from_backup($primary3, 'backup3', has_streaming => 1);
$standby3->start;
$primary3->wait_for_catchup($standby3, 'replay');

my $rr = $standby3->background_psql('postgres');
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
is($rr->query_safe('SELECT count(*) FROM dlock_locks'), '1',
	'standby transaction: snapshot taken with one lease');
my $late = $primary3->safe_psql('postgres', "SELECT dlock_try('late', $ttl, 'w2')");
$primary3->wait_for_catchup($standby3, 'replay');
is($standby3->safe_psql('postgres', 'SELECT string_agg(name, \',\' ORDER BY name) FROM dlock_locks'),
	'early,late', 'standby: a new session sees both leases');
$primary3->stop('immediate');
$standby3->promote;
ok($standby3->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'standby transaction: standby promoted');
# first use of dlock on the new primary, from the transaction begun in recovery
$rr->query_safe('SELECT count(*) FROM dlock_locks');
$rr->query_safe('COMMIT');
$rr->quit;
is($standby3->safe_psql('postgres',
		"SELECT string_agg(name || ' ' || owner || ' ' || token, ',' ORDER BY name) FROM dlock_locks"),
	"early w1 $early,late w2 $late",
	'new primary: both leases restored, though first used by a transaction begun in recovery');
is($standby3->safe_psql('postgres', "SELECT dlock_try('late', $ttl, 'intruder')"),
	'', 'new primary: another owner cannot take the lease granted after that transaction began');
$standby3->stop;

done_testing();
