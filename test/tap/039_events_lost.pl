# Change events that cannot be sent at once (issue 29): no background
# worker slot for the database's sender, a full event buffer, a crash.
#
# max_worker_processes leaves one slot beside the dlock worker and the
# logical replication launcher; a parallel query's worker takes it, so the
# dlock worker cannot start a sender.  Then:
#  - events wait: none arrives while no sender runs, and once the slot is
#    free every one arrives, in order, none lost;
#  - more events than the buffer holds (4,096): what does not fit is not
#    dropped silently, the listener gets {"event": "lost", "count": N}, and
#    the events it got plus N are all the events there were;
#  - a crash (immediate stop) loses what was recorded and not yet sent: the
#    listener's connection is lost with it, and after the restart nothing of
#    it is sent (the first event is the first new change, seq 1).
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('events_lost');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.failover_grace = 0
dlock.events = on
# memory-only: no rows, so no sweeper (a worker of its own) takes the slot
dlock.durable = off
# the dlock worker, the logical replication launcher and one free slot
max_worker_processes = 3
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $listener;
my @pending;

sub listen_now
{
	$listener = $node->background_psql('postgres');
	$listener->query_safe('LISTEN dlock');
	@pending = ();
}

sub collect
{
	my $out = $listener->query_safe('SELECT 1');
	while ($out =~ /^Asynchronous notification "dlock" with payload "(.*)" received from server process with PID \d+\.$/mg)
	{
		push @pending, decode_json($1);
	}
}

# Waits until the events received, plus those a "lost" event counts, are
# $n; returns them (the "lost" ones among them).
sub accounted
{
	my ($n) = @_;
	for (my $i = 0;; $i++)
	{
		my $seen = 0;
		$seen += ($_->{event} eq 'lost' ? $_->{count} : 1) for @pending;
		last if $seen >= $n;
		die "only $seen of $n events arrived or were counted lost" if $i > 1200;
		usleep(50_000);
		collect();
	}
	my @got = @pending;
	@pending = ();
	return @got;
}

sub sender_count
{
	return $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dlock events'});
}

# Takes the one free worker slot with a parallel worker that sleeps until
# its leader is cancelled; returns the leader's session and pid.
sub occupy
{
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type IN ('dlock events', 'dlock sweeper', 'parallel worker')})
	  or die 'a worker slot stays taken';
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $h->query_safe(q{SET force_parallel_mode = on;
		SET max_parallel_workers_per_gather = 1;
		SET parallel_leader_participation = off;
		SELECT pg_backend_pid()});
	$pid =~ s/\D//g;
	$h->query_until(qr/occupying/, "\\echo occupying\nSELECT pg_sleep(3600);\n");
	$node->poll_query_until('postgres',
		qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'parallel worker' AND leader_pid = $pid})
	  or die 'the parallel worker never started';
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type IN
			('dlock worker', 'logical replication launcher', 'parallel worker')}),
		'3', 'every worker slot is taken');
	return ($h, $pid);
}

sub free_slot
{
	my ($h, $pid) = @_;
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	$h->quit;
}

# --- no worker slot for the sender: the events wait, then all arrive
listen_now();
my ($h, $pid) = occupy();
$node->safe_psql('postgres', q{
DO $$
BEGIN
	FOR i IN 1..10 LOOP
		PERFORM dlock_try('w' || i, '1 hour', 'o');
		COMMIT;
		PERFORM dlock_release('w' || i, 'o');
		COMMIT;
	END LOOP;
END
$$});
# several of the worker's tries (one per 100 ms) find no slot
usleep(500_000);
is(sender_count(), '0', 'no sender could start');
collect();
is(scalar(@pending), 0, 'no event arrived meanwhile');
free_slot($h, $pid);
my @ev = accounted(20);
is(join(' ', map { "$_->{event}:" . ($_->{name} // '') } @ev),
	join(' ', map { "granted:w$_ released:w$_" } 1 .. 10),
	'once a slot is free, every event arrives, in order, none lost');

# --- more events than the buffer holds while no sender runs: the rest is
# counted, and the listener is told how many
($h, $pid) = occupy();
my $n = 2100;
$node->safe_psql('postgres', qq{
SELECT count(dlock_try('b' || i, '1 hour', 'o')) FROM generate_series(1, $n) i;
SELECT dlock_release_all(array_agg('b' || i), 'o') FROM generate_series(1, $n) i;
});
free_slot($h, $pid);
@ev = accounted(2 * $n);
my @lost = grep { $_->{event} eq 'lost' } @ev;
my @sent = grep { $_->{event} ne 'lost' } @ev;
my $lost = 0;
$lost += $_->{count} for @lost;
ok(@lost >= 1 && $lost > 0, scalar(@lost) . " \"lost\" event(s), counting $lost");
cmp_ok(scalar(@sent), '<=', 4096, scalar(@sent) . ' events sent: at most the buffer');
is(scalar(@sent) + $lost, 2 * $n, 'sent + lost = every event');
is(scalar(grep { $_->{event} eq 'granted' } @sent), $n, 'every grant (recorded first) was sent');
my $ordered = 1;
for my $i (1 .. $#sent)
{
	$ordered = 0 if $sent[$i]->{seq} <= $sent[ $i - 1 ]->{seq};
}
ok($ordered, 'what was sent arrived in seq order');
# A listener as docs/semantics.md says: it applies each event and, on
# "lost", re-reads dlock_locks.  Every change had committed before the
# sender started, so a read here shows what a read on its arrival did.
my %view;
for my $e (@ev)
{
	if ($e->{event} eq 'lost')
	{
		%view = map { $_ => 1 } grep { $_ ne '' } split /\n/,
		  $node->safe_psql('postgres', q{SELECT name FROM dlock_locks WHERE name LIKE 'b%'});
	}
	elsif ($e->{event} eq 'granted')
	{
		$view{ $e->{name} } = 1;
	}
	else
	{
		delete $view{ $e->{name} };
	}
}
is(join(' ', sort keys %view), '',
	'a listener that re-reads dlock_locks on "lost" sees what it shows: the names are free');
usleep(200_000);
collect();
is(scalar(@pending), 0, 'nothing more arrives');

# a sender that has room again sends without loss
$node->safe_psql('postgres', q{SELECT dlock_try('after', '1 hour', 'o'); SELECT dlock_release('after', 'o')});
is(join(' ', map { $_->{event} } accounted(2)), 'granted released', 'then events flow again, none lost');

# --- a crash loses what was recorded and not sent; the listener's
# connection goes with it
($h, $pid) = occupy();
$node->safe_psql('postgres', q{SELECT dlock_try('c' || i, '1 hour', 'o') FROM generate_series(1, 5) i});
$node->stop('immediate');
eval { $listener->query('SELECT 1'); };
ok($@ || $listener->{stderr} =~ /terminat|connection|closed/i,
	'the listener learns of the crash: its connection is gone');
$node->start;
eval { $listener->quit; };
eval { $h->quit; };
listen_now();
$node->safe_psql('postgres', q{SELECT dlock_try('new', '1 hour', 'o')});
@ev = accounted(1);
is(join(' ', map { "$_->{event}:$_->{name}:$_->{seq}" } @ev), 'granted:new:1',
	'after the restart nothing recorded before it is sent: the first event is the new grant, seq 1');
usleep(200_000);
collect();
is(scalar(@pending), 0, 'and nothing else');

$listener->quit;
$node->stop;
done_testing();
