#!/usr/bin/env bash
# bench/churn.sh: how many dead rows dlock_leases gathers under churn, with
# the lease table's settings of dlock 1.0 (PostgreSQL's autovacuum defaults)
# beside those of the current version, side by side at the same time.
#
#   make churn                      (as root: make install first, then this)
#   runuser -u postgres -- bench/churn.sh     (dlock already installed)
#
# Two throwaway clusters (unix sockets, fsync off, autovacuum at PostgreSQL's
# defaults: naptime 1 min), one with CREATE EXTENSION dlock VERSION '1.0',
# one with the current version; each gets CHURN_CLIENTS pgbench clients
# running durable dlock_try + dlock_release on random names (the cycle of
# make bench) for CHURN_MINUTES.  Every 10 s it samples pg_stat_user_tables
# and the table's sizes while the load runs; at the end it prints, per
# version, cycles per second, the highest and the median dead-row count,
# autovacuum runs and the largest heap and index.  Samples: $DLOCK_LOGDIR or /tmp, churn-<version>.tsv.
#
# Environment: CHURN_MINUTES (10), CHURN_CLIENTS (4), CHURN_NAPTIME
# (autovacuum_naptime, default PostgreSQL's 1min), PG_CONFIG.
set -euo pipefail

minutes=${CHURN_MINUTES:-10}
naptime=${CHURN_NAPTIME:-1min}
clients=${CHURN_CLIENTS:-4}
out=${DLOCK_LOGDIR:-/tmp}

if [ "$(id -u)" = 0 ]; then
	exec runuser -u postgres -- env CHURN_MINUTES="$minutes" CHURN_CLIENTS="$clients" CHURN_NAPTIME="$naptime" \
		DLOCK_LOGDIR="$out" ${PG_CONFIG:+PG_CONFIG="$PG_CONFIG"} bash "$0" "$@"
fi

# one side: churn.sh --side VERSION PORT
if [ "${1:-}" = --side ]; then
	version=$2
	srv_name=churn-$version
	# shellcheck source=test/lib.sh
	source "$(dirname "${BASH_SOURCE[0]}")/../test/lib.sh"
	srv_require
	srv_dirs
	srv_trap
	srv_initdb
	srv_conf "$3" "max_connections = 50" "autovacuum_naptime = '$naptime'"
	srv_start
	srv_env
	if [ "$version" = current ]; then
		"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION dlock'
	else
		"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION dlock VERSION '$version'"
	fi
	"$bindir/psql" -X -At -c "SELECT 'dlock ' || extversion || ', dlock_leases options: ' ||
		coalesce(array_to_string(reloptions, ' '), 'none')
		FROM pg_extension, pg_class WHERE extname = 'dlock' AND relname = 'dlock_leases'"
	"$bindir/pgbench" -n -M prepared -c "$clients" -j "$clients" -T "$((minutes * 60))" \
		-f "$here/bench/scripts/dlock.sql" >"$tmp/pgbench.out" 2>&1 &
	bench=$!
	tsv=$out/churn-$version.tsv
	echo -e "seconds\tdead\tlive\theap_bytes\tindex_bytes\tautovacuums" >"$tsv"
	start=$(date +%s)
	while sleep 10 && kill -0 "$bench" 2>/dev/null; do
		"$bindir/psql" -X -At -F $'\t' -c "SELECT $(($(date +%s) - start)), n_dead_tup, n_live_tup,
			pg_relation_size(relid), pg_indexes_size(relid), autovacuum_count
			FROM pg_stat_user_tables WHERE relname = 'dlock_leases'" >>"$tsv" || true
	done
	wait "$bench"
	cycles=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$tmp/pgbench.out")
	# samples under load only: dead rows (highest, median), sizes (highest)
	sort -t$'\t' -k2,2n <(tail -n +2 "$tsv") | awk -F'\t' -v v="$version" -v c="$cycles" -v m="$minutes" '
		{ dead[NR] = $2; if ($4 > heap) heap = $4; if ($5 > idx) idx = $5; if ($6 > av) av = $6 }
		END {
			printf "%-8s %7.0f cycles/s   dead rows: highest %8d, median %8d   autovacuums %3d   highest heap %6.1f MB, index %6.1f MB\n",
				v, c / (m * 60), dead[NR], dead[int((NR + 1) / 2)], av, heap / 1048576, idx / 1048576
		}'
	exit 0
fi

echo "churn: $clients clients per version for $minutes min, both versions at once, autovacuum_naptime $naptime"
bash "$0" --side 1.0 54381 >"$out/churn-1.0.out" 2>&1 &
a=$!
bash "$0" --side current 54382 >"$out/churn-current.out" 2>&1 &
b=$!
rc=0
wait "$a" || rc=1
wait "$b" || rc=1
cat "$out/churn-1.0.out" "$out/churn-current.out"
exit $rc
