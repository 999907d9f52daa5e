#!/bin/bash
# Tests of the dlock command (cli/): mutual exclusion of two or more
# `dlock run`, busy and timeout exits, kill of the command's whole process
# group after a forced release and after the server is killed, survival of a
# quick server restart, signal forwarding, exit status pass-through, cleanup
# of leftover group members and of processes that left the group (setsid),
# release of only the lease it took after an interrupted wait, --queue
# (a queued request, FIFO with blocked waiters, dequeued on timeout and
# signal), --lifetime session (a SIGKILLed dlock run frees the name at
# once), an extension in a schema off the search_path or still at 1.1, and
# usage errors.
#
# Every wait is bounded: a step that hangs fails within seconds, naming the
# step.  The suite does not depend on the signal dispositions it was started
# with (nohup, a background job): every `dlock run` that the suite signals is
# started with those signals at their defaults.
#
# Builds cli/dlock, starts a throwaway cluster of its own (unix socket only,
# shared_preload_libraries = 'dlock') under test/tmp/cli.* of the checkout
# (socket in a short private dir in /tmp), and exits non-zero on the first
# failure.  Run it as a non-root user that can run initdb, after `make
# install` of the extension:
#
#   runuser -u postgres -- test/suites/cli.sh
#
# Environment: PG_CONFIG, DLOCK_TOP (checkout to use; default: this
# script's), DLOCK_LOGDIR (the server log is copied there on failure).
set -euo pipefail

srv_name=cli
# shellcheck source=test/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
t_begin=$(date +%s%3N)

srv_require
make -s -C "$here/cli" PG_CONFIG="$PG_CONFIG"
dlock=$here/cli/dlock

srv_dirs
port=54337
bg_pids=()		# background dlock processes
groups=()		# process groups of commands we started (and of escapees)
results=()		# measurements, printed at the end

# on exit, before the server stops: what we started
srv_on_exit() {
	local p
	for p in "${bg_pids[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
	for p in "${groups[@]}"; do
		kill -KILL -- "-$p" 2>/dev/null
	done
}
srv_trap

fail() {
	echo "cli.sh: FAILED: $*" >&2
	exit 1
}
ok() {
	echo "ok - $*"
}
now() {
	date +%s%3N
}

