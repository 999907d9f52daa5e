#!/bin/bash
# Concurrent fuzz test of dlock: random, mostly hostile calls from many
# clients, roles and databases; then the invariants, and a restart.
#
# Builds test/load/dlock_fuzz and runs it once per seed, each run on a
# throwaway cluster of its own (unix socket only, shared_preload_libraries =
# 'dlock', dlock.max_locks = 1000) under test/tmp/fuzz.* of the checkout
# (socket in a short private dir in /tmp), with two databases with the
# extension and four roles (see test/load/fuzz.md); then:
#   - fails if the server log shows a crash (PANIC, TRAP:, terminated by
#     signal, ...), even when the tool passed;
#   - restarts the server (FUZZ_RESTART: a clean restart, or a crash) and
#     checks that every durable lease that was live came back with its
#     token, owner and role, and that new tokens are above all earlier ones.
# By default (make test) there are two runs of 25 s: the fixed seed
# 930063539, then a seed from the clock, which is printed.
# Run it as a non-root user that can run initdb (the harness uses postgres),
# after `make install` of dlock:
#
#   runuser -u postgres -- test/suites/fuzz.sh
#
# Environment:
#   FUZZ_SEEDS     seeds to run, in order; "random" is a new seed from the
#                  clock (default: "930063539 random")
#   FUZZ_SEED      run this one seed only (overrides FUZZ_SEEDS)
#   FUZZ_DURATION  seconds of fuzzing per run (25)
#   FUZZ_CLIENTS   client processes (12)
#   FUZZ_RESTART   how the server goes down before the restart check:
#                  fast (default: pg_ctl restart -m fast), immediate
#                  (pg_ctl stop -m immediate, then start: crash recovery),
#                  kill (SIGKILL to the postmaster and all its children at
#                  once, then start: crash recovery)
#   FUZZ_ARGS      extra options for dlock_fuzz
#   FUZZ_CONF      extra server settings, separated by ';' (for example
#                  "dlock.defer_rows = on")
#   PG_CONFIG, DLOCK_TOP (checkout to use; default: this script's),
#   DLOCK_LOGDIR   a failing run's server log is copied there as
#                  fuzz-server-<seed>.log
# Exit status: 0 if every run passed.
set -euo pipefail

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
srv_name=fuzz
# shellcheck source=test/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
duration=${FUZZ_DURATION:-25}
clients=${FUZZ_CLIENTS:-12}
restart=${FUZZ_RESTART:-fast}
port=54339

case $restart in
	fast|immediate|kill) ;;
	*) echo "fuzz.sh: FUZZ_RESTART must be fast, immediate or kill, not '$restart'" >&2; exit 2 ;;
esac
srv_require

new_seed() { echo $(( $(date +%s%N) % 1000000007 )); }

