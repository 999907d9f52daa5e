#!/bin/bash
# Prometheus metrics of dlock through the real exporter: with
# metrics/queries.yaml, Debian's prometheus-postgres-exporter (0.11) exports
# every column of dlock_stats, the counters as counters and the gauges as
# gauges, each named dlock_*, with the values dlock_stats has (read before
# and after the scrape, with nothing moving in between), and the leases and
# waiters of each database (labelled datname) as dlock_locks and
# dlock_waiters count them, and how long the oldest waiter has waited; it
# does so as a role with no privileges of its own, and also with the
# exporter's default metrics on.  metrics/alerts.yaml passes `promtool check
# rules`, its unit tests (metrics/alerts_test.yaml) pass, and every metric it
# names is one the exporter exports.
#
# Starts a throwaway cluster of its own (unix socket only,
# shared_preload_libraries = 'dlock') under test/tmp/metrics.* of the
# checkout (socket in a short private dir in /tmp) with the extension in two
# databases and not in a third, which the exporter is told to leave out;
# makes leases in both, two waiters queued in one of them, and moves every
# counter of dlock_stats to a value of its own.  Then it starts the exporter
# on a free port of 127.0.0.1 from 59187 on, twice (default metrics off,
# then on), and reads /metrics with curl: a few seconds.  Run it as a
# non-root user that can run initdb, after `make install` of dlock:
#
#   runuser -u postgres -- test/suites/metrics.sh
#
# Needs /usr/bin/prometheus-postgres-exporter, promtool (Debian package
# prometheus) and curl; tools/setup.sh installs them.
#
# Environment: PG_CONFIG, DLOCK_TOP (checkout to use; default: this
# script's), DLOCK_LOGDIR (the server log is copied there on failure),
# METRICS_QUERIES and METRICS_ALERTS (the files to test; default
# metrics/queries.yaml and metrics/alerts.yaml of the checkout; point them at
# a broken copy to see the suite fail).
set -euo pipefail

srv_name=metrics
# shellcheck source=test/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
queries=${METRICS_QUERIES:-$here/metrics/queries.yaml}
alerts=${METRICS_ALERTS:-$here/metrics/alerts.yaml}
exporter_bin=/usr/bin/prometheus-postgres-exporter

[ -x "$exporter_bin" ] ||
	{ echo "metrics.sh: $exporter_bin not found (tools/setup.sh installs prometheus-postgres-exporter)" >&2; exit 2; }
for cmd in promtool curl; do
	command -v "$cmd" >/dev/null ||
		{ echo "metrics.sh: $cmd not found (tools/setup.sh installs it)" >&2; exit 2; }
done
[ -r "$queries" ] || { echo "metrics.sh: cannot read $queries" >&2; exit 2; }
[ -r "$alerts" ] || { echo "metrics.sh: cannot read $alerts" >&2; exit 2; }

srv_require
srv_dirs
bg_pids=()			# waiters and exporters
srv_on_exit() {
	local p
	for p in "${bg_pids[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
}
srv_trap
# forget <pid>: a background job that has ended (its pid may be reused)
forget() {
	local p keep=()
	for p in "${bg_pids[@]}"; do
		[ "$p" = "$1" ] || keep+=("$p")
	done
	bg_pids=("${keep[@]}")
}

failures=0
checks=0
fail() {
	echo "metrics.sh: FAILED: $*" >&2
	failures=$((failures + 1))
	checks=$((checks + 1))
}
ok() {
	echo "ok - $*"
	checks=$((checks + 1))
}
# check <description> <command...>: ok if the command succeeds
check() {
	local what=$1
	shift
	if "$@"; then ok "$what"; else fail "$what"; fi
}
# sql <database> <query>: rows unaligned, fields separated by |; at most
# 10 s to connect, 10 s per statement (waiter: 10 minutes)
sql() {
	PGCONNECT_TIMEOUT=10 PGOPTIONS="-c statement_timeout=${statement_timeout:-10s}" \
		"$bindir/psql" -X -q -t -A -v ON_ERROR_STOP=1 -d "$1" -c "$2"
}
waiter() {
	statement_timeout=10min sql "$@"
}
now_ms() {
	date +%s%3N
}
# wait_for <seconds> <description> <database> <query>: until the query
# returns t
wait_for() {
	local deadline=$(($(now_ms) + $1 * 1000))
	until [ "$(sql "$3" "$4")" = t ]; do
		if (($(now_ms) >= deadline)); then
			echo "metrics.sh: FAILED: $2: not after $1 s" >&2
			exit 1
		fi
		sleep 0.05
	done
}

