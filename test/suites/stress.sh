#!/bin/bash
# Randomized stress test of dlock: mutual exclusion and fencing-token order,
# reader/writer exclusion on shared/exclusive names, the permits of
# semaphores, and all-or-nothing multi-locks (see test/load/stress.md).
#
# Builds test/load/dlock_stress, starts a throwaway cluster of its own
# (unix socket only, shared_preload_libraries = 'dlock') under
# test/tmp/stress.* of the checkout (socket in a short private dir in /tmp),
# runs the tool and exits with its status.  Run it as a non-root user that
# can run initdb (the harness uses postgres), after `make install` of dlock:
#
#   runuser -u postgres -- test/suites/stress.sh
#
# Environment: STRESS_SEED (default: derived from the clock, printed),
# STRESS_DURATION (15), STRESS_CLIENTS (16), STRESS_NAMES (8),
# STRESS_ARGS (extra options for dlock_stress), PG_CONFIG, DLOCK_TOP (checkout
# to use; default: this script's), DLOCK_LOGDIR (the server log is copied
# there on failure).
set -euo pipefail

here=${DLOCK_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
if [ -z "${PG_CONFIG:-}" ]; then
	if [ -x /usr/lib/postgresql/15/bin/pg_config ]; then
		PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
	else
		PG_CONFIG=pg_config
	fi
fi
bindir=$("$PG_CONFIG" --bindir)
seed=${STRESS_SEED:-$(( $(date +%s%N) % 1000000007 ))}
duration=${STRESS_DURATION:-15}
clients=${STRESS_CLIENTS:-16}
names=${STRESS_NAMES:-8}

if [ "$(id -u)" = 0 ]; then
	echo "stress.sh: initdb refuses root; run as postgres: runuser -u postgres -- $0" >&2
	exit 2
fi
if [ ! -f "$("$PG_CONFIG" --pkglibdir)/dlock.so" ] ||
	[ ! -f "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
	echo "stress.sh: dlock is not installed; run make && make install first" >&2
	exit 2
fi

make -s -C "$here/test/load" PG_CONFIG="$PG_CONFIG" dlock_stress

mkdir -p "$here/test/tmp"
tmp=$(mktemp -d "$here/test/tmp/stress.XXXXXX")
sock=$(mktemp -d /tmp/dlock-stress-sock.XXXXXX)	# socket paths must be short
started=
cleanup() {
	rc=$?
	if [ -n "$started" ]; then
		"$bindir/pg_ctl" -D "$tmp/data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$sock"
	if [ $rc -ne 0 ] && [ -f "$tmp/server.log" ]; then
		echo "--- last lines of the server log ($tmp/server.log):" >&2
		tail -n 30 "$tmp/server.log" >&2
		if [ -n "${DLOCK_LOGDIR:-}" ] && mkdir -p "$DLOCK_LOGDIR" 2>/dev/null; then
			cp "$tmp/server.log" "$DLOCK_LOGDIR/stress-server.log" &&
				echo "--- server log copied to $DLOCK_LOGDIR/stress-server.log" >&2
		fi
		echo "--- kept $tmp for inspection" >&2
	else
		rm -rf "$tmp"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bindir/initdb" -D "$tmp/data" --auth=trust --no-instructions -E UTF8 --locale=C >"$tmp/initdb.log" 2>&1 ||
	{ cat "$tmp/initdb.log" >&2; exit 2; }
cat >>"$tmp/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$sock'
port = 54329
shared_preload_libraries = 'dlock'
max_connections = 100
fsync = off
log_min_messages = warning
log_lock_waits = on
CONF
"$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 30 start >/dev/null
started=1

unset PGSERVICE PGOPTIONS PGUSER PGPASSWORD PGHOSTADDR
export PGHOST="$sock" PGPORT=54329 PGDATABASE=postgres
"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION dlock' >/dev/null

echo "stress.sh: seed $seed (rerun with STRESS_SEED=$seed)"
rc=0
# shellcheck disable=SC2086
"$here/test/load/dlock_stress" -c "$clients" -n "$names" -t "$duration" -s "$seed" \
	${STRESS_ARGS:-} || rc=$?

# a crashed or failed-assertion backend, or a background worker that failed,
# is an engine bug even if the tool passed
if grep -E 'PANIC|TRAP:|terminated by signal|was terminated|exited with exit code' "$tmp/server.log" >&2; then
	echo "stress.sh: the server log shows a crash or a failed worker" >&2
	[ $rc -ne 0 ] || rc=1
fi
exit $rc
