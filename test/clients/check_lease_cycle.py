#!/usr/bin/env python3
"""Runs one language's lease-worker example (examples/<lang>/) against a
throwaway cluster, directly and through PgBouncer in transaction mode, and
checks what it demonstrates:

  contend   instance A holds the lease for longer than its TTL (so only its
            renewals keep it), instance B blocks in dlock_acquire meanwhile
            (seen in dlock_waiters), gets the lease when A releases, with a
            larger token; their writes do not interleave.
  renewnull the lease is broken (dlock_force_release) while the worker is in
            the middle of a step: its next renewal returns NULL and it stops
            at once, before writing anything more (exit 3).
  fenced    the lease is broken and taken by another owner while the worker
            writes every 0.2 s and renews only every 10 s: its next write
            with the stale token fails with DL001 and is not committed, it
            stops (exit 4), and its release leaves the new holder alone.
  event     (java, node: --events-url, a direct connection for LISTEN) the
            lease is broken while the worker renews every 10 s and is in a
            6 s step: its "forced" event stops it at once (exit 3), before
            any renewal could tell, without writing.

Exit status 0 when every check holds; prints each failed check.
Used by test/suites/client-{python,java,node}.sh.
"""
import argparse
import os
import sys
import time
import uuid

import psycopg
import psycopg.sql

