#!/usr/bin/env bash
# tools/indent.sh FILE...: formats C files as PostgreSQL's pgindent does
# (`make indent` runs it on src/ and cli/).  It runs pg_bsd_indent (Debian
# package pg-bsd-indent) with pgindent's options; the typedef names come
# from the debug information of the objects already built, as PostgreSQL's
# own typedefs list does.  Then it undoes pg_bsd_indent's tab between a
# function's return type and '*' on a line of its own, as pgindent does.
set -euo pipefail

command -v pg_bsd_indent >/dev/null || {
	echo "indent: pg_bsd_indent not found; install it with: apt-get install pg-bsd-indent" >&2
	exit 1
}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
objs=$(find "$top/src" "$top/cli" -name '*.o')
[[ -n "$objs" ]] || { echo "indent: build first (make), the typedefs come from the objects" >&2; exit 1; }

typedefs=$(mktemp)
out=$(mktemp)
trap 'rm -f "$typedefs" "$out"' EXIT
# shellcheck disable=SC2086
objdump -W $objs | awk '/DW_TAG_typedef/ { t = 1; next }
	t && /DW_AT_name/ { print $NF; t = 0 }' | sort -u >"$typedefs"

for f in "$@"; do
	pg_bsd_indent -bad -bap -bbb -bc -bl -cli1 -cp33 -cdb -nce -d0 -di12 \
		-nfc1 -i4 -l79 -lp -lpl -nip -npro -sac -tpg -ts4 -U"$typedefs" "$f" "$out"
	sed -E 's/^([A-Za-z_][A-Za-z0-9_]*)\t+ *\*$/\1 */' "$out" >"$f"
done
