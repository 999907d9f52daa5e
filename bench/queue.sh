#!/usr/bin/env bash
# Queued requests at scale (`make bench-queue`, after make install; not part
# of make bench or of the tests; test/suites/queue-scale.sh is its short mode):
#
#   bench/queue.sh [out.md]        (default bench/QUEUE.md)
#
# Starts its own PostgreSQL (as postgres when run as root) and PgBouncer in
# transaction mode (pool of QUEUE_POOL server connections), then runs
# bench/queue.c (see its opening comment for the workload and the checker):
#   1. the scale run: QUEUE_CLIENTS threads (2,000), QUEUE_REQUESTS
#      requests each (5) on QUEUE_NAMES names (100), queued with
#      dlock_enqueue through PgBouncer, each connection through PgBouncer;
#   2. the comparison at QUEUE_CMP_CLIENTS threads (50), QUEUE_CMP_REQUESTS
#      each (20) on QUEUE_CMP_NAMES names (5): the same with dlock_enqueue
#      through PgBouncer, and with a blocked dlock_acquire over direct
#      connections (no pooler: a blocked call holds its server connection),
#      QUEUE_CMP_ACQUIRE_REQUESTS each (400: a run of seconds, as the
#      queued one's);
#   3. shared memory per queued request: pg_shmem_allocations at
#      dlock.max_locks = 16,384 and 116,384.
# Writes the figures to out.md.  Exit status 1 if a checker failed (the
# report says which), 2 on an error.
#
# Environment: PGBIN (default /usr/lib/postgresql/15/bin), QUEUE_CLIENTS,
# QUEUE_REQUESTS, QUEUE_NAMES, QUEUE_POOL, QUEUE_WORK_US (1000: the hold's
# work), QUEUE_POLL_MS ("5 500": a waiter's first sleep and the cap its
# sleeps double up to), QUEUE_CMP_CLIENTS, QUEUE_CMP_REQUESTS,
# QUEUE_CMP_NAMES, QUEUE_CMP_POLL_MS ("5 100"), QUEUE_KEEP=1 (keep the temp
# dir: logs, one line per request).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
OUTMD=${1:-$HERE/QUEUE.md}
CLIENTS=${QUEUE_CLIENTS:-2000}
REQUESTS=${QUEUE_REQUESTS:-5}
NAMES=${QUEUE_NAMES:-100}
POOL=${QUEUE_POOL:-20}
WORK_US=${QUEUE_WORK_US:-1000}
read -r POLL_MIN POLL_MAX <<<"${QUEUE_POLL_MS:-5 500}"
CMP_CLIENTS=${QUEUE_CMP_CLIENTS:-50}
CMP_REQUESTS=${QUEUE_CMP_REQUESTS:-20}
CMP_NAMES=${QUEUE_CMP_NAMES:-5}
CMP_ACQ_REQUESTS=${QUEUE_CMP_ACQUIRE_REQUESTS:-400}
read -r CMP_POLL_MIN CMP_POLL_MAX <<<"${QUEUE_CMP_POLL_MS:-5 100}"
SMALL=16384
BIG=116384
ROLE=dlock_bench
PGBOUNCER=${PGBOUNCER:-$(command -v pgbouncer || echo /usr/sbin/pgbouncer)}

TMP=$(mktemp -d /tmp/dlock-queue.XXXXXX)
chmod 755 "$TMP"
if [ "$(id -u)" = 0 ]; then AS_PG=(runuser -u postgres --); chown postgres "$TMP"; else AS_PG=(); fi
log() { printf '[queue %s] %s\n' "$(date +%T)" "$*" >&2; }

# a client socket each in this process and in PgBouncer, and its server side
need=$((CLIENTS * 2 + 1000))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $need ]; then
  ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge $need ] ||
    { log "open files limit $(ulimit -n), $need needed (ulimit -Hn is $(ulimit -Hn))"; exit 2; }
fi

