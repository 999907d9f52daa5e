# The background worker, dlock_sweep() and pg_cron: leases end on time with
# the worker on or off, rows of ended leases disappear in every database
# without any client call, the worker comes back after being terminated and
# follows reloaded settings, lock-delay holds a name after expiry only, and
# a pg_cron job can do the sweeping when the worker is off.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('worker');
$node->init;
my $sock = $node->host;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock, pg_cron'
cron.database_name = 'postgres'
cron.host = '$sock'
# every grant writes its row: the worker's sweeps of them are tested here
dlock.defer_rows = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub set_conf
{
	my ($setting, $value) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET $setting = '$value'");
	$node->reload;
	# the worker reloads asynchronously; give it a moment
	sleep 0.3;
}

# Delay, in ms, from a lease's expiry to its waiter's grant, over n leases
# whose holder never releases.  The waiter is this session itself.
sub expiry_delays
{
	my ($prefix, $n) = @_;
	return $node->safe_psql('postgres', qq{
		CREATE TEMP TABLE delays (ms float8);
		DO \$\$
		DECLARE e timestamptz;
		BEGIN
			FOR i IN 1 .. $n LOOP
				PERFORM dlock_try('$prefix' || i, '100 ms', 'dead');
				SELECT expires_at INTO e FROM dlock_locks WHERE name = '$prefix' || i;
				IF dlock_acquire('$prefix' || i, '1 s', '5 s', 'next') IS NULL THEN
					RAISE EXCEPTION 'waiter not granted';
				END IF;
				INSERT INTO delays VALUES (extract(epoch FROM clock_timestamp() - e) * 1000);
				PERFORM dlock_release('$prefix' || i, 'next');
			END LOOP;
		END \$\$;
		SELECT round(min(ms)::numeric, 2), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
			   round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(max(ms)::numeric, 2)
		FROM delays;});
}

# --- the worker is running, and grants waiters right at expiry
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dlock worker'"),
	'the dlock worker runs');
my $worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'dlock worker'");

my ($min, $p50, $p99, $max) = split /\|/, expiry_delays('on', 50);
diag("expiry to grant, worker on, 50 leases: min $min ms, median $p50 ms, p99 $p99 ms, max $max ms");
cmp_ok($min, '>=', 0, 'worker on: no waiter granted before the expiry');
cmp_ok($max, '<', 500, 'worker on: every waiter granted soon after the expiry');

# --- rows of ended leases disappear without any client call, in every database
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION dlock');
for my $db ('postgres', 'other')
{
	$node->safe_psql($db,
		"SELECT dlock_try('gone-' || g, '1 s', 'o') FROM generate_series(1, 20) g");
	is($node->safe_psql($db, "SELECT count(*) FROM dlock_leases WHERE name LIKE 'gone-%'"),
		'20', "$db: rows written");
}
for my $db ('postgres', 'other')
{
	ok($node->poll_query_until($db,
			"SELECT count(*) = 0 FROM dlock_leases WHERE name LIKE 'gone-%'"),
		"$db: rows of expired leases deleted with no dlock call");
}
# The 40 'gone-' leases have no waiter: only the worker (or a sweep it
# started) ends them.  The 50 above raced their own waiters' timers.
is($node->safe_psql('postgres',
		'SELECT expired_by_worker >= 20 AND expired_by_worker + expired_by_caller + expired_by_sweep >= 90 FROM dlock_stats'),
	't', 'dlock_stats counts the worker\'s expirations');

# --- terminated, the worker is started again
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker_pid)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dlock worker' AND pid <> $worker_pid"),
	'the worker is restarted after pg_terminate_backend');
$node->safe_psql('postgres', "SELECT dlock_try('after-restart', '200 ms', 'o')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM dlock_leases WHERE name = 'after-restart'"),
	'the restarted worker expires leases');

# --- lock-delay, picked up on reload: after expiry the name stays blocked,
# after a release it does not
set_conf('dlock.lock_delay', '700ms');
is($node->safe_psql('postgres', 'SHOW dlock.lock_delay'), '700ms', 'lock_delay reloaded');
is($node->safe_psql('postgres', qq{
	SELECT dlock_try('delayed', '100 ms', 'a') IS NOT NULL;
	SELECT pg_sleep(0.2);
	SELECT dlock_try('delayed', '1 min', 'b') IS NULL AS held_by_delay;
	SELECT dlock_try('delayed', '1 min', 'a') IS NULL AS not_even_to_its_owner;}),
	"t\n\nt\nt", 'lock-delay: an expired name is not granted during the delay, not even to its old owner');
my $waited = $node->safe_psql('postgres', qq{
	SELECT dlock_acquire('delayed', '1 min', '5 s', 'b') IS NOT NULL,
		   (SELECT expires_at FROM dlock_locks WHERE name = 'delayed') IS NOT NULL;});
