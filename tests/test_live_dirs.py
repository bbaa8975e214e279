"""Incremental directory changes, rename, the unlinked list and xattrs one
at a time (fstool.ns.namespace / dirops), checked against the oracles:
xfs_repair -n, a kernel loop mount of fstool's image, and the same
operations done by the kernel on a twin image, whose directory blocks must
come out structurally equal."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest

from fixtures import images
from fixtures import livedirs as L

needs_xfsprogs = pytest.mark.skipif(not images.xfsprogs_available(),
                                    reason="needs xfsprogs (mkfs.xfs, xfs_repair)")
needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")


def repair_clean(img) -> None:
    from fixtures.fusemount import repair_clean as both
    both(img)


def _names(view):
    return {d: [e[0] for e in es] for d, es in view["dirs"].items()}


@needs_loop
def test_random_workload_matches_kernel_twin(tmp_path):
    """One seeded workload through every directory form and both directions
    of every conversion, done by fstool on one image and by the kernel on
    its twin: fstool's image is repair-clean, the kernel sees on it what
    fstool's readdir says (names, inode numbers, order, xattrs), and every
    directory block equals the kernel's twin (entries at the same offsets,
    bestfree tables, leaf arrays with their stale slots, nodes, free
    indexes)."""
    from fstool.ns.dirops import CONVERSIONS
    a, b = tmp_path / "fstool.img", tmp_path / "kernel.img"
    L.make_image(a)
    shutil.copyfile(a, b)
    ops = L.workload(6, grow=1100, churn=300, dirs=2)
    grown, shrink = L.split_at_mark(ops)
    before = CONVERSIONS.copy()
    L.run_fstool(a, grown)
    with images.Mounted(b) as m:
        L.run_kernel(m, grown)
    # large directories (node and leaf form, stale slots, free indexes)
    for d in ("d0", "d1"):
        mine, theirs = L.dir_layout(a, "/" + d), L.dir_layout(b, "/" + d)
        assert mine["form"] in ("node", "leaf")
        assert mine == theirs, d
    L.run_fstool(a, shrink)
    done = CONVERSIONS - before
    for kind in ("sf->block", "block->leaf", "leaf->node", "split", "root-split", "join",
                 "root-join", "node->leaf", "leaf->block", "block->sf"):
        assert done[kind] > 0, f"the workload never did {kind}: {dict(done)}"
    with images.Mounted(b) as m:
        L.run_kernel(m, shrink)
    repair_clean(a)
    mine = L.fstool_view(a)
    with images.Mounted(a, readonly=True) as m:
        seen = L.kernel_view(m)
    assert mine == seen
    with images.Mounted(b, readonly=True) as m:
        twin = L.kernel_view(m)
    assert _names(seen) == _names(twin)
    assert seen["xattrs"] == twin["xattrs"]
    for d in ("d0", "d1"):
        assert L.dir_layout(a, "/" + d) == L.dir_layout(b, "/" + d), d
    # the grown and shrunk directories are back in the small forms
    assert L.dir_layout(a, "/d0")["form"] == "shortform"
    assert L.dir_layout(a, "/d1")["form"] == "block"


@needs_xfsprogs
@pytest.mark.parametrize("seed", [11, 12])
def test_random_workloads_repair_clean(tmp_path, seed):
    img = tmp_path / "w.img"
    L.make_image(img)
    ops = L.workload(seed, grow=700, churn=500, dirs=3, shrink_to=(5, 40, 0))
    L.run_fstool(img, ops, batch=17)
    repair_clean(img)
    view = L.fstool_view(img)
    # the shadow tree the generator kept agrees with what fstool reads back
    expect = _shadow(ops)
    assert {d: sorted(n) for d, n in _names(view).items()} == expect


def _shadow(ops) -> dict:
    tree = {"": set()}
    for op in ops:
        if op[0] in ("create", "mkdir"):
            p, _, n = op[1].rpartition("/")
            tree[p].add(n)
            if op[0] == "mkdir":
                tree[op[1]] = set()
        elif op[0] in ("unlink", "rmdir"):
            p, _, n = op[1].rpartition("/")
            tree[p].discard(n)
            tree.pop(op[1], None)
        elif op[0] == "rename" and op[3] != 2:
            sp, _, sn = op[1].rpartition("/")
            dp, _, dn = op[2].rpartition("/")
            tree[sp].discard(sn)
            tree[dp].add(dn)
            if op[1] in tree:
                tree[op[2]] = tree.pop(op[1])
    return {d: sorted(n) for d, n in tree.items()}


def _session(img):
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    w = Writer(img)
    return w, Namespace(w), Meta


@needs_xfsprogs
def test_readdir_cookies_stable_across_other_changes(tmp_path):
    """A cookie handed out by readdir resumes at the same entry after other
    entries were added and removed, in every form; "." and ".." come first."""
    img = tmp_path / "c.img"
    L.make_image(img)
    w, ns, Meta = _session(img)
    with w:
        with w.transaction():
            d = ns.mkdir(w.sb.rootino, b"d", Meta(perm=0o755))
        for count in (3, 60, 700):                    # shortform, block, leaf/node
            with w.transaction():
                have = len(ns.list_names(d))
                for k in range(have, count):
                    ns.create_file(d, b"e%05d" % k, Meta())
            with w.transaction():
                full = list(ns.readdir(d))
                assert [e[0] for e in full[:2]] == [b".", b".."]
                mid = max(3, len(full) // 2)
                cookie = full[mid - 1][3]
                rest = [e[0] for e in full[mid:]]
                # remove an entry before the cookie and add new ones
                ns.unlink(d, full[2][0])
                for k in range(5):
                    ns.create_file(d, b"new%d_%d" % (count, k), Meta())
                again = [e[0] for e in ns.readdir(d, cookie)]
                # every entry that was after the cookie is still there, in order
                assert [n for n in again if n in set(rest)] == rest
                assert full[2][0] not in again
                assert all(e[3] > cookie for e in ns.readdir(d, cookie))
            with w.transaction():
                for k in range(5):
                    ns.unlink(d, b"new%d_%d" % (count, k))
                ns.create_file(d, full[2][0], Meta())
    repair_clean(img)


# -- rename and its errnos against the kernel ----------------------------------------
RENAME_CASES = [
    # (setup paths: dirs end with /, files plain), src, dst, flags
    (["a"], "missing", "b", 0),
    (["a", "b"], "a", "b", 1),                     # NOREPLACE over an existing name
    (["a", "b"], "a", "b", 0),                     # replace a file
    (["x/", "y/", "y/f"], "x", "y", 0),            # over a non-empty directory
    (["x/", "y/"], "x", "y", 0),                   # over an empty directory
    (["f", "y/"], "f", "y", 0),                    # file over directory
    (["x/", "f"], "x", "f", 0),                    # directory over file
    (["x/", "x/s/"], "x", "x/s/t", 0),             # under itself
    (["x/", "x/s/"], "x/s", "x", 0),               # over its own ancestor
    (["a"], "a", "n" * 256, 0),                    # name too long
    (["a"], "a", "b", 2),                          # exchange with nothing
    (["a", "y/"], "a", "y", 2),                    # exchange file and directory
    (["x/", "x/s/", "y/"], "x/s", "y/t", 0),       # directory to a new parent
    (["x/", "x/s/", "y/", "y/f"], "x/s", "y/f", 2),  # exchange across parents
    (["a", "b"], "a", "b", 3),                     # both flags
    (["a"], "a", "a", 0),                          # onto itself
]


def _setup_kernel(root, paths):
    for p in paths:
        full = os.path.join(root, p.rstrip("/"))
        if p.endswith("/"):
            os.mkdir(full)
        else:
            os.close(os.open(full, os.O_CREAT | os.O_WRONLY, 0o644))


def _setup_fstool(ns, Meta, root, paths):
    for p in paths:
        parent, _, name = p.rstrip("/").rpartition("/")
        pino = ns.lookup("/" + root + ("/" + parent if parent else ""))
        if p.endswith("/"):
            ns.mkdir(pino, name.encode(), Meta(perm=0o755))
        else:
            ns.create_file(pino, name.encode(), Meta())


def _tree(root):
    out = {}
    for d, dnames, fnames in os.walk(root):
        rel = os.path.relpath(d, root)
        out[rel] = (sorted(dnames), sorted(fnames), os.lstat(d).st_nlink)
    return out


@needs_loop
def test_rename_matches_kernel(tmp_path):
    """Each case on the kernel's XFS and through fstool's rename: the same
    errno (or success), the same tree and directory link counts after."""
    from fstool.errors import FsToolError
    a, b = tmp_path / "fstool.img", tmp_path / "kernel.img"
    L.make_image(a, blocksize=4096)
    shutil.copyfile(a, b)
    kernel_err = {}
    with images.Mounted(b) as m:
        for k, (setup, src, dst, flags) in enumerate(RENAME_CASES):
            root = os.path.join(m, f"c{k}")
            os.mkdir(root)
            _setup_kernel(root, setup)
            try:
                L.renameat2(os.path.join(root, src), os.path.join(root, dst), flags)
                kernel_err[k] = 0
            except OSError as e:
                kernel_err[k] = e.errno
    w, ns, Meta = _session(a)
    mine = {}
    with w:
        for k, (setup, src, dst, flags) in enumerate(RENAME_CASES):
            with w.transaction():
                ns.mkdir(w.sb.rootino, f"c{k}".encode(), Meta(perm=0o755))
                _setup_fstool(ns, Meta, f"c{k}", setup)
            try:
                with w.transaction():
                    sp, _, sn = src.rpartition("/")
                    dp, _, dn = dst.rpartition("/")
                    base = f"/c{k}"
                    ns.rename(ns.lookup(base + ("/" + sp if sp else "")), sn.encode(),
                              ns.lookup(base + ("/" + dp if dp else "")), dn.encode(), flags)
                mine[k] = 0
            except FsToolError as e:
                mine[k] = e.errno
    assert mine == kernel_err, {k: (errno.errorcode.get(mine[k]), errno.errorcode.get(v))
                                for k, v in kernel_err.items() if mine[k] != v}
    # the failures cover the errnos the kernel gives
    assert {errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR,
            errno.EINVAL, errno.ENAMETOOLONG} <= set(kernel_err.values())
    repair_clean(a)
    with images.Mounted(a, readonly=True) as ma:
        ta = _tree(ma)
    with images.Mounted(b, readonly=True, nouuid=True) as mb:
        tb = _tree(mb)
    assert ta == tb


@needs_loop
def test_unlinked_inode_kept_then_inactivated(tmp_path):
    """unlink(keep=True) drops the name and leaves the inode on the AGI
    unlinked list (as an open, deleted file); inactivate frees it.  (A
    kernel frees such inodes only in log recovery, so the mount must
    inactivate them before it unmounts.)"""
    from fstool.fs.filesystem import Filesystem
    from fstool.recovery.finish import unlinked_inodes
    img = tmp_path / "u.img"
    L.make_image(img, blocksize=4096)
    w, ns, Meta = _session(img)
    with w:
        with w.transaction():
            keep = ns.create_file(w.sb.rootino, b"open-file", Meta(),
                                  __import__("io").BytesIO(b"x" * 10000), 10000)
            other = ns.create_file(w.sb.rootino, b"other", Meta())
            ns.link(w.sb.rootino, b"other2", other)
        with w.transaction():
            assert ns.unlink(w.sb.rootino, b"open-file", keep=True) == keep
            ns.unlink(w.sb.rootino, b"other")          # other2 still names it
    fs = Filesystem(str(img))
    try:
        chains = unlinked_inodes(fs)
        assert [c for _a, _b, c in chains] == [[keep]]
        assert fs.inode(keep).nlink == 0
        assert fs.inode(other).nlink == 1
    finally:
        fs.close()
    # xfs_db sees the inode at the head of its AGI bucket
    out = subprocess.run(["xfs_db", "-r", "-c", "agi 0", "-c", "print unlinked", str(img)],
                         capture_output=True, text=True, check=True).stdout
    assert f"{keep % 64}:{keep}" in out, out
    # the kernel mounts the image with it and shows only the names left
    with images.Mounted(img, readonly=True) as m:
        assert sorted(os.listdir(m)) == ["other2"]
        assert os.lstat(os.path.join(m, "other2")).st_nlink == 1
    w, ns, Meta = _session(img)
    with w:
        with w.transaction():
            ns.inactivate(keep)
    fs = Filesystem(str(img))
    try:
        assert unlinked_inodes(fs) == []
    finally:
        fs.close()
    repair_clean(img)


# -- xattrs one at a time ---------------------------------------------------------
@needs_loop
def test_xattrs_one_at_a_time_match_kernel(tmp_path):
    """set/get/list/remove through shortform, leaf, node and remote values,
    with the kernel's errnos; the kernel reads back the same xattrs."""
    from fstool.errors import FsToolError
    img = tmp_path / "x.img"
    L.make_image(img, blocksize=4096)
    w, ns, Meta = _session(img)
    expect = {}
    with w:
        with w.transaction():
            f = ns.create_file(w.sb.rootino, b"f", Meta())
            d = ns.mkdir(w.sb.rootino, b"d", Meta(perm=0o755))
        for ino, name in ((f, "f"), (d, "d")):
            cur = expect.setdefault(name, {})
            with w.transaction():
                for k in range(40):                      # leaf, then node form
                    v = bytes([k]) * (10 if k < 5 else 300)
                    ns.set_xattr(ino, f"user.k{k:02d}", v)
                    cur[f"user.k{k:02d}"] = v
                ns.set_xattr(ino, "trusted.big", b"R" * 9000)       # remote value
                cur["trusted.big"] = b"R" * 9000
                ns.set_xattr(ino, "security.s", b"sec")
                cur["security.s"] = b"sec"
            with w.transaction():
                for k in range(0, 40, 3):
                    ns.remove_xattr(ino, f"user.k{k:02d}")
                    del cur[f"user.k{k:02d}"]
                ns.set_xattr(ino, "user.k01", b"replaced", 2)
                cur["user.k01"] = b"replaced"
                assert ns.get_xattr(ino, "user.k01") == b"replaced"
                assert sorted(ns.list_xattr(ino)) == sorted(cur)
            for call, args, err in [
                    (ns.set_xattr, ("user.k01", b"v", 1), errno.EEXIST),
                    (ns.set_xattr, ("user.none", b"v", 2), errno.ENODATA),
                    (ns.get_xattr, ("user.none",), errno.ENODATA),
                    (ns.remove_xattr, ("user.none",), errno.ENODATA),
                    (ns.set_xattr, ("user." + "n" * 256, b"v"), errno.ERANGE),
                    (ns.set_xattr, ("user.big", b"v" * 65537), errno.E2BIG)]:
                with pytest.raises(FsToolError) as ei:
                    with w.transaction():
                        call(ino, *args)
                assert ei.value.errno == err, (call.__name__, args[0][:20])
    repair_clean(img)
    with images.Mounted(img, readonly=True) as m:
        for name, cur in expect.items():
            p = os.path.join(m, name)
            got = {k: os.getxattr(p, k) for k in os.listxattr(p)}
            assert got == cur
        # the same errnos from the kernel for the cases it can show read-only
        with pytest.raises(OSError) as ei:
            os.getxattr(os.path.join(m, "f"), "user.none")
        assert ei.value.errno == errno.ENODATA


