#!/usr/bin/env bash
# test/suites/ha-smoke.sh: the HA smoke of make test (test/ha/run.sh --smoke,
# about 5 minutes): a three-member Patroni cluster with etcd, 8 clients, one
# switchover, kill, stop and cut of the leader with synchronous_mode off, then
# on; dlock.failover_grace 15 s, client ttls 4 s and 12 s.  Passes when
# test/ha/check_test.py passes (the checker on made-up histories), every fault
# healed and test/ha/check.py found no violation (its "ha:" line ends the
# output).  The full run is make ha.
#
# It makes network namespaces, so it needs root (PostgreSQL and Patroni still
# run as postgres); run-tests.sh runs it as root because of this line:
# run-tests: as root
# It spends most of its time waiting (Patroni's failure detection, the
# graces), so run-tests.sh starts it with the first script, in a scratch copy
# of its own (test/tmp/bg/ha-smoke), and runs the other scripts and the other
# versions meanwhile:
# run-tests: concurrent
# Its files (events.log, each member's patroni.log and data directory, the
# clients' histories) are in test/tmp/ha of that copy.
set -uo pipefail

top=${DLOCK_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

if [[ $(id -u) -ne 0 ]]; then
	echo "ha-smoke: needs root (network namespaces): run make test as root," \
		"or leave this suite out by naming the others in DLOCK_SUITES" >&2
	exit 1
fi
for cmd in patroni patronictl etcd unshare nsenter ip gcc python3; do
	if ! PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH command -v "$cmd" >/dev/null; then
		echo "ha-smoke: $cmd not found; tools/setup.sh installs it" >&2
		exit 1
	fi
done

if ! unshare --net true 2>/dev/null; then
	echo "ha-smoke: cannot make a network namespace (unshare --net); in a container," \
		"run it with CAP_SYS_ADMIN and CAP_NET_ADMIN (docker run --privileged)" >&2
	exit 1
fi

# the checker first, on made-up histories: it must find what it should
python3 "$top/test/ha/check_test.py" || exit 1
exec bash "$top/test/ha/run.sh" --smoke
