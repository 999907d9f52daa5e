#!/usr/bin/env bash
# tools/demo.sh (`make demo`): build and install dlock, start a throwaway
# cluster in .demo/ (unix socket only, port 55432), and walk through a short
# scenario with two concurrent psql sessions, A (host-a) and B (host-b):
#
#   1. A takes 'nightly-report' with dlock_try and gets a fencing token;
#   2. B's dlock_try gets NULL;
#   3. B blocks in dlock_acquire; dlock_waiters and dlock_locks show it;
#   4. A releases; B's dlock_acquire returns with a larger token;
#   5. A takes 'cache-rebuild' with a 2-second lease and crashes; B's
#      dlock_acquire is granted right after the lease expires.
#
# Every result is checked; the script exits non-zero if one is wrong.  The
# cluster is left running; the last lines say how to connect and stop it.
#
# Environment: PG_CONFIG, DLOCK_DEMO_PORT (55432), DLOCK_SKIP_SETUP=1,
# DLOCK_DEMO_INSTALLED=1: use the dlock installed already (the Debian
# package, say) as it is: no tools/setup.sh, no build, no make install.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

# PG_CONFIG: PostgreSQL 15's unless set
# shellcheck source=test/lib.sh
source "$top/test/lib.sh"
port=${DLOCK_DEMO_PORT:-55432}
# English messages and a locale that always exists, whatever the caller's.
export LC_ALL=C.UTF-8 LANG=C.UTF-8
unset LANGUAGE

if [[ $(id -u) -eq 0 ]]; then
	as_owner=(runuser -u postgres --)
	owner_prefix="runuser -u postgres -- "
else
	as_owner=()
	owner_prefix=""
fi

if [[ -t 1 ]]; then
	bold=$'\033[1m' cyan=$'\033[36m' red=$'\033[1;31m' plain=$'\033[0m'
else
	bold='' cyan='' red='' plain=''
fi
heading() { printf '\n%s== %s ==%s\n' "$bold" "$*" "$plain"; }
note() { printf '   %s\n' "$*"; }

# ------------------------------------------------------------ build, install
if [[ "${DLOCK_DEMO_INSTALLED:-0}" == 1 ]]; then
	heading "Using the dlock installed in $("$PG_CONFIG" --pkglibdir)"
	for f in "$("$PG_CONFIG" --pkglibdir)/dlock.so" "$("$PG_CONFIG" --sharedir)/extension/dlock.control"; do
		[[ -f "$f" ]] || { echo "demo: DLOCK_DEMO_INSTALLED=1, but $f is missing" >&2; exit 1; }
	done
else
	if [[ "${DLOCK_SKIP_SETUP:-0}" != 1 ]]; then
		bash "$top/tools/setup.sh"
	fi
	heading "Building and installing dlock"
	make -s || { echo "demo: make failed" >&2; exit 1; }
	make -s install >/dev/null || { echo "demo: make install failed (run as root or as a user who can install into $("$PG_CONFIG" --pkglibdir))" >&2; exit 1; }
fi
bindir=$("$PG_CONFIG" --bindir)

