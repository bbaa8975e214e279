#!/usr/bin/env bash
# Set everything up on a fresh machine and run the main job on a small
# example: build an XFS image holding a small tree, then inspect it with fstool.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree/etc" "$work/tree/bin"
echo "demo-host" > "$work/tree/etc/hostname"
printf '#!/bin/sh\necho hello\n' > "$work/tree/bin/hello"
chmod 755 "$work/tree/bin/hello"
ln -s hello "$work/tree/bin/sh"
# build an image holding the tree, without root or a mount, reproducibly
SOURCE_DATE_EPOCH=1700000000 fstool mkfs -q -f demo.img --size 64m \
    --uuid 2b1f0c5e-4a3d-4e8f-9b6a-7c5d4e3f2a1b --populate "$work/tree" --squash-owner \
    --clamp-mtime
fstool mkdir demo.img /var/log -p
fstool setattr demo.img /etc/hostname --set-xattr user.origin=demo
fstool info demo.img
fstool ls -l -R demo.img /
fstool cat demo.img /etc/hostname
fstool check demo.img
