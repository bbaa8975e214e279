"""fstool admin -L / -U (fstool/ops/admin.py) against xfs_admin: the same
superblock fields in every AG (xfs_db prints them), the kernel mounts the
result and reads the tree, xfs_repair -n finds nothing, -U restore returns
to the original UUID, a dirty log is refused, a run stopped part way leaves
an image that mounts and running it again finishes it."""
from __future__ import annotations

import shutil
import subprocess
import uuid as uuidlib

import pytest

import fstool as fsmod
from fixtures import images, modern
from fixtures.oracles import fstool, repair_clean
from fstool.format import log as L
from fstool.log.head import find_state

NEW = "5e8d0ac0-e10a-46be-b52e-c13a5390c1d4"


def _xfs_admin() -> str:
    return modern.tool("xfs_admin") if modern.available() else shutil.which("xfs_admin")


def _sbs(img) -> list:
    """xfs_db's print of every superblock, as lines."""
    out = []
    agcount = int(subprocess.run(["xfs_db", "-r", "-c", "sb 0", "-c", "p agcount", str(img)],
                                 capture_output=True, text=True,
                                 check=True).stdout.split("=")[1])
    for ag in range(agcount):
        r = subprocess.run(["xfs_db", "-r", "-c", f"sb {ag}", "-c", "p", str(img)],
                           capture_output=True, text=True, check=True)
        out.append(r.stdout.splitlines())
    return out


def _field(sbs, ag, name):
    return next(l.split(" = ", 1)[1] for l in sbs[ag] if l.startswith(name + " = "))


@pytest.fixture
def image(tmp_path):
    if _xfs_admin() is None:
        pytest.skip("needs xfs_admin (xfsprogs)")
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(300):
        (src / "d" / f"file-{i:04d}").write_bytes(b"x" * (i * 97))
    img = tmp_path / "a.img"
    fstool("mkfs", "--size", "300m", img, "--populate", src)
    return img


def _log_head_uuid(img) -> str:
    """The UUID the clean log's newest record carries."""
    with fsmod.open_image(img) as fs:
        ld, st = find_state(fs)
        assert st.clean and not st.dirty, st
        return str(uuidlib.UUID(bytes=L.REC_HEADER.unpack(ld.read(st.head_rec, 1))["h_fs_uuid"]))


def _same_as_xfs_admin(ours, theirs):
    """Every superblock field equal but the primary's CRC and LSN (ours
    changes the label in a journaled transaction, which stamps an LSN)."""
    a, b = _sbs(ours), _sbs(theirs)
    skip = ("crc = ", "lsn = ")
    a[0] = [l for l in a[0] if not l.startswith(skip)]
    b[0] = [l for l in b[0] if not l.startswith(skip)]
    assert a == b


def test_label_and_uuid_as_xfs_admin_sets_them(image, tmp_path):
    theirs = tmp_path / "b.img"
    shutil.copy(image, theirs)
    old = _field(_sbs(image), 0, "uuid")
    fstool("admin", "-L", "hello", "-U", NEW, image)
    subprocess.run([_xfs_admin(), "-L", "hello", "-U", NEW, str(theirs)], check=True,
                   capture_output=True)
    _same_as_xfs_admin(image, theirs)
    # the log: clean, its newest record (an unmount record at the old head,
    # not a log cleared as xfs_admin clears it) carrying the new UUID
    assert _log_head_uuid(image) == NEW
    sbs = _sbs(image)
    for ag in range(len(sbs)):
        assert _field(sbs, ag, "uuid") == NEW and _field(sbs, ag, "meta_uuid") == old
        assert _field(sbs, ag, "fname").startswith('"hello')
    repair_clean(image)
    assert fstool("check", image, check=False).returncode == 0
    # transactions on an image whose UUID changed (sb_uuid is not the
    # UUID the metadata is stamped with): an edit, a repair rebuilding all
    fstool("mkdir", image, "/after")
    r = fstool("repair", "--rebuild", "all", image, check=False)
    assert r.returncode in (0, 1), r.stderr
    repair_clean(image)
    r = fstool("admin", "-l", "-u", image)
    assert r.stdout.splitlines() == ['label = "hello"', f"UUID = {NEW}"]
    with images.Mounted(image) as mnt:
        assert len(list((mnt / "d").iterdir())) == 300
        assert (mnt / "d" / "file-0100").read_bytes() == b"x" * 9700
        (mnt / "new").write_text("written by the kernel")
        assert (mnt / "after").is_dir()
    r = subprocess.run(["blkid", "-o", "value", "-s", "UUID", str(image)],
                       capture_output=True, text=True)
    if r.returncode == 0:
        assert r.stdout.strip() == NEW
    repair_clean(image)
    # restore: the original UUID, the feature cleared, as xfs_admin does it
    fstool("admin", "-U", "restore", image)
    subprocess.run([_xfs_admin(), "-U", "restore", str(theirs)], check=True,
                   capture_output=True)
    sbs = _sbs(image)
    assert _field(sbs, 0, "uuid") == old and _log_head_uuid(image) == old
    assert int(_field(sbs, 0, "features_incompat"), 16) & 0x4 == 0
    with images.Mounted(image) as mnt:
        assert (mnt / "new").read_text() == "written by the kernel"
    repair_clean(image)


