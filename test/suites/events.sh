#!/bin/bash
# Change events under a randomized load (test/events/random_events.py): a
# LISTEN connection (`dlock watch --json`) records every event while
# EVENTS_CLIENTS psql sessions run random tries, acquires, releases, forced
# releases, short ttls that expire (some inside longer transactions),
# memory-only and durable leases, and rollbacks of transactions and
# savepoints for EVENTS_DURATION seconds.  test/events/check_events.py then
# checks the stream: per name, in seq order, grants and ends alternate as
# the modes allow and tokens grow; each lease has one grant and one end, in
# that order; nothing from what rolled back; nothing missing against the
# clients' committed tokens and dlock_stats.  The checker's self-test runs
# first: it must catch each of a set of doctored streams.  Before that,
# `dlock watch NAME...` must print one line per event of those names only;
# after it, `dlock watch` must exit 77 when the server stops.
#
# Builds cli/dlock, starts a throwaway cluster of its own under
# test/tmp/events.* of the checkout.  Run it as a non-root user that can run
# initdb, after `make install` of the extension:
#
#   runuser -u postgres -- test/suites/events.sh
#
# Environment: EVENTS_SEED (default: from the clock, printed), EVENTS_DURATION
# (30), EVENTS_CLIENTS (4), PG_CONFIG, DLOCK_TOP, DLOCK_LOGDIR (the server
# log is copied there on failure).
set -euo pipefail

srv_name=events
# shellcheck source=test/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

srv_require
python3 "$here/test/events/check_events.py" --self-test
make -s -C "$here/cli" PG_CONFIG="$PG_CONFIG"

srv_dirs
srv_trap
srv_initdb
srv_conf 54341 "max_connections = 50"
srv_start
srv_env
"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION dlock' >/dev/null

dlock=$here/cli/dlock
fail() {
	echo "events.sh: $*" >&2
	exit 1
}
# Waits (at most 30 s) until file $1 has a line matching $2.
wait_for_line() {
	local i
	for ((i = 0; i < 300; i++)); do
		grep -q -- "$2" "$1" && return 0
		sleep 0.1
	done
	fail "no line \"$2\" in $1 after 30 s: $(cat "$1")"
}

# dlock watch: one line per event of the names asked for (a name with a
# space too), nothing of the others
"$dlock" -v watch w1 'w 2' >"$tmp/plain.out" 2>"$tmp/plain.err" &
plain=$!
wait_for_line "$tmp/plain.err" listening
"$bindir/psql" -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
SET dlock.events = on;
SELECT dlock_try('w1', '1 hour', 'o1');
SELECT dlock_try('w3', '1 hour', 'o3');
SELECT dlock_try('w 2', '1 hour', 'o 2', 'shared');
SELECT dlock_release('w1', 'o1');
SELECT dlock_release('w3', 'o3');
SELECT dlock_force_release('w 2');
SQL
wait_for_line "$tmp/plain.out" '^forced w 2 '
kill "$plain"
wait "$plain" || true
sed -E 's/token=[0-9]+/token=T/; s/seq=[0-9]+/seq=S/' "$tmp/plain.out" >"$tmp/plain.norm"
diff -u - "$tmp/plain.norm" <<'OUT' || fail "dlock watch printed other lines"
granted w1 token=T owner=o1 mode=exclusive lifetime=ttl seq=S
granted w 2 token=T owner=o 2 mode=shared lifetime=ttl seq=S
released w1 token=T owner=o1 mode=exclusive lifetime=ttl seq=S
forced w 2 token=T owner=o 2 mode=shared lifetime=ttl seq=S
OUT
echo "events.sh: dlock watch prints one line per event of the names asked for"

rc=0
PATH="$bindir:$PATH" python3 "$here/test/events/random_events.py" --dlock "$here/cli/dlock" \
	--out "$tmp/run" --duration "${EVENTS_DURATION:-30}" --clients "${EVENTS_CLIENTS:-4}" \
	${EVENTS_SEED:+--seed "$EVENTS_SEED"} || rc=$?
# (before the stop below, at which the worker exits 1 by design)
if srv_log_grep 'PANIC|TRAP:|terminated by signal|was terminated|exited with exit code'; then
	echo "events.sh: the server log shows a crash or a failed worker" >&2
	[ $rc -ne 0 ] || rc=1
fi

# dlock watch exits 77 when its connection is lost (here: a fast shutdown)
"$dlock" -v watch --json >/dev/null 2>"$tmp/lost.err" &
lost=$!
wait_for_line "$tmp/lost.err" listening
"$bindir/pg_ctl" -D "$tmp/data" -m fast -w -t 30 stop >/dev/null
srv_started=
for ((i = 0; i < 300; i++)); do
	kill -0 "$lost" 2>/dev/null || break
	sleep 0.1
done
lost_rc=0
wait "$lost" || lost_rc=$?
grep -q 'connection lost' "$tmp/lost.err" && [ "$lost_rc" = 77 ] ||
	fail "dlock watch exited $lost_rc after the server stopped: $(cat "$tmp/lost.err")"
echo "events.sh: dlock watch exits 77 when its connection is lost"

if [ $rc -ne 0 ] && [ -n "${DLOCK_LOGDIR:-}" ]; then
	mkdir -p "$DLOCK_LOGDIR/events-run" && cp -r "$tmp/run/." "$DLOCK_LOGDIR/events-run/"
fi
exit $rc
