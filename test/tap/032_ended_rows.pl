# Rows of ended leases: they never bring a lease back, and they are always
# swept in the end.  With dlock.worker = off, so that nothing but the test
# ends leases or sweeps; the worker is turned on only to see whether it
# sends a sweeper.
#
#  1. A row that breaks the table's rules (a name over 200 bytes, inserted
#     by a superuser) does not crash the sweep: the sweep deletes it, as it
#     deletes every row the rebuild would skip as invalid.
#  2. A lease that ended does not come back after a crash once its name was
#     granted again, however: a memory-only grant deletes the rows of the
#     name's ended leases (durably, in its transaction), also when the
#     name's entry had gone from shared memory (a rolled-back sweep ended
#     the lease).  Its token then fails dlock_fence.
#  3. What says that rows are left to sweep is only cleared by sweeps that
#     committed: a rolled-back sweep, or one that skipped a row someone had
#     locked, leaves it, and the worker then sends a sweeper.  A grant that
#     would have deleted a name's old rows and is rolled back leaves them to
#     the next grant on the name.
#  4. A rolled-back sweep after a rebuild leaves the restored rows to be
#     moved to this server's clock by the next sweep.
#  5. The worker sends a sweeper whenever a lease with a row ends, however
#     many dlock_sweep() calls fail or roll back meanwhile: such calls once
#     held the worker's sweepers back, so that a clean restart brought back
#     leases that had ended in the second before the shutdown checkpoint.
# With dlock.flush_grants = on: the crashes here are about rows of ended
# leases, not about grants lost with unflushed WAL, and a crash grace would
# hold the grants that follow them (038_crash_grace covers that grace).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('ended_rows');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.worker = off
restart_after_crash = on
dlock.flush_grants = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub rows
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM dlock_leases WHERE name = '$name'");
}

# waits until every row of the name has expired by the wall clock (the
# monotonic expiry in memory is the same moment)
sub wait_expired
{
	my ($name) = @_;
	ok( $node->poll_query_until('postgres',
			"SELECT bool_and(expires_at < clock_timestamp() - interval '100 ms') FROM dlock_leases WHERE name = '$name'"),
		"$name: its lease expired");
}

sub worker
{
	my ($on) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET dlock.worker = $on; SELECT pg_reload_conf()");
}

###
### 1. an invalid row in the sweep
###
my $long = 'n' x 300;
$node->safe_psql('postgres', qq{
INSERT INTO dlock_leases VALUES
	('$long', 'o', 10, 5, now() - interval '1 hour', now() - interval '1 minute', '1 minute', 1, 'exclusive', NULL),
	('$long', 'o', 10, 6, now(), now() + interval '1 hour', '1 hour', 1, 'exclusive', NULL),
	('badtoken', 'o', 10, -7, now(), now() + interval '1 hour', '1 hour', 1, 'exclusive', NULL)
});
my $log_offset = -s $node->logfile;
my ($rc, $out, $err) = $node->psql('postgres', 'SELECT dlock_sweep()');
is($rc, 0, 'a sweep over a row with a 300-byte name succeeds') or diag($err);
is($out, '3', 'the sweep counts the invalid rows it deleted');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM dlock_leases WHERE octet_length(name) > 200 OR token <= 0"),
	'0', 'the sweep deleted the invalid rows, expired or not');
unlike(slurp_file($node->logfile, $log_offset), qr/terminated by signal|server process .* was terminated/,
	'no server process crashed');

###
### 2. an ended lease does not come back after a crash
###
my $fenced = q{
CREATE TABLE guarded (name text, tok bigint);
CREATE TRIGGER fenced BEFORE INSERT ON guarded
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'tok');
};
$node->safe_psql('postgres', $fenced);
my $ta_x = $node->safe_psql('postgres', "SELECT dlock_try('x', '2 s', 'A')");
my $ta_y = $node->safe_psql('postgres', "SELECT dlock_try('y', '2 s', 'A')");
# the rebuild after the crash judges rows by this checkpoint: both rows
# expire after it
$node->safe_psql('postgres', 'CHECKPOINT');
wait_expired('x');
wait_expired('y');

