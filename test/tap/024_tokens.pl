# A token reservation that fails (the token file cannot be written) under
# load: the calls that need tokens fail with an error, and nothing worse
# happens.  No partition lock is held while the file is written, no error is
# raised in a commit callback (no PANIC), a waiter whose grant found no
# token reserves tokens itself and fails cleanly (it does not hang), and
# once the file can be written again everything works and tokens still
# grow.  dlock.token_block (a developer option) makes reservations frequent.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

$SIG{PIPE} = 'IGNORE';

my $node = PostgreSQL::Test::Cluster->new('tokens');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.token_block = 4
statement_timeout = '20s'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $before = $node->safe_psql('postgres', q{SELECT dlock_try('first', '1 minute', 'o')});

# a waiter queued behind a holder (before the disk fails); the holder's
# release grants it in a commit callback, which then finds no token
$node->safe_psql('postgres', q{SELECT dlock_try('queued', '1 minute', 'holder')});
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$waiter->query_until(qr/sent/,
	"\\echo sent\nSELECT dlock_acquire('queued', '1 minute', '15 s', 'waiter') IS NOT NULL AS got;\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock_waiters WHERE name = 'queued'}),
	'the waiter is queued');

# A directory in the way of the file's temporary copy: every reservation
# fails (EISDIR), as on a full or failing disk.
my $blocker = $node->data_dir . '/pg_dlock.tokens.tmp';
mkdir $blocker or die "mkdir $blocker: $!";

# many grants from several sessions: the tokens reserved run out at once
my $failures = 0;
for my $i (1 .. 20)
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT count(dlock_try('n$i-' || g, '1 minute', 'o')) FROM generate_series(1, 5) g");
	$failures++ if $rc != 0 && $err =~ /could not write file "pg_dlock\.tokens\.tmp"/;
}
cmp_ok($failures, '>', 0, "grants fail cleanly when no token can be reserved ($failures of 20 statements)");

my ($rc, $out, $err) = $node->psql('postgres', q{SELECT dlock_release('queued', 'holder')});
is($rc, 0, 'a release needs no token: it commits (its commit callback grants nothing it cannot)')
  or diag($err);

# the waiter is woken, tries to reserve tokens itself and fails cleanly
my $res = $waiter->query(q{SELECT 'after'});
like($res, qr/after/, 'the waiter returned (it did not hang)');
like($waiter->{stderr}, qr/could not write file "pg_dlock\.tokens\.tmp"/, '... with the file error');
ok(!$node->log_contains(qr/PANIC|TRAP:|terminated by signal|server process .* exited with exit code [^01]/),
	'no PANIC, no crash');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock_waiters}), '0', 'nobody is left queued');

# the disk is back
rmdir $blocker or die "rmdir $blocker: $!";
my $after = $node->safe_psql('postgres', q{SELECT dlock_try('later', '1 minute', 'o')});
cmp_ok($after, '>', $before, 'once the file can be written, grants work and tokens still grow');
is($node->safe_psql('postgres', q{SELECT dlock_acquire('queued', '1 minute', '5 s', 'again') IS NOT NULL}), 't',
	'the queued name can be taken');
$waiter->quit;

$node->restart;
my $restarted = $node->safe_psql('postgres', q{SELECT dlock_try('after-restart', '1 minute', 'o')});
cmp_ok($restarted, '>', $after, 'after a restart tokens are above every one issued');

$node->stop;
done_testing();