# ------------------------------------------------------------ cluster
demo=$top/.demo
if ((${#as_owner[@]})) && ! "${as_owner[@]}" test -x "$top"; then
	demo=${TMPDIR:-/tmp}/dlock-demo-$(echo "$top" | md5sum | cut -c1-8)
	note "postgres cannot reach $top; using $demo instead of .demo/"
fi
data=$demo/data
sock=$demo/sock
# A unix socket path is limited to 107 bytes.
if ((${#sock} + 18 > 107)); then
	sock=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo-sock.XXXXXX")
fi
pg_ctl_stop="${owner_prefix}$bindir/pg_ctl -D $data stop"

if [[ -f "$data/postmaster.pid" ]]; then
	heading "Stopping the previous demo cluster"
	"${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -m fast -w -t 30 stop ||
		note "(pg_ctl stop failed; removing the directory anyway)"
fi
rm -rf "$demo"
mkdir -p "$demo" "$sock"
if ((${#as_owner[@]})); then
	chown -R postgres: "$demo" "$sock"
fi

heading "Creating a throwaway cluster in $data"
"${as_owner[@]}" "$bindir/initdb" -D "$data" -U postgres --auth=trust --no-instructions \
	-E UTF8 --locale=C.UTF-8 >"$demo/initdb.log" 2>&1 ||
	{ cat "$demo/initdb.log" >&2; exit 1; }
"${as_owner[@]}" tee -a "$data/postgresql.conf" >/dev/null <<EOF

# dlock demo
listen_addresses = ''
unix_socket_directories = '$sock'
port = $port
shared_preload_libraries = 'dlock, pg_cron'
cron.database_name = 'postgres'
cron.host = '$sock'
EOF
"${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -l "$demo/server.log" -w -t 60 start >/dev/null ||
	{ tail -n 30 "$demo/server.log" >&2; exit 1; }
note "server running: socket $sock, port $port, log $demo/server.log"

psql=("$bindir/psql" -X -h "$sock" -p "$port" -U postgres -d postgres)
"${psql[@]}" -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION dlock' -c 'CREATE EXTENSION pg_cron'
note "$("${psql[@]}" -At -c "SELECT string_agg(extname || ' ' || extversion, ', ' ORDER BY extname) FROM pg_extension WHERE extname IN ('dlock', 'pg_cron')") installed"

# ------------------------------------------------------------ psql sessions
# Each session is one long-lived psql reading from a FIFO and writing to a
# file; a query is bracketed by \echo markers so its output can be found.
declare -A sess_fd=() sess_pid=()
seq=0

failed() {
	printf '\n%sDEMO FAILED: %s%s\n' "$red" "$*" "$plain" >&2
	echo "server log: $demo/server.log" >&2
	echo "the cluster is still running; stop it with: $pg_ctl_stop" >&2
	exit 1
}

session_start() {
	local name=$1 fd
	rm -f "$demo/$name.in"
	mkfifo "$demo/$name.in"
	PGAPPNAME="session-$name" "${psql[@]}" -q -A -t -v ON_ERROR_STOP=0 \
		<"$demo/$name.in" >"$demo/$name.out" 2>&1 &
	sess_pid[$name]=$!
	disown "$!"		# no job notice when session A is killed
	exec {fd}>"$demo/$name.in"
	sess_fd[$name]=$fd
	printf '%s\n' '\pset null (null)' >&"$fd"
}

session_stop() {
	local name=$1
	local fd=${sess_fd[$name]:-}
	if [[ -n "$fd" ]]; then
		exec {fd}>&- 2>/dev/null || true
		unset "sess_fd[$name]"
	fi
	if [[ -n "${sess_pid[$name]:-}" ]]; then
		local i
		kill "${sess_pid[$name]}" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			kill -0 "${sess_pid[$name]}" 2>/dev/null || break
			sleep 0.02
		done
		unset "sess_pid[$name]"
	fi
}

cleanup_sessions() {
	local name
	for name in "${!sess_pid[@]}"; do
		session_stop "$name"
	done
	rm -f "$demo"/*.in
}
trap cleanup_sessions EXIT
trap 'echo; echo "interrupted; the cluster is still running; stop it with: $pg_ctl_stop" >&2; exit 130' INT TERM

# send <session> <sql> [aligned]: starts a query, prints its id, does not wait
send() {
	local name=$1 sql=$2 aligned=${3:-} fd=${sess_fd[$1]}
	seq=$((seq + 1))
	{
		printf '\\echo __BEGIN_%d__\n' "$seq"
		[[ -n "$aligned" ]] && printf '%s\n' '\pset format aligned' '\pset tuples_only off'
		printf '%s\n' "${sql%;};"
		[[ -n "$aligned" ]] && printf '%s\n' '\pset format unaligned' '\pset tuples_only on'
		printf '\\echo __END_%d__\n' "$seq"
	} >&"$fd"
	last_id=$seq
}

done_yet() { grep -q "^__END_$2__\$" "$demo/$1.out"; }

# result <session> <id> [timeout s]: waits for that query and prints its output
result() {
	local name=$1 id=$2 timeout=${3:-10} i
	for ((i = 0; i < timeout * 50; i++)); do
		done_yet "$name" "$id" && break
		if ! kill -0 "${sess_pid[$name]}" 2>/dev/null; then
			failed "session $name exited; its output: $(cat "$demo/$name.out")"
		fi
		sleep 0.02
	done
	done_yet "$name" "$id" || failed "session $name: no answer within $timeout s"
	sed -n "/^__BEGIN_${id}__\$/,/^__END_${id}__\$/p" "$demo/$name.out" | sed '1d;$d'
}

# run <session> <sql> [aligned]: prints the statement, runs it, sets $out
run() {
	local name=$1 sql=$2
	printf "${cyan}%s>${plain} %s\n" "$name" "$sql"
	send "$name" "$sql" "${3:-}"
	out=$(result "$name" "$last_id")
	if [[ -n "${3:-}" ]]; then
		printf '%s\n' "$out" | sed 's/^/      /'
	else
		printf '      -> %s\n' "$out"
	fi
	if grep -q 'ERROR:' <<<"$out"; then
		failed "$name: $sql"
	fi
}

is_int() { [[ "$1" =~ ^[0-9]+$ ]]; }

session_start A
session_start B
send A 'SELECT pg_backend_pid()'; pid_a=$(result A "$last_id")
send B 'SELECT pg_backend_pid()'; pid_b=$(result B "$last_id")
note "session A = host-a (backend pid $pid_a), session B = host-b (backend pid $pid_b)"

# ------------------------------------------------------------ 1, 2
heading "1. host-a takes the lock 'nightly-report' (30 s lease)"
run A "SELECT dlock_try('nightly-report', '30 seconds', 'host-a') AS token;"
token_a=$out
is_int "$token_a" || failed "host-a got no token: '$token_a'"
note "host-a holds 'nightly-report' with fencing token $token_a"

heading "2. host-b tries the same lock without waiting"
run B "SELECT dlock_try('nightly-report', '30 seconds', 'host-b') AS token;"
[[ "$out" == "(null)" ]] || failed "host-b's dlock_try should return NULL, got '$out'"
note "NULL: the lock is taken, host-b did not get it"

# ------------------------------------------------------------ 3
heading "3. host-b waits for it (dlock_acquire, timeout 10 s) in the background"
acq_sql="SELECT dlock_acquire('nightly-report', '30 seconds', '10 seconds', 'host-b') AS token;"
printf "${cyan}%s>${plain} %s\n" B "$acq_sql"
send B "$acq_sql"
acq_id=$last_id
note "(no answer yet: session B is blocked)"
for ((i = 0; i < 250; i++)); do
	send A "SELECT count(*) FROM dlock_waiters WHERE name = 'nightly-report';"
	[[ "$(result A "$last_id")" == 1 ]] && break
	sleep 0.02
done
((i < 250)) || failed "host-b never showed up in dlock_waiters"
run A "SELECT pid, name, owner, queue_position, waiting_since, deadline FROM dlock_waiters;" aligned
grep -q "host-b" <<<"$out" || failed "dlock_waiters does not show host-b"
run A "SELECT name, owner, token, expires_at, waiters FROM dlock_locks;" aligned
done_yet B "$acq_id" && failed "host-b's dlock_acquire returned while host-a still holds the lock"

# ------------------------------------------------------------ 4
heading "4. host-a releases; the lock is handed to host-b"
run A "SELECT dlock_release('nightly-report', 'host-a') AS released;"
[[ "$out" == t ]] || failed "host-a's release returned '$out'"
token_b=$(result B "$acq_id" 10)
printf "${cyan}%s>${plain} (dlock_acquire returns)\n      -> %s\n" B "$token_b"
is_int "$token_b" || failed "host-b's dlock_acquire returned '$token_b'"
((token_b > token_a)) || failed "token after the handoff ($token_b) is not larger than $token_a"
note "host-b now holds 'nightly-report' with token $token_b > $token_a:"
note "a storage system that remembers the largest token seen rejects late writes from host-a."
run A "SELECT name, owner, token, expires_at, waiters FROM dlock_locks;" aligned
grep -q "host-b" <<<"$out" || failed "dlock_locks does not show host-b as the holder"

# ------------------------------------------------------------ 5
heading "5. Lease expiry: host-a takes 'cache-rebuild' for 2 seconds, then crashes"
run A "SELECT dlock_try('cache-rebuild', '2 seconds', 'host-a') AS token;"
token_c=$out
is_int "$token_c" || failed "host-a got no token for cache-rebuild: '$out'"
run A "SELECT name, owner, token, expires_at FROM dlock_locks WHERE name = 'cache-rebuild';" aligned
kill -KILL "${sess_pid[A]}" 2>/dev/null || true
session_stop A
note "host-a crashed (its psql was killed) without releasing; nobody renews the lease."
run B "SELECT dlock_acquire('cache-rebuild', '30 seconds', NULL, 'host-b') AS token, round(extract(epoch FROM clock_timestamp() - statement_timestamp())::numeric, 2) AS waited_s;"
token_d=${out%%|*}
waited=${out##*|}
is_int "$token_d" || failed "host-b's dlock_acquire for cache-rebuild returned '$out'"
((token_d > token_c)) || failed "token after expiry ($token_d) is not larger than $token_c"
awk -v w="$waited" 'BEGIN { exit !(w >= 0.5 && w <= 5) }' ||
	failed "host-b waited $waited s; expected about 2 s (the rest of host-a's lease)"
note "granted to host-b after waiting $waited s, right when host-a's lease ran out,"
note "with a new token $token_d > $token_c."

# ------------------------------------------------------------ 6
heading "6. Fencing: the database rejects a write carrying host-a's stale token"
run B "CREATE TABLE IF NOT EXISTS cache (id int PRIMARY KEY, payload text, fence bigint NOT NULL);"
run B "INSERT INTO cache VALUES (1, 'initial', 0) ON CONFLICT (id) DO UPDATE SET payload = 'initial', fence = 0;"
run B "CREATE OR REPLACE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON cache FOR EACH ROW EXECUTE FUNCTION dlock_fenced('cache-rebuild', 'fence');"
run B "UPDATE cache SET payload = 'rebuilt by host-b', fence = $token_d WHERE id = 1;"
note "host-b wrote with its live token $token_d. Now host-a's late write, after a long pause:"
late_sql="UPDATE cache SET payload = 'late write from host-a', fence = $token_c WHERE id = 1;"
printf "${cyan}%s>${plain} %s\n" B "$late_sql"
send B "$late_sql"
out=$(result B "$last_id")
printf '      -> %s\n' "$out"
grep -q 'stale fencing token' <<<"$out" || failed "the stale write was not rejected: '$out'"
run B "SELECT payload, fence FROM cache;" aligned
grep -q 'rebuilt by host-b' <<<"$out" || failed "the table does not hold host-b's write"
note "rejected (SQLSTATE DL001) in the same transaction as the write: host-b's data stands."

# ------------------------------------------------------------ 7
heading "7. Readers and writers, a semaphore, all or nothing"
run B "SELECT dlock_try('report', '1 minute', 'reader-1', 'shared') IS NOT NULL AS reader_1, dlock_try('report', '1 minute', 'reader-2', 'shared') IS NOT NULL AS reader_2, dlock_try('report', '1 minute', 'writer') IS NULL AS writer_must_wait;" aligned
grep -qE '^ *t +\| +t +\| +t *$' <<<"$out" || failed "shared leases: '$out'"
run B "SELECT count(dlock_try('gpu-pool', '1 minute', 'job-' || i, permits => 2)) AS permits_granted_of_3 FROM generate_series(1, 3) i;"
[[ "$out" == 2 ]] || failed "semaphore of 2 granted $out of 3"
run B "SELECT dlock_try_all(ARRAY['train', 'station-a', 'station-b'], '1 minute', 'dispatcher') IS NOT NULL AS got_all_three;"
[[ "$out" == t ]] || failed "multi-lock: '$out'"
run B "SELECT name, owner, mode, permits FROM dlock_locks WHERE name IN ('report', 'gpu-pool', 'train', 'station-a') ORDER BY name, token;" aligned
note "two readers share 'report' while the writer is refused; 'gpu-pool' lets two jobs in, not three;"
note "the dispatcher holds the train and both stations, or would hold none of them."

# ------------------------------------------------------------ 8
heading "8. What dlock counted"
run B "SELECT grants, immediate_grants, waits, releases, expired_by_worker + expired_by_caller AS expired FROM dlock_stats;" aligned

session_stop B
rm -f "$demo"/*.in "$demo"/*.out

# ------------------------------------------------------------ done
heading "Demo finished: all steps behaved as expected"
cat <<EOF
The demo cluster is still running (dlock and pg_cron installed in database postgres).
  connect: psql -h $sock -p $port -U postgres postgres
  log:     $demo/server.log
  stop:    $pg_ctl_stop
EOF