@needs_loop
def test_attr_btree_of_two_node_levels(tmp_path):
    """So many xattrs on 1 KiB blocks that one da-btree node cannot index
    their leaves: the attr fork gets a second node level, the image is
    repair-clean and the kernel reads every xattr back."""
    import struct
    img = tmp_path / "x.img"
    L.make_image(img, blocksize=1024)
    want = {f"trusted.n{k:05d}": bytes([k % 251]) * 100 for k in range(2000)}
    w, ns, Meta = _session(img)
    with w:
        with w.transaction():
            ino = ns.create_file(w.sb.rootino, b"f", Meta())
            ns.set_xattrs(ino, want)
    import fstool
    with fstool.open_image(str(img)) as fs:
        node = fs.inode(ino)
        root = [b for o, b, _n, *_ in node.extents(attr=True) if o == 0][0]
        with open(img, "rb") as f:
            f.seek(fs.fsb_to_daddr(root) * 512)
            level = struct.unpack_from(">H", f.read(64), 58)[0]
    assert level == 2
    repair_clean(img)
    with images.Mounted(img, readonly=True) as m:
        p = os.path.join(m, "f")
        assert {k: os.getxattr(p, k) for k in os.listxattr(p)} == want


@needs_loop
def test_symlink_over_two_blocks_like_kernel(tmp_path):
    """A 1,000-byte symlink target on 1 KiB blocks takes two blocks under
    one header, as the kernel writes it (a header in each block fails the
    CRC the kernel and xfs_repair compute over the whole mapping)."""
    target = b"/".join(b"segment%03d" % k for k in range(91))[:1000]
    a, b = tmp_path / "fstool.img", tmp_path / "kernel.img"
    L.make_image(a, blocksize=1024)
    shutil.copyfile(a, b)
    w, ns, Meta = _session(a)
    with w:
        with w.transaction():
            ns.symlink(w.sb.rootino, b"long", target, Meta())
    with images.Mounted(b) as m:
        os.symlink(target, os.path.join(m, "long"))
    blocks = []
    import fstool
    for img in (a, b):
        with fstool.open_image(str(img)) as fs:
            node = fs.lookup("/long")
            [(_o, start, n, _u)] = node.extents()
            with open(img, "rb") as f:
                f.seek(fs.fsb_to_daddr(start) * 512)
                raw = f.read(n * 1024)
        # blocks, magic, bytes under the header, the target across both blocks
        blocks.append((n, raw[:4], raw[8:12], raw[56:1056]))
    assert blocks[0] == blocks[1]
    assert blocks[0][0] == 2 and blocks[0][2] == (1000).to_bytes(4, "big")
    repair_clean(a)
    with images.Mounted(a, readonly=True) as m:
        assert os.readlink(os.path.join(str(m), "long")).encode() == target


