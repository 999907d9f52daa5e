# dlock.max_locks and dlock.max_locks_per_database stay exact with the
# entry credits the partitions take in batches and keep spare (credits.c):
# clients filling a database concurrently, across all partitions, get
# exactly its share (53400) or what is left of the table (53200), also when
# the credits they need are spare in other partitions, spare for another
# database, or held beyond a share lowered by a reload.
#
# Each client fills until refused, with more names than any limit, so the
# last client to stop is refused with no other call running: the counts it
# leaves are the limits, exactly.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('credits');
$node->init;
# large enough that partitions take credits in batches of 16
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
max_connections = 40
dlock.max_locks = 4000
dlock.max_locks_per_database = 3000
});
$node->start;

# fill(prefix, n, owner): takes up to n memory-only leases, one at a time,
# and says how many it got and the SQLSTATE of the refusal ('ok': none).
$node->safe_psql('template1', q{
CREATE FUNCTION fill(prefix text, n int, who text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	got int := 0;
BEGIN
	SET LOCAL dlock.durable = off;
	FOR i IN 1 .. n LOOP
		BEGIN
			PERFORM dlock_try(prefix || i, '1 hour', who);
			got := got + 1;
		EXCEPTION WHEN OTHERS THEN
			RETURN got || ' ' || SQLSTATE;
		END;
	END LOOP;
	RETURN got || ' ok';
END $$;
CREATE TABLE fills (round text, client int, result text);
});
for my $db ('a', 'b')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION dlock');
}

# 8 clients fill db at once, each with 4000 names of its own; returns the
# SQLSTATEs they stopped with, sorted, and the leases the database holds.
sub fill_concurrently
{
	my ($db, $round) = @_;
	$node->pgbench(
		"-n -c 8 -j 4 -t 1 $db",
		0, [qr/actually processed: 8\/8/], [qr/^$/],
		"$round: 8 clients fill $db concurrently",
		{
			"052_$round" => qq{INSERT INTO fills SELECT '$round', :client_id,
				fill('$round-' || :client_id || '-', 4000, 'c' || :client_id);}
		});
	my $states = $node->safe_psql($db,
		"SELECT string_agg(DISTINCT split_part(result, ' ', 2), ',')
		 FROM fills WHERE round = '$round'");
	return ($states, held($db));
}

sub held
{
	my ($db) = @_;
	return $node->safe_psql($db, 'SELECT count(*) FROM dlock_locks');
}

sub one_more
{
	my ($db) = @_;
	return $node->safe_psql($db, "SELECT fill('one-more', 1, 'x')");
}

sub entries
{
	return $node->safe_psql('a', 'SELECT leases FROM dlock_stats()');
}

sub release_all
{
	my ($db) = @_;
	$node->safe_psql($db,
		'SELECT dlock_release(name, owner) FROM dlock_locks');
	is(held($db), '0', "$db released all its leases");
}

# --- a database fills to exactly its share, then to exactly the table
my ($states, $held) = fill_concurrently('a', 'a1');
is($states, '53400', 'every client of a stops at its share (53400)');
is($held, '3000', 'a holds exactly dlock.max_locks_per_database');
is(one_more('a'), '0 53400', 'one more in a: 53400');

($states, $held) = fill_concurrently('b', 'b1');
is($states, '53200', 'every client of b stops at a full table (53200)');
is($held, '1000', 'b holds exactly what a left of dlock.max_locks');
is(entries(), '4000', 'dlock_stats counts 4000 entries');
is(one_more('b'), '0 53200', 'one more in b: 53200');

# --- credits a left spare in its partitions go to b, as far as its share
release_all('a');
($states, $held) = fill_concurrently('b', 'b2');
is($states, '53400', 'b, refilled, stops at its share (53400)');
is($held, '3000', 'b holds exactly its share, with credits a had spare');
is(entries(), '3000', 'dlock_stats counts 3000 entries');
($states, $held) = fill_concurrently('a', 'a2');
is($states, '53200', 'a, refilled, stops at a full table (53200)');
is($held, '1000', 'a holds exactly what b left');
is(entries(), '4000', 'dlock_stats counts 4000 entries');

# --- spare credits of a database above a lowered share are given back
release_all('a');
$node->safe_psql('b', q{SELECT dlock_release(name, owner)
	FROM (SELECT name, owner FROM dlock_locks ORDER BY name LIMIT 2500) l});
is(held('b'), '500', 'b keeps 500 leases');
$node->safe_psql('postgres', 'ALTER SYSTEM SET dlock.max_locks_per_database = 1000');
$node->reload;
ok($node->poll_query_until('postgres',
		"SELECT current_setting('dlock.max_locks_per_database') = '1000'"),
	'dlock.max_locks_per_database is 1000 after a reload');
($states, $held) = fill_concurrently('b', 'b3');
is($states, '53400', 'b stops at its lowered share (53400)');
is($held, '1000', 'b holds exactly its lowered share');
($states, $held) = fill_concurrently('a', 'a3');
is($states, '53400', 'a stops at the lowered share (53400)');
is($held, '1000', 'a holds exactly the lowered share');
is(entries(), '2000', 'dlock_stats counts 2000 entries');

done_testing();
