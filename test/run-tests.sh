#!/usr/bin/env bash
# test/run-tests.sh: the one test command (`make test`).
#
#  1. tools/setup.sh installs missing packages;
#  2. `make` and `make install` in the checkout;
#  3. the checkout (without .git) is copied to a scratch directory owned by
#     the test user (postgres when run as root), and every suite runs there,
#     each on its own so that a failing suite does not stop the others:
#       regress    pg_regress, sql/*.sql      (make installcheck, REGRESS only)
#       isolation  test/isolation/specs/*.spec (make installcheck, ISOLATION only)
#       tap        test/tap/*.pl              (make installcheck, TAP only)
#       suite:*    every executable test/suites/*.sh, one test each, exit
#                  status 0 = pass (see test/suites/README); as the test
#                  user, or as root when marked so (ha-smoke: namespaces)
#     Every suite starts its own throwaway servers; no running server is
#     needed or touched.  TAP files run DLOCK_PROVE_JOBS at a time.  A
#     script marked "# run-tests: concurrent" (ha-smoke: mostly waiting on
#     Patroni) starts when the scripts do (after TAP, which runs two files
#     at a time already), in a scratch copy of its own, and runs while the
#     other scripts and the other versions run one after the other; its
#     output is shown, and its result counted, when it ends (after the last
#     version);
#  4. the other PostgreSQL versions, each in a Debian root of its own
#     (tools/root.sh; made when missing, which needs root): test/versions.sh
#     builds and installs dlock in the root and runs regress and isolation
#     there, counted as the suites regress@17, isolation@17, regress@18...
#     (one test per pg_regress test or isolation spec, as above)
#  5. Servers left running under the scratch directory are stopped, also on
#     Ctrl-C or kill.
#
# Output ends with each suite's wall time, the total, and as the very last
# line "N passed, N failed".  Exit status is 0 only if nothing failed.
#
# Environment:
#   PG_CONFIG            pg_config to build with (default: PostgreSQL 15's)
#   DLOCK_TEST_DIR       scratch base directory (default: test/tmp)
#   DLOCK_SUITE_TIMEOUT  seconds allowed for each suite (default 900)
#   DLOCK_SKIP_SETUP=1   do not run tools/setup.sh
#   DLOCK_SUITES         run only these suites (default: all), of: regress
#                        isolation tap, the name of a test/suites script
#                        without .sh (fuzz, stress...), and regress@VERSION
#                        or isolation@VERSION
#   DLOCK_TEST_VERSIONS  the other versions, tested in their roots (default
#                        "17 18"; empty: none)
#   DLOCK_PROVE_TESTS    TAP files to run instead of test/tap/*.pl
#   DLOCK_PROVE_JOBS     TAP files run at a time (default 2; 1: one by one)
#   DLOCK_CONCURRENT=0   run the concurrent scripts one after the other too
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top" || exit 1

# PG_CONFIG (PostgreSQL 15's unless set), copy_checkout
# shellcheck source=test/lib.sh
source "$top/test/lib.sh"

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
hr() { printf '\n=== %s ===\n' "$*"; }

t_start=$(now)
npass=0
nfail=0
failed_names=()
timings=()
current=""          # suite running now, for the interrupt report
interrupted=0
work=""
scratch=""
logdir=""

# ---------------------------------------------------------------- users
if [[ $(id -u) -eq 0 ]]; then
	test_user=postgres
	as_test_user=(runuser -u postgres --)
else
	test_user=$(id -un)
	as_test_user=()
fi

# ---------------------------------------------------------------- cleanup

