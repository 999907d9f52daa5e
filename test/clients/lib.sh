# test/clients/lib.sh: shared set-up for the client and pooler suites
# (test/suites/pgbouncer.sh, client-*.sh, leader.sh).  Source it; it gives:
#
#   start_cluster          throwaway PostgreSQL 15 with dlock preloaded: the
#                          superuser (the OS user) over a unix socket in a
#                          private /tmp dir ($sock, port $pgport), and on
#                          127.0.0.1:$pgport the application role $app_user,
#                          not a superuser, with password $app_password (scram)
#   start_pgbouncer [ini lines for [databases]...]
#                          PgBouncer in pool_mode = transaction on
#                          127.0.0.1:$bouncer_port for $app_user (same
#                          password; also its admin console, db pgbouncer)
#   psql_admin ...         psql as the superuser over the unix socket
#
# Everything lives under $tmp (test/tmp/<suite>.XXXXXX of the checkout) and is
# stopped by the EXIT trap; on failure the logs are copied to $DLOCK_LOGDIR.
# Run as a user that can run initdb (postgres), after `make install`.
# The server is test/lib.sh's throwaway server, with TCP on 127.0.0.1 too.
set -euo pipefail

suite=${suite:?set suite= before sourcing lib.sh}
srv_name=$suite
srv_who=$suite
# shellcheck source=test/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# Debian's python3 (python3-psycopg is installed for it), not a pyenv shim.
PY=${DLOCK_PYTHON:-/usr/bin/python3}
PGBOUNCER=${PGBOUNCER:-$(command -v pgbouncer || echo /usr/sbin/pgbouncer)}

srv_require
srv_dirs
chmod 700 "$sock"
app_user=dlock_app
app_password=$($PY -c 'import secrets; print(secrets.token_hex(12))')
bouncer_pid=
bg_pids=()

# A free TCP port on the loopback interface (the kernel picks it).
free_port() {
	$PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

lib_cleanup() {
	local rc=$? p f
	trap - EXIT INT TERM
	for p in "${bg_pids[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	if [ -n "$bouncer_pid" ]; then
		kill -TERM "$bouncer_pid" 2>/dev/null || true
		wait "$bouncer_pid" 2>/dev/null || true
	fi
	srv_stop 2>/dev/null || true
	rm -rf "$sock"
	if [ $rc -ne 0 ]; then
		for f in "$tmp"/*.log; do
			[ -f "$f" ] || continue
			echo "--- last lines of $f:" >&2
			tail -n 25 "$f" >&2
		done
		if [ -n "${DLOCK_LOGDIR:-}" ] && mkdir -p "$DLOCK_LOGDIR" 2>/dev/null; then
			for f in "$tmp"/*.log; do
				[ -f "$f" ] && cp "$f" "$DLOCK_LOGDIR/$suite-$(basename "$f")"
			done
			echo "--- logs copied to $DLOCK_LOGDIR/$suite-*.log" >&2
		fi
		echo "--- kept $tmp for inspection" >&2
		echo "$suite: FAILED (exit status $rc)" >&2
	else
		rm -rf "$tmp"
	fi
	exit $rc
}
trap lib_cleanup EXIT
trap 'exit 130' INT TERM

psql_admin() {
	"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$pgport" -d postgres "$@"
}

# start_cluster [postgresql.conf lines...]
start_cluster() {
	pgport=$(free_port)
	srv_initdb --auth-local=trust --auth-host=scram-sha-256
	srv_conf "$pgport" "listen_addresses = '127.0.0.1'" "max_connections = 100" \
		"log_line_prefix = '%m [%p] '" "$@"
	srv_start
	psql_admin -c 'CREATE EXTENSION dlock' >/dev/null
	psql_admin -v pw="$app_password" >/dev/null <<SQL
CREATE ROLE $app_user LOGIN PASSWORD :'pw';
-- the views are not readable by PUBLIC (dlock 1.0)
GRANT SELECT ON dlock_locks, dlock_waiters TO $app_user;
SQL
}

# start_pgbouncer "alias = dbname=postgres pool_size=2" ...
# Without arguments, one database "app" (dbname postgres, pool of 4).
# Every database entry points at the cluster's unix socket.  It accepts
# $bouncer_max_client_conn client connections (default 200).
start_pgbouncer() {
	local db
	bouncer_port=$(free_port)
	printf '"%s" "%s"\n' "$app_user" "$app_password" >"$tmp/userlist.txt"
	chmod 600 "$tmp/userlist.txt"
	{
		echo "[databases]"
		if [ $# -eq 0 ]; then
			set -- "app = dbname=postgres pool_size=4"
		fi
		for db in "$@"; do
			echo "$db host=$sock port=$pgport"
		done
		cat <<INI
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $tmp/userlist.txt
admin_users = $app_user
pool_mode = transaction
default_pool_size = 4
max_client_conn = ${bouncer_max_client_conn:-200}
server_round_robin = 0
query_wait_timeout = 60
; the JDBC driver sends extra_float_digits at startup
ignore_startup_parameters = extra_float_digits
logfile = $tmp/pgbouncer.log
pidfile = $tmp/pgbouncer.pid
INI
	} >"$tmp/pgbouncer.ini"
	# cwd under the scratch copy, so run-tests.sh finds it if we die
	(cd "$tmp" && exec "$PGBOUNCER" -q "$tmp/pgbouncer.ini") &
	bouncer_pid=$!
	local i
	for i in $(seq 100); do
		if PGPASSWORD=$app_password "$bindir/psql" -X -q -h 127.0.0.1 -p "$bouncer_port" \
			-U "$app_user" -d pgbouncer -c 'SHOW VERSION' >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$bouncer_pid" 2>/dev/null || { echo "$suite: pgbouncer exited" >&2; exit 2; }
		sleep 0.1
	done
	echo "$suite: pgbouncer did not accept connections on port $bouncer_port" >&2
	exit 2
}

# A crashed or failed-assertion backend is an engine bug even if the checks
# passed.
check_server_log() {
	if srv_log_grep 'PANIC|TRAP:|terminated by signal|exited with exit code'; then
		echo "$suite: the server log shows a crash" >&2
		return 1
	fi
}