def _forks(img, paths) -> dict:
    """Per path: the inode fields an attr fork's arrival changes."""
    import fstool
    out = {}
    with fstool.open_image(str(img)) as fs:
        for p in paths:
            n = fs.lookup(p)
            out[p] = dict(forkoff=n.forkoff, format=n.format, aformat=n.aformat,
                          nextents=n.nextents, nblocks=n.nblocks, size=n.size)
    return out


@needs_loop
@pytest.mark.parametrize("isize,mkfs", [(512, ()), (1024, ("-i", "size=1024", "-b", "size=2048"))],
                         ids=["default", "isize1k-b2k"])
def test_first_xattr_makes_room_in_the_data_fork_like_kernel(tmp_path, isize, mkfs):
    """A first xattr on an inode whose data fork fills the literal area: a
    shortform directory becomes a block directory, an inline symlink moves
    to a block, an extent list becomes a bmbt, a bmbt root is laid out for
    the smaller fork (moved a level down when it holds too many pointers),
    as the kernel does on its twin; fstool's image is repair-clean and the
    kernel reads the same names, targets, data and xattrs from it."""
    # the base tree is written by fstool: the kernel here gives every new
    # inode an empty attr fork up front (a security module may label it)
    lit = isize - 176                            # the inode's literal area
    src = tmp_path / "src"
    os.makedirs(src / "d")
    for i in range(10, 10 + (lit - 6) // 22):    # a shortform directory that fills it
        (src / "d" / f"name_number_{i}").touch()
    target = "t" * (lit - 20)
    os.symlink(target, src / "sl")
    for name, n in (("x", lit // 16), ("bt_small", 3300), ("bt_big", 3300)):
        with open(src / name, "wb") as f:
            for i in range(n):                   # one extent per written block
                f.seek(i * 8192)
                f.write(bytes([i % 251 + 1]) * 4096)
    a, b = tmp_path / "fstool.img", tmp_path / "kernel.img"
    for args in (("mkfs", a, "--size", "320m", *mkfs), ("populate", a, src)):
        r = _fstool(*args)
        assert r.returncode == 0, r.stderr
    shutil.copyfile(a, b)
    value = b"system_u:object_r:etc_t:s0-padding-to-sixty-bytes-of-value.."
    sets = {"/d": value, "/sl": value, "/x": value, "/bt_small": value,
            "/bt_big": b"v" * 200}               # too big for the root beside it
    before = _forks(a, sets)
    assert before["/d"]["format"] == 1 and before["/sl"]["format"] == 1
    assert before["/x"]["format"] == 2 and before["/bt_big"]["format"] == 3
    w, ns, _Meta = _session(a)
    with w:
        for p, v in sets.items():
            with w.transaction():
                ns.set_xattr(w.fs.lookup(p).ino, "trusted.label", v)
    with images.Mounted(b) as m:
        for p, v in sets.items():
            os.setxattr(f"{m}" + p, "trusted.label", v, follow_symlinks=False)
    mine, theirs = _forks(a, sets), _forks(b, sets)
    assert mine == theirs
    assert mine["/d"]["format"] == 2 and mine["/x"]["format"] == 3
    if isize == 512:        # a bmbt level pushed down and an attr leaf: a block each
        assert mine["/bt_big"]["nblocks"] == before["/bt_big"]["nblocks"] + 2
    repair_clean(a)
    with images.Mounted(a, readonly=True) as ma, images.Mounted(b, readonly=True, nouuid=True) as mb:
        for p, v in sets.items():
            assert os.getxattr(f"{ma}" + p, "trusted.label", follow_symlinks=False) == v
        assert sorted(os.listdir(f"{ma}" + "/d")) == sorted(os.listdir(f"{mb}" + "/d"))
        assert os.readlink(f"{ma}" + "/sl") == target
        for p in ("/x", "/bt_small", "/bt_big"):
            with open(f"{ma}" + p, "rb") as fa, open(f"{mb}" + p, "rb") as fb:
                assert fa.read() == fb.read(), p
    # and back: the last xattr removed; beside a bmbt root the attr fork stays
    w, ns, _Meta = _session(a)
    with w:
        for p in sets:
            with w.transaction():
                ns.remove_xattr(w.fs.lookup(p).ino, "trusted.label")
    with images.Mounted(b) as m:
        for p in sets:
            os.removexattr(f"{m}" + p, "trusted.label", follow_symlinks=False)
    mine, theirs = _forks(a, sets), _forks(b, sets)
    # the symlink's target comes back inline (the kernel leaves it in its
    # block, which xfs_repair before 6.10 calls damage); the rest as the kernel
    assert mine.pop("/sl") == before["/sl"]
    theirs.pop("/sl")
    assert mine == theirs
    repair_clean(a)
    with images.Mounted(a, readonly=True) as ma:
        assert os.readlink(f"{ma}/sl") == target
        assert os.listxattr(f"{ma}/sl", follow_symlinks=False) == []


# -- fstool mv ----------------------------------------------------------------------
def _fstool(*args, check=False):
    """fstool in a subprocess; the image check before each write only when
    asked (it is what takes the time)."""
    import sys
    extra = [] if check or args[0] not in ("mkdir", "put", "mv") else ["--no-check"]
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args), *extra],
                          capture_output=True, text=True)


