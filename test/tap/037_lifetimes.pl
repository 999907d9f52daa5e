# Session leases end with the backend that took them, however it exits: its
# client disconnects, pg_terminate_backend, a FATAL (idle_session_timeout
# here); their waiters are granted at once (the time from the exit's trigger
# to the waiter's grant is noted).  A kill -9 of the holder's backend makes
# the postmaster reset shared memory: the rebuild brings back the ttl leases
# (they have rows) but not the session lease (it has none).  A restart after
# an immediate shutdown brings back neither session nor transaction leases,
# and neither it nor a clean restart leaves a queued request (dlock_enqueue)
# or the memory-only lease granted to one.
# Tokens only grow across all of it.  Also: dlock_locks shows a ttl lease's
# pid only while its taker lives; a session lease released by its owner from
# another session and taken by someone else is not ended by the first
# holder's exit; a session that took and released many session leases ends
# exactly the ones it still holds; a session that ends within a lease's
# minimum hold leaves a lease nobody can renew, release or take back;
# dlock_locks never shows a live session lease without its pid.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# writing to a session the server terminated must not end the test
$SIG{PIPE} = 'IGNORE';

my $node = PostgreSQL::Test::Cluster->new('lifetimes');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my @tokens;    # every token seen

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub max_token
{
	my $max = 0;
	$max = $_ > $max ? $_ : $max for @tokens;
	return $max;
}

# a session that stays open, and its backend's pid
sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	return ($s, $pid);
}

# A waiter in a psql of its own: dlock_acquire, then the moment it returned
# (the server's clock, as epoch seconds).  Returns once it is queued.
sub start_waiter
{
	my ($name, $owner) = @_;
	my %w = (out => '', err => '');
	$w{h} = IPC::Run::start(
		[
			'psql', '-X', '-A', '-t', '-F', ' ', '-d', $node->connstr('postgres'), '-c',
			"SELECT t, extract(epoch FROM clock_timestamp()) FROM
			 (SELECT dlock_acquire('$name', '1 hour', '60 s', '$owner') AS t OFFSET 0) s"
		],
		'>', \$w{out}, '2>', \$w{err});
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM dlock_waiters WHERE name = '$name'"),
		"a waiter is queued on $name");
	return \%w;
}

# Waits for the waiter; checks it was granted a new token and notes the
# time from $trigger (when the holder's exit was set off) to its grant.
sub waiter_granted
{
	my ($w, $trigger, $what) = @_;
	$w->{h}->finish;
	my ($token, $at) = split ' ', $w->{out};
	ok(defined $token && $token =~ /^\d+$/ && $token > max_token(),
		"$what: the waiter is granted, with a newer token") or diag("$w->{out} $w->{err}");
	push @tokens, $token if defined $token && $token =~ /^\d+$/;
	note sprintf("%s: %.1f ms from the exit's trigger to the waiter's grant",
		$what, 1000 * ($at - $trigger)) if defined $at;
}

sub take
{
	my ($s, $query) = @_;
	my $t = $s->query_safe($query);
	ok($t =~ /^\d+$/ && $t > max_token(), "granted: $query");
	push @tokens, $t;
	return $t;
}

# 1. the client disconnects: its session leases end, the default owner's
# included (NULL lifetime with the generated owner is 'session')
my ($h, $pid) = session();
take($h, q{SELECT dlock_try('a', '1 hour')});
take($h, q{SELECT dlock_try('a2', '1 hour', 'svc', lifetime => 'session')});
is(sql(q{SELECT string_agg(lifetime || ' ' || durable || ' ' || (pid IS NOT NULL), ',' ORDER BY name)
	FROM dlock_locks WHERE name IN ('a', 'a2')}),
	'session false true,session false true', 'session leases: not durable, pid shown');
my $w = start_waiter('a', 'next');
my $trigger = time;
$h->quit;
waiter_granted($w, $trigger, 'disconnect');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock_locks WHERE name = 'a2'}),
	'disconnect: its other session lease ended too');

# 2. pg_terminate_backend
($h, $pid) = session();
take($h, q{SELECT dlock_try('b', '1 hour', 'svc', lifetime => 'session')});
$w = start_waiter('b', 'next');
$trigger = time;
is(sql("SELECT pg_terminate_backend($pid)"), 't', 'the holder is terminated');
waiter_granted($w, $trigger, 'pg_terminate_backend');

