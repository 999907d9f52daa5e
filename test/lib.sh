# test/lib.sh: what the test scripts share: PostgreSQL 15's pg_config,
# copies of the checkout, and throwaway servers.  Source it:
#
#   srv_name=stress                    # in messages and temporary names
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
#
# Sourcing sets PG_CONFIG (exported; PostgreSQL 15's unless set), bindir
# (where its programs are) and here (the checkout: $DLOCK_TOP, or the one
# this file is in).
#
#   copy_checkout SRC DEST   copies checkout SRC into DEST, without .git and
#                            what builds, tests and demos leave behind
#
# A throwaway server is a cluster of the script's own, on a unix socket
# only, with dlock preloaded; the script's exit stops it:
#
#   srv_require          exits 2 when run as root (initdb refuses root) or
#                        when dlock is not installed; messages begin with
#                        $srv_who (default: $srv_name.sh)
#   srv_dirs             $tmp: a new test/tmp/$srv_name.XXXXXX of the
#                        checkout (one in $TMPDIR when that is not writable);
#                        $sock: a short private directory in /tmp (socket
#                        paths are limited)
#   srv_trap             on EXIT: srv_on_exit (when the script defines it),
#                        srv_stop, $sock removed; then, if the script failed,
#                        the end of the server log, a copy of it in
#                        $DLOCK_LOGDIR (named $srv_log_copy, default
#                        $srv_name-server.log) and $tmp kept, else $tmp
#                        removed.  SIGINT and SIGTERM exit 130.
#   srv_initdb [OPT...]  initdb of $tmp/data: trust, UTF8, locale C; OPTs added
#   srv_conf PORT [LINE...]
#                        postgresql.conf: no TCP, the socket in $sock on PORT
#                        (also in $srv_port), dlock preloaded, fsync off, only
#                        warnings logged; then each LINE
#   srv_start, srv_stop  pg_ctl start (server log: $tmp/server.log), and
#                        immediate stop if started
#   srv_env              PGHOST, PGPORT and PGDATABASE (postgres) for that
#                        server, and no other PG* connection setting
#   srv_log_grep RE [BYTE]
#                        the lines of the server log from byte BYTE on that
#                        match RE (grep -E), to stderr; false if none

here=${DLOCK_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
if [ -z "${PG_CONFIG:-}" ]; then
	if [ -x /usr/lib/postgresql/15/bin/pg_config ]; then
		PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
	else
		PG_CONFIG=pg_config
	fi
fi
export PG_CONFIG
bindir=$("$PG_CONFIG" --bindir 2>/dev/null) || bindir=

copy_checkout() {
	tar -C "$1" \
		--exclude=./.git --exclude=./build --exclude=./test/tmp --exclude=./.demo --exclude=./.soak \
		--exclude=./tmp_regress --exclude=./tmp_iso --exclude=./tmp_check \
		--exclude=./results --exclude=./log --exclude=./test/isolation/output \
		--exclude=./regression.diffs --exclude=./regression.out \
		-cf - . | tar -C "$2" -xf -
}

srv_who=${srv_who:-${srv_name:-test}.sh}
srv_started=
srv_port=

srv_require() {
	if [ "$(id -u)" = 0 ]; then
		echo "$srv_who: initdb refuses root; run as postgres: runuser -u postgres -- $0" >&2
		exit 2
	fi
	if [ ! -f "$("$PG_CONFIG" --pkglibdir)/dlock.so" ] ||
		[ ! -f "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
		echo "$srv_who: dlock is not installed; run make && make install first" >&2
		exit 2
	fi
}

srv_dirs() {
	if mkdir -p "$here/test/tmp" 2>/dev/null && [ -w "$here/test/tmp" ]; then
		tmp=$(mktemp -d "$here/test/tmp/$srv_name.XXXXXX")
	else
		tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-$srv_name.XXXXXX")
	fi
	sock=$(mktemp -d "/tmp/dlock-$srv_name-sock.XXXXXX")
}

srv_cleanup() {
	local rc=$? copy
	trap - EXIT INT TERM
	set +e
	if declare -F srv_on_exit >/dev/null; then
		srv_on_exit
	fi
	srv_stop 2>/dev/null
	rm -rf "$sock"
	if [ $rc -ne 0 ]; then
		if [ -f "$tmp/server.log" ]; then
			echo "--- last lines of the server log ($tmp/server.log):" >&2
			tail -n 30 "$tmp/server.log" >&2
			copy=${srv_log_copy:-$srv_name-server.log}
			if [ -n "${DLOCK_LOGDIR:-}" ] && mkdir -p "$DLOCK_LOGDIR" 2>/dev/null; then
				cp "$tmp/server.log" "$DLOCK_LOGDIR/$copy" &&
					echo "--- server log copied to $DLOCK_LOGDIR/$copy" >&2
			fi
		fi
		echo "--- kept $tmp for inspection" >&2
	else
		rm -rf "$tmp"
	fi
	exit $rc
}

srv_trap() {
	trap srv_cleanup EXIT
	trap 'exit 130' INT TERM
}

srv_initdb() {
	"$bindir/initdb" -D "$tmp/data" --auth=trust --no-instructions -E UTF8 --locale=C "$@" \
		>"$tmp/initdb.log" 2>&1 ||
		{ cat "$tmp/initdb.log" >&2; exit 2; }
}

srv_conf() {
	local line
	srv_port=$1
	shift
	cat >>"$tmp/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$sock'
port = $srv_port
shared_preload_libraries = 'dlock'
fsync = off
log_min_messages = warning
# ttls of hours and days (the fuzz's) on a server that could have standbys:
# the grace's bound at the ttl limit never refuses them; no suite promotes
dlock.failover_grace = '7d'
CONF
	for line in "$@"; do
		printf '%s\n' "$line" >>"$tmp/data/postgresql.conf"
	done
}

srv_start() {
	"$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 30 start >/dev/null
	srv_started=1
}

srv_stop() {
	if [ -n "$srv_started" ]; then
		"$bindir/pg_ctl" -D "$tmp/data" -m immediate -w -t 30 stop >/dev/null
		srv_started=
	fi
}

srv_env() {
	unset PGSERVICE PGOPTIONS PGUSER PGPASSWORD PGHOSTADDR PGDATABASE
	export PGHOST="$sock" PGPORT="$srv_port" PGDATABASE=postgres
}

srv_log_grep() {
	tail -c "+$((${2:-0} + 1))" "$tmp/server.log" | grep -E "$1" >&2
}