@needs_xfsprogs
def test_mv_command(tmp_path):
    import json
    from fstool.fs.filesystem import Filesystem
    img = tmp_path / "mv.img"
    L.make_image(img, blocksize=4096)
    for args in (("mkdir", img, "/a"), ("mkdir", img, "/b"), ("mkdir", img, "/a/sub")):
        assert _fstool(*args).returncode == 0
    host = tmp_path / "h"
    host.write_bytes(b"hello")
    assert _fstool("put", img, host, "/a/f").returncode == 0
    assert _fstool("put", img, host, "/b/g").returncode == 0
    r = _fstool("mv", "--json", img, "/a/f", "/b/g", "--no-replace")
    assert r.returncode == 1
    assert json.loads(r.stdout.splitlines()[-1] if r.stdout.strip() else r.stderr.strip()
                      .splitlines()[-1]).get("errno") == errno.EEXIST
    r = _fstool("mv", "--json", img, "/a/sub", "/b/sub", check=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["op"] == "mv"
    assert _fstool("mv", img, "/a/f", "/b/sub", "--exchange").returncode == 0
    # now /a/f is the directory and /b/sub the file
    r = _fstool("mv", img, "/a", "/a/f/x")
    assert r.returncode == 1 and "under itself" in r.stderr
    assert _fstool("mv", img, "/b/g", "/b/sub/x").returncode == 1     # ENOTDIR
    assert _fstool("mv", img, "/a", "/b", "--no-replace", "--exchange").returncode != 0
    repair_clean(img)
    fs = Filesystem(str(img))
    try:
        assert sorted(e.name for e in fs.listdir("/a")) == [b"f"]
        assert sorted(e.name for e in fs.listdir("/b")) == [b"g", b"sub"]
        assert fs.lookup("/a/f").is_dir and fs.lookup("/b/sub").is_reg
        assert fs.lookup("/a").nlink == 3 and fs.lookup("/b").nlink == 2
        assert fs.read("/b/sub") == b"hello"
    finally:
        fs.close()


@needs_xfsprogs
def test_inode_taken_and_freed_in_one_transaction(tmp_path):
    """The last free inode of a chunk taken and given back in the same
    transaction (create then unlink, as a mount batching operations does):
    the finobt keeps the chunk's record."""
    from fstool.fs.filesystem import Filesystem
    img = tmp_path / "i.img"
    L.make_image(img, blocksize=4096)
    w, ns, Meta = _session(img)
    with w:
        fs = w.fs
        agi = fs.agi(0)
        free = agi["agi_freecount"]
        with w.transaction():
            for k in range(free - 1):
                ns.create_file(w.sb.rootino, b"f%03d" % k, Meta())
        with w.transaction():
            ns.create_file(w.sb.rootino, b"last", Meta())
            ns.unlink(w.sb.rootino, b"last")
    repair_clean(img)
    fs = Filesystem(str(img))
    try:
        assert fs.agi(0)["agi_freecount"] == 1
    finally:
        fs.close()


@needs_loop
def test_deeper_da_btree(tmp_path, monkeypatch):
    """Nodes that hold only four entries make a directory of a few thousand
    entries a three-level da-btree: node splits (the root moving down twice)
    while it grows, leaf joins across nodes and root joins while it shrinks;
    repair-clean at its largest and at the end, and the kernel reads it."""
    from fstool.ns import dirops
    init = dirops.Dir.__init__

    def small_nodes(self, *a, **k):
        init(self, *a, **k)
        self.da.max_node = 4
    monkeypatch.setattr(dirops.Dir, "__init__", small_nodes)
    img = tmp_path / "deep.img"
    L.make_image(img)
    ops = L.workload(7, grow=3600, churn=300, dirs=2)
    grown, shrink = L.split_at_mark(ops)
    before = dirops.CONVERSIONS.copy()
    L.run_fstool(img, grown)
    repair_clean(img)
    assert (dirops.CONVERSIONS - before)["node-split"] > 0
    mine = L.fstool_view(img)
    with images.Mounted(img, readonly=True) as m:
        assert L.kernel_view(m) == mine
    L.run_fstool(img, shrink)
    done = dirops.CONVERSIONS - before
    assert done["root-join"] > 0 and done["join"] > 0
    repair_clean(img)
    mine = L.fstool_view(img)
    with images.Mounted(img, readonly=True) as m:
        assert L.kernel_view(m) == mine
