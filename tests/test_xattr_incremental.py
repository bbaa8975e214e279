"""xattrs set and removed one at a time (fstool.ns.attrops through
Namespace.set_xattr/remove_xattr, the calls the FUSE mount makes): the
attr fork changes in place in every form, each call costs about the same
whatever the number of xattrs, and the oracles agree (xfs_repair -n of 6.1
and 6.10.1 clean, the kernel reads every xattr back).

The sizes timed are 10 and 1,000 xattrs; FSTOOL_XATTR_LARGE=1 adds
10,000.  FSTOOL_XATTR_STRESS=1 runs ``stress-ng --xattr 1 -t 10`` on the
mount (it needs stress-ng)."""
from __future__ import annotations

import errno
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from fixtures import collisions as CL
from fixtures import images
from fixtures.fusemount import FuseMounted, fuse_skip_reason, repair_clean

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")


def mkfs(img, *args) -> None:
    """An image from fstool mkfs (its default geometry has the rmapbt)."""
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-f", "--size", "256m", *args,
                    str(img)], check=True, capture_output=True)


def session(img):
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    w = Writer(img)
    return w, Namespace(w), Meta


def kernel_xattrs(img, want: dict) -> dict:
    """{path: {name: value}} as the kernel reads them: every name listxattr
    gives, or where the list is over the VFS's 64 KiB (E2BIG: 10,000 names)
    the names fstool lists, each read with getxattr."""
    import fstool
    with images.Mounted(img, readonly=True, nouuid=True) as m:
        out = {}
        for p in want:
            full = os.path.join(m, p.strip("/"))
            try:
                names = os.listxattr(full)
            except OSError as e:
                if e.errno != errno.E2BIG:
                    raise
                with fstool.open_image(str(img)) as fs:
                    names = fs.xattr_names(fs.lookup(p).ino)
                assert len(names) * 8 > 65536
            out[p] = {k: os.getxattr(full, k) for k in names}
        return out