# 3. a FATAL: idle_session_timeout ends the holder's session
($h, $pid) = session();
take($h, q{SELECT dlock_try('c', '1 hour', 'svc', lifetime => 'session')});
$w = start_waiter('c', 'next');
$trigger = time;
$h->query_safe(q{SET idle_session_timeout = '100ms'});
waiter_granted($w, $trigger + 0.1, 'FATAL (idle_session_timeout)');
ok($node->log_contains(qr/FATAL:  terminating connection due to idle-session timeout/),
	'the holder ended with a FATAL');
$h->quit;

# 4. a session lease released by its owner from another session, then
# taken by someone else: the first holder's exit leaves the new lease alone
($h, $pid) = session();
take($h, q{SELECT dlock_try('r', '1 hour', 'svc', lifetime => 'session')});
is(sql(q{SELECT dlock_release('r', 'svc')}), 't', 'released by its owner from another session');
my $r = sql(q{SELECT dlock_try('r', '1 hour', 'other')});
push @tokens, $r;
$h->quit;
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'the first holder is gone');
is(sql(q{SELECT owner || ' ' || token FROM dlock_locks WHERE name = 'r'}), "other $r",
	'the new lease is still held, same token');

# 5. many session leases taken and released (the backend's list of them is
# pruned as it grows): its exit ends exactly those still held
($h, $pid) = session();
$h->query_safe(q{SELECT count(dlock_try('m' || i, '1 hour', 'many', lifetime => 'session')) FROM generate_series(1, 40) i});
$h->query_safe(q{SELECT count(dlock_release('m' || i, 'many')) FROM generate_series(1, 30) i});
$h->query_safe(q{SELECT count(dlock_try('m' || i, '1 hour', 'many', lifetime => 'session')) FROM generate_series(41, 80) i});
is(sql(q{SELECT count(*) FROM dlock_locks WHERE owner = 'many'}), '50', '50 session leases held');
push @tokens, split /\n/, sql(q{SELECT token FROM dlock_locks WHERE owner = 'many'});
$h->quit;
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock_locks WHERE owner = 'many'}),
	'all of them end with the session');

# 6. a ttl lease shows its taker's pid only while the taker lives
($h, $pid) = session();
take($h, q{SELECT dlock_try('p', '1 hour', 'svc')});
is(sql(q{SELECT pid FROM dlock_locks WHERE name = 'p'}), $pid, 'a ttl lease shows its taker');
$h->quit;
ok($node->poll_query_until('postgres', q{SELECT pid IS NULL FROM dlock_locks WHERE name = 'p'}),
	'... and no pid once the taker has exited (the lease stays)');

# 7. kill -9 of the holder's backend: the postmaster resets shared memory;
# the rebuild restores the ttl leases from their rows, not the session lease
($h, $pid) = session();
my $dttl = take($h, q{SELECT dlock_try('dttl', '1 hour', 'svc')});
take($h, q{SELECT dlock_try('d', '1 hour', 'svc', lifetime => 'session')});
my $offset = -s $node->logfile;
kill 'KILL', $pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
ok($node->poll_query_until('postgres', 'SELECT true'), 'the server is back after kill -9');
is(sql(q{SELECT string_agg(name || ' ' || token || ' ' || lifetime, ',' ORDER BY name)
	FROM dlock_locks WHERE name IN ('d', 'dttl', 'p', 'r')}),
	"dttl $dttl ttl,p $tokens[$#tokens - 2] ttl,r $r ttl",
	'kill -9: the ttl leases are back (same tokens), the session lease is not');
is(sql(q{SELECT count(*) FROM dlock_locks WHERE pid IS NOT NULL}), '0',
	'restored leases show no pid');
my $d = sql(q{SELECT dlock_try('d', '1 hour', 'x')});
ok($d > max_token(), 'the session lease\'s name is free, with a newer token');
push @tokens, $d;

# 8. an immediate shutdown and a start bring back neither a session lease
# nor a transaction lease still open
($h, $pid) = session();
take($h, q{SELECT dlock_try('e', '1 hour', 'svc', lifetime => 'session')});
$h->query_safe('BEGIN');
take($h, q{SELECT dlock_try('f', '1 hour', 'svc', lifetime => 'transaction')});
my $g = take($h, q{SELECT dlock_try('g', '1 hour', 'svc')});
$h->query_safe('COMMIT; BEGIN');
take($h, q{SELECT dlock_try('f', '1 hour', 'svc', lifetime => 'transaction')});
is(sql(q{SELECT string_agg(name || ' ' || lifetime, ',' ORDER BY name) FROM dlock_locks
	WHERE name IN ('e', 'f', 'g')}), 'e session,f transaction,g ttl', 'all three held');
