#!/usr/bin/env bash
# tools/layers.sh [src] [cli]: the call graph between the files of src/ and of
# cli/ (default: both), as the compiler sees it, and a check that it has no
# cycle (`make check-layers`; the suite test/suites/layers.sh).
#
# Each .c file of a directory is compiled (-O0, into a temporary directory)
# with gcc's -fcallgraph-info, whose .ci files (VCG) name every function a
# file defines, with the file that defines it, and every direct call.  A
# call to a function defined in another file of the same directory is an
# edge between the two files; calls to anything else (PostgreSQL, libc,
# libpq) are ignored.  A static function is known by its file as well as
# its name, so two static functions of the same name in different files are
# never confused; a static inline function of a project header belongs to
# the header.  Calls through function pointers (hooks, callbacks) are not
# calls in the compiler's view and are not counted.
#
# Prints, per directory, each file's calls into other files (caller ->
# callee: the functions called), then either the layers, top to bottom
# (each file calls only files of the layers below it), or every cycle (a
# strongly connected set of more than one file) with the calls that close it.
#
# Exit status: 0 no cycle, 1 a cycle in a checked directory, 2 the script
# could not run (usage, compile error).  Needs gcc (10 or later) and python3.
# Environment: PG_CONFIG (default pg_config), CC (default gcc).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
pg_config=${PG_CONFIG:-pg_config}
cc=${CC:-gcc}

dirs=("$@")
[[ ${#dirs[@]} -gt 0 ]] || dirs=(src cli)
for d in "${dirs[@]}"; do
	case $d in
	src | cli) ;;
	*)
		echo "usage: tools/layers.sh [src] [cli]" >&2
		exit 2
		;;
	esac
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The include paths and definitions of each directory's real build (the
# Makefile's PGXS build for src/, cli/Makefile for cli/); no warnings, the
# real build checks those.
flags() {
	case $1 in
	src) echo "-Isrc -I$("$pg_config" --includedir-server) $("$pg_config" --cppflags)" ;;
	cli) echo "-std=gnu11 -Icli -I$("$pg_config" --includedir) -DDLOCK_CLI_VERSION=\"0\"" ;;
	esac
}

status=0
for d in "${dirs[@]}"; do
	mkdir -p "$tmp/$d"
	read -r -a cflags <<<"$(flags "$d")"
	for c in "$d"/*.c; do
		"$cc" -O0 -w "${cflags[@]}" -fcallgraph-info -c -o "$tmp/$d/$(basename "$c" .c).o" "$c" || {
			echo "layers: $c does not compile" >&2
			exit 2
		}
	done
	python3 - "$d" "$tmp/$d"/*.ci <<'EOF' || status=$?
import os, re, sys

topdir, cis = sys.argv[1], sys.argv[2:]
node_re = re.compile(r'node: \{ title: "([^"]*)" label: "([^"\\]*)\\n([^"]*?):\d+:\d+"(.*)\}')
edge_re = re.compile(r'edge: \{ sourcename: "([^"]*)" targetname: "([^"]*)"')

def project_file(path):
    """The file's name in the directory, or None if it is not one of it."""
    rel = os.path.relpath(os.path.realpath(path))
    return os.path.basename(rel) if os.path.dirname(rel) == topdir else None

# Pass 1: where each function is defined.  A node without "shape : ellipse"
# is defined in this translation unit; its title is "unit:name" when it is
# local (static), the bare name when it is global.
glob = {}                       # global name -> defining file
local = {}                      # (unit, title) -> defining file
units = []
for ci in cis:
    text = open(ci).read().splitlines()
    unit = None
    calls = []
    for line in text:
        m = node_re.match(line)
        if m:
            title, name, where, rest = m.groups()
            if 'ellipse' in rest:
                continue
            f = project_file(where)
            if f is None:
                continue
            if title == name:
                if title in glob and glob[title] != f:
                    sys.exit(f"layers: {name} is defined in {glob[title]} and {f}")
                glob[title] = f
            else:
                local[(ci, title)] = f
            continue
        m = edge_re.match(line)
        if m:
            calls.append(m.groups())
    units.append((ci, calls))

# Pass 2: the calls between files, with the functions called.
files = set(glob.values()) | set(local.values())
edges = {}                      # (caller file, callee file) -> {callee name}
for ci, calls in units:
    for src, dst in calls:
        fs = local.get((ci, src)) or glob.get(src)
        fd = local.get((ci, dst)) or glob.get(dst)
        if fs and fd and fs != fd:
            edges.setdefault((fs, fd), set()).add(dst.rsplit(':', 1)[-1])

print(f"{topdir}/: calls between files (caller -> callee: functions called)")
for (a, b) in sorted(edges):
    print(f"  {a} -> {b}: {' '.join(sorted(edges[(a, b)]))}")

# Strongly connected components (Tarjan, iterative).
succ = {f: sorted(b for (a, b) in edges if a == f) for f in files}
index, low, onstack, stack, sccs = {}, {}, set(), [], []
for root in sorted(files):
    if root in index:
        continue
    work = [(root, 0)]
    while work:
        v, i = work.pop()
        if i == 0:
            index[v] = low[v] = len(index)
            stack.append(v)
            onstack.add(v)
        if i < len(succ[v]):
            work.append((v, i + 1))
            w = succ[v][i]
            if w not in index:
                work.append((w, 0))
            elif w in onstack:
                low[v] = min(low[v], index[w])
            continue
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                onstack.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))
        if work:
            u = work[-1][0]
            low[u] = min(low[u], low[v])

cycles = [c for c in sccs if len(c) > 1]
if cycles:
    for c in cycles:
        print(f"{topdir}/: CYCLE between {' '.join(c)}:")
        for (a, b) in sorted(edges):
            if a in c and b in c:
                print(f"  {a} -> {b}: {' '.join(sorted(edges[(a, b)]))}")
    sys.exit(1)

# Layers: a file sits one above the highest file it calls.
level = {}
def depth(f):
    if f not in level:
        level[f] = 1 + max((depth(g) for g in succ[f]), default=-1)
    return level[f]
for f in files:
    depth(f)
print(f"{topdir}/: no cycle; layers, top to bottom:")
for n in range(max(level.values(), default=-1), -1, -1):
    print(f"  {' '.join(sorted(f for f in files if level[f] == n))}")
EOF
done
exit "$status"
