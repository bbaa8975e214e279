"""The mount's group commit (Volume.group): creates sharing one transaction
leave the image exactly as one transaction each would, on success, when an
operation of the group fails, and when the group's commit fails; a group
that cannot be done again stops the volume's writes."""
from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys

import pytest

from fixtures import images
from fixtures.fusemount import env, fstool_image, repair_clean
from fstool.mount.volume import Volume
from fstool.ns.dirops import Dir

T0 = 1_700_000_000_000_000_000


def _pair(tmp_path):
    base = fstool_image(tmp_path, "256m")
    one = tmp_path / "one.img"
    grouped = tmp_path / "grouped.img"
    shutil.copyfile(base, one)
    shutil.copyfile(base, grouped)
    return one, grouped


def _workload(v: Volume, fail_at=None, answer_first=False) -> dict:
    """Creates of every kind between the other operations, in several
    directories, one of them through every form (shortform, block, leaf,
    node); with ``fail_at`` = k, the k-th create repeats a name in use
    (EEXIST inside the transaction).  With ``answer_first``, creates name
    their file after the answer, as through the mount's native loop.
    Returns {path: inode} of what was made."""
    root = v.rootino
    made = {}
    attrs = {}
    dirs = []
    for d in range(3):
        dirs.append(v.mkdir(root, b"d%d" % d, 0o755).ino)
    k = 0
    for i in range(1400):
        parent = dirs[i % 3] if i < 240 else dirs[0]
        name = b"f%04d-%s" % (i, b"x" * (i % 40))
        kind = i % 7
        if fail_at is not None and k == fail_at:
            prev = next(n for (p, n) in made if p == parent)
            with pytest.raises(OSError) as e:
                v.create(parent, prev, 0o100644, os.O_WRONLY)
            assert e.value.errno == errno.EEXIST
        k += 1
        if kind == 1:
            a = v.mknod(parent, name, stat.S_IFIFO | 0o600)
        elif kind == 2:
            a = v.mknod(parent, name, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        elif answer_first:
            later = []
            fh, a = v.create(parent, name, 0o100640, os.O_WRONLY, later=later)
            assert len(later) == 1
            # answered: the inode is there, its name not yet
            assert v.getattr(a.ino).mode == stat.S_IFREG | 0o640
            later.pop()()
            v.release(fh)
        else:
            fh, a = v.create(parent, name, 0o100640, os.O_WRONLY)
            v.release(fh)
        made[(parent, name)] = a.ino
        if i in (5, 100, 1000):
            # a directory's attributes in the middle of a group
            pa = v.getattr(parent)
            attrs[i] = (pa.size, pa.blocks, pa.nlink, pa.mtime_ns, pa.ctime_ns)
        if i % 50 == 49 or i in (241, 242, 700):
            # anything else ends the group
            v.unlink(parent, name)
            made.pop((parent, name))
            v.setattr(dirs[0], mode=0o750)
        if i % 90 == 89:
            assert v.statfs()["ffree"] > 0
    made["attrs"] = attrs
    return made


def _grouped(tmp_path, timestamp_ns=T0):
    """(image, a Volume grouping 32 creates, a directory in it)."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img, timestamp_ns=timestamp_ns)
    v.group = 32
    return img, v, v.mkdir(v.rootino, b"d", 0o755).ino


def _create_closed(v: Volume, d: int, name: bytes, answer_first: bool) -> int:
    later = [] if answer_first else None
    fh, a = v.create(d, name, 0o100644, os.O_WRONLY, later=later)
    for fn in later or ():
        fn()
    v.release(fh)
    return a.ino


def _check(v: Volume, made: dict, form="node") -> None:
    """Every name made names its inode; the big directory reached ``form``."""
    for key, ino in made.items():
        if key != "attrs":
            assert v.find(*key).ino == ino
    v.end_group()
    big = min(k[0] for k in made if k != "attrs")
    assert form is None or Dir(v.w, big, 0).form() == form


@pytest.mark.parametrize("fail_at,answer_first", [(None, False), (3, False), (40, False),
                                                  (200, False), (None, True), (40, True)])
def test_grouped_creates_leave_the_image_one_transaction_each_would(tmp_path, fail_at,
                                                                    answer_first):
    one, grouped = _pair(tmp_path)
    results = []
    commits = []
    for img, group in ((one, 1), (grouped, 32)):
        v = Volume(img, timestamp_ns=T0)
        v.group = group
        real = v.w.commit
        n = [0]

        def counted(real=real, n=n):
            n[0] += 1
            return real()

        v.w.commit = counted
        made = _workload(v, fail_at, answer_first and group > 1)
        _check(v, made)
        v.close()
        results.append(made)
        commits.append(n[0])
    # the creates were grouped: a fraction of the transactions
    assert commits[1] * 4 < commits[0], commits
    assert results[0] == results[1]
    assert one.read_bytes() == grouped.read_bytes()
    repair_clean(grouped)
    if images.loop_available():
        _kernel_sees(grouped, results[1])


def _kernel_sees(img, made: dict) -> None:
    """The kernel mounts the image and finds every name made, with its
    inode number, and no other name in those directories."""
    with images.Mounted(img) as mnt:
        names = {}
        for top in os.scandir(mnt):
            if top.is_dir() and top.name.startswith("d"):
                for e in os.scandir(top.path):
                    names[(top.inode(), os.fsencode(e.name))] = e.inode()
    assert names == {k: ino for k, ino in made.items() if k != "attrs"}



def test_a_group_whose_commit_fails_is_done_again_one_by_one(tmp_path, monkeypatch):
    one, grouped = _pair(tmp_path)
    v1 = Volume(one, timestamp_ns=T0)
    made1 = _workload(v1)
    v1.close()
    v = Volume(grouped, timestamp_ns=T0)
    v.group = 32
    journal = v.w.journal
    real_reserve = journal._reserve
    real_end = v.end_group
    failed = []
    ending = []

    def reserve(tx):
        # the log refuses the first group of creates that ends
        if ending and not failed:
            failed.append(len(ending[-1]))
            raise OSError(errno.ENOSPC, "no room in the log")
        return real_reserve(tx)

    def end_group():
        ending.append(list(v._grouped))
        try:
            real_end()
        finally:
            ending.pop()

    journal._reserve = reserve
    v.end_group = end_group
    made = _workload(v)
    assert failed and failed[0] > 6
    _check(v, made)
    v.close()
    assert made == made1
    assert one.read_bytes() == grouped.read_bytes()
    repair_clean(grouped)


def test_a_group_that_comes_out_differently_stops_writes(tmp_path):
    img, v, d = _grouped(tmp_path)
    root = v.rootino
    kept = {b"f%d" % i: _create_closed(v, d, b"f%d" % i, False) for i in range(5)}
    assert len(v._grouped) == 5
    # the third create's record: done again, it would make another inode
    make, now, parent, ino = v._grouped[2]
    v._grouped[2] = (lambda ns: make(ns) + 64, now, parent, ino)
    with pytest.raises(OSError) as e:
        v.create(d, b"f0", 0o100644, os.O_WRONLY)     # EEXIST inside the group
    assert e.value.errno == errno.EIO
    assert v.failed and "writes stopped" in v.failed
    with pytest.raises(OSError) as e:
        v.create(d, b"more", 0o100644, os.O_WRONLY)
    assert e.value.errno == errno.EIO
    with pytest.raises(OSError) as e:
        v.mkdir(root, b"more", 0o755)
    assert e.value.errno == errno.EIO
    # what was done again before the difference is kept; reads go on
    assert v.find(d, b"f0").ino == kept[b"f0"]
    assert v.find(d, b"f1").ino == kept[b"f1"]
    v.close()
    repair_clean(img)


def test_a_name_that_cannot_be_added_after_the_answer_stops_writes(tmp_path, monkeypatch):
    img, v, d = _grouped(tmp_path)
    kept = {b"f%d" % i: _create_closed(v, d, b"f%d" % i, True) for i in range(4)}
    ns_type = type(v.ns)
    real = ns_type.name_new_file

    def broken(ns, parent, name, ino):
        if name == b"bad":
            raise OSError(errno.EIO, "a directory block read back damaged")
        return real(ns, parent, name, ino)

    monkeypatch.setattr(ns_type, "name_new_file", broken)
    later = []
    fh, a = v.create(d, b"bad", 0o100644, os.O_WRONLY, later=later)
    with pytest.raises(OSError):
        later.pop()()
    assert v.failed and "could not be named" in v.failed
    with pytest.raises(OSError) as e:
        v.create(d, b"more", 0o100644, os.O_WRONLY)
    assert e.value.errno == errno.EIO
    # the group's earlier creates were done again and kept; the file
    # answered but never named is not in the image
    for name, ino in kept.items():
        assert v.find(d, name).ino == ino
    assert v.find(d, b"bad") is None
    v.release(fh)
    v.close()
    repair_clean(img)


def test_no_group_and_no_early_answer_when_space_is_short(tmp_path, monkeypatch):
    import fstool.mount.volume as volume
    img, v, d = _grouped(tmp_path)
    later = []
    v.create(d, b"a", 0o100644, os.O_WRONLY, later=later)
    assert len(later) == 1
    later.pop()()
    v.end_group()
    monkeypatch.setattr(volume, "ROOM_BLOCKS", v.free_blocks() + 1)
    v.create(d, b"b", 0o100644, os.O_WRONLY, later=later)
    # one transaction of its own, committed: no group left open
    assert later == [] and v._grouped == [] and v.find(d, b"b") is not None
    v.close()
    repair_clean(img)


@pytest.mark.parametrize("group", [1, 32])
def test_o_trunc_leaves_a_file_just_created_as_it_is(tmp_path, group):
    """open(O_CREAT|O_TRUNC) of a new name: the kernel does not truncate a
    file it has just created, so its times stay those of the create (and
    a grouped create runs no transaction of the truncation's inside it)."""
    img, v, d = _grouped(tmp_path, None)
    v.group = group
    for i in range(3):
        later = []
        fh, a = v.create(d, b"t%d" % i, 0o100644, os.O_WRONLY | os.O_TRUNC, later=later)
        for fn in later:
            fn()
        b = v.getattr(a.ino)
        assert (b.mtime_ns, b.ctime_ns, b.size) == (a.mtime_ns, a.ctime_ns, 0)
        v.release(fh)
    v.close()
    repair_clean(img)


def test_no_answer_before_the_name_when_large_directory_blocks_find_no_room(
        tmp_path, monkeypatch):
    """Directory blocks of four filesystem blocks are taken whole: with free
    space only in smaller pieces a directory could not grow, so creates are
    not answered before their names are added (with room, they are)."""
    img = tmp_path / "n16k.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "--size", "256m", "-n",
                    "size=16384", str(img)], check=True, capture_output=True, env=env())
    v = Volume(img, timestamp_ns=T0)
    v.group = 32
    assert v.sb.dirblkfsbs == 4
    d = v.mkdir(v.rootino, b"d", 0o755).ino
    later = []
    v.create(d, b"a", 0o100644, os.O_WRONLY, later=later)
    assert len(later) == 1
    later.pop()()
    v.end_group()
    real = type(v.fs).agf

    def fragmented(fs, agno):
        agf = dict(real(fs, agno))
        agf["agf_longest"] = 15
        return agf

    monkeypatch.setattr(type(v.fs), "agf", fragmented)
    v.create(d, b"b", 0o100644, os.O_WRONLY, later=later)
    assert later == [] and v.find(d, b"b") is not None
    monkeypatch.setattr(type(v.fs), "agf", real)
    v.close()
    repair_clean(img)


