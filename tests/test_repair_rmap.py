"""fstool repair on filesystems with a reverse-mapping btree (rmapbt): the
kernel-written corpus base image of geometry *rmap* (rmapbt and reflink,
1 KiB inodes) damaged with xfs_db, repaired (every AG's rmapbt rebuilt
from the owners check finds), then judged by xfs_repair -n, fstool check,
a kernel mount, a second repair and undo; the rebuilt records against
xfs_repair's own rebuild of the same image."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from fixtures import images
from fixtures.repair_images import copy_image
from test_repair import (digest, fstool, judge_killed_repairs, repair_clean_and_idempotent,
                         xfs_db, xfs_repair_n)

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")


@pytest.fixture(scope="module")
def rmapimg():
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    from fixtures import corpus_base
    img = corpus_base.base_image("rmap")
    inos = corpus_base.load_inodes(img)
    return {"img": img, "inos": inos, "tree": light_tree(img, inos)}


def light_tree(img: Path, inos: dict) -> tuple:
    """What the kernel shows, cheaply (the image holds 24,000 files): every
    path with its inode number and whether it is a directory (from the
    directory entries, no stat each); the size and contents of the files
    the corpus catalogues (every layout: extents, bmbt, shared,
    preallocated)."""
    wanted = {v for k, v in inos.items() if k.startswith("file_")}
    names, contents = [], {}
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        stack = [str(mnt)]
        while stack:
            top = stack.pop()
            with os.scandir(top) as it:
                for e in it:
                    d = e.is_dir(follow_symlinks=False)
                    names.append((os.path.relpath(e.path, mnt), d, e.inode()))
                    if d:
                        stack.append(e.path)
                    elif e.inode() in wanted and e.is_file(follow_symlinks=False):
                        with open(e.path, "rb") as f:
                            data = f.read()
                        contents[e.inode()] = (len(data), hashlib.sha256(data).hexdigest())
    return sorted(names), contents


def rmap_records(img: Path, agcount: int = 2) -> list:
    """Every rmapbt record of every AG as xfs_db's btdump prints them
    ([startblock, blockcount, owner, offset, unwritten, attrfork, bmbt])."""
    out = []
    for ag in range(agcount):
        dump = xfs_db(img, f"agf {ag}", "addr rmaproot", "btdump")
        out.append(sorted(tuple(int(x) for x in ln.split(":", 1)[1].strip()[1:-1].split(","))
                          for ln in dump.splitlines()
                          if ln[:1].isdigit() and ":[" in ln and ln.count(",") == 6))
    return out


# (name, xfs_db commands from the catalogued inodes, what the kernel shows
# after: "same" tree, the same inodes and contents where names may "move",
# or the damaged file "cleared")
RMAP_DAMAGE = [
    ("rmapbt-record-length", lambda i: ["agf 0", "addr rmaproot", "addr ptrs[1]",
                                        "write -d recs[3].blockcount 77"], "same"),
    ("rmapbt-record-owner", lambda i: ["agf 1", "addr rmaproot", "addr ptrs[5]",
                                       f"write -d recs[7].owner {i['file_one']}"], "same"),
    ("rmapbt-block", lambda i: ["agf 1", "addr rmaproot", "addr ptrs[2]", "write -d magic 0"],
     "same"),
    ("agf-rmap-fields", lambda i: ["agf 1", "write -d rmapblocks 9", "write -d btreeblks 3"],
     "same"),
    # an extent outside the filesystem: the file is cleared (as xfs_repair
    # does), its reverse mappings go with it
    ("file-extent", lambda i: [f"inode {i['file_extents']}",
                               "write u3.bmx[3].startblock 999999999"], "cleared"),
    # a block directory's entry and '..': the namespace phase rebuilds it
    # into new blocks, which the rebuilt rmapbt maps
    ("namespace", lambda i: [f"inode {i['dir_block']}", "dblock 0", "write bu[4].filetype 5",
                             f"write bu[1].inumber {i['dir_leaf']}"], "move"),
]


@needs_loop
@pytest.mark.parametrize("name,cmds,keeps", RMAP_DAMAGE, ids=[d[0] for d in RMAP_DAMAGE])
def test_repair_rmapbt_image(rmapimg, tmp_path, name, cmds, keeps):
    img = copy_image(rmapimg["img"], tmp_path / "d.img")
    xfs_db(img, *cmds(rmapimg["inos"]), expert=True)
    assert xfs_repair_n(img) == 1, "the damage is not damage"
    assert fstool("check", img).returncode == 1
    damaged = digest(img)
    r = fstool("repair", "-n", img)
    assert r.returncode == 1 and "would change" in r.stdout, r.stdout + r.stderr
    assert "rmapbt" in r.stdout
    assert digest(img) == damaged
    undo = tmp_path / "d.undo"
    repair_clean_and_idempotent(img, "--undo-file", undo)
    names, contents = light_tree(img, rmapimg["inos"])
    want_names, want_contents = rmapimg["tree"]
    if keeps == "same":
        assert (names, contents) == (want_names, want_contents)
    elif keeps == "move":
        # '..' named another directory: what it reaches is where the
        # namespace phase put it, every inode there with its contents
        assert {n[1:] for n in names} >= {n[1:] for n in want_names}
        assert contents == want_contents
    else:
        gone = {ino for *_n, ino in want_names} - {ino for *_n, ino in names}
        assert gone == {rmapimg["inos"]["file_extents"]}, gone
        assert contents == {k: v for k, v in want_contents.items() if k not in gone}
    assert fstool("undo", img, undo).returncode == 0
    assert digest(img) == damaged


@needs_loop
def test_rebuilt_rmapbt_equals_xfs_repairs(rmapimg, tmp_path):
    """The same damaged image repaired by fstool and by xfs_repair: every
    reverse mapping is the same record, but for the blocks each tool gave
    its own new trees (free space, inode and refcount btrees, rmapbt, free
    list: placed where each tool finds room); then the kernel allocates and
    frees through fstool's rmapbt and the result is still clean."""
    import subprocess
    img = copy_image(rmapimg["img"], tmp_path / "f.img")
    # (not a fuzzed record: xfs_repair takes the blocks a bogus record
    # names for its owner's and clears the inodes really owning them)
    xfs_db(img, "agf 0", "write -d rmapblocks 9", "agf 1", "addr rmaproot", "addr ptrs[2]",
           "write -d magic 0", expert=True)
    theirs = copy_image(img, tmp_path / "x.img")
    assert fstool("repair", img).returncode == 1
    subprocess.run(["xfs_repair", "-f", str(theirs)], check=True, capture_output=True)
    own_trees = (-5, -6, -8)        # OWN_AG, OWN_INOBT, OWN_REFC
    mine, ref = rmap_records(img), rmap_records(theirs)
    for ag, (m, x) in enumerate(zip(mine, ref)):
        assert len(x) > 100 or ag == 0
        assert [r for r in m if r[2] not in own_trees] == \
            [r for r in x if r[2] not in own_trees], f"AG {ag}"
        # the inode btrees take as many blocks either way
        assert sum(r[1] for r in m if r[2] == -6) == sum(r[1] for r in x if r[2] == -6)
    with images.Mounted(img) as mnt:
        (mnt / "new").write_bytes(os.urandom(3 << 20))
        os.remove(mnt / os.path.relpath(_path_of(mnt, rmapimg["inos"]["file_one"]), mnt))
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0


