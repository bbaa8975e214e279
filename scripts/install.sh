#!/usr/bin/env bash
# Install what fstool and its tests need on a fresh Debian machine, then the
# project itself (editable, with test extras).  Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if command -v apt-get >/dev/null; then
    need=""
    # the second and third lines: what xfsprogs 6.10.1 (scripts/xfsprogs) is
    # built with; the last two: sfdisk and sgdisk, for the partition tests
    for pkg in xfsprogs fuse3 libfuse3-dev pkg-config attr gcc python3-dev zstd \
               make autoconf automake libtool uuid-dev libblkid-dev libinih-dev liburcu-dev \
               libedit-dev gettext \
               fdisk gdisk; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
    done
    if [ -n "$need" ]; then
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
    fi
fi

# xfsprogs 6.10.1, the oracle for today's images (rmapbt, reflink, parent
# pointers), built once into a cache; the distribution's xfsprogs stays on PATH
if ! modern=$(bash scripts/xfsprogs/build.sh); then
    echo "warning: xfsprogs 6.10.1 did not build; its tests will skip" >&2
else
    echo "xfsprogs 6.10.1: $modern"
fi

PY=${PYTHON:-python3}
pip_install() {
    if ! $PY -m pip install -q "$@" 2>/tmp/fstool-pip.err; then
        if grep -q externally-managed /tmp/fstool-pip.err; then
            $PY -m pip install -q --break-system-packages "$@"
        else
            cat /tmp/fstool-pip.err >&2
            return 1
        fi
    fi
}
# fstool mount: setup.py builds its native request loop against libfuse3-dev
# (pkg-config); [mount] adds pyfuse3 and trio, the fallback loop
# editable_mode=compat: the project's directory on sys.path through a plain
# .pth line; the default (strict) mode installs an import finder that every
# Python process of the environment loads at start-up (pathlib, importlib.util,
# about 50M instructions: more than fstool's own imports of a reading command).
# Where pip or setuptools cannot, the default editable install.
pip_install -e ".[test,mount]" --config-settings editable_mode=compat || pip_install -e ".[test,mount]"
# byte-compile up front: where PYTHONDONTWRITEBYTECODE is set, every command
# would otherwise compile the package again at start-up
$PY -m compileall -q fstool fstool_native fixtures >/dev/null
$PY -c "import fstool; print('fstool installed, parser backend:', fstool.backend())"
