# Change events are sent only to a database where some backend may listen
# (src/listen.c): one that has run LISTEN dlock there and not exited.
#
# What the sender sends is seen in PostgreSQL's NOTIFY queue: each page of
# it that a NOTIFY fills is zeroed first (pg_stat_slru, 'Notify'), and the
# sender's counts reach that view when it exits, a second after its last
# batch.  So each step makes 400 events (about 9 pages), waits for the
# sender to exit, and compares the pages zeroed.
#  - nobody listens: nothing is sent;
#  - a listener in another database does not count;
#  - a LISTEN dlock connection gets every event, the first change after its
#    LISTEN included;
#  - after UNLISTEN it still counts (the count errs on the side of sending)
#    until it exits; then nothing is sent again.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('events_listeners');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.failover_grace = 0
dlock.events = on
dlock.durable = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
$node->safe_psql('postgres', 'CREATE DATABASE other');

sub pages_zeroed
{
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'dlock events'})
	  or die 'the sender never exited';
	return $node->safe_psql('postgres',
		q{SELECT blks_zeroed FROM pg_stat_slru WHERE name = 'Notify'});
}

# 200 leases granted and released: 400 events, the sender started
sub cycle
{
	my ($prefix) = @_;
	$node->safe_psql('postgres', qq{
SELECT count(dlock_try('$prefix' || i, '1 hour', 'o')) FROM generate_series(1, 200) i;
SELECT dlock_release_all(array_agg('$prefix' || i), 'o') FROM generate_series(1, 200) i;
});
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dlock events'})
	  or die 'no sender started';
}

my $before = pages_zeroed();
cycle('a');
is(pages_zeroed(), $before, 'nobody listens: the sender sent nothing');

my $elsewhere = $node->background_psql('other');
$elsewhere->query_safe('LISTEN dlock');
cycle('b');
is(pages_zeroed(), $before, 'a listener in another database does not count');

my $listener = $node->background_psql('postgres');
my $listener_pid = $listener->query_safe('SELECT pg_backend_pid()');
$listener_pid =~ s/\D//g;
$listener->query_safe('LISTEN dlock');
cycle('c');
my $after = pages_zeroed();
cmp_ok($after, '>', $before, 'a listener: the events are sent (' . ($after - $before) . ' pages)');
my @got;
for (my $i = 0; @got < 400 && $i < 200; $i++)
{
	my $out = $listener->query_safe('SELECT 1');
	while ($out =~ /^Asynchronous notification "dlock" with payload "(.*)" received from server process with PID \d+\.$/mg)
	{
		push @got, decode_json($1);
	}
	usleep(50_000) if @got < 400;
}
is(join(' ', map { "$_->{event}:$_->{name}" } @got[0 .. 199]),
	join(' ', map { "granted:c$_" } 1 .. 200), 'it gets every grant, in order');
is(join(' ', sort map { "$_->{event}:$_->{name}" } @got[200 .. $#got]),
	join(' ', sort map { "released:c$_" } 1 .. 200), 'then every release');

$listener->query_safe('UNLISTEN dlock');
$before = pages_zeroed();
cycle('d');
$after = pages_zeroed();
cmp_ok($after, '>', $before, 'after UNLISTEN it still counts: sent');

$listener->quit;
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $listener_pid")
  or die 'the listener never exited';
$before = pages_zeroed();
cycle('e');
is(pages_zeroed(), $before, 'once it exited: nothing is sent');
$elsewhere->quit;

done_testing();
