#!/usr/bin/env python3
"""dlock through PgBouncer in transaction mode: scripted demonstrations and a
multi-process stress with a checker.  Used by test/suites/pgbouncer.sh, which
starts the cluster and PgBouncer with these pools (all dbname=postgres):

    app          pool_size=3   the stress clients' calls
    app_wait     pool_size=4   the stress clients' blocking dlock_acquire
    owner2       pool_size=2   default-owner demonstrations
    small        pool_size=2   pool exhaustion by blocked waiters
    small_wait   pool_size=2   ... and the fix: waiters in a pool of their own

Parts (each prints "ok:" or "FAILED:" lines; exit status 1 if any failed):

  default-owner  with two server connections and two clients pinning them in
                 turn: dlock_try with the default owner, then dlock_release
                 with the default owner routed to the other server connection
                 returns false and the lease stays, held by an owner string
                 no client knows; a different client that lands on the first
                 server connection releases it.  SET dlock.owner leaks to the
                 next client of that server connection.  An explicit owner
                 (and SET LOCAL) works across server connections.
  blocking       dlock_acquire through the pooler: listed in dlock_waiters,
                 granted at once on a release through another pool; cancel
                 (forwarded by PgBouncer), client disconnect and timeout each
                 leave the queue.
  exhaustion     as many blocked waiters as the pool has server connections:
                 the holder's release through the same pool waits until a
                 waiter times out; with the waiters in a separate pool it goes
                 through at once.
  stress         N processes acquire (dlock_try through app, dlock_acquire with
                 a timeout through app_wait), renew and release leases on a few
                 names with explicit owners, doing a non-atomic read-modify-
                 write on a counter (in separate transactions, so on shuffled
                 server connections) and a fenced journal insert while holding.
                 Checked: no lost update, journal tokens in grant order and
                 one owner per token, every renewal returned an expiry that
                 dlock_locks then showed for the client's token, every release
                 with the right token returned true and one with a wrong token
                 or another owner false, releases often on another server connection than the
                 grant, dlock_stats agrees with the clients' counts, nothing
                 expired, and at the end dlock_locks, dlock_waiters and
                 dlock_leases are empty and no client waits in PgBouncer.
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid

import psycopg
import psycopg.sql

failures = []


def check(cond, what):
    print(f"  {'ok' if cond else 'FAILED'}: {what}", flush=True)
    if not cond:
        failures.append(what)
    return cond


A = None	# parsed arguments


def bouncer(db, **kw):
    return psycopg.connect(
        host="127.0.0.1", port=A.bouncer_port, dbname=db, user=A.user,
        password=A.password, autocommit=True, prepare_threshold=None, **kw)


def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()


def new_owner(tag):
    return f"{socket.gethostname()}:{os.getpid()}:{tag}:{uuid.uuid4()}"


def admin():
    return psycopg.connect(A.admin_dsn, autocommit=True)


def pool_stats(db):
    """SHOW POOLS row of PgBouncer for database db, as a dict."""
    with psycopg.connect(host="127.0.0.1", port=A.bouncer_port, dbname="pgbouncer",
                         user=A.user, password=A.password, autocommit=True,
                         prepare_threshold=None) as c:
        cur = c.cursor()
        cur.execute("SHOW POOLS")
        cols = [d.name for d in cur.description]
        for row in cur.fetchall():
            r = dict(zip(cols, row))
            if r["database"] == db:
                return r
    return {}


class Pinner:
    """Two clients of a pool of two server connections; pin(pid) leaves
    only server connection `pid` free, so the next autocommit statement of
    any other client of the pool runs there; unpin() ends the pin."""

    def __init__(self, db):
        self.c = [bouncer(db), bouncer(db)]
        self.held = None

    def pin(self, pid):
        pids = []
        for c in self.c:
            c.execute("BEGIN")
            pids.append(one(c, "SELECT pg_backend_pid()")[0])
        assert len(set(pids)) == 2, f"two transactions on one server connection? {pids}"
        if pid not in pids:
            raise AssertionError(f"server connection {pid} is not in the pool {pids}")
        free = pids.index(pid)
        self.c[free].execute("COMMIT")
        self.held = self.c[1 - free]
        return pids[1 - free]		# the server connection kept busy

    def unpin(self):
        self.held.execute("COMMIT")
        self.held = None

    def close(self):
        for c in self.c:
            c.close()


def part_default_owner():
    print("== default owner behind a transaction pooler (pool of 2 server"
          " connections, pinned in turn)", flush=True)
    adm = admin()
    x = bouncer("owner2")		# the application's client
    other = bouncer("owner2")	# some other client of the same pool
    p = Pinner("owner2")
    try:
        tok, pid_a, owner_a = one(x, "SELECT dlock_try('report', '60 seconds'),"
                                     " pg_backend_pid(), dlock_owner()")
        check(tok is not None and owner_a.startswith("session:"),
              f"dlock_try with the default owner: token {tok}, owner {owner_a}"
              f" (server connection {pid_a})")
        pid_b = p.pin(pid_a)		# busy: b; free: a
        p.unpin()
        p.pin(pid_b)			# busy: a; free: b
        released, pid, owner_b = one(x, "SELECT dlock_release('report'),"
                                        " pg_backend_pid(), dlock_owner()")
        check(pid == pid_b and pid_b != pid_a,
              f"the release went to the other server connection ({pid})")
        check(owner_b != owner_a,
              f"... where dlock_owner() is another string: {owner_b}")
        check(released is False, "so dlock_release with the default owner returned false")
        rows = adm.execute("SELECT owner, token FROM dlock_locks WHERE name = 'report'").fetchall()
        check(rows == [(owner_a, tok)],
              "and the lease is still held, by an owner the client no longer has")
        p.unpin()
        p.pin(pid_a)			# free: a
        released, pid = one(other, "SELECT dlock_release('report'), pg_backend_pid()")
        check(pid == pid_a and released is True,
              "another client routed to the first server connection released it"
              " with its own default owner: true")
        check(adm.execute("SELECT count(*) FROM dlock_locks WHERE name = 'report'").fetchone()[0] == 0,
              "the lease is gone, released by a client that never took it")
        p.unpin()

        # SET dlock.owner is session state: it stays on the server connection.
        p.pin(pid_a)
        _, pid = one(x, "SELECT set_config('dlock.owner', 'client-x', false),"
                        " pg_backend_pid()")
        p.unpin()
        p.pin(pid_a)
        owner, pid2 = one(other, "SELECT dlock_owner(), pg_backend_pid()")
        check(pid == pid_a and pid2 == pid_a and owner == "client-x",
              "SET dlock.owner by one client is the default owner of the next"
              f" client on that server connection: {owner!r}")
        other.execute("RESET dlock.owner")
        p.unpin()

        # The fix: an explicit owner per call (or SET LOCAL in a transaction).
        me = new_owner("x")
        tok, pid_a2 = one(x, "SELECT dlock_try('report', '60 seconds', %s),"
                             " pg_backend_pid()", me)
        pid_b2 = p.pin(pid_a2)
        p.unpin()
        p.pin(pid_b2)			# free: the other one
        until, pid_r = one(x, "SELECT dlock_renew('report', '60 seconds', %s),"
                              " pg_backend_pid()", me)
        check(until is not None and pid_r == pid_b2 != pid_a2,
              "explicit owner: renewed on the other server connection")
        stolen = one(p.held, "SELECT dlock_release('report')")[0]
        check(stolen is False,
              "a client with its default owner on the first connection cannot release it")
        p.unpin()
        p.pin(pid_b2)
        released, pid_r = one(x, "SELECT dlock_release('report', %s, %s),"
                                 " pg_backend_pid()", me, tok)
        check(released is True and pid_r == pid_b2,
              "explicit owner: released with its token on the other server connection")
        p.unpin()

        with x.transaction():
            x.execute("SELECT set_config('dlock.owner', %s, true)", (me,))
            tok = one(x, "SELECT dlock_try('report', '60 seconds')")[0]
            pid_t = one(x, "SELECT pg_backend_pid()")[0]
        p.pin(pid_t)
        pid_o = one(p.held, "SELECT pg_backend_pid()")[0]
        p.unpin()
        p.pin(pid_o)
        with x.transaction():
            x.execute("SELECT set_config('dlock.owner', %s, true)", (me,))
            released, pid_r = one(x, "SELECT dlock_release('report'), pg_backend_pid()")
        check(tok is not None and released is True and pid_r == pid_o != pid_t,
              "SET LOCAL dlock.owner in each transaction also works across server connections")
        p.unpin()
        check(one(other, "SELECT dlock_owner()")[0].startswith("session:") and
              one(x, "SELECT dlock_owner()")[0].startswith("session:"),
              "SET LOCAL left nothing behind on the server connections")
    finally:
        p.close()
        x.close()
        other.close()
        adm.close()


def in_thread(fn, *args):
    """Runs fn(*args) in a thread; returns (thread, result dict)."""
    res = {}

    def run():
        t0 = time.monotonic()
        try:
            res["value"] = fn(*args)
        except Exception as e:		# reported by the caller
            res["error"] = e
        res["took"] = time.monotonic() - t0
        res["end"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, res


def wait_until(pred, timeout, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def waiters(adm, name):
    return adm.execute("SELECT owner FROM dlock_waiters WHERE name = %s"
                       " ORDER BY queue_position", (name,)).fetchall()


def part_blocking():
    print("== blocking dlock_acquire through the pooler", flush=True)
    adm = admin()
    h = bouncer("app")
    w = bouncer("app_wait")
    name = "queue"
    oh, ow = new_owner("holder"), new_owner("waiter")
    try:
        th = one(h, "SELECT dlock_try(%s, '60 seconds', %s)", name, oh)[0]
        t, r = in_thread(lambda: one(w, "SELECT dlock_acquire(%s, '60 seconds',"
                                        " '20 seconds', %s)", name, ow)[0])
        check(wait_until(lambda: waiters(adm, name) == [(ow,)], 10),
              "the waiter is listed in dlock_waiters")
        t_rel = time.monotonic()
        check(one(h, "SELECT dlock_release(%s, %s, %s)", name, oh, th)[0] is True,
              "the holder released through its pool")
        t.join(10)
        check(r.get("value") is not None and r["value"] > th,
              f"the waiter got the lease with a larger token ({r.get('value')}"
              f" > {th}), {r['end'] - t_rel:.2f} s after the release"
              if "end" in r else f"the waiter got the lease: {r}")
        check(r.get("end", 1e9) - t_rel < 1.0, "within a second of the release")
        check(one(w, "SELECT dlock_release(%s, %s, %s)", name, ow, r.get("value"))[0] is True,
              "the waiter released it")

        # cancel, forwarded by PgBouncer to the right server connection
        th = one(h, "SELECT dlock_try(%s, '60 seconds', %s)", name, oh)[0]
        t, r = in_thread(lambda: one(w, "SELECT dlock_acquire(%s, '60 seconds',"
                                        " NULL, %s)", name, ow)[0])
        check(wait_until(lambda: waiters(adm, name) == [(ow,)], 10),
              "a waiter without timeout is queued")
        w.cancel()
        t.join(10)
        check(isinstance(r.get("error"), psycopg.errors.QueryCanceled),
              f"cancel through PgBouncer ended the wait: {r.get('error')!r}")
        check(wait_until(lambda: waiters(adm, name) == [], 3),
              "the cancelled waiter left the queue")

        # a client that disconnects while waiting
        code = ("import psycopg, sys; c = psycopg.connect(sys.argv[1], autocommit=True,"
                " prepare_threshold=None); c.execute(\"SELECT dlock_acquire("
                "'queue', '60 seconds', NULL, 'doomed')\")")
        dsn = (f"host=127.0.0.1 port={A.bouncer_port} dbname=app_wait user={A.user}"
               f" password={A.password}")
        proc = subprocess.Popen([sys.executable, "-c", code, dsn])
        check(wait_until(lambda: waiters(adm, name) == [("doomed",)], 10),
              "a waiter in another process is queued")
        proc.kill()
        proc.wait()
        check(wait_until(lambda: waiters(adm, name) == [], 5),
              "killed, its client connection to PgBouncer closed: it left the queue")

        # timeout
        t0 = time.monotonic()
        got = one(w, "SELECT dlock_acquire(%s, '60 seconds', '0.5 seconds', %s)", name, ow)[0]
        took = time.monotonic() - t0
        check(got is None and 0.4 < took < 3, f"a timeout of 0.5 s returned NULL after {took:.2f} s")
        check(waiters(adm, name) == [], "and left nothing queued")
        check(one(h, "SELECT dlock_release(%s, %s, %s)", name, oh, th)[0] is True,
              "the holder released its lease")
        check(adm.execute("SELECT count(*) FROM dlock_locks WHERE name = %s",
                          (name,)).fetchone()[0] == 0, "nothing left on the name")
        check(wait_until(lambda: pool_stats("app_wait").get("cl_waiting") == 0, 5),
              "no client waits in PgBouncer's app_wait pool")
    finally:
        h.close()
        w.close()
        adm.close()


def part_exhaustion():
    print("== pool size caveat: blocked waiters hold server connections", flush=True)
    adm = admin()
    name = "scarce"

    def scenario(waiter_db):
        h = bouncer("small")
        oh = new_owner("holder")
        ws = [bouncer(waiter_db) for _ in range(2)]
        ows = [new_owner(f"w{i}") for i in range(2)]
        th = one(h, "SELECT dlock_try(%s, '60 seconds', %s)", name, oh)[0]
        runs = []
        for i in range(2):
            runs.append(in_thread(lambda c=ws[i], o=ows[i]: one(
                c, "SELECT dlock_acquire(%s, '60 seconds', '3 seconds', %s)",
                name, o)[0]))
            wait_until(lambda n=i + 1: len(waiters(adm, name)) == n, 5)
            if i == 0:
                t_first = time.monotonic()
                time.sleep(0.5)
        check(len(waiters(adm, name)) == 2, f"two waiters queued through {waiter_db}")
        t0 = time.monotonic()
        released = one(h, "SELECT dlock_release(%s, %s, %s)", name, oh, th)[0]
        took = time.monotonic() - t0
        res = []
        for i, (t, r) in enumerate(runs):
            t.join(10)
            v = r.get("value", r.get("error"))
            res.append(v)
            if isinstance(v, int):	# the next waiter gets it
                one(ws[i], "SELECT dlock_release(%s, %s, %s)", name, ows[i], v)
        for c in ws + [h]:
            c.close()
        return released, took, t0 - t_first, res

    released, took, after_first, res = scenario("small")
    wait_first = 3 - after_first
    check(released is True and took > wait_first - 0.5,
          f"pool of 2, both server connections held by blocked waiters: the release"
          f" through the same pool waited {took:.2f} s, until the first waiter's"
          f" timeout ({wait_first:.2f} s away)")
    check(res[0] is None and isinstance(res[1], int),
          f"the first waiter timed out (NULL) and the second got the lease: {res}")
    released, took, _, res = scenario("small_wait")
    check(released is True and took < 1.0,
          f"waiters in their own pool: the release went through in {took:.2f} s")
    check(isinstance(res[0], int) and isinstance(res[1], int) and res[1] > res[0],
          f"and both waiters got the lease in turn: {res}")
    check(adm.execute("SELECT count(*) FROM dlock_locks WHERE name = %s",
                      (name,)).fetchone()[0] == 0 and waiters(adm, name) == [],
          "nothing left on the name")
    adm.close()


# ------------------------------------------------------------------ stress

NAMES = ["s0", "s1", "s2"]
TTL = "10 seconds"
RENEW_TTL = "20 seconds"	# not TTL: the view shows whether a renewal took effect


def stress_client(idx, duration, seed, out_path):
    """One client process; writes its counts and failures as JSON."""
    rnd = random.Random(seed * 1000 + idx)
    owner = new_owner(f"c{idx}")
    st = {"grants": 0, "immediate": 0, "waited": 0, "timeouts": 0, "busy": 0,
          "renewals": 0, "releases": 0, "wrong_token_releases": 0,
          "increments": {n: 0 for n in NAMES}, "tokens": [],
          "backends": [], "release_elsewhere": 0, "renew_elsewhere": 0,
          "failures": []}

    def fail(msg):
        st["failures"].append(msg)

    backends = set()
    try:
        c = bouncer("app")
        cw = bouncer("app_wait")
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            name = rnd.choice(NAMES)
            if rnd.random() < 0.5:
                token, gpid = one(c, "SELECT dlock_try(%s, %s, %s), pg_backend_pid()",
                                  name, TTL, owner)
                if token is None:
                    st["busy"] += 1
                    time.sleep(rnd.uniform(0.005, 0.03))
                    continue
                st["immediate"] += 1
            else:
                token, gpid = one(cw, "SELECT dlock_acquire(%s, %s, '2 seconds', %s),"
                                      " pg_backend_pid()", name, TTL, owner)
                if token is None:
                    st["timeouts"] += 1
                    continue
                st["waited"] += 1
            st["grants"] += 1
            st["tokens"].append([name, token])
            backends.add(gpid)
            last_pid = gpid
            for _ in range(rnd.randint(1, 3)):
                # non-atomic read-modify-write in two transactions
                v, p1 = one(c, "SELECT v, pg_backend_pid() FROM counters WHERE name = %s", name)
                time.sleep(rnd.uniform(0, 0.01))
                p2 = one(c, "UPDATE counters SET v = %s WHERE name = %s"
                            " RETURNING pg_backend_pid()", v + 1, name)[0]
                st["increments"][name] += 1
                backends.update((p1, p2))
                # fenced journal entry
                with c.transaction():
                    c.execute("SELECT dlock_fence(%s, %s)", (name, token))
                    c.execute("INSERT INTO journal (name, token, owner)"
                              " VALUES (%s, %s, %s)", (name, token, owner))
                # renewal, then the view must show it on our token
                until, rpid = one(c, "SELECT dlock_renew(%s, %s, %s), pg_backend_pid()",
                                  name, RENEW_TTL, owner)
                if until is None:
                    fail(f"renewal of {name} token {token} returned NULL")
                    break
                st["renewals"] += 1
                if rpid != last_pid:
                    st["renew_elsewhere"] += 1
                last_pid = rpid
                backends.add(rpid)
                # dlock_locks converts the monotonic expiry to wall-clock time
                # when it is read, and renew when it returns: the two can
                # differ by a few ms when a process is preempted in between
                # (0.5 s allowed; a renewal that did not take effect would
                # differ by about 10 s).
                row = c.execute("SELECT owner, token, abs(extract(epoch FROM"
                                " expires_at - %s)) FROM dlock_locks"
                                " WHERE name = %s", (until, name)).fetchall()
                if (len(row) != 1 or row[0][:2] != (owner, token)
                        or row[0][2] > 0.5):
                    fail(f"after renewing {name} token {token} until {until},"
                         f" dlock_locks shows {row}")
            if rnd.random() < 0.2:
                # a wrong token, or another owner with the right token, must
                # not reach the lease
                bad = token + rnd.choice([-1, 1])
                if one(c, "SELECT dlock_release(%s, %s, %s)", name, owner, bad)[0] is not False:
                    fail(f"release of {name} with wrong token {bad} did not return false")
                if one(c, "SELECT dlock_release(%s, %s, %s)", name, owner + "-x", token)[0] \
                        is not False:
                    fail(f"release of {name} by another owner did not return false")
                # (rolled back: dlock 1.0 counts a committed NULL renewal in
                # dlock_stats.renewals)
                with c.transaction(force_rollback=True):
                    if one(c, "SELECT dlock_renew(%s, %s, %s)", name, TTL,
                           owner + "-x")[0] is not None:
                        fail(f"renewal of {name} by another owner did not return NULL")
                st["wrong_token_releases"] += 1
            ok, ppid = one(c, "SELECT dlock_release(%s, %s, %s), pg_backend_pid()",
                           name, owner, token)
            backends.add(ppid)
            if ok is not True:
                fail(f"release of {name} token {token} returned {ok}")
            else:
                st["releases"] += 1
            if ppid != gpid:
                st["release_elsewhere"] += 1
            left = one(c, "SELECT count(*) FROM dlock_locks WHERE name = %s AND token = %s",
                       name, token)[0]
            if left:
                fail(f"lease {name} token {token} still listed after its release")
            time.sleep(rnd.uniform(0, 0.01))
        c.close()
        cw.close()
    except Exception:
        fail("exception: " + traceback.format_exc())
    st["backends"] = sorted(backends)
    with open(out_path, "w") as f:
        json.dump(st, f)


def part_stress():
    print(f"== stress: {A.clients} clients, {A.duration} s, names {NAMES},"
          " pools app (3) and app_wait (4)", flush=True)
    adm = admin()
    adm.execute("CREATE TABLE counters (name text PRIMARY KEY, v bigint NOT NULL)")
    adm.execute("INSERT INTO counters SELECT n, 0 FROM unnest(%s::text[]) n", (NAMES,))
    adm.execute("CREATE TABLE journal (id bigserial PRIMARY KEY, name text NOT NULL,"
                " token bigint NOT NULL, owner text NOT NULL)")
    adm.execute(psycopg.sql.SQL(
        "GRANT SELECT, UPDATE ON counters TO {0}; GRANT SELECT, INSERT ON journal TO {0};"
        " GRANT USAGE ON SEQUENCE journal_id_seq TO {0}").format(
            psycopg.sql.Identifier(A.user)))
    adm.execute("SELECT dlock_stats_reset()")
    seed = A.seed
    print(f"  seed {seed} (rerun with PGBOUNCER_SEED={seed})", flush=True)
    ctx = mp.get_context("fork")
    outs, procs = [], []
    for i in range(A.clients):
        path = os.path.join(A.workdir, f"client{i}.json")
        outs.append(path)
        p = ctx.Process(target=stress_client, args=(i, A.duration, seed, path))
        p.start()
        procs.append(p)
    # Meanwhile, PgBouncer never has more server connections than the pools.
    max_sv = 0
    while any(p.is_alive() for p in procs):
        try:
            s = pool_stats("app")
            w = pool_stats("app_wait")
            max_sv = max(max_sv, sum(int(x.get(k, 0)) for x in (s, w)
                                     for k in ("sv_active", "sv_idle", "sv_used")))
        except psycopg.Error:
            pass
        time.sleep(0.2)
    for p in procs:
        p.join(A.duration + 60)
    sts = []
    for i, path in enumerate(outs):
        if procs[i].exitcode != 0 or not os.path.exists(path):
            check(False, f"client {i} exited with {procs[i].exitcode} and no report")
            continue
        with open(path) as f:
            sts.append(json.load(f))

    tot = lambda k: sum(s[k] for s in sts)
    fails = [f for s in sts for f in s["failures"]]
    for f in fails[:10]:
        print(f"    {f}", flush=True)
    check(not fails, f"no client saw a NULL renewal, a failed release, a wrong"
                     f" lease in dlock_locks or an error ({len(fails)} problems)")
    print(f"  grants {tot('grants')} (try {tot('immediate')}, acquire {tot('waited')}),"
          f" try busy {tot('busy')}, acquire timeouts {tot('timeouts')},"
          f" renewals {tot('renewals')}, releases {tot('releases')},"
          f" wrong-token/owner release attempts {tot('wrong_token_releases')}", flush=True)
    check(tot("grants") >= 3 * A.clients and tot("waited") > 0 and tot("immediate") > 0,
          "the clients got leases both ways, many times")

    # mutual exclusion: no lost update
    counters = dict(adm.execute("SELECT name, v FROM counters").fetchall())
    incs = {n: sum(s["increments"][n] for s in sts) for n in NAMES}
    check(counters == incs, f"no lost update: counters {counters} == increments {incs}")

    # journal: tokens in grant order, one owner per token, each token one run
    ok = True
    granted = {(n, t) for s in sts for n, t in s["tokens"]}
    seen = set()
    for n in NAMES:
        rows = adm.execute("SELECT token, owner FROM journal WHERE name = %s ORDER BY id",
                           (n,)).fetchall()
        prev, owners = None, {}
        for tok, own in rows:
            if owners.setdefault(tok, own) != own:
                ok = False
                print(f"    token {tok} of {n} written by two owners", flush=True)
            if prev is not None and tok < prev:
                ok = False
                print(f"    journal of {n}: token {tok} after {prev}", flush=True)
            prev = tok
            seen.add((n, tok))
    check(ok, "journal: per name, tokens never go back and each token has one owner")
    check(seen <= granted and len(seen) == len(granted),
          f"journal: exactly the {len(granted)} granted leases wrote to it")

    # the server connections were shuffled under the clients
    all_backends = {b for s in sts for b in s["backends"]}
    check(len(all_backends) <= 7,
          f"{A.clients} clients ran on {len(all_backends)} server connections"
          f" (pools of 3 + 4; PgBouncer showed at most {max_sv})")
    check(all(len(s["backends"]) >= 2 for s in sts),
          "every client's calls ran on at least two server connections")
    check(tot("release_elsewhere") >= tot("releases") // 5,
          f"{tot('release_elsewhere')} of {tot('releases')} releases ran on another"
          " server connection than their grant, and reached their lease")
    check(tot("renew_elsewhere") > 0,
          f"{tot('renew_elsewhere')} renewals ran on another server connection than"
          " the previous call")

    # dlock's own counters agree with the clients'
    stats = dict(zip(["grants", "immediate_grants", "waits", "wait_timeouts",
                      "releases", "renewals", "expired_by_worker",
                      "expired_by_sweep", "expired_by_caller"],
                     adm.execute("SELECT grants, immediate_grants, waits, wait_timeouts,"
                                 " releases, renewals, expired_by_worker,"
                                 " expired_by_sweep, expired_by_caller"
                                 " FROM dlock_stats").fetchone()))
    print(f"  dlock_stats: {stats}", flush=True)
    check(stats["grants"] == tot("grants"), "dlock_stats.grants == the clients' grants")
    check(stats["releases"] == tot("releases"), "dlock_stats.releases == the clients' releases")
    check(stats["renewals"] == tot("renewals"), "dlock_stats.renewals == the clients' renewals")
    check(stats["wait_timeouts"] == tot("timeouts"),
          "dlock_stats.wait_timeouts == the clients' acquire timeouts")
    check(stats["expired_by_worker"] + stats["expired_by_sweep"] + stats["expired_by_caller"] == 0,
          "no lease expired: every one was released")

    # nothing leaked
    check(adm.execute("SELECT count(*) FROM dlock_locks").fetchone()[0] == 0,
          "dlock_locks is empty")
    check(adm.execute("SELECT count(*) FROM dlock_waiters").fetchone()[0] == 0,
          "dlock_waiters is empty")
    adm.execute("SELECT dlock_sweep()")
    check(adm.execute("SELECT count(*) FROM dlock_leases").fetchone()[0] == 0,
          "dlock_leases has no rows left")
    pools = [pool_stats(db) for db in ("app", "app_wait")]
    check(all(p.get("cl_waiting") == 0 for p in pools),
          "no client is left waiting in PgBouncer")
    adm.close()


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("--admin-dsn", required=True)
    ap.add_argument("--bouncer-port", required=True, type=int)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--parts", default="default-owner,blocking,exhaustion,stress")
    A = ap.parse_args()
    t0 = time.monotonic()
    parts = {"default-owner": part_default_owner, "blocking": part_blocking,
             "exhaustion": part_exhaustion, "stress": part_stress}
    for p in A.parts.split(","):
        try:
            parts[p]()
        except Exception:
            traceback.print_exc()
            check(False, f"{p}: unexpected exception")
    adm = admin()
    check(adm.execute("SELECT count(*) FROM dlock_locks").fetchone()[0] == 0 and
          adm.execute("SELECT count(*) FROM dlock_waiters").fetchone()[0] == 0,
          "at the end, dlock_locks and dlock_waiters are empty")
    adm.close()
    print(f"pgbouncer: {time.monotonic() - t0:.1f} s, {len(failures)} failed check(s)",
          flush=True)
    for f in failures:
        print(f"FAILED: {f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
