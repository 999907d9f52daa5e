#!/bin/bash
# The pg_regress and isolation suites of dlock against a server running
# under Valgrind (memcheck).
#
# Starts a throwaway cluster of its own (test/dlock.conf, unix socket in a
# private dir in /tmp) with the postmaster under
#   valgrind --trace-children=yes --error-exitcode=128 --track-origins=yes
#            --suppressions=test/valgrind/postgres.supp ...
# so every backend, worker and sweeper runs under memcheck, runs the suites
# of the Makefile (REGRESS, ISOLATION) against it as installcheck does (the
# test databases are created afresh on that server), stops
# it, and reads the per-process Valgrind logs.
#
# Exit status: 1 if Valgrind reported an error with a dlock frame (in
# dlock.so, a dlock_* function or a source file of the extension) anywhere
# in its report, including where an uninitialised value was created; 0
# otherwise.  Errors outside dlock (PostgreSQL's own noise that the
# suppressions miss) are listed but do not fail the run.  Tests that fail
# are listed with their diffs but do not fail the run either, unless
# VALGRIND_REQUIRE_PASS=1: under Valgrind everything runs 20-50 times
# slower, and steps that measure time can fail for that reason alone.
# Because of --error-exitcode, a backend with an unsuppressed error exits
# with code 128, which the postmaster treats as a crash: the run reports
# those exits, and the suites then fail visibly.
#
# Run it after `make install` as a user that can run initdb; run as root
# (`make valgrind`), it runs itself as postgres.  Its scratch directory is
# test/tmp/valgrind.* of the checkout, or one in $TMPDIR (/tmp) when that
# is not writable.
#
#   runuser -u postgres -- test/valgrind/run.sh
#   runuser -u postgres -- test/valgrind/run.sh errors fence   # only these tests
#
# Arguments: test names: sql/<name>.sql and/or test/isolation/specs/<name>.spec, listed
# in the Makefile or not (default: every test of REGRESS and ISOLATION but
# those in VALGRIND_SKIP).
# Environment: PG_CONFIG, DLOCK_TOP (checkout; default: this script's),
# DLOCK_LOGDIR (logs are copied there on failure), VALGRIND_OPTS (extra
# Valgrind options), VALGRIND_TRACK_ORIGINS (yes), VALGRIND_KEEP=1 (keep
# the scratch directory), VALGRIND_REQUIRE_PASS=1, VALGRIND_SKIP (tests
# left out when no test is named; default "capacity": it fills the table
# with 300 ms leases one call at a time, and under Valgrind they expire
# faster than it adds them, so it never ends), VALGRIND_STATEMENT_TIMEOUT
# (a backstop for any statement, default 600s), VALGRIND_HOSTILE_SCALE
# (0.05: sql/hostile.sql's memory loops run 5,000 calls instead of 100,000).
set -uo pipefail

srv_name=valgrind
srv_who=valgrind/run.sh
# shellcheck source=test/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pgxs=$(cd "$(dirname "$("$PG_CONFIG" --pgxs)")/../.." && pwd)
port=54349
t_start=$(date +%s)

if [ "$(id -u)" = 0 ]; then
	# initdb refuses root: run as postgres (it needs to read the checkout)
	if id postgres >/dev/null 2>&1 && runuser -u postgres -- test -r "$here/Makefile"; then
		exec runuser -u postgres -- env DLOCK_TOP="$here" PG_CONFIG="$PG_CONFIG" "$BASH" "$here/test/valgrind/run.sh" "$@"
	fi
fi
srv_require
if ! command -v valgrind >/dev/null; then
	echo "valgrind/run.sh: valgrind is not installed (apt-get install valgrind)" >&2
	exit 2
fi

# The suites, as the Makefile lists them.
make_var() {
	make -s --no-print-directory -C "$here" --eval '__print-%: ; @echo $($*)' "__print-$1" 2>/dev/null
}
regress_all=$(make_var REGRESS)
isolation_all=$(make_var ISOLATION)
skip=" ${VALGRIND_SKIP-capacity} "
regress=""
isolation=""
for t in $regress_all; do
	[[ "$skip" == *" $t "* ]] || regress+="$t "
done
for t in $isolation_all; do
	[[ "$skip" == *" $t "* ]] || isolation+="$t "
