#!/bin/bash
# The worker-fleet example, examples/python/queue_fleet.py, through PgBouncer
# in transaction mode with a pool of 3 server connections: 60 workers, 2 jobs
# each, on 4 customers, queued with dlock_enqueue.  Checks: every job done
# (exit 0), one fenced row per job, per customer the rows' tokens grow in the
# order they were written (one holder at a time: a write under an older
# token after a newer one was fenced would be refused); requests were
# queued (dlock_stats.queued sampled above 0) while no server backend ever
# waited in a dlock call (no app backend in an Extension wait) and the app
# never had more than the pool's 3 server connections; at the end nothing
# is held or queued.
#
#   runuser -u postgres -- test/suites/queue-fleet.sh      (after make install)
suite=queue-fleet
source "$(dirname "${BASH_SOURCE[0]}")/../clients/lib.sh"

workers=60
jobs=2
customers=4
pool=3

start_cluster
start_pgbouncer "app = dbname=postgres pool_size=$pool"
psql_admin >/dev/null <<SQL
CREATE TABLE job_progress (
    id bigserial PRIMARY KEY,
    job text NOT NULL,
    step int NOT NULL,
    token bigint NOT NULL,
    worker text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp());
GRANT SELECT, INSERT ON job_progress TO $app_user;
GRANT USAGE ON SEQUENCE job_progress_id_seq TO $app_user;
SQL

fail() { echo "$suite: FAILED: $*" >&2; exit 1; }

# the sampler: app server connections, app backends waiting in an extension
# wait (a blocked dlock call), queued requests; one line each 20 ms
rm -f "$tmp/stop-sampler"
(
	while [ ! -e "$tmp/stop-sampler" ]; do
		psql_admin -At -F ' ' -c "SELECT
			(SELECT count(*) FROM pg_stat_activity WHERE usename = '$app_user' AND backend_type = 'client backend'),
			(SELECT count(*) FROM pg_stat_activity WHERE usename = '$app_user' AND wait_event_type = 'Extension'),
			(SELECT queued FROM dlock_stats)" || true
		sleep 0.02
	done
) >"$tmp/samples.txt" &
sampler=$!
bg_pids+=($sampler)

rc=0
# its log lines are counted below: each must be written whole
"$PY" "$here/test/clients/check_example_logs.py" "$here/examples/python" || fail "an example's log() splits its lines"
PGPASSWORD=$app_password "$PY" "$here/examples/python/queue_fleet.py" \
	--dsn "host=127.0.0.1 port=$bouncer_port dbname=app user=$app_user" \
	--workers $workers --jobs $jobs --customers $customers --work 0.02 --poll 0.1 \
	--hold 5 --timeout 60 >"$tmp/fleet.log" 2>&1 || rc=$?
touch "$tmp/stop-sampler"
wait "$sampler" || true
tail -n 1 "$tmp/fleet.log"
[ "$rc" = 0 ] || { tail -n 20 "$tmp/fleet.log" >&2; fail "queue_fleet.py exited $rc"; }

n=$(psql_admin -At -c "SELECT count(*) FROM job_progress")
[ "$n" = $((workers * jobs)) ] || fail "$n rows in job_progress, expected $((workers * jobs))"
[ "$(grep -c ' released=true$' "$tmp/fleet.log")" = $((workers * jobs)) ] || fail "not every job released its lease"
bad=$(psql_admin -At -c "SELECT count(*) FROM (SELECT token, lag(token) OVER (PARTITION BY job ORDER BY written_at, id) AS prev
	FROM job_progress) s WHERE token <= prev")
[ "$bad" = 0 ] || fail "$bad rows written after a row of the same customer with a token not below theirs"
echo "ok - $n jobs, one fenced row each; per customer, tokens grow in write order"

read -r max_conns max_ext max_queued nsamples < <(awk '
	{ if ($1 > c) c = $1; if ($2 > e) e = $2; if ($3 > q) q = $3; n++ }
	END { print c + 0, e + 0, q + 0, n + 0 }' "$tmp/samples.txt")
((nsamples > 0)) || fail "no pg_stat_activity sample"
((max_queued > 0)) || fail "no queued request was ever seen ($nsamples samples): the test did not queue"
((max_ext == 0)) || fail "an app backend waited in a dlock call ($max_ext at once)"
((max_conns <= pool)) || fail "$max_conns app server connections at once, pool is $pool"
echo "ok - $nsamples samples: up to $max_queued requests queued, at most $max_conns app server connections (pool $pool), no backend waiting in dlock"

left=$(psql_admin -At -c "SELECT (SELECT count(*) FROM dlock_locks) || ' ' || (SELECT count(*) FROM dlock_waiters) || ' ' || (SELECT queued FROM dlock_stats)")
[ "$left" = "0 0 0" ] || fail "left at the end (leases, waiters, queued): $left"
echo "ok - nothing held or queued at the end"
check_server_log
echo "$suite: PASS"
