#!/usr/bin/env bash
# test/soak.sh: the fuzz back to back (`make soak`); not part of make test.
#
# Builds and installs dlock (make, make install; as run-tests.sh does), copies
# the checkout to a scratch directory owned by the test user (postgres when
# run as root), and until the time is up runs test/suites/fuzz.sh there,
# once per fresh random seed (see test/load/fuzz.md): a throwaway cluster,
# SOAK_CLIENTS hostile clients for SOAK_RUN_SECONDS, the invariants, then a
# crash (by default SIGKILL to the postmaster and all its children), a
# start, and dlock_fuzz --verify of the durable leases that were live.
# Every other run (the 2nd, 4th, ...) has the machine loaded by a loop of
# `make clean; make -j2` of dlock in a second scratch copy, stopped when the
# run ends.
#
# No run starts unless it should end within the time: it is the runs' own
# measured time (fuzzing plus setup, checks and restart) that counts.  When
# the time left is under two runs but at least one, the last run is made
# longer to fill it.  The first run always happens.
#
# Prints, for each run, its seed, load on/off, statements executed and
# violations; and at the end one line:
#   soak: N runs in M minutes, S statements, V violations, F failed; failing seeds: ...
# Exit status: 0 if every run passed, 1 if one failed, 2 if the soak itself
# could not run (build, install, setup, or the load's build failed),
# 130 when interrupted.
#
# The output of every run is kept in the log directory (printed at the
# start and the end); a failing run's server log is copied there as
# fuzz-server-<seed>.log, and its cluster is kept under the scratch copy's
# test/tmp/fuzz.* until the next soak.
#
# Environment:
#   SOAK_MINUTES      time for the whole soak (10)
#   SOAK_RUN_SECONDS  seconds of fuzzing per run (45)
#   SOAK_CLIENTS      client processes per run (16)
#   SOAK_LOAD         alternate (default: every other run), always, never
#   SOAK_RESTART      how the server goes down before the verify: kill
#                     (default: SIGKILL to every server process), immediate
#                     (pg_ctl stop -m immediate), fast (a clean restart)
#   SOAK_DIR          scratch base directory (default: .soak in the checkout)
#   DLOCK_LOGDIR      logs go to a new directory soak-<time> under it
#                     (default: under SOAK_DIR/logs)
#   PG_CONFIG         pg_config to build with (default: PostgreSQL 15's)
#   FUZZ_ARGS         extra options for dlock_fuzz (--inject-violations
#                     makes every run fail: a test of the soak itself)
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

# PG_CONFIG (PostgreSQL 15's unless set), copy_checkout
# shellcheck source=test/lib.sh
source "$top/test/lib.sh"

minutes=${SOAK_MINUTES:-10}
run_secs=${SOAK_RUN_SECONDS:-45}
clients=${SOAK_CLIENTS:-16}
load_mode=${SOAK_LOAD:-alternate}
restart=${SOAK_RESTART:-kill}

die() { echo "soak: $*" >&2; exit 2; }
[[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "SOAK_MINUTES must be a number of minutes"
[[ "$run_secs" =~ ^[1-9][0-9]*$ ]] || die "SOAK_RUN_SECONDS must be a positive number of seconds"
[[ "$clients" =~ ^[1-9][0-9]*$ ]] || die "SOAK_CLIENTS must be a positive number"
case $load_mode in alternate|always|never) ;; *) die "SOAK_LOAD must be alternate, always or never" ;; esac
case $restart in kill|immediate|fast) ;; *) die "SOAK_RESTART must be kill, immediate or fast" ;; esac
budget=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')

case $restart in
	kill) restart_text="crash by SIGKILL" ;;
	immediate) restart_text="crash by pg_ctl stop -m immediate" ;;
	fast) restart_text="clean restart" ;;
esac

# ---------------------------------------------------------------- users
if [[ $(id -u) -eq 0 ]]; then
	test_user=postgres
	# setpriv execs: the fuzz run stays one process group we can signal
	as_test_user=(setpriv --reuid=postgres --regid=postgres --init-groups)
else
	test_user=$(id -un)
	as_test_user=()
fi

# ---------------------------------------------------------------- state
t_start=$(date +%s)
runs=0		# runs done
current=0	# the run in progress
nfailed=0
total_stmts=0
total_viol=0
failing_seeds=()
fuzz_pid=""
load_pid=""
work=""
logdir=""
soak_status=0