# running <pid>: whether <pid> is still a child of this shell (a pid that
# was reused by another process after the job ended is not).
running() {
	local stat
	read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
	stat=${stat##*) }	# "state ppid ..."; comm may hold spaces and ')'
	stat=${stat#* }
	[ "${stat%% *}" = "$BASHPID" ]
}

# wait_bg <pid> <seconds> <step>: waits at most <seconds> for background job
# <pid> and sets rc to its exit status.  A job still running then is killed
# and the suite fails, naming the step.
wait_bg() {
	local pid=$1 limit=$2 what=$3 deadline
	deadline=$(($(now) + limit * 1000))
	while running "$pid"; do
		if (($(now) >= deadline)); then
			kill -KILL "$pid" 2>/dev/null
			fail "$what: still running after $limit s"
		fi
		sleep 0.02
	done
	rc=0
	wait "$pid" || rc=$?
}

# expect_status <status> <description> <command...>: runs the command (at
# most 20 s) with stdout and stderr in $tmp/out and $tmp/err, checks its
# exit status.
expect_status() {
	local want=$1 what=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err" &
	wait_bg $! 20 "$what"
	if [ "$rc" != "$want" ]; then
		echo "--- stdout:" >&2
		cat "$tmp/out" >&2
		echo "--- stderr:" >&2
		cat "$tmp/err" >&2
		fail "$what: exit status $rc, expected $want (command: $*)"
	fi
	ok "$what (exit $rc)"
}

# sql <query> [psql option...]: at most 10 s to connect, 10 s per statement
# dl <args...>: runs dlock (at most 20 s), which must succeed; stdout as is.
dl() {
	"$dlock" "$@" &
	wait_bg $! 20 "dlock $*"
	[ "$rc" = 0 ] || fail "dlock $*: exit status $rc"
}

sql() {
	PGCONNECT_TIMEOUT=10 PGOPTIONS='-c statement_timeout=10s' \
		"$bindir/psql" -X -q -t -A -v ON_ERROR_STOP=1 -c "$1" "${@:2}"
}

# Start a command with SIGHUP, SIGINT, SIGTERM and SIGQUIT at their default
# dispositions, whatever the suite inherited (nohup ignores SIGHUP, and a
# non-interactive shell starts background jobs with SIGINT and SIGQUIT
# ignored); dlock rightly keeps an ignored signal ignored.
dfl=(perl -e '$SIG{$_} = "DEFAULT" for qw(HUP INT TERM QUIT); exec @ARGV or die "exec: $!"' --)

# Waits until file $1 exists and is not empty (at most $2 ms).
wait_file() {
	local deadline=$(($(now) + $2))
	until [ -s "$1" ]; do
		(($(now) < deadline)) || fail "timed out waiting for $1"
		sleep 0.02
	done
}

# Waits until name $1 has a holder (at most $2 ms).
wait_held() {
	local deadline=$(($(now) + $2))
	until [ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = '$1'")" = 1 ]; do
		(($(now) < deadline)) || fail "timed out waiting for a holder of $1"
		sleep 0.02
	done
}

# Waits until process group $1 has no process left, at most $2 ms after $3
# (a time from now()).  Prints two times from $3: when the group was gone,
# and when its first member was gone.  Fails after the limit.
wait_group_dead() {
	local pg=$1 limit=$2 t0=$3 n n0 t first_gone=""
	n0=$(pgrep -c -g "$pg" || true)
	while :; do
		t=$(now)
		n=$(pgrep -c -g "$pg" || true)
		if [ -z "$first_gone" ] && [ "$n" -lt "$n0" ]; then
			first_gone=$((t - t0))
		fi
		if ! kill -0 -- "-$pg" 2>/dev/null; then
			echo "$((t - t0)) ${first_gone:-$((t - t0))}"
			return 0
		fi
		if ((t - t0 > limit)); then
			echo "--- processes of group $pg still alive after $limit ms:" >&2
			ps -o pid,ppid,pgid,stat,args -g "$pg" >&2 || true
			pgrep -a -g "$pg" >&2 || true
			return 1
		fi
		sleep 0.01
	done
}

# ---------------------------------------------------------------- cluster
srv_initdb
# every grant flushed: the server is crashed under running commands ("server
# killed", "transient loss"), whose leases must come back
srv_conf "$port" "max_connections = 50" "dlock.flush_grants = on"
srv_start
srv_env
sql 'CREATE EXTENSION dlock' >/dev/null
sql 'CREATE DATABASE noext' >/dev/null
cd "$tmp"

# ---------------------------------------------------------------- usage
expect_status 0 "--help" "$dlock" --help
grep -q "Exit status" "$tmp/out" || fail "--help does not document exit statuses"
expect_status 0 "--version" "$dlock" --version
expect_status 64 "usage: no subcommand" "$dlock"
expect_status 64 "usage: unknown subcommand" "$dlock" frobnicate
expect_status 64 "usage: run without NAME" "$dlock" run
expect_status 64 "usage: run without COMMAND" "$dlock" run name
expect_status 64 "usage: run with -- but no COMMAND" "$dlock" run name --
expect_status 64 "usage: run with two names" "$dlock" run a b -- true
expect_status 64 "usage: bad --ttl" "$dlock" run --ttl soon name -- true
expect_status 64 "usage: --ttl below 1s" "$dlock" run --ttl 500ms name -- true
expect_status 64 "usage: --grace not under half the TTL" "$dlock" run --ttl 4s --grace 2s name -- true
expect_status 64 "usage: --no-wait with --timeout" "$dlock" run --no-wait --timeout 1s name -- true
expect_status 64 "usage: unknown option" "$dlock" run --frob name -- true
expect_status 64 "usage: option without its argument" "$dlock" try name --ttl
expect_status 64 "usage: release without --owner" "$dlock" release name
expect_status 64 "usage: --token not an integer" "$dlock" release --owner o --token x name
expect_status 64 "usage: status with two names" "$dlock" status a b
expect_status 64 "usage: try with --timeout" "$dlock" try --timeout 1s name
expect_status 64 "usage: owner too long" "$dlock" try --owner "$(printf 'o%.0s' $(seq 129))" name
grep -q "Try \"dlock --help\"" "$tmp/err" || fail "usage errors do not point to --help"
expect_status 64 "usage: a name the server rejects (SQLSTATE 22023)" "$dlock" run "$(printf 'n%.0s' $(seq 201))" -- true
# durations are bounded by 7 days (the server's TTL limit), in milliseconds
expect_status 64 "usage: --timeout over 7 days" "$dlock" run --timeout 8d name -- true
grep -q -- "--timeout must be at most 7 days" "$tmp/err" || fail "--timeout 8d: $(cat "$tmp/err")"
expect_status 64 "usage: --grace over 7 days" "$dlock" run --ttl 7d --grace 7.5d name -- true
grep -q -- "--grace must be at most 7 days" "$tmp/err" || fail "--grace 7.5d: $(cat "$tmp/err")"
expect_status 64 "usage: --ttl of 7 days and 1 s" "$dlock" try --ttl 604801s name
expect_status 0 "--timeout of 7 days" "$dlock" run --timeout 7d name -- true
# -d takes its value as the next argument only: "-debug" is no connection string
expect_status 64 "usage: -debug before the subcommand" "$dlock" -debug status
grep -q -- "-d takes its connection string as the next argument" "$tmp/err" || fail "-debug: $(cat "$tmp/err")"
expect_status 64 "usage: -debug after the subcommand" "$dlock" status -debug
expect_status 64 "usage: -d without its argument" "$dlock" status -d
expect_status 0 "-v and -d clustered before the subcommand (-vd CONNINFO)" "$dlock" -vd "host=$sock port=$port dbname=postgres" status

# ---------------------------------------------------------------- connection and server errors
expect_status 77 "connection failure: no server on that port" env PGPORT=1 "$dlock" run name -- true
expect_status 77 "connection failure: status" env PGPORT=1 "$dlock" status
expect_status 70 "server error: extension missing in the database" "$dlock" -d "dbname=noext" run name -- true
grep -q 'the dlock extension is not installed in database "noext"' "$tmp/err" || fail "no extension: $(cat "$tmp/err")"
expect_status 0 "--dbname with a conninfo string" "$dlock" --dbname "host=$sock port=$port dbname=postgres" run name -- true

# the extension in a schema that is not on the search_path: dlock finds it
sql 'CREATE DATABASE schm' >/dev/null
sql 'CREATE SCHEMA dl; CREATE EXTENSION dlock SCHEMA dl; ALTER DATABASE schm SET search_path = public' -d schm >/dev/null
expect_status 0 "schema off the search_path: run" "$dlock" -d "dbname=schm" run --no-wait sp -- true
expect_status 0 "schema off the search_path: try" "$dlock" -d "dbname=schm" try --owner sp-o sp
read -r sp_token _ <"$tmp/out"
expect_status 0 "schema off the search_path: status" "$dlock" -d "dbname=schm" status sp
grep -qE "^sp +holder +sp-o +$sp_token " "$tmp/out" || fail "status in schema dl: $(cat "$tmp/out")"
expect_status 69 "schema off the search_path: busy" "$dlock" -d "dbname=schm" run --no-wait sp -- true
grep -q "held by sp-o" "$tmp/err" || fail "busy message in schema dl: $(cat "$tmp/err")"
expect_status 0 "schema off the search_path: release" "$dlock" -d "dbname=schm" release --owner sp-o --token "$sp_token" sp
[ "$(sql 'SELECT count(*) FROM dl.dlock_locks' -d schm)" = 0 ] || fail "lease left in schema dl"

# ---------------------------------------------------------------- exit status and environment
expect_status 0 "exit status 0 passed through" "$dlock" run st -- true
expect_status 3 "exit status 3 passed through" "$dlock" run st -- sh -c 'exit 3'
expect_status 143 "command killed by SIGTERM: 128+15" "$dlock" run st -- sh -c 'kill -TERM $$'
expect_status 127 "command not found" "$dlock" run st -- ./no-such-command
grep -q "cannot run" "$tmp/err" || fail "no message for a command that cannot run"
expect_status 126 "command not executable" "$dlock" run st -- /dev/null
expect_status 0 "environment of the command" "$dlock" run --owner env-owner envname -- \
	sh -c 'echo "$DLOCK_NAME|$DLOCK_OWNER|$DLOCK_TOKEN|$(ps -o pgid= -p $$ | tr -d " ")|$$"'
IFS='|' read -r e_name e_owner e_token e_pgid e_pid <"$tmp/out"
[ "$e_name" = envname ] && [ "$e_owner" = env-owner ] && [[ "$e_token" =~ ^[0-9]+$ ]] ||
	fail "DLOCK_NAME/OWNER/TOKEN wrong: $(cat "$tmp/out")"
[ "$e_pgid" = "$e_pid" ] || fail "the command is not the leader of its own process group (pgid $e_pgid, pid $e_pid)"
ok "DLOCK_NAME, DLOCK_OWNER, DLOCK_TOKEN set; the command leads its own process group"
expect_status 0 "default owner is dlock-run:HOST:PID" "$dlock" run envname -- sh -c 'echo "$DLOCK_OWNER"'
grep -qE '^dlock-run:.+:[0-9]+$' "$tmp/out" || fail "default owner: $(cat "$tmp/out")"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name IN ('st', 'envname')")" = 0 ] ||
	fail "leases left after the commands exited: $(sql "SELECT name, owner FROM dlock_locks")"
ok "leases released after the commands exited"

# ---------------------------------------------------------------- try, release, status, busy, timeout
expect_status 0 "try takes a free name" "$dlock" try --owner holder busy
read -r busy_token busy_owner <"$tmp/out"
[[ "$busy_token" =~ ^[0-9]+$ ]] && [ "$busy_owner" = holder ] || fail "try printed: $(cat "$tmp/out")"
expect_status 69 "try on a busy name" "$dlock" try --owner other busy
grep -q "held by holder" "$tmp/err" || fail "busy message does not name the holder: $(cat "$tmp/err")"
expect_status 69 "run --no-wait on a busy name" "$dlock" run --no-wait busy -- touch "$tmp/ran"
expect_status 69 "run --timeout 0 on a busy name" "$dlock" run --timeout 0 busy -- touch "$tmp/ran"
t0=$(now)
expect_status 75 "run --timeout 1s on a busy name" "$dlock" run --timeout 1s busy -- touch "$tmp/ran"
el=$(($(now) - t0))
((el >= 900 && el < 5000)) || fail "--timeout 1s took $el ms"
[ ! -e "$tmp/ran" ] || fail "the command ran although the lease was busy"
expect_status 0 "status NAME of a held name" "$dlock" status busy
grep -qE "^busy +holder +holder +$busy_token " "$tmp/out" || fail "status: $(cat "$tmp/out")"
expect_status 1 "release with the wrong token" "$dlock" release --owner holder --token 1 busy
expect_status 1 "release by another owner" "$dlock" release --owner other busy
expect_status 0 "release by the holder with its token" "$dlock" release --owner holder --token "$busy_token" busy
expect_status 1 "release again" "$dlock" release --owner holder busy
expect_status 1 "status NAME of a free name" "$dlock" status busy

# --at-least: a minimum hold, at most the TTL; a lease its command released
# within the hold is still held (status says released) until the hold ends
expect_status 64 "usage: --at-least above --ttl" "$dlock" run --ttl 5s --at-least 6s name -- true
grep -q "at-least must not be longer than the TTL" "$tmp/err" || fail "--at-least message: $(cat "$tmp/err")"
expect_status 64 "usage: --at-least above the default TTL" "$dlock" run --at-least 31s name -- true
expect_status 64 "usage: bad --at-least" "$dlock" run --at-least soon name -- true
expect_status 64 "usage: --at-least on try" "$dlock" try --at-least 1s name
expect_status 0 "run --at-least within the TTL" "$dlock" run --owner early --ttl 1h --at-least 30m early -- true
expect_status 0 "status of a lease released within its hold" "$dlock" status early
grep -qE "^early +holder, released +early +[0-9]+ " "$tmp/out" || fail "status of early: $(cat "$tmp/out")"
expect_status 69 "run --no-wait on a name held within its hold" "$dlock" run --no-wait early -- touch "$tmp/ran"
[ ! -e "$tmp/ran" ] || fail "the command ran although the lease was held within its hold"
[ "$(sql "SELECT dlock_force_release('early')")" = t ] || fail "force release of early"

# semaphores and shared leases
expect_status 64 "usage: --shared with --permits" "$dlock" try --shared --permits 2 sem
expect_status 64 "usage: --permits 0" "$dlock" try --permits 0 sem
expect_status 64 "usage: --permits on release" "$dlock" release --owner a --permits 2 sem
expect_status 0 "try --permits 2: first permit" "$dlock" try --permits 2 --owner p1 sem
expect_status 0 "try --permits 2: second permit" "$dlock" try --permits 2 --owner p2 sem
expect_status 69 "try --permits 2: no third" "$dlock" try --permits 2 --owner p3 sem
grep -q "held by 2 holders" "$tmp/err" || fail "busy message for a semaphore: $(cat "$tmp/err")"
expect_status 70 "try --permits 3 on a semaphore of 2" "$dlock" try --permits 3 --owner p3 sem
grep -q "semaphore of 2 permits" "$tmp/err" || fail "conflicting size message: $(cat "$tmp/err")"
expect_status 0 "status of a semaphore" "$dlock" status sem
[ "$(grep -cE '^sem +holder \(of 2\) +p[12] ' "$tmp/out")" = 2 ] || fail "status of sem: $(cat "$tmp/out")"
"$dlock" run --permits 2 --owner p3 sem -- sh -c 'echo "$DLOCK_TOKEN" >"$1"' sh "$tmp/sem3" &
bg_pids+=($!)
deadline=$(($(now) + 5000))
until [ "$(sql "SELECT count(*) FROM dlock_waiters WHERE name = 'sem'")" = 1 ]; do
	(($(now) < deadline)) || fail "run --permits 2 did not queue on a full semaphore"
	sleep 0.02
done
expect_status 0 "release a permit" "$dlock" release --owner p1 sem
deadline=$(($(now) + 5000))
until [ -s "$tmp/sem3" ]; do
	(($(now) < deadline)) || fail "the queued run did not get the freed permit"
	sleep 0.02
done
wait_bg "${bg_pids[-1]}" 10 "run --permits after it got the permit"
[ "$rc" = 0 ] || fail "run --permits 2: exit status $rc"
ok "run --permits gets a permit when one is released"
expect_status 0 "release the other permit" "$dlock" release --owner p2 sem
expect_status 0 "try --shared: first reader" "$dlock" try --shared --owner r1 doc
expect_status 0 "try --shared: second reader" "$dlock" try --shared --owner r2 doc
expect_status 69 "try: a writer waits for readers" "$dlock" try --owner w doc
expect_status 0 "run --shared runs beside the readers" "$dlock" run --shared --no-wait --owner r3 doc -- true
expect_status 0 "status of shared leases" "$dlock" status doc
[ "$(grep -cE '^doc +holder \(shared\) +r[12] ' "$tmp/out")" = 2 ] || fail "status of doc: $(cat "$tmp/out")"
dl release --owner r1 doc >/dev/null
dl release --owner r2 doc >/dev/null

# status lists holders and waiters
dl try --owner st-holder stq >/dev/null
"$dlock" run --owner st-waiter stq -- true &
bg_pids+=($!)
deadline=$(($(now) + 5000))
until [ "$(sql "SELECT count(*) FROM dlock_waiters WHERE name = 'stq'")" = 1 ]; do
	(($(now) < deadline)) || fail "no waiter on stq"
	sleep 0.02
done
expect_status 0 "status lists holder and waiter" "$dlock" status
grep -qE '^stq +holder +st-holder ' "$tmp/out" && grep -qE '^stq +waiting 1 +st-waiter ' "$tmp/out" ||
	fail "status: $(cat "$tmp/out")"
dl release --owner st-holder stq
wait_bg "${bg_pids[-1]}" 10 "the waiter on stq after the release"
[ "$rc" = 0 ] || fail "the waiter on stq failed after the release: exit status $rc"
ok "the waiter ran after the release"

# ---------------------------------------------------------------- mutual exclusion
# Three workers, each running five commands under the same name; every
# command logs its start and end (ns) and holds a mkdir lock meanwhile.
check_overlap() {
	awk '
		$1 == "start" { s[$3] = $2; n++ }
		$1 == "end"   { e[$3] = $2 }
		$1 == "OVERLAP" { bad = bad " mkdir-overlap(" $2 ")" }
		END {
			for (p in s) { if (!(p in e)) bad = bad " no-end(" p ")"; k++; ps[k] = p }
			# sort by start time
			for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
				if (s[ps[j]] + 0 < s[ps[i]] + 0) { t = ps[i]; ps[i] = ps[j]; ps[j] = t }
			for (i = 2; i <= k; i++)
				if (s[ps[i]] + 0 < e[ps[i - 1]] + 0)
					bad = bad " overlap(" ps[i - 1] "," ps[i] ")"
			if (bad != "") { print "violations:" bad; exit 1 }
			print n
		}' "$1"
}
# the checker must catch an overlap
printf 'start 100 1\nstart 150 2\nend 200 1\nend 250 2\n' >"$tmp/bad.log"
if check_overlap "$tmp/bad.log" >/dev/null; then
	fail "the overlap checker misses an overlap"
fi
ok "the overlap checker catches a planted overlap"

mx_cmd='echo "start $(date +%s%N) $$" >>mx.log
mkdir mx.busy 2>/dev/null || echo "OVERLAP $$" >>mx.log
sleep 0.1
rmdir mx.busy 2>/dev/null
echo "end $(date +%s%N) $$" >>mx.log'
workers=()
for w in 1 2 3; do
	(
		for i in 1 2 3 4 5; do
			"$dlock" run --timeout 30s --owner "mx-$w" mx -- sh -c "$mx_cmd" || exit 1
		done
	) &
	workers+=($!)
	bg_pids+=($!)
done
for w in "${workers[@]}"; do
	wait_bg "$w" 90 "mutual-exclusion worker $w"
	[ "$rc" = 0 ] || fail "a mutual-exclusion worker failed"
done
n=$(check_overlap "$tmp/mx.log") || fail "dlock run overlapped: $n"
[ "$n" = 15 ] || fail "expected 15 critical sections, found $n"
ok "three concurrent workers, 15 dlock run under one name: no overlap"

# ---------------------------------------------------------------- leftovers of the group
expect_status 0 "command exits, a background child of it is left" "$dlock" run --ttl 4s left -- \
	sh -c 'sleep 1000 & echo $! >left.pid; exit 0'
lp=$(cat "$tmp/left.pid")
! kill -0 "$lp" 2>/dev/null || fail "the command's background child $lp survived dlock run"
ok "processes left in the group are killed before the lease is released"

# ---------------------------------------------------------------- processes that leave the group
# Processes that call setsid (daemons, script) are out of the command's
# process group, but dlock, the subreaper, sees them as descendants: they get
# SIGTERM and SIGKILL too, and the lease is released only once they are gone.
# esc.sh TAG NAME, run with setsid: writes its pid to TAG.pid; on SIGTERM,
# waits 0.5 s, writes how many leases NAME has to TAG.lease, and exits.
export PSQL="$bindir/psql"
cat >"$tmp/esc.sh" <<'SH'
tag=$1 name=$2
on_term() {
	sleep 0.5
	"$PSQL" -X -q -t -A -c "SELECT count(*) FROM dlock_locks WHERE name = '$name'" >"$tag.lease" 2>&1
	exit 0
}
trap on_term TERM
sleep 1000 &
echo $$ >"$tag.pid"
wait
SH
# escapee_pids TAG...: sets esc_pids to the pids in TAG.pid, and records
# them for the cleanup (each leads a session, and a group, of its own)
escapee_pids() {
	local t
	esc_pids=()
	for t in "$@"; do
		esc_pids+=("$(cat "$tmp/$t.pid")")
	done
	groups+=("${esc_pids[@]}")
}
# normal exit: escn-a (setsid beside the command; handles SIGTERM) and escn-b
# (setsid in a subshell that exits, so an orphan reparented to dlock;
# ignores SIGTERM) outlive the command.
t0=$(now)
expect_status 0 "the command exits while processes that left its group run" \
	"$dlock" run --ttl 6s --grace 2s escn -- sh -c '
		setsid sh ./esc.sh escn-a escn &
		(setsid sh -c "trap \"\" TERM; echo \$\$ >escn-b.pid; exec sleep 1000" &)
		until [ -s escn-a.pid ] && [ -s escn-b.pid ]; do sleep 0.02; done'
el=$(($(now) - t0))
escapee_pids escn-a escn-b
for p in "${esc_pids[@]}"; do
	! kill -0 "$p" 2>/dev/null || fail "process $p, which left the group (setsid), survived dlock run: $(ps -o pid,ppid,pgid,sid,args -p "$p" | tail -n 1)"
done
[ "$(cat "$tmp/escn-a.lease" 2>/dev/null)" = 1 ] ||
	fail "the lease was not held while a process that left the group handled SIGTERM: ${tmp}/escn-a.lease: $(cat "$tmp/escn-a.lease" 2>&1)"
grep -q "processes that left it" "$tmp/err" || fail "no message about processes that left the group: $(cat "$tmp/err")"
((el >= 2000)) || fail "dlock run ended after $el ms, before the SIGKILL due after --grace 2s"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'escn'")" = 0 ] || fail "lease escn left"
ok "the command exited: processes that left its group got SIGTERM (the lease still held), then SIGKILL; released after ($el ms)"

