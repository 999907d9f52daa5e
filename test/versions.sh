#!/usr/bin/env bash
# test/versions.sh [VERSION...]: dlock built, installed and tested on each
# PostgreSQL major version, each in a Debian root of its own (`make
# test-versions`; test/run-tests.sh runs it for regress and isolation on 17
# and 18).
#
# For each version (default: 15 17 18):
#  1. tools/root.sh path VERSION: the root, made when missing (a minute or
#     two with Debian's archive reachable);
#  2. the checkout, without .git and what builds and tests leave, is copied
#     to /build/dlock in the root, where `make clean` drops objects built
#     for another version;
#  3. test/run-tests.sh runs in the root (chroot, as root, with that
#     version's pg_config): make, make install into the root's PostgreSQL,
#     then the suites as postgres, each counted as run-tests.sh counts them:
#       regress    every pg_regress test (one each)
#       isolation  every isolation spec (one each)
#       tap        every test/tap/*.pl (one each), the crash (020_crash) and
#                  standby promotion (021_promote) tests among them
#       fuzz       test/suites/fuzz.sh: one run of FUZZ_DURATION seconds
#                  (default 30), then the restart check (one test)
#  4. one summary line per version.
# The last line is "N passed, N failed" over every version; a version whose
# root could not be made, or whose build or install failed, counts as one
# failed test.  Exit status 0 only if nothing failed.
#
# Needs root (debootstrap, chroot), as tools/root.sh does.  Logs stay in
# the root: ROOT/build/dlock/test/tmp/logs, the scratch copy the suites ran
# in next to it (ROOT/build/dlock/test/tmp/run).
#
# Environment:
#   DLOCK_VERSIONS        versions when none are given (default "15 17 18")
#   DLOCK_VERSION_SUITES  suites to run in each (default
#                         "regress isolation tap fuzz"; any of run-tests.sh's
#                         DLOCK_SUITES but the @VERSION ones)
#   FUZZ_DURATION         seconds of the fuzz run (30); FUZZ_SEEDS: its seed
#                         (default: one from the clock, printed)
#   DLOCK_PROVE_TESTS     TAP files to run instead of all (e.g.
#                         "test/tap/020_crash.pl test/tap/021_promote.pl")
#   DLOCK_SUITE_TIMEOUT   seconds for each suite in the root (default 900)
#   DLOCK_ROOTS, DLOCK_MIRROR  where roots live, the Debian mirror
#                         (tools/root.sh)
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# copy_checkout
# shellcheck source=test/lib.sh
source "$top/test/lib.sh"

versions=("$@")
((${#versions[@]})) || read -r -a versions <<<"${DLOCK_VERSIONS:-15 17 18}"
suites=${DLOCK_VERSION_SUITES:-regress isolation tap fuzz}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }

if [[ $(id -u) -ne 0 ]]; then
	echo "versions.sh: needs root (it makes Debian roots and chroots into them)" >&2
	echo "0 passed, ${#versions[@]} failed"
	exit 1
fi

npass=0
nfail=0
summaries=()
t_all=$(now)

# Runs one version; sets p, f and line.
test_version() {
	local v=$1 root dir log t0 out rc ver parts s t st named
	t0=$(now)
	p=0
	f=1
	printf '\n##### PostgreSQL %s: %s\n' "$v" "$suites"
	if ! root=$("$top/tools/root.sh" path "$v"); then
		line="PostgreSQL $v: the root could not be made (tools/root.sh path $v)"
		return
	fi
	dir=$root/build/dlock
	mkdir -p "$root/build"
	# one run at a time per root (make test-versions and CI may meet here)
	exec 7>"$root/build/.dlock.lock"
	if ! flock -n 7; then
		echo "versions.sh: another run is using $dir; waiting"
		flock 7
	fi
	rm -rf "$dir" && mkdir -p "$dir" && copy_checkout "$top" "$dir" || {
		exec 7>&-
		line="PostgreSQL $v: could not copy the checkout to $dir"
		return
	}
	ver=$("$top/tools/root.sh" exec "$v" "/usr/lib/postgresql/$v/bin/pg_config" --version 7>&-)
	log=$dir.log
	# (7>&-: servers the suites start must not keep the lock)
	"$top/tools/root.sh" exec "$v" make -s -C /build/dlock clean \
		PG_CONFIG="/usr/lib/postgresql/$v/bin/pg_config" >/dev/null 7>&-
	"$top/tools/root.sh" exec "$v" env \
		PG_CONFIG="/usr/lib/postgresql/$v/bin/pg_config" \
		DLOCK_SKIP_SETUP=1 DLOCK_TEST_VERSIONS= DLOCK_SUITES="$suites" \
		FUZZ_DURATION="${FUZZ_DURATION:-30}" FUZZ_SEEDS="${FUZZ_SEEDS:-random}" \
		${DLOCK_PROVE_TESTS:+DLOCK_PROVE_TESTS="$DLOCK_PROVE_TESTS"} \
		${DLOCK_SUITE_TIMEOUT:+DLOCK_SUITE_TIMEOUT="$DLOCK_SUITE_TIMEOUT"} \
		bash /build/dlock/test/run-tests.sh 7>&- 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	exec 7>&-
	s=$(secs "$t0" "$(now)")
	out=$(tail -n 1 "$log")
	if [[ "$out" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
		p=${BASH_REMATCH[1]}
		f=${BASH_REMATCH[2]}
		((rc != 0 && f == 0)) && f=1
	fi
	# "--- tap: 13 passed, 0 failed, 250.1 s" of each suite
	parts=$(sed -nE 's/^--- ([^ ]+): ([0-9]+) passed, ([0-9]+) failed, .*/\1 \2 \3/p' "$log" |
		while read -r name sp sf; do
			name=${name#suite:suites/}
			printf '%s %d/%d, ' "${name%.sh}" "$sp" $((sp + sf))
		done)
	# the crash and promotion tests by name, when TAP ran them
	named=
	for t in 020_crash 021_promote; do
		st=$(sed -nE "s#^test/tap/$t\.pl \.+ ([^,]*).*#\1#p" "$log" | tail -n 1)
		[[ -n "$st" ]] && named+="${named:+, }$t $st"
	done
	[[ -n "$named" ]] && parts=$(echo "$parts" | sed -E "s#(tap [0-9]+/[0-9]+)#\1 ($named)#")
	line="${ver:-PostgreSQL $v}: ${parts:-no suite ran (exit status $rc)}"
	line="${line%, }; $p passed, $f failed in $s s"
	if ((f > 0)); then
		line+=" (failed: $(sed -n '/^failed:$/,/^[^ ]/s/^  //p' "$log" | paste -sd ';' -); log: $log; paths under /build there are in $root)"
	fi
}

for v in "${versions[@]}"; do
	test_version "$v"
	npass=$((npass + p))
	nfail=$((nfail + f))
	summaries+=("$line")
done

printf '\n##### summary\n'
for line in "${summaries[@]}"; do
	echo "$line"
done
echo "total wall time $(secs "$t_all" "$(now)") s"
echo "$npass passed, $nfail failed"
((nfail == 0))
