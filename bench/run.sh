#!/usr/bin/env bash
# dlock benchmark (`make bench`): lease cycles/s against PostgreSQL advisory
# locks, hand-written lease tables and Redis, a hot-key test, and the
# release-to-waiter handoff latency.  Not part of the test suite.
#
# It builds and installs dlock, starts a throwaway PostgreSQL cluster and a
# throwaway redis-server on loopback, runs every workload BENCH_REPEATS times
# (repeats interleaved, so drift hits every workload alike), and rewrites
# bench/RESULTS.md and bench/cycles.png.
#
# Environment:
#   BENCH_SECONDS      duration of one run (default 10)
#   BENCH_REPEATS      runs per point; the report gives the median (default 3)
#   BENCH_CLIENTS      client counts of the uncontended workloads (default "1 8 32")
#   BENCH_HOT_CLIENTS  clients of the hot-key workloads (default 32)
#   BENCH_THREADS      pgbench -j / redis_lease -j (default 2, capped at clients)
#   BENCH_ONLY         extended regex: run only workloads whose name matches
#   HANDOFF_ITERS      measured handoffs per lock kind (default 1000)
#   HANDOFF_MODES      lock kinds of handoff.c (default dlock_mem,dlock_durable,advisory)
#   EVENT_DELAY_ITERS  events timed by event_delay.c per load (default 1000)
#   EVENT_DELAY_LOADS  its loads: clients cycling with events, 0 = idle (default "0 8 32")
#   BENCH_KEEP=1       keep the temp dir (logs, raw results)
#   BENCH_QUIET_CORES  before each run, wait until other processes use at most
#                      this many cores (default 0.25) ...
#   BENCH_QUIET_MAX    ... for at most this many seconds per run (default 30)
#   BENCH_QUIET_BUDGET ... and this many seconds in all (default 90)
#   BENCH_RETRY_BUDGET seconds spent re-running runs during which other processes
#                      used more than BENCH_QUIET_CORES (default 90; 0 = never)
#   BENCH_OUT          directory for RESULTS.md and cycles.png (default bench)
#   BENCH_SCALE=0      skip scale.sh (a million live leases, 100k expiring at once)
#   BENCH_CRASH=0      skip crash.sh (unavailability after a crash, per dlock.flush_grants)
#   PGBIN              PostgreSQL binaries (default /usr/lib/postgresql/15/bin)
#   BENCH_BUILD        "worktree" (default): make && make install in this repository;
#                      a commit (e.g. HEAD): build a clean `git archive` export of it
#                      instead, untouched by uncommitted edits
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
SECONDS_PER_RUN=${BENCH_SECONDS:-10}
REPEATS=${BENCH_REPEATS:-3}
CLIENTS=${BENCH_CLIENTS:-"1 8 32"}
HOT_CLIENTS=${BENCH_HOT_CLIENTS:-32}
THREADS=${BENCH_THREADS:-2}
ONLY=${BENCH_ONLY:-}
HANDOFF_ITERS=${HANDOFF_ITERS:-1000}
EVENT_DELAY_ITERS=${EVENT_DELAY_ITERS:-1000}
OUT=${BENCH_OUT:-$HERE}
BUILD_FROM=${BENCH_BUILD:-worktree}
T_START=$(date +%s)

# ---------------------------------------------------------------------------
# Workloads.  One line each; adding a workload is adding a line.
#   name | kind | script (scripts/*.sql) or extra redis_lease args | setup | PGOPTIONS | label [| grant statement (hot only)]
# Order matters: within a repeat and a client count the workloads run in this
# order, the two sides of each headline ratio next to each other.
# kind:  pgbench = pgbench -M prepared -f scripts/<script>;
#        redis   = redis_lease (hiredis, closed loop) with the given args.
# setup: a shell function (with arguments) run before every run, or "-".
# PGOPTIONS: session settings for the run (e.g. a future "-c dlock.mode=durable"), or "-".
# For hot workloads, the last field is a LIKE pattern of the statement that
# runs once per grant (counted with pg_stat_statements).
# ---------------------------------------------------------------------------
UNCONTENDED=(
  "dlock_durable|pgbench|dlock.sql|setup_dlock|-c dlock.durable=on|dlock_try + dlock_release, durable leases (dlock.durable = on, the default: a lease released before its first renewal writes no row, dlock.defer_rows = on)"
  "dlock_durable_rows|pgbench|dlock.sql|setup_dlock|-c dlock.durable=on -c dlock.defer_rows=off|as dlock_durable, every grant writes its row at once without waiting for its flush (dlock.defer_rows = off)"
  "dlock_durable_flush|pgbench|dlock.sql|setup_dlock|-c dlock.durable=on -c dlock.flush_grants=on|as dlock_durable, every grant flushed (dlock.flush_grants = on: the behaviour before 1.2, no grace after a crash)"
  "dlock_durable_events|pgbench|dlock.sql|setup_dlock|-c dlock.durable=on -c dlock.events=on|as dlock_durable, with change events (dlock.events = on: a NOTIFY at each commit)"
  "lease_logged|pgbench|lease.sql|setup_lease logged|-|lease table, logged: INSERT .. ON CONFLICT; DELETE"
  "dlock_mem|pgbench|dlock.sql|setup_dlock|-c dlock.durable=off|dlock_try + dlock_release, memory-only leases (dlock.durable = off)"
  "dlock_mem_events|pgbench|dlock.sql|setup_dlock|-c dlock.durable=off -c dlock.events=on|as dlock_mem, with change events (dlock.events = on: a NOTIFY at each commit)"
  "dlock_mem_events_listened|pgbench|dlock.sql|setup_listener|-c dlock.durable=off -c dlock.events=on|as dlock_mem_events, with a listener receiving every event (\`bench/event_delay.c listen\`: LISTEN dlock on a connection of its own, counting the notifications; on the same cores)"
  "notify_mem|pgbench|notify_mem.sql|setup_dlock|-c dlock.durable=off|as dlock_mem (events off) plus a plain pg_notify in each of its two transactions: NOTIFY's own cost"
  "pg_floor|pgbench|floor.sql|-|-|SELECT \$1 twice: no lock at all, the ceiling of any two-statement cycle in PostgreSQL"
  "advisory|pgbench|advisory.sql|-|-|pg_try_advisory_lock + pg_advisory_unlock (session)"
  "dlock_session|pgbench|dlock_session.sql|setup_dlock|-|dlock_try(lifetime => 'session') + dlock_release: memory-only whatever dlock.durable says"
  "dlock_shared|pgbench|dlock_shared.sql|setup_dlock|-c dlock.durable=off|dlock_try(mode => 'shared') + dlock_release, memory-only"
  "advisory_xact|pgbench|advisory_xact.sql|-|-|BEGIN; pg_try_advisory_xact_lock; COMMIT"
  "dlock_xact|pgbench|dlock_xact.sql|setup_dlock|-|BEGIN; dlock_try(lifetime => 'transaction'); COMMIT (the lease ends with the transaction)"
  "lease_unlogged|pgbench|lease.sql|setup_lease unlogged|-|lease table, UNLOGGED: INSERT .. ON CONFLICT; DELETE"
  "redis|redis|-|-|-|Redis SET NX PX 30000 + EVAL compare-and-delete"
)
HOT=(
  "hot_dlock_mem|pgbench|hot_dlock.sql|setup_dlock|-c dlock.durable=off|dlock_try('hot'), dlock_release if granted; memory-only|%dlock_release%"
  "hot_dlock_durable|pgbench|hot_dlock.sql|setup_dlock|-c dlock.durable=on|dlock_try('hot'), dlock_release if granted; durable|%dlock_release%"
  "hot_dlock_shared|pgbench|hot_dlock_shared.sql|setup_dlock|-c dlock.durable=off|dlock_try('hot', mode => 'shared'), dlock_release if granted; memory-only|%dlock_release%"
  "hot_dlock_sem|pgbench|hot_dlock_sem.sql|setup_dlock|-c dlock.durable=off|dlock_try('hot', permits => 8), dlock_release if granted; memory-only|%dlock_release%"
  "hot_lease_logged|pgbench|hot_lease.sql|setup_lease logged|-|lease table (logged) row 'hot'; DELETE if granted|DELETE FROM lease%"
  "hot_advisory|pgbench|hot_advisory.sql|-|-|pg_try_advisory_lock(7); unlock if granted|%pg_advisory_unlock%"
  # "hot_redis|redis|-K hot|-|-|Redis SET hot NX PX; EVAL compare-and-delete if granted|"
)
# Ratios with a target (issue 29: lifetimes and change events; issue 30:
# speed), reported on their own:
# numerator | denominator | target (minimum ratio) | what it says
GOALS=(
  "dlock_durable|lease_logged|2.5|durable leases (the default, no flush per grant) against the logged lease table"
  "dlock_durable_flush|lease_logged|-|durable leases, every grant flushed (dlock.flush_grants = on) against the logged lease table"
  "dlock_durable|dlock_durable_flush|-|what a grant's row and flush cost: the default against dlock.flush_grants = on"
  "dlock_durable_rows|lease_logged|-|durable leases, every grant writing its row (dlock.defer_rows = off) against the logged lease table"
  "dlock_durable|dlock_durable_rows|-|what the row writes cost: the default against dlock.defer_rows = off"
  "dlock_durable|dlock_mem|-|durable leases against memory-only ones"
  "dlock_mem|advisory|0.95|memory-only leases against session advisory locks"
  "dlock_session|advisory|0.95|a session lease against a session advisory lock"
  "dlock_xact|advisory_xact|0.95|a transaction lease against pg_try_advisory_xact_lock"
  "dlock_session|dlock_mem|0.95|a session lease at memory mode's speed"
  "dlock_xact|dlock_mem|-|a transaction lease against memory mode (3 round trips against 2: no target)"
  "dlock_mem_events|dlock_mem|0.90|events on against off, memory-only cycles (at most 10 % slower)"
  "dlock_mem_events_listened|dlock_mem|-|events on against off, memory-only cycles, a listener receiving every event"
  "dlock_durable_events|dlock_durable|-|events on against off, durable cycles"
  "dlock_mem_events|notify_mem|-|events against one plain pg_notify per transaction"
)
# Lock kinds of the handoff test (modes of handoff.c).
HANDOFF_MODES=${HANDOFF_MODES:-dlock_mem,dlock_durable,advisory}
# The event delay's loads (clients cycling with events; 0: idle).
EVENT_DELAY_LOADS=${EVENT_DELAY_LOADS:-0 8 32}

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------
# Packages (Debian), only when root and something is missing.
# ---------------------------------------------------------------------------
PKGS="postgresql-15 postgresql-client-15 postgresql-server-dev-15 libpq-dev redis-server redis-tools gnuplot-nox libhiredis-dev make gcc"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=""
  for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    log "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    # shellcheck disable=SC2086
    apt-get install -y -q $missing >/dev/null
  fi
