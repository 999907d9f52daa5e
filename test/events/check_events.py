#!/usr/bin/env python3
"""The checker of a stream of dlock change events (test/suites/events.sh).

Reads the events a LISTEN connection received (`dlock watch --json`, one
payload a line, in arrival order) and what the clients know, and checks:

  - every event is well formed, and seq is unique;
  - each lease (token) has exactly one "granted" and, at the end of the run,
    exactly one end (released, forced, expired or ended), and they arrived
    in that order;
  - per name, in seq order: grants and ends alternate as the modes allow
    (one exclusive lease, or any number of shared ones; a semaphore's
    permits), every end ends a live lease, and granted tokens grow;
  - nothing from a rolled-back transaction: no event carries a token a
    client got in a transaction (or savepoint) it rolled back;
  - nothing missing: every token a client got in a committed transaction was
    granted, and there are as many grants as dlock_stats counted, less the
    rolled-back ones;
  - no "lost" event.

    check_events.py EVENTS ROLLED_BACK COMMITTED STATS_GRANTS [PERMITS]
    check_events.py --self-test

ROLLED_BACK and COMMITTED list tokens, one a line; PERMITS is name=N,...
for the semaphores.  Exit status 0 when every check holds; else each broken
one is printed.  --self-test shows that each check catches a stream doctored
to break it.
"""
import json
import sys

ENDS = ("released", "forced", "expired", "ended")


def check(events, rolled_back, committed, stats_grants, permits):
    errors = []
    seqs = set()
    by_token = {}
    for i, ev in enumerate(events):
        if ev.get("event") == "lost":
            errors.append("event %d: lost %s events" % (i, ev.get("count")))
            continue
        if (ev.get("event") not in ("granted",) + ENDS or
                not isinstance(ev.get("seq"), int) or
                not isinstance(ev.get("token"), int) or
                ev.get("mode") not in ("exclusive", "shared") or
                not isinstance(ev.get("name"), str)):
            errors.append("event %d: malformed: %r" % (i, ev))
            continue
        if ev["seq"] in seqs:
            errors.append("event %d: seq %d twice" % (i, ev["seq"]))
        seqs.add(ev["seq"])
        by_token.setdefault(ev["token"], []).append(ev)

    for token, evs in by_token.items():
        kinds = [e["event"] for e in evs]
        if kinds[:1] != ["granted"] or len(kinds) != 2 or kinds[1] not in ENDS:
            errors.append("token %d: events %s (want granted, then one end)" %
                          (token, kinds))
        elif evs[0]["seq"] > evs[1]["seq"]:
            errors.append("token %d: its end has a lower seq than its grant" % token)
        if token in rolled_back:
            errors.append("token %d: events %s from a rolled-back transaction" %
                          (token, kinds))

    by_name = {}
    for ev in events:
        if ev.get("event") in ("granted",) + ENDS:
            by_name.setdefault(ev["name"], []).append(ev)
    for name, evs in by_name.items():
        live = {}
        top = 0
        for ev in sorted(evs, key=lambda e: e["seq"]):
            token = ev["token"]
            if ev["event"] == "granted":
                if token in live:
                    errors.append("%s: token %d granted twice" % (name, token))
                if name in permits:
                    if len(live) >= permits[name]:
                        errors.append("%s: seq %d grants token %d beyond %d permits" %
                                      (name, ev["seq"], token, permits[name]))
                elif ev["mode"] == "exclusive" and live:
                    errors.append("%s: seq %d grants token %d (exclusive) while %s live" %
                                  (name, ev["seq"], token, sorted(live)))
                elif ev["mode"] == "shared" and "exclusive" in live.values():
                    errors.append("%s: seq %d grants token %d (shared) while an exclusive lease is live" %
                                  (name, ev["seq"], token))
                if token <= top:
                    errors.append("%s: seq %d grants token %d, not above %d" %
                                  (name, ev["seq"], token, top))
                top = max(top, token)
                live[token] = ev["mode"]
            else:
                if token not in live:
                    errors.append("%s: seq %d ends token %d, which is not live" %
                                  (name, ev["seq"], token))
                live.pop(token, None)

    granted = {t for t, evs in by_token.items() if evs[0]["event"] == "granted"}
    missing = sorted(set(committed) - granted)
    if missing:
        errors.append("committed grants never sent: %s" % missing[:10])
    ngranted = sum(1 for ev in events if ev.get("event") == "granted")
    want = stats_grants - len(set(rolled_back))
    if ngranted != want:
        errors.append("%d grants sent; dlock_stats counted %d, %d of them rolled back: want %d" %
                      (ngranted, stats_grants, len(set(rolled_back)), want))
    return errors