# Processes of the test user whose working directory is inside directory
# $1 (default: the whole scratch directory) and whose name is one our suites
# start.  A postmaster and its children always run with the data directory
# as working directory.
scratch_procs() {
	local dir=${1:-$work} pid cwd
	[[ -n "$dir" && -d "$dir" ]] || return 0
	for pid in $(pgrep -u "$test_user" -x 'postgres|postmaster|pg_ctl|psql|pgbench|isolationtester|pg_regress|pg_isolation_re|pgbouncer|redis-server' 2>/dev/null); do
		cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || continue
		case "$cwd" in
			"$dir"|"$dir"/*) echo "$pid" ;;
		esac
	done
}

# Stops every server left under directory $1 (default: the whole scratch
# directory; a suite's own: its scratch copy, so that a concurrent suite's
# servers are left alone): an immediate shutdown of each postmaster
# (SIGQUIT), then SIGKILL for whatever is left.  Prints how many processes
# it had to stop.
stop_scratch_servers() {
	local dir=${1:-$work} pids pidfile pm i n
	[[ -n "$dir" && -d "$dir" ]] || { echo 0; return 0; }
	pids=$(scratch_procs "$dir")
	n=$(echo "$pids" | grep -c .)
	if [[ -n "$pids" ]]; then
		while IFS= read -r pidfile; do
			pm=$(head -n 1 "$pidfile" 2>/dev/null)
			[[ "$pm" =~ ^[0-9]+$ ]] && kill -QUIT "$pm" 2>/dev/null
		done < <(find "$dir" -name postmaster.pid 2>/dev/null)
		for i in $(seq 50); do
			[[ -z "$(scratch_procs "$dir")" ]] && break
			sleep 0.1
		done
		pids=$(scratch_procs "$dir")
		[[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
	fi
	echo "$n"
}

# A hung test must not hang CI: each suite gets DLOCK_SUITE_TIMEOUT seconds.
# The suite stays in our process group (so Ctrl-C reaches all of it); a
# watchdog in the background kills its whole process tree when time is up
# (timeout(1) would kill only make, and tee would wait on pg_regress): every
# process under the shell that started it (this script, or the subshell of a
# concurrent suite) but the concurrent suites running meanwhile.
suite_timeout=${DLOCK_SUITE_TIMEOUT:-900}
wd_pid=""
bg_pids=()		# the concurrent suites' subshells, while they run

# Processes under $1, leaving out the subtrees rooted at $2...
tree_except() {
	local p x root=$1
	shift
	for p in $(pgrep -P "$root" 2>/dev/null); do
		for x in "$@"; do
			[[ "$p" == "$x" ]] && continue 2
		done
		tree_except "$p" "$@"
		echo "$p"
	done
}

watchdog_start() {
	local root=$BASHPID
	rm -f "$work/.timed_out.$root"
	(
		trap 'kill $sp 2>/dev/null; exit 0' TERM
		sleep "$suite_timeout" &
		sp=$!
		wait "$sp" || exit 0	# sleep killed: we are being stopped
		touch "$work/.timed_out.$root"
		me=$BASHPID
		kill -TERM $(tree_except "$root" "$me" "${bg_pids[@]}") 2>/dev/null
		for i in $(seq 50); do
			[[ -z "$(tree_except "$root" "$me" "${bg_pids[@]}")" ]] && exit 0
			sleep 0.1
		done
		kill -KILL $(tree_except "$root" "$me" "${bg_pids[@]}") 2>/dev/null
	) 9>&- &
	wd_pid=$!
}

# Stops the watchdog; true if it fired.
watchdog_stop() {
	[[ -n "$wd_pid" ]] && { kill "$wd_pid" 2>/dev/null; wait "$wd_pid" 2>/dev/null; }
	wd_pid=""
	[[ -e "$work/.timed_out.$BASHPID" ]]
}

descendants() {
	local p
	for p in $(pgrep -P "$1" 2>/dev/null); do
		descendants "$p"
		echo "$p"
	done
}

on_signal() {
	trap - INT TERM
	interrupted=1
	watchdog_stop
	echo
	echo "run-tests: interrupted by SIG$1${current:+ during $current}" >&2
	local kids
	kids=$(descendants $$)
	[[ -n "$kids" ]] && kill -TERM $kids 2>/dev/null
	sleep 0.2
	kids=$(descendants $$)
	[[ -n "$kids" ]] && kill -KILL $kids 2>/dev/null
	exit 130
}

on_exit() {
	local rc=$? n
	trap - EXIT INT TERM
	watchdog_stop
	n=$(stop_scratch_servers)
	if ((n > 0)); then
		echo "run-tests: stopped $n leftover server process(es) under $work"
	fi
	if ((interrupted)); then
		nfail=$((nfail + 1))
		echo "interrupted; logs: ${logdir:-none}"
		echo "total wall time $(secs "$t_start" "$(now)") s"
		echo "$npass passed, $nfail failed"
		exit 130
	fi
	exit "$rc"
}

trap on_exit EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

# Waits for the concurrent scripts, shows their output and records them.
finish_concurrent_suites() {
	local i name r
	for i in "${!bg_pids[@]}"; do
		name=${bg_names[$i]}
		current="suite:suites/$name.sh (concurrent)"
		wait "${bg_pids[$i]}"
		cat "$logdir/$name.console"
		r=()
		[[ -f "$work/bg/$name.result" ]] && mapfile -t r <"$work/bg/$name.result"
		((${#r[@]} >= 4)) || r=("suite:suites/$name.sh" 0 1 0 "no result (see $logdir/$name.console)")
		record "${r[@]}"
		timings[-1]+="  concurrent"
	done
	bg_pids=()
	bg_names=()
	current=""
}

finish() {
	local t n
	finish_concurrent_suites
	n=$(stop_scratch_servers)
	((n > 0)) && echo "run-tests: stopped $n leftover server process(es) under $work"
	hr "summary"
	if ((${#failed_names[@]} > 0)); then
		echo "failed:"
		printf '  %s\n' "${failed_names[@]}"
	fi
	[[ -n "$logdir" ]] && echo "logs: $logdir  (scratch copy: $scratch)"
	for t in "${timings[@]}"; do
		echo "$t"
	done
	echo "total wall time $(secs "$t_start" "$(now)") s"
	echo "$npass passed, $nfail failed"
	((nfail == 0))
	exit $?
}

# A step before the suites failed: count it as one failed test and stop.
fatal() {
	echo "run-tests: $*" >&2
	failed_names+=("$*")
	nfail=$((nfail + 1))
	finish
}

# Whether DLOCK_SUITES asks for suite $1 (all do when it is unset).
want() {
	[[ -z "${DLOCK_SUITES+set}" ]] || [[ " $DLOCK_SUITES " == *" $1 "* ]]
}

# The other versions, and which of their suites to run.
test_versions=${DLOCK_TEST_VERSIONS-17 18}
declare -A version_suites=()
for v in $test_versions; do
	for s in regress isolation; do
		want "$s@$v" && version_suites[$v]+="$s "
	done
done

# Whether a suite runs here (not only in another version's root): only then
# is dlock built and installed here.
host_suites=1
if [[ -n "${DLOCK_SUITES+set}" ]]; then
	host_suites=0
	for s in $DLOCK_SUITES; do
		[[ "$s" == *@* ]] || host_suites=1
	done
fi

# ---------------------------------------------------------------- setup, build
if [[ "${DLOCK_SKIP_SETUP:-0}" != 1 ]]; then
	hr "setup"
	bash "$top/tools/setup.sh" || fatal "tools/setup.sh failed"
fi

if ((host_suites)); then
	hr "build"
	t0=$(now)
	make -s || fatal "make failed"
	make -s install >/dev/null || fatal "make install failed (run as root, or as a user who can write to $("$PG_CONFIG" --pkglibdir))"
	timings+=("build+install $(secs "$t0" "$(now)") s")
fi

# ---------------------------------------------------------------- scratch copy
# The test user must be able to reach the scratch directory; a checkout
# under /root is not reachable by postgres, so fall back to /tmp then.
work=${DLOCK_TEST_DIR:-$top/test/tmp}
if ((${#as_test_user[@]})) && ! "${as_test_user[@]}" test -x "$top"; then
	work=${TMPDIR:-/tmp}/dlock-test-$(echo "$top" | md5sum | cut -c1-8)
	echo "run-tests: $test_user cannot reach $top; using $work"
fi
mkdir -p "$work" || fatal "cannot create $work"
work=$(cd "$work" && pwd)
chmod 755 "$work"	# the test user must enter it even under umask 077
scratch=$work/run
logdir=$work/logs

exec 9>"$work/.lock"
flock -n 9 || { work=""; scratch=""; fatal "another run-tests.sh is using $work"; }

n=$(stop_scratch_servers)
((n > 0)) && echo "run-tests: stopped $n server process(es) left by an earlier run"
rm -rf "$scratch" "$logdir" "$work/bg" || fatal "cannot remove the old $scratch"
mkdir -p "$scratch" "$logdir"
if ((host_suites)); then
	copy_checkout "$top" "$scratch" || fatal "cannot copy the checkout to $scratch"
fi
if ((${#as_test_user[@]})); then
	chown -R "$test_user:" "$scratch" "$logdir" || fatal "cannot chown $scratch"
fi
echo "scratch copy: $scratch (test user: $test_user)"

# Value of a variable of the project's Makefile (as PGXS sees it).
make_var() {
	make -s --no-print-directory -C "$scratch" --eval '__print-%: ; @echo $($*)' "__print-$1" 2>/dev/null
}

# Runs a command as the test user in the scratch copy, with a clean
# connection environment, so only the suites' own temporary servers are used.
run_as_test_user() {
	(cd "$scratch" && "${as_test_user[@]}" env \
		-u PGHOST -u PGHOSTADDR -u PGPORT -u PGDATABASE -u PGUSER \
		-u PGPASSWORD -u PGSERVICE -u PGOPTIONS -u PGDATA \
		-u LANGUAGE LC_ALL=C.UTF-8 LANG=C.UTF-8 \
		PG_CONFIG="$PG_CONFIG" \
		PATH="$("$PG_CONFIG" --bindir):$PATH" \
		PERL5LIB="$scratch/test/perl${PERL5LIB:+:$PERL5LIB}" \
		DLOCK_TOP="$scratch" \
		DLOCK_LOGDIR="$logdir" \
		"$@" 9>&-)	# the run lock (fd 9) must not live on in servers
}

# The same, as the user running this script (a suite marked to run as root).
run_as_self() {
	local as_test_user=()
	run_as_test_user "$@"
}

# record <suite> <passed> <failed> <seconds> <failed names...>
# (in a concurrent suite's subshell: into $result_file, one per line, for
# this script to record when the suite ends)
result_file=""
record() {
	local suite=$1 p=$2 f=$3 s=$4
	if [[ -n "$result_file" ]]; then
		printf '%s\n' "$@" >"$result_file"
		return
	fi
	shift 4
	npass=$((npass + p))
	nfail=$((nfail + f))
	local name
	for name in "$@"; do
		failed_names+=("$suite: $name")
	done
	timings+=("$(printf '%-28s %6s s  (%d passed, %d failed)' "$suite" "$s" "$p" "$f")")
	echo "--- $suite: $p passed, $f failed, $s s"
}

# One line per test pg_regress or pg_isolation_regress reported in log $1:
# "name ok" or "name failed".  15 prints "test name ... ok" (or FAILED, or a
# diff error such as a missing expected file; "failed (ignored)" counts as
# ok); 16 and later print TAP: "ok 3 - name 20 ms", "not ok 7 - name ...".
regress_results() {
	sed -nE \
		-e 's/^(test|     ) *([^ ]+) +\.\.\. (ok|failed \(ignored\)).*/\2 ok/p' \
		-e 't' \
		-e 's/^(test|     ) *([^ ]+) +\.\.\. .*/\2 failed/p' \
		-e 't' \
		-e 's/^ok +[0-9]+ +[-+] +([^ ]+) .*/\1 ok/p' \
		-e 't' \
		-e 's/^not ok +[0-9]+ +[-+] +([^ ]+) .*/\1 failed/p' "$1"
}