$node->stop('immediate');
$h->quit;
$node->start;
is(sql(q{SELECT string_agg(name || ' ' || token, ',' ORDER BY name) FROM dlock_locks
	WHERE name IN ('e', 'f', 'g')}), "g $g", 'after the restart only the ttl lease is back');
my $next = sql(q{SELECT dlock_try('e', '1 hour', 'x')});
ok($next > max_token(), "tokens only grow: $next > " . max_token());
push @tokens, $next;

# 8b. queued requests (dlock_enqueue) live in shared memory only: an
# immediate shutdown and a start, and a clean restart, leave none (their
# owners enqueue again), nor the memory-only lease granted to one; the
# durable lease they queued behind comes back
my $qh = sql(q{SELECT dlock_try('q', '1 hour', 'q-holder')});
push @tokens, $qh;
is(sql(q{SELECT count(dlock_enqueue('q', '1 hour', o, hold => '1 hour')) FROM unnest(ARRAY['qa', 'qb']) o}),
	'0', 'two requests queued behind a durable lease');
sql(q{SELECT dlock_try('qg', '1 hour', 'qg-holder')});
is(sql(q{SELECT dlock_enqueue('qg', '1 hour', 'qg-owner', hold => '1 hour')}), '', 'a request queued on qg');
is(sql(q{SELECT dlock_release('qg', 'qg-holder')}), 't', 'qg released: granted to the queued request');
is(sql(q{SELECT owner || ' ' || durable || ' ' || (pid IS NULL) FROM dlock_locks WHERE name = 'qg'}),
	'qg-owner false true', '... a memory-only lease of its absent owner');
push @tokens, sql(q{SELECT token FROM dlock_locks WHERE name = 'qg'});
# A release's commit does not wait for its WAL (docs/durability.md), and the
# queued request's grant writes none: a durable grant elsewhere flushes the
# release, or the crash below could bring back qg-holder's lease until its ttl
push @tokens, sql(q{SELECT dlock_try('q-flush', '1 hour', 'x')});
is(sql(q{SELECT string_agg(owner || ' ' || queue_position || ' ' || (pid IS NULL), ',' ORDER BY queue_position)
	FROM dlock_waiters WHERE name = 'q'}) . ' ' . sql(q{SELECT queued FROM dlock_stats}),
	'qa 1 true,qb 2 true 2', 'dlock_waiters and dlock_stats show both queued requests');
for my $how ('immediate', 'restart')
{
	if ($how eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
	}
	else
	{
		$node->restart;
	}
	is(sql(q{SELECT count(*) FROM dlock_waiters}) . ' ' . sql(q{SELECT queued FROM dlock_stats}), '0 0',
		"$how: no queued request is left (dlock_waiters, dlock_stats.queued)");
	is(sql(q{SELECT string_agg(name || ' ' || owner || ' ' || token, ',' ORDER BY name)
		FROM dlock_locks WHERE name IN ('q', 'qg')}), "q q-holder $qh",
		"$how: the durable lease is back, the queued request's memory-only lease is not");
	is(sql(q{SELECT dlock_release('q', 'q-holder')}), 't', "$how: its holder releases it: nobody is queued to get it");
	is(sql(q{SELECT count(*) FROM dlock_locks WHERE name = 'q'}), '0', "$how: q is free");
	# queued again for the next round
	$qh = sql(q{SELECT dlock_try('q', '1 hour', 'q-holder')});
	ok($qh > max_token(), "$how: tokens only grow: $qh > " . max_token());
	push @tokens, $qh;
	is(sql(q{SELECT dlock_enqueue('q', '1 hour', 'qa', hold => '1 hour')}), '', "$how: qa enqueues again");
	is(sql(q{SELECT owner || ' ' || queue_position FROM dlock_waiters WHERE name = 'q'}), 'qa 1',
		"$how: ... and is first in the queue");
}
is(sql(q{SELECT dlock_dequeue('q', 'qa')}), 't', 'tidy up: qa leaves the queue');
is(sql(q{SELECT dlock_release('q', 'q-holder')}), 't', 'tidy up: q released');