# The dlock_stats columns the queries file must export, and as what:
# counters as dlock_<column>_total, gauges as dlock_<column>.
stat_counters=(grants immediate_grants waits wait_timeouts releases renewals
	expired_by_worker expired_by_sweep expired_by_caller queue_dropped)
stat_gauges=(leases waiting queued)
# Everything the file exports, with its TYPE.
expected_types() {
	local c
	for c in "${stat_counters[@]}"; do
		echo "dlock_${c}_total counter"
	done
	for c in "${stat_gauges[@]}" max_locks max_locks_per_database; do
		echo "dlock_$c gauge"
	done
	for c in leases waiters oldest_wait_seconds; do
		echo "dlock_database_$c gauge"
	done
}
# the exporter's metrics about itself, and Go's
own_metric='^(go_|process_|promhttp_|pg_exporter_|pg_scrape_collector_|pg_up$|postgres_exporter_build_info$)'

# ------------------------------------------------------------- the cluster

srv_initdb
srv_conf 54343 "max_connections = 30" "dlock.max_locks = 500" \
	"dlock.max_locks_per_database = 200" "dlock.worker = off"
srv_start
srv_env
sql postgres "CREATE DATABASE dlock_a" >/dev/null
sql postgres "CREATE DATABASE dlock_b" >/dev/null
sql postgres "CREATE DATABASE no_dlock" >/dev/null
sql postgres "CREATE ROLE metrics_reader LOGIN" >/dev/null
for db in dlock_a dlock_b; do
	sql "$db" "CREATE EXTENSION dlock" >/dev/null
done

# Leases and counters.  Each counter ends at its own value (checked below),
# so that a column exported under another's name shows.
#   dlock_a: a-job (w1), the semaphore a-sem (w1, w2), a-hand (w3, granted
#            after a wait); releases, renewals and waits that time out
#   dlock_b: b-job (w1), b-other (w2); two sessions and nine requests
#            queued on b-job, six requests dropped from b-other's queue
# Expiries, with the worker off: one taken over by a call, three swept;
# then with the worker on, eight that it ends.
sql dlock_a "SELECT dlock_try('a-job', '10 min', 'w1'),
	dlock_try('a-sem', '10 min', 'w1', permits => 2),
	dlock_try('a-sem', '10 min', 'w2', permits => 2)" >/dev/null
sql dlock_a "SELECT dlock_try('a-tmp-' || i, '10 min', 'w1') FROM generate_series(1, 8) i" >/dev/null
sql dlock_a "SELECT dlock_release('a-tmp-' || i, 'w1') FROM generate_series(1, 8) i" >/dev/null
for _ in 1 2 3 4 5; do
	sql dlock_a "SELECT dlock_renew('a-job', '10 min', 'w1')" >/dev/null
done
for _ in 1 2 3 4; do
	[ "$(sql dlock_a "SELECT dlock_acquire('a-job', '10 min', '20 ms', 'w9') IS NULL")" = t ] ||
		{ echo "metrics.sh: FAILED: a wait on a held name was granted" >&2; exit 1; }
done
# a-hand: w3 waits, w1's release hands it over
sql dlock_a "SELECT dlock_try('a-hand', '10 min', 'w1')" >/dev/null
waiter dlock_a "SELECT dlock_acquire('a-hand', '10 min', '60 s', 'w3')" >"$tmp/hand.out" 2>&1 &
hand_pid=$!
bg_pids+=("$hand_pid")
wait_for 10 "w3 queued on a-hand" dlock_a "SELECT count(*) = 1 FROM dlock_waiters WHERE name = 'a-hand'"
sql dlock_a "SELECT dlock_release('a-hand', 'w1')" >/dev/null
wait "$hand_pid" || { cat "$tmp/hand.out" >&2; echo "metrics.sh: FAILED: the handoff of a-hand" >&2; exit 1; }
forget "$hand_pid"
# expiries with the worker off: by a caller's takeover, then by dlock_sweep()
sql dlock_a "SELECT dlock_try('a-late', '10 ms', 'w1')" >/dev/null
sleep 0.05
sql dlock_a "SELECT dlock_try('a-late', '10 min', 'w2')" >/dev/null
sql dlock_a "SELECT dlock_release('a-late', 'w2')" >/dev/null
sql dlock_a "SELECT dlock_try('a-swept-' || i, '10 ms', 'w1') FROM generate_series(1, 3) i" >/dev/null
sleep 0.05
sql dlock_a "SELECT dlock_sweep()" >/dev/null
# then with the worker on, memory-only leases: a durable one would leave a
# row when it ends, and the sweeper that the worker sends for the row could
# end the others first
sql postgres "ALTER SYSTEM SET dlock.worker = on" >/dev/null
sql postgres "SELECT pg_reload_conf()" >/dev/null
sql dlock_b "SET dlock.durable = off;
	SELECT dlock_try('b-exp-' || i, '10 ms', 'w1') FROM generate_series(1, 8) i" >/dev/null