# lease lost: a forced release kills processes that left the group too, and
# dlock exits only once they are gone
rm -f "$tmp/escl.pgid"
"${dfl[@]}" "$dlock" run --ttl 3s --grace 1s escl -- sh -c '
	echo $$ >escl.pgid
	(setsid sh -c "trap \"\" TERM; echo \$\$ >escl-b.pid; exec sleep 1000" &)
	setsid sleep 1000 & echo $! >escl-c.pid
	sleep 1000 & wait' 2>"$tmp/escl.err" &
dp=$!
bg_pids+=($dp)
wait_file "$tmp/escl.pgid" 5000
wait_file "$tmp/escl-b.pid" 5000
wait_file "$tmp/escl-c.pid" 5000
groups+=("$(cat "$tmp/escl.pgid")")
escapee_pids escl-b escl-c
wait_held escl 5000
t0=$(now)
[ "$(sql "SELECT dlock_force_release('escl')")" = t ] || fail "dlock_force_release('escl') returned false"
wait_bg "$dp" 10 "dlock run after the forced release of escl"
el=$(($(now) - t0))
[ "$rc" = 76 ] || fail "forced release with processes that left the group: exit status $rc, expected 76; stderr: $(cat "$tmp/escl.err")"
for p in "${esc_pids[@]}"; do
	! kill -0 "$p" 2>/dev/null || fail "process $p, which left the group (setsid), survived the lost lease: $(ps -o pid,ppid,pgid,sid,args -p "$p" | tail -n 1)"
