# A minimum hold (min_hold, dlock run --at-least), as cron uses it and
# across a crash.
#
# Cron: 10 hosts run the same job every period, but their clocks differ, so
# their starts are spread over 3 s.  Each runs
#   dlock run --no-wait --ttl 10s --at-least 5s report -- job
# and the job (0.3 s) appends to a file.  With the minimum hold, the first
# runner keeps the lease 5 s from its grant although its job ends after
# 0.3 s, so the other nine find it busy and exit 69: exactly one run per
# period, for 3 periods.  Without --at-least (one period, the README's old
# recipe) each runner that starts after the previous one released runs the
# job again: more than one run, the count is printed.
#
# Crash: a durable lease released within its hold, and one released only
# after a restart, are both held (same owner and token, shown released)
# until granted_at + min_hold after stop('immediate') and a start, and a
# waiter is granted only then.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use POSIX qw(_exit);
use Time::HiRes qw(time sleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = $PostgreSQL::Test::Utils::tmp_check;
my $cli = "$FindBin::RealBin/../../cli";
IPC::Run::run([ 'make', '-s', '-C', $cli ]) or die "cannot build $cli/dlock";

my $node = PostgreSQL::Test::Cluster->new('min_hold');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.failover_grace = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';

# One period: 10 runners started 1/3 s apart (over 3 s); returns how many
# ran the job and their exit statuses, sorted.
sub period
{
	my ($name, $log, @opts) = @_;
	my $start = time;
	my @pids;

	unlink $log;
	for my $i (0 .. 9)
	{
		my $pid = fork;
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			sleep($start + $i / 3 - time) if $start + $i / 3 > time;
			exec("$cli/dlock", '-d', $conninfo, 'run', '--no-wait', '--ttl', '10s', @opts,
				$name, '--', 'sh', '-c', "echo \"\$DLOCK_TOKEN\" >> '$log'; sleep 0.3")
			  or _exit(127);
		}
		push @pids, $pid;
	}
	my @status;
	for my $pid (@pids)
	{
		waitpid($pid, 0);
		push @status, $? >> 8;
	}
	my $runs = 0;
	if (open(my $fh, '<', $log))
	{
		$runs = () = <$fh>;
		close $fh;
	}
	return ($runs, join(' ', sort { $a <=> $b } @status));
}

# --at-least 5s: one run per period, every 8 s (the hold ends before the
# next period starts)
for my $p (1 .. 3)
{
	my $begin = time;
	my ($runs, $status) = period('report', "$tmp/runs.$p", '--at-least', '5s');
	is($runs, 1, "period $p with --at-least 5s: the job ran once");
	is($status, '0 69 69 69 69 69 69 69 69 69',
		"period $p: one runner ran it (exit 0), nine found the lease busy (exit 69)");
	sleep($begin + 8 - time) if $p < 3 && $begin + 8 > time;
}

# without --at-least: a runner arriving after the previous one released runs
# the job again
my ($plain_runs, $plain_status) = period('report-plain', "$tmp/runs.plain");
note("without --at-least: the job ran $plain_runs times in one period (exits: $plain_status)");
cmp_ok($plain_runs, '>', 1, 'without --at-least the job runs more than once in a period');

# Crash: a lease released within its hold is held after a crash until
# granted_at + min_hold; a lease with a hold released after the restart too.
my $t1 = $node->safe_psql('postgres',
	q{SELECT dlock_try('crash1', '1 minute', 'a', min_hold => '8 seconds')});
my $t2 = $node->safe_psql('postgres',
	q{SELECT dlock_try('crash2', '1 minute', 'a', min_hold => '8 seconds')});
is($node->safe_psql('postgres', q{SELECT dlock_release('crash1', 'a')}), 't',
	'crash1 released within its hold');
my $granted = $node->safe_psql('postgres',
	q{SELECT string_agg(name || '=' || extract(epoch FROM granted_at), ' ' ORDER BY name)
	  FROM dlock_leases WHERE name LIKE 'crash%'});
$node->stop('immediate');
$node->start;

is($node->safe_psql('postgres',
	q{SELECT string_agg(name || '/' || owner || '/' || token || '/' || (released_at IS NOT NULL)
	  || '/' || min_hold, ' ' ORDER BY name) FROM dlock_locks WHERE name LIKE 'crash%'}),
	"crash1/a/$t1/true/00:00:08 crash2/a/$t2/false/00:00:08",
	'after the crash both leases are back: crash1 released, with their holds');
is($node->safe_psql('postgres', q{SELECT dlock_release('crash2', 'a')}), 't',
	'crash2 released after the restart, within its hold');
is($node->safe_psql('postgres',
	q{SELECT string_agg(name || '/' || (released_at IS NOT NULL), ' ' ORDER BY name)
	  FROM dlock_locks WHERE name LIKE 'crash%'}),
	'crash1/true crash2/true', 'both held, released, until their holds end');
is($node->safe_psql('postgres',
	q{SELECT dlock_try('crash1', '1 minute', 'b') IS NULL AND dlock_try('crash2', '1 minute', 'b') IS NULL}),
	't', 'nobody else gets them meanwhile');

# a waiter gets each only at granted_at + min_hold or later (the restored
# hold runs what was left of it again from the restart: late, never early)
for my $name ('crash1', 'crash2')
{
	my ($g) = $granted =~ /\b$name=([0-9.]+)/;
	my $res = $node->safe_psql('postgres', qq{
		SELECT dlock_acquire('$name', '1 minute', '60 seconds', 'b') > $t2 AS newer,
			   extract(epoch FROM clock_timestamp()) >= $g + 8 AS not_before_hold_end});
	is($res, 't|t', "$name: a waiter is granted a newer token, not before granted_at + min_hold");
}

$node->stop;
done_testing();