wait_for 20 "the worker ended 8 leases" dlock_b \
	"SELECT expired_by_worker = 8 AND leases = 4 FROM dlock_stats"
sql dlock_b "SELECT dlock_try('b-job', '10 min', 'w1'), dlock_try('b-other', '10 min', 'w2')" >/dev/null
# two waiters on b-job, with a timeout far beyond this test
t_queue=$(now_ms)
for w in w8 w9; do
	waiter dlock_b "SELECT dlock_acquire('b-job', '10 min', '10 min', '$w')" >"$tmp/waiter-$w.out" 2>&1 &
	bg_pids+=($!)
	wait_for 10 "$w queued on b-job" dlock_b "SELECT count(*) = 1 FROM dlock_waiters WHERE owner = '$w'"
done
t_queued=$(now_ms)
# nine requests queued on b-job without a backend (after the waiters: the
# oldest wait stays theirs), and six on b-other whose hold runs out: the
# dequeue of a request b-other never had walks its queue and drops them
sql dlock_b "SELECT dlock_enqueue('b-job', '10 min', 'q' || i, hold => '10 min')
	FROM generate_series(1, 9) i" >/dev/null
sql dlock_b "SELECT dlock_enqueue('b-other', '10 min', 'd' || i, hold => '10 ms')
	FROM generate_series(1, 6) i" >/dev/null
sleep 0.05
sql dlock_b "SELECT dlock_dequeue('b-other', 'nobody')" >/dev/null

# dlock_stats as column|value lines, sorted
stats() {
	sql dlock_a "SELECT key || '|' || value
		FROM json_each_text(row_to_json((SELECT s FROM dlock_stats s))) ORDER BY key"
}
# each database's leases and waiters: datname|leases|waiters
per_db() {
	local db
	for db in dlock_a dlock_b; do
		sql "$db" "SELECT current_database(), (SELECT count(*) FROM dlock_locks),
			(SELECT count(*) FROM dlock_waiters)"
	done
}

# The workload must give every counter a value of its own.
stats >"$tmp/stats.before"
dups=$(grep -v '|0$' "$tmp/stats.before" | cut -d'|' -f2 | sort | uniq -d | tr '\n' ' ' || true)
if [ -n "$dups" ]; then
	cat "$tmp/stats.before" >&2
	echo "metrics.sh: FAILED: dlock_stats columns share the values $dups: change the workload" >&2
	exit 1
fi
zero=$(grep '|0$' "$tmp/stats.before" | cut -d'|' -f1 | tr '\n' ' ' || true)
[ -z "$zero" ] || { cat "$tmp/stats.before" >&2; echo "metrics.sh: FAILED: zero in dlock_stats: $zero" >&2; exit 1; }
per_db >"$tmp/per_db.before"
printf 'dlock_a|4|0\ndlock_b|2|11\n' >"$tmp/per_db.made"
check "leases and waiters per database are those made" cmp -s "$tmp/per_db.made" "$tmp/per_db.before"
# let the oldest waiter's age grow past a second, so that seconds show
sleep 1.2

# ------------------------------------------------------------- the exporter