fi
for cmd in "$PGBIN/initdb" "$PGBIN/pg_ctl" "$PGBIN/pgbench" "$PGBIN/psql" redis-server redis-cli gnuplot; do
  command -v "$cmd" >/dev/null || die "missing $cmd (run as root to install packages)"
done

# ---------------------------------------------------------------------------
# Build and install dlock, build the helpers.
# ---------------------------------------------------------------------------
TMP=$(mktemp -d /tmp/dlock-bench.XXXXXX)
chmod 755 "$TMP"
mkdir -p "$TMP/bin" "$TMP/sock" "$TMP/logs" "$TMP/out"
if [ "$(id -u)" = 0 ]; then
  AS_PG=(runuser -u postgres --)
else
  AS_PG=()
fi

PG_STARTED=0
REDIS_PID=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$REDIS_PID" ]; then
    kill "$REDIS_PID" 2>/dev/null
    wait "$REDIS_PID" 2>/dev/null
  fi
  if [ "$PG_STARTED" = 1 ]; then
    "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$TMP/pgdata" -m fast -w stop >/dev/null 2>&1
  fi
  if [ "${BENCH_KEEP:-0}" = 1 ] || [ "$rc" != 0 ]; then
    log "kept $TMP"
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$BUILD_FROM" = worktree ]; then
  SRC=$REPO
  GIT_HEAD=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
  GIT_DIRTY=$(git -C "$REPO" status --porcelain -- src sql Makefile dlock.control 2>/dev/null | wc -l)
  BUILD_NOTE="the working tree of $REPO at commit \`$GIT_HEAD\`"
  [ "$GIT_DIRTY" = 0 ] || BUILD_NOTE="$BUILD_NOTE plus $GIT_DIRTY uncommitted change(s) in src/, sql/ or Makefile"
else
  SRC=$TMP/src
  mkdir -p "$SRC"
  GIT_HEAD=$(git -C "$REPO" rev-parse --short "$BUILD_FROM")
  git -C "$REPO" archive "$BUILD_FROM" | tar -x -C "$SRC"
  BUILD_NOTE="a clean export (git archive) of commit \`$GIT_HEAD\`"
fi
log "building and installing dlock from $SRC"
make -s -C "$SRC" PG_CONFIG="$PGBIN/pg_config" >"$TMP/logs/build.log" 2>&1 || { tail -20 "$TMP/logs/build.log" >&2; die "dlock build failed in $SRC"; }
make -s -C "$SRC" install PG_CONFIG="$PGBIN/pg_config" >>"$TMP/logs/build.log" 2>&1 || { tail -20 "$TMP/logs/build.log" >&2; die "dlock install failed"; }
make -s -C "$HERE" BUILD="$TMP/bin" PG_CONFIG="$PGBIN/pg_config" all >/dev/null
[ "$(id -u)" = 0 ] && chown -R postgres:postgres "$TMP"


port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && [ ! -e "$TMP/sock/.s.PGSQL.$1" ]
}
free_port() {
  local p=$1
  while ! port_free "$p"; do p=$((p + 1)); done
  echo "$p"
}

# ---------------------------------------------------------------------------
# Throwaway PostgreSQL cluster (fsync on, synchronous_commit default).
# ---------------------------------------------------------------------------
PGPORT=$(free_port 55433)
log "initdb in $TMP/pgdata, port $PGPORT"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/pgdata" -U postgres --auth=trust --no-instructions \
  -E UTF8 --locale=C.UTF-8 >"$TMP/initdb.log" 2>&1 || { cat "$TMP/initdb.log" >&2; die "initdb failed"; }
PG_SETTINGS="listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TMP/sock'
shared_preload_libraries = 'dlock, pg_stat_statements'
dlock.max_locks = 200000
max_connections = 100
shared_buffers = 256MB
pg_stat_statements.track = none
track_wal_io_timing = on"
echo "$PG_SETTINGS" >>"$TMP/pgdata/postgresql.conf"
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$TMP/pgdata" -l "$TMP/pg.log" -w start >/dev/null || {
  cat "$TMP/pg.log" >&2; die "postgres did not start"; }
PG_STARTED=1

PSQL() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres "$@"; }
PSQL -c "CREATE EXTENSION dlock" -c "CREATE EXTENSION pg_stat_statements"

# ---------------------------------------------------------------------------
# Throwaway redis-server: no persistence.
# ---------------------------------------------------------------------------
RPORT=$(free_port 56379)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$TMP" --logfile "$TMP/redis.log" --daemonize no &
REDIS_PID=$!
for _ in $(seq 100); do
  redis-cli -h 127.0.0.1 -p "$RPORT" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -h 127.0.0.1 -p "$RPORT" ping >/dev/null 2>&1 || die "redis-server did not start"
log "redis-server on port $RPORT"

# ---------------------------------------------------------------------------
# Setup functions and run helpers.
# ---------------------------------------------------------------------------
# The lease table, refilled before every run: 100k expired leases on other
# names, then VACUUM ANALYZE so the prepared plans are index scans.
setup_lease() {
  local unlogged=""
  [ "$1" = unlogged ] && unlogged=UNLOGGED
  PSQL <<SQL
DROP TABLE IF EXISTS lease;
CREATE $unlogged TABLE lease(name text primary key, owner text not null, expires_at timestamptz not null);
INSERT INTO lease SELECT 'x' || g, 'o' || (g % 32 + 1), now() - interval '1 hour' FROM generate_series(1, 100000) g;
VACUUM ANALYZE lease;
SQL
}
# dlock's own table gets the same: the dead rows of earlier runs vacuumed
# away, as the lease table is rebuilt, so no run inherits another's bloat.
setup_dlock() {
  PSQL -c "SELECT dlock_sweep()" -c "VACUUM ANALYZE dlock_leases" >/dev/null
}
# A listener for the run: `event_delay listen` (LISTEN dlock, counts each
# notification it reads) on a connection of its own, listening before the
# run starts; run_one stops it and checks that it got every event.
LISTENER_PID=""
setup_listener() {
  setup_dlock
  "$TMP/bin/event_delay" "host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres" listen \
    >"$TMP/logs/listener.out" 2>&1 &
  LISTENER_PID=$!
  for _ in $(seq 50); do
    [ "$(PSQL -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN dlock'")" = 1 ] && return
    sleep 0.1
  done
  die "the listener is not listening: $(cat "$TMP/logs/listener.out")"
}
# Stops the listener (after a second for the last events to arrive); sets
# HEARD to how many it got.
stop_listener() {
  sleep 1
  kill "$LISTENER_PID" 2>/dev/null; wait "$LISTENER_PID" 2>/dev/null || true
  HEARD=$(sed -n 's/^events=//p' "$TMP/logs/listener.out")
  LISTENER_PID=""
}

