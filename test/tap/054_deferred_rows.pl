# Durable leases whose rows are deferred (dlock.defer_rows = on): a grant
# writes nothing; the first renewal, extension or fence writes the row; a
# crash loses the leases still without one, and a grace keeps every name
# from a new holder until the last of them would have ended; a clean
# restart keeps them.
#
#  1. What writes a row and what does not: a grant (no row, no xid, no
#     WAL), a release of it (no row), a renewal (row, version 2), an
#     extension, a fence in a read-only transaction (none) and in a
#     read-write one (row), the same fence rolled back (none, deferred
#     again, fenced again later); grants that must write at once: a ttl
#     above dlock.failover_grace, dlock.flush_grants, a minimum hold.
#  2. A fenced write after a deferred grant: its commit flushes the row its
#     fence wrote; after a crash the lease and the write are both there.
#  3. A crash: the deferred leases are lost, the renewed one is back, a
#     grace as long as the longest deferred ttl runs.
#  4. A clean restart keeps the live deferred leases (the postmaster writes
#     them to pg_dlock.deferred): back with their tokens, no grace, in each
#     database; one of a database no call reached before the next clean
#     restart is kept again; after a crash the file is not read again.
#  5. The file cannot be written: the next start runs a grace until the
#     lease would have ended, and B gets its name after that.
#  6. A clean restart with no deferred lease live: no grace (the file is
#     written all the same).  The file missing (as if the postmaster had been
#     killed after the shutdown checkpoint) or damaged: a grace.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('deferred_rows');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.failover_grace = '20s'
dlock.defer_rows = on
wal_level = minimal
max_wal_senders = 0
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock; CREATE TABLE jobs (token bigint)');

sub sql { return $node->safe_psql('postgres', $_[0]) }
sub rows { return sql("SELECT coalesce(string_agg(version::text, ',' ORDER BY token), '-') FROM dlock_leases WHERE name = '$_[0]'") }
# dlock_locks: durable, and the row version it shows (- : none)
sub durable { return sql("SELECT coalesce(string_agg(CASE WHEN durable THEN 't' ELSE 'f' END || ':' || coalesce(version::text, '-'), ','), '-') FROM dlock_locks WHERE name = '$_[0]'") }

###
### 1. what writes a row
###
my $t = sql("SELECT dlock_try('plain', '10 s', 'A')");
like($t, qr/^\d+$/, 'a deferred grant is granted');
is(rows('plain') . ' ' . durable('plain'), '- t:-', '... with no row, shown durable with no row version');
is(sql("BEGIN; SELECT dlock_try('noxid', '10 s', 'A') > 0, pg_current_xact_id_if_assigned() IS NULL; COMMIT"),
	't|t', '... in a transaction that takes no xid');
is(sql("SELECT dlock_release('plain', 'A')"), 't', 'its release returns true');
is(rows('plain') . ' ' . durable('plain'), '- -', '... and leaves nothing');

sql("SELECT dlock_try('renewed', '10 s', 'A')");
isnt(sql("SELECT dlock_renew('renewed', '12 s', 'A')"), '', 'a deferred lease is renewed');
is(rows('renewed') . ' ' . durable('renewed'), '2 t:2', '... which wrote its row (version 2)');
is(sql("SELECT extract(epoch FROM ttl)::int FROM dlock_leases WHERE name = 'renewed'"), '12',
	'... with the renewal\'s ttl');
isnt(sql("SELECT dlock_renew('renewed', '12 s', 'A')"), '', 'renewed again');
is(rows('renewed'), '3', '... which updated the row (version 3)');

my $ext = sql("SELECT dlock_try('extended', '10 s', 'A')");
is(sql("SELECT dlock_try('extended', '11 s', 'A')"), $ext, 'a deferred lease is extended, same token');
is(rows('extended') . ' ' . durable('extended'), '2 t:2', '... which wrote its row');

my $f = sql("SELECT dlock_try('fenced', '10 s', 'A')");
is(sql("BEGIN READ ONLY; SELECT count(*) FROM dlock_fence('fenced', $f); COMMIT"), '1',
	'a fence in a read-only transaction passes');
is(rows('fenced') . ' ' . durable('fenced'), '- t:-', '... and writes no row');
sql("BEGIN; SELECT count(*) FROM dlock_fence('fenced', $f); ROLLBACK");
is(rows('fenced') . ' ' . durable('fenced'), '- t:-', 'a fence rolled back leaves the lease deferred');
sql("BEGIN; SELECT count(*) FROM dlock_fence('fenced', $f); SAVEPOINT s; SELECT count(*) FROM dlock_fence('fenced', $f); ROLLBACK TO s; COMMIT");
is(rows('fenced') . ' ' . durable('fenced'), '1 t:1', 'a committed fence wrote its row (version 1)');
cmp_ok(sql("SELECT extract(epoch FROM ttl) FROM dlock_leases WHERE name = 'fenced'"), '<=', 10,
	'... with the ttl it had left');
