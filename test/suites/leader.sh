#!/bin/bash
# The leader-election recipe, examples/python/leader.py: four instances
# through PgBouncer (transaction mode); test/clients/check_leader.py stops,
# freezes (SIGSTOP) and kills leaders and checks that one instance leads at a
# time, that a frozen leader steps down without writing, and that the fenced
# writes of successive terms never overlap.
#
#   runuser -u postgres -- test/suites/leader.sh      (after make install)
suite=leader
source "$(dirname "${BASH_SOURCE[0]}")/../clients/lib.sh"

start_cluster
# A frozen leader must not keep its lease pinned by an open fenced
# transaction: end such transactions after a second.
psql_admin -c "ALTER ROLE $app_user SET idle_in_transaction_session_timeout = '1s'"
start_pgbouncer "app = dbname=postgres pool_size=8"
"$PY" "$here/test/clients/check_leader.py" --top "$here" --python "$PY" \
	--admin-dsn "host=$sock port=$pgport dbname=postgres" \
	--dsn "host=127.0.0.1 port=$bouncer_port dbname=app user=$app_user password=$app_password" \
	--user "$app_user" \
	--events-dsn "host=127.0.0.1 port=$pgport dbname=postgres user=$app_user password=$app_password"
check_server_log
