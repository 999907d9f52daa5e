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
#   (b) no name has two owners, in dlock_locks nor in the clients' view: no
#       two clients' claims on a name overlap (a claim runs from the answer
#       of its grant until its release was sent or, as far as its client
#       knows, its ttl ended: crash or no crash);
#   (c) a new token is above every token any client ever saw.
# Four checkers run at once after each restart (they race to rebuild shared
# memory from the table and must all agree), and the leases of every earlier
# durable round are checked again after each later crash.
# Rounds, all with dlock.flush_grants off (the default) unless said:
# synchronous_commit on (immediate, kill -9, and a clean fast shutdown for
# comparison) and off (with the WAL writer nearly idle; both kinds of
# crash), with the clients' ttl of 10 minutes, above dlock.failover_grace
# (5 minutes), so that every grant is flushed; then dlock.flush_grants = on
# with a ttl of a minute, within the grace: flushed all the same, and no
# grace after the crash.  Then unflushed grants (dlock.failover_grace 5 s,
# the clients' ttl 4 s; immediate and kill -9): a lease may be missing
# after the crash (its commit was not flushed), or back in an earlier state
# of its owner's, and "crashload check -u" accepts that; then, while the
# crash grace runs, "crashload grace" checks that it outlasts every lease
# held at the crash that is not back, and has a new owner take every name
# (dlock_acquire, which waits for the grace): each grant must fall in no
# client's claim.  A round with the grace removed (pg_dlock.grace deleted
# while the server is down, after four unflushed grants made with the WAL
# writer stopped) shows that check fail with two holders.  Then
# memory-only mode (dlock.durable = off), where the leases are gone after
# the restart but tokens still never go backwards.  Last, tokens are driven
# across a reservation block boundary and the server crashed at once: the
# next token is still above.
# DLOCK_CRASH_SEED repeats a run's random choices (victims, crash moments,
# client choices); the server's timing still varies.
# The checkers set dlock.flush_grants = on: their grants lengthen no grace.
# Unflushed grants and the crash grace, deterministically: 038_crash_grace.
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
# the checks must catch each of a set of doctored client logs
ok(IPC::Run::run([ $crashload, 'self-test' ], '>', \$out, '2>', \$err),
	'crashload self-test: the checks report each doctored violation')
  or diag("$out$err");

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
max_connections = 40
restart_after_crash = on
log_statement = none
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

# Appends $conf to postgresql.conf and reloads; waits until new sessions
# (the clients') see it: the reload is asynchronous.
sub reconfigure
{
	my ($conf, $settled) = @_;
	$node->append_conf('postgresql.conf', $conf);
	$node->reload;
	$node->poll_query_until('postgres', $settled)
	  or die "the new configuration never applied: $settled";
	return;
}

