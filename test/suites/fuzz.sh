#!/bin/bash
# Concurrent fuzz test of dlock: random, mostly hostile calls from many
# clients, roles and databases; then the invariants, and a restart.
#
# Builds test/fuzz/dlock_fuzz, starts a throwaway cluster of its own (unix
# socket only, shared_preload_libraries = 'dlock', dlock.max_locks = 1000)
# under test/tmp/fuzz.* of the checkout (socket in a short private dir in
# /tmp), creates two databases with the extension and four roles, runs the
# tool (see test/fuzz/README.md), then:
#   - fails if the server log shows a crash (PANIC, TRAP:, terminated by
#     signal, ...), even when the tool passed;
#   - restarts the server and checks that every durable lease that was live
#     came back with its token, owner and role, and that new tokens are
#     above all earlier ones.
# Run it as a non-root user that can run initdb (the harness uses postgres),
# after `make install` of dlock:
#
#   runuser -u postgres -- test/suites/fuzz.sh
#
# Environment: FUZZ_SEED (default: from the clock, printed), FUZZ_DURATION
# (30), FUZZ_CLIENTS (12), FUZZ_ARGS (extra options for dlock_fuzz),
# PG_CONFIG, DLOCK_TOP (checkout to use; default: this script's),
# DLOCK_LOGDIR (the server log is copied there on failure).
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
seed=${FUZZ_SEED:-$(( $(date +%s%N) % 1000000007 ))}
duration=${FUZZ_DURATION:-30}
clients=${FUZZ_CLIENTS:-12}
port=54339

if [ "$(id -u)" = 0 ]; then
	echo "fuzz.sh: initdb refuses root; run as postgres: runuser -u postgres -- $0" >&2
	exit 2
fi
if [ ! -f "$("$PG_CONFIG" --pkglibdir)/dlock.so" ] ||
	[ ! -f "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
	echo "fuzz.sh: dlock is not installed; run make && make install first" >&2
	exit 2
fi

make -s -C "$here/test/fuzz" PG_CONFIG="$PG_CONFIG"

mkdir -p "$here/test/tmp"
tmp=$(mktemp -d "$here/test/tmp/fuzz.XXXXXX")
sock=$(mktemp -d /tmp/dlock-fuzz-sock.XXXXXX)	# socket paths must be short
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
			cp "$tmp/server.log" "$DLOCK_LOGDIR/fuzz-server.log" &&
				echo "--- server log copied to $DLOCK_LOGDIR/fuzz-server.log" >&2
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
port = $port
shared_preload_libraries = 'dlock'
max_connections = 100
max_prepared_transactions = 10
dlock.max_locks = 1000
fsync = off
log_min_messages = warning
CONF
"$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 30 start >/dev/null
started=1

unset PGSERVICE PGOPTIONS PGUSER PGPASSWORD PGHOSTADDR PGDATABASE
export PGHOST="$sock" PGPORT=$port
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
CREATE TABLE fz_rows (name text, tok bigint);
CREATE TRIGGER fenced BEFORE INSERT ON fz_rows
	FOR EACH ROW EXECUTE FUNCTION dlock_fenced('name', 'tok');
GRANT INSERT ON fz_rows TO PUBLIC;
SQL
done

echo "fuzz.sh: seed $seed (rerun with FUZZ_SEED=$seed)"
rc=0
conn="host=$sock port=$port dbname=postgres"
# shellcheck disable=SC2086
"$here/test/fuzz/dlock_fuzz" -d "$conn" -D fz1,fz2 -r fz_a,fz_b,fz_c,fz_d \
	-c "$clients" -t "$duration" -s "$seed" --snapshot "$tmp/leases.snapshot" \
	${FUZZ_ARGS:-} || rc=$?

# (a background worker exiting with code 1 at shutdown is normal; a backend
# that exits with any code but 0 or 1 is a crash)
crashes() {
	grep -E 'PANIC|TRAP:|terminated by signal|was terminated|exited with exit code ([02-9]|[1-9][0-9])|terminating any other active server processes' \
		"$tmp/server.log" >&2
}

# a crashed backend or a failed assertion is a bug even if the tool passed
if crashes; then
	echo "fuzz.sh: the server log shows a crash" >&2
	[ $rc -ne 0 ] || rc=1
fi

if [ -f "$tmp/leases.snapshot" ]; then
	echo "fuzz.sh: restarting the server"
	"$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 -m fast restart >/dev/null
	"$here/test/fuzz/dlock_fuzz" -d "$conn" -D fz1,fz2 -r fz_a --verify "$tmp/leases.snapshot" || rc=1
	if crashes; then
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
