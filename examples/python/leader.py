#!/usr/bin/env python3
"""Leader election with dlock: one active instance among N.

Start the same program N times.  Each instance waits for the lease in
dlock_acquire; the one that gets it leads: it renews the lease every TTL/3,
fences every write with its token, and steps down as soon as a renewal
returns NULL or a write is refused (DL001).  SIGTERM (or Ctrl-C) releases
the lease, so a follower takes over at once; a crashed or frozen leader loses
it when its TTL ends.

    python3 leader.py --dsn "host=127.0.0.1 port=6432 dbname=app user=app" \
        --name orders-leader --ttl 3

The leader's work here is a heartbeat: it writes its token into two tables
whose dlock_fenced triggers refuse any token but the live lease's (DDL:
leader_state in README.md's leader election recipe, leader_log in
examples/README.md).  Exit status 0 after a clean stop.
"""
import argparse
import os
import signal
import socket
import sys
import threading
import time
import uuid

import psycopg


def log(*args):
    print(*args, flush=True)


def connect(dsn):
    # autocommit, no server-side prepared statements: fine behind PgBouncer
    # in transaction mode.
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


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
    log(f"instance {owner}")

    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect(a.dsn)
            # Follower: wait in the queue for up to one TTL, then again.
            sent = time.monotonic()
            following = True
            token = conn.execute(
                "SELECT dlock_acquire(%s, make_interval(secs => %s),"
                " make_interval(secs => %s), %s)",
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
        renewer.start()
        reason = "stopping"
        while not stop.is_set():
            if renewer.lost.wait(a.beat):
                reason = renewer.reason
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
