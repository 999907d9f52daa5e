# dlock.max_locks_per_database: a database over its share of the lease table
# gets SQLSTATE 53400 with a hint naming the setting, while other databases
# keep working; a full dlock.max_locks still gives 53200.  Queued waiters'
# reservations and queued requests (dlock_enqueue) count against their
# database's share, the setting follows a
# reload, and the rebuild after a restart restores leases past a share
# lowered meanwhile.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('capacity');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.max_locks = 200
dlock.max_locks_per_database = 120
});
$node->start;

# fill(prefix, n, owner): takes up to n leases, one at a time, and says how
# many it got and, if one was refused, SQLSTATE, message and hint.
$node->safe_psql('template1', q{
CREATE FUNCTION fill(prefix text, n int, who text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	got int := 0;
	st text;
	msg text;
	hint text;
BEGIN
	FOR i IN 1 .. n LOOP
		BEGIN
			PERFORM dlock_try(prefix || i, '1 hour', who);
			got := got + 1;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
				hint = PG_EXCEPTION_HINT;
			RETURN got || ' ' || st || ': ' || msg || ' | ' || hint;
		END;
	END LOOP;
	RETURN got || ' ok';
END $$;
});
for my $db ('a', 'b')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION dlock');
}

sub fill
{
	my ($db, $prefix, $n) = @_;
	return $node->safe_psql($db,
		"SET dlock.durable = off; SELECT fill('$prefix', $n, 'filler')");
}

sub set_share
{
	my ($value) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET dlock.max_locks_per_database = $value");
	$node->reload;
	ok($node->poll_query_until('postgres',
			"SELECT current_setting('dlock.max_locks_per_database') = '$value'"),
		"dlock.max_locks_per_database is $value after a reload");
}

sub held
{
	my ($db) = @_;
	return $node->safe_psql($db, 'SELECT count(*) FROM dlock_locks');
}

my $share_full = qr/^53400: dlock lease table is full for database "a" \| .*dlock\.max_locks_per_database/;
my $table_full = qr/^53200: dlock lease table is full \| .*dlock\.max_locks and restart/;

# --- a database over its share gets 53400; the others keep working
my ($got, $err) = split / /, fill('a', 'a', 500), 2;
is($got, '120', 'a takes exactly its share of 120 entries');
like($err, $share_full, 'then 53400, with a hint naming dlock.max_locks_per_database');
is($node->safe_psql('a', q{SELECT dlock_try('a1', '2 hours', 'filler') IS NOT NULL}),
	't', 'a holder over the share still extends its own lease (no new entry)');

($got, $err) = split / /, fill('b', 'b', 500), 2;
is($got, '80', 'b still gets the 80 entries left of dlock.max_locks');
like($err, $table_full, 'then, with b under its share, a full table gives 53200');

$node->safe_psql('b', q{SELECT dlock_release('b' || g, 'filler') FROM generate_series(1, 10) g});
($got, $err) = split / /, fill('a', 'a-more', 5), 2;
is($got, '0', 'with room in the table again, a still gets nothing');
like($err, $share_full, '53400 for a, over its share');
is(fill('b', 'b-more', 5), '5 ok', 'while b takes entries again');

# --- the share follows a reload; a lowered one keeps what a database has
set_share(0);
($got, $err) = split / /, fill('a', 'a-free', 10), 2;
is($got, '5', 'no share (0): a takes what is left of the table');
like($err, $table_full, 'and is then refused with 53200 only');
set_share(50);
is(held('a'), '125', 'a share lowered below what a holds ends none of its leases');
like(fill('a', 'a-low', 1), qr/^0 53400: /, 'but a gets no new entry');

# --- a queued waiter's reservation counts against its database's share
$node->safe_psql('b', q{SELECT dlock_release('b' || g, 'filler') FROM generate_series(11, 80) g;
	SELECT dlock_release('b-more' || g, 'filler') FROM generate_series(1, 5) g});
is(held('b'), '0', 'b holds nothing');
is(fill('b', 'c', 48), '48 ok', 'b takes 48 of its 50');
$node->safe_psql('b', q{SELECT dlock_try('rw', '1 hour', 'writer')});
my $reader = $node->background_psql('b', on_error_stop => 0);
$reader->query_until(qr/waiting/, q{\echo waiting
SELECT dlock_acquire('rw', '1 hour', '1 minute', 'reader', 'shared') IS NOT NULL AS granted;
});
ok($node->poll_query_until('b', 'SELECT count(*) = 1 FROM dlock_waiters'),
	'a shared reader queues behind the writer');
like(fill('b', 'd', 1), qr/^0 53400: .*"b"/,
	'the reader\'s reservation took the 50th entry of b');
$node->safe_psql('b', q{SELECT dlock_release('rw', 'writer')});
like($reader->query_safe('SELECT 1'), qr/^t$/m, 'the writer leaves: the reader is granted');
like(fill('b', 'd', 2), qr/^1 53400: /,
	'granted in the name\'s entry, the reader gave its reservation back: one entry is free');
$reader->quit;

# --- a queued request (dlock_enqueue) counts against its database's share
# as a blocked waiter does, and gives its entry back when it leaves
$node->safe_psql('b', q{SELECT dlock_release('d1', 'filler')});
is(held('b'), '49', 'b holds 49 entries of its 50');
$node->safe_psql('b', q{SELECT dlock_try('q', '1 hour', 'holder')});
my ($ret, $out, $qerr) = $node->psql('b', q{\set VERBOSITY verbose
SELECT dlock_enqueue('q', '1 hour', 'queued-1')});
like($qerr, qr/ERROR:  53400: dlock lease table is full for database "b"/,
	'a queued request beyond the share is refused with 53400');
$node->safe_psql('b', q{SELECT dlock_release('c1', 'filler')});
is($node->safe_psql('b', q{SELECT dlock_enqueue('q', '1 hour', 'queued-1')}), '',
	'with one entry free, the request is queued (NULL)');
like(fill('b', 'e', 1), qr/^0 53400: .*"b"/, 'the queued request took the 50th entry of b');
is($node->safe_psql('b', q{SELECT dlock_dequeue('q', 'queued-1')}), 't', 'it leaves the queue');
is(fill('b', 'e', 1), '1 ok', 'and its entry is free again');
$node->safe_psql('b', q{SELECT dlock_release('q', 'holder'); SELECT dlock_release('e1', 'filler')});

# --- the rebuild after a restart is not held to a share lowered meanwhile
set_share(0);
$node->safe_psql('a', q{SELECT dlock_release('a' || g, 'filler') FROM generate_series(1, 120) g});
is($node->safe_psql('a', q{SELECT fill('durable', 60, 'filler')}), '60 ok',
	'with no share, a takes 60 durable leases');
$node->safe_psql('postgres', 'ALTER SYSTEM SET dlock.max_locks_per_database = 40');
$node->restart;
is($node->safe_psql('a', q{SELECT count(*) FROM dlock_locks WHERE durable}), '60',
	'after a restart with a share of 40, all 60 durable leases of a are restored');
like(fill('a', 'after', 1), qr/^0 53400: /, 'and a gets no new entry until it is under 40');
is(fill('b', 'after', 3), '3 ok', 'while b, under its share, does');

done_testing();
