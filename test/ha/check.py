#!/usr/bin/python3
"""test/ha/check.py DIR: the verdict of a run of test/ha/run.sh.

Reads DIR/history.c* (every call of every client: see test/ha/client.c),
DIR/clients (each client's lease TTL), DIR/faults (the harness's events) and
DIR/final (the rows and leases on the last leader), and checks:

 tokens   no token returned twice (to another owner or name), and none lower
          than one that had been returned before the call was sent (an owner
          re-acquiring its own live lease gets the same token: allowed; so
          is a token that an earlier grant call of that owner and name, whose
          answer was lost, may have drawn: such a grant is judged from the
          moment that call was sent)
 fence    no fenced write accepted with a token lower than one its row held
          (the row's previous token, read in the same transaction), nor lower
          than one an accepted write of that row had returned before it was sent
 holders  no two owners hold one name at overlapping times.  A client holds
          from the moment its grant returned until the first of: its release
          was sent (a client stops acting on a lease before it releases it, and
          a waiter may be granted the moment the release commits, before the
          reply reaches the releaser), its TTL ran out counted from the moment
          its last successful grant or renewal was sent, a renewal returned
          NULL or a fenced write was refused (DL001)
 lost     with synchronous_mode on: no acknowledged grant lost, i.e. no renewal
          returning NULL and no DL001 before the lease's TTL (from the last
          success) had run out; and every row holds at least the token of the
          last write acknowledged under synchronous_mode
Prints the violations, a line per fault (unavailability: last answer of any
kind, a grant's token or NULL, a renewal or a write, on the old leader to the
first on another member, and the same for grants that returned a token; leases
live at the fault and what became of them; the grace: its end as the new
leader's dlock_grace() told a client after a reconnect, and as observed, from
the first grant refused there before that end (NULL) to the first new token it
granted), and the summary line; exits 1 if any violation.
"""
import bisect
import glob
import os
import sys

d = sys.argv[1]
ttl_of = {}
for line in open(os.path.join(d, "clients")):
    c, t = line.split()
    ttl_of[c] = float(t)

calls = []
for f in sorted(glob.glob(os.path.join(d, "history.c*"))):
    for line in open(f):
        p = line.split()
        if len(p) != 10:
            continue
        calls.append(dict(m0=float(p[0]), m1=float(p[1]), w0=float(p[2]), w1=float(p[3]),
                          c=p[4], op=p[5], name=p[6], token=int(p[7]), r=p[8], host=p[9]))

faults = []
sync_on = None
if os.path.exists(os.path.join(d, "faults")):
    for line in open(os.path.join(d, "faults")):
        m, w, kind, member = line.split()
        faults.append(dict(m=float(m), w=float(w), kind=kind, member=member))
        if kind == "sync_true":
            sync_on = float(m)

violations = []


def ok(r):
    return r[:1].isdigit() or r[:1] == "-" and r[1:2].isdigit()


def v(msg):
    violations.append(msg)
    print("violation: " + msg)


grants = sorted([x for x in calls if x["op"] == "grant" and ok(x["r"])], key=lambda x: x["m1"])
for g in grants:
    g["tok"] = int(g["r"])

# tokens: never twice, never below one returned before the call was sent
by_token = {}
for g in grants:
    prev = by_token.get(g["tok"])
    if prev and (prev["c"], prev["name"]) != (g["c"], g["name"]):
        v("token %d returned to %s on %s at %.3f and to %s on %s at %.3f"
          % (g["tok"], prev["c"], prev["name"], prev["m1"], g["c"], g["name"], g["m1"]))
    by_token.setdefault(g["tok"], g)
ends = [g["m1"] for g in grants]
best = []  # prefix maximum of tokens by return time
for g in grants:
    best.append(g if not best or g["tok"] > best[-1]["tok"] else best[-1])
# A grant call whose answer was lost (ERR:conn, 08xxx, 57xxx) may still take
# effect later: a backend frozen or cut off with the leader wakes up and grants
# the lease to the owner, whose next acquire of that name returns that token
# (the owner's own live lease).  The token was drawn after that earlier call was sent, so it is
# judged from there: from the earliest unanswered grant call of that owner and
# name since its last grant of that name that returned a token (and a token
# returned again to the same owner and name, from its first return).
since = {}  # grant call -> the earliest unanswered grant of its owner and name before it
for c in {x["c"] for x in calls}:
    pending = {}
    for x in sorted([x for x in calls if x["c"] == c and x["op"] == "grant"], key=lambda x: x["m0"]):
        if ok(x["r"]):
            since[id(x)] = pending.pop(x["name"], x["m0"])
        elif x["r"] == "ERR:conn" or x["r"][:6] in ("ERR:08", "ERR:57"):
            pending.setdefault(x["name"], x["m0"])