done
ok "forced release: processes that left the group were dead when dlock exited 76 ($el ms)"
results+=("forced release -> dlock exited with every descendant dead, two of them in sessions of their own (one ignoring SIGTERM): $el ms; bound ttl/3 + grace = 2000 ms (ttl 3s, grace 1s)")

# ---------------------------------------------------------------- signals
# Each case starts dlock with the signals ignored, as under nohup, and dfl
# resets them: dlock keeps a signal that was ignored at its start ignored.
for s in TERM HUP INT; do
	rm -f "$tmp/sig.out"
	(
		trap '' HUP INT TERM QUIT
		exec "${dfl[@]}" "$dlock" run "sig$s" -- sh -c "trap 'echo got-$s >sig.out; exit 9' $s; echo \$\$ >sig.pgid; while :; do sleep 0.05; done"
	) &
	dp=$!
	bg_pids+=($dp)
	wait_file "$tmp/sig.pgid" 5000
	groups+=("$(cat "$tmp/sig.pgid")")
	rm -f "$tmp/sig.pgid"
	kill -"$s" "$dp"
	wait_bg "$dp" 10 "SIG$s to dlock run"
	[ "$rc" = 9 ] || fail "SIG$s to dlock run: exit status $rc, expected the command's 9"
	grep -q "got-$s" "$tmp/sig.out" || fail "SIG$s was not forwarded to the command"
	[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'sig$s'")" = 0 ] || fail "lease sig$s left after SIG$s"
	ok "SIG$s forwarded to the command, its status returned, lease released"
done
# a signal ignored when dlock starts stays ignored, by dlock and the command
rm -f "$tmp/sig.pgid"
(
	trap '' HUP
	exec "$dlock" run sigign -- sh -c 'echo $$ >sig.pgid; while :; do sleep 0.05; done'
) &
dp=$!
bg_pids+=($dp)
wait_file "$tmp/sig.pgid" 5000
pg=$(cat "$tmp/sig.pgid")
groups+=("$pg")
rm -f "$tmp/sig.pgid"
kill -HUP "$dp"
sleep 0.3
kill -0 "$dp" 2>/dev/null && kill -0 -- "-$pg" 2>/dev/null || fail "SIGHUP, ignored when dlock started, ended dlock or the command"
kill -KILL -- "-$pg"
wait_bg "$dp" 10 "dlock run after its command was killed"
[ "$rc" = $((128 + 9)) ] || fail "command killed by SIGKILL: exit status $rc, expected 137"
ok "SIGHUP ignored at dlock's start stays ignored by dlock and the command"
# a command that does not catch the signal dies of it: 128+N
"${dfl[@]}" "$dlock" run sigdfl -- sh -c 'echo $$ >sig.pgid; sleep 1000 & wait' &
dp=$!
bg_pids+=($dp)
wait_file "$tmp/sig.pgid" 5000
pg=$(cat "$tmp/sig.pgid")
groups+=("$pg")
rm -f "$tmp/sig.pgid"
kill -HUP "$dp"
wait_bg "$dp" 10 "SIGHUP to dlock run with an uncatching command"
[ "$rc" = $((128 + 1)) ] || fail "SIGHUP to an uncatching command: exit status $rc, expected 129"
wait_group_dead "$pg" 3000 "$(now)" >/dev/null || fail "group $pg not dead after SIGHUP"
ok "SIGHUP kills an uncatching command and its whole group: exit 129"

# wait_waiters NAME N: until N sessions wait for NAME (at most 5 s)
wait_waiters() {
	local deadline=$(($(now) + 5000))
	until [ "$(sql "SELECT count(*) FROM dlock_waiters WHERE name = '$1'")" = "$2" ]; do
		(($(now) < deadline)) || fail "timed out waiting for $2 waiters on $1"
		sleep 0.02
	done
}

# a signal while waiting: the command never runs, the queue is left
dl try --owner sw-holder sigwait >/dev/null
rm -f "$tmp/ran"
"${dfl[@]}" "$dlock" run sigwait -- touch "$tmp/ran" &
dp=$!
bg_pids+=($dp)
wait_waiters sigwait 1
kill -TERM "$dp"
wait_bg "$dp" 10 "SIGTERM to dlock run while it waits"
[ "$rc" = 143 ] || fail "SIGTERM while waiting: exit status $rc, expected 143"
[ ! -e "$tmp/ran" ] || fail "the command ran after SIGTERM while waiting"
wait_waiters sigwait 0
[ "$(sql "SELECT owner FROM dlock_locks WHERE name = 'sigwait'")" = sw-holder ] || fail "sigwait changed hands"
dl release --owner sw-holder sigwait
ok "SIGTERM while waiting: exit 143, command not started, queue left"

