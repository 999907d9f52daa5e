# Crash tests: dlock's durability claims, with a real server killed for real.
#
# A load client (test/load/crashload.c) runs 8 clients that take, renew and
# release leases in autocommit and leave some grants in transactions that
# never commit, logging every answer of the server as soon as it arrives.
# Mid-run the server is killed: an immediate shutdown (SIGQUIT to every
# process, no checkpoint), or a kill -9 of a single backend (the postmaster
# then kills every other backend and reinitialises shared memory).  After the
# restart, "crashload check" compares the logs with dlock_locks and
# dlock_leases:
#   (a) every lease whose last acknowledged event was an autocommit grant or
#       renewal is there, same owner, same token; uncommitted grants are
#       not, and acknowledged releases are not either, except a release the
#       crash lost (its commit is not waited for), whose lease may be back
#       whole (same owner, same token) if its client had no grant or
#       renewal acknowledged after it;
#   (b) no name has two owners;
#   (c) a new token is above every token any client ever saw.
# Four checkers run at once after each restart (they race to rebuild shared
# memory from the table and must all agree), and the leases of every earlier
# durable round are checked again after each later crash.
# Rounds: synchronous_commit on (immediate, kill -9, and a clean fast
# shutdown for comparison) and off (with the WAL writer nearly idle; both
# kinds of crash), and memory-only mode (dlock.durable = off), where the
# leases are gone after the restart but tokens still never go backwards.
# Last, tokens are driven across a reservation block boundary and the
# server crashed at once: the next token is still above.
# DLOCK_CRASH_SEED repeats a run's random choices (victims, crash moments,
# client choices); the server's timing still varies.
# The rounds check the contract of dlock.flush_grants = on (every
# acknowledged grant and renewal is flushed, no grace after a crash); the
# clients' ttl of 10 minutes is above dlock.failover_grace, so it would be
# flushed anyway, but the checkers' grants of a minute would not, and each
# crash would then begin a grace that holds the next checkers' grants.
# Unflushed grants and the crash grace: 038_crash_grace.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = $PostgreSQL::Test::Utils::tmp_check;
my $crashload = "$tmp/crashload";
my $seed = $ENV{DLOCK_CRASH_SEED} // (time() % 100000);
note "seed $seed (set DLOCK_CRASH_SEED to repeat a run's choices)";
srand($seed);

# Build the load client next to the test's other scratch files.
my ($out, $err);
IPC::Run::run([ 'make', '-s', '-C', "$FindBin::RealBin/../load", "O=$tmp", 'crashload' ],
	'>', \$out, '2>', \$err)
  or BAIL_OUT("could not build crashload: $out$err");

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
max_connections = 40
restart_after_crash = on
log_statement = none
dlock.flush_grants = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

# Unexpected trouble in the server log since $offset: crashes other than
# our kill -9, assertion failures, PANICs, and ERRORs.  After a fast
# shutdown, sessions end with FATAL and background workers with exit code 1.
sub server_trouble
{
	my ($offset, $crash) = @_;
	my @bad;
	for my $line (split /\n/, slurp_file($node->logfile, $offset))
	{
		next
		  if $line =~
		  /was terminated by signal 9: Killed|FATAL:  the database system is (in recovery mode|starting up|shutting down|not yet accepting connections)/;
		next
		  if $crash eq 'fast'
		  && $line =~
		  /FATAL:  terminating connection due to administrator command|background worker ".*" \(PID \d+\) exited with exit code 1/;
		push @bad, $line
		  if $line =~
		  /PANIC|TRAP|terminated by signal|exited with exit code|ERROR:|FATAL:/;
	}
	return @bad;
}

# Waits until every client's log has at least $lines lines.
sub wait_for_load
{
	my ($dir, $clients, $lines) = @_;
	for (my $i = 0; $i < 300; $i++)
	{
		my $ready = 0;
		for my $c (1 .. $clients)
		{
			my $f = "$dir/client-$c.log";
			next unless -f $f;
			my $n = () = slurp_file($f) =~ /\n/g;
			$ready++ if $n >= $lines;
		}
		return 1 if $ready == $clients;
		usleep(100_000);
	}
	return 0;
}

