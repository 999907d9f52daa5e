# Lease rows and the rebuild after a crash, when a grant's transaction and a
# release of its lease overlap, and when the table holds rows of leases that
# had ended.
#
#  1. A force-release (or a release from another session of the owner) of a
#     durable lease whose grant's transaction is still in progress waits for
#     that transaction instead of missing its invisible row, so the row
#     cannot revive the ended lease after a crash, next to the new holder's.
#  2. The rebuild restores only a set of leases that could be live together:
#     rows older than a newer exclusive lease or than a newer declaration of
#     the name's kind, beyond a semaphore's permits, or repeating an owner,
#     are skipped (and logged), as are rows that break the table's rules
#     (the table has no CHECK constraints: they cost too much per write),
#     a ttl out of bounds among them;
#     tokens still go above every row.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('rows');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.worker = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub holders
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(owner || ':' || mode, ',' ORDER BY token) FROM dlock_locks WHERE name = '$name'");
}

###
### 1. a release waits for the grant's transaction
###
my $a = $node->background_psql('postgres');
$a->query_safe("BEGIN; SELECT dlock_acquire('n', '1 hour', NULL, 'A')");
my $c = $node->background_psql('postgres');
$c->query_until(qr/go/, "\\echo go\nSELECT dlock_force_release('n') AS forced;\n");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"),
	'force-release waits for the grant\'s transaction');
is(holders('n'), 'A:exclusive', 'meanwhile A still holds n');
$a->query_safe('COMMIT');
like($c->query_safe('SELECT 1'), qr/^t$/m, 'force-release goes on once the grant committed');
is($node->safe_psql('postgres', "SELECT dlock_acquire('n', '1 hour', '5 s', 'D') IS NOT NULL"),
	't', 'D takes n after the force-release');
is($node->safe_psql('postgres', "SELECT string_agg(owner, ',') FROM dlock_leases WHERE name = 'n'"),
	'D', "A's row went with its lease: only D's row is left");

# the same with a release by another session presenting A's owner
$a->query_safe("BEGIN; SELECT dlock_acquire('m', '1 hour', NULL, 'A')");
$c->query_until(qr/go2/, "\\echo go2\nSELECT dlock_release('m', 'A') AS released;\n");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"),
	'a release from another session waits for the grant too');
$a->query_safe('COMMIT');
like($c->query_safe('SELECT 1'), qr/^t$/m, 'the release goes on once the grant committed');
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock_leases WHERE name = 'm'"),
	'0', 'the released lease left no row');
$a->quit;
$c->quit;

# A release's commit is not waited for; the next grant's flush carries it.
$node->safe_psql('postgres', "SELECT dlock_try('flush', '1 hour', 'F')");
$node->stop('immediate');
$node->start;
is(holders('n'), 'D:exclusive', 'after a crash, n has D alone');
is(holders('m'), '', 'after a crash, the released m stays released');