# x: B takes it in memory only, while A's lease is still in shared memory
my $tb_x = $node->safe_psql('postgres', "SET dlock.durable = off; SELECT dlock_try('x', '1 hour', 'B')");
ok($tb_x > $ta_x, 'x: B (memory-only) took x with a newer token');
$node->safe_psql('postgres', "INSERT INTO guarded VALUES ('x', $tb_x)");
is(rows('x'), '0', "x: B's grant deleted A's row");

# y: a rolled-back sweep ends A's lease (its entry goes) and keeps its row
$node->safe_psql('postgres', 'BEGIN; SELECT dlock_sweep(); ROLLBACK');
is(rows('y'), '1', "y: A's row is still there after a rolled-back sweep");
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_locks WHERE name = 'y'"),
	'0', 'y: no lease in memory');
my $tb_y = $node->safe_psql('postgres', "SET dlock.durable = off; SELECT dlock_try('y', '1 hour', 'B')");
$node->safe_psql('postgres', "INSERT INTO guarded VALUES ('y', $tb_y)");
is(rows('y'), '0', "y: B's grant deleted A's row");

$node->stop('immediate');
$node->start;
for my $case ([ 'x', $ta_x ], [ 'y', $ta_y ])
{
	my ($name, $ta) = @$case;
	($rc, $out, $err) = $node->psql('postgres', "SELECT dlock_fence('$name', $ta)");
	isnt($rc, 0, "$name: after the crash, A's ended lease does not pass dlock_fence");
	is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_locks WHERE name = '$name'"),
		'0', "$name: after the crash, no lease on $name");
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM guarded'), '2',
	"B's fenced writes survived the crash");

# in a read-only transaction a memory-only grant cannot delete a row
my $tz = $node->safe_psql('postgres', "SELECT dlock_try('z', '1 s', 'A')");
wait_expired('z');
($rc, $out, $err) = $node->psql('postgres',
	"SET dlock.durable = off; BEGIN READ ONLY; SELECT dlock_try('z', '1 hour', 'B'); COMMIT");
like($err, qr/ERROR:  cannot take lock "z" in a read-only transaction/,
	'z: a memory-only grant in a read-only transaction refuses to supersede a row it cannot delete');
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_locks WHERE name = 'z'"),
	'0', 'z: and is taken back');
# its row is left to the sweep
$node->safe_psql('postgres', 'SELECT dlock_sweep()');
is(rows('z'), '0', 'z: a sweep deletes its row');

###
### 3. only sweeps that committed clear what is left to sweep
###
$node->safe_psql('postgres', 'SELECT dlock_sweep()');
is($node->safe_psql('postgres', 'SELECT count(*) FROM dlock_leases'), '0',
	'a committed sweep leaves no row');

# (a) a rolled-back sweep
$node->safe_psql('postgres', "SELECT dlock_try('d1', '1 s', 'A')");
wait_expired('d1');
$node->safe_psql('postgres', 'BEGIN; SELECT dlock_sweep(); ROLLBACK');
is(rows('d1'), '1', 'd1: the rolled-back sweep left the row');
worker('on');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM dlock_leases WHERE name = 'd1'"),
	'd1: after a rolled-back sweep, the worker sends a sweeper that deletes the row');
worker('off');

# (b) a sweep that skipped a row locked by a release, which then rolls back
$node->safe_psql('postgres', "SELECT dlock_try('d2', '1 s', 'L')");
my $r = $node->background_psql('postgres');
$r->query_safe("BEGIN; SELECT dlock_release('d2', 'L')");
wait_expired('d2');
is($node->safe_psql('postgres', 'SELECT dlock_sweep()'), '0',
	'd2: the sweep ends the lease but skips its locked row');
