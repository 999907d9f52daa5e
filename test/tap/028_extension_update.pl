# ALTER EXTENSION dlock UPDATE on a live server keeps every lease.
#
# A database runs dlock 1.0's SQL with leases of every kind held; the server
# restarts (as installing a new library needs: it is preloaded) and serves
# the 1.0 SQL with the new library; then the update runs the upgrade chain
# while another session holds a grant in an open transaction.  Every lease
# keeps its owner, token, mode and expiry, the held ones can be renewed and
# released by their tokens, and new tokens are above the old ones.
# (sql/upgrade.sql checks that the updated extension equals a fresh install.)
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('update');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
});
$node->start;

my $default = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'dlock'");
isnt($default, '1.0', "the library's default version ($default) is past 1.0");

$node->safe_psql('postgres', q{CREATE EXTENSION dlock VERSION '1.0'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
	'1.0', 'installed at 1.0');

# leases of every kind: exclusive, shared by two owners, a semaphore's two
# permits, one memory-only (ends with the restart, as any memory lease)
my %token;
$token{'job'} = $node->safe_psql('postgres', q{SELECT dlock_try('job', '1 hour', 'w1')});
$token{'doc:a'} = $node->safe_psql('postgres', q{SELECT dlock_try('doc', '1 hour', 'a', 'shared')});
$token{'doc:b'} = $node->safe_psql('postgres', q{SELECT dlock_try('doc', '1 hour', 'b', 'shared')});
$token{'pool:p1'} = $node->safe_psql('postgres', q{SELECT dlock_try('pool', '1 hour', 'p1', permits => 2)});
$token{'pool:p2'} = $node->safe_psql('postgres', q{SELECT dlock_try('pool', '1 hour', 'p2', permits => 2)});
$node->safe_psql('postgres', q{SET dlock.durable = off; SELECT dlock_try('mem', '1 hour', 'm')});
my $max_old = (sort { $b <=> $a } values %token)[0];

# who holds what; a restart gives restored leases their full ttl again, so
# the expiry is compared only across the update
my $ident = q{name || '/' || owner || '/' || token || '/' || mode || '/' || coalesce(permits::text, '-')};
my $leases_q = "SELECT string_agg($ident, ' ' ORDER BY token) FROM dlock_locks";
my $expiry_q = "SELECT $ident, extract(epoch FROM expires_at) FROM dlock_locks";

# lease => expiry (seconds) from $expiry_q's output
sub expiries
{
	my %e = map { split /\|/ } split /\n/, $_[0];
	return \%e;
}

# same leases, each expiry within a millisecond (the view derives the wall
# clock expiry from the monotonic one at each read)
sub same_expiries
{
	my ($got, $want, $what) = @_;
	my ($g, $w) = (expiries($got), expiries($want));
	my @diff = grep { !exists $g->{$_} || abs($g->{$_} - $w->{$_}) > 0.001 } keys %$w;
	push @diff, grep { !exists $w->{$_} } keys %$g;
	ok(keys(%$w) > 0 && !@diff, $what) or diag("got:\n$got\nwant:\n$want");
}
my $before = $node->safe_psql('postgres', $leases_q);
like($before, qr/^job\/w1\/$token{'job'}\//, 'leases held under 1.0');

$node->restart;
my $restarted = $node->safe_psql('postgres', $leases_q);
is($restarted, join(' ', grep { !/^mem\// } split / /, $before),
	'after the restart: every durable lease is back as it was (the memory-only one ended)');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
	'1.0', 'still 1.0 after the restart');
# the new library serves 1.0's SQL: a try, a renewal, a fence
my $t_mid = $node->safe_psql('postgres', q{SELECT dlock_try('mid', '1 hour', 'x')});
cmp_ok($t_mid, '>', $max_old, 'under 1.0 with the new library: a new grant, above every old token');
$node->safe_psql('postgres', q{SELECT dlock_renew('job', '1 hour', 'w1')});
$node->safe_psql('postgres', "BEGIN; SELECT dlock_fence('job', $token{'job'}); COMMIT;");
$node->safe_psql('postgres', q{SELECT dlock_release('mid', 'x')});
my $under_old = $node->safe_psql('postgres', $expiry_q);

# a grant in a transaction left open across the update
my $open = $node->background_psql('postgres');
$open->query_safe('BEGIN');
my $t_open = $open->query_safe(q{SELECT dlock_try('open', '1 hour', 'o')});

my ($rc, $out, $err) = $node->psql('postgres',
	q{SET lock_timeout = '10s'; ALTER EXTENSION dlock UPDATE});
is($rc, 0, 'ALTER EXTENSION dlock UPDATE runs while a grant\'s transaction is open') or diag($err);
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
	$default, "updated to $default");
$open->query_safe('COMMIT');
$open->quit;

same_expiries($node->safe_psql('postgres', "$expiry_q WHERE name <> 'open'"), $under_old,
	'after the update: every lease kept its owner, token, mode and expiry');
is($node->safe_psql('postgres', q{SELECT token FROM dlock_locks WHERE name = 'open'}),
	$t_open, 'the grant committed across the update holds its token');

# the old leases work as before
ok($node->safe_psql('postgres', q{SELECT dlock_renew('doc', '1 hour', 'a') IS NOT NULL}) eq 't',
	'a shared lease taken under 1.0 renews');
is($node->safe_psql('postgres', "SELECT dlock_release('job', 'w1', $token{'job'})"),
	't', 'the exclusive lease taken under 1.0 releases by its token');
is($node->safe_psql('postgres', q{SELECT dlock_try('pool', '1 hour', 'p3', permits => 2)}),
	'', 'the semaphore still counts its two permits taken under 1.0');
my $t_new = $node->safe_psql('postgres', q{SELECT dlock_try('job', '1 hour', 'w2')});
cmp_ok($t_new, '>', $t_open, 'a new grant after the update is above every token before it');
($rc, $out, $err) = $node->psql('postgres', "BEGIN; SELECT dlock_fence('job', $token{'job'}); COMMIT;");
like($err, qr/DL001|stale|not held|no longer/i, 'the released lease\'s token is refused by dlock_fence');

# and a restart after the update restores them again
my $final = $node->safe_psql('postgres', $leases_q);
$node->restart;
is($node->safe_psql('postgres', $leases_q), $final, 'a restart after the update restores the same leases');

$node->stop;
done_testing();
