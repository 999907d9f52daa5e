# Dropping a database or the extension frees its leases' shared-memory
# entries at once, ends its waits, and sends no sweeper after it.
#
# - DROP DATABASE ... WITH (FORCE), with holders and waiters connected:
#   the entry count falls at once, no waiter is left.
# - DROP EXTENSION and CREATE EXTENSION, in one transaction or two, with
#   waiters on names: the waiters get an error, no lease is left; a drop
#   undone by ROLLBACK TO SAVEPOINT keeps the leases; PREPARE TRANSACTION
#   of a drop is refused; a lease taken in the re-created extension within
#   the dropping transaction stays.
# - For 30 s after the drops, while their durable leases would have expired,
#   the worker starts at most 2 sweepers per dropped database (before the
#   fix: one after another, without end).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('drop');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
max_prepared_transactions = 2
# grants write their rows, which the sweepers counted here delete
dlock.defer_rows = off
# the postmaster logs each background worker it starts at DEBUG1
log_min_messages = debug1
});
$node->start;

for my $db ('doomed', 'noext', 'reext')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
}
for my $db ('postgres', 'doomed', 'noext', 'reext')
{
	$node->safe_psql($db, 'CREATE EXTENSION dlock');
}
my %oid = map {
	$_ => $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = '$_'")
} ('postgres', 'doomed', 'noext', 'reext');

# entries held or reserved in the whole cluster, and queued waiters
sub gauges
{
	return $node->safe_psql('postgres', 'SELECT leases || \' \' || waiting FROM dlock_stats');
}

sub session
{
	my ($db) = @_;
	return $node->background_psql($db, on_error_stop => 0);
}

# Starts a call that waits, in a session of its own.
sub waiter
{
	my ($db, $call) = @_;
	my $s = session($db);
	$s->query_until(qr/waiting/, "\\echo waiting\n$call;\n");
	return $s;
}