late = 0
for g in grants:
    sent = min(since.get(id(g), g["m0"]), by_token[g["tok"]]["m0"])
    j = bisect.bisect_left(ends, g["m0"])
    i = bisect.bisect_left(ends, sent)
    below = i > 0 and best[i - 1]["tok"] > g["tok"]
    late += not below and i < j and best[j - 1]["tok"] > g["tok"]
    if below:
        b = best[i - 1]
        v("token %d returned to %s on %s (host %s) at %.3f is below token %d returned to %s at %.3f"
          % (g["tok"], g["c"], g["name"], g["host"], g["m1"], b["tok"], b["c"], b["m1"]))

# fence
writes = sorted([x for x in calls if x["op"] == "write" and ok(x["r"])], key=lambda x: x["m1"])
for w in writes:
    if int(w["r"]) > w["token"]:
        v("fenced write by %s with token %d accepted over the row's token %s (%s, at %.3f)"
          % (w["c"], w["token"], w["r"], w["name"], w["m1"]))
for name in sorted({w["name"] for w in writes}):
    ws = [w for w in writes if w["name"] == name]
    wends = [w["m1"] for w in ws]
    hi = []
    for w in ws:
        hi.append(w if not hi or w["token"] > hi[-1]["token"] else hi[-1])
    for w in ws:
        i = bisect.bisect_left(wends, w["m0"])
        if i > 0 and hi[i - 1]["token"] > w["token"]:
            v("fenced write of %s by %s with token %d (host %s) accepted at %.3f after %s's write with token %d at %.3f"
              % (name, w["c"], w["token"], w["host"], w["m1"], hi[i - 1]["c"], hi[i - 1]["token"], hi[i - 1]["m1"]))

# holders
holds = []
lost = []
for c in sorted({x["c"] for x in calls}):
    ttl = ttl_of.get(c, 0)
    cur = None
    for x in sorted([x for x in calls if x["c"] == c], key=lambda x: x["m0"]):
        if cur and x["m0"] >= cur["last"] + ttl and "end" not in cur:
            cur["end"] = cur["last"] + ttl
            cur["why"] = "ttl"
        if x["op"] == "grant" and ok(x["r"]):
            t = int(x["r"])
            if cur and "end" not in cur and cur["name"] == x["name"] and cur["tok"] == t:
                cur["last"] = x["m0"]
                continue
            if cur and "end" not in cur:
                cur["end"], cur["why"] = min(x["m0"], cur["last"] + ttl), "new grant"
            cur = dict(c=c, name=x["name"], tok=t, start=x["m1"], last=x["m0"], host=x["host"], renewed=[])
            holds.append(cur)
        elif not cur or "end" in cur or x["name"] != cur["name"] or x["op"] == "connect":
            continue
        elif x["op"] == "renew" and ok(x["r"].split(".")[0]):
            cur["last"] = x["m0"]
            cur["renewed"].append(x["m1"])
        elif (x["op"] == "renew" and x["r"] == "NULL") or (x["op"] == "write" and x["r"] == "ERR:DL001"):
            cur["end"], cur["why"] = min(x["m1"], cur["last"] + ttl), x["op"] + " " + x["r"]
            if x["m1"] < cur["last"] + ttl:
                cur["lost_at"] = x["m1"]
                lost.append(cur)
        elif x["op"] == "release":
            cur["end"], cur["why"] = min(x["m0"], cur["last"] + ttl), "release"
    if cur and "end" not in cur:
        cur["end"], cur["why"] = cur["last"] + ttl, "ttl"

for name in sorted({h["name"] for h in holds}):
    hs = sorted([h for h in holds if h["name"] == name], key=lambda h: h["start"])
    for i, a in enumerate(hs):
        for b in hs[i + 1:]:
            if b["start"] >= a["end"]:
                break
            if b["c"] != a["c"] and b["start"] < a["end"]:
                v("two holders of %s: %s holds token %d (granted by %s at %.3f, until %.3f: %s) "
                  "and %s was granted token %d by %s at %.3f"
                  % (name, a["c"], a["tok"], a["host"], a["start"], a["end"], a["why"],
                     b["c"], b["tok"], b["host"], b["start"]))