# 9. a session that ends within its lease's minimum hold leaves the lease
# until the hold's end, marked released and bound to nothing: its owner (from
# another session) cannot renew, release or take it again, a renewal made
# before the end does not take it back, a re-acquisition waits for its end
# like any other caller and is granted a new lease; fence and force release
# still work
sub gone
{
	my $pid = shift;
	ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
		"backend $pid has exited");
}
($h, $pid) = session();
my $sh = take($h, q{SELECT dlock_try('sh', '2 hours', 'svc', lifetime => 'session', min_hold => '1 hour')});
my $sh2 = take($h, q{SELECT dlock_try('sh2', '2 hours', 'svc', lifetime => 'session', min_hold => '1 hour')});
my ($o) = session();
$o->query_safe('BEGIN');
is($o->query_safe(q{SELECT dlock_renew('sh2', '2 hours', 'svc') IS NOT NULL}), 't',
	'a renewal from another session, before the session ends');
$h->quit;
gone($pid);
$o->query_safe('COMMIT');
is(sql(q{SELECT string_agg(name || ' ' || (released_at IS NOT NULL) || ' ' || (pid IS NULL), ',' ORDER BY name)
	FROM dlock_locks WHERE name IN ('sh', 'sh2')}), 'sh true true,sh2 true true',
	'both leases stay, marked released, bound to nobody (the earlier renewal took nothing back)');
is(sql(q{SELECT dlock_renew('sh', '2 hours', 'svc') IS NULL}), 't', 'its owner cannot renew it');
is(sql(q{SELECT dlock_release('sh', 'svc')}), 'f', 'nor release it (it is released)');
is(sql(q{SELECT dlock_try('sh', '2 hours', 'svc') IS NULL}), 't', 'nor take it again with a try');
is(sql("SELECT count(*) FROM (SELECT dlock_fence('sh', $sh)) f"), '1', 'its token still fences');
is(sql(q{SELECT string_agg(token || ' ' || (released_at IS NOT NULL) || ' ' || (expires_at <= granted_at + min_hold + interval '1 s'), ',')
	FROM dlock_locks WHERE name = 'sh'}), "$sh true true", 'unchanged: same token, released, ends at the hold\'s end');
$w = start_waiter('sh', 'svc');
is(sql(q{SELECT dlock_force_release('sh')}), 't', 'a force release ends it at once');
waiter_granted($w, time, 'an acquisition by its owner, queued behind it');
is(sql(q{SELECT dlock_release('sh', 'svc')}), 't', 'the new lease is its owner\'s to release');
is(sql(q{SELECT dlock_force_release('sh2')}), 't', 'tidy up');

# 10. dlock_locks shows a live session lease with its backend's pid, never
# with a NULL one, while its backend exits (it shows the lease and the pid as
# they were at one moment): a watcher reads the view in a loop while backends
# holding many session leases exit, with enough other leases that each read
# takes a while
sql(q{SET dlock.durable = off; SELECT count(dlock_try('fill' || i, '1 hour', 'filler')) FROM generate_series(1, 10000) i});
my %watch = (out => '', err => '');
$watch{h} = IPC::Run::start(
	[
		'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c', q{
		DO $$
		DECLARE
			looks int := 0;
			seen int := 0;
		BEGIN
			WHILE NOT EXISTS (SELECT 1 FROM dlock_locks WHERE name = 'watch_stop') LOOP
				seen := seen + (SELECT count(*) FROM dlock_locks
								WHERE lifetime = 'session' AND released_at IS NULL AND pid IS NULL);
				looks := looks + 1;
			END LOOP;
			RAISE NOTICE 'looks % seen %', looks, seen;
		END $$}
	],
	'>', \$watch{out}, '2>', \$watch{err});
for my $round (1 .. 20)
{
	($h, $pid) = session();
	$h->query_safe(q{SELECT count(dlock_try('x' || i, '1 hour', 'exiting', lifetime => 'session')) FROM generate_series(1, 300) i});
	sql("SELECT pg_terminate_backend($pid)");
	ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock_locks WHERE owner = 'exiting'}),
		"round $round: the session leases ended with their backend");
	$h->quit;
}
sql(q{SELECT dlock_try('watch_stop', '1 hour', 'x')});
$watch{h}->finish;
my ($looks, $seen) = $watch{err} =~ /looks (\d+) seen (\d+)/;
ok(defined $looks && $looks > 0, "the watcher read dlock_locks ($looks times)") or diag($watch{err});
is($seen, 0, 'no read showed a live session lease without its pid');

done_testing();