def _path_of(mnt: Path, ino: int) -> str:
    for root, _dirs, files in os.walk(mnt):
        for name in files:
            p = os.path.join(root, name)
            if os.lstat(p).st_ino == ino:
                return p
    raise AssertionError(f"inode {ino} not found")


@needs_loop
def test_killed_rmapbt_repair_leaves_image_untouched_or_repaired(rmapimg, tmp_path):
    """Every AG's rmapbt rebuilt, with an inode cleared and a directory
    rebuilt before it: killed at any of the chosen writes, the image is as
    damaged as before or repaired."""
    base = copy_image(rmapimg["img"], tmp_path / "base.img")
    xfs_db(base, "agf 1", "addr rmaproot", "addr ptrs[2]", "write -d magic 0",
           *RMAP_DAMAGE[4][1](rmapimg["inos"]), expert=True)
    outcomes, dirty = judge_killed_repairs(
        base, tmp_path, tree=lambda p: light_tree(p, rmapimg["inos"]))
    assert outcomes[0] == "untouched", outcomes
    assert dirty, "no kill left a dirty log"


@needs_loop
def test_writers_keep_the_rmapbt_of_a_kernel_image(rmapimg, tmp_path):
    """Every writer keeps an rmapbt image's reverse mapping (this image has
    reflinked files at several reference counts): edits that remove shared
    files, copy them by reflink and add new ones leave xfs_repair -n clean,
    the rmapbt exactly the merged records of every owner, and the records
    xfs_repair 6.10.1 rebuilds equal to fstool's."""
    from fixtures import modern, rmapcheck
    img = copy_image(rmapimg["img"], tmp_path / "w.img")
    host = tmp_path / "f.txt"
    host.write_bytes(os.urandom(70000))
    path = {ino: p for p, d, ino in rmapimg["tree"][0] if not d}
    inos = rmapimg["inos"]
    src, refdst = path[inos["file_shared_src"]], path[inos["file_refdst"]]
    steps = [("mkdir", img, "/newdir"), ("put", img, host, "/newdir/f.txt"),
             ("rm", "-r", img, "/links"),
             # a clone of a file others share, then the file itself and one
             # of the files sharing every other block of another go
             ("cp", img, "/" + src, "/newdir/clone"), ("rm", img, "/" + src),
             ("rm", img, "/" + refdst)]
    for args in steps:
        r = fstool(*args)
        assert r.returncode == 0, (args, r.stderr)
    assert xfs_repair_n(img) == 0
    assert rmapcheck.strict_diff(img) == []
    if modern.available():
        assert modern.repair_n(img).returncode == 0
        assert rmapcheck.repair_diff(img, tmp_path) == []
