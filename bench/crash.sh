#!/usr/bin/env bash
# dlock crash benchmark, run by bench/run.sh (make bench) after the other
# workloads, or on its own once dlock is installed:
#
#   bench/crash.sh <out.md> [tmpdir]
#
# What a crash costs in availability, with dlock.flush_grants off (the
# default: grants within the grace skip their WAL flush, and a crash restart
# begins the crash grace) and on (every grant flushed, no grace).  For each
# setting, CRASH_REPEATS times, on a cluster of its own (fsync on):
#   1. 8 pgbench clients run durable try + release cycles (ttl 30 s, the
#      default: the grace after a crash is as long as that) for 3 s, and
#      'kept' is held with a ttl of 10 minutes (above the grace: flushed);
#   2. pg_ctl stop -m immediate while the cycles run (a crash: no shutdown
#      checkpoint, WAL not yet flushed is lost);
#   3. pg_ctl start, then a new owner tries a name of the cycles every 20 ms.
# It reports the time from the restart to the server accepting connections,
# and to the first grant of a name to a new owner (the unavailability), and
# whether 'kept' came back with its token.
#
# Environment: PGBIN (default /usr/lib/postgresql/15/bin), CRASH_REPEATS
# (default 3).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
OUTMD=${1:?usage: crash.sh <out.md> [tmpdir]}
REPEATS=${CRASH_REPEATS:-3}
if [ -n "${2:-}" ]; then
  TMP=$2
  mkdir -p "$TMP"
else
  TMP=$(mktemp -d /tmp/dlock-crash.XXXXXX)
fi
chmod 755 "$TMP"
if [ "$(id -u)" = 0 ]; then AS_PG=(runuser -u postgres --); chown postgres "$TMP"; else AS_PG=(); fi

log() { printf '[crash %s] %s\n' "$(date +%T)" "$*" >&2; }
DATA=$TMP/crash-data
SOCK=$TMP/crash-sock
PORT=55543
STARTED=0
stop_pg() {
  if [ "$STARTED" = 1 ]; then
    "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
    STARTED=0
  fi
}
trap 'stop_pg' EXIT
PSQL() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres -d postgres "$@"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

"${AS_PG[@]}" mkdir -p "$SOCK"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust --no-instructions \
  -E UTF8 --locale=C.UTF-8 >"$TMP/crash-initdb.log" 2>&1
cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = ''
port = $PORT
unix_socket_directories = '$SOCK'
shared_preload_libraries = 'dlock'
max_connections = 20
# no standbys: a ttl above the grace is allowed (and flushed)
max_wal_senders = 0
wal_level = minimal
EOF
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$TMP/crash-pg.log" -w start >/dev/null
STARTED=1
PSQL -c "CREATE EXTENSION dlock"

# one crash with flush_grants = $1; prints "up grant kept lost"
crash_once() {
  local flush=$1 t0 t_up t_grant kept tok pid g
  PSQL -c "ALTER SYSTEM SET dlock.flush_grants = $flush" -c "SELECT pg_reload_conf()" >/dev/null
  tok=$(PSQL -c "SELECT dlock_try('kept', '10 minutes', 'keeper')")
  PGOPTIONS="-c dlock.flush_grants=$flush" "${AS_PG[@]}" "$PGBIN/pgbench" -n -h "$SOCK" -p "$PORT" \
    -U postgres -M prepared -c 8 -j 2 -T 30 -f "$HERE/scripts/dlock.sql" postgres \
    >"$TMP/crash-pgbench.log" 2>&1 &
  pid=$!
  sleep 3
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null
  wait "$pid" 2>/dev/null || true
  t0=$(now)
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$TMP/crash-pg.log" -w start >/dev/null
  t_up=$(now)
  # a name of the cycles, to a new owner: held back by the grace, if any
  # (flushed, with its row: the probe adds nothing to the next crash's grace)
  g=""
  while [ -z "$g" ]; do
    g=$(PGOPTIONS="-c dlock.flush_grants=on" PSQL -c "SELECT dlock_try('42', '30 s', 'newcomer')")
    [ -n "$g" ] || sleep 0.02
  done
  t_grant=$(now)
  kept=$(PSQL -c "SELECT count(*) FROM dlock_locks WHERE name = 'kept' AND token = $tok")
  PSQL -c "SELECT dlock_release('42', 'newcomer')" -c "SELECT dlock_release('kept', 'keeper')" >/dev/null
  echo "$(secs "$t0" "$t_up") $(secs "$t0" "$t_grant") $kept"
}

: >"$TMP/crash-results.txt"
for r in $(seq "$REPEATS"); do
  for flush in off on; do
    read -r up grant kept < <(crash_once "$flush")
    log "repeat $r, flush_grants = $flush: accepting after $up s, first new grant after $grant s, kept back: $kept"
    echo "$flush $up $grant $kept" >>"$TMP/crash-results.txt"
  done
done
stop_pg

med() {  # setting column: the median over the repeats
  awk -v f="$1" -v c="$2" '$1 == f { print $c }' "$TMP/crash-results.txt" | sort -g |
    awk '{ v[NR] = $1 } END { printf "%s", v[int((NR + 1) / 2)] }'
}
range() {
  awk -v f="$1" -v c="$2" '$1 == f { print $c }' "$TMP/crash-results.txt" | sort -g |
    awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'
}
kept_all() { awk -v f="$1" '$1 == f { n++; k += $4 } END { printf "%d of %d", k, n }' "$TMP/crash-results.txt"; }
{
  echo "## Unavailability after a crash"
  echo
  echo "\`bench/crash.sh\`: on a cluster of its own (fsync on), 8 pgbench clients run durable try + release"
  echo "cycles (ttl 30 s) for 3 s while 'kept' is held with a ttl of 10 minutes; then \`pg_ctl stop -m immediate\`,"
  echo "\`pg_ctl start\`, and a new owner tries one of the cycles' names every 20 ms. Times from the start"
  echo "command; median of $REPEATS crashes per setting, alternated (range in brackets)."
  echo
  echo "| \`dlock.flush_grants\` | accepting connections | first grant to a new owner | 'kept' (flushed) back with its token |"
  echo "|---|---|---|---|"
  for flush in off on; do
    echo "| $flush | $(med "$flush" 2) s ($(range "$flush" 2)) | $(med "$flush" 3) s ($(range "$flush" 3)) | $(kept_all "$flush") |"
  done
  echo
  echo "With \`off\` (the default) the first new grant waits for the crash grace: the longest ttl of a grant"
  echo "that skipped its flush (30 s here), counted from when shared memory was set up. With \`on\`, it"
  echo "waits only for the restart."
} >"$OUTMD"