# ---------------------------------------------------------------------------
# Other load on the machine.  The benchmark shares the cores with whatever
# else runs; measure it: CPU busy time from /proc/stat minus the CPU time of
# our own processes (this cluster's postmaster and children, redis-server,
# and this shell's reaped children: pgbench, redis_lease, psql).
# ---------------------------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)
QUIET_CORES=${BENCH_QUIET_CORES:-0.25}
QUIET_MAX=${BENCH_QUIET_MAX:-30}
QUIET_BUDGET=${BENCH_QUIET_BUDGET:-90}
RETRY_BUDGET=${BENCH_RETRY_BUDGET:-90}
QUIET_WAITED=0
proc_cpu() {   # utime+stime+cutime+cstime of each pid given, in ticks
  local pid total=0 v
  for pid in "$@"; do
    v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
snapshot() {   # sets SNAP_T, SNAP_BUSY, SNAP_OURS (ticks)
  local pm kids ch
  SNAP_T=$(date +%s.%N)
  SNAP_BUSY=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
  pm=$(head -1 "$TMP/pgdata/postmaster.pid" 2>/dev/null || echo "")
  kids=""
  [ -n "$pm" ] && kids=$(pgrep -P "$pm" | tr '\n' ' ' || true)
  times >"$TMP/times.txt"
  ch=$(awk -v hz="$CLK_TCK" 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += (a[1] * 60 + a[2]) * hz } printf "%.0f", n }' "$TMP/times.txt")
  # shellcheck disable=SC2086
  SNAP_OURS=$(( $(proc_cpu $pm $kids $REDIS_PID) + ch ))
}
# foreign cores between an earlier snapshot (T BUSY OURS given) and the
# latest one; call `snapshot` first, in this shell (times must see our children)
foreign_since() {
  local t0=$1 b0=$2 o0=$3
  awk -v t0="$t0" -v t1="$SNAP_T" -v b="$((SNAP_BUSY - b0))" -v o="$((SNAP_OURS - o0))" -v hz="$CLK_TCK" \
    'BEGIN { f = (b - o) / hz / (t1 - t0); if (f < 0) f = 0; printf "%.2f\n", f }'
}
# Before a run: wait (bounded) until other processes use less than QUIET_CORES.
quiet_wait() {
  local waited=0 f
  while :; do
    snapshot
    local t0=$SNAP_T b0=$SNAP_BUSY o0=$SNAP_OURS
    sleep 1
    snapshot
    f=$(foreign_since "$t0" "$b0" "$o0")
    awk -v f="$f" -v q="$QUIET_CORES" 'BEGIN { exit !(f <= q) }' && break
    if [ "$waited" -ge "$QUIET_MAX" ] || [ "$QUIET_WAITED" -ge "$QUIET_BUDGET" ]; then
      log "machine still busy ($f cores used by other processes); running anyway"
      break
    fi
    [ "$waited" = 0 ] && log "waiting for other processes to calm down ($f cores busy)"
    waited=$((waited + 1)); QUIET_WAITED=$((QUIET_WAITED + 1))
  done
}

RAW="$TMP/out/results.tsv"      # section, name, clients, repeat, metric, value
ISSUES="$TMP/out/issues.txt"
: >"$RAW"
: >"$ISSUES"
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RAW"; }
issue() { echo "$*" >>"$ISSUES"; log "note: $*"; }

field() { echo "$1" | cut -d'|' -f"$2"; }
threads_for() { local c=$1; echo $((c < THREADS ? c : THREADS)); }

# dlock's cluster-wide grant counter (dlock_stats.grants): the difference
# across a run is the number of grants, a cross-check of the client's count.
dlock_grants() {
  PSQL -c "SELECT grants FROM dlock_stats" 2>/dev/null || echo ""
}

# nearest-rank percentiles of column 3 (latency, us) of pgbench -l logs
log_percentiles() {
  cat "$@" | awk '{print $3}' | sort -n | awk '{v[NR]=$1} END {
    if (NR == 0) { print "NaN NaN"; exit }
    i50 = int(0.50 * NR + 0.999999); i99 = int(0.99 * NR + 0.999999);
    printf "%s %s\n", v[i50], v[i99] }'
}

# median SECTION NAME CLIENTS METRIC  (also: minimum, maximum)
stat() {
  awk -F'\t' -v s="$2" -v n="$3" -v c="$4" -v m="$5" -v what="$1" '
    $1 == s && $2 == n && $3 == c && $5 == m && $6 != "NaN" && $6 != "" { v[++k] = $6 + 0 }
    END {
      if (k == 0) { print "NaN"; exit }
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      if (what == "min") print v[1];
      else if (what == "max") print v[k];
      else if (k % 2) print v[(k + 1) / 2];
      else print (v[k / 2] + v[k / 2 + 1]) / 2
    }' "$RAW"
}
median() { stat median "$@"; }
# thousands separators, no decimals
fmt() {
  awk -v x="$1" 'BEGIN { if (x == "NaN" || x == "") { print "n/a"; exit }
    s = sprintf("%.0f", x); neg = (substr(s, 1, 1) == "-"); if (neg) s = substr(s, 2);
    r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
    print (neg ? "-" : "") s r }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NaN" || b == "NaN" || b == 0) print "n/a"; else printf "%.2f×\n", a / b }'; }
# paired_ratio A B CLIENTS: A's tps over B's, repeat by repeat (the two ran
# back to back); the median of those ratios and their range
paired_ratio() {
  awk -F'\t' -v a="$1" -v b="$2" -v c="$3" '
    $1 == "uncontended" && $3 == c && $5 == "tps" && $6 != "NaN" && $6 != "" {
      if ($2 == a) x[$4] = $6 + 0; else if ($2 == b) y[$4] = $6 + 0 }
    END {
      for (r in x) if ((r in y) && y[r] > 0) v[++k] = x[r] / y[r]
      if (k == 0) { print "n/a"; exit }
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      m = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
      if (k == 1) printf "%.2f×\n", m; else printf "%.2f× (%.2f-%.2f)\n", m, v[1], v[k] }' "$RAW"
}
pct_of() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NaN" || b == "NaN" || b == 0) print "n/a"; else printf "%.1f %%\n", 100 * a / b }'; }

