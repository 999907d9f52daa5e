#!/usr/bin/env python3
"""A fleet of workers queued on customers' locks with dlock_enqueue.

    python3 queue_fleet.py --dsn "host=127.0.0.1 port=6432 dbname=app user=app" \
        --workers 200 --customers 5 --jobs 3

No worker holds a server connection while it waits: dlock_enqueue returns at
once (a token if the lease is granted, else NULL with a request queued for
the worker in the customer's FIFO queue), so behind PgBouncer in transaction
mode hundreds of waiting workers share a pool of a few server connections,
in the order they queued, with no thundering herd of dlock_try loops.

Each worker (a thread with a connection of its own) does --jobs jobs.  A job
is one customer, picked at random: the worker enqueues for customer:<n>, asks
again every --poll seconds (each call keeps its place in the queue and
restarts its hold) until the call returns its token, then does the job: a
row in job_progress written in a transaction fenced by the token
(dlock_fence), and releases the lease.  A job not granted within --timeout
leaves the queue (dlock_dequeue) and releases the lease in case it was
granted just before.

It needs dlock (1.2) in the database and the examples' table (see
examples/README.md):

    CREATE TABLE job_progress (
        id bigserial PRIMARY KEY,
        job text NOT NULL,
        step int NOT NULL,
        token bigint NOT NULL,
        worker text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT clock_timestamp());

Prints one line per job and a summary.  Exit status: 0 every job done; 5 a
job was not granted within --timeout; 1 an error.
"""
import argparse
import os
import random
import socket
import sys
import threading
import time
import uuid

import psycopg

EXIT_DONE, EXIT_NOT_GRANTED, EXIT_ERROR = 0, 5, 1


_log_lock = threading.Lock()


def log(*args):
    # a line in one write: print writes the text and its newline apart, so
    # two threads' lines could run together
    with _log_lock:
        sys.stdout.write(" ".join(map(str, args)) + "\n")
        sys.stdout.flush()


def connect(dsn):
    # autocommit: each dlock call is its own short transaction, which is
    # what lets PgBouncer hand the server connection back between calls.
    # prepare_threshold=None: no server-side prepared statements.
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


def wait_for_lease(conn, name, owner, a):
    """Queues for name until granted: returns the token, or None after
    --timeout (the request has then left the queue)."""
    deadline = time.monotonic() + a.timeout
    while True:
        token = conn.execute(
            "SELECT dlock_enqueue(%s, make_interval(secs => %s), %s,"
            " hold => make_interval(secs => %s))",
            (name, a.ttl, owner, a.hold)).fetchone()[0]
        if token is not None:
            return token
        if time.monotonic() + a.poll > deadline:
            conn.execute("SELECT dlock_dequeue(%s, %s)", (name, owner))
            # granted between the last call and the dequeue: give it back
            conn.execute("SELECT dlock_release(%s, %s)", (name, owner))
            return None
        time.sleep(a.poll)


def worker(n, a, results):
    rng = random.Random(a.seed * 100003 + n)
    conn = connect(a.dsn)
    try:
        for job in range(a.jobs):
            name = f"customer:{rng.randrange(a.customers)}"
            # an owner per job: unique, so its lease is never mixed up
            owner = f"{socket.gethostname()}:{os.getpid()}:w{n}:j{job}:{uuid.uuid4().hex[:8]}"
            queued = time.monotonic()
            token = wait_for_lease(conn, name, owner, a)
            if token is None:
                log(f"worker {n} job {job}: {name} not granted within {a.timeout} s")
                results[n] = EXIT_NOT_GRANTED
                return
            waited = time.monotonic() - queued
            time.sleep(a.work)
            # the fence and the write commit together, or not at all
            with conn.transaction():
                conn.execute("SELECT dlock_fence(%s, %s)", (name, token))
                conn.execute(
                    "INSERT INTO job_progress (job, step, token, worker)"
                    " VALUES (%s, %s, %s, %s)", (name, job, token, owner))
            released = conn.execute("SELECT dlock_release(%s, %s, %s)",
                                    (name, owner, token)).fetchone()[0]
            log(f"worker {n} job {job}: {name} token={token} waited={waited:.3f}s"
                f" released={'true' if released else 'false'}")
    except psycopg.Error as e:
        log(f"worker {n}: {e.__class__.__name__}: {e}")
        results[n] = EXIT_ERROR
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", required=True, help="libpq connection string")
    p.add_argument("--workers", type=int, default=50)
    p.add_argument("--customers", type=int, default=5)
    p.add_argument("--jobs", type=int, default=3, help="jobs per worker")
    p.add_argument("--ttl", type=float, default=30.0, help="lease seconds")
    p.add_argument("--work", type=float, default=0.01,
                   help="seconds of work per job, under the lease")
    p.add_argument("--poll", type=float, default=0.2,
                   help="seconds between asks while queued")
    p.add_argument("--hold", type=float, default=10.0,
                   help="a request not asked for again within this leaves the queue")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a job may wait for its lease")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.poll * 3 > a.hold:
        p.error("--poll must be well inside --hold (at most a third of it)")

    results = [EXIT_DONE] * a.workers
    threads = [threading.Thread(target=worker, args=(n, a, results))
               for n in range(a.workers)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    status = max(results)
    log(f"fleet: {a.workers} workers, {a.workers * a.jobs} jobs on {a.customers} customers"
        f" in {time.monotonic() - start:.1f} s; status {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