# ------------------------------------------------------------ several seeds
# Without FUZZ_SEED, this script runs itself once per seed (each run is a
# process of its own, so that one run's failure or exit cannot cut the
# others short) and fails if any run failed.
if [ -z "${FUZZ_SEED:-}" ]; then
	seeds=()
	for s in ${FUZZ_SEEDS:-930063539 random}; do
		if [ "$s" = random ]; then
			s=$(new_seed)
		elif ! [[ "$s" =~ ^[0-9]+$ ]]; then
			echo "fuzz.sh: FUZZ_SEEDS: '$s' is neither a number nor 'random'" >&2
			exit 2
		fi
		seeds+=("$s")
	done
	echo "fuzz.sh: ${#seeds[@]} run(s) of $duration s, $clients clients, restart: $restart; seeds ${seeds[*]}"
	child=
	on_signal() {
		trap - INT TERM
		[ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
		exit 130
	}
	trap 'on_signal' INT TERM
	failed=()
	n=0
	for s in "${seeds[@]}"; do
		n=$((n + 1))
		echo
		echo "=== fuzz.sh: run $n of ${#seeds[@]}: seed $s"
		rc=0
		FUZZ_SEED=$s "$BASH" "$self" &
		child=$!
		wait "$child" || rc=$?
		child=
		[ $rc -eq 0 ] || failed+=("$s")
	done
	echo
	if [ ${#failed[@]} -eq 0 ]; then
		echo "fuzz.sh: PASS (${#seeds[@]} runs, seeds ${seeds[*]})"
		exit 0
	fi
	echo "fuzz.sh: FAIL: ${#failed[@]} of ${#seeds[@]} runs failed, seeds ${failed[*]} (rerun one with FUZZ_SEED=<seed>)"
	exit 1
fi

# ------------------------------------------------------------ one run
seed=$FUZZ_SEED
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: FUZZ_SEED must be a number" >&2; exit 2; }

make -s -C "$here/test/load" PG_CONFIG="$PG_CONFIG" dlock_fuzz
# the event checker must catch each of a set of doctored event streams
"$here/test/load/dlock_fuzz" --self-test >/dev/null ||
	{ echo "fuzz.sh: the event checker's self-test failed (dlock_fuzz --self-test)" >&2; exit 1; }

fz=
# on exit, an interrupted run's tool and its client processes go first
srv_on_exit() {
	if [ -n "$fz" ] && kill -0 "$fz" 2>/dev/null; then
		kill -TERM $(pgrep -P "$fz") "$fz" 2>/dev/null
		wait "$fz" 2>/dev/null
	fi
}
srv_log_copy=fuzz-server-$seed.log
srv_dirs
srv_trap
srv_initdb
# The crash modes run in the default (dlock.flush_grants off) with a
# failover grace of 3 s: the fuzz's ttls within it (up to 3 s, most of them)
# commit without a flush, and a crash begins a grace of at most 3 s, which
# the check after the restart waits out; longer ttls (the long-lived
# leases the check requires back) are flushed.  No standby can exist
# (max_wal_senders 0), so those are granted above the grace.
crash_conf=()
[ "$restart" = fast ] || crash_conf=("dlock.failover_grace = '3s'" "max_wal_senders = 0")
IFS=';' read -r -a extra_conf <<<"${FUZZ_CONF:-}"
srv_conf "$port" "max_connections = 100" "max_prepared_transactions = 10" "dlock.max_locks = 1000" \
	"${crash_conf[@]}" "${extra_conf[@]}"
srv_start
srv_env
psql() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }

psql -d postgres <<'SQL'
CREATE ROLE fz_a LOGIN;
CREATE ROLE fz_b LOGIN IN ROLE fz_a;     -- a member of fz_a: may renew and release its leases
CREATE ROLE fz_c LOGIN;                  -- may force-release and terminate other clients
CREATE ROLE fz_d LOGIN;
GRANT pg_signal_backend TO fz_c;
CREATE DATABASE fz1;
CREATE DATABASE fz2;
SQL
for db in fz1 fz2; do
	psql -d "$db" <<'SQL'
CREATE EXTENSION dlock;
GRANT EXECUTE ON FUNCTION dlock_force_release(text) TO fz_c;
-- stale: set only by UPDATEs that carry no token, all of which must fail
CREATE TABLE fz_rows (name text, tok bigint, stale bool NOT NULL DEFAULT false);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON fz_rows
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'tok');
GRANT SELECT, INSERT, UPDATE ON fz_rows TO PUBLIC;
SQL
done

echo "fuzz.sh: seed $seed (rerun with FUZZ_SEED=$seed)"
rc=0
conn="host=$sock port=$port dbname=postgres"
# (in the background, so that a signal stops the run at once)
# shellcheck disable=SC2086
"$here/test/load/dlock_fuzz" -d "$conn" -D fz1,fz2 -r fz_a,fz_b,fz_c,fz_d \
	-c "$clients" -t "$duration" -s "$seed" --snapshot "$tmp/leases.snapshot" \
	${FUZZ_ARGS:-} &
fz=$!
wait "$fz" || rc=$?
fz=

# (a background worker exiting with code 1 at shutdown is normal; a backend
# that exits with any code but 0 or 1 is a crash)
# crashes [BYTE]: the server log from byte BYTE on (default: all of it)
crashes() {
	srv_log_grep 'PANIC|TRAP:|terminated by signal|was terminated|exited with exit code ([02-9]|[1-9][0-9])|terminating any other active server processes' "${1:-0}"
}

# a crashed backend or a failed assertion is a bug even if the tool passed
if crashes; then
	echo "fuzz.sh: the server log shows a crash" >&2
	[ $rc -ne 0 ] || rc=1
fi

# SIGKILL to the postmaster and every process it started, all at once (the
# postmaster is stopped first so that it forks nobody meanwhile); then wait
# until they are gone.  They are orphans, so their zombies wait for PID 1 to
# reap them, and a new postmaster refuses to start while the old one's
# zombie exists (its PID still answers).
kill_server() {
	local pm kids _
	pm=$(head -n 1 "$tmp/data/postmaster.pid")
	kill -STOP "$pm"
	kids=$(pgrep -P "$pm" | tr '\n' ' ' || true)
	# shellcheck disable=SC2086
	kill -KILL "$pm" $kids 2>/dev/null || true	# (a child may have just exited)
	for _ in $(seq 300); do
		# shellcheck disable=SC2086
		if ! ps -p "$(echo $pm $kids | tr ' ' ,)" >/dev/null; then
			echo "fuzz.sh: killed the postmaster (pid $pm) and its $(echo $kids | wc -w) processes with SIGKILL"
			return 0
		fi
		sleep 0.1
	done
	echo "fuzz.sh: server processes (or their zombies) still there 30 s after SIGKILL:" >&2
	# shellcheck disable=SC2086
	ps -o pid,ppid,stat,cmd -p "$(echo $pm $kids | tr ' ' ,)" >&2 || true
	return 1
}

if [ -f "$tmp/leases.snapshot" ]; then
	logfrom=0
	case $restart in
		fast)
			echo "fuzz.sh: restarting the server"
			"$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 -m fast restart >/dev/null
			;;
		immediate|kill)
			if [ "$restart" = kill ]; then
				echo "fuzz.sh: crashing the server (SIGKILL), then starting it"
				srv_started=
				kill_server
			else
				echo "fuzz.sh: crashing the server (pg_ctl stop -m immediate), then starting it"
				"$bindir/pg_ctl" -D "$tmp/data" -w -t 60 -m immediate stop >/dev/null
				srv_started=
			fi
			# the log before the crash was checked above; what a crash
			# itself writes there is expected
			logfrom=$(stat -c %s "$tmp/server.log")
			"$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 start >/dev/null
			srv_started=1
			;;
	esac
	"$here/test/load/dlock_fuzz" -d "$conn" -D fz1,fz2 -r fz_a --verify "$tmp/leases.snapshot" || rc=1
	if crashes "$logfrom"; then
		echo "fuzz.sh: the server log shows a crash after the restart" >&2
		rc=1
	fi
fi
if [ $rc -eq 0 ]; then
	echo "fuzz.sh: PASS"
else
	echo "fuzz.sh: FAIL (seed $seed)"
fi
exit $rc