for h in lost:
    if sync_on is not None and h["start"] > sync_on + 5:
        v("acknowledged grant lost under synchronous_mode: %s's token %d on %s (granted at %.3f) gone at %.3f"
          % (h["c"], h["tok"], h["name"], h["start"], h["lost_at"]))

# rows hold the last write acknowledged under synchronous_mode
final = {}
if os.path.exists(os.path.join(d, "final")):
    for line in open(os.path.join(d, "final")):
        p = line.split()
        if len(p) == 4 and p[0] == "row":
            final[p[1]] = int(p[2])
if sync_on is not None:
    for name in sorted({w["name"] for w in writes}):
        acked = [w["token"] for w in writes if w["name"] == name and w["m0"] > sync_on + 5]
        if acked and name in final and final[name] < max(acked):
            v("row of %s holds token %d, below the acknowledged write of token %d (synchronous_mode)"
              % (name, final[name], max(acked)))

# per fault: unavailability and leases kept
answered = sorted([x for x in calls if x["op"] not in ("connect", "grace") and not x["r"].startswith("ERR")],
                  key=lambda x: x["m1"])
nfail = nswitch = 0
for i, f in enumerate(faults):
    if f["kind"] not in ("switchover", "kill", "stop", "cut"):
        continue
    if f["kind"] == "switchover":
        nswitch += 1
    else:
        nfail += 1
    old = "10.78.%s.2" % f["member"][1:]
    nxt = [g for g in grants if g["m1"] > f["m"] and g["host"] != old]
    if not nxt:
        print("fault %-10s %s at %.3f: no grant on another member afterwards" % (f["kind"], f["member"], f["m"]))
        continue
    first_new = nxt[0]["m1"]
    before = [g for g in grants if g["host"] == old and g["m1"] < first_new]
    last_old = before[-1]["m1"] if before else f["m"]
    # answers of any kind (a grant's token or NULL, a renewal, a write)
    ans_new = [x["m1"] for x in answered if x["m1"] > f["m"] and x["host"] != old]
    ans_old = [x["m1"] for x in answered if x["host"] == old and ans_new and x["m1"] < ans_new[0]]
    gap = (ans_new[0] - (ans_old[-1] if ans_old else f["m"])) if ans_new else float("nan")
    live = [h for h in holds if h["start"] < f["m"] < h["end"]]
    kept = [h for h in live if any(r > first_new for r in h["renewed"])]
    gone = [h for h in live if h in lost]
    mode = "sync" if sync_on is not None and f["m"] > sync_on else "async"
    # the grace on the member that granted next
    h = nxt[0]["host"]
    gends = [float(x["r"]) for x in calls if x["op"] == "grace" and x["host"] == h and x["m1"] > f["m"]
            and ok(x["r"])]
    if gends:
        gend = gends[0]
        refused = [g for g in calls if g["op"] == "grant" and g["r"] == "NULL" and g["host"] == h
                   and g["m1"] > f["m"] and g["w1"] < gend]
        fresh = [g for g in grants if g["host"] == h and g["m1"] > f["m"] and by_token[g["tok"]] is g]
        grace = "grace on %s ends %.1f s after the fault" % (h, gend - f["w"])
        if refused and fresh:
            grace += "; observed %.1f s (first refusal %.1f s after the fault, first new token %.1f s after the grace's end)" % (
                fresh[0]["w1"] - refused[0]["w1"], refused[0]["w1"] - f["w"], fresh[0]["w1"] - gend)
    else:
        grace = "no grace on %s" % h
    print("fault %-10s %s at %.3f (%s): unavailable %.1f s (no answer), %.1f s (no grant); "
          "leases live %d, kept (renewed on the new leader) %d, lost %d; %s"
          % (f["kind"], f["member"], f["m"], mode, gap, first_new - last_old, len(live), len(kept), len(gone), grace))

nwrites = len(writes)
if late:
    print("grants of a token below one returned before they were sent, drawn for an earlier "
          "unanswered grant call of their owner and name: %d" % late)
print("ha: %d failovers, %d switchovers, %d grants, %d fenced writes, %d violations"
      % (nfail, nswitch, len(grants), nwrites, len(violations)))
sys.exit(1 if violations else 0)