# A signal before any call reached the server releases nothing: not another
# lease of the same owner (here one taken by "dlock try").  The first host of
# the conninfo accepts the connection and never answers, so dlock is still
# connecting when it gets SIGTERM; then it stops listening, so that later
# connections are refused there and libpq goes on to the real server.
dl try --owner same-owner pre >/dev/null
pre_token=$(sql "SELECT token FROM dlock_locks WHERE name = 'pre'")
rm -f "$tmp/hole.port" "$tmp/hole.accepted"
perl -MIO::Socket::INET -e '
	my $s = IO::Socket::INET->new(Listen => 5, LocalAddr => "127.0.0.1", LocalPort => 0, ReuseAddr => 1)
		or die "listen: $!";
	open(my $f, ">", "hole.port") or die; print $f $s->sockport, "\n"; close $f;
	my $first = $s->accept or die;
	close $s;
	open($f, ">", "hole.accepted") or die; close $f;
	sleep 1000' &
hole=$!
bg_pids+=($hole)
wait_file "$tmp/hole.port" 5000
"${dfl[@]}" "$dlock" -d "host=127.0.0.1,$sock port=$(cat "$tmp/hole.port"),$port dbname=postgres" \
	run --owner same-owner pre -- touch "$tmp/ran" 2>"$tmp/pre.err" &
dp=$!
bg_pids+=($dp)
until [ -e "$tmp/hole.accepted" ]; do
	running "$dp" || fail "dlock run did not connect to the silent host: $(cat "$tmp/pre.err")"
	sleep 0.02
done
kill -TERM "$dp"
wait_bg "$dp" 10 "SIGTERM to dlock run while it connects"
[ "$rc" = 143 ] || fail "SIGTERM while connecting: exit status $rc, expected 143; stderr: $(cat "$tmp/pre.err")"
kill "$hole"
[ "$(sql "SELECT owner || ' ' || token FROM dlock_locks WHERE name = 'pre'")" = "same-owner $pre_token" ] ||
	fail "an interrupted dlock run released a lease it had not taken: $(sql "SELECT owner, token FROM dlock_locks WHERE name = 'pre'")"
dl release --owner same-owner pre
ok "SIGTERM before the server was asked: exit 143, the same owner's other lease kept"

# A grant the interrupted dlock never read is released: dlock is stopped
# while it waits, the lease is granted to its backend, and SIGTERM comes
# before dlock reads the answer.
dl try --owner ug-holder unseen >/dev/null
"${dfl[@]}" "$dlock" run --owner ug-waiter unseen -- touch "$tmp/ran" 2>"$tmp/ug.err" &
dp=$!
bg_pids+=($dp)
wait_waiters unseen 1
kill -STOP "$dp"
dl release --owner ug-holder unseen
deadline=$(($(now) + 5000))
until [ "$(sql "SELECT owner FROM dlock_locks WHERE name = 'unseen'")" = ug-waiter ]; do
	(($(now) < deadline)) || fail "the lease on unseen was not granted to the stopped dlock"
	sleep 0.02
done
kill -TERM "$dp"
kill -CONT "$dp"
wait_bg "$dp" 10 "dlock run after SIGTERM and SIGCONT"
[ "$rc" = 143 ] || fail "SIGTERM with an unread grant: exit status $rc, expected 143; stderr: $(cat "$tmp/ug.err")"
[ ! -e "$tmp/ran" ] || fail "the command ran after SIGTERM"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'unseen'")" = 0 ] ||
	fail "the grant dlock did not read was not released: $(sql "SELECT owner, token FROM dlock_locks WHERE name = 'unseen'")"
ok "SIGTERM with a grant not yet read: exit 143, that lease released"

# ... but a lease of the same owner granted before dlock run started is not
# released, even when dlock's backend extended it (its pid is then dlock's
# backend, and NULL once that has exited) and dlock did not read the answer.
# psql takes it in a transaction left open, so dlock's dlock_acquire (an
# extension of a durable lease being granted) waits for that transaction;
# dlock is stopped, psql commits, dlock's backend extends the lease and
# answers, and SIGTERM comes before dlock reads the answer.
rm -f "$tmp/ran" "$tmp/ue.go"
cat >"$tmp/ue.sql" <<SQL
BEGIN;
SELECT dlock_try('unseen-ext', '60s', 'ue-owner');
\! for i in \$(seq 500); do [ -e '$tmp/ue.go' ] && break; sleep 0.02; done
COMMIT;
SQL
PGOPTIONS='-c statement_timeout=20s' "$bindir/psql" -X -q -t -A -v ON_ERROR_STOP=1 \
	-f "$tmp/ue.sql" >"$tmp/ue.psql" 2>&1 &
psql_pid=$!
bg_pids+=($psql_pid)
wait_held unseen-ext 5000
"${dfl[@]}" "$dlock" run --owner ue-owner unseen-ext -- touch "$tmp/ran" 2>"$tmp/ue.err" &
dp=$!
bg_pids+=($dp)
# dlock's backend waits for psql's transaction (a lock wait), then answers
ue_state() {
	sql "SELECT state || ' ' || coalesce(wait_event_type, '-') FROM pg_stat_activity WHERE application_name = 'dlock'"
}
deadline=$(($(now) + 5000))
until [ "$(ue_state)" = "active Lock" ]; do
	(($(now) < deadline)) || fail "dlock run's extension did not wait for the granting transaction: $(ue_state)"
	sleep 0.02
done
kill -STOP "$dp"
touch "$tmp/ue.go"
wait_bg "$psql_pid" 20 "psql granting unseen-ext"
[ "$rc" = 0 ] || fail "psql granting unseen-ext: exit status $rc: $(cat "$tmp/ue.psql")"
ue_token=$(head -n 1 "$tmp/ue.psql")
deadline=$(($(now) + 5000))
until [ "$(ue_state)" = "idle Client" ]; do
	(($(now) < deadline)) || fail "dlock run's extension did not return: $(ue_state)"
	sleep 0.02
done
kill -TERM "$dp"
kill -CONT "$dp"
wait_bg "$dp" 10 "dlock run after SIGTERM and SIGCONT (extension)"
[ "$rc" = 143 ] || fail "SIGTERM with an unread extension: exit status $rc, expected 143; stderr: $(cat "$tmp/ue.err")"
[ ! -e "$tmp/ran" ] || fail "the command ran after SIGTERM"
[ "$(sql "SELECT owner || ' ' || token FROM dlock_locks WHERE name = 'unseen-ext'")" = "ue-owner $ue_token" ] ||
	fail "an interrupted dlock run released the same owner's earlier lease: $(sql "SELECT owner, token FROM dlock_locks WHERE name = 'unseen-ext'")"
dl release --owner ue-owner unseen-ext
ok "SIGTERM with an unread extension of an earlier lease: exit 143, that lease kept"

# ---------------------------------------------------------------- --queue
# run --queue waits as a queued request (dlock_enqueue asked again), not in
# a blocked call: dlock_waiters shows it with pid NULL; it keeps its place in
# the FIFO queue it shares with blocked waiters; on --timeout and on a
# signal it leaves the queue at once (not when its 30 s hold would run out),
# and a lease granted to it meanwhile is released, or, at the timeout,
# taken and run.
expect_status 64 "usage: --queue with --no-wait" "$dlock" run --queue --no-wait name -- true
expect_status 64 "usage: --queue with --timeout 0" "$dlock" run --queue --timeout 0 name -- true
grep -q -- "--timeout 0 (no wait) excludes it" "$tmp/err" || fail "--queue --timeout 0: $(cat "$tmp/err")"
expect_status 64 "usage: --queue with --at-least" "$dlock" run --queue --at-least 1s name -- true
expect_status 64 "usage: --queue with --lifetime session" "$dlock" run --queue --lifetime session name -- true
expect_status 64 "usage: --queue on try" "$dlock" try --queue name
expect_status 0 "run --queue on a free name" "$dlock" run --queue qfree -- sh -c 'echo "$DLOCK_TOKEN"'
[[ "$(cat "$tmp/out")" =~ ^[0-9]+$ ]] || fail "run --queue on a free name: DLOCK_TOKEN $(cat "$tmp/out")"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'qfree'")" = 0 ] || fail "run --queue left its lease"

