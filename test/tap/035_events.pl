# Change events (dlock.events): NOTIFY dlock, by the database's sender, after
# the commit.
#
# A LISTEN session (psql) collects every event; each scenario then compares
# what arrived, in arrival order, with what must arrive: the payload's shape,
# nothing from a rolled-back grant or a rolled-back savepoint, the order on
# one name across sessions through a waiter's handoff and through the grant
# of a queued request whose owner is away, "forced", "expired"
# sent by the sender (not the holder), also with dlock.worker off (before
# the grant that took the name over), and at the commit of a grant whose
# lease ended before it (after its grant, or never if it rolls back), and nothing
# for a lease granted with events off; a release within a minimum hold sent
# when the hold ends; "ended" for session and transaction leases (within a
# minimum hold: when the hold ends); concurrent cycles on exclusive names
# arrive in seq order per name.  seq grows on every name.
#
# (Not an isolation spec: isolationtester prints payloads verbatim, and
# tokens differ on every run.)
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('events');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.failover_grace = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN dlock');

# Events received so far and not yet looked at, in arrival order, each with
# the pid that sent it (from psql's line).
my @pending;

sub collect
{
	my $out = $listener->query_safe('SELECT 1');
	while ($out =~ /^Asynchronous notification "dlock" with payload "(.*)" received from server process with PID (\d+)\.$/mg)
	{
		my $ev = decode_json($1);
		$ev->{pid} = $2;
		push @pending, $ev;
	}
}

# The next $n events (waits for them to arrive), then checks that no more
# came in the meantime.
sub next_events
{
	my ($n) = @_;
	for (my $i = 0; @pending < $n; $i++)
	{
		die "only " . scalar(@pending) . " of $n events arrived" if $i > 1200;
		usleep(50_000);
		collect();
	}
	return splice(@pending, 0, $n);
}

# Nothing more arrived (after every session's commit returned).
sub no_more
{
	my ($what) = @_;
	collect();
	is(scalar(@pending), 0, "$what: no other event")
	  or diag(explain \@pending);
	@pending = ();
}

sub summary
{
	return join(' ', map { "$_->{event}:$_->{name}:$_->{owner}" } @_);
}

my %last_seq;

sub seq_grows
{
	my ($what, @events) = @_;
	for my $ev (@events)
	{
		ok($ev->{seq} > ($last_seq{ $ev->{name} } // 0),
			"$what: seq grows on $ev->{name} ($ev->{event} $ev->{seq})");
		$last_seq{ $ev->{name} } = $ev->{seq};
	}
}

sub session
{
	my ($events) = @_;
	my $s = $node->background_psql('postgres');
	$s->query_safe("SET dlock.events = $events");
	return $s;
}

my $a = session('on');
my $b = session('on');

# --- the payload
my $tok = $a->query_safe(
	q{SELECT dlock_try('shape "1"', '1 hour', 'own\er "x"')});
$a->query_safe(q{SELECT dlock_release('shape "1"', 'own\er "x"')});
my @ev = next_events(2);
is_deeply([ sort keys %{ $ev[0] } ],
	[qw(event lifetime mode name owner pid seq token)], 'payload keys');
is($ev[0]->{event}, 'granted', 'granted first');
is($ev[0]->{name}, 'shape "1"', 'name, unescaped');
is($ev[0]->{owner}, 'own\er "x"', 'owner, unescaped');
is($ev[0]->{token}, $tok, 'token is the one returned');
is($ev[0]->{mode}, 'exclusive', 'mode');
is($ev[0]->{lifetime}, 'ttl', 'lifetime');
is($ev[1]->{event}, 'released', 'then released');
is($ev[1]->{token}, $tok, 'of the same token');
seq_grows('payload', @ev);
no_more('payload');

$a->query_safe(q{SELECT dlock_try('sh', '1 hour', 'r1', 'shared')});
$b->query_safe(q{SELECT dlock_try('sem', '1 hour', 'p1', permits => 2)});
@ev = next_events(2);
is($ev[0]->{mode}, 'shared', 'a shared lease says so');
is($ev[1]->{mode}, 'exclusive', 'a semaphore permit is exclusive');
$a->query_safe(q{SELECT dlock_release('sh', 'r1')});
$b->query_safe(q{SELECT dlock_release('sem', 'p1')});
next_events(2);

# a name of 200 bytes, all to escape, and the longest owner: well within 8000 bytes
my $long = "\x01" x 200;
my $owner = '"' x 128;
$a->query_safe(qq{SELECT dlock_try(repeat(chr(1), 200), '1 hour', repeat('"', 128))});
$a->query_safe(qq{SELECT dlock_release(repeat(chr(1), 200), repeat('"', 128))});
@ev = next_events(2);
is($ev[0]->{name}, $long, 'a 200-byte name of control characters arrives whole');
is($ev[0]->{owner}, $owner, 'a 128-byte owner of quotes arrives whole');
no_more('long names');

# --- nothing from what rolls back
$a->query_safe(q{BEGIN; SELECT dlock_try('rb', '1 hour', 'a'); ROLLBACK});
$a->query_safe(q{BEGIN; SELECT dlock_try('sp1', '1 hour', 'a'); SAVEPOINT s;
	SELECT dlock_try('sp2', '1 hour', 'a'); ROLLBACK TO s; COMMIT});
@ev = next_events(1);
is(summary(@ev), 'granted:sp1:a', 'a savepoint rolled back sends nothing, its parent does');
no_more('rollbacks');
# a release rolled back: nothing either
$a->query_safe(q{BEGIN; SELECT dlock_release('sp1', 'a'); ROLLBACK});
no_more('a rolled-back release');
$a->query_safe(q{SELECT dlock_release('sp1', 'a')});
is(summary(next_events(1)), 'released:sp1:a', 'the committed release');

# --- order on one name across sessions, through a waiter's handoff
$a->query_safe(q{SELECT dlock_try('x', '1 hour', 'a')});
$b->query_until(qr/waiting/, qq{\\echo waiting\nSELECT dlock_acquire('x', '1 hour', '1 min', 'b') > 0;\n});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM dlock_waiters WHERE name = 'x'})
  or die 'b never queued';
