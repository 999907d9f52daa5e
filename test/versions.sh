#!/usr/bin/env bash
# test/versions.sh [VERSION...]: dlock built, installed and tested on each
# PostgreSQL major version, each in a Debian root of its own (`make
# test-versions`; test/run-tests.sh runs it for regress and isolation on 17
# and 18).
#
# For each version (default: 15 17 18):
#  1. tools/root.sh path VERSION: the root, made when missing (about a
#     minute with Debian's archive reachable);
#  2. the checkout, without .git and what builds and tests leave, is put at
#     /build/dlock of a throwaway copy of the root (tools/root.sh scratch: an
#     overlay whose changes go to test/tmp/versions/pgVERSION/upper, in
#     namespaces of its own, so that the root is left as it was and nothing
#     the suites start outlives them);
#  3. there, as root, `make clean` (objects built for another version go),
#     then test/run-tests.sh with that version's pg_config: make, make
#     install into the copy's PostgreSQL, and the suites as postgres, each
#     counted as run-tests.sh counts them:
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
# Needs root (debootstrap, chroot, overlay mounts), as tools/root.sh does.
# What a version's run left stays until its next run: the output in
# test/tmp/versions/pgVERSION.log, and under test/tmp/versions/pgVERSION/
# upper/build/dlock/test/tmp the logs (logs/) and the scratch copy the
# suites ran in (run/; a path /build/... in the output is there).
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
#   DLOCK_VERSIONS_DIR    where the runs' changes and output go (default
#                         test/tmp/versions of the checkout)
#   DLOCK_ROOTS, DLOCK_MIRROR  where roots live, the Debian mirror
#                         (tools/root.sh)
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# copy_checkout
# shellcheck source=test/lib.sh
source "$top/test/lib.sh"

base=${DLOCK_VERSIONS_DIR:-$top/test/tmp/versions}
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
	local v=$1 dir log t0 out rc ver parts s t st named
	t0=$(now)
	p=0
	f=1
	printf '\n##### PostgreSQL %s: %s\n' "$v" "$suites"
	if ! "$top/tools/root.sh" path "$v" >/dev/null; then
		line="PostgreSQL $v: the root could not be made (tools/root.sh path $v)"
		return
	fi
	# the overlay's changes, the copy of the checkout among them; the last
	# run's are removed first
	dir=$base/pg$v
	log=$base/pg$v.log
	rm -rf "$dir" "$log" && mkdir -p "$dir/upper/build/dlock" &&
		copy_checkout "$top" "$dir/upper/build/dlock" || {
		line="PostgreSQL $v: could not copy the checkout to $dir"
		return
	}
	ver=$("$top/tools/root.sh" exec "$v" "/usr/lib/postgresql/$v/bin/pg_config" --version)
	"$top/tools/root.sh" scratch "$v" "$dir" env \
		PG_CONFIG="/usr/lib/postgresql/$v/bin/pg_config" \
		DLOCK_SKIP_SETUP=1 DLOCK_TEST_VERSIONS= DLOCK_SUITES="$suites" \
		FUZZ_DURATION="${FUZZ_DURATION:-30}" FUZZ_SEEDS="${FUZZ_SEEDS:-random}" \
		${DLOCK_PROVE_TESTS:+DLOCK_PROVE_TESTS="$DLOCK_PROVE_TESTS"} \
		${DLOCK_SUITE_TIMEOUT:+DLOCK_SUITE_TIMEOUT="$DLOCK_SUITE_TIMEOUT"} \
		sh -c 'make -s -C /build/dlock clean >/dev/null && exec bash /build/dlock/test/run-tests.sh' \
		2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
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
		line+=" (failed: $(sed -n '/^failed:$/,/^[^ ]/s/^  //p' "$log" | paste -sd ';' -); log: $log; paths under /build there are in $dir/upper)"
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