# run_one SECTION SPEC CLIENTS REPEAT
run_one() {
  local section=$1 spec=$2 c=$3 rep=$4
  local name kind arg setup pgopts grantpat j outf errf rc
  name=$(field "$spec" 1); kind=$(field "$spec" 2); arg=$(field "$spec" 3)
  setup=$(field "$spec" 4); pgopts=$(field "$spec" 5); grantpat=$(field "$spec" 7)
  [ "$pgopts" = "-" ] && pgopts=""
  j=$(threads_for "$c")
  outf="$TMP/logs/$name.c$c.r$rep.out"
  errf="$TMP/logs/$name.c$c.r$rep.err"

  if [ "$setup" != "-" ]; then
    # shellcheck disable=SC2086
    $setup >/dev/null
  fi
  quiet_wait
  if [ "$kind" = pgbench ]; then
    local tok0="" tok1 hotopts="" logargs=() processed tps failed lat warn
    PSQL -c "CHECKPOINT"
    PSQL -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
    case "$name" in *dlock*) tok0=$(dlock_grants) ;; esac
    if [ "$section" = hot ]; then
      PSQL -c "SELECT pg_stat_statements_reset()" >/dev/null
      hotopts="-c pg_stat_statements.track=top"
      rm -f "$TMP/logs/pgbench_log"*
      logargs=(-l --log-prefix="$TMP/logs/pgbench_log")
    fi
    rc=0
    snapshot; local s_t=$SNAP_T s_b=$SNAP_BUSY s_o=$SNAP_OURS
    PGOPTIONS="$pgopts $hotopts" "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PGPORT" -U postgres \
      -M prepared -c "$c" -j "$j" -T "$SECONDS_PER_RUN" "${logargs[@]}" \
      -f "$HERE/scripts/$arg" postgres >"$outf" 2>"$errf" || rc=$?
    # until the pgbench backends are gone: they flush their statistics on exit
    for _ in $(seq 50); do
      [ "$(PSQL -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND query <> 'LISTEN dlock'")" = 0 ] && break
      sleep 0.1
    done
    snapshot
    record "$section" "$name" "$c" "$rep" foreign_cores "$(foreign_since "$s_t" "$s_b" "$s_o")"
    local wal
    read -r -a wal <<<"$(PSQL -F ' ' -c "SELECT wal_sync, wal_bytes, round(wal_sync_time::numeric, 3) FROM pg_stat_wal")"
    record "$section" "$name" "$c" "$rep" wal_syncs "${wal[0]}"
    record "$section" "$name" "$c" "$rep" wal_bytes "${wal[1]}"
    [ "${wal[0]}" = 0 ] || record "$section" "$name" "$c" "$rep" wal_sync_ms_each "$(awk -v t="${wal[2]}" -v n="${wal[0]}" 'BEGIN { printf "%.3f", t / n }')"
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$outf")
    processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$outf")
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$outf")
    lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$outf")
    warn=$(grep -c "WARNING" "$errf" || true)
    [ -n "$tps" ] || { tps=NaN; issue "$name c=$c rep=$rep: no tps in pgbench output (rc $rc): $(tail -3 "$errf" | tr '\n' ' ')"; }
    [ "$rc" = 0 ] || issue "$name c=$c rep=$rep: pgbench exit $rc: $(grep -v WARNING "$errf" | tail -2 | tr '\n' ' ')"
    [ "${failed:-0}" = 0 ] || issue "$name c=$c rep=$rep: $failed failed transactions"
    record "$section" "$name" "$c" "$rep" tps "$tps"
    record "$section" "$name" "$c" "$rep" processed "${processed:-0}"
    record "$section" "$name" "$c" "$rep" latency_ms "${lat:-NaN}"
    record "$section" "$name" "$c" "$rep" client_warnings "$warn"
    if [ -n "$tok0" ]; then
      tok1=$(dlock_grants)
      record "$section" "$name" "$c" "$rep" dlock_grants "$((tok1 - tok0))"
      if [ -n "$LISTENER_PID" ]; then
        # a grant and a release per cycle, each an event
        stop_listener
        record "$section" "$name" "$c" "$rep" events_heard "$HEARD"
        [ "$HEARD" = "$((2 * (tok1 - tok0)))" ] || issue "$name c=$c rep=$rep: the listener got $HEARD events for $((tok1 - tok0)) grants and their releases"
      fi
      local left
      left=$(PSQL -c "SELECT count(*) FROM dlock_locks")
      [ "$left" = 0 ] || issue "$name c=$c rep=$rep: $left leases left in dlock_locks after the run"
    fi
    if [ "$section" = hot ]; then
      local grants p
      grants=$(PSQL -c "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '$grantpat'")
      record "$section" "$name" "$c" "$rep" grants "$grants"
      if [ -n "$tok0" ] && [ "$((tok1 - tok0))" != "$grants" ]; then
        issue "$name c=$c rep=$rep: $grants releases counted by pg_stat_statements, but dlock_stats counted $((tok1 - tok0)) grants"
      fi
      read -r -a p <<<"$(log_percentiles "$TMP/logs/pgbench_log"*)"
      record "$section" "$name" "$c" "$rep" lat_p50_us "${p[0]}"
      record "$section" "$name" "$c" "$rep" lat_p99_us "${p[1]}"
      rm -f "$TMP/logs/pgbench_log"*
    fi
    log "rep $rep/$REPEATS  $name  c=$c: $tps tx/s (other load $(awk -F'\t' '$5 == "foreign_cores" { v = $6 } END { print v }' "$RAW") cores)"
  else
    local line
    redis-cli -h 127.0.0.1 -p "$RPORT" flushall >/dev/null
    rc=0
    snapshot; local s_t=$SNAP_T s_b=$SNAP_BUSY s_o=$SNAP_OURS
    # shellcheck disable=SC2086
    "$TMP/bin/redis_lease" -h 127.0.0.1 -p "$RPORT" -c "$c" -j "$j" -T "$SECONDS_PER_RUN" \
      $([ "$arg" = "-" ] || echo "$arg") >"$outf" 2>"$errf" || rc=$?
    snapshot
    record "$section" "$name" "$c" "$rep" foreign_cores "$(foreign_since "$s_t" "$s_b" "$s_o")"
    [ "$rc" = 0 ] || issue "$name c=$c rep=$rep: redis_lease exit $rc: $(tail -2 "$errf" | tr '\n' ' ')"
    line=$(cat "$outf")
    kv() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    local tries grants cycles bad
    tries=$(kv tries); grants=$(kv grants); cycles=$(kv cycles); bad=$(kv failed_releases)
    [ "${bad:-0}" = 0 ] || issue "$name c=$c rep=$rep: $bad releases deleted nothing"
    if [ "$section" = hot ]; then
      record "$section" "$name" "$c" "$rep" tps "$(kv tries_per_s)"
      record "$section" "$name" "$c" "$rep" processed "${tries:-0}"
      record "$section" "$name" "$c" "$rep" grants "${grants:-0}"
    else
      record "$section" "$name" "$c" "$rep" tps "$(kv cycles_per_s)"
      record "$section" "$name" "$c" "$rep" processed "${tries:-0}"
      record "$section" "$name" "$c" "$rep" grants "${cycles:-0}"
    fi
    log "rep $rep/$REPEATS  $name  c=$c: $(kv cycles_per_s) cycles/s ($(kv tries_per_s) tries/s; other load $(awk -F'\t' '$5 == "foreign_cores" { v = $6 } END { print v }' "$RAW") cores)"
  fi
}

selected() { [ -z "$ONLY" ] || [[ "$1" =~ $ONLY ]]; }

# ---------------------------------------------------------------------------
# Smoke test: every pgbench script runs without error.
# ---------------------------------------------------------------------------
for spec in "${UNCONTENDED[@]}" "${HOT[@]}"; do
  selected "$(field "$spec" 1)" || continue
  [ "$(field "$spec" 2)" = pgbench ] || continue
  s=$(field "$spec" 4); [ "$s" = "-" ] || $s >/dev/null
  "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PGPORT" -U postgres -M prepared -c 2 -j 2 -t 20 \
    -f "$HERE/scripts/$(field "$spec" 3)" postgres >"$TMP/logs/smoke.out" 2>&1 ||
    { cat "$TMP/logs/smoke.out" >&2; die "smoke test of $(field "$spec" 1) failed"; }
  [ -z "$LISTENER_PID" ] || stop_listener
done
PSQL -c "SELECT pg_advisory_unlock_all()" >/dev/null

# the prepared generic plan of the lease DELETE, for the report
setup_lease logged >/dev/null
LEASE_PLAN=$(PSQL <<'SQL'
SET plan_cache_mode = force_generic_plan;
PREPARE d(text, text) AS DELETE FROM lease WHERE name = $1 AND owner = $2;
EXPLAIN (COSTS OFF) EXECUTE d('1', '1');
SQL
)

# ---------------------------------------------------------------------------
# The runs: repeats outermost, then client counts, then the workloads back
# to back, so the two sides of a ratio alternate (A B A B ...) and see the
# same drift.
# ---------------------------------------------------------------------------
for rep in $(seq "$REPEATS"); do
  for c in $CLIENTS; do
    for spec in "${UNCONTENDED[@]}"; do
      selected "$(field "$spec" 1)" || continue
      run_one uncontended "$spec" "$c" "$rep"
    done
  done
  for spec in "${HOT[@]}"; do
    selected "$(field "$spec" 1)" || continue
    run_one hot "$spec" "$HOT_CLIENTS" "$rep"
  done
done

# ---------------------------------------------------------------------------
# Retries: a run during which other processes used more than QUIET_CORES is
# run again (worst first, within RETRY_BUDGET seconds); the attempt with the
# lower outside load is kept, and both are listed in the report.
# ---------------------------------------------------------------------------
spec_of() { for s in "${UNCONTENDED[@]}" "${HOT[@]}"; do [ "$(field "$s" 1)" = "$1" ] && echo "$s"; done; }
retag() {   # retag FROM_SECTION TO_SECTION NAME CLIENTS REPEAT
  awk -F'\t' -v OFS='\t' -v f="$1" -v t="$2" -v n="$3" -v c="$4" -v r="$5" \
    '$1 == f && $2 == n && $3 == c && $4 == r { $1 = t } { print }' "$RAW" >"$RAW.tmp" && mv "$RAW.tmp" "$RAW"
}
point_val() { awk -F'\t' -v s="$1" -v n="$2" -v c="$3" -v r="$4" -v m="$5" '$1 == s && $2 == n && $3 == c && $4 == r && $5 == m { print $6 }' "$RAW"; }
RETRY_START=$(date +%s)
RETRIES=0
while read -r f sec n c r; do
  [ -n "$f" ] || continue
  [ $(( $(date +%s) - RETRY_START )) -lt "$RETRY_BUDGET" ] || { issue "retry budget (${RETRY_BUDGET} s) used up; later busy runs were kept as they were"; break; }
  old_v=$(point_val "$sec" "$n" "$c" "$r" tps)
  retag "$sec" "old1:$sec" "$n" "$c" "$r"
  log "retrying $n c=$c repeat $r (other processes used $f cores)"
  run_one "$sec" "$(spec_of "$n")" "$c" "$r"
  RETRIES=$((RETRIES + 1))
  new_f=$(point_val "$sec" "$n" "$c" "$r" foreign_cores)
  new_v=$(point_val "$sec" "$n" "$c" "$r" tps)
  if awk -v a="$new_f" -v b="$f" 'BEGIN { exit !(a > b) }'; then
    retag "$sec" "old2:$sec" "$n" "$c" "$r"
    retag "old1:$sec" "$sec" "$n" "$c" "$r"
    issue "$n c=$c repeat $r was run twice: other load $f cores → $(fmt "$old_v") /s (kept), retry $new_f cores → $(fmt "$new_v") /s"
  else
    issue "$n c=$c repeat $r was run twice: other load $f cores → $(fmt "$old_v") /s, retry $new_f cores → $(fmt "$new_v") /s (kept)"
  fi