is(sql("SELECT dlock_release('fenced', 'A')"), 't', 'its release returns true');
is(rows('fenced') . ' ' . durable('fenced'), '- -', '... and deletes the row');

sql("SELECT dlock_try('long', '30 s', 'A')");
is(rows('long') . ' ' . durable('long'), '1 t:1', 'a ttl above dlock.failover_grace writes its row at the grant');
sql("SET dlock.flush_grants = on; SELECT dlock_try('flushed', '10 s', 'A')");
is(rows('flushed'), '1', 'so does a grant under dlock.flush_grants');
sql("SELECT dlock_try('held', '10 s', 'A', min_hold => '5 s')");
is(rows('held'), '1', 'and one with a minimum hold');
is(sql("SET dlock.durable = off; SELECT dlock_try('mem', '10 s', 'A') > 0; SELECT dlock_renew('mem', '10 s', 'A') IS NOT NULL"),
	"t\nt", 'a memory-only lease is renewed');
is(rows('mem') . ' ' . durable('mem'), '- f:-', '... and never gets a row');
my ($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nBEGIN READ ONLY; SELECT dlock_try('ro', '10 s', 'A')");
like($err, qr/25006/, 'a deferred grant in a read-only transaction fails with 25006, as a durable one');

###
### 2. a fenced write carries the row of its lease with it
###
$f = sql("SELECT dlock_try('job', '10 s', 'A')");
sql("BEGIN; SELECT count(*) FROM dlock_fence('job', $f); INSERT INTO jobs VALUES ($f); COMMIT");
$node->stop('immediate');
$node->start;
is(sql("SELECT (SELECT token FROM dlock_locks WHERE name = 'job'), (SELECT token FROM jobs)"),
	"$f|$f", 'after a crash: the fenced write and its lease are both there');
$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;

###
### 3. a crash loses the deferred leases, and a grace covers them
###
my $lost = sql("SELECT dlock_try('lost', '8 s', 'A')");
my $kept = sql("SELECT dlock_try('kept', '8 s', 'A')");
sql("SELECT dlock_renew('kept', '8 s', 'A')");
sql("INSERT INTO jobs VALUES (0)");    # flushes the renewal's row
$node->stop('immediate');
$node->start;
is(sql("SELECT string_agg(name, ',' ORDER BY name) FROM dlock_locks WHERE name IN ('lost', 'kept')"),
	'kept', 'after a crash: the renewed lease is back, the deferred one is not');
ok($node->log_contains(qr/the end of its grace after a crash restart/), 'a crash grace runs');
is(sql("SELECT dlock_try('lost', '8 s', 'B')"), '', 'in the grace: B does not get the lost name');
cmp_ok(sql("SELECT dlock_acquire('lost', '8 s', '30 s', 'B')"), '>', $lost,
	'after it: B gets it, with a higher token');
$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;

###
### 4. a clean restart keeps the deferred leases: no grace
###
sql("SELECT dlock_release(name, owner) FROM dlock_locks");
sql("CREATE DATABASE other; CREATE DATABASE other2");
$node->safe_psql($_, 'CREATE EXTENSION dlock') for qw(other other2);
my $kept1 = sql("SELECT dlock_try('k1', '15 s', 'A')");
my $ends = sql("SELECT expires_at FROM dlock_locks WHERE name = 'k1'");
my $kept2 = $node->safe_psql('other', "SELECT dlock_try('k2', '15 s', 'A', 'shared')");
my $kept3 = $node->safe_psql('other2', "SELECT dlock_try('k3', '15 s', 'A')");
sql("SELECT dlock_try('released', '15 s', 'A')");
sql("SELECT dlock_release('released', 'A')");
my $offset = -s $node->logfile;
$node->restart;
ok($node->log_contains(qr/dlock kept 3 leases whose rows were deferred for the next start; the last ends at /, $offset),
	'the clean shutdown kept the 3 live deferred leases');
is(sql("SELECT dlock_grace()"), '', 'the start begins no grace');
is(sql("SELECT token || ' ' || owner || ' ' || durable || ' ' || coalesce(version::text, '-') FROM dlock_locks WHERE name = 'k1'"),
	"$kept1 A true -", 'the deferred lease is back, same token and owner, still deferred');
is(sql("SELECT expires_at >= timestamptz '$ends' FROM dlock_locks WHERE name = 'k1'"), 't',
	'... ending no earlier than before the restart');
is(sql("SELECT count(*) FROM dlock_locks WHERE name = 'released'"), '0', 'a released one is not');
is(sql("SELECT dlock_try('k1', '15 s', 'B')"), '', 'B does not get its name');
like(sql("SELECT dlock_try('fresh', '15 s', 'B')"), qr/^\d+$/, 'a fresh name is granted at once');
is($node->safe_psql('other', "SELECT token || ' ' || mode FROM dlock_locks WHERE name = 'k2'"),
	"$kept2 shared", 'a shared deferred lease of another database is back');
isnt($node->safe_psql('other', "SELECT dlock_renew('k2', '15 s', 'A')"), '', '... and renewed');
is($node->safe_psql('other', "SELECT count(*) FROM dlock_leases WHERE name = 'k2'"), '1',
	'... which wrote its row');

# other2 is not used before the next clean restart: its lease is kept again
$offset = -s $node->logfile;
$node->restart;
ok($node->log_contains(qr/dlock kept 3 leases whose rows were deferred/, $offset),
	'the next clean shutdown keeps the lease of the database no call reached, with the live ones');
is($node->safe_psql('other2', "SELECT token FROM dlock_locks WHERE name = 'k3'"), $kept3,
	'that lease is back after a second restart');

# a crash after a clean start: the file is not used again
sql("SELECT dlock_release('k1', 'A')");
sql("INSERT INTO jobs VALUES (0)");
$node->stop('immediate');
$node->start;
is(sql("SELECT count(*) FROM dlock_locks WHERE name = 'k1'"), '0',
	'after a crash: a kept lease released since does not come back from the file');
ok($node->log_contains(qr/the end of its grace after a crash restart/), 'the crash began a grace');
$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;
sql("SELECT dlock_release(name, owner) FROM dlock_locks");

###
### 5. the file cannot be written: a grace until the lease would have ended
###
my $gone = sql("SELECT dlock_try('gone', '6 s', 'A')");
$ends = sql("SELECT expires_at FROM dlock_locks WHERE name = 'gone'");
mkdir($node->data_dir . '/pg_dlock.deferred.tmp') or die;
$offset = -s $node->logfile;
$node->restart;
rmdir($node->data_dir . '/pg_dlock.deferred.tmp') or die;
ok($node->log_contains(qr/could not write file "pg_dlock.deferred.tmp"/, $offset), 'the file could not be written');
ok($node->log_contains(qr/dlock grants no new lease until .*, the end of its grace after a clean shutdown/, $offset),
	'a grace runs after the clean shutdown instead');
is(sql("SELECT dlock_grace() BETWEEN timestamptz '$ends' AND timestamptz '$ends' + interval '1 s'"), 't',
	'it ends when the lost lease would have (' . sql("SELECT dlock_grace()") . ", the lease: $ends)");
is(sql("SELECT count(*) FROM dlock_locks WHERE name = 'gone'"), '0', 'the deferred lease is lost');
is(sql("SELECT dlock_try('gone', '6 s', 'B')"), '', 'in the grace: B does not get its name');
is(sql("SELECT dlock_try('other', '6 s', 'B')"), '', '... nor any other');
my ($tok, $after) = split /\|/, sql(
	"SELECT dlock_acquire('gone', '6 s', '30 s', 'B'), clock_timestamp() >= timestamptz '$ends'");
cmp_ok($tok, '>', $gone, 'after it: B gets the name');
is($after, 't', '... once the lost lease would have ended');

###
### 6. no file for the clean start's checkpoint: a grace as after a crash
###
$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;
sql("SELECT dlock_release(name, owner) FROM dlock_locks");
$offset = -s $node->logfile;
$node->restart;
is(sql("SELECT dlock_grace()"), '', 'a clean restart with no deferred lease live: no grace');
ok(-e $node->data_dir . '/pg_dlock.deferred', '... its shutdown wrote the file all the same');
ok(!$node->log_contains(qr/grants no new lease/, $offset), '... and the log shows no grace');
for my $case ([ 'missing', sub { unlink $_[0] or die } ],
	[ 'damaged', sub {
		open(my $fh, '+<', $_[0]) or die; binmode $fh; seek($fh, 20, 0); print $fh "\xff\xff"; close $fh } ])
{
	my ($what, $spoil) = @$case;
	my $t = sql("SELECT dlock_try('$what', '6 s', 'A')");
	$node->stop;
	$spoil->($node->data_dir . '/pg_dlock.deferred');
	$offset = -s $node->logfile;
	$node->start;
	ok($node->log_contains(qr/dlock grants no new lease until .*, the end of its grace after a clean shutdown that kept no leases/, $offset),
		"file $what: the log shows a grace after the clean shutdown");
	is(sql("SELECT count(*) FROM dlock_locks WHERE name = '$what'"), '0', "file $what: the lease is lost");
	is(sql("SELECT dlock_try('$what', '6 s', 'B')"), '', "file $what: in the grace, B does not get its name");
	cmp_ok(sql("SELECT dlock_acquire('$what', '6 s', '30 s', 'B')"), '>', $t, "file $what: B gets it after the grace");
	sql("SELECT dlock_release('$what', 'B')");
	$node->poll_query_until('postgres', 'SELECT dlock_grace() IS NULL') or die;
}

ok(!$node->log_contains(qr/PANIC|TRAP/), 'no PANIC or assertion failure in the log');
$node->stop;
done_testing();