$a->query_safe(q{SELECT dlock_release('x', 'a')});
like($b->query_safe('SELECT 1'), qr/^t$/m, 'b was handed the lease');
$b->query_safe(q{SELECT dlock_release('x', 'b')});
@ev = next_events(4);
is(summary(@ev), 'granted:x:a released:x:a granted:x:b released:x:b',
	'grant, release, handoff to the waiter, its release: in that order');
seq_grows('handoff', @ev);
no_more('handoff');

# --- a queued request granted while its owner is away: "granted" is sent
# from the handoff (no transaction of its owner to wait for), with the token
# its owner collects later; collecting it sends nothing
$a->query_safe(q{SELECT dlock_try('qx', '1 hour', 'a')});
$b->query_safe(q{SELECT dlock_enqueue('qx', '1 hour', 'q')});
$a->query_safe(q{SELECT dlock_release('qx', 'a')});
@ev = next_events(3);
is(summary(@ev), 'granted:qx:a released:qx:a granted:qx:q',
	'a queued request is granted at the handoff, its owner away');
my $qtok = $b->query_safe(q{SELECT dlock_enqueue('qx', '1 hour', 'q')});
$qtok =~ s/\s+//g;
is($ev[2]->{token}, $qtok, 'with the token its owner collects');
seq_grows('queued', @ev);
no_more('a queued grant collected');
$b->query_safe(q{SELECT dlock_release('qx', 'q')});
is(summary(next_events(1)), 'released:qx:q', 'its release');

# --- forced, by a session with events off: the lease's own setting counts
my $c = session('off');
$a->query_safe(q{SELECT dlock_try('f', '1 hour', 'a')});
$c->query_safe(q{SELECT dlock_force_release('f')});
@ev = next_events(2);
is(summary(@ev), 'granted:f:a forced:f:a', 'a forced release says forced');
seq_grows('forced', @ev);

# --- a lease granted with events off sends nothing, whoever ends it
$c->query_safe(q{SELECT dlock_try('off', '1 hour', 'c')});
$a->query_safe(q{SELECT dlock_release('off', 'c')});
$c->query_safe(q{SELECT dlock_try('off2', '100 ms', 'c')});
$a->query_safe(q{SELECT dlock_try('off3', '1 hour', 'a')});
@ev = next_events(1);
is(summary(@ev), 'granted:off3:a', 'nothing from leases granted with events off');
$a->query_safe(q{SELECT dlock_release('off3', 'a')});
next_events(1);

# --- expired: sent by the worker's sender in this database
$a->query_safe(q{SELECT dlock_try('e', '200 ms', 'a')});
@ev = next_events(2);
is(summary(@ev), 'granted:e:a expired:e:a', 'an expiry nobody notices: sent by the worker');
# every event is sent by the database's sender, not by the lease's transaction
my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
$a_pid =~ s/\s+//g;
ok($ev[0]->{pid} != $a_pid && $ev[1]->{pid} == $ev[0]->{pid},
	'both sent by the sender, another process than the holder');
seq_grows('expired', @ev);

