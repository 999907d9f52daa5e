#!/bin/bash
# The Node.js (node-postgres) lease-worker example, examples/node/, with pg
# installed from the npm registry by `npm ci` (examples/node/package-lock.json)
# into a copy under the suite's scratch directory, run against a throwaway
# cluster directly and through PgBouncer in transaction mode;
# test/clients/check_lease_cycle.py checks contention and renewal, stopping
# on a NULL renewal, and DL001 for a stale token.
#
#   runuser -u postgres -- test/suites/client-node.sh      (after make install)
suite=client-node
source "$(dirname "${BASH_SOURCE[0]}")/../clients/lib.sh"

for cmd in node npm; do
	command -v "$cmd" >/dev/null ||
		{ echo "$suite: $cmd not found (tools/setup.sh installs nodejs and npm)" >&2; exit 2; }
done
echo "node $(node --version), npm $(npm --version 2>/dev/null)"
mkdir -p "$tmp/node" "$tmp/home"
cp "$here/examples/node/package.json" "$here/examples/node/package-lock.json" \
	"$here/examples/node/lease_worker.js" "$tmp/node/"
# npm's cache and config under the scratch directory, not the caller's HOME.
(cd "$tmp/node" && HOME=$tmp/home npm_config_cache=$tmp/npm-cache npm_config_update_notifier=false \
	npm ci --no-audit --no-fund --loglevel=error --userconfig "$tmp/home/.npmrc") ||
	{ echo "$suite: npm ci failed (is the npm registry reachable?)" >&2; exit 1; }
node -e 'console.log("pg " + require(process.argv[1] + "/node_modules/pg/package.json").version)' "$tmp/node"

start_cluster
start_pgbouncer "app = dbname=postgres pool_size=4"
"$PY" "$here/test/clients/check_lease_cycle.py" --lang node --top "$here" \
	--node-dir "$tmp/node" \
	--admin-dsn "host=$sock port=$pgport dbname=postgres" \
	--pg-port "$pgport" --bouncer-port "$bouncer_port" \
	--user "$app_user" --password "$app_password"
check_server_log
