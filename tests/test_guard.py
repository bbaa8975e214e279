"""Writers refuse images in use, whatever path reaches them; errors carry
the errno a filesystem would return; the fault hook ends the process at
the Nth write."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import pytest

from fixtures import images

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")


def _fstool(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


@needs_loop
def test_writers_refuse_mounted_image_through_other_paths(tmp_path):
    img = tmp_path / "a.img"
    assert _fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    link = tmp_path / "hardlink.img"
    os.link(img, link)
    bind_src = tmp_path / "dir"
    bind_src.mkdir()
    os.link(img, bind_src / "x.img")
    bind = tmp_path / "bind"
    bind.mkdir()
    subprocess.run(["mount", "--bind", str(bind_src), str(bind)], check=True)
    try:
        with images.Mounted(img):
            for p in (img, link, bind / "x.img"):
                r = _fstool("mkdir", p, "/x")
                assert r.returncode != 0, f"{p} was written while mounted"
                assert "mounted at" in r.stderr, r.stderr
                assert "Traceback" not in r.stderr
    finally:
        subprocess.run(["umount", str(bind)], check=True)
    # unmounted, every path writes again
    assert _fstool("mkdir", link, "/y").returncode == 0
    r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True)
    assert r.returncode == 0


@needs_loop
def test_writers_refuse_attached_loop_device(tmp_path):
    img = tmp_path / "a.img"
    assert _fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    dev = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        r = _fstool("mkdir", img, "/x")
        assert r.returncode != 0 and "attached to" in r.stderr, r.stderr
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)


def test_errors_carry_errno():
    from fstool import errors as E
    cases = {E.NoSpaceError: errno.ENOSPC, E.ExistsError: errno.EEXIST,
             E.NotEmptyError: errno.ENOTEMPTY, E.NameTooLongError: errno.ENAMETOOLONG,
             E.TooManyLinksError: errno.EMLINK, E.FileTooBigError: errno.EFBIG,
             E.ReadOnlyError: errno.EROFS, E.ImageBusy: errno.EBUSY,
             E.InvalidArgument: errno.EINVAL}
    for cls, want in cases.items():
        e = cls("some message")
        assert e.errno == want and E.errno_of(e) == want
        assert str(e) == "some message"
    assert E.NotFoundError("/a").errno == errno.ENOENT
    assert isinstance(E.NotFoundError("/a"), FileNotFoundError)
    assert E.NotADirectoryImageError("/a").errno == errno.ENOTDIR
    assert E.IsADirectoryImageError("/a").errno == errno.EISDIR
    assert E.CorruptionError("agf", "bad").errno == errno.EUCLEAN
    assert isinstance(E.ExistsError("x"), FileExistsError)
    assert E.errno_of(RuntimeError("x")) == errno.EIO


def test_fault_hook_kills_at_the_nth_write(tmp_path):
    target = tmp_path / "img"
    target.write_bytes(bytes(64 * 512))
    prog = ("import sys; from fstool.io.device import Device\n"
            "d = Device(sys.argv[1], writable=True)\n"
            "for i in range(10):\n"
            "    d.pwrite(i * 512, bytes([i + 1]) * 512)\n"
            "print('finished')\n")
    r = subprocess.run([sys.executable, "-c", prog, str(target)], capture_output=True,
                       text=True, env={**os.environ, "FSTOOL_FAULT_AFTER_WRITES": "4"})
    assert r.returncode == -9 and "finished" not in r.stdout
    data = target.read_bytes()
    assert [data[i * 512] for i in range(6)] == [1, 2, 3, 4, 0, 0]


needs_xfsprogs = pytest.mark.skipif(not images.xfsprogs_available(),
                                    reason="xfsprogs (xfs_db, xfs_repair) not installed")


@needs_xfsprogs
def test_writers_refuse_an_image_check_finds_corrupt(tmp_path):
    img = tmp_path / "c.img"
    assert _fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    subprocess.run(["xfs_db", "-x", "-c", "agf 0", "-c", "write -d freeblks 1000", str(img)],
                   capture_output=True, check=True)
    before = img.read_bytes()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    for args in (("mkdir", img, "/x"), ("populate", img, src)):
        r = _fstool(*args)
        assert r.returncode != 0 and "AGF_FREEBLKS" in r.stderr and "--no-check" in r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert img.read_bytes() == before
    assert _fstool("mkdir", "--no-check", img, "/x").returncode == 0


@needs_xfsprogs
def test_rm_of_a_large_tree_commits_in_steps(tmp_path):
    from fstool.ops import edit
    img = tmp_path / "r.img"
    assert _fstool("mkfs", "-q", img, "--size", "256m").returncode == 0
    src = tmp_path / "src"
    for d in range(3):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(edit.RM_BATCH):
            (src / f"d{d}" / f"f{i}").write_bytes(b"y" * (i % 3))
    assert _fstool("populate", img, src).returncode == 0
    r = _fstool("rm", "-r", img, "/d0", "/d1", "/d2")
    assert r.returncode == 0, r.stderr
    rep = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stdout
    import fstool
    with fstool.open_image(img) as fs:
        assert fs.listdir("/") == []
        assert fs.sb.fields["sb_icount"] - fs.sb.fields["sb_ifree"] == 3


needs_losetup = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("losetup") is None,
                                   reason="needs root and losetup")


def _attach(img, *opts) -> str:
    return subprocess.run(["losetup", "-f", "--show", *opts, str(img)], capture_output=True,
                          text=True, check=True).stdout.strip()


@needs_losetup
def test_the_lock_is_one_through_a_loop_device_and_the_file(tmp_path):
    """A writer holding the image through /dev/loopN shuts out one using the
    file's path, and the other way round: both lock the backing file."""
    from fstool.errors import ImageBusy
    from fstool.io.device import Device
    from fstool.io.lock import ImageLock, identify
    img = tmp_path / "l.img"
    img.write_bytes(bytes(1 << 20))
    link = tmp_path / "hard.img"
    os.link(img, link)
    dev = _attach(img)
    try:
        assert identify(os.stat(dev)).key == identify(os.stat(link)).key == \
            ("file", os.stat(img).st_dev, os.stat(img).st_ino)
        for first, second in ((dev, img), (img, dev), (dev, link), (dev, dev)):
            a, b = Device(first), Device(second)
            try:
                with ImageLock(a, str(first)):
                    with pytest.raises(ImageBusy, match="another fstool"):
                        ImageLock(b, str(second)).__enter__()
                with ImageLock(b, str(second)):         # let go: free again
                    pass
            finally:
                a.close()
                b.close()
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)


