# Fencing tokens after pg_upgrade: the new cluster has no token file and
# starts on timeline 1, but every database carries its dlock_token_floor, so
# new tokens are above every token the old cluster issued.  Rows fenced
# before the upgrade still refuse a stale token and take the new ones.
# Also a dump and restore of one database into a fresh cluster.
use strict;
use warnings;
use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = qq{
shared_preload_libraries = 'dlock'
};
my $old = PostgreSQL::Test::Cluster->new('old');
$old->init;
$old->append_conf('postgresql.conf', $conf);
# the old cluster has issued many tokens, far above where a fresh cluster
# starts: the documented way to set the token file's floor
# (a fresh cluster starts at timeline 1's base plus the wall clock in 10 us
# units since 2020, below 2^47 until 2064)
my $high = 281474976710656 + 140737488355328;
open(my $fh, '>', $old->data_dir . '/pg_dlock.tokens') or die $!;
print $fh "$high\n";
close $fh;
$old->start;
$old->safe_psql('postgres', q{
CREATE EXTENSION dlock;
CREATE TABLE jobs (id int PRIMARY KEY, name text, tok bigint);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON jobs
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'tok');
});
# a few holders come and go; the last one writes the row, then releases
my $t1;
for my $i (1 .. 5)
{
	$t1 = $old->safe_psql('postgres', "SELECT dlock_try('job', '1 minute', 'w$i')");
	$old->safe_psql('postgres', "SELECT dlock_release('job', 'w$i')") if $i < 5;
}
$old->safe_psql('postgres', "INSERT INTO jobs VALUES (1, 'job', $t1)");
$old->safe_psql('postgres', "SELECT dlock_release('job', 'w5')");
# a memory-only lease's token counts too
my $t2 = $old->safe_psql('postgres', q{SET dlock.durable = off; SELECT dlock_try('mem', '1 minute', 'm')});
cmp_ok($t1, '>=', $high, 'old cluster: tokens start at the token file\'s floor');
cmp_ok($t2, '>', $t1, 'old cluster: tokens grow');
is($old->safe_psql('postgres', 'SELECT count(*) FROM dlock_leases'), '0', 'old cluster: no lease row is left');

# dump one database now, for the restore below
my $dump = PostgreSQL::Test::Utils::tempdir() . '/db.sql';
$old->command_ok([ 'pg_dump', '-d', $old->connstr('postgres'), '-f', $dump ], 'pg_dump');
$old->stop;

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->append_conf('postgresql.conf', $conf);
my $bindir = $new->config_data('--bindir');
# (old and new are the same major version: the one under test)
my ($major) = $new->config_data('--version') =~ /(\d+)/;
my $workdir = tempdir(CLEANUP => 1);
chdir $workdir;
command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-d', $old->data_dir, '-D', $new->data_dir,
		'-b', $bindir, '-B', $bindir,
		'-s', $new->host, '-p', $old->port, '-P', $new->port
	],
	"pg_upgrade from $major to $major");
$new->start;
my $t3 = $new->safe_psql('postgres', q{SELECT dlock_try('job', '1 minute', 'after')});
cmp_ok($t3, '>', $t2, "after pg_upgrade, a new token ($t3) is above every old one ($t2)");
my ($rc, $out, $err) = $new->psql('postgres', "UPDATE jobs SET tok = $t1 - 1 WHERE id = 1");
isnt($rc, 0, 'a fenced row written before the upgrade refuses a stale token');
like($err, qr/stale fencing token|below the token/, '... with the fencing error');
($rc, $out, $err) = $new->psql('postgres', "UPDATE jobs SET tok = $t3 WHERE id = 1");
is($rc, 0, '... and takes the new token') or diag($err);
$new->safe_psql('postgres', q{SELECT dlock_release('job', 'after')});
$new->stop;

# a dump restored into a fresh cluster (no token file, timeline 1)
my $fresh = PostgreSQL::Test::Cluster->new('fresh');
$fresh->init;
$fresh->append_conf('postgresql.conf', $conf);
$fresh->start;
$fresh->safe_psql('postgres', 'CREATE DATABASE restored');
$fresh->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $fresh->connstr('restored'), '-f', $dump ],
	'the dump restores');
my $t4 = $fresh->safe_psql('restored', q{SELECT dlock_try('job', '1 minute', 'r')});
cmp_ok($t4, '>', $t2, "after a dump and restore, a new token ($t4) is above every old one ($t2)");
$fresh->stop;

done_testing();
