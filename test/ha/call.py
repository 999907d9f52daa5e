#!/usr/bin/python3
# test/ha/call.py HISTORY OWNER NAME TTL CONNINFO: one dlock_try by OWNER on
# NAME, recorded in HISTORY as test/ha/client.c records its calls (used by
# run.sh --two-holders).  Exit status 0 if the call returned a token.
import sys
import time

import psycopg

hist, owner, name, ttl, conninfo = sys.argv[1:6]
m0, w0 = time.monotonic(), time.time()
host = "-"
try:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        host = conn.info.host
        row = conn.execute(
            "SELECT dlock_try(name => %s, ttl => make_interval(secs => %s), owner => %s)",
            (name, int(ttl), owner)).fetchone()
        result = "NULL" if row[0] is None else str(row[0])
except psycopg.Error as e:
    result = "ERR:%s" % (e.sqlstate or "conn")
with open(hist, "a") as f:
    f.write("%.6f %.6f %.6f %.6f %s grant %s 0 %s %s\n"
            % (m0, time.monotonic(), w0, time.time(), owner, name, result, host))
sys.exit(0 if result[0].isdigit() else 1)
