#!/usr/bin/env python3
"""dlock lease worker with psycopg 3: acquire, renew in the background, fence
every write with the token, release.

    python3 lease_worker.py --dsn "host=127.0.0.1 port=6432 dbname=app user=app" \
        --name nightly-report --ttl 10 --steps 5 --step-time 1

It needs dlock in the database and this table (the work it does is to write
one row per step):

    CREATE TABLE job_progress (
        id bigserial PRIMARY KEY,
        job text NOT NULL,
        step int NOT NULL,
        token bigint NOT NULL,
        worker text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT clock_timestamp());

Exit status: 0 work done and lease released; 3 lease lost (a renewal
returned NULL), work stopped; 4 lease lost (a fenced write was refused with
SQLSTATE DL001), work stopped; 5 lease not granted within --timeout; 1 error.

Works directly and behind PgBouncer in transaction mode: every call passes
an explicit owner, and no server-side prepared statements are used.
"""
import argparse
import os
import socket
import sys
import threading
import time
import uuid

import psycopg

EXIT_DONE, EXIT_RENEW_LOST, EXIT_FENCED, EXIT_NOT_GRANTED = 0, 3, 4, 5


_log_lock = threading.Lock()


def log(*args):
    # a line in one write: print writes the text and its newline apart, so
    # two threads' lines could run together
    with _log_lock:
        sys.stdout.write(" ".join(map(str, args)) + "\n")
        sys.stdout.flush()


def connect(dsn):
    # autocommit: each dlock call takes effect when it returns.
    # prepare_threshold=None: never prepare statements on the server, which
    # PgBouncer < 1.21 cannot route in transaction mode.
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


class Renewer(threading.Thread):
    """Renews the lease every ttl/3 on its own connection.  Sets `lost` when
    a renewal returns NULL, or when renewals have failed until the lease's
    end has passed."""

    def __init__(self, dsn, name, ttl, owner, granted_at):
        super().__init__(daemon=True)
        self.dsn, self.name, self.ttl, self.owner = dsn, name, ttl, owner
        # The lease ends at most ttl after the request that granted or
        # renewed it was sent (monotonic clock, as the server's).
        self.valid_until = granted_at + ttl
        self.lost = threading.Event()
        self.stopping = threading.Event()
        self.reason = None

    def lose(self, reason):
        self.reason = reason
        self.lost.set()

    def run(self):
        conn = None
        while not self.stopping.wait(self.ttl / 3):
            sent = time.monotonic()
            try:
                if conn is None or conn.closed:
                    conn = connect(self.dsn)
                until = conn.execute(
                    "SELECT dlock_renew(%s, make_interval(secs => %s), %s)",
                    (self.name, self.ttl, self.owner)).fetchone()[0]
            except psycopg.OperationalError as e:
                # Connection trouble: the lease is still ours until valid_until.
                log(f"renewal failed ({e.__class__.__name__}); retrying")
                if conn is not None:
                    conn.close()
                conn = None
                if time.monotonic() >= self.valid_until:
                    self.lose("renewals failed until the lease ended")
                    break
                continue
            if until is None:
                self.lose("renewal returned NULL")
                break
            self.valid_until = sent + self.ttl
            log(f"renewed until {until.isoformat()}")
        if conn is not None:
            conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", required=True, help="libpq connection string")
    p.add_argument("--name", required=True, help="lock name")
    p.add_argument("--owner", help="owner string (default host:pid:uuid)")
    p.add_argument("--ttl", type=float, default=10.0, help="lease seconds")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for the lease")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--step-time", type=float, default=1.0,
                   help="seconds of work before each step's write")
    a = p.parse_args()
    owner = a.owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4()}"

    conn = connect(a.dsn)
    sent = time.monotonic()
    token = conn.execute(
        "SELECT dlock_acquire(%s, make_interval(secs => %s),"
        " make_interval(secs => %s), %s)",
        (a.name, a.ttl, a.timeout, owner)).fetchone()[0]
    if token is None:
        log(f"not granted within {a.timeout} s")
        return EXIT_NOT_GRANTED
    log(f"acquired {a.name} token={token} owner={owner}")

    renewer = Renewer(a.dsn, a.name, a.ttl, owner, sent)
    renewer.start()
    status = EXIT_DONE
    try:
        for step in range(1, a.steps + 1):
            # The work of this step; cut short as soon as the lease is lost.
            if renewer.lost.wait(a.step_time):
                log(f"lease lost: {renewer.reason}; stopping work")
                status = EXIT_RENEW_LOST
                break
            try:
                # The fence and the write commit together, or not at all.
                with conn.transaction():
                    conn.execute("SELECT dlock_fence(%s, %s)", (a.name, token))
                    conn.execute(
                        "INSERT INTO job_progress (job, step, token, worker)"
                        " VALUES (%s, %s, %s, %s)", (a.name, step, token, owner))
            except psycopg.Error as e:
                if e.sqlstate != "DL001":
                    raise
                log(f"lease lost: fenced write refused (DL001: {e.diag.message_primary});"
                    " stopping work")
                status = EXIT_FENCED
                break
            log(f"step {step} written")
    finally:
        renewer.stopping.set()
        renewer.join()
        # Harmless if the lease is gone: it never releases another's lease.
        released = conn.execute("SELECT dlock_release(%s, %s, %s)",
                                (a.name, owner, token)).fetchone()[0]
        log(f"released={'true' if released else 'false'}")
        conn.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
