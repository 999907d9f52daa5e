#!/usr/bin/env bash
# tools/deb.sh (`make deb`): Debian packages of dlock, made by Debian's own
# tooling for PostgreSQL extensions (debian/: pg_buildext, debhelper's
# pgxs_loop, dpkg-buildpackage) from a copy of the checkout, so that the
# checkout is left as it was.
#
#   tools/deb.sh              on this machine, for the PostgreSQL versions
#                             Debian supports on it (pg_buildext
#                             supported-versions: 15 on Debian 12); the
#                             packages go to build/
#   tools/deb.sh 15 17 18     each version in its Debian root (tools/root.sh,
#                             made first when missing; needs root); the
#                             packages go to build/pgNN/, one line per version
#
# Packages (VERSION is default_version in dlock.control, as is the Makefile's
# EXTVERSION; the copy's debian/changelog gets an entry for it on top when
# its last entry is another version):
#   postgresql-NN-dlock_VERSION_ARCH.deb   the extension for PostgreSQL NN:
#                                          library, bitcode, control file and
#                                          every script the Makefile's DATA
#                                          lists (all of sql/dlock--*.sql)
#   dlock-cli_VERSION_ARCH.deb             the dlock command, /usr/bin/dlock
#   *-dbgsym_VERSION_ARCH.deb              their debugging symbols
#   dlock_VERSION_ARCH.buildinfo, .changes
# Earlier packages in the same directory are removed, also when the build
# fails.  Nothing else is left in build/: the copy is made in build/.work.*
# (or, in a root, in its /tmp) and removed; a failed build's log is kept in
# $TMPDIR (/tmp).
#
# Environment: DLOCK_ROOTS (tools/root.sh), DEB_BUILD_OPTIONS (dpkg-buildpackage).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
export LC_ALL=C.UTF-8 LANG=C.UTF-8

die() { echo "deb: $*" >&2; exit 1; }
work=
trap 'if [[ -n "$work" ]]; then rm -rf "$work"; fi' EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------ version
# dlock.control's default_version (the Makefile's EXTVERSION is read from it)
ver=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" dlock.control)
[[ -n "$ver" ]] || die "no default_version in dlock.control"

# debian/copyright's License paragraph must be LICENSE, line for line
if ! diff -u LICENSE <(awk '
		FNR == NR { if ($0 == "License: PostgreSQL") last = FNR; next }
		last && FNR > last { if (/^ /) print; else exit }
	' debian/copyright debian/copyright | sed -e 's/^ //' -e 's/^\.$//') >&2; then
	die "debian/copyright's License paragraph differs from LICENSE (above); copy LICENSE into it, each line indented by one space, empty lines as ' .'"
fi

# ------------------------------------------------------------ the copy
# stage DEST: the checkout's source files into DEST: those git tracks and
# those it does not ignore, as they are in the work tree (edits included);
# without git, the whole checkout but for what builds and tests leave
# (dpkg-buildpackage's clean step removes stale objects).  Then, when
# debian/changelog's last entry is not VERSION, an entry for it on top.
stage() {
	local dest=$1
	mkdir -p "$dest"
	if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		(
			cd "$top"
			git ls-files -z -c -o --exclude-standard |
				while IFS= read -r -d '' f; do
					[[ -e "$f" || -L "$f" ]] && printf '%s\0' "$f"
				done |
				tar --null -T - -cf -
		) | tar -C "$dest" -xf -
	else
		# shellcheck source=test/lib.sh
		source "$top/test/lib.sh"
		copy_checkout "$top" "$dest"
	fi
	local last trailer
	last=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' "$dest/debian/changelog")
	if [[ "$last" != "$ver" ]]; then
		trailer=$(grep -m1 '^ -- ' "$dest/debian/changelog" | sed 's/>  .*/>/')
		{
			printf 'dlock (%s) unstable; urgency=medium\n\n' "$ver"
			printf '  * Version %s of the extension (see CHANGELOG.md); built from the\n' "$ver"
			printf '    checkout, the last packaged version being %s.\n\n' "$last"
			printf '%s  %s\n\n' "$trailer" "$(date -R)"
			cat "$dest/debian/changelog"
		} >"$dest/changelog.new"
		mv "$dest/changelog.new" "$dest/debian/changelog"
	fi
}

# clear DIR: removes the packages, .buildinfo and .changes of an earlier
# build from DIR, so that what is there is the last build's, or nothing
clear() {
	rm -f "$1"/*.deb "$1"/*.ddeb "$1"/*.buildinfo "$1"/*.changes
}

# collect FROM TO: moves the packages, .buildinfo and .changes from FROM to
# TO (cleared first); prints their names and sizes
collect() {
	local from=$1 to=$2 f
	mkdir -p "$to"
	clear "$to"
	for f in "$from"/*.deb "$from"/*.ddeb "$from"/*.buildinfo "$from"/*.changes; do
		[[ -e "$f" ]] || continue
		mv "$f" "$to/"
		printf '  %-58s %6s kB\n' "${to#"$top"/}/${f##*/}" "$(( ($(stat -c %s "$to/${f##*/}") + 1023) / 1024 ))"
	done
}