my @durable_rounds;    # rounds whose leases must live on

# One round: load, crash, restart, check.
#   crash  => 'immediate' (pg_ctl stop -m immediate), 'kill9' (one backend),
#             or 'fast' (a clean shutdown, for comparison)
#   memory => 1 for memory-only mode (dlock.durable = off in the config)
sub crash_round
{
	my (%args) = @_;
	my $name = $args{name};
	my $dir = "$tmp/crashload-$name";
	my $clients = 8;
	my $offset = -s $node->logfile;
	my ($lout, $lerr) = ('', '');

	note "round $name: crash by $args{crash}"
	  . ($args{memory} ? ', memory-only mode' : '');
	my $load = IPC::Run::start(
		[
			$crashload, 'run',
			'-d', $node->connstr('postgres'),
			'-o', $dir,
			'-c', $clients,
			'-t', 30,
			'-n', 32,
			'-p', "$name:k",
			'-s', $seed
		],
		'>', \$lout, '2>', \$lerr,
		IPC::Run::timeout(90));

	ok(wait_for_load($dir, $clients, 200), "$name: all $clients clients are busy");
	# a little more load, and a crash at a moment that varies
	usleep(500_000 + int(rand(1_000_000)));

	if ($args{crash} ne 'kill9')
	{
		$node->stop($args{crash});
	}
	else
	{
		my $victim = 1 + int(rand($clients));
		my $pid = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE application_name = 'crashload-c$victim'");
		ok($pid =~ /^\d+$/, "$name: found the backend of client c$victim");
		note "kill -9 of backend $pid (client c$victim)";
		kill 'KILL', $pid;
		$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	}

	# the clients notice the dead connections and stop by themselves
	eval { $load->finish; };
	is($@, '', "$name: crashload stopped after the crash") or $load->kill_kill;
	is($load->full_result(0), 0, "$name: every client ran") or diag("$lout$lerr");
	note $lout;

	if ($args{crash} ne 'kill9')
	{
		$node->start;
	}
	else
	{
		ok($node->poll_query_until('postgres', 'SELECT true'),
			"$name: the server is back after reinitialising");
	}

	# The check, on a server whose shared memory starts from nothing.  Four
	# checkers at once: they race to be the one that restores the leases
	# from the table, and must all see the same.
	my @checkers;
	for my $k (1 .. 4)
	{
		my ($cout, $cerr) = ('', '');
		my @check = ($crashload, 'check', '-d', $node->connstr('postgres'), '-o', $dir);
		push @check, '-m' if $args{memory};
		my $h = IPC::Run::start(\@check, '>', \$cout, '2>', \$cerr, IPC::Run::timeout(60));
		push @checkers, [ $h, \$cout, \$cerr ];
	}
	my $cout;
	for my $k (0 .. $#checkers)
	{
		my ($h, $o, $e) = @{ $checkers[$k] };
		my $ok = eval { $h->finish };
		ok($ok, "$name: checker " . ($k + 1) . " of 4 finds no violation")
		  or diag("$$o$$e$@");
		$cout //= $$o;
		my ($these) = $$o =~ /(leases expected .*)/;
		my ($first) = $cout =~ /(leases expected .*)/;
		is($these, $first, "$name: checker " . ($k + 1) . " saw the same leases as checker 1");
	}
	note $cout;

	my %c;
	$c{grants} = $1 if $cout =~ /grants (\d+)/;
	$c{uncommitted} = $1 if $cout =~ /uncommitted (\d+)/;
	$c{lost} = $1 if $cout =~ /lost in the crash (\d+)/;
	$c{held} = $1 if $cout =~ /held at the crash (\d+)/;
	($c{expected}, $c{found}, $c{matched}) = ($1, $2, $3)
	  if $cout =~ /leases expected (\d+), found (\d+), matched (\d+)/;
	# the round proves something only if there was something to lose
	cmp_ok($c{grants} // 0, '>', 100, "$name: clients were granted leases");
	cmp_ok($c{uncommitted} // 0, '>', 0, "$name: some tokens came from transactions that never committed");
	cmp_ok($c{held} // 0, '>', 0, "$name: some leases were held at the crash");
	cmp_ok($c{lost} // 0, '>', 0, "$name: the crash cut off calls in flight");
	if ($args{memory})
	{
		is($c{found}, 0, "$name: memory-only leases are gone after the crash");
	}
	else
	{
		cmp_ok($c{matched} // 0, '>=', $c{expected} // 1,
			"$name: every expected lease was found, same owner and token");
	}

	# The leases of the earlier rounds are still there, after this crash too.
	for my $prev (@durable_rounds)
	{
		my ($pout, $perr) = ('', '');
		my $ok = IPC::Run::run(
			[ $crashload, 'check', '-d', $node->connstr('postgres'), '-o', "$tmp/crashload-$prev" ],
			'>', \$pout, '2>', \$perr);
		ok($ok, "$name: round $prev still checks out") or diag("$pout$perr");
	}
	push @durable_rounds, $name unless $args{memory};

	my @bad = server_trouble($offset, $args{crash});
	is(scalar(@bad), 0, "$name: no unexpected errors or crashes in the server log")
	  or diag(join("\n", @bad));
	return;
}

is($node->safe_psql('postgres', 'SHOW synchronous_commit'), 'on', 'synchronous_commit is on');
crash_round(name => 'sync-immediate', crash => 'immediate');
crash_round(name => 'sync-kill9', crash => 'kill9');
# not a crash: a clean restart must keep the leases just the same
crash_round(name => 'sync-fast', crash => 'fast');

# Asynchronous commit, and a WAL writer that waits as long as it can: an
# acknowledged lease survives only because dlock forces its commit to disk.
$node->append_conf('postgresql.conf', "synchronous_commit = off\nwal_writer_delay = 10s");
$node->reload;
is($node->safe_psql('postgres', 'SHOW synchronous_commit'), 'off', 'synchronous_commit is off');
crash_round(name => 'async-immediate', crash => 'immediate');
crash_round(name => 'async-kill9', crash => 'kill9');

# Memory-only mode: leases are lost, tokens still only go up.
$node->append_conf('postgresql.conf', 'dlock.durable = off');
$node->reload;
is($node->safe_psql('postgres', 'SHOW dlock.durable'), 'off', 'dlock.durable is off');
crash_round(name => 'memory-immediate', crash => 'immediate', memory => 1);
crash_round(name => 'memory-kill9', crash => 'kill9', memory => 1);

# A token block reserved while the server runs (not only the first one
# after a start) is durable too: cross the end of the block the token file
# reserves (blocks start where a timeline's tokens start, not at round
# numbers), crash at once, and the next token is above the last one.
my $before = $node->safe_psql('postgres', "SELECT dlock_try('cross:a', '1 minute', 'x')");
my $end = $node->safe_psql('postgres', "SELECT trim(pg_read_file('pg_dlock.tokens'))");
my $to_cross = $end - $before + 5;
cmp_ok($to_cross, '<=', 1_500_005, "the reservation ends at $end, $to_cross tokens from $before");
$node->safe_psql('postgres', qq{
DO \$\$
BEGIN
	FOR i IN 1 .. $to_cross LOOP
		PERFORM dlock_try('cross:x', '1 minute', 'x');
		PERFORM dlock_release('cross:x', 'x');
		COMMIT;
	END LOOP;
END
\$\$;
});
my $after = $node->safe_psql('postgres', "SELECT dlock_try('cross:b', '1 minute', 'x')");
cmp_ok($after, '>=', $end, "token $after is past the reservation that ended at $end");
my $end2 = $node->safe_psql('postgres', "SELECT trim(pg_read_file('pg_dlock.tokens'))");
cmp_ok($end2, '>', $after, "the file now reserves past $after ($end2)");
$node->stop('immediate');
$node->start;
my $next = $node->safe_psql('postgres', "SELECT dlock_try('cross:c', '1 minute', 'x')");
cmp_ok($next, '>', $after, "after a crash right past a block boundary, token $next is above $after");

$node->stop;
done_testing();
