#!/usr/bin/python3
"""test/ha/heal.py SECONDS [OLD]: waits until the cluster of test/ha/run.sh
has healed after a fault, at most SECONDS; exit 0 when healed, 1 otherwise.

Healed means, read from PostgreSQL itself on every member (not from Patroni's
state strings: Patroni 3.0.2 shows a member still being rewound as running):
 - exactly one member is out of recovery, and Patroni's DCS names it leader
   (REST /cluster); its timeline T is the one of its current WAL file;
 - every other member is in recovery, its WAL receiver streams from the
   leader's address on timeline T (so pg_rewind, if any, has finished and
   the member follows the new history);
 - the leader's pg_stat_replication has a streaming walsender for every
   other member whose replay LSN has reached the leader's WAL position of the
   previous poll (the member is caught up, not just connected).
OLD (m<i>, optional) names the old leader, to say in the verdict what became
of it.  On success prints "healed in <s> s: ..."; on failure prints, for every
member, what did not heal.
"""
import json
import sys
import time
import urllib.request

import psycopg

MEMBERS = ["m1", "m2", "m3"]


def addr(m):
    return "10.78.%s.2" % m[1:]


def sql(m, q):
    with psycopg.connect(host=addr(m), port=5432, dbname="postgres", user="postgres",
                         connect_timeout=2, autocommit=True,
                         options="-c statement_timeout=2000") as c:
        return c.execute(q).fetchall()


def dcs_leader():
    for m in MEMBERS:
        try:
            with urllib.request.urlopen("http://%s:8008/cluster" % addr(m), timeout=2) as r:
                for x in json.load(r).get("members", []):
                    if x.get("role") == "leader":
                        return x["name"]
                return None
        except Exception:
            continue
    return None


def rest_timeline(m):
    try:
        with urllib.request.urlopen("http://%s:8008/patroni" % addr(m), timeout=2) as r:
            return json.load(r).get("timeline")
    except Exception:
        return "unreachable"


def poll(prev_lsn):
    """returns (healed, reasons, leader, timeline, leader_lsn)"""
    reasons = []
    state = {}
    for m in MEMBERS:
        try:
            rec, = sql(m, "SELECT pg_is_in_recovery()")[0]
            if rec:
                rows = sql(m, "SELECT status, received_tli, sender_host FROM pg_stat_wal_receiver")
                state[m] = ("replica", rows[0] if rows else None)
            else:
                lsn, wal = sql(m, "SELECT pg_current_wal_lsn()::text, pg_walfile_name(pg_current_wal_lsn())")[0]
                state[m] = ("primary", (int(wal[:8], 16), lsn))
        except Exception as e:
            state[m] = ("down", str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    prim = [m for m in MEMBERS if state[m][0] == "primary"]
    if len(prim) != 1:
        reasons.append("%d members out of recovery (%s)" % (len(prim), ", ".join(prim) or "none"))
        for m in MEMBERS:
            if state[m][0] == "down":
                reasons.append("%s: postgres unreachable: %s" % (m, state[m][1]))
        return False, reasons, None, None, None
    lead = prim[0]
    tl, lsn = state[lead][1]
    dl = dcs_leader()
    if dl != lead:
        reasons.append("%s is out of recovery but the DCS leader is %s" % (lead, dl))
    try:
        reps = {r[0]: r[1:] for r in sql(lead, "SELECT application_name, state, "
                                         "CASE WHEN %s::pg_lsn IS NULL THEN true ELSE replay_lsn >= %s::pg_lsn END "
                                         "FROM pg_stat_replication" % (
                                             "NULL" if prev_lsn is None else "'%s'" % prev_lsn,
                                             "NULL" if prev_lsn is None else "'%s'" % prev_lsn))}
    except Exception as e:
        reasons.append("%s: pg_stat_replication unreadable: %s" % (lead, e))
        reps = {}
    for m in MEMBERS:
        if m == lead:
            continue
        kind, info = state[m]
        if kind == "down":
            reasons.append("%s: postgres unreachable (Patroni's timeline %s): %s" % (m, rest_timeline(m), info))
            continue
        if info is None:
            reasons.append("%s: in recovery without a WAL receiver (Patroni's timeline %s)" % (m, rest_timeline(m)))
        else:
            status, rtl, host = info
            if status != "streaming" or host != addr(lead) or rtl != tl:
                reasons.append("%s: WAL receiver %s from %s on timeline %s, leader %s is on timeline %d"
                               % (m, status, host, rtl, lead, tl))
        r = reps.get(m)
        if r is None:
            reasons.append("%s: no walsender for it on the leader %s" % (m, lead))
        elif r[0] != "streaming":
            reasons.append("%s: the leader's walsender for it is %s" % (m, r[0]))
        elif not r[1]:
            reasons.append("%s: replay behind the leader's %s" % (m, prev_lsn))
    return not reasons, reasons, lead, tl, lsn


def main():
    limit = float(sys.argv[1])
    old = sys.argv[2] if len(sys.argv) > 2 else None
    t0 = time.monotonic()
    prev = None
    reasons = ["not polled"]
    while True:
        healed, reasons, lead, tl, lsn = poll(prev)
        if healed and prev is not None:
            note = ""
            if old:
                note = "; old leader %s %s" % (old, "leads again" if old == lead else "streams as a replica")
            print("healed in %.0f s: leader %s on timeline %d, %s streaming and caught up%s"
                  % (time.monotonic() - t0, lead, tl, " and ".join(m for m in MEMBERS if m != lead), note))
            return 0
        prev = lsn
        if time.monotonic() - t0 > limit:
            break
        time.sleep(1)
    print("not healed after %.0f s: %s" % (time.monotonic() - t0, "; ".join(reasons)))
    return 1


sys.exit(main())
