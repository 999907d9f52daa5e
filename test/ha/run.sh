#!/usr/bin/env bash
# test/ha/run.sh: dlock under a real failover manager (make ha, ~14 min; its
# --smoke is part of make test: test/suites/ha-smoke.sh, ~5 min).
#
# A one-member etcd (Debian etcd-server) and a three-member Patroni cluster
# (Debian patroni, PostgreSQL 15, dlock preloaded on every member), under
# load from 8 clients (test/ha/client.c), through faults:
#
#   switchover  patronictl switchover (Patroni picks the candidate)
#   kill        SIGKILL of every process of the leader: postmaster, backends
#               and Patroni (the member dies; killing the postmaster alone
#               makes Patroni restart it in place as primary, a crash restart
#               rather than a failover); its Patroni starts again once
#               another member leads
#   stop        SIGSTOP of every process of the leader (Patroni, postmaster,
#               backends) for ttl + 8 s, then SIGCONT.  Patroni 3.0.2's etcd3
#               _update_leader() puts the leader key unconditionally once its
#               lease has expired (fixed upstream by patroni PR 2689): the
#               thawed leader often takes the key back from the member just
#               promoted, which is rewound, and its timeline id is reused by
#               the next promotion (two histories issue the same tokens)
#   cut         the leader's only network link goes down for ttl + 8 s: it
#               can reach neither etcd, nor the other members, nor the clients
#               (nor they it), then comes back
# After kill, stop and cut the old primary rejoins as a standby with pg_rewind
# (use_pg_rewind: true).  Every member runs with dlock.failover_grace = 50 s,
# above the clients' longest ttl (45 s) (--smoke: 15 s and 12 s): a promoted
# member (any fault, a switchover too) grants no new lease for that long; the
# clients read dlock_grace() after every connect, and the harness waits for
# the grace's end after every fault, so that each fault's grace is measured
# alone.  After every fault the harness waits, at most HEAL
# seconds, until the cluster has healed (test/ha/heal.py, read from
# PostgreSQL on every member: one primary, the DCS leader; both others stream
# from it on its timeline, rewound if need be, and have caught up), else it
# fails naming the member and what did not heal.
# The whole sequence runs twice: with Patroni's synchronous_mode off, then on
# (patronictl edit-config).  test/ha/check.py then reads the history of every
# call and the final rows and prints one line:
#   ha: <F> failovers, <S> switchovers, <G> grants, <W> fenced writes, <V> violations
# and exits non-zero if V > 0, after a line per fault (unavailability, leases
# kept, the grace: its end, and from the first grant it refused to the first
# new token).
#
# Network: everything runs in network namespaces this script makes (nothing
# touches the host's network).  The script re-executes itself in a new network
# namespace, the hub, which runs etcd (on 10.78.0.1, an address of the hub's
# own loopback device), the clients and patronictl.  Each member runs in a
# network namespace of its own, joined to the hub by one veth pair (member i
# is 10.78.i.2, the hub's end 10.78.i.1; the hub forwards between them).
# The addresses exist only inside these namespaces.  A cut is the hub's end
# of the leader's veth pair set down.
#
# All processes and files live under test/tmp/ha (DLOCK_HA_DIR); on every
# exit (normal, error, Ctrl-C, kill) every process of the member namespaces,
# etcd and the clients are killed, and the namespaces vanish with them.
# Runs as root (namespaces); PostgreSQL and Patroni run as postgres.
# Run it inside your dlock build's environment (make install first).
#
# usage: test/ha/run.sh [--smoke | --two-holders] [--no-grace]
#   (default)      every fault twice with synchronous_mode off, once with it
#                  on: 3 of each kind (each fault now lasts its grace too;
#                  ~14 min)
#   --smoke        one fault of each kind per replication mode, with
#                  dlock.failover_grace 15 s and client ttls 4 s and 12 s
#                  (~5 min; make test runs it: test/suites/ha-smoke.sh)
#   --two-holders  the focused scenario of issue 28 (~2 min): the leader's
#                  walsenders stop (SIGSTOP), c1 takes a lease for 45 s on
#                  the leader, the leader is killed, Patroni promotes a
#                  replica, c2 tries the same name (NULL during the grace),
#                  then acquires it (waits out the grace); 0 violations
#   --no-grace     dlock.failover_grace = 0 (no grace): --two-holders then
#                  reports c2's grant while c1 holds (two holders)
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=full
grace=1
for arg in "$@"; do
	case "$arg" in
		--smoke) mode=smoke ;;
		--two-holders) mode=two-holders ;;
		--no-grace) grace=0 ;;
		*) echo "usage: $0 [--smoke | --two-holders] [--no-grace]" >&2; exit 2 ;;
	esac
