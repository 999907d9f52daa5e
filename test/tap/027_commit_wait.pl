# What a durable lease operation's commit waits for.
#
# A grant, a renewal and an extension are promises: their commit waits for
# its WAL to be flushed (and, with synchronous replication, replicated)
# whatever synchronous_commit says, local and off included.  A release does not wait: if a crash
# loses it, the lease comes back and lasts until its TTL.  A transaction
# that wrote anything besides its releases commits as synchronous_commit
# says.
#
# The server names a synchronous standby that never connects, so a commit
# that waits for its WAL shows the wait event SyncRep until it is cancelled,
# while one that does not wait returns at once: the test sees which.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('commit_wait');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.worker = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock; CREATE TABLE t (i int)');
$node->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
$node->reload;

# Runs $sql in a new session.  Returns 1 if its commit waited for
# replication (it is then cancelled: the transaction stays committed
# locally), 0 if it finished without waiting.
sub commit_waits
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(60));
	for (1 .. 600)
	{
		if ($node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") > 0)
		{
			$node->safe_psql('postgres',
				"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
			$h->finish;
			return 1;
		}
		$h->pump_nb;
		if (!$h->pumpable)
		{
			$h->finish;
			die "\"$sql\" failed: $err" if $h->result != 0;
			return 0;
		}
		usleep(100_000);
	}
	die "\"$sql\" neither finished nor waited";
}

sub rows
{
	my ($name) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM dlock_leases WHERE name = '$name'");
}

is(commit_waits("SELECT dlock_try('a', '1 hour', 'o')"), 1, 'a grant waits');
is(rows('a'), 1, 'the grant committed (locally) all the same');
is(commit_waits("SELECT dlock_renew('a', '1 hour', 'o')"), 1, 'a renewal waits');
is(commit_waits("SELECT dlock_try('a', '1 hour', 'o')"), 1,
	'an extension (the holder taking its lease again) waits');
is(commit_waits("SELECT dlock_release('a', 'o')"), 0, 'a release does not wait');
is(rows('a'), 0, 'the release committed');

commit_waits("SELECT dlock_try('$_', '1 hour', 'o')") for qw(b c d e f);
is(commit_waits("BEGIN; SELECT dlock_release('b', 'o'); SELECT dlock_release('c', 'o'); COMMIT"),
	0, 'two releases in one transaction do not wait');
is(commit_waits("BEGIN; SELECT dlock_release('d', 'o'); INSERT INTO t VALUES (1); COMMIT"),
	1, 'a release followed by another write waits');
is(commit_waits("BEGIN; INSERT INTO t VALUES (2); SELECT dlock_release('e', 'o'); COMMIT"),
	1, 'a release after another write waits');
is(commit_waits("BEGIN; SELECT dlock_release('f', 'o'); SELECT dlock_try('g', '1 hour', 'o'); COMMIT"),
	1, 'a release and a grant in one transaction wait');
is($node->safe_psql('postgres',
		"SELECT string_agg(name, ',' ORDER BY name) FROM dlock_leases"),
	'g', 'rows: only g is held');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), '2', 'the other writes committed');

# a session whose synchronous_commit waits for no standby (local, off) still
# gets grants, renewals and extensions that wait for the synchronous standby
for my $setting (qw(local off))
{
	is(commit_waits("SET synchronous_commit = $setting; SELECT dlock_try('l-$setting', '1 hour', 'o')"),
		1, "a grant waits under synchronous_commit = $setting");
	is(commit_waits("SET synchronous_commit = $setting; SELECT dlock_renew('l-$setting', '1 hour', 'o')"),
		1, "a renewal waits under synchronous_commit = $setting");
	is(commit_waits("SET synchronous_commit = $setting; SELECT dlock_try('l-$setting', '1 hour', 'o')"),
		1, "an extension waits under synchronous_commit = $setting");
	is(commit_waits("SET synchronous_commit = $setting; SELECT dlock_release('l-$setting', 'o')"),
		0, "a release does not wait under synchronous_commit = $setting");
}
is(commit_waits("SET synchronous_commit = local; INSERT INTO t VALUES (3)"),
	0, 'other writes under synchronous_commit = local do not wait');
$node->safe_psql('postgres', 'SET synchronous_commit = local; DELETE FROM t WHERE i = 3');

# with an owner's trigger on the table, rows are written through SQL and the
# trigger may write more than the row: a release then waits
$node->safe_psql('postgres', q{
SET synchronous_commit = local;
CREATE TABLE audit (op text);
CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS
	$$ BEGIN INSERT INTO audit VALUES (TG_OP); RETURN NULL; END $$;
CREATE TRIGGER audit AFTER INSERT OR DELETE ON dlock_leases
	FOR EACH ROW EXECUTE FUNCTION audit();
});
commit_waits("SELECT dlock_try('h', '1 hour', 'o')");
is(commit_waits("SELECT dlock_release('h', 'o')"), 1,
	'a release whose row goes through an owner\'s trigger waits');
is($node->safe_psql('postgres', "SELECT string_agg(op, ',' ORDER BY op) FROM audit"),
	'DELETE,INSERT', 'the trigger saw the grant and the release');
$node->safe_psql('postgres',
	'SET synchronous_commit = local; DROP TRIGGER audit ON dlock_leases');

# synchronous_commit is the caller's again after a release's commit
is($node->safe_psql('postgres',
		"SELECT dlock_release('g', 'o'); SHOW synchronous_commit"),
	"t\non", 'synchronous_commit is unchanged after a release');

# without a synchronous standby nothing waits: a session's own setting is
# back after a grant raised it for its commit
$node->safe_psql('postgres', "ALTER SYSTEM RESET synchronous_standby_names");
$node->reload;
is($node->safe_psql('postgres', q{
SET synchronous_commit = local;
SELECT dlock_try('l-show', '1 minute', 'o') > 0;
SHOW synchronous_commit;
SELECT dlock_release('l-show', 'o');
}), "t\nlocal\nt", 'a session\'s synchronous_commit is its own again after a grant commits');

$node->stop;
done_testing();
