#!/usr/bin/env bash
# tools/setup.sh: install the Debian packages that building, testing and
# benchmarking dlock need.  Idempotent: when everything is present it only
# runs dpkg-query and exits 0 in well under a second.
#
# As root it installs what is missing with apt-get (apt-get update first,
# only when something is missing).  As another user it prints the exact
# command to run and exits 1 if anything is missing.
set -euo pipefail

# Needed to build and test (make test, make demo).
required=(
	build-essential
	procps		# pgrep, used by run-tests.sh to find leftover servers
	postgresql-15
	postgresql-client-15
	postgresql-server-dev-15
	postgresql-15-cron
	libpq-dev
	libipc-run-perl
	libkrb5-dev	# PostgreSQL's libpq-be.h includes the gssapi headers
	faketime	# libfaketime: test/tap/026_clock.pl steps the servers' wall clock
	debootstrap	# tools/root.sh: the roots of PostgreSQL 17 and 18 (run-tests.sh)
)
# Used by later tests and benchmarks; cheap, so installed as well.  (On a
# host that runs systemd and has no policy-rc.d, installing the Prometheus
# packages starts their services, as any Debian service package does.)
extra=(
	gnuplot-nox
	redis-server
	pgbouncer
	python3-psycopg
	libpostgresql-jdbc-java
	prometheus-postgres-exporter	# test/suites/metrics.sh runs it with metrics/queries.yaml
	prometheus	# its promtool checks metrics/alerts.yaml
	curl		# test/suites/metrics.sh reads /metrics with it
	patroni		# test/ha/run.sh (make ha): a three-member Patroni cluster
	etcd-server	# test/ha/run.sh: Patroni's one-member etcd
	iproute2	# test/ha/run.sh: ip (veth pairs between network namespaces)
)
# make deb and make test-deb: Debian's tooling for PostgreSQL extensions, and
# debootstrap for the Debian root of each PostgreSQL version (tools/root.sh).
extra+=(
	debhelper
	dpkg-dev
	postgresql-server-dev-all	# pg_buildext, debhelper's pgxs_loop
	debootstrap
)
# The client examples' tests (test/suites/client-*.sh) compile Java and run
# Node.js with npm.  Checked by command, so that another provider counts:
# NodeSource's nodejs, for one, bundles npm and conflicts with Debian's npm.
command -v javac >/dev/null 2>&1 || extra+=(default-jdk-headless)
command -v node >/dev/null 2>&1 || extra+=(nodejs)
command -v npm >/dev/null 2>&1 || extra+=(npm)

is_installed() {
	[[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

missing=()
for pkg in "${required[@]}" "${extra[@]}"; do
	is_installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
	echo "setup: all packages present"
	exit 0
fi

# postgresql-server-dev-15 may only exist at a newer minor version (in
# bookworm-security) than the installed server.  Whenever a PostgreSQL 15
# package is installed, name the server, client and libpq packages too, so
# apt moves them to the same version together instead of leaving the
# server binaries older than the headers we compile against.
install=("${missing[@]}")
for pkg in "${missing[@]}"; do
	case "$pkg" in
		postgresql-15*|postgresql-client-15|postgresql-server-dev-15|libpq-dev)
			install+=(postgresql-15 postgresql-client-15 libpq5 libpq-dev)
			break
			;;
	esac
done
# de-duplicate, keeping order
declare -A seen=()
uniq=()
for pkg in "${install[@]}"; do
	[[ -n "${seen[$pkg]:-}" ]] && continue
	seen[$pkg]=1
	uniq+=("$pkg")
done

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${uniq[*]}"

if [[ $(id -u) -ne 0 ]]; then
	echo "setup: missing packages: ${missing[*]}" >&2
	echo "setup: not running as root, so not installing them. As root, run:" >&2
	echo "    $cmd" >&2
	exit 1
fi

echo "setup: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${uniq[@]}"

still=()
for pkg in "${missing[@]}"; do
	is_installed "$pkg" || still+=("$pkg")
done
if ((${#still[@]} > 0)); then
	echo "setup: still missing after apt-get install: ${still[*]}" >&2
	exit 1
fi

# The server and the headers must be the same minor version.
server=$(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null || true)
dev=$(dpkg-query -W -f='${Version}' postgresql-server-dev-15 2>/dev/null || true)
if [[ "$server" != "$dev" ]]; then
	echo "setup: warning: postgresql-15 is $server but postgresql-server-dev-15 is $dev" >&2
fi
echo "setup: done (postgresql-15 $server)"