now() { date +%s; }

# Stops the load: its whole process group (setsid made it a group leader).
# True if the load was still running, false if it had stopped by itself.
stop_load() {
	local alive=0
	[[ -n "$load_pid" ]] || return 0
	if kill -0 "$load_pid" 2>/dev/null; then
		alive=1
		kill -TERM -- "-$load_pid" 2>/dev/null || true
	fi
	wait "$load_pid" 2>/dev/null || true
	load_pid=""
	((alive))
}

# Stops a fuzz run in progress: SIGTERM to its process group; fuzz.sh then
# stops the tool, its clients and the server.
stop_fuzz() {
	[[ -n "$fuzz_pid" ]] || return 0
	if kill -0 "$fuzz_pid" 2>/dev/null; then
		kill -TERM -- "-$fuzz_pid" 2>/dev/null || true
	fi
	wait "$fuzz_pid" 2>/dev/null || true
	fuzz_pid=""
}

summary() {
	local mins
	mins=$(awk -v s="$(($(now) - t_start))" 'BEGIN { printf "%.1f", s / 60 }')
	echo "soak: $runs runs in $mins minutes, $total_stmts statements, $total_viol violations," \
		"$nfailed failed; failing seeds: ${failing_seeds[*]:-none}"
	[[ -n "$logdir" ]] && echo "soak: logs in $logdir"
	return 0
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	stop_fuzz
	stop_load || true
	if ((rc == 130)); then
		echo
		if ((current)); then
			echo "soak: interrupted during run $current (not counted)"
		fi
		summary
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- build, install
echo "soak: make && make install (PG_CONFIG=$PG_CONFIG)"
make -s || die "make failed"
make -s install >/dev/null ||
	die "make install failed (run as root, or as a user who can write to $("$PG_CONFIG" --pkglibdir))"

# ---------------------------------------------------------------- scratch copies
work=${SOAK_DIR:-$top/.soak}
if ((${#as_test_user[@]})) && ! "${as_test_user[@]}" test -x "$top"; then
	work=${TMPDIR:-/tmp}/dlock-soak-$(echo "$top" | md5sum | cut -c1-8)
	echo "soak: $test_user cannot reach $top; using $work"
fi
mkdir -p "$work" || die "cannot create $work"
work=$(cd "$work" && pwd)
chmod 755 "$work"
exec 9>"$work/.lock"
flock -n 9 || die "another soak is using $work"

scratch=$work/run	# where fuzz.sh runs, as the test user
loaddir=$work/load	# what the load builds
logdir=${DLOCK_LOGDIR:-$work/logs}/soak-$(date +%Y%m%d-%H%M%S)
rm -rf "$scratch" "$loaddir"
mkdir -p "$scratch" "$loaddir" "$logdir"
for d in "$scratch" "$loaddir"; do
	copy_checkout "$top" "$d"
done
if ((${#as_test_user[@]})); then
	chown -R "$test_user:" "$scratch" "$logdir"
fi

# ---------------------------------------------------------------- load
# A loop of clean builds of dlock (8 C files and the dlock command) with
# make -j2, in its own session so that it can be stopped as a whole.  It
# stops by itself if the soak is gone (SIGKILL leaves no trap to run).
start_load() {
	rm -f "$loaddir/.builds"
	setsid "$BASH" -c '
		dir=$1 soak=$2 n=0
		while kill -0 "$soak" 2>/dev/null; do
			make -s -C "$dir" clean >/dev/null 2>&1
			if ! make -s -j2 -C "$dir" >"$dir/.build.log" 2>&1; then
				echo "soak: the load build failed; see $dir/.build.log" >&2
				exit 1
			fi
			n=$((n + 1))
			echo "$n" >"$dir/.builds"
		done' load "$loaddir" "$$" 9>&- &
	load_pid=$!
}

# ---------------------------------------------------------------- one run
# run_fuzz <seed> <seconds> <output file>: fuzz.sh as the test user, in its
# own session; sets fuzz_rc.
run_fuzz() {
	fuzz_rc=0
	(cd "$scratch" && exec setsid "${as_test_user[@]}" env \
		-u PGHOST -u PGHOSTADDR -u PGPORT -u PGDATABASE -u PGUSER \
		-u PGPASSWORD -u PGSERVICE -u PGOPTIONS -u PGDATA -u FUZZ_SEEDS \
		LC_ALL=C.UTF-8 LANG=C.UTF-8 \
		PG_CONFIG="$PG_CONFIG" \
		PATH="$("$PG_CONFIG" --bindir):$PATH" \
		DLOCK_TOP="$scratch" DLOCK_LOGDIR="$logdir" \
		FUZZ_SEED="$1" FUZZ_DURATION="$2" FUZZ_CLIENTS="$clients" FUZZ_RESTART="$restart" \
		"$scratch/test/suites/fuzz.sh" >"$3" 2>&1 9>&-) &
	fuzz_pid=$!
	wait "$fuzz_pid" || fuzz_rc=$?
	fuzz_pid=""
}

new_seed() { echo $(( $(od -An -N4 -tu4 /dev/urandom) % 1000000007 )); }

if [[ $load_mode == never ]]; then
	load_text="no load"
elif [[ $load_mode == always ]]; then
	load_text="load (make -j2 of dlock in a loop) on every run"
else
	load_text="load (make -j2 of dlock in a loop) on every other run"
fi
echo "soak: $minutes minutes of fuzz runs of $run_secs s with $clients clients, $load_text," \
	"$restart_text and verify after each"
echo "soak: logs in $logdir"

overhead=20	# seconds a run takes beyond its fuzzing: a guess, then the most measured
while :; do
	elapsed=$(($(now) - t_start))
	left=$((budget - elapsed))
	if ((runs > 0 && left < run_secs + overhead)); then
		break
	fi
	secs=$run_secs
	if ((runs > 0 && left < 2 * (run_secs + overhead))); then
		secs=$((left - overhead))	# the last run: fill the time left
	fi
	current=$((runs + 1))
	seed=$(new_seed)
	load=off
	if [[ $load_mode == always ]] || { [[ $load_mode == alternate ]] && ((current % 2 == 0)); }; then
		load=on
	fi
	out=$logdir/run-$(printf '%02d' "$current")-seed-$seed.log
	echo "soak: run $current: seed $seed, $secs s, load $load ..."

	t0=$(now)
	[[ $load == on ]] && start_load
	run_fuzz "$seed" "$secs" "$out"
	builds=""
	if [[ $load == on ]]; then
		if ! stop_load; then
			echo "soak: the load stopped before the run ended; see $loaddir/.build.log" >&2
			soak_status=2
		fi
		builds=" ($(cat "$loaddir/.builds" 2>/dev/null || echo 0) builds)"
	fi
	wall=$(($(now) - t0))
	runs=$current
	current=0
	if ((runs == 1 || wall - secs > overhead)); then
		overhead=$((wall - secs))
	fi

	stmts=$(awk '/^statements /{ print $2; exit }' "$out")
	v_run=$(awk '/^violations /{ print $2; exit }' "$out")
	v_restart=$(sed -nE 's/^restart: .*, ([0-9]+) violations$/\1/p' "$out" | head -n 1)
	viol=$(( ${v_run:-0} + ${v_restart:-0} ))
	total_stmts=$((total_stmts + ${stmts:-0}))
	total_viol=$((total_viol + viol))
	if ((fuzz_rc == 0)); then
		result=PASS
	else
		result="FAIL (exit status $fuzz_rc)"
		nfailed=$((nfailed + 1))
		failing_seeds+=("$seed")
	fi
	printf 'soak: run %d: seed %s, load %s%s, statements %s, violations %d, %s, %d s\n' \
		"$runs" "$seed" "$load" "$builds" "${stmts:-none}" "$viol" "$result" "$wall"
	if ((fuzz_rc != 0)); then
		# what went wrong, in short; the whole output is in $out
		grep -E '^VIOLATION|^violations |^restart: |^fuzz\.sh: (the server log|server processes)|^pg_ctl: could not|^dlock_fuzz: [^0-9]' "$out" |
			head -n 12 | sed 's/^/    /' | cut -c1-300 || true
		echo "    output: $out"
		[[ -f $logdir/fuzz-server-$seed.log ]] && echo "    server log: $logdir/fuzz-server-$seed.log"
	fi
	if [[ -z $stmts ]]; then
		echo "soak: run $runs never got to fuzzing (see $out); stopping" >&2
		soak_status=2
	fi
	((soak_status == 0)) || break
done

summary
if ((soak_status != 0)); then
	exit "$soak_status"
fi
((nfailed == 0)) || exit 1
exit 0