done
if [ $# -gt 0 ]; then
	regress=""
	isolation=""
	for t in "$@"; do
		# a name may be both: then it runs in both
		found=0
		if [ -f "$here/sql/$t.sql" ]; then
			[[ " $regress " == *" $t "* ]] || regress+="$t "
			found=1
		fi
		if [ -f "$here/test/isolation/specs/$t.spec" ]; then
			[[ " $isolation " == *" $t "* ]] || isolation+="$t "
			found=1
		fi
		if [ "$found" = 0 ]; then
			echo "valgrind/run.sh: no test named $t (sql/$t.sql or test/isolation/specs/$t.spec)" >&2
			exit 2
		fi
	done
	# the pg_regress tests need the extension that setup creates
	if [ -n "$regress" ] && [[ " $regress " != *" setup "* ]]; then
		regress="setup $regress"
	fi
	# the isolation specs need the shared helper functions
	if [ -n "$isolation" ] && [[ " $isolation " != *" helpers "* ]]; then
		isolation="helpers $isolation"
	fi
fi

srv_dirs
vglogs=$tmp/valgrind
mkdir -p "$vglogs"
pm_pid=""
rc=0

stop_server() {
	[ -n "$pm_pid" ] || return 0
	if kill -0 "$pm_pid" 2>/dev/null; then
		"$bindir/pg_ctl" -D "$tmp/data" -m fast -w -t 600 stop >/dev/null 2>&1 ||
			kill -QUIT "$pm_pid" 2>/dev/null
	fi
	# valgrind writes its last words when each process exits
	for _ in $(seq 600); do
		kill -0 "$pm_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pm_pid" 2>/dev/null
	pm_pid=""
}

cleanup() {
	local code=$?
	stop_server
	rm -rf "$sock"
	if [ "$code" -ne 0 ] || [ "${VALGRIND_KEEP:-0}" = 1 ]; then
		if [ -n "${DLOCK_LOGDIR:-}" ] && mkdir -p "$DLOCK_LOGDIR" 2>/dev/null; then
			mkdir -p "$DLOCK_LOGDIR/valgrind"
			cp -r "$vglogs" "$tmp/server.log" "$DLOCK_LOGDIR/valgrind/" 2>/dev/null
			for d in regress isolation; do
				[ -f "$tmp/$d/regression.diffs" ] && cp "$tmp/$d/regression.diffs" "$DLOCK_LOGDIR/valgrind/$d.diffs"
			done
			echo "--- logs copied to $DLOCK_LOGDIR/valgrind"
		fi
		echo "--- kept $tmp"
	else
		rm -rf "$tmp"
	fi
	exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

srv_initdb
srv_conf "$port" "$(cat "$here/test/dlock.conf")" \
	"# everything is 20-50 times slower under valgrind" \
	"checkpoint_timeout = 1h" "autovacuum = off" "log_line_prefix = '%m [%p] '"

track=${VALGRIND_TRACK_ORIGINS:-yes}
# shellcheck disable=SC2086
valgrind --quiet --trace-children=yes --error-exitcode=128 \
	--error-markers=VALGRINDERROR-BEGIN,VALGRINDERROR-END \
	--track-origins="$track" --read-var-info=no --num-callers=40 \
	--leak-check=no --gen-suppressions=all --fullpath-after= \
	--suppressions="$here/test/valgrind/postgres.supp" \
	--log-file="$vglogs/%p.log" ${VALGRIND_OPTS:-} \
	"$bindir/postgres" -D "$tmp/data" >"$tmp/server.log" 2>&1 &
pm_pid=$!

echo "valgrind/run.sh: postmaster under valgrind (pid $pm_pid), waiting for it to accept connections"
ready=0
for _ in $(seq 1200); do
	if "$bindir/pg_isready" -q -h "$sock" -p "$port" -d postgres; then
		ready=1
		break
	fi
	kill -0 "$pm_pid" 2>/dev/null || break
	sleep 0.25
done
if [ "$ready" != 1 ]; then
	echo "valgrind/run.sh: the server did not start" >&2
	tail -n 30 "$tmp/server.log" >&2
	exit 2
fi
t_ready=$(date +%s)
echo "valgrind/run.sh: server ready after $((t_ready - t_start)) s"

srv_env
# a test that cannot finish under valgrind must not hang the run
# (hostile.scale: sql/hostile.sql runs its 100,000-call memory loops at 5 %)
export PGOPTIONS="-c statement_timeout=${VALGRIND_STATEMENT_TIMEOUT:-600s} -c hostile.scale=${VALGRIND_HOSTILE_SCALE:-0.05}"
echo "valgrind/run.sh: pg_regress: ${regress:-(none)}"
echo "valgrind/run.sh: isolation: ${isolation:-(none)}"

suite_failed=0
if [ -n "$regress" ]; then
	t0=$(date +%s)
	mkdir -p "$tmp/regress"
	# shellcheck disable=SC2086
	(cd "$here" && "$pgxs/src/test/regress/pg_regress" --inputdir=. \
		--outputdir="$tmp/regress" --bindir="$bindir" \
		--dbname=contrib_regression $regress) | tee "$tmp/regress.out"
	st=${PIPESTATUS[0]}
	echo "valgrind/run.sh: pg_regress exit status $st, $(($(date +%s) - t0)) s"
	[ "$st" -eq 0 ] || suite_failed=1
fi
if [ -n "$isolation" ]; then
	t0=$(date +%s)
	mkdir -p "$tmp/isolation"
	# shellcheck disable=SC2086
	(cd "$here" && "$pgxs/src/test/isolation/pg_isolation_regress" --inputdir=test/isolation \
		--outputdir="$tmp/isolation" --bindir="$bindir" \
		--load-extension=dlock --dbname=isolation_regression $isolation) | tee "$tmp/isolation.out"
	st=${PIPESTATUS[0]}
	echo "valgrind/run.sh: isolation exit status $st, $(($(date +%s) - t0)) s"
	[ "$st" -eq 0 ] || suite_failed=1
fi

echo "valgrind/run.sh: stopping the server"
stop_server

# ---- the reports
# An error is the text between the markers.  It is dlock's when one of its
# frames is in dlock.so, in a dlock_* function, or in a source file of the
# extension (with --fullpath-after= the frames show full source paths).
srcdir_re=$(cd "$here" && pwd -P)
awk -v srcdir="$srcdir_re" '
	/VALGRINDERROR-BEGIN/ { inerr = 1; buf = ""; next }
	/VALGRINDERROR-END/ {
		inerr = 0
		n++
		mine = (buf ~ /dlock\.so/ || buf ~ /[: ]dlock_[a-z_]+ \(/ || buf ~ /\/src\/(dlock|shmem|wait|xact|lease|persist|worker|funcs)\.c:[0-9]+/)
		if (mine) { nd++; print "=== dlock error in " FILENAME ":\n" buf > "/dev/stderr" }
		else { no++; if (no <= 20) print "=== other error (not in dlock frames) in " FILENAME ":\n" buf > "/dev/stderr" }
		next
	}
	inerr { sub(/^==[0-9]+== ?/, ""); buf = buf $0 "\n" }
	END { printf "%d %d %d\n", n + 0, nd + 0, no + 0 }
' "$vglogs"/*.log >"$tmp/counts" 2>"$tmp/errors.txt"
read -r nerr ndlock nother <"$tmp/counts"
nlogs=$(find "$vglogs" -name '*.log' | wc -l)
crashes=$(grep -cE 'terminated by signal|exited with exit code ([02-9]|[1-9][0-9])' "$tmp/server.log")

if [ "$ndlock" -gt 0 ] || [ "$nother" -gt 0 ]; then
	cat "$tmp/errors.txt"
fi
echo "valgrind/run.sh: $nlogs processes traced; $nerr valgrind errors: $ndlock in dlock frames, $nother elsewhere"
echo "valgrind/run.sh: $crashes backend exits with an error status (128 = valgrind error) in the server log"
echo "valgrind/run.sh: total $(($(date +%s) - t_start)) s"
if [ "$ndlock" -gt 0 ]; then
	echo "valgrind/run.sh: FAIL: valgrind errors in dlock"
	rc=1
fi
if [ "$suite_failed" = 1 ]; then
	failed_tests=$(grep -hE '^(test|     ) *[^ ]+ +\.\.\. ' "$tmp"/regress.out "$tmp"/isolation.out 2>/dev/null |
		grep -v '\.\.\. ok' | sed -E 's/^(test|     ) *([^ ]+) .*/\2/' | tr '\n' ' ')
	if [ "${VALGRIND_REQUIRE_PASS:-0}" = 1 ]; then
		echo "valgrind/run.sh: FAIL: tests failed under valgrind: $failed_tests"
		rc=1
	else
		echo "valgrind/run.sh: tests that failed under valgrind (slowness; not counted): $failed_tests"
		VALGRIND_KEEP=1
	fi
	for d in regress isolation; do
		[ -s "$tmp/$d/regression.diffs" ] && echo "valgrind/run.sh: diffs: $tmp/$d/regression.diffs"
	done
fi
[ "$rc" -eq 0 ] && echo "valgrind/run.sh: PASS"
exit "$rc"