# wait_queued NAME OWNER: until OWNER has a queued request (pid NULL) on NAME
wait_queued() {
	local deadline=$(($(now) + 5000))
	until [ "$(sql "SELECT count(*) FROM dlock_waiters WHERE name = '$1' AND owner = '$2' AND pid IS NULL")" = 1 ]; do
		(($(now) < deadline)) || fail "no queued request of $2 on $1: $(sql "SELECT owner, pid FROM dlock_waiters WHERE name = '$1'")"
		sleep 0.02
	done
}

# FIFO with a blocked waiter behind: the queued run goes first, then the
# blocked one; each gets its own token, the queued run's from its grant
dl try --owner q-holder qfifo >/dev/null
rm -f "$tmp/q.log"
"$dlock" run --queue --ttl 10s --owner q-1 qfifo -- sh -c 'echo "q-1 $DLOCK_TOKEN" >>q.log; sleep 0.3' 2>"$tmp/q1.err" &
dq=$!
bg_pids+=($dq)
wait_queued qfifo q-1
"$dlock" run --owner q-2 qfifo -- sh -c 'echo "q-2 $DLOCK_TOKEN" >>q.log' 2>"$tmp/q2.err" &
db=$!
bg_pids+=($db)
wait_waiters qfifo 2
[ "$(sql "SELECT string_agg(owner || ':' || coalesce(pid::text, 'queued'), ' ' ORDER BY queue_position) FROM dlock_waiters WHERE name = 'qfifo'" | sed 's/q-2:[0-9]*/q-2:pid/')" = "q-1:queued q-2:pid" ] ||
	fail "qfifo's queue: $(sql "SELECT owner, pid, queue_position FROM dlock_waiters WHERE name = 'qfifo'")"
dl release --owner q-holder qfifo
wait_bg "$dq" 10 "run --queue after the release"
[ "$rc" = 0 ] || fail "run --queue: exit $rc; $(cat "$tmp/q1.err")"
wait_bg "$db" 10 "the blocked run behind run --queue"
[ "$rc" = 0 ] || fail "the blocked run behind run --queue: exit $rc; $(cat "$tmp/q2.err")"
[ "$(cut -d' ' -f1 "$tmp/q.log" | tr '\n' ' ')" = "q-1 q-2 " ] || fail "order of the runs: $(cat "$tmp/q.log")"
read -r _ t1 < <(sed -n 1p "$tmp/q.log")
read -r _ t2 < <(sed -n 2p "$tmp/q.log")
((t1 < t2)) || fail "tokens of the runs do not grow: $(cat "$tmp/q.log")"
ok "run --queue: queued with no backend (pid NULL), granted before the blocked run behind it"

# --timeout: exit 75 and the request leaves the queue at once
dl try --owner qt-holder qtime >/dev/null
t0=$(now)
expect_status 75 "run --queue --timeout 1s on a busy name" "$dlock" run --queue --timeout 1s --owner qt qtime -- touch "$tmp/ran"
el=$(($(now) - t0))
((el >= 900 && el < 5000)) || fail "run --queue --timeout 1s took $el ms"
grep -q "timed out after .* waiting in the queue for qtime" "$tmp/err" || fail "--queue timeout message: $(cat "$tmp/err")"
[ "$(sql "SELECT count(*) FROM dlock_waiters WHERE name = 'qtime'")" = 0 ] ||
	fail "run --queue --timeout left its request queued: $(sql "SELECT owner, deadline FROM dlock_waiters WHERE name = 'qtime'")"
[ ! -e "$tmp/ran" ] || fail "the command ran although the lease was busy"
ok "run --queue --timeout 1s: exit 75 after $el ms, its request dequeued"

# SIGTERM while queued: exit 143, dequeued at once, the command not started
"${dfl[@]}" "$dlock" run --queue --owner qs qtime -- touch "$tmp/ran" 2>"$tmp/qs.err" &
dp=$!
bg_pids+=($dp)
wait_queued qtime qs
kill -TERM "$dp"
wait_bg "$dp" 10 "SIGTERM to run --queue while queued"
[ "$rc" = 143 ] || fail "SIGTERM while queued: exit $rc, expected 143; $(cat "$tmp/qs.err")"
[ "$(sql "SELECT count(*) FROM dlock_waiters WHERE name = 'qtime'")" = 0 ] || fail "SIGTERM left the request queued"
[ ! -e "$tmp/ran" ] || fail "the command ran after SIGTERM while queued"
ok "SIGTERM while queued: exit 143, the request dequeued"

# a grant to the queued request that dlock never collected: released after
# SIGTERM (dlock is stopped while the holder releases)
"${dfl[@]}" "$dlock" run --queue --owner qg qtime -- touch "$tmp/ran" 2>"$tmp/qg.err" &
dp=$!
bg_pids+=($dp)
wait_queued qtime qg
kill -STOP "$dp"
dl release --owner qt-holder qtime
[ "$(sql "SELECT owner || ' ' || coalesce(pid::text, 'none') FROM dlock_locks WHERE name = 'qtime'")" = "qg none" ] ||
	fail "the queued request was not granted: $(sql "SELECT owner, pid FROM dlock_locks WHERE name = 'qtime'")"
kill -TERM "$dp"
kill -CONT "$dp"
wait_bg "$dp" 10 "run --queue after SIGTERM and SIGCONT"
[ "$rc" = 143 ] || fail "SIGTERM with an uncollected grant: exit $rc; $(cat "$tmp/qg.err")"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'qtime'")" = 0 ] ||
	fail "the grant to the queued request was not released: $(sql "SELECT owner, token FROM dlock_locks WHERE name = 'qtime'")"
[ ! -e "$tmp/ran" ] || fail "the command ran after SIGTERM"
ok "SIGTERM with a grant to the queued request not collected: exit 143, that lease released"

# the --timeout passes after a grant dlock has not collected: it runs the
# command with that lease (granted within its timeout)
dl try --owner qa-holder qadopt >/dev/null
qa_t0=$(now)
"${dfl[@]}" "$dlock" run --queue --timeout 2s --owner qa qadopt -- sh -c 'echo "$DLOCK_TOKEN" >qa.tok' 2>"$tmp/qa.err" &
dp=$!
bg_pids+=($dp)
wait_queued qadopt qa
kill -STOP "$dp"
dl release --owner qa-holder qadopt
qa_token=$(sql "SELECT token FROM dlock_locks WHERE name = 'qadopt' AND owner = 'qa'")
[ -n "$qa_token" ] || fail "the queued request on qadopt was not granted"
while (($(now) < qa_t0 + 2500)); do sleep 0.1; done
kill -CONT "$dp"
wait_bg "$dp" 10 "run --queue --timeout 2s continued after its timeout"
[ "$rc" = 0 ] || fail "run --queue, granted before its timeout: exit $rc; $(cat "$tmp/qa.err")"
[ "$(cat "$tmp/qa.tok")" = "$qa_token" ] || fail "DLOCK_TOKEN $(cat "$tmp/qa.tok"), granted $qa_token"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'qadopt'")" = 0 ] || fail "qadopt still held"
ok "run --queue granted before its timeout, collected after it: the command ran with the granted token"