# start_exporter <log> <flag...>: starts it as metrics_reader, on the first
# port from 59187 on that it can listen on, with DSN database dlock_a and
# dlock_b discovered; sets port and exporter_pid
start_exporter() {
	local log=$1 deadline
	shift
	port=59187
	while ((port < 59200)); do
		DATA_SOURCE_NAME="host=$sock port=$srv_port dbname=dlock_a user=metrics_reader sslmode=disable" \
			"$exporter_bin" --extend.query-path="$queries" \
			--auto-discover-databases --include-databases=dlock_b \
			--web.listen-address="127.0.0.1:$port" "$@" >"$log" 2>&1 &
		exporter_pid=$!
		bg_pids+=("$exporter_pid")
		deadline=$(($(now_ms) + 15000))
		while kill -0 "$exporter_pid" 2>/dev/null; do
			if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/"; then
				return 0
			fi
			(($(now_ms) < deadline)) || break
			sleep 0.1
		done
		kill -KILL "$exporter_pid" 2>/dev/null
		wait "$exporter_pid" 2>/dev/null || true
		forget "$exporter_pid"
		grep -q 'address already in use' "$log" || break
		port=$((port + 1))
	done
	cat "$log" >&2
	echo "metrics.sh: FAILED: the exporter did not serve on 127.0.0.1:$port" >&2
	exit 1
}
stop_exporter() {
	kill "$exporter_pid" 2>/dev/null
	wait "$exporter_pid" 2>/dev/null || true
	forget "$exporter_pid"
}
# scrape <file>: /metrics into the file; false, showing why, unless HTTP 200
scrape() {
	local code
	code=$(curl -sS --max-time 30 -o "$1" -w '%{http_code}' "http://127.0.0.1:$port/metrics") ||
		code="none"
	[ "$code" = 200 ] && return 0
	echo "metrics.sh: GET /metrics: HTTP status $code; the answer begins:" >&2
	head -n 8 "$1" >&2 || true
	return 1
}

# the value of the one sample of $1 (the name) whose labels hold $2
# (e.g. datname="dlock_a"), from the scrape in $3; false unless exactly one
value() {
	awk -v name="$1" -v want="${2:-}" '
		!/^#/ && NF >= 2 {
			n = $1
			sub(/\{.*/, "", n)
			if (n == name && (want == "" || index($0, want))) { v = $NF; c++ }
		}
		END { if (c == 1) print v; exit c != 1 }' "$3"
}
# equal <a> <b>: numerically (the exporter may write 1e+06)
equal() {
	awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && b != "" && a + 0 == b + 0) }'
}
# check_value <description> <name> <labels> <expected> <scrape>
check_value() {
	local got
	got=$(value "$2" "$3" "$5") || got="(not one sample)"
	if equal "$got" "$4"; then
		ok "$1: $2${3:+{$3\}} $got"
	else
		fail "$1: $2${3:+{$3\}} is $got, expected $4"
	fi
}
# check_exporter_ok <scrape> <description>: the exporter reached the server,
# its last scrape had no error, and it loaded the queries file
check_exporter_ok() {
	check_value "$2" pg_up "" 1 "$1"
	check_value "$2" pg_exporter_last_scrape_error "" 0 "$1"
	check_value "$2" pg_exporter_user_queries_load_error "filename=\"$queries\"" 0 "$1"
}

start_exporter "$tmp/exporter.log" --disable-default-metrics --disable-settings-metrics \
	--no-collector.database --no-collector.bgwriter
echo "metrics.sh: exporter on 127.0.0.1:$port"
t_scrape=$(now_ms)
scrape "$tmp/scrape.txt" || { cat "$tmp/exporter.log" >&2; fail "GET /metrics"; exit 1; }
t_scraped=$(now_ms)
stats >"$tmp/stats.after"
per_db >"$tmp/per_db.after"
stop_exporter
if ! cmp -s "$tmp/stats.before" "$tmp/stats.after" || ! cmp -s "$tmp/per_db.before" "$tmp/per_db.after"; then
	diff "$tmp/stats.before" "$tmp/stats.after" >&2 || true
	diff "$tmp/per_db.before" "$tmp/per_db.after" >&2 || true
	echo "metrics.sh: FAILED: dlock moved during the scrape: the comparison would mean nothing" >&2
	exit 1
fi

check_exporter_ok "$tmp/scrape.txt" "defaults off"

# every metric but the exporter's own is the file's, and named dlock_*
others=$(grep -v '^#' "$tmp/scrape.txt" | sed 's/[{ ].*//' | sort -u |
	grep -Ev "$own_metric" | grep -v '^dlock_' || true)
if [ -z "$others" ]; then
	ok "every metric from the queries file is named dlock_*"
else
	fail "metrics not named dlock_*: $(echo "$others" | tr '\n' ' ')"
fi
# the TYPE of each, and no other dlock_ metric
expected_types | sort >"$tmp/types.expected"
awk '$1 == "#" && $2 == "TYPE" && $3 ~ /^dlock_/ { print $3, $4 }' "$tmp/scrape.txt" | sort >"$tmp/types.got"
if cmp -s "$tmp/types.expected" "$tmp/types.got"; then
	ok "TYPE lines: $(grep -c counter "$tmp/types.got") counters, $(grep -c gauge "$tmp/types.got") gauges, as intended"
