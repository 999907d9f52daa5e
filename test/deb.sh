#!/usr/bin/env bash
# test/deb.sh (`make test-deb`): installs the Debian packages of dlock with
# dpkg -i into a clean PostgreSQL and checks them, per PostgreSQL version.
#
#   test/deb.sh [VERSION...]     default 15
#
# The packages of VERSION are those in build/pgVERSION/, built in that
# version's Debian root by `make deb PG_VERSIONS=VERSION` (make test-deb
# builds them first).  They are installed into a throwaway copy of the same
# root (tools/root.sh scratch: an overlay; the root itself, which has
# PostgreSQL VERSION and no dlock, is left as it was), where, as root:
#
#   1. dpkg -i of postgresql-VERSION-dlock and dlock-cli;
#   2. dpkg -L: the library and the control file (the checkout's) and every
#      sql/dlock--*.sql of the checkout in postgresql-VERSION-dlock, under
#      PostgreSQL VERSION's directories; /usr/bin/dlock in dlock-cli and no
#      dlock command in postgresql-VERSION-dlock; dlock --version;
#   3. a cluster made as Debian makes them (pg_createcluster, pg_ctlcluster,
#      run as the root's postgres user): CREATE EXTENSION dlock fails with
#      SQLSTATE 55000 without the preload; with shared_preload_libraries =
#      'dlock' (pg_conftool) and a restart it works, at the control file's
#      version, and gives a lease; an install of each earlier version's
#      script updates to it (ALTER EXTENSION UPDATE); the dlock command
#      takes, lists and releases a lease, and runs a command under one;
#   4. the demo, tools/demo.sh with DLOCK_DEMO_INSTALLED=1 (no build, no make
#      install), from a copy of only demo.sh and test/lib.sh, must finish;
#   5. dpkg -r removes both packages and their files.
#
# Servers listen on unix sockets in the copy only.  Needs root (chroot);
# prints one line per check, one per version, then "N passed, N failed"
# (versions) and exits non-zero if any check failed.
set -euo pipefail