def test_label_alone_and_clearing_it(image, tmp_path):
    theirs = tmp_path / "b.img"
    shutil.copy(image, theirs)
    fstool("admin", "-L", "data", image)
    subprocess.run([_xfs_admin(), "-L", "data", str(theirs)], check=True,
                   capture_output=True)
    _same_as_xfs_admin(image, theirs)
    assert int(_field(_sbs(image), 0, "features_incompat"), 16) & 0x4 == 0
    fstool("admin", "-L", "--", image)
    assert fstool("admin", "-l", image).stdout.strip() == 'label = ""'
    repair_clean(image)
    r = fstool("admin", "-L", "thirteen-byte", image, check=False)
    assert r.returncode == 1 and "at most 12" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = fstool("admin", "-U", "not-a-uuid", image, check=False)
    assert r.returncode == 1 and "not a UUID" in r.stderr


def test_generate_gives_a_new_uuid_each_time(image):
    uuids = set()
    for _ in range(2):
        fstool("admin", "-U", "generate", image)
        uuids.add(_field(_sbs(image), 0, "uuid"))
    assert len(uuids) == 2
    repair_clean(image)
    with images.Mounted(image) as mnt:
        assert (mnt / "d" / "file-0001").read_bytes() == b"x" * 97


def test_a_dirty_log_is_refused(image):
    if not images.loop_available() or shutil.which("xfs_io") is None:
        pytest.skip("needs root, a kernel loop mount of XFS and xfs_io")
    with images.Mounted(image) as mnt:
        (mnt / "more").mkdir()
        subprocess.run(["sync"], check=True)
        (mnt / "more" / "f").write_text("x")
        subprocess.run(["xfs_io", "-x", "-c", "shutdown -f", str(mnt)], check=True)
    before = image.read_bytes()
    for args in (("-U", NEW), ("-L", "x")):
        r = fstool("admin", *args, image, check=False)
        assert r.returncode == 7 and "log" in r.stderr and "dirty" in r.stderr, r.stderr
    assert image.read_bytes() == before


def test_a_uuid_change_stopped_part_way_mounts_and_is_finished_by_a_second_run(image):
    """Stopped after the superblocks (the log still carries the nil UUID
    of the first step): the kernel mounts it with the new UUID, and the
    command run again writes the log with it."""
    from fstool.ops import admin as A
    from fstool.ops.logops import stamp
    f = A._read_primary(image)
    new = uuidlib.UUID(NEW).bytes
    stamp(image, uuid=bytes(16))
    A._rewrite_sbs(image, lambda g: g.update(
        sb_uuid=new, sb_meta_uuid=f["sb_uuid"],
        sb_features_incompat=g["sb_features_incompat"] | 0x4), 0)
    assert A._log_uuid_nil(image)
    copy = image.parent / "copy.img"
    shutil.copy(image, copy)
    with images.Mounted(copy) as mnt:            # (its unmount writes the log again)
        assert len(list((mnt / "d").iterdir())) == 300
    r = fstool("admin", "-U", NEW, image)
    assert "log marked clean with the new UUID" in r.stdout
    assert not A._log_uuid_nil(image)
    repair_clean(image)
    with images.Mounted(image) as mnt:
        assert len(list((mnt / "d").iterdir())) == 300


@pytest.mark.parametrize("version", ["6.1", "6.10.1"])
def test_a_write_after_xfs_admin_cleared_the_log_leaves_it_clean(tmp_path, version):
    """xfs_admin -U clears a v5 log to a cycle-2 unmount record at block 0,
    zeroes up to block 511 and fills the rest with cycle-1 records.  The
    head is found at block 0 (as the kernel finds it); a writer that went on
    there without stamping the zeroed blocks in front of it (as the kernel
    does at mount) left records the head search stops short of: the log
    read as dirty afterwards."""
    if version == "6.1":
        admin = shutil.which("xfs_admin")
    else:
        admin = modern.tool("xfs_admin") if modern.available() else None
    if admin is None or shutil.which("mkfs.xfs") is None:
        pytest.skip(f"needs mkfs.xfs and xfs_admin {version}")
    img = tmp_path / "a.img"
    with open(img, "wb") as f:
        f.truncate(300 << 20)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(img)], check=True)
    subprocess.run([admin, "-U", "generate", str(img)], check=True, capture_output=True)
    info = fstool("log", "info", img).stdout
    assert "clean" in info and "block 0 cycle 1" in info, info
    fstool("mkdir", img, "/x")
    fstool("mkdir", img, "/x/y")
    r = fstool("check", img, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "state              clean" in fstool("log", "info", img).stdout
    repair_clean(img)
    if images.loop_available():
        with images.Mounted(img, nouuid=True) as mnt:
            assert (mnt / "x" / "y").is_dir()
