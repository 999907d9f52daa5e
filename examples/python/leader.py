#!/usr/bin/env python3
"""Leader election with dlock: one active instance among N.

Start the same program N times.  Each instance waits for the lease in
dlock_acquire; the one that gets it leads: it renews the lease every TTL/3,
fences every write with its token, and steps down as soon as a renewal
returns NULL or a write is refused (DL001).  SIGTERM (or Ctrl-C) releases
the lease, so a follower takes over at once; a crashed or frozen leader loses
it when its TTL ends.

    python3 leader.py --dsn "host=127.0.0.1 port=6432 dbname=app user=app" \
        --name orders-leader --ttl 3 \
        --events-dsn "host=db.internal port=5432 dbname=app user=app"

With --events-dsn (a session connection: LISTEN does not work through a
transaction pooler), the instance listens on channel dlock (change events,
which its grants ask for with dlock.events): as leader, a "forced" or
"expired" event of its own token makes it step down at once, where the next
renewal would tell it up to TTL/3 later; the renewals and the fenced writes
stay, since an event can be lost with its connection.  With --observe it
never leads: it prints who leads, from the events alone, no polling:

    python3 leader.py --observe --events-dsn "host=db.internal dbname=app user=app"

The leader's work here is a heartbeat: it writes its token into two tables
whose dlock_fenced triggers refuse any token but the live lease's (DDL:
leader_state in README.md's leader election recipe, leader_log in
examples/README.md).  Exit status 0 after a clean stop.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid

import psycopg


_log_lock = threading.Lock()


def log(*args):
    # a line in one write: print writes the text and its newline apart, so
    # two threads' lines could run together
    with _log_lock:
        sys.stdout.write(" ".join(map(str, args)) + "\n")
        sys.stdout.flush()


def connect(dsn):
    # autocommit, no server-side prepared statements: fine behind PgBouncer
    # in transaction mode.
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


class Events(threading.Thread):
    """The process's one listening connection (LISTEN dlock): each event of
    the name goes to every callback registered, as a dict; a lost connection
    is reported as {"event": "lost"} (events sent meanwhile are gone) and the
    listener reconnects.  Any number of names would share it."""

    def __init__(self, dsn, name):
        super().__init__(daemon=True)
        self.dsn, self.name = dsn, name
        self.callbacks = []
        self.listening = threading.Event()

    def run(self):
        while True:
            try:
                conn = psycopg.connect(self.dsn, autocommit=True)
                conn.execute("LISTEN dlock")
                self.listening.set()
                for n in conn.notifies():
                    ev = json.loads(n.payload)
                    if ev.get("name") == self.name or ev.get("event") == "lost":
                        for cb in list(self.callbacks):
                            cb(ev)
            except psycopg.OperationalError as e:
                log(f"events: connection lost ({e.__class__.__name__}); reconnecting")
                for cb in list(self.callbacks):
                    cb({"event": "lost"})
                time.sleep(1)


def observe(dsn, events, stop):
    """Prints who leads, from the events of the name: the event with the
    highest seq so far says it ("granted": its owner; an end: nobody).  The
    state is read once from dlock_locks after LISTEN, and again after a lost
    connection."""
    state = {"seq": 0}
    lock = threading.Lock()

    def show(what):
        log(f"observed: {what}")

    def read_state():
        with connect(dsn) as c:
            row = c.execute("SELECT owner, token FROM dlock_locks WHERE name = %s"
                            " AND mode = 'exclusive'", (events.name,)).fetchone()
        show(f"leader {row[0]} token={row[1]}" if row else "no leader")

    def on_event(ev):
        with lock:
            if ev["event"] == "lost":
                state["seq"] = 0
                events.listening.wait()
                read_state()
                return
            if ev["seq"] <= state["seq"]:
                return		# older news: a later change of the name arrived first
            state["seq"] = ev["seq"]
            if ev["event"] == "granted":
                show(f"leader {ev['owner']} token={ev['token']} seq={ev['seq']}")
            else:
                show(f"no leader: {ev['owner']} token={ev['token']} {ev['event']}"
                     f" seq={ev['seq']}")

    events.callbacks.append(on_event)
    events.start()
    events.listening.wait()
    with lock:
        read_state()
    stop.wait()
    return 0


class Renewer(threading.Thread):
    """Renews every ttl/3; sets `lost` on a NULL renewal or when renewals
    have failed until the lease's end."""

    def __init__(self, dsn, name, ttl, owner, granted_at):
        super().__init__(daemon=True)
        self.dsn, self.name, self.ttl, self.owner = dsn, name, ttl, owner
        self.valid_until = granted_at + ttl
        self.lost = threading.Event()
        self.stopping = threading.Event()
        self.reason = None
        self.event_reason = None	# set by a change event of our lease

    def run(self):
        conn = None
        while not self.stopping.wait(self.ttl / 3):
            sent = time.monotonic()
            try:
                conn = conn or connect(self.dsn)
                until = conn.execute(
                    "SELECT dlock_renew(%s, make_interval(secs => %s), %s)",
                    (self.name, self.ttl, self.owner)).fetchone()[0]
            except psycopg.OperationalError:
                conn = None
                if time.monotonic() < self.valid_until:
                    continue
                until, self.reason = None, "renewals failed until the lease ended"
            else:
                self.reason = "renewal returned NULL"
            if until is None:
                self.lost.set()
                break
            self.valid_until = sent + self.ttl
        if conn is not None:
            conn.close()