@needs_losetup
def test_loop_devices_over_parts_of_a_file(tmp_path):
    """A loop device maps a range of its file: loop devices over ranges that
    overlap stand for the same image, over ranges that do not, for two."""
    from fstool.io.lock import identify, users_of
    img = tmp_path / "p.img"
    img.write_bytes(bytes(4 << 20))
    mib = str(1 << 20)
    first = _attach(img, "--sizelimit", mib)                       # [0, 1M)
    apart = _attach(img, "-o", mib, "--sizelimit", mib)            # [1M, 2M)
    across = _attach(img, "-o", str(1 << 19), "--sizelimit", mib)  # [512K, 1.5M)
    try:
        ident = identify(os.stat(first))
        assert (ident.start, ident.length) == (0, 1 << 20)
        assert identify(os.stat(across)).start == 1 << 19
        names = lambda dev: {p.split("/dev/")[1] for p in users_of(os.stat(dev))}
        short = lambda dev: os.path.basename(dev)
        assert names(first) == {short(across)}
        assert names(apart) == {short(across)}
        assert names(across) == {short(first), short(apart)}
        # the file itself is every range
        assert names(img) == {short(first), short(apart), short(across)}
    finally:
        for d in (first, apart, across):
            subprocess.run(["losetup", "-d", d], check=True)
