"""fstool check against xfs_repair -n on damaged da-btree paths: hashes of
leaf and node entries, sibling pointers, counts and levels of directories
(one LEAFN block; a node over several leaves, with colliding names at
every leaf boundary; two node levels) and of attr forks, each changed by
xfs_db.  check must find a problem exactly when xfs_repair 6.10.1 does;
where xfs_repair 6.1 differs (it rejects a last node whose first hash is not
below its last), check follows 6.10.1."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from fixtures import collisions as CL
from fixtures import images, modern

pytestmark = pytest.mark.skipif(not images.xfsprogs_available(),
                                reason="needs xfsprogs (mkfs.xfs, xfs_db, xfs_repair)")
LEAF = 8388608                  # XFS_DIR2_LEAF_OFFSET in 4 KiB blocks


def xfs_db():
    return modern.tool("xfs_db") if modern.available() else "xfs_db"


def db_get(img, path, kind, blk, field) -> int:
    r = subprocess.run([xfs_db(), "-r", "-f", "-c", f"path {path}", "-c", f"{kind} {blk}",
                        "-c", f"print {field}", str(img)], capture_output=True, text=True)
    m = re.search(r"= (\S+)", r.stdout)
    assert m, (field, r.stdout, r.stderr)
    return int(m.group(1), 0)


def db_set(img, path, kind, blk, field, value) -> None:
    r = subprocess.run([xfs_db(), "-x", "-f", "-c", f"path {path}", "-c", f"{kind} {blk}",
                        "-c", f"write -d {field} {value}", str(img)], capture_output=True,
                       text=True)
    assert "=" in r.stdout, (field, r.stdout, r.stderr)


def verdicts(img) -> dict:
    """Exit statuses: xfs_repair 6.1, 6.10.1 (None when absent), fstool check."""
    r61 = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True)
    r610 = modern.repair_n(img).returncode if modern.available() else None
    ck = subprocess.run([sys.executable, "-m", "fstool", "check", str(img)],
                        capture_output=True, text=True)
    return {"6.1": r61.returncode, "6.10.1": r610, "check": ck.returncode,
            "findings": ck.stdout}


@pytest.fixture(scope="module")
def dir_image(tmp_path_factory):
    """4 KiB blocks: /leaves (a node over five leaves, colliding names on
    both sides of every leaf boundary but the last), /leafn (one LEAFN
    block)."""
    tmp = tmp_path_factory.mktemp("dirs")
    src = CL.Names(seed=21)
    per_leaf = (4096 - 64) // 8
    dirs = {"/leaves": src.many(4 * per_leaf + 100, lengths=(16,)),
            "/leafn": src.many(CL.form_limits(4096)["leafn"], lengths=(16,))}
    img, lays = CL.converge(dirs, src, CL.bulk_writer(tmp, ()), kinds=("leaf",),
                            exempt=CL.last_leaf_gap)
    assert len(lays["/leaves"]["leaves"]) == 5 and len(lays["/leafn"]["leaves"]) == 1
    assert not lays["/leaves"]["nodes"][0]
    return img


@pytest.fixture(scope="module")
def attr_image(tmp_path_factory):
    """1 KiB blocks: /deep, an attr fork of two node levels."""
    tmp = tmp_path_factory.mktemp("attrs")
    src = CL.Names(seed=22)
    files = {"/deep": src.many(1600, lengths=(20,))}
    img, lays = CL.converge(files, src, CL.xattr_writer(tmp, ("-b", "size=1024")),
                            kinds=("leaf", "node"), exempt=CL.last_leaf_gap,
                            read=CL.attr_layout)
    assert len(lays["/deep"]["nodes"]) == 2
    return img


def _set(field, value):
    return lambda get: [(field, value(get) if callable(value) else value)]


# (name, path, xfs_db block command, block (a callable of get for one that
# must be found), writes (a callable of get), what xfs_repair 6.10.1 says)
L = [LEAF + k for k in range(6)]
DIR_CASES = [
    ("node hash equal to the next", "/leaves", "dblock", L[0],
     _set("nbtree[1].hashval", lambda g: g("nbtree[2].hashval")), 1),
    ("node hash below its child's greatest", "/leaves", "dblock", L[0],
     _set("nbtree[0].hashval", lambda g: g("nbtree[0].hashval") - 1), 1),
    ("last node hash lowered to the one before", "/leaves", "dblock", L[0],
     _set("nbtree[4].hashval", lambda g: g("nbtree[3].hashval")), 1),
    ("node's first hash above its last", "/leaves", "dblock", L[0],
     _set("nbtree[0].hashval", 0xFFFFFFFF), 1),
    ("node entry names a later leaf", "/leaves", "dblock", L[0],
     _set("nbtree[1].before", L[3]), 1),
    ("node count one short", "/leaves", "dblock", L[0], _set("nhdr.count", 4), 1),
    ("root with a right sibling", "/leaves", "dblock", L[0],
     _set("nhdr.info.hdr.forw", L[1]), 1),
    ("root with a left sibling (not looked at)", "/leaves", "dblock", L[0],
     _set("nhdr.info.hdr.back", 7), 0),
    ("root level 2 over leaves", "/leaves", "dblock", L[0], _set("nhdr.level", 2), 1),
    ("leaf chain cut", "/leaves", "dblock", L[3], _set("lhdr.info.hdr.forw", 0), 1),
    ("leaf back pointer cleared", "/leaves", "dblock", L[3], _set("lhdr.info.hdr.back", 0),
     1),
    ("first leaf's back pointer set", "/leaves", "dblock", L[1],
     _set("lhdr.info.hdr.back", L[5]), 1),
    ("leaf chain cycle", "/leaves", "dblock", L[5], _set("lhdr.info.hdr.forw", L[1]), 1),
    ("leaf chain skips a leaf", "/leaves", "dblock", L[2], _set("lhdr.info.hdr.forw", L[4]),
     1),
    ("leaf starts below the greatest before it", "/leaves", "dblock", L[2],
     _set("lents[0].hashval", lambda g: g("lents[0].hashval") - 1), 1),
    ("leaf's last hash raised", "/leaves", "dblock", L[2],
     _set("lents[503].hashval", lambda g: g("lents[503].hashval") + 1), 1),
    ("hash in order but not the name's", "/leaves", "dblock", L[1],
     _set("lents[101].hashval", lambda g: g("lents[100].hashval")), 1),
    ("colliding entries swapped across a leaf boundary", "/leaves", "dblock", None, None, 0),
    ("stale count", "/leaves", "dblock", L[3], _set("lhdr.stale", 1), 1),
    ("one LEAFN block with a right sibling (not looked at)", "/leafn", "dblock", L[0],
     _set("lhdr.info.hdr.forw", 7), 0),
    ("one LEAFN block out of hash order", "/leafn", "dblock", L[0],
     _set("lents[100].hashval", 0), 1),
]


def _swap_across_boundary(img):
    """Leaf 1's last entry and leaf 2's first share a hash (the names were
    made to): exchanging their addresses leaves a valid tree."""
    a = db_get(img, "/leaves", "dblock", L[1], "lents[503].address")
    b = db_get(img, "/leaves", "dblock", L[2], "lents[0].address")
    assert db_get(img, "/leaves", "dblock", L[1], "lents[503].hashval") == \
        db_get(img, "/leaves", "dblock", L[2], "lents[0].hashval")
    db_set(img, "/leaves", "dblock", L[1], "lents[503].address", b)
    db_set(img, "/leaves", "dblock", L[2], "lents[0].address", a)


def _damage(base, tmp_path, path, kind, blk, writes):
    img = tmp_path / "damaged.img"
    subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
    if writes is None:
        _swap_across_boundary(img)
        return img
    blk = blk(lambda f: db_get(img, path, kind, 0 if kind == "ablock" else L[0], f)) \
        if callable(blk) else blk
    for field, value in writes(lambda f: db_get(img, path, kind, blk, f)):
        db_set(img, path, kind, blk, field, value)
    return img


def _agree(v, want, differs_61=False):
    # (a debug build of 6.10.1 may stop on an assertion where a tree runs
    # out of siblings: a non-zero status all the same)
    assert v["6.10.1"] is None or (v["6.10.1"] != 0) == (want != 0), v
    assert (v["check"] != 0) == (want != 0), v
    if not differs_61:
        assert v["6.1"] == want, v


@pytest.mark.parametrize("case", DIR_CASES, ids=[c[0] for c in DIR_CASES])
def test_directory_damage_found_as_xfs_repair_finds_it(dir_image, tmp_path, case):
    name, path, kind, blk, writes, want = case
    img = _damage(dir_image, tmp_path, path, kind, blk, writes)
    _agree(verdicts(img), want)


def _attr_node(k):
    """Block of the k-th level-1 node (children of attr block 0)."""
    return lambda g: g(f"btree[{k}].before")


ATTR_CASES = [
    ("root hash above its child's greatest", 0,
     _set("btree[0].hashval", lambda g: g("btree[0].hashval") + 1), 1),
    ("root with a left sibling", 0, _set("hdr.info.hdr.back", 5), 1),
    ("level-1 node back pointer cleared", _attr_node(1), _set("hdr.info.hdr.back", 0), 1),
    ("first level-1 node's left sibling (not looked at)", _attr_node(0),
     _set("hdr.info.hdr.back", 7), 0),
    ("level-1 node chain cut", _attr_node(0), _set("hdr.info.hdr.forw", 0), 1),
    ("last level-1 node's first hash above its last", _attr_node(1),
     _set("btree[0].hashval", 0xFFFFFFFF), 1),
    ("leaf back pointer cleared", 2, _set("hdr.info.hdr.back", 0), 1),
    ("leaf chain cut", 2, _set("hdr.info.hdr.forw", 0), 1),
    ("leaf entry hash not its name's", 2,
     _set("entries[1].hashval", lambda g: g("entries[0].hashval")), 1),
]


@pytest.mark.parametrize("case", ATTR_CASES, ids=[c[0] for c in ATTR_CASES])
def test_attr_damage_found_as_xfs_repair_finds_it(attr_image, tmp_path, case):
    name, blk, writes, want = case
    img = _damage(attr_image, tmp_path, "/deep", "ablock", blk, writes)
    _agree(verdicts(img), want)


@pytest.fixture(scope="module")
def stale_image(tmp_path_factory):
    """4 KiB blocks: /stale, a node directory made one name at a time (the
    incremental writer), then the first name of its second leaf removed:
    that leaf begins with a stale slot."""
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    img = CL.fresh(tmp_path_factory.mktemp("stale") / "stale.img", ())
    names = CL.Names(seed=23).many(1500, lengths=(16,))
    with Writer(img) as w:
        ns = Namespace(w)
        with w.transaction():
            d = ns.mkdir(w.sb.rootino, b"stale", Meta(perm=0o755))
            for n in names:
                ns.create_file(d, n, Meta(perm=0o644))
        ns.committed()
    first = CL.layout(img, "/stale")["leaves"][1][0][1]
    with Writer(img) as w:
        ns = Namespace(w)
        with w.transaction():
            ns.unlink(d, first)
        ns.committed()
    second = db_get(img, "/stale", "dblock", L[0], "nbtree[1].before")
    assert db_get(img, "/stale", "dblock", second, "lents[0].address") == 0
    return img, second


def test_stale_slot_below_the_greatest_before_it(stale_image, tmp_path):
    """A stale slot is not compared with the greatest hash before it (the
    live entry after it is compared with the stale slot's hash): a leaf
    beginning with a stale slot of hash 0 is clean for xfs_repair, and for
    check."""
    base, second = stale_image
    _agree(verdicts(base), 0)
    img = _damage(base, tmp_path, "/stale", "dblock", second, _set("lents[0].hashval", 0))
    _agree(verdicts(img), 0)
    # the live entry after it, below the greatest before the leaf: found
    img = _damage(base, tmp_path, "/stale", "dblock", second,
                  lambda g: [("lents[0].hashval", 0), ("lents[1].hashval", 0)])
    _agree(verdicts(img), 1)


def test_last_node_of_equal_hashes(tmp_path):
    """More names of one hash than a leaf holds: the last node's children
    all end in that hash.  xfs_repair 6.1 rejects it (its
    verify_final_da_path wants the first hash below the last), 6.10.1 and
    check accept it, and the kernel finds every name."""
    src = CL.Names(seed=24)
    per_leaf = (4096 - 64) // 8
    first = src.fresh(16)
    dirs = {"/same": [first] + [src.colliding(CL.dahash(first), 16)
                                for _ in range(per_leaf + 20)]}
    img = CL.bulk_writer(tmp_path, ())(dirs)
    lay = CL.layout(img, "/same")
    assert len(lay["leaves"]) == 2 and lay["leaves"][0][-1][0] == lay["leaves"][1][-1][0]
    v = verdicts(img)
    _agree(v, 0, differs_61=True)
    assert v["6.1"] == 1, v
    if images.loop_available():
        import os
        with images.Mounted(img, readonly=True, nouuid=True) as mnt:
            d = os.fsencode(mnt / "same")
            assert sorted(os.listdir(d)) == sorted(dirs["/same"])
            for n in dirs["/same"]:
                os.stat(d + b"/" + n)


@pytest.fixture(scope="module")
def deep_dir_image(tmp_path_factory):
    """4 KiB blocks: /big, a directory of two node levels, colliding names
    on both sides of every leaf boundary but the last."""
    return CL.two_level_dir(tmp_path_factory.mktemp("deep"), 25)[0]


def _dir_node(k):
    """Block of the k-th level-1 node (children of the root)."""
    return lambda g: g(f"nbtree[{k}].before")


DEEP_CASES = [
    ("root hash of the first node", L[0],
     _set("nbtree[0].hashval", lambda g: g("nbtree[0].hashval") + 1), 1),
    ("level-1 node back pointer cleared", _dir_node(1), _set("nhdr.info.hdr.back", 0), 1),
    ("first level-1 node's left sibling (not looked at)", _dir_node(0),
     _set("nhdr.info.hdr.back", 7), 0),
    ("level-1 node chain cut", _dir_node(0), _set("nhdr.info.hdr.forw", 0), 1),
    ("last level-1 node with a right sibling", _dir_node(1),
     _set("nhdr.info.hdr.forw", lambda g: g("nbtree[0].before")), 1),
    ("level-1 node of level 2", _dir_node(1), _set("nhdr.level", 2), 1),
    ("first entry of the second level-1 node", _dir_node(1),
     _set("nbtree[0].hashval", lambda g: g("nbtree[0].hashval") - 1), 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", DEEP_CASES, ids=[c[0] for c in DEEP_CASES])
def test_deep_directory_damage_found_as_xfs_repair_finds_it(deep_dir_image, tmp_path, case):
    name, blk, writes, want = case
    img = _damage(deep_dir_image, tmp_path, "/big", "dblock", blk, writes)
    _agree(verdicts(img), want)


@pytest.mark.skipif(not images.loop_available(),
                    reason="needs root, xfsprogs and a kernel loop mount of XFS")
@pytest.mark.parametrize("root_too", [False, True], ids=["node", "node-and-root"])
def test_attr_node_hashes_corrected_in_place(attr_image, tmp_path, root_too):
    """A level-1 node's last hash raised (and, with ``root_too``, the root's
    entry for that node raised to match it): repair sets each to the
    greatest hash below it, as xfs_repair corrects them, and keeps every
    xattr."""
    import os
    from fixtures.oracles import fstool, repair_clean
    img = _damage(attr_image, tmp_path, "/deep", "ablock", _attr_node(0),
                  lambda g: [("btree[119].hashval", g("btree[119].hashval") + 1)])
    if root_too:
        wrong = db_get(img, "/deep", "ablock", _attr_node(0)(
            lambda f: db_get(img, "/deep", "ablock", 0, f)), "btree[119].hashval")
        db_set(img, "/deep", "ablock", 0, "btree[0].hashval", wrong)
    v = verdicts(img)
    _agree(v, 1)
    assert "XATTR_NODE_HASH" in v["findings"] and "XATTR_NODE " not in v["findings"]
    r = fstool("repair", img, check=False)
    assert r.returncode == 1 and "hashes of attr node entries" in r.stdout, r.stdout[-2000:]
    repair_clean(img)
    assert fstool("check", img, check=False).returncode == 0
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        names = os.listxattr(mnt / "deep")
        assert len(names) == 1600
        for n in names[::97]:
            os.getxattr(mnt / "deep", n)
