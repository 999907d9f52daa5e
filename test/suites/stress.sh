#!/bin/bash
# Randomized stress test of dlock: mutual exclusion and fencing-token order,
# reader/writer exclusion on shared/exclusive names, the permits of
# semaphores, and all-or-nothing multi-locks (see test/load/stress.md).
#
# Builds test/load/dlock_stress, starts a throwaway cluster of its own
# (unix socket only, shared_preload_libraries = 'dlock') under
# test/tmp/stress.* of the checkout (socket in a short private dir in /tmp),
# runs the tool and exits with its status.  Run it as a non-root user that
# can run initdb (the harness uses postgres), after `make install` of dlock:
#
#   runuser -u postgres -- test/suites/stress.sh
#
# Environment: STRESS_SEED (default: derived from the clock, printed),
# STRESS_DURATION (15), STRESS_CLIENTS (16), STRESS_NAMES (8),
# STRESS_ARGS (extra options for dlock_stress), PG_CONFIG, DLOCK_TOP (checkout
# to use; default: this script's), DLOCK_LOGDIR (the server log is copied
# there on failure).
set -euo pipefail

srv_name=stress
# shellcheck source=test/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
seed=${STRESS_SEED:-$(( $(date +%s%N) % 1000000007 ))}
duration=${STRESS_DURATION:-15}
clients=${STRESS_CLIENTS:-16}
names=${STRESS_NAMES:-8}

srv_require
make -s -C "$here/test/load" PG_CONFIG="$PG_CONFIG" dlock_stress

srv_dirs
srv_trap
srv_initdb
srv_conf 54329 "max_connections = 100" "log_lock_waits = on"
srv_start
srv_env
"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION dlock' >/dev/null

echo "stress.sh: seed $seed (rerun with STRESS_SEED=$seed)"
rc=0
# shellcheck disable=SC2086
"$here/test/load/dlock_stress" -c "$clients" -n "$names" -t "$duration" -s "$seed" \
	${STRESS_ARGS:-} || rc=$?

# a crashed or failed-assertion backend, or a background worker that failed,
# is an engine bug even if the tool passed
if srv_log_grep 'PANIC|TRAP:|terminated by signal|was terminated|exited with exit code'; then
	echo "stress.sh: the server log shows a crash or a failed worker" >&2
	[ $rc -ne 0 ] || rc=1
fi
exit $rc
