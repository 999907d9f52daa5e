# A relcache invalidation of the lease table that reaches a waiting grant
# while it writes the database's token floor (a row of another table, whose
# lock makes the backend read the invalidations queued meanwhile): the grant
# still writes its lease's row.  GRANT sends the invalidation, as
# autovacuum's and ANALYZE's statistics updates do.  dlock.token_block (a
# developer option) makes floor writes frequent: every other grant writes
# one, and the test places the waiter's grant on one of those and checks
# that it wrote it.  (test/isolation/specs/relcache.spec covers the calls
# that write several leases' rows.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('relcache');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.token_block = 2
dlock.worker = off
statement_timeout = '20s'
# the grant writes its row (tested here) at once
dlock.defer_rows = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

# The holder takes the name; its token t leaves the floor at t + 1 (the
# next grant writes a floor row) or at t + 2 (it just wrote one: take the
# name again).  Nothing else hands out tokens here.
my ($token, $floor);
for my $i (1 .. 2)
{
	$token = $node->safe_psql('postgres', q{SELECT dlock_try('q', '1 minute', 'h')});
	$floor = $node->safe_psql('postgres', q{SELECT max(floor) FROM dlock_token_floor});
	last if $token + 1 >= $floor;
	$node->safe_psql('postgres', q{SELECT dlock_release('q', 'h')});
}
cmp_ok($token + 1, '>=', $floor, "the next grant writes the token floor (token $token, floor $floor)");

my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$waiter->query_until(qr/sent/,
	"\\echo sent\nSELECT dlock_acquire('q', '1 minute', '15 s', 'w') AS got;\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock_waiters WHERE name = 'q'}),
	'the waiter is queued');
$node->safe_psql('postgres', 'GRANT SELECT ON dlock_leases TO PUBLIC');
$node->safe_psql('postgres', q{SELECT dlock_release('q', 'h')});

my $got = $waiter->query(q{SELECT 'after'});
is($waiter->{stderr}, '', 'the waiter\'s grant raised no error');
like($got, qr/^\d+\nafter$/, 'the waiter was granted the name');
my ($granted) = $got =~ /^(\d+)/;
$granted //= 0;
cmp_ok($node->safe_psql('postgres', q{SELECT max(floor) FROM dlock_token_floor}),
	'>', $granted, 'its grant wrote a floor row');
is($node->safe_psql('postgres',
		q{SELECT owner || ' ' || (token = } . $granted . q{) FROM dlock_leases WHERE name = 'q'}),
	'w true', 'the grant wrote its lease\'s row, the name\'s only one');
$waiter->quit;

done_testing();