# failed WORK NAME SECONDS: the end of WORK's build log, the whole of it
# kept in $TMPDIR, WORK removed
failed() {
	local work=$1 name=$2 secs=$3 keep
	keep=${TMPDIR:-/tmp}/dlock-deb-$name.log
	cp "$work/build.log" "$keep" 2>/dev/null || true
	rm -rf "$work"
	echo "deb: $name: FAILED after $secs s; the end of the build log (all of it: $keep):" >&2
	tail -n 25 "$keep" >&2 || true
}

# debian/control from control.in for the versions supported here, then the
# binary packages.  Build dependencies are checked without the implicit
# build-essential: the roots have gcc, make and libc6-dev but not g++, which
# dlock does not need.
build_script='cd "$1" && pg_buildext updatecontrol && dpkg-checkbuilddeps -I &&
	dpkg-buildpackage -b -us -uc --no-check-builddeps'

# ------------------------------------------------------------ on this machine
if (($# == 0)); then
	for cmd in dpkg-buildpackage dh pg_buildext; do
		command -v "$cmd" >/dev/null ||
			die "$cmd is missing: tools/setup.sh installs it (packages debhelper, dpkg-dev, postgresql-server-dev-all)"
	done
	[[ -e /usr/share/perl5/Debian/Debhelper/Sequence/pgxs_loop.pm ]] ||
		die "debhelper's pgxs_loop is missing: apt-get install postgresql-server-dev-all"
	# (debian/pgversions and what Debian supports here)
	versions=$(pg_buildext supported-versions | xargs)
	[[ -n "$versions" ]] || die "no PostgreSQL version in debian/pgversions is supported here"
	echo "deb: building dlock $ver for PostgreSQL $versions on this machine"
	start=$SECONDS
	mkdir -p build
	work=$(mktemp -d "$top/build/.work.XXXXXX")
	stage "$work/dlock-$ver"
	if ! sh -c "$build_script" sh "$work/dlock-$ver" >"$work/build.log" 2>&1; then
		failed "$work" host $((SECONDS - start))
		clear "$top/build"
		exit 1
	fi
	echo "deb: built in $((SECONDS - start)) s:"
	collect "$work" "$top/build"
	rm -rf "$work"
	exit 0
fi

# ------------------------------------------------------------ in roots
[[ $(id -u) -eq 0 ]] || die "building in the Debian roots needs root (chroot)"
nfail=0
summary=()
for v in "$@"; do
	[[ "$v" =~ ^[0-9]+$ ]] || die "not a PostgreSQL major version: $v"
	start=$SECONDS
	if ! root=$("$top/tools/root.sh" path "$v"); then
		summary+=("pg$v: FAILED (no root)")
		nfail=$((nfail + 1))
		continue
	fi
	suite=$(cat "$root/etc/debian_version")
	echo "deb: building dlock $ver for PostgreSQL $v in $root (Debian $suite)"
	work=$(mktemp -d "$root/tmp/dlock-deb.XXXXXX")
	stage "$work/dlock-$ver"
	# only version v, whatever else the root's Debian supports
	if ! "$top/tools/root.sh" exec "$v" env PG_SUPPORTED_VERSIONS="$v" \
		sh -c "$build_script" sh "${work#"$root"}/dlock-$ver" >"$work/build.log" 2>&1; then
		failed "$work" "pg$v" $((SECONDS - start))
		clear "$top/build/pg$v"
		summary+=("pg$v: FAILED after $((SECONDS - start)) s (log: ${TMPDIR:-/tmp}/dlock-deb-pg$v.log)")
		nfail=$((nfail + 1))
		continue
	fi
	echo "deb: pg$v built in $((SECONDS - start)) s:"
	collect "$work" "$top/build/pg$v"
	rm -rf "$work"
	if [[ -e "$top/build/pg$v/postgresql-$v-dlock_${ver}_$(dpkg --print-architecture).deb" ]]; then
		summary+=("pg$v: ok in $((SECONDS - start)) s (Debian $suite): build/pg$v/")
	else
		summary+=("pg$v: FAILED: no postgresql-$v-dlock package was made")
		nfail=$((nfail + 1))
	fi
done
echo
printf 'deb: %s\n' "${summary[@]}"
echo "deb: $(($# - nfail)) built, $nfail failed"
((nfail == 0))