else
	fail "TYPE lines differ from the intended ones (< intended, > exported):"
	diff "$tmp/types.expected" "$tmp/types.got" >&2 || true
fi
# every dlock_ metric has HELP text
no_help=$(awk '$1 == "#" && $2 == "HELP" && $3 ~ /^dlock_/ && NF < 5 { print $3 }' "$tmp/scrape.txt")
if [ -z "$no_help" ]; then ok "HELP text for every dlock_ metric"; else fail "no HELP text: $no_help"; fi

# dlock_stats: every column, and nothing else, is expected
cut -d'|' -f1 "$tmp/stats.after" >"$tmp/columns.got"
printf '%s\n' "${stat_counters[@]}" "${stat_gauges[@]}" | sort >"$tmp/columns.expected"
cmp -s "$tmp/columns.expected" "$tmp/columns.got" ||
	fail "dlock_stats has columns this suite does not know: $(diff "$tmp/columns.expected" "$tmp/columns.got" | grep '^[<>]' | tr '\n' ' ')"
# its values, once each (the cluster-wide view is exported once, not per database)
while IFS='|' read -r col val; do
	if [[ " ${stat_counters[*]} " == *" $col "* ]]; then
		check_value "dlock_stats.$col" "dlock_${col}_total" "" "$val" "$tmp/scrape.txt"
	else
		check_value "dlock_stats.$col" "dlock_$col" "" "$val" "$tmp/scrape.txt"
	fi
done <"$tmp/stats.after"
check_value "dlock.max_locks" dlock_max_locks "" 500 "$tmp/scrape.txt"
check_value "dlock.max_locks_per_database" dlock_max_locks_per_database "" 200 "$tmp/scrape.txt"

# per database: exactly the two with the extension, each once
dbs=$(awk '!/^#/ && /^dlock_database_leases\{/' "$tmp/scrape.txt" | grep -o 'datname="[^"]*"' | sort | tr '\n' ' ')
if [ "$dbs" = 'datname="dlock_a" datname="dlock_b" ' ]; then
	ok "per-database series for dlock_a and dlock_b only"
else
	fail "per-database series for: $dbs(expected dlock_a and dlock_b)"
fi
while IFS='|' read -r db leases waiters; do
	check_value "dlock_locks of $db" dlock_database_leases "datname=\"$db\"" "$leases" "$tmp/scrape.txt"
	check_value "dlock_waiters of $db" dlock_database_waiters "datname=\"$db\"" "$waiters" "$tmp/scrape.txt"
done <"$tmp/per_db.after"
check_value "no waiter in dlock_a" dlock_database_oldest_wait_seconds 'datname="dlock_a"' 0 "$tmp/scrape.txt"
# the oldest waiter of dlock_b queued after t_queue and before t_queued
age=$(value dlock_database_oldest_wait_seconds 'datname="dlock_b"' "$tmp/scrape.txt") || age=
low=$(awk -v a="$t_scrape" -v b="$t_queued" 'BEGIN { print (a - b) / 1000 - 0.1 }')
high=$(awk -v a="$t_scraped" -v b="$t_queue" 'BEGIN { print (a - b) / 1000 + 0.1 }')
if [ -n "$age" ] && awk -v v="$age" -v l="$low" -v h="$high" 'BEGIN { exit !(v >= l && v <= h) }'; then
	ok "oldest wait in dlock_b: $age s (between $low and $high)"
else
	fail "oldest wait in dlock_b: '$age', expected between $low and $high seconds"
fi
waiting=$(value dlock_waiting "" "$tmp/scrape.txt") || waiting=
queued=$(value dlock_queued "" "$tmp/scrape.txt") || queued=
total=$(awk -v a="$waiting" -v b="$queued" 'BEGIN { print a + b }')
sum=$(awk '!/^#/ && /^dlock_database_waiters\{/ { s += $NF } END { print s + 0 }' "$tmp/scrape.txt")
if [ -n "$waiting" ] && [ -n "$queued" ] && equal "$total" "$sum"; then
	ok "dlock_waiting + dlock_queued ($total) is the sum of the databases' waiters"
else
	fail "dlock_waiting + dlock_queued is '$waiting' + '$queued', the databases' waiters add up to $sum"