is($waited, 't|t', 'lock-delay: a waiter gets the name when the delay ends');
my $gap = $node->safe_psql('postgres', qq{
	SELECT dlock_try('delayed2', '100 ms', 'a') IS NOT NULL;
	CREATE TEMP TABLE t AS SELECT clock_timestamp() + interval '100 ms' AS expiry;
	SELECT dlock_acquire('delayed2', '1 min', '5 s', 'b') IS NOT NULL;
	SELECT extract(epoch FROM clock_timestamp() - expiry) * 1000 FROM t;});
my ($gap_ms) = (split /\n/, $gap)[-1];
cmp_ok($gap_ms, '>=', 650, "lock-delay: waiter granted only after expiry + delay ($gap_ms ms)");
# a queued request (dlock_enqueue, no backend) follows the same rule
my ($exp3) = (split /\n/, $node->safe_psql('postgres', qq{
	SELECT dlock_try('delayed3', '100 ms', 'a') IS NOT NULL;
	SELECT dlock_enqueue('delayed3', '1 min', 'q') IS NULL;
	SELECT expires_at FROM dlock_locks WHERE name = 'delayed3';}))[-1];
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM dlock_locks WHERE name = 'delayed3' AND owner = 'q'"),
	'lock-delay: the queued request is granted while its owner is away');
my $qgap_ms = $node->safe_psql('postgres', qq{
	SELECT extract(epoch FROM granted_at - timestamptz '$exp3') * 1000
	FROM dlock_locks WHERE name = 'delayed3'});
cmp_ok($qgap_ms, '>=', 650, "lock-delay: a queued request granted only after expiry + delay ($qgap_ms ms)");
$node->safe_psql('postgres', q{SELECT dlock_release('delayed3', 'q')});
is($node->safe_psql('postgres', qq{
	SELECT dlock_try('released', '1 min', 'a') IS NOT NULL;
	SELECT dlock_release('released', 'a');
	SELECT dlock_try('released', '1 min', 'b') IS NOT NULL;}),
	"t\nt\nt", 'lock-delay: a released name is free at once');
set_conf('dlock.lock_delay', '0');

# --- worker off: waiters still get expired leases by their own timer;
# rows stay until dlock_sweep()
set_conf('dlock.worker', 'off');
($min, $p50, $p99, $max) = split /\|/, expiry_delays('off', 50);
diag("expiry to grant, worker off, 50 leases: min $min ms, median $p50 ms, p99 $p99 ms, max $max ms");
cmp_ok($min, '>=', 0, 'worker off: no waiter granted before the expiry');
cmp_ok($max, '<', 500, 'worker off: every waiter granted soon after the expiry, by its own timer');

$node->safe_psql('postgres',
	"SELECT dlock_try('stale-' || g, '100 ms', 'o') FROM generate_series(1, 10) g");
sleep 1.5;
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_leases WHERE name LIKE 'stale-%'"),
	'10', 'worker off: expired rows stay');
is($node->safe_psql('postgres', 'SELECT dlock_sweep()'), '10',
	'dlock_sweep() reclaims them and says how many');
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_leases WHERE name LIKE 'stale-%'"),
	'0', 'dlock_sweep() deleted the rows');
is($node->safe_psql('postgres', 'SELECT dlock_sweep()'), '0', 'a second sweep finds nothing');

# a disabled worker is not woken by leases: 300 grants, each ending earlier
# than every lease before it, cost its process no wake-ups (its voluntary
# context switches stay flat; it used to be woken by each)
my $wpid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'dlock worker'});
sub switches
{
	open(my $fh, '<', "/proc/$wpid/status") or return -1;
	my ($n) = map { /^voluntary_ctxt_switches:\s+(\d+)/ ? $1 : () } <$fh>;
	close $fh;
	return $n;
}
my $sw_before = switches();
$node->safe_psql('postgres', q{
DO $$
BEGIN
	FOR g IN 1 .. 300 LOOP
		PERFORM dlock_try('earlier-' || g, make_interval(secs => 1000 - g), 'o');
		PERFORM pg_sleep(0.002);	-- one at a time, as the worker would see them
	END LOOP;
END $$});
my $sw_after = switches();
cmp_ok($sw_after - $sw_before, '<', 30,
	"worker off: new earliest expiries do not wake it (" . ($sw_after - $sw_before) . " wake-ups for 300)");
$node->safe_psql('postgres', "SELECT count(dlock_release('earlier-' || g, 'o')) FROM generate_series(1, 300) g");

# --- pg_cron runs the sweep, with the worker off (minute granularity)
$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
$node->safe_psql('postgres',
	"SELECT cron.schedule('dlock-sweep', '* * * * *', 'SELECT dlock_sweep()')");
$node->safe_psql('postgres',
	"SELECT dlock_try('cron-' || g, '100 ms', 'o') FROM generate_series(1, 5) g");
my $timeout_before = $PostgreSQL::Test::Utils::timeout_default;
ok($node->poll_query_until('postgres', qq{
		SELECT count(*) > 0 FROM cron.job_run_details
		WHERE command = 'SELECT dlock_sweep()' AND status = 'succeeded'}),
	'pg_cron ran dlock_sweep()');
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_leases WHERE name LIKE 'cron-%'"),
	'0', 'the scheduled sweep deleted the expired rows');

$node->stop;
done_testing();
