#!/usr/bin/env python3
"""Do two fstool trees write the same bytes?  sha256 of the images each one
makes from the same inputs, side by side.

    python3 bench/same_images.py BASE_TREE [--only populate,workload,workload-noxattr]

BASE_TREE is another checkout of fstool with its native modules built
(``git archive main | tar -x -C /tmp/base && cd /tmp/base && python3 setup.py
build_ext --inplace``); the other side is this checkout.  Each tree, in a
subprocess run from its root (so ``fstool`` is that tree's), makes:

- ``populate``: ``fstool mkfs`` (fixed uuid and timestamp, 1 KiB blocks)
  then ``fstool populate`` of a generated source tree: directories in every
  form up to a node directory of two node levels, files with xattrs in
  every attr-fork form (shortform, leaf, node of two levels, remote values);
- ``workload``: the seeded live-directory workload of tests/test_live_dirs.py
  (fixtures.livedirs.workload(6), its creates, removes, renames and
  xattrs) through fstool.ns.namespace on an ``fstool mkfs`` image, with a
  fixed clock;
- ``workload-noxattr``: the same without its xattr operations.

Exit status 0 when every image is byte-identical, 1 otherwise (each line
says which).  Refactors that must not change a byte are held to this; a
change meant to write differently says which images differ and why.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
UUID = "2f1e0d4c-3b5a-4978-8695-a4b3c2d1e0f9"
EPOCH = 1700000000

_WORKLOAD = r"""
import sys
from fixtures import livedirs as L
from fstool.ns.writer import Writer
image, xattrs = sys.argv[1], sys.argv[2] == "1"
ops = L.workload(6, grow=1100, churn=300, dirs=2)
if not xattrs:
    ops = [op for op in ops if op[0] not in ("setxattr", "rmxattr")]
Writer.now_ns = lambda self: 1700000000 * 10**9       # one clock for both trees
L.run_fstool(image, ops)
"""


def make_source(tar: Path) -> None:
    """A tar archive reaching every directory and attr-fork form on 1 KiB
    blocks (xattrs as pax SCHILY.xattr records)."""
    def add(t, name, data=None, xattrs=None):
        info = tarfile.TarInfo(name)
        info.mtime = EPOCH
        if data is None:
            info.type, info.mode = tarfile.DIRTYPE, 0o755
        else:
            info.size, info.mode = len(data), 0o644
        if xattrs:
            info.pax_headers = {f"SCHILY.xattr.{k}": v.decode("latin-1")
                                for k, v in xattrs.items()}
        t.addfile(info, io.BytesIO(data) if data is not None else None)

    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT, encoding="latin-1") as t:
        for ndir, count in (("small", 3), ("block", 20), ("leaf", 150), ("node", 3000)):
            add(t, ndir)
            for k in range(count):
                add(t, f"{ndir}/entry-{k:05d}-{'x' * (k % 40)}", b"%d\n" % k)
        add(t, "xattrs")
        for name, count, size in (("sf", 3, 8), ("leaf", 12, 40), ("node", 400, 30),
                                  ("node2", 2000, 60)):
            add(t, f"xattrs/{name}", b"data",
                {f"user.a{k:05d}": bytes([97 + k % 26]) * size for k in range(count)})
        add(t, "xattrs/remote", b"data", {"user.big": b"R" * 5000, "user.small": b"s"})


def fstool(tree: Path, *args, env=None) -> None:
    subprocess.run([sys.executable, "-m", "fstool", *args], cwd=tree, check=True,
                   capture_output=True, env=env)


def mkfs(tree: Path, img: Path) -> None:
    fstool(tree, "mkfs", "--uuid", UUID, "--timestamp", str(EPOCH), "--size", "512m",
           "-b", "size=1024", str(img))


def build(tree: Path, kind: str, out: Path, src: Path) -> str:
    img = out / f"{tree.name}-{kind}.img"
    img.unlink(missing_ok=True)
    mkfs(tree, img)
    if kind == "populate":
        fstool(tree, "populate", str(img), str(src),
               env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)})
    else:
        subprocess.run([sys.executable, "-c", _WORKLOAD, str(img),
                        "1" if kind == "workload" else "0"], cwd=tree, check=True,
                       capture_output=True)
    h = hashlib.sha256()
    with open(img, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("--only", default="populate,workload,workload-noxattr")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if not (a.base / "fstool").is_dir():
        print(f"same_images: {a.base} holds no fstool tree", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="same-images-") as tmp:
        out = a.out or Path(tmp)
        src = Path(tmp) / "src.tar"
        make_source(src)
        same = True
        for kind in a.only.split(","):
            base = build(a.base.resolve(), kind, out, src)
            mine = build(HERE, kind, out, src)
            ok = base == mine
            same &= ok
            print(f"{kind:18s} {'same' if ok else 'DIFFERENT'}  base {base[:16]}  "
                  f"this {mine[:16]}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
