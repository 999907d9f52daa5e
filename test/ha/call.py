#!/usr/bin/python3
# test/ha/call.py HISTORY OWNER NAME TTL CONNINFO [try | acquire]: one
# dlock_try (default) or one dlock_acquire waiting at most 120 s by OWNER on
# NAME, recorded in HISTORY as test/ha/client.c records its calls, after the
# server's dlock_grace() (op "grace": its end's epoch or NULL); used by run.sh
# --two-holders.  Exit status 0 if the call returned a token.
import sys
import time

import psycopg

hist, owner, name, ttl, conninfo = sys.argv[1:6]
how = sys.argv[6] if len(sys.argv) > 6 else "try"
lines = []


def line(m0, w0, op, result, host):
    lines.append("%.6f %.6f %.6f %.6f %s %s %s 0 %s %s\n"
                 % (m0, time.monotonic(), w0, time.time(), owner, op, name if op == "grant" else "-",
                    result, host))


m0, w0 = time.monotonic(), time.time()
host = "-"
try:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        host = conn.info.host
        g = conn.execute("SELECT extract(epoch FROM dlock_grace())").fetchone()[0]
        line(m0, w0, "grace", "NULL" if g is None else "%.6f" % g, host)
        m0, w0 = time.monotonic(), time.time()
        if how == "try":
            sql = "SELECT dlock_try(name => %s, ttl => make_interval(secs => %s), owner => %s)"
        else:
            sql = ("SELECT dlock_acquire(name => %s, ttl => make_interval(secs => %s), owner => %s, "
                   "timeout => '120 s')")
        row = conn.execute(sql, (name, int(ttl), owner)).fetchone()
        result = "NULL" if row[0] is None else str(row[0])
except psycopg.Error as e:
    result = "ERR:%s" % (e.sqlstate or "conn")
line(m0, w0, "grant", result, host)
with open(hist, "a") as f:
    f.writelines(lines)
sys.exit(0 if result[0].isdigit() else 1)
