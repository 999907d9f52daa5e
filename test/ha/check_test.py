#!/usr/bin/python3
"""test/ha/check_test.py: test/ha/check.py on made-up histories (run by
test/suites/ha-smoke.sh before the smoke; a second, no cluster needed).

Each case writes a history of a few grant calls of clients c1 and c2 and says
whether check.py must find a violation of the tokens rule: a token returned
below one returned before the call was sent is one, unless an earlier grant
call of the same owner and name lost its answer (ERR:conn, 08xxx, 57xxx) and
the token is above every token returned before that call was sent.  Exits 1
naming every case check.py got wrong.
"""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check.py")


def grant(m0, m1, c, name, r):
    return "%.6f %.6f %.6f %.6f %s grant %s 0 %s 10.78.1.2\n" % (m0, m1, m0 + 1e9, m1 + 1e9, c, name, r)


# c1 is granted 10 and 20 (its own release in between is not needed here)
BASE = [grant(1.0, 1.1, "c1", "a", "10"), grant(5.0, 5.1, "c1", "b", "20")]
CASES = [
    # name, c2's calls, violation expected
    ("a lower token, no earlier call", [grant(6.0, 6.1, "c2", "c", "15")], True),
    ("a lower token, the unanswered call was of another name",
     [grant(2.0, 8.0, "c2", "b", "ERR:conn"), grant(9.0, 9.1, "c2", "c", "15")], True),
    ("a lower token, the earlier call was answered (an error)",
     [grant(2.0, 3.0, "c2", "c", "ERR:55P03"), grant(9.0, 9.1, "c2", "c", "15")], True),
    ("a lower token, the earlier call returned NULL",
     [grant(2.0, 3.0, "c2", "c", "NULL"), grant(9.0, 9.1, "c2", "c", "15")], True),
    ("a token below one returned before the unanswered call was sent",
     [grant(2.0, 8.0, "c2", "c", "ERR:conn"), grant(9.0, 9.1, "c2", "c", "5")], True),
    ("the unanswered call came after a grant of that name",
     [grant(2.0, 8.0, "c2", "c", "ERR:conn"), grant(8.5, 8.6, "c2", "c", "25"),
      grant(8.7, 8.8, "c2", "c", "ERR:conn"), grant(9.0, 9.1, "c2", "c", "15")], True),
    ("the token of an unanswered call, returned to a re-acquire",
     [grant(2.0, 8.0, "c2", "c", "ERR:conn"), grant(8.5, 8.6, "c2", "c", "NULL"),
      grant(9.0, 9.1, "c2", "c", "15")], False),
    ("the same, the call cut off by a terminated backend",
     [grant(2.0, 8.0, "c2", "c", "ERR:57P01"), grant(9.0, 9.1, "c2", "c", "15")], False),
    ("a token returned twice to one owner and name, then below a newer one",
     [grant(2.0, 2.1, "c2", "c", "15"), grant(9.0, 9.1, "c2", "c", "15")], False),
    ("a token returned to two owners", [grant(9.0, 9.1, "c2", "c", "20")], True),
]

wrong = []
for name, extra, bad in CASES:
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "clients"), "w") as f:
            f.write("c1 100\nc2 100\n")
        with open(os.path.join(d, "history.c1"), "w") as f:
            f.writelines(BASE)
        with open(os.path.join(d, "history.c2"), "w") as f:
            f.writelines(extra)
        out = subprocess.run([sys.executable, CHECK, d], capture_output=True, text=True)
        found = out.returncode == 1 and "violation: token" in out.stdout
        ok = found == bad and out.returncode in (0, 1)
        print("%s %s (%s)" % ("ok  " if ok else "FAIL", name, "violation" if found else "none"))
        if not ok:
            wrong.append(name)
            print(out.stdout + out.stderr)
print("check_test: %d cases, %d wrong" % (len(CASES), len(wrong)))
sys.exit(1 if wrong else 0)
