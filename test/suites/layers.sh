#!/usr/bin/env bash
# The layers of src/ and of cli/: no file calls into a file above it
# (tools/layers.sh, as `make check-layers` runs it).  Needs no server.
set -euo pipefail
cd "${DLOCK_TOP:-$(dirname "${BASH_SOURCE[0]}")/../..}"
exec bash tools/layers.sh src cli
