#!/usr/bin/env python3
"""Runs N instances of examples/python/leader.py (through PgBouncer in
transaction mode) and checks the leader-election recipe:

  * exactly one instance leads, and only it writes, for longer than the TTL
    (its renewals keep the lease);
  * SIGTERM: the leader releases; a follower leads within a second or so;
  * SIGSTOP (a frozen leader): a follower leads once the TTL has run out,
    not before; after SIGCONT the old leader steps down (NULL renewal or a
    write refused with DL001) without writing, and follows again;
  * SIGKILL (a crashed leader): a follower leads once the TTL has run out;
  * the log of the leaders' fenced writes, in commit order, has tokens that
    never go back and one leader per token, so no two terms overlapped;
  * after SIGTERM to all, dlock_locks and dlock_waiters are empty;
  * change events (--events-dsn, a direct session connection): an observer
    (--observe) prints each new leader and each end from the events alone;
    a leader whose lease is force-released steps down on its "forced"
    event (its renewals come every 10 s here, its events within ms), and
    the observer saw the grant, the force and the next grant in that order.

Used by test/suites/leader.sh.  Exit status 0 when every check holds.
"""
import argparse
import os
import re
import signal
import sys
import time

import psycopg
import psycopg.sql

from common import Example, check, failures

DDL = """
CREATE TABLE leader_state (
    id int PRIMARY KEY,
    leader text,
    token bigint NOT NULL,
    beats bigint NOT NULL DEFAULT 0,
    updated_at timestamptz);
INSERT INTO leader_state (id, token) VALUES (1, 0);
CREATE TRIGGER leader_state_fenced BEFORE UPDATE ON leader_state
    FOR EACH ROW EXECUTE FUNCTION dlock_fenced('{name}', 'token');
CREATE TABLE leader_log (
    id bigserial PRIMARY KEY,
    token bigint NOT NULL,
    leader text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TRIGGER leader_log_fenced BEFORE INSERT ON leader_log
    FOR EACH ROW EXECUTE FUNCTION dlock_fenced('{name}', 'token');
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", required=True)
    ap.add_argument("--admin-dsn", required=True)
    ap.add_argument("--dsn", required=True, help="for the instances")
    ap.add_argument("--user", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--ttl", type=float, default=3.0)
    ap.add_argument("--name", default="orders-leader")
    ap.add_argument("--events-dsn", required=True,
                    help="a direct session connection for LISTEN (not PgBouncer)")
    a = ap.parse_args()
    ttl = a.ttl
    t_start = time.monotonic()

    adm = psycopg.connect(a.admin_dsn, autocommit=True)
    adm.execute(DDL.format(name=a.name))
    adm.execute(psycopg.sql.SQL(
        "GRANT SELECT, UPDATE ON leader_state TO {0};"
        " GRANT SELECT, INSERT ON leader_log TO {0};"
        " GRANT USAGE ON SEQUENCE leader_log_id_seq TO {0}").format(
            psycopg.sql.Identifier(a.user)))

    def q(sql, *args):
        return adm.execute(sql, args).fetchall()

    insts = []
    for i in range(a.instances):
        insts.append(Example([a.python, os.path.join(a.top, "examples/python/leader.py"),
                              "--dsn", a.dsn, "--name", a.name, "--ttl", str(ttl),
                              "--owner", f"instance-{i}"], f"i{i}"))

    def leading_counts():
        return [e.count(r"^leading token=") for e in insts]

    seen_at = {}

    def wait_new_leader(before, timeout, exclude=()):
        """Index of the one instance whose count of 'leading' lines grew;
        seen_at[index] is when that was seen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = leading_counts()
            grown = [i for i in range(len(insts)) if now[i] > before[i]]
            if grown:
                seen_at[grown[0]] = time.monotonic()
                time.sleep(0.3)		# would a second one claim it too?
                now = leading_counts()
                grown = [i for i in range(len(insts)) if now[i] > before[i]]
                check(len(grown) == 1 and grown[0] not in exclude,
                      f"one new leader: instance {grown}")
                return grown[0]
            time.sleep(0.02)
        check(False, f"a new leader within {timeout} s")
        return None

    def token_of(i):
        toks = re.findall(r"^leading token=(\d+)", "\n".join(insts[i].output()), re.M)
        return int(toks[-1])

    def state():
        return q("SELECT leader, token, beats FROM leader_state WHERE id = 1")[0]

    try:
        print(f"== {a.instances} instances start", flush=True)
        L = wait_new_leader([0] * len(insts), 15)
        if L is None:
            return 1
        time.sleep(1.0)
        s1 = state()
        time.sleep(ttl + 0.5)
        s2 = state()
        check(s1[0] == s2[0] == f"instance-{L}" and s2[1] == token_of(L) and s2[2] > s1[2],
              f"instance {L} leads and writes its heartbeat with token {token_of(L)},"
              f" for longer than the TTL")
        check(sum(leading_counts()) == 1, "nobody else ever led")

        print("== SIGTERM to the leader: it releases, a follower takes over at once",
              flush=True)
        before = leading_counts()
        t0 = time.monotonic()
        insts[L].proc.send_signal(signal.SIGTERM)
        rc = insts[L].wait(10)
        check(rc == 0 and insts[L].count(r"^stopping: released=True") == 1,
              f"instance {L} released its lease and exited 0 (rc {rc})")
        old = L
        L = wait_new_leader(before, 5, exclude=(old,))
        took = seen_at.get(L, 1e9) - t0
        check(L is not None and took < 1.5,
              f"instance {L} led {took:.2f} s after the SIGTERM")
        if L is None:
            return 1

        print(f"== SIGSTOP to the leader (frozen, TTL {ttl} s): a follower takes"
              " over when its lease has run out; SIGCONT: it steps down", flush=True)
        time.sleep(0.5)
        before = leading_counts()
        frozen, frozen_token = L, token_of(L)
        t0 = time.monotonic()
        insts[frozen].proc.send_signal(signal.SIGSTOP)
        L = wait_new_leader(before, ttl + 8, exclude=(frozen,))
        took = seen_at.get(L, 1e9) - t0
        check(L is not None and took > 2 * ttl / 3 - 0.3,
              f"instance {L} led {took:.2f} s after the freeze (not before the"
              f" frozen leader's last renewal ran out: >= 2/3 TTL)")
        if L is None:
            return 1
        check(token_of(L) > frozen_token, "with a larger token")
        insts[frozen].proc.send_signal(signal.SIGCONT)
        m = insts[frozen].wait_line(r"^stepped down: (.*); released=(\S+)$", 10)
        check(m is not None and ("renewal returned NULL" in m.group(1) or "DL001" in m.group(1)
                                 or "connection lost" in m.group(1)),
              f"after SIGCONT the old leader stepped down: {m and m.group(1)}")
        check(m is not None and m.group(2) == "False",
              "its release returned false: the lease is the new leader's")
        time.sleep(1.0)
        check(insts[frozen].proc.poll() is None and state()[0] == f"instance-{L}",
              "it follows again and the new leader keeps writing")

        print("== SIGKILL to the leader (crash): a follower takes over when its"
              " lease has run out", flush=True)
        before = leading_counts()
        killed = L
        t0 = time.monotonic()
        insts[killed].proc.kill()
        insts[killed].wait(5)
        L = wait_new_leader(before, ttl + 8, exclude=(killed,))
        took = seen_at.get(L, 1e9) - t0
        check(L is not None and took > 2 * ttl / 3 - 0.3,
              f"instance {L} led {took:.2f} s after the crash (>= 2/3 TTL)")
        time.sleep(1.0)

        print("== SIGTERM to all", flush=True)
        # the followers first, then the leader: a follower stopped after it
        # could take over and end before its first write
        order = [i for i in range(len(insts)) if i not in (killed, L)] + \
            ([L] if L is not None else [])
        for i in order:
            insts[i].proc.send_signal(signal.SIGTERM)
            rc = insts[i].wait(10)
            check(rc == 0, f"instance {i} exited 0 (rc {rc})")

        print("== change events: an observer follows the leader without polling;"
              " a forced leader steps down on its event", flush=True)
        leader_py = os.path.join(a.top, "examples/python/leader.py")
        obs = Example([a.python, leader_py, "--dsn", a.dsn, "--name", a.name,
                       "--observe", "--events-dsn", a.events_dsn], "observer")
        insts.append(obs)
        check(obs.wait_line(r"^observed: no leader$", 15) is not None,
              "the observer reads the state once: no leader")
        ev = [Example([a.python, leader_py, "--dsn", a.dsn, "--name", a.name,
                       "--ttl", "30", "--owner", f"events-{i}",
                       "--events-dsn", a.events_dsn], f"e{i}") for i in range(2)]
        insts.extend(ev)
        m = obs.wait_line(r"^observed: leader (events-\d) token=(\d+) seq=\d+$", 15)
        check(m is not None, f"the observer saw the grant: {m and m.group(0)}")
        if m is None:
            return 1
        first, first_token = int(m.group(1)[-1]), m.group(2)
        check(ev[first].wait_line(rf"^leading token={first_token}$", 10) is not None,
              f"events-{first} leads with token {first_token}")
        for _ in range(100):		# until it has written (each term writes)
            if str(state()[1]) == first_token:
                break
            time.sleep(0.05)
        check(str(state()[1]) == first_token, f"events-{first} writes with its token")
        adm.execute("SELECT dlock_force_release(%s)", (a.name,))
        m = ev[first].wait_line(r"^stepped down: (.*); released=(\S+)$", 10)
        check(m is not None and m.group(1).startswith("lease forced (event"),
              f"events-{first} stepped down on its forced event: {m and m.group(1)}")
        other = 1 - first
        m2 = obs.wait_line(r"^observed: leader events-%d token=(\d+)" % other, 10)
        check(m2 is not None and int(m2.group(1)) > int(first_token),
              f"the observer saw events-{other} lead next, with a larger token")
        lines = [x for x in obs.output() if x.startswith("observed: ")]
        want = [f"observed: leader events-{first} token={first_token}",
                f"observed: no leader: events-{first} token={first_token} forced",
                f"observed: leader events-{other} token="]
        got = [x for x in lines[1:4]]
        check(len(got) == 3 and all(g.startswith(w) for g, w in zip(got, want)),
              f"the observer's lines, in order: {got}")
        # Every term writes before it ends: the leader writes once before
        # it is stopped, and it is stopped last, so that no follower takes
        # over after it (a term that would end before writing).
        for _ in range(100):
            if m2 is None or str(state()[1]) == m2.group(1):
                break
            time.sleep(0.05)
        check(m2 is not None and str(state()[1]) == m2.group(1),
              f"events-{other} writes with its token")
        for e in [ev[first], obs, ev[other]]:
            e.proc.send_signal(signal.SIGTERM)
            rc = e.wait(10)
            check(rc == 0, f"{e.label} exited 0 (rc {rc})")
    finally:
        for e in insts:
            if e.proc.poll() is None:
                e.proc.kill()
                e.wait(5)

    rows = q("SELECT token, leader FROM leader_log ORDER BY id")
    terms, ok, prev = {}, True, 0
    for tok, who in rows:
        if terms.setdefault(tok, who) != who or tok < prev:
            ok = False
        prev = tok
    check(ok, f"{len(rows)} fenced writes in commit order: tokens never go back,"
              " one leader per token (no two terms overlapped)")
    led = sum(leading_counts())
    check(len(terms) == led, f"{len(terms)} terms wrote, one per 'leading' line ({led})")
    check(q("SELECT count(*) FROM dlock_locks")[0][0] == 0 and
          q("SELECT count(*) FROM dlock_waiters")[0][0] == 0,
          "dlock_locks and dlock_waiters are empty at the end")
    print(f"leader: {time.monotonic() - t_start:.1f} s, {len(failures)} failed check(s)",
          flush=True)
    for f in failures:
        print(f"FAILED: {f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