# ------------------------------------------------------------ inside the copy
# deb.sh --inside VERSION EXTVERSION, in /tmp/dlock-test of the root's copy
if [[ "${1:-}" == --inside ]]; then
	v=$2 ver=$3
	cd /tmp/dlock-test
	pkg=postgresql-$v-dlock
	arch=$(dpkg --print-architecture)
	libdir=/usr/lib/postgresql/$v/lib
	extdir=/usr/share/postgresql/$v/extension
	bindir=/usr/lib/postgresql/$v/bin
	port=55433
	sockdir=/var/run/postgresql
	npass=0 nfail=0
	t0=$SECONDS

	# check DESCRIPTION CMD...: runs CMD, output in /tmp/check.out
	check() {
		local desc=$1
		shift
		if "$@" >/tmp/check.out 2>&1; then
			echo "  ok    $desc"
			npass=$((npass + 1))
		else
			echo "  FAIL  $desc"
			tail -n 25 /tmp/check.out | sed 's/^/        | /'
			nfail=$((nfail + 1))
		fi
	}
	as_pg() { runuser -u postgres -- "$@"; }
	conninfo="host=$sockdir port=$port dbname=postgres"
	cleanup() {
		as_pg "$bindir/pg_ctl" -D /tmp/dlock-test/src/.demo/data -m immediate stop >/dev/null 2>&1 || true
		pg_ctlcluster "$v" dlocktest stop -m immediate >/dev/null 2>&1 || true
	}
	trap cleanup EXIT
	trap 'exit 130' INT TERM

	# 1. install.  The roots are shared: a dlock built and installed there
	# with make install (by make test-versions, say) is removed from this
	# copy first, so that the package is installed into a clean PostgreSQL.
	stray=$(ls -d "$libdir/dlock.so" "$libdir/bitcode/dlock" "$libdir/bitcode/dlock.index.bc" \
		"$extdir"/dlock.control "$extdir"/dlock--*.sql "$bindir/dlock" 2>/dev/null || true)
	if [[ -n "$stray" ]]; then
		echo "  note  the root has a dlock installed without a package (make install); removed from this copy:"
		echo "$stray" | sed 's/^/        | /'
		# shellcheck disable=SC2086
		rm -rf $stray
	fi
	check "clean root: PostgreSQL $v ($(dpkg-query -W -f '${Version}' "postgresql-$v")), no dlock" \
		sh -c "! dpkg-query -W '$pkg' dlock-cli 2>/dev/null && [ ! -e '$libdir/dlock.so' ] && [ -x '$bindir/postgres' ]"
	check "dpkg -i ${pkg}_${ver}_$arch.deb dlock-cli_${ver}_$arch.deb" \
		dpkg -i "${pkg}_${ver}_$arch.deb" "dlock-cli_${ver}_$arch.deb"

	# 2. contents
	dpkg -L "$pkg" >/tmp/pkg.list 2>&1 || true
	dpkg -L dlock-cli >/tmp/cli.list 2>&1 || true
	listed() { grep -qxF "$2" "$1" && [ -f "$2" ]; }
	check "dpkg -L $pkg: $libdir/dlock.so" listed /tmp/pkg.list "$libdir/dlock.so"
	check "dpkg -L $pkg: $extdir/dlock.control, the checkout's" \
		sh -c "grep -qxF '$extdir/dlock.control' /tmp/pkg.list && cmp '$extdir/dlock.control' dlock.control"
	while read -r script; do
		check "dpkg -L $pkg: $extdir/$script" listed /tmp/pkg.list "$extdir/$script"
	done <scripts
	check "dpkg -L $pkg: no dlock command (it is dlock-cli's)" sh -c "! grep -q '/bin/' /tmp/pkg.list"
	check "dpkg -L dlock-cli: /usr/bin/dlock" listed /tmp/cli.list /usr/bin/dlock
	check "dlock --version: dlock $ver" sh -c "[ \"\$(dlock --version)\" = 'dlock $ver' ]"

	# 3. a Debian cluster: the steps of docs/packaging.md
	check "pg_createcluster $v dlocktest (port $port, no TCP), pg_ctlcluster start" sh -c "
		pg_createcluster -p $port $v dlocktest >/dev/null &&
		pg_conftool $v dlocktest set listen_addresses '' &&
		pg_ctlcluster $v dlocktest start"
	check "CREATE EXTENSION dlock without the preload: SQLSTATE 55000" sh -c "
		! psql_out=\$(runuser -u postgres -- $bindir/psql -X -h $sockdir -p $port -d postgres \
			-v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c 'CREATE EXTENSION dlock' 2>&1) &&
		echo \"\$psql_out\" && echo \"\$psql_out\" | grep -q 'ERROR:  55000'"
	check "pg_conftool: shared_preload_libraries = 'dlock'; pg_ctlcluster restart" sh -c "
		pg_conftool $v dlocktest set shared_preload_libraries dlock &&
		pg_ctlcluster $v dlocktest restart"
	check "CREATE EXTENSION dlock; its version is $ver" sh -c "
		out=\$(runuser -u postgres -- $bindir/psql -X -h $sockdir -p $port -d postgres -v ON_ERROR_STOP=1 -At \
			-c 'CREATE EXTENSION dlock' \
			-c \"SELECT extversion FROM pg_extension WHERE extname = 'dlock'\") &&
		echo \"\$out\" && [ \"\$(echo \"\$out\" | tail -n 1)\" = '$ver' ]"
	while read -r script; do
		from=${script#dlock--}
		from=${from%.sql}
		[[ "$from" == *--* || "$from" == "$ver" ]] && continue
		check "CREATE EXTENSION dlock VERSION '$from', ALTER EXTENSION dlock UPDATE: $ver" sh -c "
			out=\$(runuser -u postgres -- $bindir/psql -X -h $sockdir -p $port -d postgres -v ON_ERROR_STOP=1 -At \
				-c 'CREATE DATABASE update_from' &&
			runuser -u postgres -- $bindir/psql -X -h $sockdir -p $port -d update_from -v ON_ERROR_STOP=1 -At \
				-c \"CREATE EXTENSION dlock VERSION '$from'\" -c 'ALTER EXTENSION dlock UPDATE' \
				-c \"SELECT extversion FROM pg_extension WHERE extname = 'dlock'\" &&
			runuser -u postgres -- $bindir/psql -X -h $sockdir -p $port -d postgres -v ON_ERROR_STOP=1 -At \
				-c 'DROP DATABASE update_from') &&
			echo \"\$out\" && echo \"\$out\" | grep -qx '$ver'"
	done <scripts
	check "a lease by SQL: dlock_try gives a token, dlock_release frees it" sh -c "
		out=\$(runuser -u postgres -- $bindir/psql -X -h $sockdir -p $port -d postgres -v ON_ERROR_STOP=1 -At \
			-c \"SELECT dlock_try('deb-sql', '30 seconds', 'deb-test') > 0\" \
			-c \"SELECT dlock_release('deb-sql', 'deb-test')\") &&
		echo \"\$out\" && [ \"\$(echo \$out)\" = 't t' ]"
	check "dlock try / status / release against it" sh -c "
		read -r token owner <<EOF
\$(runuser -u postgres -- dlock -d '$conninfo' try --ttl 30s --owner deb-test deb-cli)
EOF
		echo \"token \$token owner \$owner\" &&
		[ \"\$owner\" = deb-test ] && [ \"\$token\" -gt 0 ] &&
		runuser -u postgres -- dlock -d '$conninfo' status deb-cli | grep -q deb-test &&
		runuser -u postgres -- dlock -d '$conninfo' release --owner deb-test --token \"\$token\" deb-cli"
	check "dlock run --no-wait: the command runs under the lease" sh -c "
		runuser -u postgres -- dlock -d '$conninfo' run --no-wait --ttl 5s deb-run -- sh -c 'test -n \"\$DLOCK_TOKEN\"'"
	check "pg_ctlcluster stop, pg_dropcluster" sh -c "
		pg_ctlcluster $v dlocktest stop && pg_dropcluster $v dlocktest"

	# 4. the demo against the package
	d0=$SECONDS
	check "tools/demo.sh with DLOCK_DEMO_INSTALLED=1 finishes, without building" sh -c "
		DLOCK_DEMO_INSTALLED=1 DLOCK_DEMO_PORT=55434 PG_CONFIG=$bindir/pg_config \
			bash src/tools/demo.sh >demo.log 2>&1 || { cat demo.log; exit 1; }
		grep -q 'Demo finished: all steps behaved as expected' demo.log || { cat demo.log; exit 1; }
		grep -q '^== Building' demo.log && { echo 'the demo built dlock'; exit 1; }
		grep -E 'dlock [0-9.]+, pg_cron|Demo finished' demo.log"
	grep -m1 -E '^ *dlock .* installed$' demo.log |
		sed -e 's/^ */        (the demo: /' -e "s/\$/, $((SECONDS - d0)) s)/" || true
	as_pg "$bindir/pg_ctl" -D /tmp/dlock-test/src/.demo/data -m fast -w stop >/dev/null 2>&1 || true

	# 5. removal
	check "dpkg -r $pkg dlock-cli: their files are gone" sh -c "
		dpkg -r '$pkg' dlock-cli >/dev/null &&
		[ ! -e '$libdir/dlock.so' ] && [ ! -e '$extdir/dlock.control' ] && [ ! -e /usr/bin/dlock ] &&
		! ls $extdir/dlock--*.sql 2>/dev/null"

	echo "  ($npass passed, $nfail failed in $((SECONDS - t0)) s)"
	((nfail == 0))
	exit
fi

# ------------------------------------------------------------ outside
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
[[ $(id -u) -eq 0 ]] || { echo "test/deb.sh: needs root (chroot into the Debian roots)" >&2; exit 2; }
ver=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" dlock.control)
arch=$(dpkg --print-architecture)
versions=("$@")
((${#versions[@]})) || versions=(15)

npass=0 nfail=0
summary=()
scratch=
trap 'if [[ -n "$scratch" ]]; then rm -rf "$scratch"; fi' EXIT
trap 'exit 130' INT TERM
for v in "${versions[@]}"; do
	start=$SECONDS
	dir=$top/build/pg$v
	pkg=$dir/postgresql-$v-dlock_${ver}_$arch.deb
	cli=$dir/dlock-cli_${ver}_$arch.deb
	echo "test-deb: PostgreSQL $v: ${pkg#"$top"/}, ${cli#"$top"/}"
	if [[ ! -f "$pkg" || ! -f "$cli" ]]; then
		echo "  FAIL  packages missing: make deb PG_VERSIONS=$v"
		summary+=("pg$v: FAILED (no packages)")
		nfail=$((nfail + 1))
		continue
	fi
	scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/dlock-test-deb.XXXXXX")
	# what the copy starts with, in its /tmp (whose mode the overlay takes
	# from here): the packages, this script, the checkout's control file and
	# the names of its scripts, and the demo with only what it sources
	in=$scratch/upper/tmp/dlock-test
	mkdir -p "$in/src/tools" "$in/src/test"
	chmod 1777 "$scratch/upper/tmp"
	cp "$pkg" "$cli" dlock.control "$in/"
	cp "${BASH_SOURCE[0]}" "$in/deb.sh"
	cp tools/demo.sh "$in/src/tools/"
	cp test/lib.sh "$in/src/test/"
	(cd sql && ls dlock--*.sql) >"$in/scripts"
	if "$top/tools/root.sh" scratch "$v" "$scratch" bash /tmp/dlock-test/deb.sh --inside "$v" "$ver"; then
		summary+=("pg$v: ok in $((SECONDS - start)) s")
		npass=$((npass + 1))
	else
		summary+=("pg$v: FAILED after $((SECONDS - start)) s")
		nfail=$((nfail + 1))
	fi
	rm -rf "$scratch"
	scratch=
done
echo
printf 'test-deb: %s\n' "${summary[@]}"
echo "$npass passed, $nfail failed"
((nfail == 0))
