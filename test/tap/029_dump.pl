# pg_dump and pg_restore of a database that uses dlock: custom (-Fc) and
# plain formats, into a new database of the same cluster and into a new
# cluster whose token file starts far below the old one's.
#
# The dump is taken while leases are held (their rows are in dlock_leases).
# Leases are not data: the restore brings none back and does not fail on
# dlock_leases.  What it brings: a table fenced by dlock_fenced and a table
# versioned by dlock_versioned, with their triggers, which still refuse a
# stale token and a stale version; and the database's token floor, so a new
# token is above every token stored in the restored rows, also in a cluster
# that never issued them.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = qq{
shared_preload_libraries = 'dlock'
};

my $old = PostgreSQL::Test::Cluster->new('old');
$old->init;
$old->append_conf('postgresql.conf', $conf);
# the old cluster's tokens are far above where a new cluster's start
# (a fresh cluster starts at timeline 1's base plus the wall clock in 10 us
# units since 2020, below 2^47 until 2064)
my $high = 281474976710656 + 140737488355328;
open(my $fh, '>', $old->data_dir . '/pg_dlock.tokens') or die $!;
print $fh "$high\n";
close $fh;
$old->start;
$old->safe_psql('postgres', q{
CREATE DATABASE app;
});
$old->safe_psql('app', q{
CREATE EXTENSION dlock;
CREATE TABLE jobs (id int PRIMARY KEY, name text, tok bigint);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON jobs
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'tok');
CREATE TABLE docs (id int PRIMARY KEY, body text, version bigint);
CREATE TRIGGER versioned BEFORE INSERT OR UPDATE ON docs
	FOR EACH ROW EXECUTE FUNCTION dlock_versioned('version');
INSERT INTO docs (id, body) VALUES (1, 'first');
UPDATE docs SET body = 'second', version = 1 WHERE id = 1;
});
# writes under a lease; the last holder keeps its lease while the dump runs
my $tok;
for my $i (1 .. 3)
{
	$tok = $old->safe_psql('app', "SELECT dlock_try('job', '1 hour', 'w$i')");
	$old->safe_psql('app', "INSERT INTO jobs VALUES ($i, 'job', $tok)");
	$old->safe_psql('app', "SELECT dlock_release('job', 'w$i')") if $i < 3;
}
$old->safe_psql('app', q{SELECT dlock_try('other', '1 hour', 'h', 'shared')});
cmp_ok($tok, '>=', $high, 'old cluster: tokens start at its token file');
is($old->safe_psql('app', 'SELECT count(*) FROM dlock_leases'), '2',
	'old cluster: two leases held while the dump runs');
my $max_tok = $old->safe_psql('app', 'SELECT max(tok) FROM jobs');

my $dir = PostgreSQL::Test::Utils::tempdir();
$old->command_ok([ 'pg_dump', '-Fc', '-d', $old->connstr('app'), '-f', "$dir/app.dump" ],
	'pg_dump -Fc');
$old->command_ok([ 'pg_dump', '-d', $old->connstr('app'), '-f', "$dir/app.sql" ], 'pg_dump (plain)');

# Checks a restored database: no leases, triggers that refuse stale writes,
# new tokens above every stored one.
sub check_restored
{
	my ($node, $db, $what) = @_;
	is($node->safe_psql($db, 'SELECT count(*) FROM dlock_leases'), '0',
		"$what: no lease is restored");
	is($node->safe_psql($db, q{SELECT count(*) FROM dlock_locks}), '0',
		"$what: no lease is held");
	is($node->safe_psql($db, 'SELECT max(tok) FROM jobs'), $max_tok,
		"$what: the fenced rows are restored");
	my ($rc, $out, $err) = $node->psql($db, "UPDATE jobs SET tok = $max_tok - 1 WHERE id = 3");
	isnt($rc, 0, "$what: the fenced table refuses a stale token");
	like($err, qr/stale fencing token|below the token/, "$what: ... with the fencing error");
	($rc, $out, $err) = $node->psql($db, q{UPDATE docs SET body = 'stale', version = 1 WHERE id = 1});
	isnt($rc, 0, "$what: the versioned table refuses a stale version");
	like($err, qr/version/, "$what: ... with the version error");
	is($node->safe_psql($db, q{UPDATE docs SET body = 'third', version = 2 WHERE id = 1 RETURNING version}),
		'3', "$what: the versioned table takes the current version");
	my $t = $node->safe_psql($db, q{SELECT dlock_try('job', '1 hour', 'new')});
	cmp_ok($t, '>', $max_tok, "$what: a new token ($t) is above every restored one ($max_tok)");
	($rc, $out, $err) = $node->psql($db, "UPDATE jobs SET tok = $t WHERE id = 3");
	is($rc, 0, "$what: the fenced table takes the new token") or diag($err);
	$node->safe_psql($db, q{SELECT dlock_release('job', 'new')});
}

# Restores both dumps into new databases from_custom and from_plain of
# $node, and checks each; $where names the cluster in the test names.
sub restore_both
{
	my ($node, $where) = @_;
	$node->safe_psql('postgres', 'CREATE DATABASE from_custom');
	$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('from_custom'), "$dir/app.dump" ],
		"pg_restore of the custom dump into a new database ($where)");
	check_restored($node, 'from_custom', "$where, custom format");
	$node->safe_psql('postgres', 'CREATE DATABASE from_plain');
	$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('from_plain'), '-f', "$dir/app.sql" ],
		"psql restore of the plain dump into a new database ($where)");
	check_restored($node, 'from_plain', "$where, plain format");
}

# into new databases of the same cluster
restore_both($old, 'same cluster');
is($old->safe_psql('app', 'SELECT count(*) FROM dlock_leases'), '2',
	'the dumped database still holds its leases');
$old->stop;

# into a new cluster, whose tokens start far below the old one's
my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->append_conf('postgresql.conf', $conf);
$new->start;
$new->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $fresh_tok = $new->safe_psql('postgres', q{SELECT dlock_try('x', '1 minute', 'x')});
cmp_ok($fresh_tok, '<', $max_tok, "new cluster: its own tokens ($fresh_tok) start below the restored ones");
restore_both($new, 'new cluster');
# -C: the dump creates its database itself
$new->command_ok([ 'pg_restore', '--exit-on-error', '-C', '-d', $new->connstr('postgres'), "$dir/app.dump" ],
	'pg_restore -C of the custom dump into a new cluster');
check_restored($new, 'app', 'new cluster, pg_restore -C');
$new->stop;

done_testing();
