#!/usr/bin/env bash
# The layers of src/: no file calls into a file above it (tools/layers.sh,
# as `make check-layers` runs it).  Needs no server.  cli/ is left out until
# its cycle (every file calls msg() in main.c, session.c calls into run.c) is
# gone; then this checks both, as tools/layers.sh does with no argument.
set -euo pipefail
cd "${DLOCK_TOP:-$(dirname "${BASH_SOURCE[0]}")/../..}"
exec bash tools/layers.sh src
