"""Whole-disk images (fstool/io/partition.py): GPT and MBR disks made by
sgdisk and sfdisk, a tree the kernel wrote in each XFS partition (through
``losetup -P``).  Every command on ``disk.img@N`` gives what it gives on
that partition copied out with dd; writers change no byte outside the
partition; the table reads as sfdisk reads it; the guards and locks apply
to the partition's byte range; an fstool mount of ``disk.img@2`` runs the
seeded workload as the kernel does."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
import zlib

import pytest

from fixtures import disks, images
from fixtures.oracles import fstool


def _made(kind, tmp_path_factory):
    why = disks.skip_reason(kind)
    if why:
        pytest.skip(why)
    return getattr(disks, f"{kind}_disk")(tmp_path_factory.mktemp(kind))


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return _made("gpt", tmp_path_factory)


@pytest.fixture(scope="module")
def mbr(tmp_path_factory):
    return _made("mbr", tmp_path_factory)


def _copy(disk, tmp_path, name="copy.img"):
    out = tmp_path / name
    subprocess.run(["cp", "--sparse=always", str(disk.path), str(out)], check=True)
    return disks.Disk(out, disk.kind, disk.xfs, disk.parts)


def _same_text(a: str, b: str, name_a: str, name_b: str) -> tuple:
    """Both outputs with the image name taken out (and the padding the
    name's length shifts)."""
    norm = lambda s, n: re.sub(r"[ \t]+", " ", s.replace(n, "IMAGE"))
    return norm(a, name_a), norm(b, name_b)


# (command words, arguments after IMAGE)
READERS = [
    (("info",), ()), (("check",), ()), (("sb",), ()), (("agf",), ("1",)), (("agi",), ("0",)),
    (("agfl",), ("0",)), (("inode",), ("128",)), (("agstats",), ()), (("freesp",), ()),
    (("frag",), ()), (("btree", "dump"), ("--ag", "0", "--tree", "bnobt")),
    (("log", "info"), ()), (("log", "print"), ()), (("ls",), ("-l", "/leaf")),
    (("ls",), ("/",)), (("stat",), ("/big",)), (("cat",), ("/link",)),
]


@pytest.mark.parametrize("table", ["gpt", "mbr"])
def test_readers_give_what_they_give_on_the_extracted_partition(request, tmp_path, table):
    disk = request.getfixturevalue(table)
    for n in disk.xfs:
        part = disks.extract(disk, n, tmp_path / f"part{n}.img")
        name = f"{disk.path}@{n}"
        for words, rest in READERS:
            a = fstool(*words, name, *rest, check=False)
            b = fstool(*words, part, *rest, check=False)
            assert a.returncode == b.returncode == 0, (words, a.stderr, b.stderr)
            got, want = _same_text(a.stdout, b.stdout, name, str(part))
            assert got == want, words
        # get: the same tree extracted
        got = _tree(tmp_path / f"get{n}a", name)
        assert got == _tree(tmp_path / f"get{n}b", part) and len(got) > 600


def _tree(out, image) -> list:
    """The image's tree, extracted by fstool get: path, size and content."""
    fstool("get", image, "/", out)
    return _walk(out)


def _walk(root) -> list:
    """Path, size (a file's) and content of everything under ``root``."""
    import hashlib
    return sorted((p.relative_to(root).as_posix(),
                   0 if p.is_dir() and not p.is_symlink() else p.lstat().st_size,
                   hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() and
                   not p.is_symlink() else os.readlink(p) if p.is_symlink() else "")
                  for p in root.rglob("*"))


def test_partition_names_option_and_offset(gpt):
    """@N, @GPTNAME, @PARTUUID, @XFS-label, --partition and --offset all
    open partition 2; the other ways of naming it agree."""
    table = json.loads(fstool("disk", "--json", gpt.path).stdout)
    p2 = next(p for p in table["partitions"] if p["number"] == 2)
    want = fstool("sb", f"{gpt.path}@2").stdout
    for name in (f"{gpt.path}@home", f"{gpt.path}@{p2['uuid'].upper()}",
                 f"{gpt.path}@homefs", f"{gpt.path}@+{gpt.parts[2][0]}"):
        assert fstool("sb", name).stdout == want, name
    assert fstool("sb", "--partition", "home", gpt.path).stdout == want
    assert fstool("sb", "--offset", gpt.parts[2][0], gpt.path).stdout == want
    r = fstool("sb", "--partition", "2", f"{gpt.path}@1", check=False)
    assert r.returncode == 2 and "names a partition already" in r.stderr


@pytest.mark.parametrize("table", ["gpt", "mbr"])
def test_table_reads_as_sfdisk_reads_it(request, table):
    disk = request.getfixturevalue(table)
    ours = json.loads(fstool("disk", "--json", disk.path).stdout)
    theirs = json.loads(subprocess.run(["sfdisk", "--json", str(disk.path)],
                                       capture_output=True, text=True,
                                       check=True).stdout)["partitiontable"]
    assert ours["table"] == {"gpt": "gpt", "dos": "mbr"}[theirs["label"]]
    got = {p["number"]: (p["start"], p["size"]) for p in ours["partitions"]}
    want = {n: v for n, v in disk.parts.items()}
    if table == "mbr":
        # sfdisk gives the extended partition its table size; we too
        assert got == want
    else:
        assert got == want
        for p, q in zip(ours["partitions"], theirs["partitions"]):
            assert p["uuid"].upper() == q["uuid"] and p["name"] == q.get("name", "")
            assert p["type"].upper() == q["type"]
        assert ours["id"] == theirs["id"]
    assert sorted(p["number"] for p in ours["partitions"] if p["xfs"]) == disk.xfs
    text = fstool("disk", disk.path).stdout
    for n in disk.xfs:
        assert re.search(rf"{re.escape(str(disk.path))}@{n} .*XFS", text), text


def _fill_script(name: str, host_dir) -> list:
    return [
        ["populate", name, host_dir],
        ["mkdir", name, "/newdir"],
        ["put", name, "/etc/services", "/newdir/services"],
        ["ln", "-s", name, "target", "/sym"],
        ["mv", name, "/newdir", "/moved"],
        ["rm", "-r", name, "/short"],
        ["setattr", name, "--mode", "700", "/big"],
        ["cp", name, "/big", "/bigcopy"],
        ["admin", "-L", "renamed", "-U", "5e8d0ac0-e10a-46be-b52e-c13a5390c1d4", name],
        ["repair", "--rebuild", "all", name],
    ]


@pytest.mark.parametrize("table", ["gpt", "mbr"])
def test_writers_change_no_byte_outside_the_partition(request, tmp_path, table):
    disk = _copy(request.getfixturevalue(table), tmp_path)
    n = disk.xfs[-1]
    before = disks.outside_digest(disk, n)
    part = disks.extract(disk, n, tmp_path / "part.img")
    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "sub" / "f").write_bytes(os.urandom(100000))
    for args in _fill_script(f"{disk.path}@{n}", host):
        r = fstool(*args, check=False)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (args, r.stderr)
        if args[0] != "repair":
            assert r.returncode == 0, (args, r.stderr)
    for args in _fill_script(str(part), host):
        fstool(*args, check=False)
    assert disks.outside_digest(disk, n) == before
    got = disks.extract(disk, n, tmp_path / "after.img")
    from fixtures.oracles import repair_clean
    repair_clean(got)
    # the same changes as on the partition written on its own
    want = _tree(tmp_path / "b", part)
    assert _tree(tmp_path / "a", got) == want
    # and the kernel reads them so, through the disk's partition
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with disks.Attached(disk.path) as dev:
        subprocess.run(["mount", "-o", "nouuid,ro", f"{dev}p{n}", str(mnt)], check=True)
        try:
            assert _walk(mnt) == want
        finally:
            subprocess.run(["umount", str(mnt)], check=True)


