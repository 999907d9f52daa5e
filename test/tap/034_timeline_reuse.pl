# Two histories on one timeline id: tokens still never repeat or go back.
#
# PostgreSQL names a promotion's timeline after the newest history file it
# can see, plus one.  A history that pg_rewind discards (or any promoted
# member whose WAL the others never saw) leaves no file behind when there
# is no shared WAL archive, so a later promotion of another member picks the
# same id.  make ha met it under Patroni 3.0.2: a frozen leader thawed,
# took the leader key back, and the member promoted meanwhile was rewound.
#
# Here, without Patroni: a primary streams to two standbys.  The first is
# promoted (timeline 2), hands out tokens and is stopped; then the second is
# promoted and gets timeline 2 as well.  Every token of the second history
# must be above every token of the first (tokens count from the wall clock
# on each new timeline), and the second history's tokens go on growing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
# the grace that follows a promotion (033_failover_grace.pl) is not what
# this test is about: new grants right after each promotion
dlock.failover_grace = 0
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $t0 = $primary->safe_psql('postgres', "SELECT dlock_try('p', '10 minutes', 'o')");
like($t0, qr/^\d+$/, "primary: token $t0");

$primary->backup('b');
my @standby;
for my $i (1, 2)
{
	$standby[$i] = PostgreSQL::Test::Cluster->new("standby$i");
	$standby[$i]->init_from_backup($primary, 'b', has_streaming => 1);
	$standby[$i]->start;
	$primary->wait_for_catchup($standby[$i], 'replay');
}
$primary->stop;

sub timeline
{
	my ($node) = @_;
	$node->safe_psql('postgres', 'CHECKPOINT');
	return $node->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
}

# the first history on timeline 2: a few hundred tokens
$standby[1]->promote;
is(timeline($standby[1]), 2, 'standby1: promoted onto timeline 2');
my $first = $standby[1]->safe_psql('postgres', q{
SELECT max(dlock_try('a:' || i, '10 minutes', 'o1')) FROM generate_series(1, 300) i});
cmp_ok($first, '>', $t0, "standby1: tokens above the primary's ($first)");
cmp_ok($first >> 48, '==', 2, 'standby1: tokens carry timeline 2');
$standby[1]->stop;

# the second history on timeline 2: it never saw the first one's WAL
$standby[2]->promote;
is(timeline($standby[2]), 2, 'standby2: promoted onto timeline 2 as well (the id is reused)');
my @second = split /\n/, $standby[2]->safe_psql('postgres', q{
SELECT dlock_try('b:' || i, '10 minutes', 'o2') FROM generate_series(1, 300) i ORDER BY i});
is(scalar(@second), 300, 'standby2: 300 grants');
cmp_ok($second[0], '>', $first,
	"standby2: its first token $second[0] is above the first history's largest $first");
my $grows = 1;
for my $i (1 .. $#second)
{
	$grows = 0 unless $second[$i] > $second[$i - 1];
}
ok($grows, 'standby2: its tokens grow');
cmp_ok($second[0] >> 48, '==', 2, 'standby2: tokens carry timeline 2');

# and after a crash of the second history's primary, tokens stay above
$standby[2]->stop('immediate');
$standby[2]->start;
my $after = $standby[2]->safe_psql('postgres', "SELECT dlock_try('c', '10 minutes', 'o3')");
cmp_ok($after, '>', $second[-1], "standby2 after a crash: token $after above $second[-1]");

$standby[2]->stop;
done_testing();