$r->query_safe('ROLLBACK');
$r->quit;
is(rows('d2'), '1', 'd2: the row is back after the release rolled back');
worker('on');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM dlock_leases WHERE name = 'd2'"),
	'd2: the worker sends a sweeper for the row the sweep skipped');
worker('off');

# (c) a grant that was to delete the name's old rows rolls back; the
# waiter it hands the name to deletes them
$node->safe_psql('postgres', "SELECT dlock_try('d3', '1 s', 'A')");
wait_expired('d3');
my $t = $node->background_psql('postgres');
$t->query_safe("BEGIN; SELECT dlock_acquire('d3', '1 hour', NULL, 'C')");
my $w = $node->background_psql('postgres');
$w->query_until(qr/go/, "\\echo go\nSELECT dlock_acquire('d3', '1 hour', '1 minute', 'W') IS NOT NULL AS w;\n");
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM dlock_waiters WHERE name = 'd3'"),
	'd3: W waits behind C');
$t->query_safe('ROLLBACK');
$t->quit;
like($w->query_safe('SELECT 1'), qr/^t$/m, 'd3: W got the name when C rolled back');
$w->quit;
is($node->safe_psql('postgres', "SELECT string_agg(owner, ',') FROM dlock_leases WHERE name = 'd3'"),
	'W', "d3: W's grant deleted A's row, which C's rolled-back grant had not");

###
### 4. a rolled-back sweep after a rebuild
###
$node->safe_psql('postgres', 'SELECT dlock_sweep()');
$node->safe_psql('postgres', "SELECT dlock_try('m', '1 hour', 'A')");
my $before = $node->safe_psql('postgres', "SELECT expires_at FROM dlock_leases WHERE name = 'm'");
sleep(3);
$node->stop('immediate');
$node->start;
# the rebuild gives m a full hour again; its row still says the old expiry
$node->safe_psql('postgres', 'BEGIN; SELECT dlock_sweep(); ROLLBACK');
is($node->safe_psql('postgres', "SELECT expires_at FROM dlock_leases WHERE name = 'm'"),
	$before, "m: the rolled-back sweep did not move the restored lease's row");
worker('on');
ok( $node->poll_query_until('postgres',
		"SELECT expires_at > '$before' FROM dlock_leases WHERE name = 'm'"),
	'm: the worker sends a sweeper that moves the row to the expiry memory holds');
worker('off');

###
### 5. failing sweeps elsewhere do not hold the worker's sweepers back
###
$node->safe_psql('postgres', 'SELECT dlock_sweep()');
$node->safe_psql('postgres', q{
CREATE TABLE stop_sweeps (stop bool);
CREATE PROCEDURE failing_sweeps() LANGUAGE plpgsql AS $$
BEGIN
	-- (bounded, in case the test dies before it says stop)
	FOR i IN 1..30000 LOOP
		EXIT WHEN EXISTS (SELECT FROM stop_sweeps);
		BEGIN
			PERFORM dlock_sweep();
		EXCEPTION WHEN read_only_sql_transaction THEN
			NULL;
		END;
		COMMIT;
		PERFORM pg_sleep(0.02);
	END LOOP;
END $$;
});
worker('on');
# a session whose dlock_sweep() calls fail, each in a read-only transaction
# of its own, 50 times a second: each one ends what is due, then fails
my $f = $node->background_psql('postgres');
$f->set_query_timer_restart();
$f->query_until(qr/sweeping/,
	"SET default_transaction_read_only = on;\n\\echo sweeping\nCALL failing_sweeps();\n");
$node->safe_psql('postgres', "SELECT dlock_try('h', '1 s', 'A')");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM dlock_leases WHERE name = 'h'"),
	"h: while other sessions' sweeps fail, the worker's sweeper deletes the row of a lease that ended");
$node->safe_psql('postgres', 'INSERT INTO stop_sweeps VALUES (true)');
$f->query_safe('SELECT 1');
$f->quit;
worker('off');

$node->stop;
done_testing();