DATA=$TMP/data
SOCK=$TMP/sock
PORT=55541
BPORT=55542
STARTED=0
BOUNCER=
cleanup() {
  local rc=$?
  stop_bouncer
  stop_pg
  if [ "${QUEUE_KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
stop_bouncer() {
  # PgBouncer itself (BOUNCER is runuser, which would complain of a signal)
  if [ -n "$BOUNCER" ]; then
    kill -TERM "$(cat "$TMP/pgbouncer.pid" 2>/dev/null || echo "$BOUNCER")" 2>/dev/null || true
    wait "$BOUNCER" 2>/dev/null || true
    BOUNCER=
  fi
}
stop_pg() {
  if [ "$STARTED" = 1 ]; then
    "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
    STARTED=0
  fi
}
start_pg() {  # max_locks
  sed -i '/^dlock.max_locks/d' "$DATA/postgresql.conf"
  echo "dlock.max_locks = $1" >>"$DATA/postgresql.conf"
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$TMP/pg.log" -w start >/dev/null
  STARTED=1
}
PSQL() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres -d postgres "$@"; }

make -s -C "$HERE" BUILD="$TMP" PG_CONFIG="$PGBIN/pg_config" "$TMP/queue" >/dev/null

"${AS_PG[@]}" mkdir -p "$SOCK"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust --no-instructions \
  -E UTF8 --locale=C.UTF-8 >"$TMP/initdb.log" 2>&1
cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = ''
port = $PORT
unix_socket_directories = '$SOCK'
shared_preload_libraries = 'dlock'
# the pool, the direct clients of the comparison, the sampler, psql
max_connections = $((POOL + CMP_CLIENTS + 30))
EOF

# 3. shared memory: the whole server's and the queued requests' slots
shmem() { PSQL -F ' ' -c "SELECT sum(allocated_size), sum(allocated_size) FILTER (WHERE name = 'dlock waiters') FROM pg_shmem_allocations"; }
start_pg $SMALL
PSQL -c "CREATE EXTENSION dlock"
read -r S_SMALL W_SMALL < <(shmem)
stop_pg
start_pg $BIG
read -r S_BIG W_BIG < <(shmem)
stop_pg
PER_ENTRY=$(awk -v a="$S_SMALL" -v b="$S_BIG" -v n=$((BIG - SMALL)) 'BEGIN { printf "%.0f", (b - a) / n }')
PER_SLOT=$(awk -v a="$W_SMALL" -v b="$W_BIG" -v n=$((BIG - SMALL)) 'BEGIN { printf "%.0f", (b - a) / n }')
log "shared memory: $PER_ENTRY B per dlock.max_locks entry, of which $PER_SLOT B its queued request slot"

start_pg $SMALL
PSQL -c "CREATE ROLE $ROLE LOGIN"

printf '"%s" ""\n' "$ROLE" >"$TMP/userlist.txt"
cat >"$TMP/pgbouncer.ini" <<INI
[databases]
app = dbname=postgres host=$SOCK port=$PORT pool_size=$POOL
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BPORT
listen_backlog = 4096
unix_socket_dir =
auth_type = trust
auth_file = $TMP/userlist.txt
pool_mode = transaction
default_pool_size = $POOL
max_client_conn = $((CLIENTS + 100))
server_round_robin = 0
query_wait_timeout = 120
logfile = $TMP/pgbouncer.log
pidfile = $TMP/pgbouncer.pid
INI
chmod 644 "$TMP/userlist.txt" "$TMP/pgbouncer.ini"
# runuser's PAM session lowers the open files limit again: raise it inside
"${AS_PG[@]}" bash -c 'ulimit -n "$1" && exec "$2" -q "$3"' pgbouncer "$(ulimit -n)" "$PGBOUNCER" "$TMP/pgbouncer.ini" &
BOUNCER=$!
for _ in $(seq 100); do
  "$PGBIN/psql" -X -q -h 127.0.0.1 -p $BPORT -U $ROLE -d app -c 'SELECT 1' >/dev/null 2>&1 && break
  kill -0 "$BOUNCER" 2>/dev/null || { log "pgbouncer exited: $(tail -3 "$TMP/pgbouncer.log")"; exit 2; }
  sleep 0.1
done

VIA_BOUNCER="host=127.0.0.1 port=$BPORT dbname=app user=$ROLE connect_timeout=60"
DIRECT="host=$SOCK port=$PORT dbname=postgres user=$ROLE"
ADMIN="host=$SOCK port=$PORT dbname=postgres user=postgres"
CHECKS_FAILED=0
run() {  # label, then queue.c's arguments
  local label=$1 rc=0
  shift
  log "$label: queue $*"
  "$TMP/queue" -a "$ADMIN" -U $ROLE -w "$WORK_US" -l "$TMP/$label.requests" "$@" \
    >"$TMP/$label.out" 2>"$TMP/$label.err" || rc=$?
  cat "$TMP/$label.out" >&2
  [ $rc -le 1 ] || { log "$label: queue exited $rc: $(tail -3 "$TMP/$label.err")"; exit 2; }
  [ $rc = 0 ] || CHECKS_FAILED=1
}
val() {  # label line-key field: a field's value on the output line starting with line-key
  awk -v k="$2" -v f="$3" '$1 ~ "^"k { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) print kv[2] } }' "$TMP/$1.out"
}

# 1. the scale run
run scale -m queue -d "$VIA_BOUNCER" -S "$POOL" -c "$CLIENTS" -r "$REQUESTS" -n "$NAMES" \
  -p "$POLL_MIN" -P "$POLL_MAX" -h 60 -t 300
# 2. the comparison, the same clients both ways
run cmp_queue -m queue -d "$VIA_BOUNCER" -S "$POOL" -c "$CMP_CLIENTS" -r "$CMP_REQUESTS" \
  -n "$CMP_NAMES" -p "$CMP_POLL_MIN" -P "$CMP_POLL_MAX" -h 60 -t 300
# (without PgBouncer's idle server connections of the role)
stop_bouncer
run cmp_acquire -m acquire -d "$DIRECT" -c "$CMP_CLIENTS" -r "$CMP_ACQ_REQUESTS" -n "$CMP_NAMES" -t 300
stop_pg

checks() {  # label: the checker's verdict
  if grep -qx 'check ok' "$TMP/$1.out"; then echo "all checks passed"
  else echo "**checker FAILED**: $(grep '^check FAILED' "$TMP/$1.out" | head -3 | sed 's/^check FAILED: //' | paste -sd ';')"; fi
}
row() {  # label description
  echo "| $2 | $(val "$1" run_s run_s) | $(val "$1" grants grants_per_s) | $(val "$1" grants handoffs) | $(val "$1" grants handoffs_per_s) |" \
       "$(val "$1" handoff_from_send p50) / $(val "$1" handoff_from_send p99) | $(val "$1" handoff_from_return p50) / $(val "$1" handoff_from_return p99) |" \
       "$(val "$1" run_s polls_per_s) | $(val "$1" samples max_role_server_conns) | $(val "$1" samples max_role_dlock_waits) |"
}
{
  echo "# Queued requests at scale"
  echo
  echo "Written by \`bench/queue.sh\` (\`make bench-queue\`) on $(date -u +%Y-%m-%d), commit" \
       "\`$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')\`; $(nproc) cores" \
       "($(uname -m)), load average before the run $(cut -d' ' -f1-3 /proc/loadavg) (the cores are shared)."
  echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $3 }'), dlock's defaults" \
       "(\`dlock.durable\` on), $("$PGBOUNCER" --version | head -1) in transaction mode with" \
       "a pool of $POOL server connections. Client: \`bench/queue.c\` (libpq, one thread and one" \
       "connection per client, all in one process, so every time below is from one CLOCK_MONOTONIC)."
  echo
  echo "Each client makes its requests in turn, each on a name picked at random. A request: \`dlock_enqueue\`;"
  echo "while NULL, sleep and ask again (the sleep starts at the first value of *poll* and doubles up to"
  echo "the second, each times a random 0.5 to 1.5); with the token, $WORK_US µs of work, then \`dlock_release\`."
  echo "The blocked row instead calls \`dlock_acquire\` (timeout 300 s) over a direct connection: no pooler,"
  echo "since a blocked call holds its server connection, which is the point of queued requests."
  echo
  echo "A *handoff* is two grants on a name with consecutive tokens where the next one's request was sent"
  echo "before the previous one's release was; its latency is from that release (being sent / having"
  echo "returned to its client) to the next owner's call that returned the token having returned. Rates are"
  echo "over the run, from the first request sent to the last release returned. The clients form a closed"
  echo "loop (a client's next request waits for its last release), so where handoffs are slow most clients"
  echo "sit queued on the busiest names, and the others' requests are often granted at once."
  echo
  echo "| run | seconds | grants/s | handoffs | handoffs/s | handoff ms p50 / p99, from the release sent | from its return | polls/s | server conns of the clients' role (max) | of them in a dlock wait (max) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  row scale "queued: $CLIENTS clients × $REQUESTS on $NAMES names, via PgBouncer, poll ${POLL_MIN}..${POLL_MAX} ms"
  row cmp_queue "queued: $CMP_CLIENTS clients × $CMP_REQUESTS on $CMP_NAMES names, via PgBouncer, poll ${CMP_POLL_MIN}..${CMP_POLL_MAX} ms"
  row cmp_acquire "blocked \`dlock_acquire\`: $CMP_CLIENTS clients × $CMP_ACQ_REQUESTS on $CMP_NAMES names, direct"
  echo
  echo "Reading it: a queued request's handoff is granted on the server in the release's commit, as a"
  echo "blocked one's is, but its owner learns of it only at its next poll; one that has waited a while"
  echo "polls every *cap* × 0.5 to 1.5, so its latency is about half the cap, and the waiters' polls cost"
  echo "the server about (waiters ÷ cap) calls a second (the *polls/s* column). The cap is the knob:"
  echo "latency against poll load. The blocked row needs a server connection per waiter (the"
  echo "last two columns); the queued rows never had a backend of theirs in a dlock wait and never more"
  echo "server connections than PgBouncer's pool."
  echo
  echo "pg_stat_activity was sampled every 50 ms by a separate connection: $(val scale samples samples) samples in the"
  echo "scale run, up to $(val scale samples max_queued) requests queued at once (\`dlock_stats.queued\`); the clients"
  echo "took $(val scale connect_s connect_s) s to connect (not in the run's time)."
  echo
  echo "Checker (\`bench/queue.c\`: every request granted once, tokens growing per name in the order the"
  echo "owners learned them, each owner learning its token after the previous release was sent, FIFO"
  echo "between requests whose first calls did not overlap (a request joins the queue after its first"
  echo "call was sent and before it returned; requests whose first calls overlap have no order a client"
  echo "can see and are not compared), no backend of the clients' role in a dlock wait and no"
  echo "more server connections than the pool, no request dropped for its hold, nothing left at the end):"
  echo
  echo "- scale run: $(checks scale) ($(val scale samples fifo_pairs) request pairs compared for FIFO)"
  echo "- queued, $CMP_CLIENTS clients: $(checks cmp_queue)"
  echo "- blocked, $CMP_CLIENTS clients: $(checks cmp_acquire) (no FIFO or pooler checks: direct connections)"
  echo
  echo "**Shared memory per queued request:** each one takes an entry of \`dlock.max_locks\`, and each entry"
  echo "costs $PER_ENTRY bytes in all, of which $PER_SLOT bytes are the slot a queued request waits in"
  echo "(\`dlock waiters\`, preallocated with each entry). Measured as \`sum(allocated_size)\` of"
  echo "\`pg_shmem_allocations\` (in all / \`dlock waiters\`): $S_SMALL / $W_SMALL bytes at \`dlock.max_locks\` = $SMALL,"
  echo "$S_BIG / $W_BIG bytes at $BIG, the difference over the $((BIG - SMALL)) extra entries."
} >"$OUTMD"
log "wrote $OUTMD"
exit $CHECKS_FAILED
