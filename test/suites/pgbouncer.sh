#!/bin/bash
# dlock through PgBouncer (Debian's) in pool_mode = transaction, with small
# pools in front of a throwaway cluster: test/clients/pgbouncer_check.py shows
# why the default owner is wrong behind the pooler and that explicit owners
# work, that blocking dlock_acquire behaves (queue, handoff, cancel,
# disconnect, timeout), the pool-size caveat for blocked waiters and its fix,
# and runs a multi-process stress whose checker proves mutual exclusion, that
# every renewal and release reached the right lease, and that nothing leaked.
#
#   runuser -u postgres -- test/suites/pgbouncer.sh      (after make install)
#
# Environment: PGBOUNCER_CLIENTS (12), PGBOUNCER_DURATION (15 s of stress),
# PGBOUNCER_SEED (default from the clock; printed), PGBOUNCER_PARTS (all:
# default-owner,blocking,exhaustion,stress).
suite=pgbouncer
source "$(dirname "${BASH_SOURCE[0]}")/../clients/lib.sh"

[ -x "$PGBOUNCER" ] || { echo "$suite: pgbouncer not found (tools/setup.sh installs it)" >&2; exit 2; }
"$PGBOUNCER" --version | head -n 1

start_cluster
start_pgbouncer \
	"app = dbname=postgres pool_size=3" \
	"app_wait = dbname=postgres pool_size=4" \
	"owner2 = dbname=postgres pool_size=2" \
	"small = dbname=postgres pool_size=2" \
	"small_wait = dbname=postgres pool_size=2"
"$PY" "$here/test/clients/pgbouncer_check.py" \
	--admin-dsn "host=$sock port=$pgport dbname=postgres" \
	--bouncer-port "$bouncer_port" --user "$app_user" --password "$app_password" \
	--workdir "$tmp" --clients "${PGBOUNCER_CLIENTS:-12}" \
	--duration "${PGBOUNCER_DURATION:-15}" \
	${PGBOUNCER_SEED:+--seed "$PGBOUNCER_SEED"} \
	${PGBOUNCER_PARTS:+--parts "$PGBOUNCER_PARTS"}
check_server_log