fi
# promtool's lint of the dlock_ metrics (names, _total on counters, HELP)
if grep -E '^(# (HELP|TYPE) )?dlock_' "$tmp/scrape.txt" | promtool check metrics >"$tmp/lint.out" 2>&1; then
	ok "promtool check metrics: no problem in the dlock_ metrics"
else
	fail "promtool check metrics: $(cat "$tmp/lint.out")"
fi

# -------------------------------------------- with the default metrics on

start_exporter "$tmp/exporter-defaults.log"
scrape "$tmp/scrape-defaults.txt" || { cat "$tmp/exporter-defaults.log" >&2; fail "GET /metrics (defaults on)"; exit 1; }
stop_exporter
check_exporter_ok "$tmp/scrape-defaults.txt" "defaults on"
check "defaults on: the exporter's default metrics are there (pg_stat_database_*)" \
	grep -q '^pg_stat_database_' "$tmp/scrape-defaults.txt"
awk '$1 == "#" && $2 == "TYPE" && $3 ~ /^dlock_/ { print $3, $4 }' "$tmp/scrape-defaults.txt" |
	sort >"$tmp/types-defaults.got"
check "defaults on: the same dlock_ metrics and TYPEs" \
	cmp -s "$tmp/types.expected" "$tmp/types-defaults.got"
check_value "defaults on" dlock_grants_total "" "$(grep '^grants|' "$tmp/stats.after" | cut -d'|' -f2)" \
	"$tmp/scrape-defaults.txt"
check_value "defaults on" dlock_database_waiters 'datname="dlock_b"' 11 "$tmp/scrape-defaults.txt"

# ------------------------------------------------------------ alert rules

if promtool check rules "$alerts" >"$tmp/rules.out" 2>&1; then
	ok "promtool check rules $(basename "$alerts")"
else
	fail "promtool check rules: $(cat "$tmp/rules.out")"
fi
# the unit tests run against the rules under test (a copy beside them)
cp "$here/metrics/alerts_test.yaml" "$tmp/alerts_test.yaml"
cp "$alerts" "$tmp/alerts.yaml"
if (cd "$tmp" && promtool test rules alerts_test.yaml) >"$tmp/rules-test.out" 2>&1; then
	ok "promtool test rules: the alerts fire when they should, not before"
else
	fail "promtool test rules: $(cat "$tmp/rules-test.out")"
fi
# every metric the rules' expressions and their tests' series name is one
# the exporter exports
names=$( (grep -E '^[[:space:]]*expr:' "$alerts"
	grep -E '^[[:space:]]*- series:' "$here/metrics/alerts_test.yaml") |
	grep -o 'dlock_[a-z_]*' | sort -u)
missing=
for name in $names; do
	grep -q "^# TYPE $name " "$tmp/scrape.txt" || missing="$missing $name"
done
if [ -n "$names" ] && [ -z "$missing" ]; then
	ok "the rules and their tests name only exported metrics ($(echo "$names" | tr '\n' ' '))"
else
	fail "the rules or their tests name metrics the exporter does not export:${missing:- none at all}"
fi
# docs/operations.md shows the same rules (without comments and descriptions), valid
awk '/^## / { m = ($0 ~ /^## Monitoring with Prometheus/) }
	m && /^```yaml$/ { y = 1; b = ""; next }
	y && /^```$/ { y = 0; if (b ~ /^groups:/) printf "%s", b; next }
	y { b = b $0 "\n" }' "$here/docs/operations.md" >"$tmp/readme-alerts.yaml"
rules_of() {
	grep -E '^[[:space:]]*(- alert|expr|for):' "$1" | sed 's/^[[:space:]]*//'
}
if [ ! -s "$tmp/readme-alerts.yaml" ]; then
	fail "docs/operations.md: no alert rules (a yaml block starting with groups:) under Monitoring with Prometheus"
elif ! promtool check rules "$tmp/readme-alerts.yaml" >"$tmp/readme-rules.out" 2>&1; then
	fail "docs/operations.md's alert rules: $(cat "$tmp/readme-rules.out")"
elif [ "$(rules_of "$tmp/readme-alerts.yaml")" != "$(rules_of "$alerts")" ]; then
	fail "docs/operations.md's alert rules differ from $(basename "$alerts"): $(diff <(rules_of "$tmp/readme-alerts.yaml") <(rules_of "$alerts") | tr '\n' ' ')"
else
	ok "docs/operations.md shows the rules of $(basename "$alerts"), valid"
fi

echo "metrics.sh: $checks checks, $failures failed"
[ "$failures" = 0 ]