sub sweeper_starts
{
	my ($db, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @starts = $log =~ /starting background worker process "dlock sweeper for database $oid{$db}"/g;
	return scalar @starts;
}

###
### 1. DROP DATABASE ... WITH (FORCE) and DROP EXTENSION free entries at once
###
# Durable leases that expire 3 s from now (their rows would call sweepers),
# memory-only ones for an hour, a held name with an exclusive waiter and
# one with a shared waiter (which reserves an entry).
my $holder = session('doomed');
$holder->query_safe(q{
	SELECT dlock_try('short-' || g, '3 s', 'd') FROM generate_series(1, 20) g;
	SET dlock.durable = off;
	SELECT dlock_try('long-' || g, '1 hour', 'd') FROM generate_series(1, 10) g;
	SELECT dlock_try('held', '1 hour', 'd'), dlock_try('rw', '1 hour', 'd');
});
my @doomed_waiters = (
	waiter('doomed', q{SELECT dlock_acquire('held', '1 hour', NULL, 'w')}),
	waiter('doomed', q{SELECT dlock_acquire('rw', '1 hour', NULL, 'r', 'shared')}));
$node->safe_psql('noext',
	q{SELECT dlock_try('short-' || g, '3 s', 'n') FROM generate_series(1, 20) g});
ok($node->poll_query_until('doomed', 'SELECT count(*) = 2 FROM dlock_waiters'),
	'doomed: two waiters queued');
is(gauges(), '53 2', 'entries: 33 of doomed (with a waiter\'s reservation) and 20 of noext');

my $offset = -s $node->logfile;
my $dropped_at = time;
$node->safe_psql('postgres', 'DROP DATABASE doomed WITH (FORCE)');
is(gauges(), '20 0', 'DROP DATABASE WITH (FORCE) freed the 33 entries of doomed at once');
$node->safe_psql('noext', 'DROP EXTENSION dlock');
is(gauges(), '0 0', 'DROP EXTENSION freed the 20 entries of noext at once');
# the drop ended their server sessions: psql is gone, or goes at \q
eval { $_->quit } for ($holder, @doomed_waiters);

###
### 2. DROP EXTENSION and CREATE EXTENSION with waiters on names
###
sub reext
{
	my ($sql) = @_;
	return $node->safe_psql('reext', $sql);
}

my $h = session('reext');
$h->query_safe(q{SELECT dlock_try('busy', '1 hour', 'h'), dlock_try('rw', '1 hour', 'h'),
	dlock_try('sem', '1 hour', 'h', permits => 1)});
my $w1 = waiter('reext', q{SELECT dlock_acquire('busy', '1 hour', NULL, 'w1')});
my $w2 = waiter('reext', q{SELECT dlock_acquire('rw', '1 hour', NULL, 'w2', 'shared')});
my $w3 = waiter('reext', q{SELECT dlock_acquire('sem', '1 hour', NULL, 'w3', permits => 1)});
ok($node->poll_query_until('reext', 'SELECT count(*) = 3 FROM dlock_waiters'),
	'reext: three waiters queued on three names');
is(gauges(), '5 3', 'entries: three names, and the reservations of the shared and the semaphore waiter');

reext('BEGIN; DROP EXTENSION dlock; CREATE EXTENSION dlock; COMMIT');
for my $w ($w1, $w2, $w3)
{
	$w->query('SELECT 1');
	like($w->{stderr}, qr/ERROR:  wait for lock "\w+" ended: the dlock extension was dropped/,
		'a waiter gets an error when the extension is dropped');
}
is(gauges(), '0 0', 'DROP and CREATE EXTENSION in one transaction: no entry is left');
is(reext('SELECT count(*) FROM dlock_locks') . reext('SELECT count(*) FROM dlock_waiters'),
	'00', 'the views of the new extension show no lease and no waiter');
ok(reext(q{SELECT dlock_try('busy', '1 hour', 'new') IS NOT NULL}), 'busy is free for a new holder');

# the same in two transactions, the waiter's error coming with the drop
$w1->{stderr} = '';
$w1->query_until(qr/waiting/, "\\echo waiting\nSELECT dlock_acquire('busy', '1 hour', NULL, 'w1');\n");
ok($node->poll_query_until('reext', 'SELECT count(*) = 1 FROM dlock_waiters'),
	'a waiter queues on busy again');
$node->safe_psql('reext', 'DROP EXTENSION dlock');
is(gauges(), '0 0', 'DROP EXTENSION alone: no entry is left');
$w1->query('SELECT 1');
like($w1->{stderr}, qr/wait for lock "busy" ended/, 'and the waiter got its error');
reext('CREATE EXTENSION dlock');
is(reext('SELECT count(*) FROM dlock_locks'), '0', 'the re-created extension starts empty');

# a drop undone by a savepoint, or refused by PREPARE, keeps the leases
reext(q{SELECT dlock_try('keep', '1 hour', 'k')});
reext('BEGIN; SAVEPOINT s; DROP EXTENSION dlock; ROLLBACK TO s; COMMIT');
is(reext('SELECT string_agg(name, \',\') FROM dlock_locks'), 'keep',
	'a drop rolled back to a savepoint keeps the leases');
my ($ret, $out, $err) = $node->psql('reext',
	"BEGIN; DROP EXTENSION dlock; PREPARE TRANSACTION 'p'");
like($err, qr/cannot prepare a transaction that dropped extension dlock/,
	'PREPARE TRANSACTION of a drop of the extension is refused');
is(reext('SELECT string_agg(name, \',\') FROM dlock_locks'), 'keep', 'and keeps the leases');

# a lease taken in the re-created extension within the dropping transaction stays
reext(q{BEGIN; DROP EXTENSION dlock; CREATE EXTENSION dlock;
	SELECT dlock_try('inside', '1 hour', 'i'); COMMIT});
is(reext('SELECT string_agg(name, \',\') FROM dlock_locks'), 'inside',
	'a lease of the new extension taken in the dropping transaction stays; the old ones are gone');
is(gauges(), '1 0', 'one entry in the cluster');
$_->quit for ($h, $w1, $w2, $w3);

###
### 3. no sweeper for a dropped database or extension
###
# The worker still sends sweepers where there is a table: rows of leases
# ended in postgres disappear.
$node->safe_psql('postgres',
	q{SELECT dlock_try('ctl-' || g, '1 s', 'c') FROM generate_series(1, 5) g});
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM dlock_leases'),
	'rows of ended leases in postgres are deleted by a sweeper');

# The durable leases of doomed and noext would have expired 3 s after the
# drops; look at 30 s of log.
sleep(30 - (time - $dropped_at)) if time - $dropped_at < 30;
my %starts = map { $_ => sweeper_starts($_, $offset) } keys %oid;
diag(join ', ', map { "$_: $starts{$_}" } sort keys %starts);
cmp_ok($starts{doomed}, '<=', 2, 'at most 2 sweepers sent to the dropped database in 30 s');
cmp_ok($starts{noext}, '<=', 2, 'at most 2 sweepers sent to the database without the extension in 30 s');
cmp_ok($starts{reext}, '<=', 2, 'at most 2 sweepers sent to the database that re-created it');
cmp_ok($starts{postgres}, '>=', 1, 'sweepers were logged (the count above is not blind)');

done_testing();