def read_tokens(path):
    with open(path) as f:
        return {int(line) for line in f if line.strip()}


def self_test():
    """A valid stream, then each doctoring of it must be caught."""
    def ev(kind, name, token, seq, mode="exclusive"):
        return {"event": kind, "name": name, "owner": "o", "token": token,
                "mode": mode, "lifetime": "ttl", "seq": seq}

    good = [
        ev("granted", "a", 10, 1), ev("released", "a", 10, 2),
        ev("granted", "a", 11, 3), ev("granted", "s", 12, 4, "shared"),
        ev("granted", "s", 13, 5, "shared"),
        # arrives late: its transaction committed after later changes
        ev("expired", "a", 11, 6), ev("granted", "a", 14, 7),
        ev("released", "s", 12, 8, "shared"), ev("forced", "s", 13, 9, "shared"),
        ev("granted", "p", 15, 10), ev("granted", "p", 16, 11),
        ev("released", "p", 15, 12), ev("expired", "p", 16, 13),
        ev("expired", "a", 14, 14),
    ]
    # a later grant arriving before an earlier one (seq orders them)
    good[3], good[4] = good[4], good[3]
    args = ({99}, {10, 11, 14}, 8, {"p": 2})
    base = check(good, *args)
    if base:
        print("self-test: the valid stream fails: %s" % base)
        return 1

    def without(i):
        return [e for j, e in enumerate(good) if j != i]

    def swapped(i, j):
        s = list(good)
        s[i], s[j] = s[j], s[i]
        return s

    def changed(i, **kw):
        s = [dict(e) for e in good]
        s[i].update(kw)
        return s

    def retoken(old, new):
        s = [dict(e) for e in good]
        for e in s:
            if e["token"] == old:
                e["token"] = new
        return s

    # each doctored stream, its arguments, and what the report must say
    cases = {
        "an end missing": (without(1), args, "want granted, then one end"),
        "a grant missing": (without(0), args, "want granted, then one end"),
        "an end arriving before its grant": (swapped(0, 1), args, "want granted, then one end"),
        "an end with a lower seq": (changed(1, seq=0), args, "lower seq"),
        "an event of a rolled-back grant": (
            good + [ev("granted", "z", 99, 20), ev("released", "z", 99, 21)],
            ({99}, {10, 11, 14}, 9, {"p": 2}), "rolled-back"),
        "a committed grant never sent": (
            good, ({99}, {10, 11, 14, 42}, 8, {"p": 2}), "never sent"),
        "fewer grants than dlock_stats": (
            good, ({99}, {10, 11, 14}, 9, {"p": 2}), "dlock_stats counted"),
        "two exclusive holders": (changed(1, seq=35), args, "(exclusive) while"),
        "a token that goes back": (retoken(14, 9), args, "not above"),
        "shared and exclusive at once": (changed(4, mode="exclusive"), args, "(shared) while"),
        "too many permits": (good, ({99}, {10, 11, 14}, 8, {"p": 1}), "permits"),
        "an end twice": (good + [ev("expired", "a", 10, 30)], args, "want granted, then one end"),
        "an end of a lease not live": (good + [ev("granted", "a", 20, 40), ev("expired", "a", 20, 31)],
                                       ({99}, {10, 11, 14}, 9, {"p": 2}), "not live"),
        "a seq twice": (changed(13, seq=1), args, "twice"),
        "a lost event": (good + [{"event": "lost", "count": 3}], args, "lost 3"),
    }
    failed = 0
    for what, (stream, a, want) in cases.items():
        found = [e for e in check(stream, *a) if want in e]
        print("self-test: %-34s %s" % (what, "caught: " + found[0] if found else "NOT CAUGHT"))
        failed += not found
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) not in (5, 6):
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        events = [json.loads(line) for line in f if line.strip()]
    permits = {}
    if len(sys.argv) == 6 and sys.argv[5]:
        for item in sys.argv[5].split(","):
            name, n = item.split("=")
            permits[name] = int(n)
    errors = check(events, read_tokens(sys.argv[2]), read_tokens(sys.argv[3]),
                   int(sys.argv[4]), permits)
    kinds = {}
    for e in events:
        kinds[e.get("event")] = kinds.get(e.get("event"), 0) + 1
    print("check_events: %d events %s" % (len(events), kinds))
    for e in errors[:50]:
        print("check_events: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
