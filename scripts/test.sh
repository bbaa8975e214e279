#!/usr/bin/env bash
# Run the test suite.  Tests that need root, a kernel loop mount of XFS or
# xfsprogs skip with their reason, listed in the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
exec ${PYTHON:-python3} -m pytest -q -rs "$@"