def check_image(img, want: dict) -> None:
    """Both xfs_repair -n clean, fstool check clean and the kernel reading
    back exactly ``want`` ({path: {name: value}})."""
    repair_clean(img)
    r = subprocess.run([sys.executable, "-m", "fstool", "check", str(img)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-2000:]
    assert kernel_xattrs(img, want) == want


def value_for(rnd, k: int, bs: int) -> bytes:
    """Mostly small values, some a remote one (over 3/4 of a block)."""
    size = rnd.choice((3, 20, 60, 120)) if rnd.random() > 0.04 else bs
    return bytes([k % 251]) * size


# -- time per call -------------------------------------------------------------------------
def _timed(w, ns, ino, names, value) -> float:
    """CPU seconds per call of set, then replace, then remove of ``names``,
    each call its own transaction (as a mount's setxattr is); the best of
    three rounds.  CPU time of this process, not wall time: tests running
    beside this one (pytest-xdist workers, other runs) do not tip the
    ratio."""
    best = None
    for _round in range(3):
        t = time.process_time()
        for name in names:
            with w.transaction():
                ns.set_xattr(ino, name, value)
        for name in names:
            with w.transaction():
                ns.set_xattr(ino, name, value[::-1] + b"r", 2)
        for name in names:
            with w.transaction():
                ns.remove_xattr(ino, name)
        per = (time.process_time() - t) / (3 * len(names))
        best = per if best is None else min(best, per)
    return best


@needs_loop
def test_per_call_time_flat_from_10_to_1000_xattrs(tmp_path):
    """set/replace/remove on a file holding 10, 1,000 (and with
    FSTOOL_XATTR_LARGE=1 10,000) xattrs: the time per call stays within 3x
    across the sizes (rebuilding the fork per call, it grew with the count:
    ~7 ms at 1,000 through the mount where 10 took 0.3 ms); after each
    size the image is repair-clean and the kernel reads every xattr back."""
    sizes = [10, 1000] + ([10000] if os.environ.get("FSTOOL_XATTR_LARGE") else [])
    rnd = random.Random(5)
    per_call = {}
    for n in sizes:
        img = tmp_path / f"t{n}.img"
        mkfs(img)
        w, ns, Meta = session(img)
        want = {}
        with w:
            with w.transaction():
                ino = ns.create_file(w.sb.rootino, b"f", Meta())
            for a in range(0, n, 250):
                with w.transaction():
                    for k in range(a, min(n, a + 250)):
                        name = f"user.attr{k:06d}"
                        want[name] = value_for(rnd, k, w.sb.blocksize)
                        ns.set_xattr(ino, name, want[name])
            per_call[n] = _timed(w, ns, ino, [f"user.timed{k:03d}" for k in range(40)],
                                 b"v" * 40)
        check_image(img, {"/f": want})
    slow, fast = max(per_call.values()), min(per_call.values())
    assert slow <= 3 * fast, {n: f"{1e3 * t:.3f} ms" for n, t in per_call.items()}


# -- every form --------------------------------------------------------------------------------
@needs_loop
def test_every_form_one_at_a_time_on_1k_blocks(tmp_path):
    """On 1 KiB blocks, a file and a directory each take 1,500 xattrs (some
    remote; groups of names sharing one hash, so equal hashes span leaves)
    one per transaction: shortform, leaf, leaf to node, leaf splits, node
    splits up to a second node level; then lose them one at a time: leaf
    joins, node joins, root joins back to one leaf, shortform and no attr
    fork.  Both xfs_repair -n clean and the kernel equal at the largest,
    midway and at the end; XATTR_CREATE/REPLACE errnos on colliding names."""
    from fstool.errors import FsToolError
    from fstool.ns.attrops import ATTR_CONVERSIONS
    img = tmp_path / "forms.img"
    mkfs(img, "-b", "size=1024")
    rnd = random.Random(7)
    src = CL.Names(seed=21)
    before = ATTR_CONVERSIONS.copy()
    w, ns, Meta = session(img)
    want = {"/f": {}, "/d": {}}
    order = {}
    forms = {}
    with w:
        with w.transaction():
            inos = {"/f": ns.create_file(w.sb.rootino, b"f", Meta()),
                    "/d": ns.mkdir(w.sb.rootino, b"d", Meta(perm=0o755))}
        for path, ino in inos.items():
            names = [f"trusted.k{k:05d}" for k in range(1400)]
            for _g in range(20):
                names += ["user." + n.decode() for n in src.group(5, 20)]
            rnd.shuffle(names)
            seen = forms.setdefault(path, set())
            for k, name in enumerate(names):
                with w.transaction():
                    want[path][name] = value_for(rnd, k, 1024)
                    ns.set_xattr(ino, name, want[path][name], 1)
                seen.add(w.fs.inode(ino).aformat)
            order[path] = names
            group = [n for n in names if n.startswith("user.")][:5]
            for call, args, err in [(ns.set_xattr, (group[0], b"x", 1), errno.EEXIST),
                                    (ns.set_xattr, ("user." + "z" * 19, b"x", 2), errno.ENODATA),
                                    (ns.remove_xattr, ("user." + "z" * 19,), errno.ENODATA)]:
                with pytest.raises(FsToolError) as ei:
                    with w.transaction():
                        call(ino, *args)
                assert ei.value.errno == err
            for name in group:                  # replace, through equal hashes
                with w.transaction():
                    ns.set_xattr(ino, name, b"new " + name.encode(), 2)
                    want[path][name] = b"new " + name.encode()
            assert {n: ns.get_xattr(ino, n) for n in ns.list_xattr(ino)} == want[path]
    grown = ATTR_CONVERSIONS - before
    for kind in ("leaf->node", "split", "node-split", "root-split"):
        assert grown[kind] > 0, (kind, dict(grown))
    check_image(img, want)

    def shrink(upto: float):
        w, ns, _Meta = session(img)
        with w:
            for path, names in order.items():
                ino = ns.lookup(path)
                for name in names[:int(len(names) * upto)]:
                    if name in want[path]:
                        with w.transaction():
                            ns.remove_xattr(ino, name)
                        del want[path][name]
                    forms[path].add((w.fs.inode(ino).forkoff != 0, w.fs.inode(ino).aformat))
    shrink(0.6)
    check_image(img, want)
    shrink(1.0)
    done = ATTR_CONVERSIONS - before
    for kind in ("join", "node-join", "root-join", "node->leaf"):
        assert done[kind] > 0, (kind, dict(done))
    for path in order:
        # leaf form, then shortform, then no attr fork at all
        assert {(True, 2), (True, 1), (False, 2)} <= forms[path], forms[path]
    check_image(img, want)


@needs_loop
def test_setattr_command_changes_one_xattr(tmp_path):
    """``fstool setattr --set-xattr/--remove-xattr`` on a file with a node
    form attr fork: the one xattr changes, the others stay, repair-clean."""
    img = tmp_path / "edit.img"
    mkfs(img)
    w, ns, Meta = session(img)
    want = {f"user.a{k:04d}": b"%d" % k * 10 for k in range(600)}
    with w:
        with w.transaction():
            ino = ns.create_file(w.sb.rootino, b"f", Meta())
            for k, v in want.items():
                ns.set_xattr(ino, k, v)
    r = subprocess.run([sys.executable, "-m", "fstool", "setattr", str(img), "/f",
                        "--set-xattr", "user.new=fresh", "--set-xattr", "user.a0007=seven",
                        "--remove-xattr", "user.a0300"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want.update({"user.new": b"fresh", "user.a0007": b"seven"})
    del want["user.a0300"]
    check_image(img, {"/f": want})
    r = subprocess.run([sys.executable, "-m", "fstool", "setattr", str(img), "/f",
                        "--remove-xattr", "user.a0300"], capture_output=True, text=True)
    assert r.returncode != 0 and "no xattr" in r.stderr and "Traceback" not in r.stderr


# -- through the mount -------------------------------------------------------------------------
@needs_loop
@pytest.mark.skipif(fuse_skip_reason() is not None, reason=str(fuse_skip_reason()))
def test_mount_setxattr_removexattr(tmp_path):
    """setxattr/removexattr/getxattr through the FUSE mount on a file going
    to 1,500 xattrs and back to 500; the kernel then reads the same."""
    img = tmp_path / "m.img"
    mkfs(img)
    want = {}
    with FuseMounted(img) as m:
        p = os.path.join(m, "f")
        open(p, "w").close()
        for k in range(1500):
            want[f"user.v{k:05d}"] = b"%05d" % k * (1 + k % 7)
            os.setxattr(p, f"user.v{k:05d}", want[f"user.v{k:05d}"])
        for k in range(0, 1500, 3):
            os.removexattr(p, f"user.v{k:05d}")
            del want[f"user.v{k:05d}"]
        for k in range(1, 1500, 3):
            os.setxattr(p, f"user.v{k:05d}", b"again", os.XATTR_REPLACE)
            want[f"user.v{k:05d}"] = b"again"
        with pytest.raises(OSError) as ei:
            os.setxattr(p, "user.v00001", b"x", os.XATTR_CREATE)
        assert ei.value.errno == errno.EEXIST
        assert {k: os.getxattr(p, k) for k in os.listxattr(p)} == want
    check_image(img, {"/f": want})


@needs_loop
@pytest.mark.skipif(not os.environ.get("FSTOOL_XATTR_STRESS"),
                    reason="stress-ng run (10 s): set FSTOOL_XATTR_STRESS=1")
@pytest.mark.skipif(shutil.which("stress-ng") is None, reason="stress-ng is not installed")
@pytest.mark.skipif(fuse_skip_reason() is not None, reason=str(fuse_skip_reason()))
def test_stress_ng_xattr_completes_operations(tmp_path):
    """``stress-ng --xattr 1 -t 10`` on the mount completes operations (each
    is some 25,000 xattr calls on one file of up to 4,096 xattrs); the
    image is repair-clean after."""
    img = tmp_path / "s.img"
    mkfs(img)
    with FuseMounted(img) as m:
        r = subprocess.run(["stress-ng", "--xattr", "1", "-t", "10", "--metrics-brief",
                            "--temp-path", str(m)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [x for x in r.stderr.splitlines() if "metrc" in x and " xattr " in x][0]
    assert int(line.split("xattr")[1].split()[0]) >= 1, line
    repair_clean(img)