###
### 2. the rebuild restores a consistent set
###
$node->safe_psql('postgres', q{
CREATE FUNCTION put(n text, o text, t bigint, m text, p int, ttl interval,
	row_ttl interval DEFAULT '1 hour') RETURNS void
LANGUAGE sql AS $$
	INSERT INTO dlock_leases VALUES (n, o, (SELECT oid FROM pg_roles WHERE rolname = current_user),
		t, now() - interval '1 minute', now() + ttl, row_ttl, 1, m, p)
$$;
-- an exclusive lease, and a newer one: the older had ended
SELECT put('g1', 'old', 100, 'exclusive', NULL, '1 hour');
SELECT put('g1', 'new', 200, 'exclusive', NULL, '1 hour');
-- readers newer than a writer: the writer had ended
SELECT put('g2', 'x', 300, 'exclusive', NULL, '1 hour');
SELECT put('g2', 's1', 301, 'shared', NULL, '1 hour');
SELECT put('g2', 's2', 302, 'shared', NULL, '1 hour');
-- three permits of a semaphore of 2: the newest two
SELECT put('g3', 'p1', 400, 'exclusive', 2, '1 hour');
SELECT put('g3', 'p2', 401, 'exclusive', 2, '1 hour');
SELECT put('g3', 'p3', 402, 'exclusive', 2, '1 hour');
-- a semaphore, then the name as a plain lock
SELECT put('g4', 'q1', 500, 'exclusive', 3, '1 hour');
SELECT put('g4', 'q2', 501, 'exclusive', NULL, '1 hour');
-- a reader older than an expired writer: ended too
SELECT put('g5', 'r', 600, 'shared', NULL, '1 hour');
SELECT put('g5', 'w', 601, 'exclusive', NULL, '-1 minute');
-- one owner twice
SELECT put('g6', 'o', 700, 'shared', NULL, '1 hour');
SELECT put('g6', 'o', 701, 'shared', NULL, '1 hour');
-- rows that break the table's rules
SELECT put('g7', 'bad', -5, 'exclusive', NULL, '1 hour');
SELECT put('g8', repeat('o', 129), 800, 'exclusive', NULL, '1 hour');
SELECT put('g10', 'm', 1000, 'upgradable', NULL, '1 hour');
SELECT put('g11', 'z', 1100, 'exclusive', 0, '1 hour');
SELECT put('g12', 'z', 1200, 'exclusive', NULL, '1 hour', '0');
SELECT put('g13', 'z', 1300, 'exclusive', NULL, '1 hour', '7 days 1 second');
-- a healthy semaphore with a permit free
SELECT put('g9', 'f1', 900, 'exclusive', 3, '1 hour');
SELECT put('g9', 'f2', 901, 'exclusive', 3, '1 hour');
});
$node->stop('immediate');
$node->start;
is(holders('g1'), 'new:exclusive', 'rebuild: the newer exclusive lease only');
is(holders('g2'), 's1:shared,s2:shared', 'rebuild: the readers newer than the writer only');
is(holders('g3'), 'p2:exclusive,p3:exclusive', 'rebuild: a semaphore of 2 gets its newest 2 permits');
is(holders('g4'), 'q2:exclusive', 'rebuild: the newer declaration of the name wins');
is(holders('g5'), '', 'rebuild: a reader older than an expired writer is not revived');
is(holders('g6'), 'o:shared', 'rebuild: one lease per owner');
is(holders('g7') . holders('g8') . holders('g10') . holders('g11') . holders('g12') . holders('g13'), '',
	'rebuild: rows that break the rules are skipped');
is(holders('g9'), 'f1:exclusive,f2:exclusive', 'rebuild: a healthy semaphore comes back whole');
is($node->safe_psql('postgres', "SELECT dlock_try('g9', '1 minute', 'f3', permits => 3) IS NOT NULL"),
	't', 'rebuild: its free permit can be taken, with its size kept');
is($node->safe_psql('postgres', "SELECT dlock_try('g9', '1 minute', 'f4', permits => 3) IS NULL"),
	't', 'rebuild: and no more than its size');
ok($node->safe_psql('postgres', "SELECT dlock_try('fresh', '1 minute', 'z') > 901"),
	'rebuild: new tokens are above every row');
ok($node->log_contains(qr/dlock skipped \d+ ended and 6 invalid lease rows/),
	'rebuild: skipped rows are logged');

# The fencing trigger may be the first dlock call after a restart: it loads
# the lease table first, so a live lease's token is accepted.
$node->safe_psql('postgres', q{
CREATE TABLE guarded (name text, tok bigint);
CREATE TRIGGER fenced BEFORE INSERT ON guarded
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'tok');
});
my $tok = $node->safe_psql('postgres', "SELECT dlock_try('after-restart', '1 hour', 'w')");
$node->restart;
my ($rc, $out, $err) = $node->psql('postgres', "INSERT INTO guarded VALUES ('after-restart', $tok)");
is($rc, 0, 'after a restart, a fenced write is the first dlock call and is accepted') or diag($err);

$node->stop;
done_testing();