# --- with the worker off, the expiry found by the session that takes the
# name over is still sent (senders start whatever dlock.worker says), before
# its grant
$node->safe_psql('postgres', 'ALTER SYSTEM SET dlock.worker = off');
$node->reload;
$node->poll_query_until('postgres', q{SELECT current_setting('dlock.worker') = 'off'});
$a->query_safe(q{SELECT dlock_try('t', '100 ms', 'a')});
is(summary(next_events(1)), 'granted:t:a', 'the first grant');
$b->query_safe(q{SELECT pg_sleep(0.3); SELECT dlock_try('t', '1 hour', 'b')});
@ev = next_events(2);
is(summary(@ev), 'expired:t:a granted:t:b', 'the expiry, then the grant that took the name over');
is($ev[0]->{pid}, $ev[1]->{pid}, 'both sent by the sender');
seq_grows('taken over', @ev);
$b->query_safe(q{SELECT dlock_release('t', 'b')});
next_events(1);

# --- a lease that expires before its grant commits (memory-only): the
# expiry waits for that commit, and goes with it
$a->query_safe(q{SET dlock.durable = off});
$a->query_safe(q{BEGIN; SELECT dlock_try('u', '100 ms', 'a'); SELECT pg_sleep(0.3)});
$b->query_safe(q{SELECT dlock_try('u', '1 hour', 'b')});
@ev = next_events(1);
is(summary(@ev), 'granted:u:b', 'the later holder\'s grant arrives at its commit');
my $b_seq = $ev[0]->{seq};
$a->query_safe(q{COMMIT});
@ev = next_events(2);
is(summary(@ev), 'granted:u:a expired:u:a', 'the earlier grant and its expiry: at its commit');
ok($ev[0]->{seq} < $ev[1]->{seq} && $ev[1]->{seq} < $b_seq,
	'their seq are below the later grant\'s: seq orders the name');
no_more('expired before commit');
$b->query_safe(q{SELECT dlock_release('u', 'b')});
next_events(1);

# the same rolled back: neither its grant nor its expiry is ever sent
$a->query_safe(q{BEGIN; SELECT dlock_try('v', '100 ms', 'a'); SELECT pg_sleep(0.3)});
$b->query_safe(q{SELECT dlock_try('v', '1 hour', 'b')});
$a->query_safe(q{ROLLBACK});
@ev = next_events(1);
is(summary(@ev), 'granted:v:b', 'a rolled-back grant that expired sends nothing');
no_more('rolled back after expiry');

# --- memory-only lease forced before its grant commits: sent after the grant
$a->query_safe(q{BEGIN; SELECT dlock_try('w', '1 hour', 'a')});
$c->query_safe(q{SELECT dlock_force_release('w')});
no_more('a force of an uncommitted grant waits for it');
$a->query_safe(q{COMMIT});
@ev = next_events(2);
is(summary(@ev), 'granted:w:a forced:w:a', 'the grant, then the force, at the grant\'s commit');
seq_grows('forced before commit', @ev);

# --- a read-only transaction sends its events too
$a->query_safe(q{BEGIN READ ONLY; SELECT dlock_try('ro', '1 hour', 'a'); COMMIT});
is(summary(next_events(1)), 'granted:ro:a', 'a read-only transaction sends');
$a->query_safe(q{SET dlock.durable = on});
$a->query_safe(q{SELECT dlock_release('ro', 'a')});
next_events(1);

# --- an extension (the holder taking its lease again) and a renewal are no events
$a->query_safe(q{SELECT dlock_try('r', '1 hour', 'a')});
$a->query_safe(q{SELECT dlock_try('r', '1 hour', 'a')});
$a->query_safe(q{SELECT dlock_renew('r', '1 hour', 'a')});
$a->query_safe(q{SELECT dlock_release('r', 'a')});
is(summary(next_events(2)), 'granted:r:a released:r:a', 'no event for an extension or a renewal');
no_more('extension');

# --- a release within a minimum hold: the lease ends, and is sent and
# counted as released, when the hold ends, not at the release's commit
$node->safe_psql('postgres', 'ALTER SYSTEM RESET dlock.worker');
$node->reload;
$node->poll_query_until('postgres', q{SELECT current_setting('dlock.worker') = 'on'});
my $stats = q{SELECT releases || ' ' || (expired_by_worker + expired_by_sweep + expired_by_caller) FROM dlock_stats()};
my ($rel0, $exp0) = split / /, $node->safe_psql('postgres', $stats);
$a->query_safe(q{SELECT dlock_try('hold', '1 hour', 'a', min_hold => '1 second')});
is(summary(next_events(1)), 'granted:hold:a', 'a grant with a minimum hold');
is($a->query_safe(q{SELECT dlock_release('hold', 'a')}), 't', 'released within its hold');
no_more('a release within the hold, at its commit');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock_locks WHERE name = 'hold' AND released_at IS NOT NULL}),
	'1', 'still listed, marked released');