from common import Example, check, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lang", required=True, choices=["python", "java", "node"])
    ap.add_argument("--top", required=True, help="checkout with examples/")
    ap.add_argument("--admin-dsn", required=True, help="superuser, direct")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--pg-port", required=True, type=int)
    ap.add_argument("--bouncer-port", required=True, type=int)
    ap.add_argument("--bouncer-db", default="app")
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--java-classes", help="directory with LeaseWorker.class")
    ap.add_argument("--jdbc-jar", default="/usr/share/java/postgresql.jar")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--node", default="node")
    ap.add_argument("--node-dir", help="directory with lease_worker.js and"
                    " node_modules (default: examples/node)")
    a = ap.parse_args()

    def events_url():
        """The example's --events-url: a direct session connection."""
        if a.lang == "java":
            return (f"jdbc:postgresql://{a.host}:{a.pg_port}/postgres"
                    f"?user={a.user}&password={a.password}")
        return f"postgresql://{a.user}:{a.password}@{a.host}:{a.pg_port}/postgres"

    def example_argv(port, db):
        if a.lang == "python":
            dsn = (f"host={a.host} port={port} dbname={db} user={a.user}"
                   f" password={a.password}")
            return [a.python, os.path.join(a.top, "examples/python/lease_worker.py"),
                    "--dsn", dsn]
        if a.lang == "java":
            url = (f"jdbc:postgresql://{a.host}:{port}/{db}"
                   f"?user={a.user}&password={a.password}")
            return ["java", "-cp", f"{a.java_classes}:{a.jdbc_jar}",
                    "LeaseWorker", "--url", url]
        url = f"postgresql://{a.user}:{a.password}@{a.host}:{port}/{db}"
        node_dir = a.node_dir or os.path.join(a.top, "examples/node")
        return [a.node, os.path.join(node_dir, "lease_worker.js"), "--url", url]

    admin = psycopg.connect(a.admin_dsn, autocommit=True)
    admin.execute("""CREATE TABLE IF NOT EXISTS job_progress (
        id bigserial PRIMARY KEY,
        job text NOT NULL,
        step int NOT NULL,
        token bigint NOT NULL,
        worker text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT clock_timestamp())""")
    admin.execute(psycopg.sql.SQL(
        "GRANT SELECT, INSERT ON job_progress TO {0};"
        " GRANT USAGE ON SEQUENCE job_progress_id_seq TO {0}").format(
            psycopg.sql.Identifier(a.user)))

    def q(sql, *args):
        return admin.execute(sql, args).fetchall()

    def run(target, label, name, owner, *extra):
        port, db = target
        argv = example_argv(port, db) + ["--name", name, "--owner", owner,
                                         *map(str, extra)]
        return Example(argv, label)

    def rows(name):
        return q("SELECT token, step, worker FROM job_progress WHERE job = %s"
                 " ORDER BY id", name)

    def no_leftovers(name):
        check(q("SELECT count(*) FROM dlock_locks WHERE name = %s", name)[0][0] == 0
              and q("SELECT count(*) FROM dlock_waiters WHERE name = %s", name)[0][0] == 0,
              f"nothing of {name} left in dlock_locks or dlock_waiters")

    def contend(target, via):
        name = f"{a.lang}-{via}-contend"
        print(f"== {a.lang} via {via}: two instances contend; the holder keeps"
              " its lease past the TTL by renewing", flush=True)
        oa, ob = f"{a.lang}-A-{uuid.uuid4()}", f"{a.lang}-B-{uuid.uuid4()}"
        steps = 6
        # 6 s of work: B must start (a JVM, on a loaded machine) and queue
        # while A still holds
        work = ["--ttl", 2, "--steps", steps, "--step-time", 1.0, "--timeout", 30]
        A = run(target, "A", name, oa, *work)
        m = A.wait_line(r"acquired \S+ token=(\d+)", 20)
        check(m is not None, "A acquired the lease")
        if m is None:
            A.wait(30)
            return
        ta = int(m.group(1))
        B = run(target, "B", name, ob, *work)
        waiting = False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and B.proc.poll() is None:
            if q("SELECT count(*) FROM dlock_waiters WHERE name = %s AND owner = %s",
                 name, ob)[0][0]:
                waiting = True
                break
            time.sleep(0.05)
        check(waiting, "B waits in dlock_acquire (listed in dlock_waiters)")
        held = q("SELECT owner, token FROM dlock_locks WHERE name = %s", name)
        check(held == [(oa, ta)] or A.proc.poll() is not None,
              "meanwhile dlock_locks shows A's lease")
        ra, rb = A.wait(40), B.wait(40)
        check(ra == 0, f"A exited 0 (got {ra})")
        check(rb == 0, f"B exited 0 (got {rb})")
        check(A.count(r"^renewed until ") >= 2,
              "A renewed its lease at least twice (work 6 s, TTL 2 s)")
        check(A.count(r"^released=true$") == 1, "A's release returned true")
        check(B.count(r"^released=true$") == 1, "B's release returned true")
        mb = B.wait_line(r"acquired \S+ token=(\d+)", 0)
        tb = int(mb.group(1)) if mb else None
        check(tb is not None and tb > ta, f"B's token {tb} is larger than A's {ta}")
        got = rows(name)
        want = [(ta, i, oa) for i in range(1, steps + 1)] + \
               [(tb, i, ob) for i in range(1, steps + 1)]
        check(got == want, "all of A's writes, then all of B's, none interleaved")
        no_leftovers(name)

    def renewnull(target, via):
        name = f"{a.lang}-{via}-renewnull"
        print(f"== {a.lang} via {via}: the lease is broken mid-step; the next"
              " renewal returns NULL and the worker stops", flush=True)
        oc = f"{a.lang}-C-{uuid.uuid4()}"
        C = run(target, "C", name, oc, "--ttl", 3, "--steps", 10,
                "--step-time", 6, "--timeout", 10)
        m = C.wait_line(r"acquired \S+ token=(\d+)", 20)
        check(m is not None, "C acquired the lease")
        if m is None:
            C.wait(30)
            return
        tc = int(m.group(1))
        check(C.wait_line(r"^renewed until ", 10) is not None, "C renewed once")
        broke = time.monotonic()
        check(q("SELECT dlock_force_release(%s)", name)[0][0] is True,
              "dlock_force_release broke C's lease")
        rc = C.wait(20)
        took = time.monotonic() - broke
        check(rc == 3, f"C exited 3, lease lost (got {rc})")
        check(C.count(r"lease lost: renewal returned NULL") == 1,
              "C saw its renewal return NULL")
        check(took < 4.5, f"C stopped {took:.1f} s after the break (renewal every 1 s,"
              " a step takes 6 s: it stopped in the middle of a step)")
        check(C.count(r"^step \d+ written") == 0 and
              q("SELECT count(*) FROM job_progress WHERE token = %s", tc)[0][0] == 0,
              "C wrote nothing after the break")
        check(C.count(r"^released=false$") == 1, "C's release returned false")
        no_leftovers(name)

    def fenced(target, via):
        name = f"{a.lang}-{via}-fenced"
        print(f"== {a.lang} via {via}: the lease is taken over while the worker"
              " writes; its stale token is refused with DL001", flush=True)
        od, intruder = f"{a.lang}-D-{uuid.uuid4()}", f"intruder-{uuid.uuid4()}"
        D = run(target, "D", name, od, "--ttl", 30, "--steps", 100,
                "--step-time", 0.2, "--timeout", 10)
        m = D.wait_line(r"acquired \S+ token=(\d+)", 20)
        check(m is not None, "D acquired the lease")
        if m is None:
            D.wait(30)
            return
        td = int(m.group(1))
        check(D.wait_line(r"^step 2 written", 20) is not None, "D wrote steps 1 and 2")
        with admin.transaction():
            admin.execute("SELECT dlock_force_release(%s)", (name,))
        # the new holder is of the same role as D: only the token tells
        # them apart
        with psycopg.connect(host=a.host, port=a.pg_port, dbname="postgres",
                             user=a.user, password=a.password, autocommit=True) as other:
            ti, t_taken = other.execute(
                "SELECT dlock_try(%s, '30 seconds', %s), clock_timestamp()",
                (name, intruder)).fetchone()
        check(ti is not None and ti > td, f"another owner took the lease, token {ti} > {td}")
        rc = D.wait(20)
        check(rc == 4, f"D exited 4, fenced write refused (got {rc})")
        check(D.count(r"fenced write refused \(DL001") == 1,
              "D's write with the stale token failed with DL001")
        written = D.count(r"^step \d+ written")
        got = rows(name)
        check(got == [(td, i, od) for i in range(1, written + 1)],
              f"exactly the {written} writes D reported are in the table;"
              " the refused one did not commit")
        check(q("SELECT count(*) FROM job_progress WHERE job = %s AND written_at > %s",
                name, t_taken)[0][0] == 0,
              "no write of D committed after the new holder got the lease")
        check(D.count(r"^released=false$") == 1,
              "D's release returned false (it never releases another's lease)")
        check(q("SELECT owner, token FROM dlock_locks WHERE name = %s", name)
              == [(intruder, ti)], "the new holder still holds the lease")
        with psycopg.connect(host=a.host, port=a.pg_port, dbname="postgres",
                             user=a.user, password=a.password, autocommit=True) as other:
            check(other.execute("SELECT dlock_release(%s, %s, %s)",
                                (name, intruder, ti)).fetchone()[0] is True,
                  "the new holder releases it")
        no_leftovers(name)

    def forced_event(target, via):
        name = f"{a.lang}-{via}-event"
        print(f"== {a.lang} via {via}: the lease is broken mid-step; the worker"
              " learns it from its \"forced\" event, before any renewal", flush=True)
        oe = f"{a.lang}-E-{uuid.uuid4()}"
        E = run(target, "E", name, oe, "--ttl", 30, "--steps", 10,
                "--step-time", 6, "--timeout", 10, "--events-url", events_url())
        m = E.wait_line(r"acquired \S+ token=(\d+)", 20)
        check(m is not None, "E acquired the lease")
        if m is None:
            E.wait(30)
            return
        te = int(m.group(1))
        broke = time.monotonic()
        check(q("SELECT dlock_force_release(%s)", name)[0][0] is True,
              "dlock_force_release broke E's lease")
        rc = E.wait(20)
        took = time.monotonic() - broke
        check(rc == 3, f"E exited 3, lease lost (got {rc})")
        check(E.count(r"^lease lost: lease forced \(event seq \d+\); stopping work$") == 1,
              "E learned it from its forced event")
        check(E.count(r"^renewed until ") == 0, "E had not renewed (its first renewal"
              " was due 10 s after the grant)")
        check(E.count(r"^step \d+ written") == 0 and
              q("SELECT count(*) FROM job_progress WHERE token = %s", te)[0][0] == 0,
              f"E wrote nothing: it stopped within its first 6 s step ({took:.1f} s"
              " after the break)")
        check(E.count(r"^released=false$") == 1, "E's release returned false")
        no_leftovers(name)

    direct = (a.pg_port, "postgres")
    bouncer = (a.bouncer_port, a.bouncer_db)
    t0 = time.monotonic()
    contend(direct, "direct")
    contend(bouncer, "pgbouncer")
    renewnull(bouncer, "pgbouncer")
    fenced(bouncer, "pgbouncer")
    if a.lang in ("java", "node"):
        forced_event(bouncer, "pgbouncer")
    check(q("SELECT count(*) FROM dlock_locks")[0][0] == 0
          and q("SELECT count(*) FROM dlock_waiters")[0][0] == 0,
          "dlock_locks and dlock_waiters are empty at the end")
    print(f"{a.lang}: {time.monotonic() - t0:.1f} s,"
          f" {len(failures)} failed check(s)", flush=True)
    for f in failures:
        print(f"FAILED: {f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