def main():
    p = argparse.ArgumentParser(description="dlock leader election")
    p.add_argument("--dsn", required=True)
    p.add_argument("--name", default="orders-leader", help="lock name")
    p.add_argument("--ttl", type=float, default=3.0)
    p.add_argument("--beat", type=float, default=0.2,
                   help="seconds between the leader's writes")
    p.add_argument("--owner", help="default host:pid:uuid")
    p.add_argument("--events-dsn",
                   help="a session connection (not a transaction pooler) for LISTEN dlock")
    p.add_argument("--observe", action="store_true",
                   help="never lead: print who leads, from the change events")
    a = p.parse_args()
    owner = a.owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4()}"
    stop = threading.Event()
    conn = None
    following = False

    def on_signal(signo, frame):
        stop.set()
        if following and conn is not None:
            conn.cancel()	# ends the wait in dlock_acquire at once

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    events = Events(a.events_dsn or a.dsn, a.name) if a.events_dsn or a.observe else None
    if a.observe:
        return observe(a.dsn, events, stop)
    log(f"instance {owner}")
    if events is not None:
        events.start()
        events.listening.wait()

    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect(a.dsn)
            # Follower: wait in the queue for up to one TTL, then again.
            sent = time.monotonic()
            following = True
            # dlock.events for this grant: its events reach the observers
            token = conn.execute(
                "SELECT dlock_acquire(%s, make_interval(secs => %s),"
                " make_interval(secs => %s), %s)"
                " FROM set_config('dlock.events', 'on', true)",
                (a.name, a.ttl, a.ttl, owner)).fetchone()[0]
        except psycopg.errors.QueryCanceled:
            continue			# SIGTERM while following
        except psycopg.OperationalError as e:
            log(f"connection error while following: {e}; retrying")
            conn = None
            stop.wait(1)
            continue
        finally:
            following = False
        if token is None:
            continue

        log(f"leading token={token}")
        renewer = Renewer(a.dsn, a.name, a.ttl, owner, sent)

        def on_event(ev, token=token, renewer=renewer):
            # our own lease ended elsewhere: step down now, not at the next renewal
            if ev.get("token") == token and ev["event"] in ("forced", "expired", "ended"):
                renewer.event_reason = f"lease {ev['event']} (event seq {ev['seq']})"
                renewer.lost.set()

        if events is not None:
            events.callbacks.append(on_event)
        renewer.start()
        reason = "stopping"
        while not stop.is_set():
            if renewer.lost.wait(a.beat):
                reason = renewer.event_reason or renewer.reason
                break
            try:
                # The leader's work; the triggers fence it with the token.
                with conn.transaction():
                    conn.execute(
                        "UPDATE leader_state SET leader = %s, token = %s,"
                        " beats = beats + 1, updated_at = clock_timestamp()"
                        " WHERE id = 1", (owner, token))
                    conn.execute("INSERT INTO leader_log (token, leader)"
                                 " VALUES (%s, %s)", (token, owner))
            except psycopg.Error as e:
                if e.sqlstate == "DL001":
                    reason = f"write refused (DL001: {e.diag.message_primary})"
                elif conn.closed:
                    reason = f"connection lost ({e.__class__.__name__})"
                    conn = None
                else:
                    raise
                break
        renewer.stopping.set()
        renewer.join()
        if events is not None:
            events.callbacks.remove(on_event)
        try:
            conn = conn if conn is not None and not conn.closed else connect(a.dsn)
            released = conn.execute("SELECT dlock_release(%s, %s, %s)",
                                    (a.name, owner, token)).fetchone()[0]
        except psycopg.Error as e:
            released = f"unknown ({e.__class__.__name__})"
            conn = None
        if stop.is_set():
            log(f"stopping: released={released}")
        else:
            log(f"stepped down: {reason}; released={released}")
    if conn is not None:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
