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
cat > "$work/proto" <<PROTO
/dev/null
0 0
d--755 0 0
etc d--755 0 0
hostname ---644 0 0 $work/tree/etc/hostname
$
bin d--755 0 0
hello ---755 0 0 $work/tree/bin/hello
sh l--777 0 0 hello
$
$
PROTO
# an empty filesystem made by fstool itself, checked
fstool mkfs -q -f demo-empty.img --size 64m
fstool info demo-empty.img
fstool check demo-empty.img
# a populated one (mkfs.xfs protofile), listed, read and checked
truncate -s 512M demo.img
mkfs.xfs -q -f -p "$work/proto" demo.img
fstool ls -l -R demo.img /
fstool cat demo.img /etc/hostname
fstool check demo.img