done < <(awk -F'\t' -v q="$QUIET_CORES" '($1 == "uncontended" || $1 == "hot") && $5 == "foreign_cores" && $6 + 0 > q { print $6, $1, $2, $3, $4 }' "$RAW" | sort -rn)

log "handoff latency, $HANDOFF_ITERS iterations per lock kind"
HANDOFF_CMD="handoff 'host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres' $HANDOFF_ITERS 5 $HANDOFF_MODES 10"
quiet_wait
"$TMP/bin/handoff" "host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres" "$HANDOFF_ITERS" 5 \
  "$HANDOFF_MODES" 10 >"$TMP/out/handoff.txt" 2>"$TMP/logs/handoff.err" ||
  issue "handoff failed: $(tail -2 "$TMP/logs/handoff.err" | tr '\n' ' ')"

# A change event's delay from its commit to a listener (bench/event_delay.c):
# idle, then while clients cycle memory-only leases with events (the load of
# dlock_mem_events) for 20 s, the probe starting 2 s in.
log "event delay, $EVENT_DELAY_ITERS events per load"
for c in $EVENT_DELAY_LOADS; do
  quiet_wait
  bgpid=""
  if [ "$c" != 0 ]; then
    PGOPTIONS="-c dlock.durable=off -c dlock.events=on" "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PGPORT" \
      -U postgres -M prepared -c "$c" -j "$(threads_for "$c")" -T 20 -f "$HERE/scripts/dlock.sql" postgres \
      >"$TMP/logs/event_delay_load.c$c.out" 2>&1 &
    bgpid=$!
    sleep 2
  fi
  "$TMP/bin/event_delay" "host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres" "$EVENT_DELAY_ITERS" \
    >"$TMP/out/event_delay.c$c.txt" 2>"$TMP/logs/event_delay.c$c.err" ||
    issue "event_delay under $c clients failed: $(tail -2 "$TMP/logs/event_delay.c$c.err" | tr '\n' ' ')"
  if [ -n "$bgpid" ]; then
    kill -0 "$bgpid" 2>/dev/null || issue "event_delay under $c clients outlasted its load: part of it ran idle"
    wait "$bgpid" || issue "the load of event_delay ($c clients) failed: $(tail -2 "$TMP/logs/event_delay_load.c$c.out" | tr '\n' ' ')"
  fi
done

# ---------------------------------------------------------------------------
# Facts for the report.
# ---------------------------------------------------------------------------
PG_VERSION=$(PSQL -c "SELECT version()")
REDIS_VERSION=$(redis-server --version)
PGBENCH_VERSION=$("$PGBIN/pgbench" --version)
CPU_MODEL=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
MEM=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
VIRT=$(systemd-detect-virt 2>/dev/null || echo unknown)
PG_SHOW=$(PSQL -c "SELECT string_agg(name || ' = ' || setting || coalesce(' ' || unit, ''), E'\n' ORDER BY name) FROM pg_settings WHERE name IN ('fsync','synchronous_commit','wal_level','shared_buffers','max_connections','dlock.max_locks','full_page_writes','checkpoint_timeout','max_wal_size','wal_sync_method','shared_preload_libraries','autovacuum','dlock.durable','dlock.worker','dlock.lock_delay','dlock.default_ttl')")
DLOCK_TABLE=$(PSQL -c "SELECT format('%s rows, %s live / %s dead tuples per pg_stat_user_tables, %s', (SELECT count(*) FROM dlock_leases), n_live_tup, n_dead_tup, pg_size_pretty(pg_total_relation_size('dlock_leases'))) FROM pg_stat_user_tables WHERE relname = 'dlock_leases'" 2>/dev/null || echo "n/a")
sleep 1
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$TMP/pgdata" -m fast -w stop >/dev/null && PG_STARTED=0
SERVER_LOG_SUMMARY=$(grep -E '(WARNING|ERROR|FATAL|PANIC):' "$TMP/pg.log" | sed "s|$TMP|<tmp>|g" |
  sed -E 's/^[^]]*\] //; s/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -15 || true)
CHECKPOINTS=$(grep -o 'checkpoint starting: .*' "$TMP/pg.log" | sed 's/checkpoint starting: //' | sort | uniq -c |
  awk '{ n = $1; $1 = ""; printf "%s%d × \"%s\"", (k++ ? ", " : ""), n, substr($0, 2) }' || true)
# the million-lease scale runs use a cluster of their own
SCALE_MD=$TMP/out/scale.md
if [ "${BENCH_SCALE:-1}" = 1 ]; then
  log "scale: 1M live leases, 100k expiring at once"
  PGBIN=$PGBIN "$HERE/scale.sh" "$SCALE_MD" "$TMP" || echo "scale.sh failed (exit $?); see $TMP/scale-*.log" >>"$ISSUES"
fi

# the crash runs too (they kill their server)
CRASH_MD=$TMP/out/crash.md
if [ "${BENCH_CRASH:-1}" = 1 ]; then
  log "crash: unavailability after a crash, per dlock.flush_grants"
  PGBIN=$PGBIN "$HERE/crash.sh" "$CRASH_MD" "$TMP" || echo "crash.sh failed (exit $?); see $TMP/crash-*.log" >>"$ISSUES"
fi

T_END=$(date +%s)
RUNTIME=$((T_END - T_START))

# ---------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------
# " †" when some repeat of this point ran while other processes used more than QUIET_CORES
busy_mark() { awk -v m="$(stat max "$1" "$2" "$3" foreign_cores)" -v q="$QUIET_CORES" 'BEGIN { if (m != "NaN" && m > q) printf " †" }'; }
plural() { [ "$1" = 1 ] || echo s; }
names_of() { for s in "$@"; do n=$(field "$s" 1); selected "$n" && echo "$n"; done; }
label_of() { for s in "${UNCONTENDED[@]}" "${HOT[@]}"; do [ "$(field "$s" 1)" = "$1" ] && field "$s" 6; done; }
handoff_val() {
  awk -v m="$1" -v k="$2" '{ ok = 0; for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == "mode" && a[2] == m) ok = 1; if (ok && a[1] == k) { print a[2]; exit } } }' \
    "$TMP/out/handoff.txt"
}

mapfile -t UNAMES < <(names_of "${UNCONTENDED[@]}")
mapfile -t HNAMES < <(names_of "${HOT[@]}")
DLOCK_NAMES=()
BASE_NAMES=()
for n in "${UNAMES[@]}"; do
  case "$n" in dlock*) DLOCK_NAMES+=("$n") ;; *) BASE_NAMES+=("$n") ;; esac
done