# ---------------------------------------------------------------- --lifetime session
# A session lease ends with dlock's connection: SIGKILL of dlock run itself
# (not only of its command) frees the name at once, and a queued waiter runs
# within milliseconds instead of after the TTL (60 s here: the waiters'
# --timeout 5s would pass first).  Without --lifetime the same waiter times
# out.  With --at-least, the kill within the hold frees the name at the hold's
# end.  A lost connection loses a session lease: the command is terminated.
expect_status 64 "usage: --lifetime transaction" "$dlock" run --lifetime transaction name -- true
grep -q "lifetime transaction is refused" "$tmp/err" || fail "--lifetime transaction: $(cat "$tmp/err")"
expect_status 64 "usage: bad --lifetime" "$dlock" run --lifetime forever name -- true
grep -q 'invalid --lifetime: "forever" (ttl or session)' "$tmp/err" || fail "--lifetime forever: $(cat "$tmp/err")"
expect_status 64 "usage: --lifetime on try" "$dlock" try --lifetime session name
expect_status 64 "usage: --lifetime without its argument" "$dlock" run name --lifetime -- true
expect_status 0 "run --lifetime ttl" "$dlock" run --lifetime ttl lt -- true

# kill_runner NAME OWNER WAITER [run options...]: starts dlock run with the
# options on NAME (a command that sleeps 60 s), queues dlock run --timeout 5s
# as WAITER behind it, SIGKILLs the first dlock run (its command dies of
# PR_SET_PDEATHSIG) and waits for the waiter, whose exit status is left in
# rc.  Sets kill_t (when the SIGKILL was sent), kr_granted (the first lease's
# granted_at, ms since the epoch, server clock), kr_start (when the waiter's
# command started, now()'s clock; empty if it did not) and kr_wgranted (the
# waiter's granted_at, as kr_granted).
kill_runner() {
	local name=$1 owner=$2 waiter=$3 dp dw
	shift 3
	rm -f "$tmp/kr.pgid" "$tmp/kr.start" "$tmp/kr.granted"
	"$dlock" run "$@" --ttl 60s --owner "$owner" "$name" -- \
		sh -c 'echo $$ >kr.pgid; exec sleep 60' 2>"$tmp/kr1.err" &
	dp=$!
	bg_pids+=($dp)
	wait_file "$tmp/kr.pgid" 5000
	groups+=("$(cat "$tmp/kr.pgid")")
	wait_held "$name" 5000
	kr_granted=$(sql "SELECT (extract(epoch FROM granted_at) * 1000)::bigint FROM dlock_locks WHERE name = '$name'")
	"$dlock" run --timeout 5s --owner "$waiter" "$name" -- sh -c 'date +%s%3N >kr.start
		"$0" -X -q -t -A -c "SELECT (extract(epoch FROM granted_at) * 1000)::bigint
			FROM dlock_locks WHERE token = $DLOCK_TOKEN" >kr.granted' "$bindir/psql" 2>"$tmp/kr2.err" &
	dw=$!
	bg_pids+=($dw)
	wait_waiters "$name" 1
	kill_t=$(now)
	kill -KILL "$dp"
	wait_bg "$dw" 15 "the waiter on $name after SIGKILL of dlock run $*"
	kr_start=$(cat "$tmp/kr.start" 2>/dev/null || true)
	kr_wgranted=$(cat "$tmp/kr.granted" 2>/dev/null || true)
	{ wait "$dp"; } 2>/dev/null || true
}

kill_runner kls kls-1 kls-2 --lifetime session
[ "$rc" = 0 ] && [ -n "$kr_start" ] ||
	fail "--lifetime session: the waiter was not granted within 5 s of SIGKILL (ttl 60s): exit $rc; $(cat "$tmp/kr2.err")"
el=$((kr_start - kill_t))
ok "--lifetime session: SIGKILL of dlock run; the queued waiter's command started $el ms later (ttl 60s)"
results+=("run --lifetime session --ttl 60s SIGKILLed -> the queued dlock run's command started: $el ms")
expect_status 0 "--lifetime session: run --no-wait after the kill" "$dlock" run --no-wait kls -- true

kill_runner klt klt-1 klt-2
[ "$rc" = 75 ] && [ -z "$kr_start" ] ||
	fail "without --lifetime: the waiter did not time out: exit $rc; $(cat "$tmp/kr2.err")"
expect_status 69 "without --lifetime: run --no-wait after the kill finds it busy" "$dlock" run --no-wait klt -- true
grep -q "held by klt-1" "$tmp/err" || fail "busy message after the kill: $(cat "$tmp/err")"
[ "$(sql "SELECT dlock_force_release('klt')")" = t ] || fail "force release of klt"
ok "without --lifetime: the lease of a SIGKILLed dlock run outlives it (the waiter timed out after 5 s)"

# within the minimum hold: the name is freed at the hold's end, not at once
# (nor at the TTL)
kill_runner klh klh-1 klh-2 --lifetime session --at-least 3s
[ "$rc" = 0 ] && [ -n "$kr_start" ] ||
	fail "--lifetime session --at-least 3s: the waiter was not granted within 5 s: exit $rc; $(cat "$tmp/kr2.err")"
kill_in_hold=$((kill_t - kr_granted))
((kill_in_hold < 3000)) || fail "the kill came $kill_in_hold ms after the grant, not within the 3 s hold"
hold_end=$((kr_wgranted - kr_granted))
((hold_end >= 3000)) ||
	fail "--lifetime session --at-least 3s: the waiter was granted $hold_end ms after the first grant, within the hold"
ok "--lifetime session --at-least 3s: SIGKILL $kill_in_hold ms into the hold; the waiter was granted $hold_end ms after the first grant (hold 3 s, ttl 60s)"
results+=("run --lifetime session --at-least 3s SIGKILLed $kill_in_hold ms after its grant -> the waiter granted $hold_end ms after that grant (server clock), its command started $((kr_start - kill_t)) ms after the kill")

# a lost connection loses a session lease: the command is terminated (76)
rm -f "$tmp/kc.pgid"
"$dlock" run --lifetime session --ttl 3s --grace 1s kconn -- sh -c 'echo $$ >kc.pgid; exec sleep 60' 2>"$tmp/kc.err" &
dp=$!
bg_pids+=($dp)
wait_file "$tmp/kc.pgid" 5000
pg=$(cat "$tmp/kc.pgid")
groups+=("$pg")
wait_held kconn 5000
t0=$(now)
[ "$(sql "SELECT pg_terminate_backend(pid) FROM dlock_locks WHERE name = 'kconn'")" = t ] || fail "pg_terminate_backend of kconn's backend"
bound=$((3000 / 3 + 1000))
times=$(wait_group_dead "$pg" "$bound" "$t0") || fail "session connection terminated: group not dead within $bound ms"
read -r el _ <<<"$times"
wait_bg "$dp" 15 "dlock run --lifetime session after its backend was terminated"
[ "$rc" = 76 ] || fail "session connection terminated: exit $rc, expected 76; stderr: $(cat "$tmp/kc.err")"
grep -q "the connection its session lease lived on is gone" "$tmp/kc.err" || fail "session connection terminated: $(cat "$tmp/kc.err")"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'kconn'")" = 0 ] || fail "kconn still held"
ok "--lifetime session, its backend terminated: the command dead after $el ms (next renewal, bound $bound), exit 76"

# an extension still at 1.1: --lifetime (and --at-least) say so and exit 70;
# without them dlock run works as before
sql 'CREATE DATABASE old' >/dev/null
sql "CREATE EXTENSION dlock VERSION '1.1'" -d old >/dev/null
expect_status 0 "extension 1.1: run" "$dlock" -d "dbname=old" run o11 -- true
expect_status 0 "extension 1.1: run --no-wait" "$dlock" -d "dbname=old" run --no-wait o11 -- true
expect_status 70 "extension 1.1: run --lifetime session" "$dlock" -d "dbname=old" run --lifetime session o11 -- touch "$tmp/ran"
grep -q -- '--lifetime needs version 1.2 of the dlock extension; database "old" has 1.1 (ALTER EXTENSION dlock UPDATE)' "$tmp/err" ||
	fail "--lifetime on 1.1: $(cat "$tmp/err")"