done
# dlock.failover_grace in seconds, above the clients' longest ttl (LONG_TTL).
# The smoke's are shorter, so each fault is: its grace must still outlast a
# stop (TTL + 8 s) counted from the promotion (at least TTL - LOOP_WAIT after
# the SIGSTOP), so that a thawed leader that takes the leader key back (the
# Patroni 3.0.2 bug above) does so while the member just promoted has granted
# no new lease: 15 s leaves at least 6 s
if [[ $mode == smoke ]]; then
	GRACE=15 LONG_TTL=12
else
	GRACE=50 LONG_TTL=45
fi
((grace)) || GRACE=0

if [[ $(id -u) -ne 0 ]]; then
	echo "ha: must run as root (it makes network namespaces)" >&2
	exit 2
fi
# Re-execute in a network namespace of our own (the hub); --kill-child takes
# the hub's processes down with unshare if this script is killed outright.
if [[ -z "${DLOCK_HA_HUB:-}" ]]; then
	exec env DLOCK_HA_HUB=1 unshare --net --fork --kill-child -- bash "$0" "$@"
fi

# Debian's python3 (psycopg, Patroni), not another found first in PATH
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
D=${DLOCK_HA_DIR:-$top/test/tmp/ha}
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
TTL=20 LOOP_WAIT=1 RETRY_TIMEOUT=4	# Patroni's minimums: ttl 20, loop_wait 1, retry_timeout 3
HEAL=90	# seconds a fault's aftermath may take to heal
NAMES=(a b c)
NCLIENTS=8
conninfo="host=10.78.1.2,10.78.2.2,10.78.3.2 port=5432,5432,5432 dbname=postgres user=postgres target_session_attrs=read-write connect_timeout=2 tcp_user_timeout=3000 keepalives_idle=2 keepalives_interval=1 keepalives_count=2"
PCTL=(patronictl -c "$D/m1/patroni.yml")

declare -a holder
old=""	# the leader the last fault hit
etcd_pid=""
client_pids=()
t0=$(date +%s)

log() { printf '[%4ds] %s\n' $(($(date +%s) - t0)) "$*" | tee -a "$D/events.log"; }
die() { log "FAILED: $*"; exit 1; }
# a fault event for the checker: mono wall kind member
event() { python3 -c 'import sys, time; print("%.6f %.6f %s %s" % (time.monotonic(), time.time(), sys.argv[1], sys.argv[2]))' "$1" "$2" >>"$D/faults"; }

# every process in the network namespace of member $1
member_procs() {
	local ns pid
	ns=$(readlink "/proc/${holder[$1]}/ns/net" 2>/dev/null) || return 0
	for pid in $(ls /proc | grep -E '^[0-9]+$'); do
		[[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) == "$ns" ]] && echo "$pid"
	done
}