@ev = next_events(1);
is(summary(@ev), 'released:hold:a', 'released when the hold ends');
seq_grows('hold', @ev);
my ($rel1, $exp1) = split / /, $node->safe_psql('postgres', $stats);
is($rel1 - $rel0, 1, 'counted as one release');
is($exp1 - $exp0, 0, 'and not as an expiry');
no_more('hold');

# --- leases that end with their session or transaction: "ended", with
# their lifetime in the payload
my $d = session('on');
$d->query_safe(q{SELECT dlock_try('sess', '1 hour', 'd', lifetime => 'session')});
@ev = next_events(1);
is(summary(@ev) . " $ev[0]->{lifetime}", 'granted:sess:d session', 'a session lease\'s grant');
$d->quit;
@ev = next_events(1);
is(summary(@ev) . " $ev[0]->{lifetime}", 'ended:sess:d session', 'ended when its session ends');
seq_grows('session', @ev);
$a->query_safe(q{BEGIN; SELECT dlock_try('tx', '1 hour', 'a', lifetime => 'transaction'); COMMIT});
@ev = next_events(2);
is(summary(@ev), 'granted:tx:a ended:tx:a', 'a transaction lease: granted, then ended at its commit');
is($ev[1]->{lifetime}, 'transaction', 'its lifetime');
seq_grows('transaction', @ev);
$a->query_safe(q{BEGIN; SELECT dlock_try('txrb', '1 hour', 'a', lifetime => 'transaction'); ROLLBACK});
no_more('a rolled-back transaction lease');

# within a minimum hold, the end of the session keeps the lease until the
# hold's end, then sends "ended"
$d = session('on');
$d->query_safe(q{SELECT dlock_try('sh', '1 hour', 'd', lifetime => 'session', min_hold => '1 second')});
is(summary(next_events(1)), 'granted:sh:d', 'a session lease with a minimum hold');
$d->quit;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM dlock_locks WHERE name = 'sh' AND released_at IS NOT NULL})
  or fail('the session lease is kept, marked released, after its session ended within the hold');
no_more('a session end within the hold');
@ev = next_events(1);
is(summary(@ev), 'ended:sh:d', 'ended when the hold ends');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock_locks WHERE name = 'sh'}), '0',
	'and gone');

# --- order under concurrency: four sessions take and release three
# exclusive names, each call its own transaction; on each name the events
# arrive exactly in seq order, each grant followed by its release
$node->safe_psql('postgres', 'CREATE TABLE cycles (n int)');
my @busy = map { session('on') } 1 .. 4;
for my $i (0 .. $#busy)
{
	$busy[$i]->query_until(qr/started/, qq{\\echo started
DO \$\$
DECLARE
	t bigint;
	n int := 0;
	name text;
BEGIN
	FOR i IN 1..150 LOOP
		name := 'c' || (i % 3);
		t := dlock_try(name, '1 hour', 's$i');
		COMMIT;
		IF t > 0 THEN
			PERFORM dlock_release(name, 's$i');
			COMMIT;
			n := n + 1;
		END IF;
	END LOOP;
	INSERT INTO cycles VALUES (n);
END
\$\$;
});
}
$_->query_safe('SELECT 1') for @busy;
my $cycles = $node->safe_psql('postgres', 'SELECT sum(n) FROM cycles');
ok($cycles > 0, "$cycles cycles");
@ev = next_events(2 * $cycles);
my (%top, %holder, $out_of_order, $unpaired);
for my $e (@ev)
{
	$out_of_order++ if $e->{seq} <= ($top{ $e->{name} } // 0);
	$top{ $e->{name} } = $e->{seq};
	if ($e->{event} eq 'granted')
	{
		$unpaired++ if defined $holder{ $e->{name} };
		$holder{ $e->{name} } = $e->{token};
	}
	else
	{
		$unpaired++
		  if $e->{event} ne 'released'
		  || ($holder{ $e->{name} } // 0) != $e->{token};
		delete $holder{ $e->{name} };
	}
}
is($out_of_order // 0, 0, 'on each name, events arrived in seq order');
is($unpaired // 0, 0, 'each grant arrived before its release, nothing between them');
no_more('concurrent cycles');
$_->quit for @busy;

$_->quit for ($a, $b, $c, $listener);
$node->stop;
done_testing();