expect_status 70 "extension 1.1: run --no-wait --lifetime ttl" "$dlock" -d "dbname=old" run --no-wait --lifetime ttl o11 -- touch "$tmp/ran"
expect_status 70 "extension 1.1: run --at-least" "$dlock" -d "dbname=old" run --at-least 1s o11 -- touch "$tmp/ran"
grep -q -- '--at-least needs version 1.2' "$tmp/err" || fail "--at-least on 1.1: $(cat "$tmp/err")"
expect_status 70 "extension 1.1: run --queue" "$dlock" -d "dbname=old" run --queue o11 -- touch "$tmp/ran"
grep -q -- '--queue needs version 1.2' "$tmp/err" || fail "--queue on 1.1: $(cat "$tmp/err")"
[ ! -e "$tmp/ran" ] || fail "a command ran although its option needs 1.2"
[ "$(sql "SELECT count(*) FROM dlock_locks" -d old)" = 0 ] || fail "a lease left in database old"

# ---------------------------------------------------------------- lease lost: forced release
# ttl 3s (renewal every 1 s), grace 1s.  The group has a member that
# ignores SIGTERM, so it ends only with the SIGKILL.  Bound: the next
# renewal (<= ttl/3) + grace, plus 1 s of slack for a loaded machine.
ttl=3000
grace=1000
rm -f "$tmp/fr.pgid"
"$dlock" run --ttl 3s --grace 1s forced -- \
	sh -c 'echo $$ >fr.pgid; (trap "" TERM; exec sleep 1000) & sleep 1000 & wait' 2>"$tmp/fr.err" &
dp=$!
bg_pids+=($dp)
wait_file "$tmp/fr.pgid" 5000
pg=$(cat "$tmp/fr.pgid")
groups+=("$pg")
wait_held forced 5000
sleep 0.5
[ "$(pgrep -c -g "$pg")" = 3 ] || fail "expected 3 processes in group $pg: $(pgrep -a -g "$pg")"
t0=$(now)
[ "$(sql "SELECT dlock_force_release('forced')")" = t ] || fail "dlock_force_release returned false"
bound=$((ttl / 3 + grace + 1000))
times=$(wait_group_dead "$pg" "$bound" "$t0") || fail "forced release: group not dead within $bound ms"
read -r el term_el <<<"$times"
wait_bg "$dp" 15 "dlock run after the forced release of forced"
[ "$rc" = 76 ] || fail "forced release: exit status $rc, expected 76; stderr: $(cat "$tmp/fr.err")"
grep -q "lease lost" "$tmp/fr.err" || fail "forced release: no message: $(cat "$tmp/fr.err")"
ok "forced release: SIGTERM after ${term_el} ms, whole group dead after $el ms (bound $bound), exit 76"
results+=("forced release -> first member dead (SIGTERM): ${term_el} ms; whole group dead (SIGKILL after --grace 1s): $el ms; bound ttl/3 + grace = $((ttl / 3 + grace)) ms (ttl 3s)")

# same, without the SIGTERM-ignoring member: detection latency alone
rm -f "$tmp/fr.pgid"
"$dlock" run --ttl 3s --grace 1s forced2 -- sh -c 'echo $$ >fr.pgid; sleep 1000 & sleep 1000 & wait' 2>/dev/null &
dp=$!
bg_pids+=($dp)
wait_file "$tmp/fr.pgid" 5000
pg=$(cat "$tmp/fr.pgid")
groups+=("$pg")
wait_held forced2 5000
sleep 0.3
t0=$(now)
sql "SELECT dlock_force_release('forced2')" >/dev/null
bound=$((ttl / 3 + 1000))
times=$(wait_group_dead "$pg" "$bound" "$t0") || fail "forced release: group not dead within $bound ms"
read -r el term_el <<<"$times"
wait_bg "$dp" 15 "dlock run after the forced release of forced2"
[ "$rc" = 76 ] || fail "forced release (2): exit status $rc, expected 76"
ok "forced release, group obeying SIGTERM: dead after $el ms (bound $bound)"
results+=("forced release -> group obeying SIGTERM dead: $el ms; bound ttl/3 = $((ttl / 3)) ms")

# ---------------------------------------------------------------- lease lost: server killed
# The lease is kept only as long as it surely lasts: SIGTERM at the latest
# ttl - margin - grace after the last renewal, SIGKILL at ttl - margin
# (margin = min(1 s, ttl/10)).  Bound measured from the kill: ttl - margin,
# plus 0.5 s of slack.
rm -f "$tmp/sk.pgid"
"$dlock" run --ttl 3s --grace 1s srvkill -- \
	sh -c 'echo $$ >sk.pgid; (trap "" TERM; exec sleep 1000) & sleep 1000 & wait' 2>"$tmp/sk.err" &
dp=$!
bg_pids+=($dp)
wait_file "$tmp/sk.pgid" 5000
pg=$(cat "$tmp/sk.pgid")
groups+=("$pg")
wait_held srvkill 5000
sleep 1.2
t0=$(now)
srv_stop
margin=$((ttl / 10 < 1000 ? ttl / 10 : 1000))
bound=$((ttl - margin + 500))
times=$(wait_group_dead "$pg" "$bound" "$t0") || fail "server killed: group not dead within $bound ms"
read -r el term_el <<<"$times"
wait_bg "$dp" 15 "dlock run after the server was killed"
[ "$rc" = 76 ] || fail "server killed: exit status $rc, expected 76; stderr: $(cat "$tmp/sk.err")"
ok "server killed: SIGTERM after ${term_el} ms, whole group dead after $el ms (bound $bound), exit 76"
results+=("server killed (pg_ctl stop -m immediate) -> first member dead (SIGTERM): ${term_el} ms; whole group dead: $el ms; bound ttl - margin = $((ttl - margin)) ms after the last renewal (ttl 3s, grace 1s)")
srv_start
# The requests queued above (run --queue) may have been granted leases that
# have no row: the crash began a grace that covers them whatever
# dlock.flush_grants says (038_crash_grace), and holds new grants back
deadline=$(($(now) + 60000))
until [ "$(sql "SELECT dlock_grace() IS NULL")" = t ]; do
	(($(now) < deadline)) || fail "the crash grace did not end within 60 s: $(sql "SELECT dlock_grace()")"
	sleep 0.1
done

# ---------------------------------------------------------------- transient loss
# An immediate restart of the server while the command runs: renewals fail
# for a moment, then succeed after a reconnect (the lease is rebuilt from
# dlock_leases), and the command finishes normally.
"$dlock" run --ttl 8s transient -- sh -c 'sleep 4; echo finished' >"$tmp/tr.out" 2>"$tmp/tr.err" &
dp=$!
bg_pids+=($dp)
wait_held transient 5000
sleep 1.5
t0=$(now)
"$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -m immediate -w -t 30 restart >/dev/null
restart_ms=$(($(now) - t0))
wait_bg "$dp" 15 "dlock run across a server restart"
[ "$rc" = 0 ] || fail "transient loss: exit status $rc, expected 0; stderr: $(cat "$tmp/tr.err")"
grep -q finished "$tmp/tr.out" || fail "transient loss: the command did not finish"
grep -q "renewed after" "$tmp/tr.err" || fail "transient loss: no renewal after the restart: $(cat "$tmp/tr.err")"
[ "$(sql "SELECT count(*) FROM dlock_locks WHERE name = 'transient'")" = 0 ] || fail "transient: lease left"
ok "server restarted ($restart_ms ms) under a running command: renewed after reconnecting, exit 0, released"

# a crashed backend must not be the reason anything passed
if srv_log_grep 'PANIC|TRAP:|terminated by signal'; then
	fail "the server log shows a crash"
fi

echo "--- measurements"
for r in "${results[@]}"; do
	echo "$r"
done
echo "cli.sh: all passed in $(($(now) - t_begin)) ms"
