#!/usr/bin/env bash
# tools/root.sh: Debian roots with one PostgreSQL major version each, to
# build, test and package dlock on versions this machine does not run.
#
#   tools/root.sh path VERSION          prints the root's directory, making
#                                       the root first when it is missing
#   tools/root.sh exec VERSION CMD...   runs CMD as root inside it (chroot,
#                                       with /proc, /dev and /dev/shm of the
#                                       host in a private mount namespace, so
#                                       nothing stays mounted after CMD)
#   tools/root.sh scratch VERSION DIR CMD...
#                                       runs CMD as root in a throwaway copy
#                                       of the root: an overlay whose changes
#                                       go to DIR/upper (files put there
#                                       before appear in it), in private
#                                       mount and PID namespaces (whatever
#                                       CMD started ends with it); the root
#                                       is left as it was; the caller
#                                       removes DIR
#   tools/root.sh list                  the versions it knows and their suites
#
# VERSION is a PostgreSQL major version: 15 (Debian 12, bookworm), 17
# (Debian 13, trixie) or 18 (Debian unstable, sid).  Debian has no
# PostgreSQL 16 package in any of these suites.
#
# Roots live in $DLOCK_ROOTS (default /var/cache/dlock/roots), outside any
# checkout, one directory per version; a root is made only when missing
# (debootstrap --variant=minbase, then apt-get of PostgreSQL's server, its
# headers, pg_cron and the tools the tests and `make deb` use), which takes
# a minute or two per version with Debian's archive reachable.  A root is
# complete once its file .dlock-root-ready exists; an interrupted make is
# started over.  Needs root privileges, debootstrap and unshare.
set -euo pipefail

roots=${DLOCK_ROOTS:-/var/cache/dlock/roots}
mirror=${DLOCK_MIRROR:-http://deb.debian.org/debian}

suite_of() {
	case "$1" in
		15) echo bookworm ;;
		17) echo trixie ;;
		18) echo sid ;;
		*) echo "root.sh: no Debian suite known for PostgreSQL $1 (known: 15 17 18)" >&2
		   return 1 ;;
	esac
}

# Runs "$@" chrooted into $1, mounts private to this command.
in_root() {
	local dir=$1
	shift
	unshare --mount --propagation private -- /bin/sh -c '
		dir=$1; shift
		mount -t proc proc "$dir/proc" &&
		mount --rbind /dev "$dir/dev" &&
		exec chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
	' in_root "$dir" "$@"
}

# Runs "$@" chrooted into an overlay of root $1 whose changes go to $2/upper,
# in private mount and PID namespaces: when "$@" ends, so does every process
# it started, and the overlay is gone with the namespace.
in_scratch() {
	local dir=$1 scratch=$2
	shift 2
	mkdir -p "$scratch/upper" "$scratch/work" "$scratch/root"
	unshare --mount --pid --fork --propagation private -- /bin/sh -c '
		dir=$1 scratch=$2; shift 2
		mount -t overlay overlay \
			-o "lowerdir=$dir,upperdir=$scratch/upper,workdir=$scratch/work" "$scratch/root" &&
		mount -t proc proc "$scratch/root/proc" &&
		mount --rbind /dev "$scratch/root/dev" &&
		exec chroot "$scratch/root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
	' in_scratch "$dir" "$scratch" "$@"
}

make_root() {
	local ver=$1 suite dir tmp apt_opts=()
	suite=$(suite_of "$ver")
	dir=$roots/pg$ver
	[[ -e "$dir/.dlock-root-ready" ]] && return 0
	[[ $(id -u) -eq 0 ]] || { echo "root.sh: making a root needs root privileges" >&2; return 1; }
	command -v debootstrap >/dev/null || {
		echo "root.sh: debootstrap is missing (apt-get install debootstrap)" >&2
		return 1
	}
	mkdir -p "$roots"
	exec 8>"$roots/.pg$ver.lock"
	flock 8
	if [[ -e "$dir/.dlock-root-ready" ]]; then
		exec 8>&-
		return 0
	fi
	echo "root.sh: making the PostgreSQL $ver root ($suite) in $dir" >&2
	tmp=$dir.new
	rm -rf "$tmp"
	debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$roots/pg$ver.debootstrap.log" 2>&1 || {
		echo "root.sh: debootstrap failed; see $roots/pg$ver.debootstrap.log" >&2
		return 1
	}
	# unstable's Release file may have expired in the archive this machine sees
	[[ "$suite" == sid ]] && apt_opts=(-o Acquire::Check-Valid-Until=false)
	# postgresql-common must not make a "main" cluster when the server installs
	mkdir -p "$tmp/etc/postgresql-common"
	echo "create_main_cluster = false" >"$tmp/etc/postgresql-common/createcluster.conf"
	in_root "$tmp" apt-get "${apt_opts[@]}" -q update >"$roots/pg$ver.apt.log" 2>&1 &&
	in_root "$tmp" apt-get "${apt_opts[@]}" -q install -y --no-install-recommends \
		"postgresql-$ver" "postgresql-server-dev-$ver" "postgresql-$ver-cron" \
		postgresql-server-dev-all debhelper dpkg-dev fakeroot \
		gcc make libc6-dev libkrb5-dev libpq-dev libipc-run-perl \
		procps faketime ca-certificates >>"$roots/pg$ver.apt.log" 2>&1 || {
		echo "root.sh: apt-get in the root failed; see $roots/pg$ver.apt.log" >&2
		return 1
	}
	in_root "$tmp" apt-get clean
	touch "$tmp/.dlock-root-ready"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	exec 8>&-
	echo "root.sh: PostgreSQL $ver root ready" >&2
}

cmd=${1:-}
case "$cmd" in
	path)
		[[ $# -eq 2 ]] || { echo "usage: root.sh path VERSION" >&2; exit 2; }
		make_root "$2"
		echo "$roots/pg$2"
		;;
	exec)
		[[ $# -ge 3 ]] || { echo "usage: root.sh exec VERSION CMD..." >&2; exit 2; }
		ver=$2
		shift 2
		make_root "$ver"
		in_root "$roots/pg$ver" "$@"
		;;
	scratch)
		[[ $# -ge 4 ]] || { echo "usage: root.sh scratch VERSION DIR CMD..." >&2; exit 2; }
		ver=$2 scratch=$3
		shift 3
		make_root "$ver"
		in_scratch "$roots/pg$ver" "$scratch" "$@"
		;;
	list)
		for v in 15 17 18; do
			state=missing
			[[ -e "$roots/pg$v/.dlock-root-ready" ]] && state="ready in $roots/pg$v"
			echo "$v $(suite_of "$v") $state"
		done
		;;
	*)
		sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
		exit 2
		;;
esac