# pg_regress-style suites: one test per test that pg_regress reports.
# run_pg_regress_suite <suite> <diffs file> "<test names>" <command...>
run_pg_regress_suite() {
	local suite=$1 diffs=$2 tests=$3
	shift 3
	local log=$logdir/$suite.log t0 rc s p f names t seen
	hr "$suite"
	current=$suite
	t0=$(now)
	watchdog_start
	run_as_test_user "$@" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	watchdog_stop && echo "--- $suite timed out after $suite_timeout s" && rc=124
	s=$(secs "$t0" "$(now)")
	p=$(regress_results "$log" | grep -c ' ok$')
	mapfile -t names < <(regress_results "$log" | sed -n 's/ failed$//p')
	f=${#names[@]}
	# pg_regress stops at some errors (a missing expected file, say): the
	# tests it never reached count as failed too.
	seen=" $(regress_results "$log" | cut -d' ' -f1 | tr '\n' ' ') "
	for t in $tests; do
		if [[ "$seen" != *" $t "* ]]; then
			names+=("$t (not run)")
		fi
	done
	f=${#names[@]}
	if ((rc != 0 && f == 0)); then
		names=("suite did not run (exit status $rc)")
		f=1
	elif ((rc == 0 && p + f == 0)); then
		names=("no test results found in the output")
		f=1
	fi
	if ((f > 0)); then
		if [[ -s "$diffs" ]]; then
			echo "--- first lines of $diffs:"
			head -n 80 "$diffs"
		fi
		echo "--- full output: $log"
		[[ -e "$diffs" ]] && echo "--- diffs: $diffs"
	fi
	record "$suite" "$p" "$f" "$s" "${names[@]}"
	current=""
}

run_tap_suite() {
	local suite=tap log=$logdir/tap.log t0 rc s files p f names file base
	hr "$suite"
	current=$suite
	t0=$(now)
	watchdog_start
	# the TAP files share no port (PostgreSQL::Test::Cluster reserves each
	# one it takes) and no directory (each node's is named after its file)
	run_as_test_user make --no-print-directory installcheck REGRESS= ISOLATION= \
		PROVE_FLAGS="-j${DLOCK_PROVE_JOBS:-2}" \
		${DLOCK_PROVE_TESTS:+PROVE_TESTS="$DLOCK_PROVE_TESTS"} 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	watchdog_stop && echo "--- $suite timed out after $suite_timeout s" && rc=124
	s=$(secs "$t0" "$(now)")
	# prove: "Files=N, Tests=M, ..."; failed files are listed in the
	# "Test Summary Report" as "path (Wstat: ... Tests: ... Failed: ...)".
	files=$(sed -nE 's/^Files=([0-9]+), Tests=.*/\1/p' "$log" | tail -n 1)
	mapfile -t names < <(sed -nE 's/^([^ ]+\.pl) +\(Wstat: .*/\1/p' "$log" | sort -u)
	f=${#names[@]}
	if [[ -z "$files" ]]; then
		p=0
		names=("prove did not run (exit status $rc)")
		f=1
	else
		p=$((files - f))
		if ((rc != 0 && f == 0)); then
			names=("prove failed (exit status $rc)")
			f=1
		fi
	fi
	if ((f > 0)); then
		for file in "${names[@]}"; do
			base=$(basename "$file" .pl)
			if [[ -f "$scratch/tmp_check/log/regress_log_$base" ]]; then
				echo "--- last lines of $scratch/tmp_check/log/regress_log_$base:"
				tail -n 40 "$scratch/tmp_check/log/regress_log_$base"
			fi
		done
		echo "--- full output: $log; TAP logs (test and server): $scratch/tmp_check/log/"
	fi
	record "$suite" "$p" "$f" "$s" "${names[@]}"
	current=""
}

run_script_suite() {
	local rel=$1 suite log t0 rc s n
	suite="suite:${rel#test/}"
	log=$logdir/$(echo "${rel#test/}" | tr '/' '_').log
	hr "$suite"
	current=$suite
	t0=$(now)
	# Temporary files (and servers the script starts in mktemp -d
	# directories) go under the scratch directory, where the cleanup finds
	# them, unless that path is too long for a unix socket under it.
	local tmpd=$scratch/.tmp tmpenv=()
	if ((${#tmpd} <= 60)); then
		mkdir -p "$tmpd" && ((${#as_test_user[@]})) && chown "$test_user:" "$tmpd"
		tmpenv=(TMPDIR="$tmpd")
	fi
	# a script with the line "# run-tests: as root" runs as this script's user
	local runner=run_as_test_user
	grep -qx '# run-tests: as root' "$scratch/$rel" && runner=run_as_self
	watchdog_start
	"$runner" env "${tmpenv[@]}" "./$rel" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	watchdog_stop && echo "--- $suite timed out after $suite_timeout s" && rc=124
	s=$(secs "$t0" "$(now)")
	n=$(stop_scratch_servers "$scratch")
	((n > 0)) && echo "--- $suite left $n server process(es) running; stopped them"
	if ((rc == 0)); then
		record "$suite" 1 0 "$s"
	else
		echo "--- full output: $log"
		record "$suite" 0 1 "$s" "exit status $rc"
	fi
	current=""
}

# The suites $2... (regress, isolation) on PostgreSQL $1, in its root, by
# test/versions.sh (as root: it makes the root when missing and chroots into
# it), recorded as regress@$1 and so on from the summary of the run-tests.sh
# it runs in the root.  A version whose root, build or install failed counts
# one failed test per suite asked for.
run_version_suites() {
	local v=$1 step="versions@$1" log t0 rc s line want_s p f sf names
	shift
	log=$logdir/$step.log
	hr "$step: $*"
	current=$step
	t0=$(now)
	if [[ $(id -u) -ne 0 ]]; then
		echo "run-tests: $step needs root (it chroots into tools/root.sh's root);" \
			"run as root, or leave the other versions out with DLOCK_TEST_VERSIONS=" | tee "$log"
		rc=1
	else
		watchdog_start
		DLOCK_VERSION_SUITES="$*" bash "$top/test/versions.sh" "$v" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		watchdog_stop && echo "--- $step timed out after $suite_timeout s" && rc=124
	fi
	s=$(secs "$t0" "$(now)")
	for want_s in "$@"; do
		# "--- regress: 10 passed, 0 failed, 9.1 s" of the run in the root,
		# and its failed tests, listed as "  regress: hostile"
		line=$(grep -E "^--- $want_s: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1)
		names=()
		if [[ -z "$line" ]]; then
			p=0
			f=1
			names=("did not run (exit status $rc; see $log)")
		else
			p=$(echo "$line" | sed -E 's/^--- [^:]+: ([0-9]+) passed.*/\1/')
			f=$(echo "$line" | sed -E 's/^--- [^:]+: [0-9]+ passed, ([0-9]+) failed.*/\1/')
			mapfile -t names < <(sed -nE "s/^  $want_s: (.*)/\1/p" "$log")
			sf=$(echo "$line" | sed -E 's/.* failed, ([0-9.]+) s.*/\1/')
		fi
		record "$want_s@$v" "$p" "$f" "${sf:-$s}" "${names[@]}"
		sf=
	done
	timings+=("$(printf '%-28s %6s s  (root, build, install and the suites above)' "$step" "$s")")
	echo "--- $step: $s s in all; log: $log"
	current=""
}

# A script marked "# run-tests: concurrent" and asked for, when
# DLOCK_CONCURRENT is not 0: true.
is_concurrent() {
	[[ "${DLOCK_CONCURRENT:-1}" != 0 ]] && grep -qx '# run-tests: concurrent' "$scratch/$1"
}

# Starts each concurrent script in the background, in a copy of the
# checkout of its own ($work/bg/NAME: the cleanups after the other suites
# stop the servers under $scratch only, and its own after it those under its
# copy), with its console output in $logdir/NAME.console.
declare -A seen_script=()
bg_names=()
start_concurrent_suites() {
	local script name real dir
	for script in test/suites/*.sh; do
		[[ -f "$scratch/$script" && -x "$scratch/$script" ]] || continue
		name=$(basename "$script" .sh)
		want "$name" && is_concurrent "$script" || continue
		real=$(readlink -f "$scratch/$script")
		[[ -n "${seen_script[$real]:-}" ]] && continue
		seen_script[$real]=1
		dir=$work/bg/$name
		mkdir -p "$dir" && copy_checkout "$top" "$dir" || {
			record "suite:suites/$name.sh" 0 1 0 "cannot copy the checkout to $dir"
			continue
		}
		((${#as_test_user[@]})) && chown -R "$test_user:" "$dir"
		echo "suite:suites/$name.sh: started, runs meanwhile (output: $logdir/$name.console)"
		(
			scratch=$dir
			result_file=$work/bg/$name.result
			run_script_suite "$script"
		) >"$logdir/$name.console" 2>&1 &
		bg_pids+=($!)
		bg_names+=("$name")
	done
}

# ---------------------------------------------------------------- suites
regress_tests=$(make_var REGRESS)
if ! want regress; then
	:
elif [[ -n "$regress_tests" ]]; then
	run_pg_regress_suite regress "$scratch/regression.diffs" "$regress_tests" \
		make --no-print-directory installcheck ISOLATION= TAP_TESTS=
else
	echo "regress: no tests, skipped"
fi
n=$(stop_scratch_servers "$scratch")
((n > 0)) && echo "run-tests: stopped $n leftover server process(es)"

isolation_tests=$(make_var ISOLATION)
if ! want isolation; then
	:
elif [[ -n "$isolation_tests" ]]; then
	run_pg_regress_suite isolation "$scratch/test/isolation/output/regression.diffs" "$isolation_tests" \
		make --no-print-directory installcheck REGRESS= TAP_TESTS=
else
	echo "isolation: no tests, skipped"
fi
n=$(stop_scratch_servers "$scratch")
((n > 0)) && echo "run-tests: stopped $n leftover server process(es)"

if ! want tap; then
	:
elif [[ -n "$(make_var TAP_TESTS)" ]] && compgen -G "$scratch/test/tap/*.pl" >/dev/null; then
	run_tap_suite
else
	echo "tap: no tests, skipped"
fi
n=$(stop_scratch_servers "$scratch")
((n > 0)) && echo "run-tests: stopped $n leftover server process(es)"

start_concurrent_suites
for script in test/suites/*.sh; do
	[[ -f "$scratch/$script" && -x "$scratch/$script" ]] || continue
	want "$(basename "$script" .sh)" || continue
	real=$(readlink -f "$scratch/$script")
	[[ -n "${seen_script[$real]:-}" ]] && continue
	seen_script[$real]=1
	run_script_suite "$script"
done

for v in $test_versions; do
	[[ -n "${version_suites[$v]:-}" ]] && run_version_suites "$v" ${version_suites[$v]}
done

finish_concurrent_suites
finish
