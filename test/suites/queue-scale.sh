#!/bin/bash
# Queued requests at a small scale (the short mode of bench/queue.sh, make
# bench-queue): bench/queue.c with 200 client threads, 3 requests each, on
# 20 names, through PgBouncer in transaction mode with a pool of 20 server
# connections; each waiter asks dlock_enqueue again with a backoff (5 ms
# doubling up to 100 ms) until it has its token, holds the lease 1 ms and
# releases it.  Fails if the program's checker finds anything (see
# bench/queue.c): a request lost, granted twice or out of FIFO order, two
# holders at once, a token going backwards, a backend of the application
# role waiting in a dlock call or more server connections than the pool
# (pg_stat_activity sampled every 50 ms), a request dropped for its hold,
# anything left at the end; or if the server log shows a crash.  First the
# checker's self-test (queue -T): made-up histories, each with a fault it
# must find.
#
#   runuser -u postgres -- test/suites/queue-scale.sh      (after make install)
suite=queue-scale
source "$(dirname "${BASH_SOURCE[0]}")/../clients/lib.sh"

clients=200
requests=3
names=20
pool=20
bouncer_max_client_conn=$((clients + 20))

fail() { echo "$suite: FAILED: $*" >&2; exit 1; }

make -s -C "$here/bench" BUILD="$tmp" PG_CONFIG="$PG_CONFIG" "$tmp/queue" >/dev/null
# the checker finds each fault of its made-up histories
"$tmp/queue" -T || fail "the checker's self-test"
start_cluster
start_pgbouncer "app = dbname=postgres pool_size=$pool"

rc=0
PGPASSWORD=$app_password "$tmp/queue" -m queue \
	-d "host=127.0.0.1 port=$bouncer_port dbname=app user=$app_user" \
	-a "host=$sock port=$pgport dbname=postgres" -U "$app_user" -S $pool \
	-c $clients -r $requests -n $names -w 1000 -p 5 -P 100 -h 10 -t 40 -C 20 \
	-l "$tmp/requests.txt" >"$tmp/queue.log" 2>&1 || rc=$?
cat "$tmp/queue.log"
[ "$rc" = 0 ] || fail "bench/queue.c exited $rc"
grep -qx 'check ok' "$tmp/queue.log" || fail "no 'check ok' from bench/queue.c"
check_server_log
echo "$suite: PASS"
