#!/usr/bin/env bash
# Build xfsprogs 6.10.1 (the release of October 2024, vendored beside this
# script) into PREFIX, once, and print PREFIX/sbin.  It is the oracle for
# today's images: its mkfs.xfs makes them with the rmapbt, reflink, large
# extent counters and (-n parent=1) parent pointers; its xfs_repair, xfs_db,
# xfs_logprint and xfs_io judge and print them.  The distribution's xfsprogs
# stays on PATH for the tests that compare with it.
#
#   PREFIX: $1, else $FSTOOL_XFSPROGS_MODERN, else ~/.cache/xfsprogs-6.10
# Build dependencies (Debian): autoconf automake libtool pkg-config uuid-dev
# libblkid-dev libinih-dev liburcu-dev libedit-dev gettext (install.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=6.10.1
prefix=${1:-${FSTOOL_XFSPROGS_MODERN:-$HOME/.cache/xfsprogs-6.10}}
if [ -x "$prefix/sbin/mkfs.xfs" ] && "$prefix/sbin/mkfs.xfs" -V 2>/dev/null | grep -q "$version"; then
    echo "$prefix/sbin"
    exit 0
fi
tarball="$here/xfsprogs-$version.tar.xz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$tarball"
cd "$work/xfsprogs-$version"
{ make configure && ./configure --prefix="$prefix" --disable-scrub --disable-libicu \
    && make -j"$(nproc)" && make install; } > "$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; echo "xfsprogs $version build failed" >&2; exit 1; }
echo "$prefix/sbin"