# The end of the crash grace that began since $offset, as the log says it.
sub crash_grace_end
{
	my ($offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	return $1
	  if $log =~ /LOG:  dlock grants no new lease until (.*), the end of its grace after a crash restart/;
	return undef;
}

# One round: load, crash, restart, check.
#   crash     => 'immediate' (pg_ctl stop -m immediate), 'kill9' (one
#                backend), or 'fast' (a clean shutdown, for comparison)
#   memory    => 1 for memory-only mode (dlock.durable = off in the config)
#   ttl       => the clients' ttl in seconds (default 600)
#   unflushed => 1: the clients' grants may skip their flush; a crash then
#                begins a grace, which "crashload grace" checks
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
			'-s', $seed,
			'-T', $args{ttl} // 600
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

	my $grace_end = crash_grace_end($offset);
	if ($args{unflushed})
	{
		ok(defined $grace_end, "$name: the crash began a grace (until " . ($grace_end // '-') . ')');
	}
	else
	{
		ok(!defined $grace_end, "$name: the crash began no grace");
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
		push @check, '-u' if $args{unflushed};
		my $h = IPC::Run::start(\@check, '>', \$cout, '2>', \$cerr, IPC::Run::timeout(60));
		push @checkers, [ $h, \$cout, \$cerr ];
	}
	# With unflushed grants, at the same time: the grace covers every lost
	# lease, and a new owner's grant of each name, which waits for the
	# grace, falls in no client's claim.
	my ($grace, $gout, $gerr) = (undef, '', '');
	$grace = IPC::Run::start(
		[
			$crashload, 'grace', '-d', $node->connstr('postgres'),
			'-o', $dir, '-G', $grace_end // 'epoch'
		],
		'>', \$gout, '2>', \$gerr, IPC::Run::timeout(120))
	  if $args{unflushed};
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
	elsif ($args{unflushed})
	{
		note "$name: held at the crash and not back (unflushed, lost): "
		  . ($cout =~ /not back \(unflushed, lost\) (\d+)/ ? $1 : '?');
		my $ok = eval { $grace->finish };
		ok($ok, "$name: the grace covers the lost leases, and no name had two holders")
		  or diag("$gout$gerr$@");
		note $gout;
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
	# (leases of 10 minutes: they outlive the test)
	push @durable_rounds, $name unless $args{memory} || $args{ttl};

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

# dlock.flush_grants = on: a ttl within dlock.failover_grace (5 minutes by
# default) is flushed all the same, and a crash begins no grace.
reconfigure('dlock.flush_grants = on', "SELECT current_setting('dlock.flush_grants') = 'on'");
crash_round(name => 'flush-immediate', crash => 'immediate', ttl => 60);

# The new default with grants that skip their flush: a grace of 4 s after
# each crash, and some leases lost in it.
reconfigure("dlock.flush_grants = off\ndlock.failover_grace = '5s'",
	"SELECT current_setting('dlock.flush_grants') = 'off' AND current_setting('dlock.failover_grace') = '5s'");
crash_round(name => 'unflushed-immediate', crash => 'immediate', ttl => 4, unflushed => 1);
crash_round(name => 'unflushed-kill9', crash => 'kill9', ttl => 4, unflushed => 1);

# The same check must catch two holders when the grace is missing.  With
# the WAL writer stopped (SIGSTOP) and nothing else writing WAL, owner c1
# is granted four leases of 20 s whose commits stay in the WAL buffers, and
# the test writes what c1 was told as crashload's client log would; the WAL
# writer is then killed with restart_after_crash off (the server stops),
# and pg_dlock.grace, which recorded their ttl, is deleted while it is down,
# so the start begins no grace.  A new owner's dlock_try of each name then
# gets them at once, inside c1's claims: "crashload grace" must fail.
{
	my $name = 'nograce';
	my $dir = "$tmp/crashload-$name";
	my $offset = -s $node->logfile;
	# (autovacuum off: its writes would flush the WAL)
	reconfigure("dlock.failover_grace = '30s'\nrestart_after_crash = off\nautovacuum = off",
		"SELECT current_setting('dlock.failover_grace') = '30s' AND NOT current_setting('restart_after_crash')::bool"
		  . " AND NOT current_setting('autovacuum')::bool");
	mkdir $dir;
	PostgreSQL::Test::Utils::append_to_file("$dir/meta", "clients 1\nnames 4\nprefix $name:k\nttl 20\n");
	# In a database of its own: where ended leases left rows not yet swept
	# (the earlier rounds'), a grant of a new name deletes its name's rows
	# too, and that commit is flushed.  Its first grant writes more than its
	# row (the database's token floor), and is flushed: one before.
	$node->safe_psql('postgres', 'CREATE DATABASE nograce');
	$node->safe_psql('nograce',
		"CREATE EXTENSION dlock; SELECT dlock_try('first', '1 min', 'x'), dlock_release('first', 'x')");
	my $ww = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
	ok($ww =~ /^\d+$/, "$name: found the WAL writer");
	kill 'STOP', $ww;
	my $flushed = $node->safe_psql('nograce', 'SELECT pg_current_wal_insert_lsn()');
	my $log = '';
	my $seq = 0;
	for my $k (0 .. 3)
	{
		my $sent = int(Time::HiRes::time() * 1e6);
		my $token = $node->safe_psql('nograce', "SELECT dlock_try('$name:k$k', '20 s', 'c1')");
		my $done = int(Time::HiRes::time() * 1e6);
		$seq++;
		$log .= "$seq $sent $done GRANT $name:k$k $token try\n";
	}
	$seq++;
	my $now = int(Time::HiRes::time() * 1e6);
	$log .= "$seq $now $now END connection-lost\n";
	PostgreSQL::Test::Utils::append_to_file("$dir/client-1.log", $log);
	my $flush_now = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	is($node->safe_psql('postgres', "SELECT '$flush_now'::pg_lsn <= '$flushed'"),
		't', "$name: none of the four grants is flushed (flushed to $flush_now, they begin at $flushed)");
	my $pm = $node->{_pid};
	kill 'KILL', $ww;
	for (my $i = 0; $i < 600 && kill(0, $pm); $i++) { usleep(100_000) }
	ok(!kill(0, $pm), "$name: the server stopped after the WAL writer's crash");
	$node->_update_pid(-1);
	ok(unlink($node->data_dir . '/pg_dlock.grace'), "$name: pg_dlock.grace deleted");
	$node->start;
	ok(!defined crash_grace_end($offset), "$name: the start began no grace");
	my ($gout, $gerr) = ('', '');
	my $ok = IPC::Run::run(
		[ $crashload, 'grace', '-d', $node->connstr('nograce'), '-o', $dir, '-G', 'none' ],
		'>', \$gout, '2>', \$gerr, IPC::Run::timeout(60));
	ok(!$ok, "$name: the check fails without the grace");
	my $twice = () = $gout =~ /VIOLATION: two holders of nograce:k\d: granted after the restart/g;
	is($twice, 4, "$name: it reports each of the four names granted to a new owner inside c1's claim")
	  or diag("$gout$gerr");
	note $gout;
	reconfigure("dlock.failover_grace = '5s'\nrestart_after_crash = on\nautovacuum = on",
		"SELECT current_setting('dlock.failover_grace') = '5s' AND current_setting('restart_after_crash')::bool");
}

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