def test_grouped_creates_up_to_enospc(tmp_path, monkeypatch):
    """Creates grouped to the very end of the free space (the room rule
    turned off): the create that finds no room fails with ENOSPC, the
    group's earlier creates are done again one by one and all kept, writes
    go on, and as many files fit as without grouping."""
    import fstool.mount.volume as volume
    counts = []
    for group in (1, 32):
        img = tmp_path / f"full{group}.img"
        subprocess.run([sys.executable, "-m", "fstool", "mkfs", "--size", "48m", str(img)],
                       check=True, capture_output=True, env=env())
        monkeypatch.setattr(volume, "ROOM_BLOCKS", 0)
        v = Volume(img, timestamp_ns=T0)
        v.group = group
        dirs = [v.mkdir(v.rootino, b"d%d" % k, 0o755).ino for k in range(4)]
        made = {}
        with pytest.raises(OSError) as e:
            for i in range(1 << 20):
                name = b"a-file-name-of-some-length-%08d" % i
                made[(dirs[i % 4], name)] = _create_closed(v, dirs[i % 4], name, True)
        assert e.value.errno == errno.ENOSPC and v.failed is None
        assert all(v.find(*key).ino == ino for key, ino in made.items())
        v.unlink(*next(iter(made)))                 # writes go on
        v.close()
        repair_clean(img)
        counts.append(len(made))
    assert counts[0] == counts[1] > 60000


