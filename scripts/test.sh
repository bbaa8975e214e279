#!/usr/bin/env bash
# Run the test suite.  Tests that need root, a kernel loop mount of XFS or
# xfsprogs skip with their reason, listed in the summary.
#
# With pytest-xdist installed (the test extra) the files run in parallel,
# one file per worker at a time (--dist loadfile: a file's module fixtures
# are built once), one worker per CPU up to 4: the tests wait on the kernel,
# xfsprogs and the disk as much as on the CPU, but each worker holds its own
# images and loop mounts, and more than 4 was never measured.
# FSTOOL_TEST_WORKERS=N picks the number (1: sequential); so does passing
# -n/--numprocesses or -p no:xdist yourself.  Without xdist, sequential.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
parallel=()
case " $* " in
    *" -n"*|*" --numprocesses"*|*" -p no:xdist "*|*" -pno:xdist "*) ;;
    *)
        if $PY -c "import xdist" 2>/dev/null; then
            workers=${FSTOOL_TEST_WORKERS:-$($PY -c "import os; print(min(4, len(os.sched_getaffinity(0))))")}
            if [ "$workers" -gt 1 ]; then
                parallel=(-n "$workers" --dist loadfile)
            fi
        fi
        ;;
esac
exec $PY -m pytest -q -rs "${parallel[@]}" "$@"
