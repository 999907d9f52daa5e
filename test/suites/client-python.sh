#!/bin/bash
# The Python (psycopg 3) lease-worker example, examples/python/lease_worker.py,
# run against a throwaway cluster directly and through PgBouncer in
# transaction mode; test/clients/check_lease_cycle.py checks contention and
# renewal, stopping on a NULL renewal, and DL001 for a stale token.
#
#   runuser -u postgres -- test/suites/client-python.sh      (after make install)
suite=client-python
source "$(dirname "${BASH_SOURCE[0]}")/../clients/lib.sh"

start_cluster
start_pgbouncer "app = dbname=postgres pool_size=4"
"$PY" "$here/test/clients/check_lease_cycle.py" --lang python --top "$here" \
	--python "$PY" \
	--admin-dsn "host=$sock port=$pgport dbname=postgres" \
	--pg-port "$pgport" --bouncer-port "$bouncer_port" \
	--user "$app_user" --password "$app_password"
check_server_log
