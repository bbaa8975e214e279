#!/usr/bin/env python3
"""Do two fstool trees write the same bytes?  sha256 of the images each one
makes from the same inputs, side by side.

    python3 bench/same_images.py BASE_TREE [--only populate,workload,workload-noxattr,
                                                   mount,mount-noholes,mount-pure]
                                           [--mkfs "-n parent=1"]

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
- ``workload-noxattr``: the same without its xattr operations;
- ``mount``: a seeded workload through the mount's operations
  (``fstool.mount.ops.MountOps`` over a ``Volume``, as the native request
  loop drives them: group commit, creates answered before their names are
  added, told their names are known missing where the tree takes that),
  with a fixed clock: creates round-robin over directories,
  mkdir, appends, overwrites, 4 KiB writes into a sparse file, truncates,
  renames, hard links, symlinks, unlinks, xattrs, checkpoints;
- ``mount-noholes``: the same without writes into holes (no sparse file,
  writes to the other files only at their end), whose allocation the
  mount's hole fill decides;
- ``mount-pure``: ``mount`` on the pure-Python backend (FSTOOL_PURE_PYTHON=1)
  in both trees; compared with ``mount`` it holds the two backends of one
  tree to the same bytes.

``--mkfs`` adds options to every ``fstool mkfs`` (``-n parent=1``: the same
images with parent pointers).

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

_MOUNT = r"""
import inspect, os, random, sys
from fstool.ns.writer import Writer
Writer.now_ns = lambda self: 1700000000 * 10**9       # one clock for both trees
from fstool.mount.ops import MountOps
from fstool.mount.volume import Volume
image, holes = sys.argv[1], sys.argv[2] == "1"
rng = random.Random(30)
vol = Volume(image)
ops = MountOps(vol)
ops.answer_first = True
# the native loop tells a create its name is known missing (its kept names),
# where the tree's create takes that
KNOWN = {"absent": True} if "absent" in inspect.signature(ops.create).parameters else {}
dirs = []
for d in range(24):
    ops.lookup(1, b"d%d" % d)
    dirs.append(ops.mkdir(1, b"d%d" % d, 0o755, 0, 0).ino)
files = []                      # (parent, name, ino)
sparse = []                     # open handles of sparse files
for i in range(4000):
    op = rng.random()
    parent = dirs[i % len(dirs)]
    if op < 0.55 or not files:
        name = b"f%d" % i
        ops.lookup(parent, name)
        fh, a = ops.create(parent, name, 0o100644, os.O_WRONLY, 0, 0, **KNOWN)
        ops.run_later()
        if rng.random() < 0.3:
            ops.write(fh, 0, rng.randbytes(rng.choice([1, 700, 4096, 9000, 70000])))
        ops.release(fh)
        files.append((parent, name, a.ino))
    elif op < 0.60:
        name = b"sub%d" % i
        ops.lookup(parent, name)
        dirs.append(ops.mkdir(parent, name, 0o750, 0, 0).ino)
    elif op < 0.68:
        p, n, ino = rng.choice(files)
        fh = ops.open(ino, os.O_WRONLY)
        size = ops.getattr(ino).size
        # without holes: appends only (a write inside the size may fill one)
        off = rng.randrange(size + 1) if holes else size
        ops.write(fh, off, rng.randbytes(rng.randrange(1, 20000)))
        ops.release(fh)
    elif op < 0.71:
        p, n, ino = rng.choice(files)
        ops.setattr(ino, size=rng.randrange(30000))
    elif op < 0.78:
        k = rng.randrange(len(files))
        p, n, ino = files[k]
        q = rng.choice(dirs)
        m = b"r%d" % i
        ops.rename(p, n, q, m, 0)
        files[k] = (q, m, ino)
    elif op < 0.81:
        p, n, ino = rng.choice(files)
        m = b"l%d" % i
        ops.link(ino, parent, m)
    elif op < 0.84:
        ops.symlink(parent, b"s%d" % i, b"target-%d" % i * rng.randrange(1, 30), 0, 0)
    elif op < 0.90:
        p, n, ino = files.pop(rng.randrange(len(files)))
        ops.unlink(p, n)
    elif op < 0.95:
        p, n, ino = rng.choice(files)
        ops.setxattr(ino, b"user.k%d" % rng.randrange(8), rng.randbytes(rng.randrange(1, 300)))
    elif holes:
        if not sparse or rng.random() < 0.05:
            name = b"sparse%d" % i
            ops.lookup(parent, name)
            fh, a = ops.create(parent, name, 0o100644, os.O_RDWR, 0, 0, **KNOWN)
            ops.run_later()
            ops.setattr(a.ino, size=8 << 20)
            sparse.append(fh)
        fh = rng.choice(sparse)
        for _ in range(20):
            ops.write(fh, rng.randrange(2048) * 4096, rng.randbytes(4096))
    if i % 700 == 699:
        ops.checkpoint()
for fh in sparse:
    ops.release(fh)
vol.close()
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


def mkfs(tree: Path, img: Path, extra=()) -> None:
    fstool(tree, "mkfs", "--uuid", UUID, "--timestamp", str(EPOCH), "--size", "512m",
           "-b", "size=1024", *extra, str(img))


def build(tree: Path, kind: str, out: Path, src: Path, extra=()) -> str:
    img = out / f"{tree.name}-{kind}.img"
    img.unlink(missing_ok=True)
    mkfs(tree, img, extra)
    if kind == "populate":
        fstool(tree, "populate", str(img), str(src),
               env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)})
    elif kind.startswith("mount"):
        env = {**os.environ, "FSTOOL_PURE_PYTHON": "1" if kind == "mount-pure" else "0"}
        subprocess.run([sys.executable, "-c", _MOUNT, str(img),
                        "0" if kind == "mount-noholes" else "1"], cwd=tree, check=True,
                       capture_output=True, env=env)
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
    ap.add_argument("--mkfs", default="", help="more fstool mkfs options, one string")
    a = ap.parse_args()
    if not (a.base / "fstool").is_dir():
        print(f"same_images: {a.base} holds no fstool tree", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="same-images-") as tmp:
        out = a.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        src = Path(tmp) / "src.tar"
        make_source(src)
        same = True
        for kind in a.only.split(","):
            base = build(a.base.resolve(), kind, out, src, a.mkfs.split())
            mine = build(HERE, kind, out, src, a.mkfs.split())
            ok = base == mine
            same &= ok
            print(f"{kind:18s} {'same' if ok else 'DIFFERENT'}  base {base[:16]}  "
                  f"this {mine[:16]}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
