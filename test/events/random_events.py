#!/usr/bin/env python3
"""A randomized run of lease changes under one LISTEN connection
(test/suites/events.sh), then check_events.py over what it received.

    random_events.py --dlock PATH/TO/dlock --out DIR [--seed N]
                     [--duration S] [--clients N]

The server is the one libpq's environment names (PGHOST, PGPORT, ...),
with the extension created and nothing else running.  dlock.events is set
on for the database.  `dlock watch --json` records every event; CLIENTS psql
sessions run random scripts for DURATION seconds: tries and timed acquires
(exclusive, shared, permits of a semaphore), releases, forced releases,
ttls short enough to expire (some inside longer transactions), memory-only
and durable leases, transactions and savepoints rolled back.  Each client
prints the tokens it got, tagged C (its transaction committed) or R (rolled
back).  At the end every name is forced free, the run waits until each
granted lease's end arrived (or 60 s), and the checker compares the stream
with the clients' tokens and dlock_stats.  Exit status: the checker's.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

NAMES = ["n%d" % i for i in range(5)]
SEMAPHORES = {"sem0": 2, "sem1": 3}
TTLS = ["100 ms", "300 ms", "1 s", "3 s"]


def sql(s):
    return s.rstrip() + "\n"


def lit(s):
    return "'" + s.replace("'", "''") + "'"


class Script:
    """One client's random script; owners are per client and mode, so no call
    errors (a mode conflict with the owner's own lease would abort a
    transaction whose tokens are tagged committed); the one documented error
    left, a force release of a lease whose grant is still open when it
    expires, is caught."""

    def __init__(self, rnd, client):
        self.rnd = rnd
        self.c = client
        self.lines = []

    def owner(self, mode, rb=False):
        return "c%d%s%s" % (self.c, mode[0], "-rb" if rb else "")

    def grant_call(self, rb=False, ttl=None, wait=False):
        r = self.rnd
        if r.random() < 0.2:
            name = r.choice(sorted(SEMAPHORES))
            mode, extra = "permits", ", permits => %d" % SEMAPHORES[name]
            kind = "exclusive"
        else:
            name = r.choice(NAMES)
            mode = kind = r.choice(["exclusive", "exclusive", "shared"])
            extra = ""
        ttl = ttl or r.choice(TTLS)
        own = self.owner(mode, rb)
        if wait:
            call = "dlock_acquire(%s, %s, %s, %s, %s%s)" % (
                lit(name), lit(ttl), lit("%d ms" % r.choice([50, 200, 500])),
                lit(own), lit(kind), extra)
        else:
            call = "dlock_try(%s, %s, %s, %s%s)" % (lit(name), lit(ttl), lit(own),
                                                   lit(kind), extra)
        return name, own, call

    def grant(self, tag="C", rb=False, ttl=None, wait=False):
        name, own, call = self.grant_call(rb, ttl, wait)
        self.lines.append(sql("SELECT %s || '|' || t FROM (SELECT %s AS t) s WHERE t IS NOT NULL;" %
                              (lit(tag), call)))
        return name, own

    def op(self):
        r = self.rnd
        x = r.random()
        if x < 0.25:
            self.grant()
        elif x < 0.35:
            self.grant(wait=True)
        elif x < 0.55:
            name = r.choice(NAMES + sorted(SEMAPHORES))
            mode = r.choice(["exclusive", "shared", "permits"])
            self.lines.append(sql("SELECT dlock_release(%s, %s) IS NULL;" %
                                  (lit(name), lit(self.owner(mode)))))
        elif x < 0.60:
            name = r.choice(NAMES + sorted(SEMAPHORES))
            # a lease whose granting transaction outlives its ttl cannot be
            # forced: 55P03 after waiting until it expires (docs/semantics.md)
            self.lines.append(sql(
                "DO $$BEGIN PERFORM dlock_force_release(%s); "
                "EXCEPTION WHEN lock_not_available THEN NULL; END$$;" % lit(name)))
        elif x < 0.67:
            # rolled back, with a wait inside sometimes
            self.lines.append(sql("BEGIN;"))
            self.grant("R", rb=True)
            if r.random() < 0.5:
                self.lines.append(sql("SELECT pg_sleep(%.3f);" % r.choice([0.01, 0.15, 0.4])))
            self.lines.append(sql("ROLLBACK;"))
        elif x < 0.74:
            # a savepoint rolled back inside a committed transaction
            self.lines.append(sql("BEGIN;"))
            self.grant("C")
            self.lines.append(sql("SAVEPOINT s;"))
            self.grant("R", rb=True)
            self.lines.append(sql("ROLLBACK TO s;"))
            self.grant("C")
            self.lines.append(sql("COMMIT;"))
        elif x < 0.80:
            # a short ttl inside a longer transaction: it may expire first
            commit = r.random() < 0.6
            self.lines.append(sql("BEGIN;"))
            self.grant("C" if commit else "R", rb=not commit, ttl="100 ms")
            self.lines.append(sql("SELECT pg_sleep(0.2);"))
            if r.random() < 0.5:
                name = r.choice(NAMES)
                self.lines.append(sql("SELECT dlock_release(%s, %s) IS NULL;" %
                                      (lit(name), lit(self.owner("exclusive")))))
            self.lines.append(sql("COMMIT;" if commit else "ROLLBACK;"))
        elif x < 0.85:
            # releases rolled back; a release and a grant in one transaction
            self.lines.append(sql("BEGIN;"))
            name = r.choice(NAMES)
            self.lines.append(sql("SELECT dlock_release(%s, %s) IS NULL;" %
                                  (lit(name), lit(self.owner("exclusive")))))
            if r.random() < 0.5:
                self.lines.append(sql("ROLLBACK;"))
            else:
                self.grant("C")
                self.lines.append(sql("COMMIT;"))
        elif x < 0.90:
            self.lines.append(sql("SET dlock.durable = %s;" % r.choice(["on", "off"])))
        else:
            self.lines.append(sql("SELECT pg_sleep(%.3f);" % r.choice([0.02, 0.1, 0.3])))

    def build(self, ops):
        self.lines.append(sql("SET dlock.durable = %s;" % self.rnd.choice(["on", "off"])))
        for _ in range(ops):
            self.op()
            if self.rnd.random() < 0.5:
                self.lines.append(sql("SELECT pg_sleep(%.3f);" % (self.rnd.random() * 0.03)))
        return "".join(self.lines)


def psql(*args, check=True):
    r = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"] + list(args),
                       capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit("psql %s failed: %s" % (args, r.stderr))
    return r.stdout


def stats_grants():
    return int(psql("-c", "SELECT grants FROM dlock_stats").strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlock", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=int(time.time() * 1000) % 1000000007)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--clients", type=int, default=4)
    a = ap.parse_args()
    print("random_events: seed %d (rerun with EVENTS_SEED=%d)" % (a.seed, a.seed), flush=True)
    rnd = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))

    psql("-c", "ALTER DATABASE %s SET dlock.events = on" %
         psql("-c", "SELECT quote_ident(current_database())").strip())

    evfile = os.path.join(a.out, "events.jsonl")
    errfile = os.path.join(a.out, "watch.err")
    watch = subprocess.Popen([a.dlock, "-v", "watch", "--json"],
                             stdout=open(evfile, "w"), stderr=open(errfile, "w"))
    deadline = time.monotonic() + 30
    while "listening" not in open(errfile).read():
        if watch.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("dlock watch did not start: " + open(errfile).read())
        time.sleep(0.05)
    psql("-c", "SELECT dlock_stats_reset()")

    # each client's script, then run for about the duration (ops take ~50 ms)
    clients = []
    for c in range(a.clients):
        path = os.path.join(a.out, "client%d.sql" % c)
        with open(path, "w") as f:
            f.write(Script(rnd, c).build(int(a.duration * 12)))
        out = open(os.path.join(a.out, "client%d.out" % c), "w")
        err = open(os.path.join(a.out, "client%d.err" % c), "w")
        clients.append((subprocess.Popen(
            ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-f", path],
            stdout=out, stderr=err), c))
    # the scripts are sized for the duration; none is cut short, as a client
    # cut short inside a transaction would leave tokens tagged wrongly
    failed = []
    for p, c in clients:
        try:
            p.wait(timeout=a.duration * 5 + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        err = open(os.path.join(a.out, "client%d.err" % c)).read()
        if p.returncode != 0 or "ERROR" in err:
            failed.append("client %d: exit %d: %s" % (c, p.returncode, err[-500:]))

    rolled_back, committed = set(), set()
    for p, c in clients:
        for line in open(os.path.join(a.out, "client%d.out" % c)):
            parts = line.strip().split("|")
            if len(parts) == 2 and parts[0] in ("C", "R"):
                (rolled_back if parts[0] == "R" else committed).add(int(parts[1]))
    # (a token tagged both would be a check failing: it is kept in both)

    # end everything, and wait for every grant's end to arrive
    for name in NAMES + sorted(SEMAPHORES):
        psql("-c", "SELECT dlock_force_release(%s)" % lit(name))
    deadline = time.monotonic() + 60
    while True:
        events = [json.loads(x) for x in open(evfile) if x.strip()]
        grants = sum(e["event"] == "granted" for e in events)
        ends = len(events) - grants
        live = int(psql("-c", "SELECT count(*) FROM dlock_locks").strip())
        if (live == 0 and grants == ends and
                grants == stats_grants() - len(rolled_back)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if watch.poll() is not None:
        failed.append("dlock watch exited %d: %s" % (watch.returncode, open(errfile).read()))
    watch.terminate()
    watch.wait()

    with open(os.path.join(a.out, "rolled_back"), "w") as f:
        f.write("".join("%d\n" % t for t in sorted(rolled_back)))
    with open(os.path.join(a.out, "committed"), "w") as f:
        f.write("".join("%d\n" % t for t in sorted(committed)))
    print("random_events: %d clients, %d committed grants, %d rolled back" %
          (a.clients, len(committed), len(rolled_back)), flush=True)
    rc = subprocess.call([sys.executable, os.path.join(here, "check_events.py"), evfile,
                          os.path.join(a.out, "rolled_back"), os.path.join(a.out, "committed"),
                          str(stats_grants()),
                          ",".join("%s=%d" % kv for kv in sorted(SEMAPHORES.items()))])
    for f in failed:
        print("random_events: " + f)
    return 1 if failed or rc != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