cleanup() {
	local rc=$? i p
	trap - EXIT INT TERM HUP
	for p in "${client_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	for i in 1 2 3; do
		[[ -n "${holder[$i]:-}" ]] || continue
		for p in $(member_procs "$i"); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
	done
	[[ -n "$etcd_pid" ]] && kill -KILL "$etcd_pid" 2>/dev/null
	wait 2>/dev/null
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ------------------------------------------------------------ network
rm -rf "$D"; mkdir -p "$D"; chown postgres: "$D"
: >"$D/faults"
ip link set lo up
ip addr add 10.78.0.1/32 dev lo
echo 1 >/proc/sys/net/ipv4/ip_forward
for i in 1 2 3; do
	unshare --net sleep infinity &
	holder[$i]=$!
	disown
	sleep 0.1
	ip link add "h$i" type veth peer name "m$i"
	ip link set "m$i" netns "${holder[$i]}"
	ip addr add "10.78.$i.1/24" dev "h$i"
	ip link set "h$i" up
	nsenter -t "${holder[$i]}" --net sh -c "ip link set lo up && ip addr add 10.78.$i.2/24 dev m$i && ip link set m$i up && ip route add default via 10.78.$i.1" || die "network of m$i"
done

# ------------------------------------------------------------ etcd
setsid etcd --name e1 --data-dir "$D/etcd" \
	--listen-client-urls http://10.78.0.1:2379 --advertise-client-urls http://10.78.0.1:2379 \
	--listen-peer-urls http://10.78.0.1:2380 --initial-advertise-peer-urls http://10.78.0.1:2380 \
	--initial-cluster e1=http://10.78.0.1:2380 >"$D/etcd.log" 2>&1 &
etcd_pid=$!
disown

# ------------------------------------------------------------ patroni
for i in 1 2 3; do
	mkdir -p "$D/m$i"
	cat >"$D/m$i/patroni.yml" <<YML
scope: dlockha
namespace: /dlockha/
name: m$i
log: {level: INFO}
restapi: {listen: "10.78.$i.2:8008", connect_address: "10.78.$i.2:8008"}
etcd3: {hosts: ["10.78.0.1:2379"]}
bootstrap:
  dcs:
    ttl: $TTL
    loop_wait: $LOOP_WAIT
    retry_timeout: $RETRY_TIMEOUT
    maximum_lag_on_failover: 16777216
    synchronous_mode: false
    postgresql:
      use_pg_rewind: true
      # a pg_rewind cut short (its source lost mid-copy) leaves the data
      # directory unusable (pg_dlock.tokens among others, truncated to 0
      # bytes); Patroni then clones the member anew
      remove_data_directory_on_rewind_failure: true
      use_slots: true
      parameters:
        shared_preload_libraries: dlock
        wal_log_hints: "on"
        max_connections: 40
        shared_buffers: 32MB
        wal_keep_size: 256MB
        max_wal_senders: 8
        max_replication_slots: 8
        hot_standby: "on"
        fsync: "off"
        # a cut leader's shutdown (Patroni demotes it) waits for its
        # walsenders to deliver the shutdown checkpoint: without a short
        # timeout it hangs for a minute and Patroni 3.0.2 then runs pg_rewind
        # (and removes the data directory) under a postmaster still running
        wal_sender_timeout: 5s
        wal_receiver_timeout: 5s
        # no new grant for this long after a promotion (issue 28): every
        # lease the failover may have lost has ended by then
        dlock.failover_grace: ${GRACE}s
  initdb: [{encoding: UTF8}, {locale: C}]
  pg_hba:
    - local all all trust
    - host replication replicator 10.78.0.0/16 trust
    - host all all 10.78.0.0/16 trust
postgresql:
  listen: "10.78.$i.2:5432"
  connect_address: "10.78.$i.2:5432"
  data_dir: $D/m$i/data
  bin_dir: $BIN
  pgpass: $D/m$i/pgpass
  authentication:
    superuser: {username: postgres, password: dlock}
    replication: {username: replicator, password: dlock}
    rewind: {username: postgres, password: dlock}
  parameters:
    unix_socket_directories: "$D/m$i"
tags: {nofailover: false, noloadbalance: false, clonefrom: false, nosync: false}
YML
done
chown -R postgres: "$D"

start_member() {
	nsenter -t "${holder[$1]}" --net runuser -u postgres -- setsid patroni "$D/m$1/patroni.yml" >>"$D/m$1/patroni.log" 2>&1 &
	disown
}

# member number of the current leader (empty if none)
leader() {
	"${PCTL[@]}" list -f json 2>/dev/null | python3 -c '
import json,sys
for m in json.load(sys.stdin):
    if m["Role"]=="Leader" and m["State"]=="running": print(m["Member"][1:])' 2>/dev/null
}

# waits until there is a leader (the checks at the end)
wait_leader() {
	local deadline=$(($(date +%s) + $1))
	while (($(date +%s) < deadline)); do
		[[ -n "$(leader)" ]] && return 0
		sleep 1
	done
	return 1
}

# waits (at most $1 s) until the cluster has healed (test/ha/heal.py: one
# primary, the DCS leader; both others stream from it on its timeline and
# have caught up); $2 names the old leader; dies naming what did not heal
heal() {
	local out
	out=$(python3 "$top/test/ha/heal.py" "$1" "${2:-}" 2>&1)
	local rc=$?
	log "$out"
	if ((rc != 0)); then
		"${PCTL[@]}" list >>"$D/events.log" 2>&1
		die "the cluster did not heal ${3:-}"
	fi
}

psql_leader() {
	"$BIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$conninfo" "$@"
}

log "starting etcd and 3 Patroni members under $D"
for i in 1 2 3; do start_member "$i"; sleep 1; done
heal 180 "" "at start"
log "cluster up, leader m$(leader)"

psql_leader <<'SQL' || die "setup SQL"
CREATE EXTENSION dlock;
CREATE TABLE ha_a (token bigint NOT NULL, seq bigint NOT NULL, writer text);
CREATE TABLE ha_b (token bigint NOT NULL, seq bigint NOT NULL, writer text);
CREATE TABLE ha_c (token bigint NOT NULL, seq bigint NOT NULL, writer text);
INSERT INTO ha_a VALUES (0, 0, NULL); INSERT INTO ha_b VALUES (0, 0, NULL); INSERT INTO ha_c VALUES (0, 0, NULL);
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON ha_a FOR EACH ROW EXECUTE FUNCTION dlock_fenced('a', 'token');
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON ha_b FOR EACH ROW EXECUTE FUNCTION dlock_fenced('b', 'token');
CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON ha_c FOR EACH ROW EXECUTE FUNCTION dlock_fenced('c', 'token');
SQL

gcc -O2 -Wall -Wextra -Werror -Wno-unused-parameter -I"$("$PG_CONFIG" --includedir)" \
	-o "$D/client" "$top/test/ha/client.c" -L"$("$PG_CONFIG" --libdir)" -lpq || die "client build"

# ------------------------------------------------------------ faults
set_sync() {
	"${PCTL[@]}" edit-config --force -s "synchronous_mode=$1" >/dev/null 2>&1 || die "edit-config synchronous_mode=$1"
	event "sync_$1" -
	log "synchronous_mode: $1"
	sleep 3
	heal "$HEAL" "" "after synchronous_mode=$1"
}

# the postmaster's pid of member $1
postmaster_pid() { head -1 "$D/m$1/data/postmaster.pid" 2>/dev/null; }

fault_switchover() {
	local l
	l=$(leader); [[ -n "$l" ]] || die "no leader"
	old=$l
	# no candidate: Patroni picks one (under synchronous_mode, the sync standby)
	log "switchover from m$l"
	event switchover "m$l"
	"${PCTL[@]}" switchover --leader "m$l" --force >>"$D/events.log" 2>&1 ||
		log "switchover refused (see events.log)"
}

fault_kill() {
	local l
	l=$(leader); [[ -n "$l" ]] || die "no leader"
	old=$l
	fault_kill_only "$l"
	wait_for_new_leader "$l"
	log "m$l starts again (pg_rewind)"
	event rejoin "m$l"
	start_member "$l"
}

fault_stop() {
	local l p
	l=$(leader); [[ -n "$l" ]] || die "no leader"
	old=$l
	log "stop: SIGSTOP of every process of m$l for $((TTL + 8)) s"
	event stop "m$l"
	for p in $(member_procs "$l"); do [[ $p != "${holder[$l]}" ]] && kill -STOP "$p"; done
	sleep $((TTL + 8))
	for p in $(member_procs "$l"); do kill -CONT "$p"; done
	log "m$l continues"
	event rejoin "m$l"
}

fault_cut() {
	local l
	l=$(leader); [[ -n "$l" ]] || die "no leader"
	old=$l
	log "cut: m$l's link down for $((TTL + 8)) s"
	event cut "m$l"
	ip link set "h$l" down
	sleep $((TTL + 8))
	ip link set "h$l" up
	ip addr add "10.78.$l.1/24" dev "h$l" 2>/dev/null
	log "m$l's link up"
	event rejoin "m$l"
}

wait_for_new_leader() {
	local old=$1 deadline=$(($(date +%s) + 90)) l
	while (($(date +%s) < deadline)); do
		l=$(leader)
		[[ -n "$l" && "$l" != "$old" ]] && { log "new leader m$l"; event promoted "m$l"; return 0; }
		sleep 1
	done
	die "no new leader after m$old"
}

# waits until the leader's grace (after a promotion) has ended, so that
# every fault's grace is measured alone; at most GRACE + HEAL seconds
wait_grace() {
	local deadline=$(($(date +%s) + GRACE + HEAL)) g first=""
	while (($(date +%s) < deadline)); do
		g=$(psql_leader -c "SELECT coalesce(dlock_grace()::text, 'none')" 2>/dev/null)
		[[ -z "$first" && -n "$g" ]] && { first=$g; log "grace on the leader: until $g"; }
		[[ $g == none ]] && return 0
		sleep 1
	done
	die "the grace after the $1 of m$old did not end"
}

after_fault() {
	heal "$HEAL" "m$old" "after the $1 of m$old"
	wait_grace "$1"
	sleep 3
}

start_clients() {
	local secs=$1 i ttl
	for ((i = 1; i <= NCLIENTS; i++)); do
		# half churn short leases, half hold leases longer than a failover
		if ((i <= NCLIENTS / 2)); then ttl=4; else ttl=$LONG_TTL; fi
		setsid "$D/client" "$i" "$conninfo" "$D/history.c$i" "$secs" "$ttl" "${NAMES[@]}" 2>>"$D/clients.err" &
		client_pids+=($!)
		echo "c$i $ttl" >>"$D/clients"
	done
}

stop_clients() {
	local p
	for p in "${client_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${client_pids[@]}"; do wait "$p" 2>/dev/null; done
	client_pids=()
}

two_holders() {
	local l i p
	l=$(leader)
	echo "c1 45" >"$D/clients"; echo "c2 45" >>"$D/clients"
	log "two-holders: the leader m$l stops sending WAL (SIGSTOP of its walsenders)"
	for p in $(member_procs "$l"); do
		grep -qa 'walsender' "/proc/$p/cmdline" 2>/dev/null && kill -STOP "$p"
	done
	sleep 1
	# one grant by c1 on the leader, recorded like the clients' calls
	python3 "$top/test/ha/call.py" "$D/history.c1" c1 a 45 "$conninfo" try || die "c1's grant"
	log "c1's grant: $(tail -1 "$D/history.c1")"
	fault_kill_only "$l"
	wait_for_new_leader "$l"
	# a try (NULL during a grace), then an acquire that waits out the grace
	python3 "$top/test/ha/call.py" "$D/history.c2" c2 a 45 "$conninfo" try ||
		python3 "$top/test/ha/call.py" "$D/history.c2" c2 a 45 "$conninfo" acquire
	log "c2's grant: $(tail -1 "$D/history.c2")"
}

# SIGKILL of every process of member $1 (Patroni, postmaster, backends)
fault_kill_only() {
	local p
	log "kill: SIGKILL of every process of m$1 (postmaster $(postmaster_pid "$1"), Patroni)"
	event kill "m$1"
	for p in $(member_procs "$1"); do [[ $p != "${holder[$1]}" ]] && kill -KILL "$p" 2>/dev/null; done
}

# ------------------------------------------------------------ run
# rounds of every fault with synchronous_mode off, then on; each fault now
# lasts its grace too, so the full run has 3 of each kind, not 4
case $mode in
	full) rounds_false=2 rounds_true=1 ;;
	smoke) rounds_false=1 rounds_true=1 ;;
	two-holders) rounds_false=0 rounds_true=0 ;;
esac
log "mode $mode; dlock.failover_grace: ${GRACE}s; client ttls 4 s and $LONG_TTL s"

if [[ $mode == two-holders ]]; then
	two_holders
else
	start_clients 100000
	sleep 5
	for sync in false true; do
		[[ $sync == true ]] && set_sync true
		rounds=rounds_$sync
		for ((r = 0; r < ${!rounds}; r++)); do
			for f in switchover kill stop cut; do
				"fault_$f"
				after_fault "$f"
			done
		done
	done
	sleep 3
	stop_clients
fi

# ------------------------------------------------------------ check
wait_leader 60 || log "no leader at the end"
psql_leader -c "SELECT 'row', 'a', token, seq FROM ha_a UNION ALL SELECT 'row', 'b', token, seq FROM ha_b UNION ALL SELECT 'row', 'c', token, seq FROM ha_c" -F ' ' >"$D/final" 2>&1
psql_leader -c "SELECT 'lease', name, owner, token FROM dlock_locks" -F ' ' >>"$D/final" 2>&1
log "$(($(date +%s) - t0)) s; checking"
python3 "$top/test/ha/check.py" "$D"
