#!/usr/bin/env bash
# pjdfstest (the POSIX conformance suite of FreeBSD and many FUSE projects)
# on an fstool mount, or on the kernel's XFS for reference.  Needs root.
#
#   bench/pjdfstest.sh [fstool|kernel] [PJDFSTEST_SRC]
#
# PJDFSTEST_SRC is a checkout of github.com/pjd/pjdfstest (cloned into
# bench/results/pjdfstest when not given); it is built with
# autoreconf -ifs && ./configure && make pjdfstest (apt: autoconf automake gcc).
# The suite runs with the mount as the current directory: prove -r TESTS.
# Prints prove's summary; the full log goes to bench/results/pjdfstest-WHAT.log.
set -euo pipefail
WHAT=${1:-fstool}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
SRC=${2:-$HERE/results/pjdfstest}
mkdir -p "$HERE/results"
if [ ! -x "$SRC/pjdfstest" ]; then
    [ -d "$SRC" ] || git clone -q https://github.com/pjd/pjdfstest "$SRC"
    (cd "$SRC" && autoreconf -ifs >/dev/null && ./configure >/dev/null && make -s pjdfstest)
fi
WORK=$(mktemp -d /var/tmp/pjdfstest.XXXXXX)
IMG=$WORK/img
MNT=$WORK/mnt
mkdir "$MNT"
truncate -s 2G "$IMG"
cleanup() {
    cd /
    if mountpoint -q "$MNT"; then
        if [ "$WHAT" = kernel ]; then umount "$MNT"; else fusermount3 -u "$MNT"; fi
    fi
    sleep 1
    rm -rf "$WORK"
}
trap cleanup EXIT
if [ "$WHAT" = kernel ]; then
    mkfs.xfs -q -f "$IMG"
    mount -o loop "$IMG" "$MNT"
else
    PYTHONPATH=$REPO python3 -m fstool mkfs --size 2g "$IMG" >/dev/null
    PYTHONPATH=$REPO python3 -m fstool mount -o allow_other "$IMG" "$MNT"
fi
LOG=$HERE/results/pjdfstest-$WHAT.log
cd "$MNT"
start=$(date +%s)
prove -r "$SRC/tests" > "$LOG" 2>&1 || true
end=$(date +%s)
cd /
tail -n 40 "$LOG" | sed -n '/Test Summary Report/,$p'
grep -E '^(Files=|Result:)' "$LOG" || true
echo "elapsed: $((end - start)) s; log: $LOG"
if [ "$WHAT" != kernel ]; then
    fusermount3 -u "$MNT"
    # the mount process writes everything back, then the image is checked
    for _ in $(seq 1 600); do flock -n "$IMG" true && break; sleep 1; done
    xfs_repair -n -f "$IMG" >/dev/null 2>&1 && echo "xfs_repair -n: clean" || echo "xfs_repair -n: exit $?"
fi