def test_mkfs_onto_a_partition(gpt, tmp_path):
    disk = _copy(gpt, tmp_path)
    before = disks.outside_digest(disk, 1)
    r = fstool("mkfs", f"{disk.path}@1", check=False)
    assert r.returncode != 0 and "already contains an XFS filesystem" in r.stderr
    r = fstool("mkfs", disk.path, check=False)
    assert r.returncode != 0 and "partition table (GPT" in r.stderr
    fstool("mkfs", "-f", "-L", "fresh", f"{disk.path}@1")
    assert disks.outside_digest(disk, 1) == before
    got = disks.extract(disk, 1, tmp_path / "p1.img")
    from fixtures.oracles import repair_clean
    repair_clean(got)
    sb = fstool("sb", got).stdout
    assert re.search(r"dblocks\s*=?\s*%d\b" % (disk.parts[1][1] // 4096), sb), sb
    r = fstool("mkfs", "-f", "--size", "400m", f"{disk.path}@1", check=False)
    assert r.returncode != 0 and "larger than the partition" in r.stderr


def test_resize_grows_up_to_the_partition_and_no_further(gpt, tmp_path):
    """A filesystem made smaller than its partition grows to fill it (the
    file is not extended: the partition is a device of fixed size); a size
    beyond the partition is refused."""
    disk = _copy(gpt, tmp_path)
    before = disks.outside_digest(disk, 1)
    size = disks.PART_MIB << 20
    fstool("mkfs", "-f", "--size", f"{size // 2}", f"{disk.path}@1")
    r = fstool("resize", "--size", size + (64 << 20), f"{disk.path}@1", check=False)
    assert r.returncode != 0 and "cannot hold" in r.stderr, r.stderr
    fstool("resize", "--size", size, f"{disk.path}@1")
    assert disks.outside_digest(disk, 1) == before
    assert os.path.getsize(disk.path) == os.path.getsize(gpt.path)
    got = disks.extract(disk, 1, tmp_path / "p1.img")
    from fixtures.oracles import repair_clean
    repair_clean(got)
    info = json.loads(fstool("info", "--json", got).stdout)
    assert json.dumps(info).count(str(size // 4096)) >= 1
    with disks.Attached(disk.path) as dev:
        mnt = tmp_path / "m"
        mnt.mkdir()
        subprocess.run(["mount", "-o", "nouuid", f"{dev}p1", str(mnt)], check=True)
        try:
            st = os.statvfs(mnt)
            assert st.f_blocks * st.f_frsize > size * 0.9
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    # shrunk back inside the partition: the disk file keeps its size
    fstool("resize", "--size", f"{size // 2}", f"{disk.path}@1")
    assert disks.outside_digest(disk, 1) == before
    assert os.path.getsize(disk.path) == os.path.getsize(gpt.path)
    got = disks.extract(disk, 1, tmp_path / "p1b.img")
    repair_clean(got)
    assert json.loads(fstool("info", "--json", got).stdout)["blocks"] == size // 2 // 4096


def test_one_xfs_partition_opens_with_a_note_several_are_listed(gpt, tmp_path):
    r = fstool("info", gpt.path, check=False)
    assert r.returncode != 0 and "several XFS partitions" in r.stderr
    for n in gpt.xfs:
        assert f" {n} '" in r.stderr.split("several", 1)[1]
    assert "not XFS" in r.stderr                          # the swap partition
    assert len(r.stderr.strip().splitlines()) == 1
    one = _copy(gpt, tmp_path, "one.img")
    with open(one.path, "r+b") as f:                      # partition 1 no longer XFS
        f.seek(one.parts[1][0])
        f.write(b"\0" * 4)
    r = fstool("info", one.path)
    assert "note:" in r.stderr and f"{one.path}@2" in r.stderr
    assert r.stdout.replace(str(one.path), "X") == \
        fstool("info", f"{one.path}@2").stdout.replace(f"{one.path}@2", "X")
    with open(one.path, "r+b") as f:
        f.seek(one.parts[2][0])
        f.write(b"\0" * 4)
    r = fstool("info", one.path, check=False)
    assert r.returncode == 4 and "no XFS partition" in r.stderr


def test_bounds_are_enforced(gpt, tmp_path):
    """The device is the partition: a read or write past its end fails,
    and a disk cut short inside a partition is a truncated image."""
    from fstool.errors import ImageError
    from fstool.io.device import Device
    disk = _copy(gpt, tmp_path)
    start, size = disk.parts[1]
    with open(disk.path, "rb") as f:
        f.seek(start + size)
        after = f.read(512)                              # partition 2's first sector
    d = Device(f"{disk.path}@1", writable=True)
    try:
        assert (d.start, d.size) == (start, size)
        with pytest.raises(ImageError):
            d.pread(size - 512, 1024)
        with pytest.raises(ImageError):
            d.pwrite(size, b"x" * 512)
        with pytest.raises(ImageError):
            d.zero_range(size - 512, 1024)
        with pytest.raises(ImageError):
            d.resize(size * 2)
        d.pwrite(size - 512, b"y" * 512)
    finally:
        d.close()
    with open(disk.path, "rb") as f:
        f.seek(start + size - 512)
        assert f.read(1024) == b"y" * 512 + after
    cut = tmp_path / "cut.img"
    with open(disk.path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(start + size // 2))
    r = fstool("info", f"{cut}@1", check=False)
    assert r.returncode == 6 and "truncated" in r.stderr, r.stderr


def test_gpt_backup_header_is_checked(gpt, tmp_path):
    disk = _copy(gpt, tmp_path)
    size = os.path.getsize(disk.path)
    with open(disk.path, "r+b") as f:                    # the backup header's CRC
        f.seek(size - 512 + 16)
        f.write(b"\xde\xad\xbe\xef")
    r = fstool("disk", disk.path)
    assert "backup GPT header" in r.stderr and "damaged" in r.stderr
    # a damaged primary: the backup serves
    disk = _copy(gpt, tmp_path, "c2.img")
    with open(disk.path, "r+b") as f:
        f.seek(512 + 16)
        f.write(b"\xde\xad\xbe\xef")
    r = fstool("disk", disk.path)
    assert "primary GPT header is damaged" in r.stderr
    assert fstool("sb", f"{disk.path}@home").stdout == fstool("sb", f"{gpt.path}@2").stdout
    # a grown disk: the backup is no longer at the end
    disk = _copy(gpt, tmp_path, "c3.img")
    os.truncate(disk.path, size + (1 << 20))
    assert "the image was grown" in fstool("disk", disk.path).stderr


def test_table_parser_against_a_hand_made_gpt():
    """The CRCs the parser checks are the ones in the header (a header
    whose entry array CRC is wrong is not used)."""
    from fstool.io import partition as P
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "h.img")
        with open(path, "wb") as f:
            f.truncate(8 << 20)
        subprocess.run(["sgdisk", "-n", "1:2048:+2M", "-c", "1:x", path], check=True,
                       capture_output=True) if shutil.which("sgdisk") else pytest.skip(
            "needs sgdisk (apt: gdisk)")
        t = P.table_of(path)
        assert t.kind == "gpt" and [p.number for p in t.partitions] == [1] and not t.notes
        with open(path, "r+b") as f:                     # the entries, both copies
            f.seek(1024)
            f.write(b"\1")
            f.seek((8 << 20) - 33 * 512)
            f.write(b"\1")
        with pytest.raises(Exception, match="entry array CRC"):
            P.table_of(path)
        assert zlib.crc32(b"") == 0


def test_locks_and_guard_cover_the_partition_byte_range(gpt, tmp_path):
    from fstool.errors import ImageBusy
    from fstool.io.device import Device
    from fstool.io.lock import ImageLock, refuse_if_mounted
    disk = _copy(gpt, tmp_path)
    a = Device(f"{disk.path}@1", writable=True)
    b = Device(f"{disk.path}@2", writable=True)
    a2 = Device(f"{disk.path}@+{disk.parts[1][0]}", writable=True)
    whole = Device(disk.path, writable=True, whole=True)
    try:
        with ImageLock(a, "a"):
            with ImageLock(b, "b"):
                pass                                     # another partition: free
            with pytest.raises(ImageBusy):
                ImageLock(a2, "a2").__enter__()          # the same bytes by offset
            with pytest.raises(ImageBusy):
                ImageLock(whole, "whole").__enter__()
        with ImageLock(whole, "whole"):
            with pytest.raises(ImageBusy):
                ImageLock(b, "b").__enter__()
    finally:
        for d in (a, b, a2, whole):
            d.close()
    # the kernel's hold of partition 1 (through a loop device with
    # partitions) refuses writes to partition 1, not to partition 2
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with disks.Attached(disk.path) as dev:
        subprocess.run(["mount", "-o", "nouuid", f"{dev}p1", str(mnt)], check=True)
        try:
            with pytest.raises(ImageBusy, match="mounted at"):
                refuse_if_mounted(f"{disk.path}@1")
            refuse_if_mounted(f"{disk.path}@2")
            r = fstool("mkdir", f"{disk.path}@1", "/x", check=False)
            assert r.returncode == 7 and "mounted at" in r.stderr
            fstool("mkdir", f"{disk.path}@2", "/x")
        finally:
            subprocess.run(["umount", str(mnt)], check=True)


def test_opening_a_partition_adds_under_a_millisecond(gpt):
    from fstool.io.device import Device
    from fstool.io.partition import split  # noqa: F401  (imported once, as a command would)

    def opening(name, n=200):
        # the median CPU time (user and system) of this process: what the
        # open costs, which tests running beside this one do not change
        times = []
        for _ in range(n):
            t = time.process_time()
            Device(name).close()
            times.append(time.process_time() - t)
        return sorted(times)[n // 2]
    plain = opening(str(disks.extract(gpt, 2, gpt.path.parent / "plain2.img")))
    for name in (f"{gpt.path}@2", f"{gpt.path}@home"):
        assert opening(name) - plain < 1e-3


def test_the_mount_of_a_partition_runs_the_seeded_workload_as_the_kernel(gpt, tmp_path):
    from fixtures.fusemount import FuseMounted, fuse_skip_reason, run_ops
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    ours = _copy(gpt, tmp_path, "ours.img")
    theirs = _copy(gpt, tmp_path, "theirs.img")
    before = disks.outside_digest(ours, 2)

    def workload(root):
        (root / "w").mkdir()
        r = subprocess.run([sys.executable, "-m", "fixtures.mount_workload", str(root / "w"),
                            str(tmp_path / f"journal-{root.name}"), "7", "300"],
                           cwd=images.REPO, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stdout, run_ops(root, "tree")

    m = FuseMounted(f"{ours.path}@2")
    with m as mnt:
        got = workload(mnt)
    assert m.returncode == 0, m.stderr
    kmnt = tmp_path / "k"
    kmnt.mkdir()
    with disks.Attached(theirs.path) as dev:
        subprocess.run(["mount", "-o", "nouuid", f"{dev}p2", str(kmnt)], check=True)
        try:
            want = workload(kmnt)
        finally:
            subprocess.run(["umount", str(kmnt)], check=True)
    assert got == want
    assert disks.outside_digest(ours, 2) == before
    from fixtures.oracles import repair_clean
    repair_clean(disks.extract(ours, 2, tmp_path / "p2.img"))
    with disks.Attached(ours.path) as dev:
        subprocess.run(["mount", "-o", "nouuid,ro", f"{dev}p2", str(kmnt)], check=True)
        try:
            assert run_ops(kmnt, "tree") == want[1]
        finally:
            subprocess.run(["umount", str(kmnt)], check=True)


def test_uuid_of_mbr_partitions_is_the_disk_id_and_number(mbr):
    t = json.loads(fstool("disk", "--json", mbr.path).stdout)
    blk = subprocess.run(["sfdisk", "--disk-id", str(mbr.path)], capture_output=True,
                         text=True, check=True).stdout.strip().lower()
    assert t["id"] == blk
    for p in t["partitions"]:
        assert p["uuid"] == f"{blk[2:]}-{p['number']:02d}"
        assert str(uuidlib.UUID(int=0)) not in p["uuid"]
    want = fstool("sb", f"{mbr.path}@6").stdout
    assert fstool("sb", f"{mbr.path}@{blk[2:]}-06").stdout == want


def test_log_replay_in_a_partition(gpt, tmp_path):
    """A log the kernel left dirty in partition 2 (shut down while
    writing): fstool log replay of disk@2 writes exactly what it writes
    into that partition copied out, and nothing outside it."""
    if shutil.which("xfs_io") is None:
        pytest.skip("needs xfs_io (xfsprogs)")
    disk = _copy(gpt, tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with disks.Attached(disk.path) as dev:
        subprocess.run(["mount", "-o", "nouuid", f"{dev}p2", str(mnt)], check=True)
        try:
            for i in range(200):
                (mnt / f"new-{i}").write_bytes(b"x" * (i * 37))
            os.sync()
            for i in range(100):
                os.rename(mnt / f"new-{i}", mnt / "leaf" / f"moved-{i}")
            subprocess.run(["xfs_io", "-x", "-c", "shutdown -f", str(mnt)], check=True)
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    before = disks.outside_digest(disk, 2)
    part = disks.extract(disk, 2, tmp_path / "part.img")
    assert fstool("check", part, check=False).returncode == 2      # dirty
    fstool("log", "replay", f"{disk.path}@2")
    fstool("log", "replay", part)
    assert disks.outside_digest(disk, 2) == before
    got = disks.extract(disk, 2, tmp_path / "after.img")
    with open(got, "rb") as a, open(part, "rb") as b:
        while True:
            x, y = a.read(1 << 20), b.read(1 << 20)
            assert x == y
            if not x:
                break