# plot data and PNG
PLOTDAT="$TMP/out/cycles.dat"
{
  printf 'clients'
  for n in "${UNAMES[@]}"; do printf ' "%s"' "$n"; done
  echo
  for c in $CLIENTS; do
    printf '%s' "$c"
    for n in "${UNAMES[@]}"; do printf ' %s' "$(median uncontended "$n" "$c" tps)"; done
    echo
  done
} >"$PLOTDAT"
NCOLS=$(( ${#UNAMES[@]} + 1 ))
XTICS=$(echo "$CLIENTS" | tr ' ' '\n' | awk 'NF { printf "%s\"%s\" %s", (n++ ? ", " : ""), $1, $1 }')
XMAX=$(echo "$CLIENTS" | tr ' ' '\n' | sort -n | tail -1)
if [ "${#UNAMES[@]}" -gt 0 ]; then
gnuplot <<GP
set terminal pngcairo size 1100,700 font "DejaVu Sans,12"
set output "$TMP/out/cycles.png"
set title "Lease cycles/s (acquire + release), median of $REPEATS × ${SECONDS_PER_RUN} s, $(nproc) cores, loopback"
set xlabel "clients (log scale)"
set ylabel "cycles/s (log scale)"
set logscale x 2
set logscale y 10
set xtics ($XTICS)
set xrange [0.8:$XMAX * 1.25]
set format y "%.0f"
set termoption noenhanced
set linetype 1 lc rgb "#7b2cbf" lw 3 pt 7
set linetype 2 lc rgb "#1b9e77" lw 2 pt 5
set linetype 3 lc rgb "#66a61e" lw 2 pt 4 dt 2
set linetype 4 lc rgb "#d95f02" lw 2 pt 9
set linetype 5 lc rgb "#e6ab02" lw 2 pt 8 dt 2
set linetype 6 lc rgb "#1f78b4" lw 2 pt 13
set linetype 7 lc rgb "#e7298a" lw 2 pt 11
set linetype 8 lc rgb "#666666" lw 2 pt 6
set grid xtics ytics mytics
set key outside right top box
set datafile missing "NaN"
plot for [i=2:$NCOLS] "$PLOTDAT" using 1:i with linespoints linetype (i - 1) pointsize 1.6 title columnheader(i)
GP
else
  : >"$TMP/out/cycles.png"  # no uncontended workload selected: nothing to plot
fi

REPORT="$TMP/out/RESULTS.md"
{
  echo "# dlock benchmark results"
  echo
  echo "Generated by \`bench/run.sh\` (\`make bench\`) on $(date -u '+%Y-%m-%d %H:%M UTC'); total runtime $((RUNTIME / 60)) min $((RUNTIME % 60)) s."
  echo "dlock was built and installed from $BUILD_NOTE."
  echo "This is a benchmark, not a test: figures vary by 15-20 % between runs on this kind of machine; compare the"
  echo "workloads side by side within one run, never against another run's file."
  echo
  echo "## Machine and software"
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| CPU | $CPU_MODEL, $(nproc) cores visible (\`nproc\`), virtualization: $VIRT |"
  echo "| Memory | $MEM |"
  echo "| Kernel | $(uname -sr) |"
  echo "| PostgreSQL | $PG_VERSION |"
  echo "| pgbench | $PGBENCH_VERSION |"
  echo "| Redis | $REDIS_VERSION |"
  echo "| hiredis | $(dpkg-query -W -f='${Version}' libhiredis-dev 2>/dev/null || echo '?') |"
  echo
  echo "Clients, PostgreSQL and Redis all share the same cores; every connection is loopback TCP (127.0.0.1)."
  echo
  echo "## Settings"
  echo
  echo "Throwaway cluster made by \`initdb\` (as user postgres, --auth=trust, C.UTF-8), with these lines appended to postgresql.conf:"
  echo
  echo '```'
  echo "$PG_SETTINGS" | sed "s|$TMP|<tmp>|g"
  echo '```'
  echo
  echo "As seen by the server after start:"
  echo
  echo '```'
  echo "$PG_SHOW" | sed "s|$TMP|<tmp>|g"
  echo '```'
  echo
  echo "dlock.durable is chosen per workload with PGOPTIONS (see the workload table); the other dlock settings are defaults."
  echo "fsync and synchronous_commit are left on: the logged lease table pays for a WAL flush per commit, as it would in"
  echo "production. track_wal_io_timing is on to report the WAL flush time of every run. pg_stat_statements is loaded only to count grants in the hot-key runs; its tracking is off"
  echo "(\`track = none\`) in every other run and switched on with PGOPTIONS for the hot-key runs only."
  echo "Redis: \`redis-server --port <port> --bind 127.0.0.1 --save '' --appendonly no\` (no persistence at all)."
  echo
  echo "## Commands"
  echo
  echo "Every point is run $REPEATS times for $SECONDS_PER_RUN s; the tables give the median. The repeats are interleaved"
  echo "(repeat 1 of every workload at each client count, workloads back to back, then repeat 2, ...), so the two sides"
  echo "of a ratio alternate (A B A B ...); a ratio is the median of the per-repeat ratios. Every script passes its key (and owner) as bind parameters of"
  echo "prepared statements: the random number itself is the lock name, the advisory key, the lease row's name; no SQL"
  echo "builds strings. A \`CHECKPOINT\` precedes every PostgreSQL run. The lease"
  echo "table is dropped, recreated, filled with 100,000 expired leases on other names (\`'x' || g\`) and \`VACUUM ANALYZE\`d"
  echo "before every run that uses it, so its prepared statements get index plans; before every dlock run, \`dlock_sweep()\`"
  echo "and \`VACUUM ANALYZE dlock_leases\` clear the dead rows of earlier runs alike. The generic plan of the DELETE:"
  echo
  echo '```'
  echo "$LEASE_PLAN"
  echo '```'
  echo
  echo '```'
  echo "pgbench -n -h 127.0.0.1 -p <port> -U postgres -M prepared -c <clients> -j <min(clients,$THREADS)> -T $SECONDS_PER_RUN -f bench/scripts/<script> postgres"
  echo "  (hot-key runs add: -l --log-prefix=<tmp>  and PGOPTIONS='-c pg_stat_statements.track=top')"
  echo "redis_lease -h 127.0.0.1 -p <port> -c <clients> -j <min(clients,$THREADS)> -T $SECONDS_PER_RUN [-K hot]"
  echo "$HANDOFF_CMD" | sed "s/port=$PGPORT/port=<port>/"
  echo '```'
  echo
  echo "| workload | how one cycle is issued |"
  echo "|---|---|"
  for spec in "${UNCONTENDED[@]}" "${HOT[@]}"; do
    n=$(field "$spec" 1); selected "$n" || continue
    if [ "$(field "$spec" 2)" = pgbench ]; then
      echo "| $n | \`scripts/$(field "$spec" 3)\`$([ "$(field "$spec" 5)" = - ] || echo ", PGOPTIONS \`$(field "$spec" 5)\`"): $(field "$spec" 6) |"
    else
      echo "| $n | \`redis_lease $([ "$(field "$spec" 3)" = - ] || field "$spec" 3)\`: $(field "$spec" 6) |"
    fi
  done
  echo
  echo "**Redis client.** No Python Redis client is available here, so the Redis side is \`bench/redis_lease.c\`"
  echo "(hiredis), not redis-benchmark: a closed loop in which each client owns one connection and has exactly one"
  echo "request in flight: \`SET k<random 1..100000> o<client> NX PX 30000\`; when the reply is OK it sends"
  echo "\`EVAL \"if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end\" 1 <key> <owner>\`"
  echo "(the full script text every time, not EVALSHA) and counts a cycle when that returns 1. Clients are spread over"
  echo "$THREADS threads that multiplex their connections with poll(), as pgbench -j $THREADS does; so both sides get the same"
  echo "number of client threads. Redis cycles/s counts only successful SET + successful delete pairs."
  echo
  echo "**What a cycle is.** For pgbench workloads a cycle is one pgbench transaction (the try statement plus the release"
  echo "statement, two round trips; three for BEGIN/try/COMMIT). The uncontended keys are random in 1..100,000, so now and"
  echo "then two clients pick the same key and the try fails; at 32 clients that is at most 31 in 100,000 tries (0.03 %)."
  echo "Measured: see the failed-try check below the table."
  echo
  echo "## Uncontended cycles/s (median of $REPEATS; min-max in brackets)"
  echo
  printf '| workload |'; for c in $CLIENTS; do printf ' %s client%s |' "$c" "$(plural "$c")"; done; echo
  printf '|---|'; for _ in $CLIENTS; do printf -- '---:|'; done; echo
  for n in "${UNAMES[@]}"; do
    printf '| %s |' "$n"
    for c in $CLIENTS; do
      printf ' **%s** (%s-%s)%s |' "$(fmt "$(median uncontended "$n" "$c" tps)")" \
        "$(fmt "$(stat min uncontended "$n" "$c" tps)")" "$(fmt "$(stat max uncontended "$n" "$c" tps)")" \
        "$(busy_mark uncontended "$n" "$c")"
    done
    echo
  done
  echo
  echo "![cycles/s against clients](cycles.png)"
  echo
  echo "Failed-try check (tries that found the key held by another client, counted as cycles above):"
  echo
  for n in "${UNAMES[@]}"; do
    for c in $CLIENTS; do
      p=$(median uncontended "$n" "$c" processed)
      case "$n" in
        dlock*) g=$(median uncontended "$n" "$c" dlock_grants)
                [ "$g" = NaN ] || echo "- $n, $c client$(plural "$c"): $(fmt "$g") grants counted by dlock_stats for $(fmt "$p") tries (medians over the repeats): $(awk -v g="$g" -v p="$p" 'BEGIN { printf "%.3f", (p > 0 ? 100 * (p - g) / p : 0) }') % failed" ;;
        advisory) w=$(median uncontended "$n" "$c" client_warnings)
                  echo "- $n, $c client$(plural "$c"): $w unlock warnings (\"you don't own a lock\") for $(fmt "$p") tries (medians over the repeats)" ;;
        redis) g=$(median uncontended "$n" "$c" grants)
               echo "- $n, $c client$(plural "$c"): $(fmt "$g") cycles for $(fmt "$p") tries (medians over the repeats): $(awk -v g="$g" -v p="$p" 'BEGIN { printf "%.3f", (p > 0 ? 100 * (p - g) / p : 0) }') % failed" ;;
      esac
    done
  done
  echo "- the other workloads use the same key distribution and are not counted separately."
  echo
  echo "† = at least one repeat of this point ran while other processes used more than $QUIET_CORES cores (see \"Other load\")."
  echo
  echo "## Ratios (median of the per-repeat ratios; their range in brackets)"
  echo
  for d in "${DLOCK_NAMES[@]}"; do
    printf '| %s ÷ |' "$d"; for c in $CLIENTS; do printf ' %s client%s |' "$c" "$(plural "$c")"; done; echo
    printf '|---|'; for _ in $CLIENTS; do printf -- '---:|'; done; echo
    for b in "${BASE_NAMES[@]}"; do
      printf '| %s |' "$b"
      for c in $CLIENTS; do printf ' %s |' "$(paired_ratio "$d" "$b" "$c")"; done
      echo
    done
    echo
  done
  echo "A ratio above 1 means dlock completes more cycles per second than that workload. Like for like: dlock_durable,"
  echo "dlock_durable_rows and dlock_durable_flush against lease_logged (all keep a lease through a crash or make the restart"
  echo "wait until it has ended; lease_logged, dlock_durable_flush and dlock_durable_rows write a row at the grant and delete it"
  echo "at the release; dlock_durable, the default, writes none for a lease released before its first renewal, and with"
  echo "dlock.flush_grants off a crash restart begins the crash grace, see \"Unavailability after a crash\"; with it on, a"
  echo "grant returns only once flushed, as the table's INSERT; dlock's release never waits for its flush, the table's DELETE"
  echo "does); dlock_mem against advisory locks, lease_unlogged and this Redis (none of which keeps a lock through a crash)."
  echo
  goal_rows=()
  for g in "${GOALS[@]}"; do
    selected "$(field "$g" 1)" && selected "$(field "$g" 2)" && goal_rows+=("$g")
  done
  if [ "${#goal_rows[@]}" -gt 0 ]; then
    echo "### Ratios against their targets"
    echo
    printf '| ratio | target |'; for c in $CLIENTS; do printf ' %s client%s |' "$c" "$(plural "$c")"; done; echo " |"
    printf '|---|---:|'; for _ in $CLIENTS; do printf -- '---:|'; done; echo "---|"
    for g in "${goal_rows[@]}"; do
      a=$(field "$g" 1); b=$(field "$g" 2); t=$(field "$g" 3)
      printf '| %s ÷ %s | %s |' "$a" "$b" "$([ "$t" = - ] && echo - || echo "≥ $t")"
      for c in $CLIENTS; do
        r=$(paired_ratio "$a" "$b" "$c")
        # met when the median of the per-repeat ratios reaches the target
        m=$(echo "$r" | awk -v t="$t" '{ sub(/×.*/, "", $1) } t != "-" && $1 != "n/a" { print ($1 + 0 >= t ? " (met)" : " (**not met**)") }')
        printf ' %s%s |' "$r" "$m"
      done
      echo " $(field "$g" 4) |"
    done
    echo
    echo "Every run here follows the smoke test, which runs the events workloads: so the runs with events off ran on"
    echo "a server where some leases had had events (dlock's flag \"events in use\" is set until a restart), the slower"
    echo "of the two ways events off can run (see docs/benchmarks.md)."
    echo
  fi
  echo "### WAL flushes and WAL bytes per cycle"
  echo
  echo "From pg_stat_wal, reset before each run (after its CHECKPOINT) and read once the run's backends have exited;"
  echo "per cycle = run total ÷ pgbench transactions, median over the repeats. Everything else on the server in that"
  echo "window counts too (autovacuum, dlock's worker and sweepers). Fewer than 2 flushes per cycle means group commit."
  echo "\"ms each\" is the mean time of one WAL flush (wal_sync_time ÷ wal_sync, track_wal_io_timing = on): the disk's"
  echo "fsync latency as this run saw it, which other processes' disk traffic can raise far more than they raise CPU load."
  echo
  printf '| workload |'; for c in $CLIENTS; do printf ' %s client%s |' "$c" "$(plural "$c")"; done; echo
  printf '|---|'; for _ in $CLIENTS; do printf -- '---:|'; done; echo
  for n in "${UNAMES[@]}"; do
    [ "$(field "$(spec_of "$n")" 2)" = pgbench ] || continue
    printf '| %s |' "$n"
    for c in $CLIENTS; do
      for rep in $(seq "$REPEATS"); do
        awk -F'\t' -v n="$n" -v c="$c" -v r="$rep" '$1 == "uncontended" && $2 == n && $3 == c && $4 == r { v[$5] = $6 }
          END { if (v["processed"] > 0 && v["wal_syncs"] != "") {
                  printf "uncontended\t%s\t%s\t%s\twal_syncs_per_cycle\t%.3f\n", n, c, r, v["wal_syncs"] / v["processed"];
                  printf "uncontended\t%s\t%s\t%s\twal_bytes_per_cycle\t%.1f\n", n, c, r, v["wal_bytes"] / v["processed"] } }' "$RAW" >>"$RAW.derived"
      done
      cat "$RAW.derived" >>"$RAW"; : >"$RAW.derived"
      printf ' %s flushes, %s B%s |' "$(awk -v x="$(median uncontended "$n" "$c" wal_syncs_per_cycle)" 'BEGIN { if (x == "NaN") print "n/a"; else printf "%.2f", x }')" \
        "$(fmt "$(median uncontended "$n" "$c" wal_bytes_per_cycle)")" \
        "$(awk -v x="$(median uncontended "$n" "$c" wal_sync_ms_each)" -v f="$(median uncontended "$n" "$c" wal_syncs_per_cycle)" 'BEGIN { if (x != "NaN" && f >= 0.01) printf ", %.2f ms each", x }')"
    done
    echo
  done
  echo
  if [ "${#HNAMES[@]}" -gt 0 ]; then
    echo "## Hot key: $HOT_CLIENTS clients on one name (median of $REPEATS)"
    echo
    echo "Each client loops: try the one name; if granted, release it at once. tries/s = pgbench transactions/s (for"
    echo "Redis, SET NX replies/s); grants are counted by executions of the release statement (pg_stat_statements calls;"
    echo "Redis: SET replies that were OK). Latency is per pgbench transaction (one try, plus the release when granted),"
    echo "from the pgbench -l per-transaction log: percentiles over all transactions of a run, then the median over runs."
    echo "Per-transaction logging costs the pgbench threads some CPU, on the same cores, in these runs only."
    echo
    echo "| workload | tries/s | grants/s | failed tries | txn latency p50 | txn latency p99 |"
    echo "|---|---:|---:|---:|---:|---:|"
    for n in "${HNAMES[@]}"; do
      t=$(median hot "$n" "$HOT_CLIENTS" tps)
      # grants/s and failure rate per run, then the median over runs
      for rep in $(seq "$REPEATS"); do
        awk -F'\t' -v n="$n" -v r="$rep" '$1 == "hot" && $2 == n && $4 == r { v[$5] = $6 }
          END { if (v["processed"] > 0) {
                  printf "hot\t%s\t%s\t%s\tgrants_per_s\t%.1f\n", n, "'"$HOT_CLIENTS"'", r, v["tps"] * v["grants"] / v["processed"];
                  printf "hot\t%s\t%s\t%s\tfail_pct\t%.2f\n", n, "'"$HOT_CLIENTS"'", r, 100 * (1 - v["grants"] / v["processed"]) } }' "$RAW" >>"$RAW.derived"
      done
      cat "$RAW.derived" >>"$RAW"; : >"$RAW.derived"
      gps=$(median hot "$n" "$HOT_CLIENTS" grants_per_s)
      fp=$(awk -v x="$(median hot "$n" "$HOT_CLIENTS" fail_pct)" 'BEGIN { if (x == "NaN") print "n/a"; else printf "%.1f\n", x }')
      p50=$(median hot "$n" "$HOT_CLIENTS" lat_p50_us)
      p99=$(median hot "$n" "$HOT_CLIENTS" lat_p99_us)
      us() { awk -v x="$1" 'BEGIN { if (x == "NaN") print "n/a"; else if (x >= 1000) printf "%.2f ms\n", x / 1000; else printf "%.0f µs\n", x }'; }
      echo "| $n$(busy_mark hot "$n" "$HOT_CLIENTS") | $(fmt "$t") | $(fmt "$gps") | $fp % | $(us "$p50") | $(us "$p99") |"
    done
    echo
    for d in "${HNAMES[@]}"; do
      case "$d" in hot_dlock*) ;; *) continue ;; esac
      for b in "${HNAMES[@]}"; do
        case "$b" in hot_dlock*) continue ;; esac
        echo "- $d ÷ $b: tries/s $(ratio "$(median hot "$d" "$HOT_CLIENTS" tps)" "$(median hot "$b" "$HOT_CLIENTS" tps)"),"\
          "grants/s $(ratio "$(median hot "$d" "$HOT_CLIENTS" grants_per_s)" "$(median hot "$b" "$HOT_CLIENTS" grants_per_s)"),"\
          "failed tries $(median hot "$d" "$HOT_CLIENTS" fail_pct) % vs $(median hot "$b" "$HOT_CLIENTS" fail_pct) %,"\
          "p99 latency $(ratio "$(median hot "$d" "$HOT_CLIENTS" lat_p99_us)" "$(median hot "$b" "$HOT_CLIENTS" lat_p99_us)")"
      done
    done
    echo
  fi
  echo "## Handoff latency (release to the blocked waiter owning the lock)"
  echo
  if [ -s "$TMP/out/handoff.txt" ]; then
    echo "\`bench/handoff.c\` (libpq, prepared statements). Connections A and B take turns: the holder holds the lock; the"
    echo "other sends a blocking acquire with PQsendQueryPrepared (\`dlock_acquire('bench_handoff', '60 s', '30 s', owner)\` after"
    echo "\`SET dlock.durable = off\` (dlock_mem) or \`on\` (dlock_durable),"
    echo "or \`pg_advisory_lock(424242)\`); a third connection polls until that backend is really queued (\`dlock_waiters\`,"
    echo "or \`pg_locks\` with \`granted = false\`); then the clock (CLOCK_MONOTONIC, in the client) starts just before the"
    echo "holder's release (\`dlock_release\` / \`pg_advisory_unlock\`) is sent and stops when the waiter's complete result"
    echo "has been read from its socket (the client poll()s both sockets). So a handoff includes: the release's trip to"
    echo "the server and its execution, the wakeup and grant in the waiting backend, and the grant's trip back to the"
    echo "client. It does not wait for the releaser's own reply (shown separately). $HANDOFF_ITERS measured handoffs per kind, all kinds"
    echo "on the same cluster and connections and interleaved: 10 rounds, each with a block of every kind in an order that"
    echo "rotates from round to round, each block starting with 5 unmeasured warm-up handoffs. Microseconds:"
    echo
    echo "| lock | n | p50 | p90 | p99 | max | mean | releaser's own reply, p50 |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for m in ${HANDOFF_MODES//,/ }; do
      echo "| $m | $(handoff_val $m n) | $(handoff_val $m p50) | $(handoff_val $m p90) | $(handoff_val $m p99) | $(handoff_val $m max) | $(handoff_val $m mean) | $(handoff_val $m release_rtt_p50) |"
    done
    echo
    echo "For scale, a prepared \`SELECT 1\` round trip on the same connection: p50 $(handoff_val select1_rtt p50) µs, p99 $(handoff_val select1_rtt p99) µs."
    for m in ${HANDOFF_MODES//,/ }; do
      case "$m" in dlock*) echo "$m ÷ advisory: p50 $(ratio "$(handoff_val "$m" p50)" "$(handoff_val advisory p50)"), p99 $(ratio "$(handoff_val "$m" p99)" "$(handoff_val advisory p99)")." ;; esac
    done
  else
    echo "handoff did not run; see the notes below."
  fi
  echo
  echo "## Change events: delay from commit to listener"
  echo
  echo "\`bench/event_delay.c\` (libpq): one connection LISTENs on \`dlock\`, another (events on, memory-only) takes and"
  echo "releases \`bench_event_delay\` in turn, each call committing on its own; an event's delay runs from the moment its"
  echo "call's result was read (the change had committed) to the moment the listener has read the event, skipping the"
  echo "events of other names. Idle, then while pgbench clients cycle memory-only leases with events (dlock_mem_events's"
  echo "load, every one of its events sent to the same listener). Microseconds:"
  echo
  echo "| load | n | p50 | p90 | p99 | max | mean |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for c in $EVENT_DELAY_LOADS; do
    f="$TMP/out/event_delay.c$c.txt"
    [ -s "$f" ] || continue
    kvf() { tr ' ' '\n' <"$f" | sed -n "s/^$1=//p"; }
    echo "| $([ "$c" = 0 ] && echo idle || echo "$c clients cycling") | $(kvf n) | $(kvf p50) | $(kvf p90) | $(kvf p99) | $(kvf max) | $(kvf mean) |"
  done
  echo
  if [ -s "$SCALE_MD" ]; then cat "$SCALE_MD"; fi
  if [ -s "$CRASH_MD" ]; then echo; cat "$CRASH_MD"; echo; fi
  echo "## Other load on the machine"
  echo
  echo "Other sessions may run on the same 2 cores (this repository's own test suite, for one). Before every run the script"
  echo "waits (at most ${QUIET_MAX} s per run, ${QUIET_BUDGET} s in all; waited ${QUIET_WAITED} s this time) until processes other than its own use"
  echo "at most $QUIET_CORES cores, and during every run it measures the CPU used by other processes: busy time from /proc/stat"
  echo "(steal included) minus the CPU time of this cluster's processes, redis-server, pgbench and redis_lease."
  echo "A run during which other processes used more than $QUIET_CORES cores is run again afterwards (worst first, for at most"
  echo "$RETRY_BUDGET s; $RETRIES retried this time) and the attempt with less outside load is kept; both are listed under Notes."
  echo "The figures below are for the kept runs."
  awk -F'\t' -v q="$QUIET_CORES" '($1 == "uncontended" || $1 == "hot") && $5 == "foreign_cores" { n++; v[n] = $6 + 0; if ($6 + 0 > q) { busy++; list = list sprintf("\n- %s c=%s, repeat %s: %.2f cores", $2, $3, $4, $6) } }
    END { if (n == 0) exit; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
          printf "Over the %d runs, other processes used a median of %.2f cores and at most %.2f cores (of %d).", n, v[int((n + 1) / 2)], v[n], "'"$(nproc)"'";
          if (busy) printf " Runs above %s cores (marked † in the tables):\n%s", q, list; else printf " No run exceeded %s cores.", q; print "" }' "$RAW"
  echo
  awk -F'\t' '($1 == "uncontended" || $1 == "hot") && $5 == "wal_sync_ms_each" { n++; v[n] = $6 + 0; w[n] = sprintf("%s c=%s repeat %s", $2, $3, $4) }
    END { if (n == 0) exit; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t; t = w[i]; w[i] = w[j]; w[j] = t }
          printf "Disk: the mean WAL flush took %.2f ms in the fastest run, %.2f ms in the median run and %.2f ms in the slowest (%s),\n", v[1], v[int((n + 1) / 2)], v[n], w[n];
          print "over the runs that flushed WAL. Slow flushes with little CPU load point at other processes'"'"' disk traffic." }' "$RAW"
  echo
  echo "## Notes from this run"
  echo
  if [ -s "$ISSUES" ]; then sed 's/^/- /' "$ISSUES"; else echo "- no pgbench errors, failed transactions, failed Redis releases or leftover dlock leases."; fi
  echo
  echo "dlock's table \`dlock_leases\` at the end: $DLOCK_TABLE."
  echo
  echo "Server log: checkpoints started: $CHECKPOINTS (\"immediate force wait\" are the script's own CHECKPOINTs before each run)."
  echo "WARNING/ERROR/FATAL/PANIC lines by kind (numbers replaced by N):"
  echo
  echo '```'
  if [ -n "$SERVER_LOG_SUMMARY" ]; then echo "$SERVER_LOG_SUMMARY"; else echo "(none)"; fi
  echo '```'
  echo
  rw=$(grep ' # ' "$TMP/redis.log" | grep -vE 'oO0OoO0OoO0Oo|Redis version=|Configuration loaded|Server initialized|ready to accept|User requested shutdown|Redis is now ready to exit|Saving the final RDB' | sed 's/^[^#]*# //' | sort | uniq -c || true)
  echo "Redis log warnings apart from the startup banner: ${rw:-none}"
} >"$REPORT"

mkdir -p "$OUT"
cp "$REPORT" "$OUT/RESULTS.md"
cp "$TMP/out/cycles.png" "$OUT/cycles.png"
cp "$RAW" "$TMP/out/results.final.tsv"
log "done in ${RUNTIME}s: $OUT/RESULTS.md, $OUT/cycles.png"
