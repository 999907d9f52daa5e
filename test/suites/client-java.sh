#!/bin/bash
# The Java (JDBC) lease-worker example, examples/java/LeaseWorker.java,
# compiled with javac against Debian's /usr/share/java/postgresql.jar and run
# against a throwaway cluster over TCP, directly and through PgBouncer in
# transaction mode; test/clients/check_lease_cycle.py checks contention and
# renewal, stopping on a NULL renewal, and DL001 for a stale token.
#
#   runuser -u postgres -- test/suites/client-java.sh      (after make install)
suite=client-java
source "$(dirname "${BASH_SOURCE[0]}")/../clients/lib.sh"

jar=${DLOCK_JDBC_JAR:-/usr/share/java/postgresql.jar}
for cmd in javac java; do
	command -v "$cmd" >/dev/null ||
		{ echo "$suite: $cmd not found (tools/setup.sh installs default-jdk-headless)" >&2; exit 2; }
done
[ -f "$jar" ] || { echo "$suite: $jar not found (libpostgresql-jdbc-java)" >&2; exit 2; }
javac -version
javac -Xlint:all -Werror -d "$tmp/classes" -cp "$jar" "$here/examples/java/LeaseWorker.java"

start_cluster
start_pgbouncer "app = dbname=postgres pool_size=4"
"$PY" "$here/test/clients/check_lease_cycle.py" --lang java --top "$here" \
	--java-classes "$tmp/classes" --jdbc-jar "$jar" \
	--admin-dsn "host=$sock port=$pgport dbname=postgres" \
	--pg-port "$pgport" --bouncer-port "$bouncer_port" \
	--user "$app_user" --password "$app_password"
check_server_log