@pytest.mark.parametrize("geometry", [["-b", "size=1024"], ["-n", "size=65536"],
                                      ["-b", "size=65536"], ["-m", "finobt=0"],
                                      ["-i", "size=2048,sparse=0"]],
                         ids=["1k-blocks", "64k-dirblocks", "64k-blocks", "no-finobt",
                              "2k-inodes-not-sparse"])
def test_grouped_creates_on_other_geometries(tmp_path, geometry):
    """The same, answered first with a failing create, on block, directory
    block and inode sizes and features other than mkfs's defaults."""
    base = tmp_path / "base.img"
    # (64 KiB blocks with the rmapbt need a log of 124 MiB: an AG larger
    # than a 256 MiB image's)
    size = "1g" if "size=65536" in geometry[1:] and geometry[0] == "-b" else "256m"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "--size", size, *geometry,
                    str(base)], check=True, capture_output=True, env=env())
    results = []
    for group in (1, 32):
        img = tmp_path / f"g{group}.img"
        shutil.copyfile(base, img)
        v = Volume(img, timestamp_ns=T0)
        v.group = group
        made = _workload(v, 40, group > 1)
        _check(v, made, None)           # the forms reached depend on the sizes
        v.close()
        results.append((made, img.read_bytes()))
    assert results[0] == results[1]
    repair_clean(tmp_path / "g32.img")
