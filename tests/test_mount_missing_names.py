"""The native request loop answers lookups of missing names itself
(fstool_native/fuseloop.pyx, "names known"): once a lookup in a directory
has missed, the loop keeps the directory's names (Volume.names) and says
"no such name" for any other name without asking the volume.  What it
keeps must never lack a name the directory has:

- every way of making a name (open O_CREAT, mknod, mkdir, symlink, link,
  rename) is seen by a lookup after the kernel has forgotten its own
  entries (drop_caches), in a directory whose names the loop keeps;
- names the directory had before the mount, and names that came back
  after an unlink or rmdir, are found;
- a lookup of a name known missing is answered while another request
  holds the request lock;
- Volume.names lists what the directory holds, the open group of creates
  included, and nothing for a directory too large to be worth it.

The mount tests need FUSE, the native loop and root (drop_caches); they
skip with the reason otherwise."""
from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from fixtures.fusemount import FuseMounted, fstool_image, fuse_skip_reason, repair_clean
from fstool.mount import volume as VOL
from fstool.mount.volume import Volume

try:
    from fstool_native import fuseloop  # noqa: F401 - only whether it is built
    NATIVE_LOOP = True
except ImportError:
    NATIVE_LOOP = False


def _need_mount() -> None:
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    if not NATIVE_LOOP:
        pytest.skip("the native request loop (fstool_native.fuseloop) is not built")
    if os.geteuid() != 0:
        pytest.skip("needs root (drop_caches makes the kernel look names up again)")


def _forget_dentries() -> None:
    """The kernel's cached names dropped: the next lookups reach the mount."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def test_names_made_after_a_miss_are_found(tmp_path):
    _need_mount()
    img = fstool_image(tmp_path, "64m")
    with FuseMounted(img) as mnt:
        d = mnt / "d"
        d.mkdir()
        (d / "before").write_bytes(b"x")
        other = mnt / "other"
        other.mkdir()
        (other / "moved").write_bytes(b"y")
        made = {
            "created": lambda p: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                                  0o644)),
            "fifo": lambda p: os.mkfifo(p),
            "subdir": lambda p: os.mkdir(p),
            "symlink": lambda p: os.symlink("before", p),
            "hardlink": lambda p: os.link(d / "before", p),
            "renamed": lambda p: os.rename(other / "moved", p),
        }
        _forget_dentries()
        # a miss: from here on the loop keeps d's names
        assert not os.path.lexists(d / "nothing")
        assert os.path.lexists(d / "before")
        for name, make in made.items():
            assert not os.path.lexists(d / name)      # a miss, answered by the loop
            make(d / name)
            _forget_dentries()
            assert os.path.lexists(d / name), name
        # the ones made are what they should be
        assert stat.S_ISFIFO(os.lstat(d / "fifo").st_mode)
        assert (d / "subdir").is_dir()
        assert os.readlink(d / "symlink") == "before"
        assert (d / "renamed").read_bytes() == b"y"
        assert not os.path.lexists(other / "moved")
        # a name gone and made again
        os.unlink(d / "created")
        _forget_dentries()
        assert not os.path.lexists(d / "created")
        (d / "created").write_bytes(b"again")
        _forget_dentries()
        assert (d / "created").read_bytes() == b"again"
        os.rmdir(d / "subdir")
        assert not os.path.lexists(d / "subdir")
        os.mkdir(d / "subdir")
        _forget_dentries()
        assert (d / "subdir").is_dir()
        assert sorted(os.listdir(d)) == sorted(["before", *made])
    repair_clean(img)


def test_many_creates_in_many_directories_stay_found(tmp_path):
    """Creates round-robin over directories whose names the loop keeps (the
    tables grow past their first size), each found after the kernel forgot
    them, and a create of a name already there refused."""
    _need_mount()
    img = fstool_image(tmp_path, "64m")
    with FuseMounted(img) as mnt:
        dirs = [mnt / f"d{k}" for k in range(8)]
        for p in dirs:
            p.mkdir()
        for i in range(400):
            p = dirs[i % len(dirs)] / f"f{i}"
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        _forget_dentries()
        for i in range(400):
            assert os.path.lexists(dirs[i % len(dirs)] / f"f{i}"), i
        with pytest.raises(FileExistsError):
            os.open(dirs[3] / "f3", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    repair_clean(img)


def test_missing_names_are_answered_while_the_lock_is_held(tmp_path):
    """A lookup of a name known missing is answered while another request
    holds the request lock (a copy_file_range of 96 MiB, one request,
    copied in Python): the loop answers it without the lock or the
    interpreter.  Without that, a lookup sent during the copy waits for
    most of it."""
    _need_mount()
    # no reflink: the copy is done in Python, not shared at once
    img = fstool_image(tmp_path, "512m", "-m", "reflink=0")
    with FuseMounted(img) as mnt:
        d = mnt / "d"
        d.mkdir()
        assert not os.path.lexists(d / "first")        # the loop keeps d's names
        src = mnt / "src"
        block = os.urandom(1 << 20)
        with open(src, "wb") as f:
            for _ in range(96):
                f.write(block)
        done = threading.Event()
        took = []
        waits = []

        def copy():
            # copies repeat until enough lookups were made: a fast machine
            # copies 96 MiB in a few tens of milliseconds
            fi = os.open(src, os.O_RDONLY)
            try:
                for k in range(12):
                    fo = os.open(mnt / f"dst{k}", os.O_WRONLY | os.O_CREAT,
                                 0o644)
                    try:
                        t = time.perf_counter()
                        left = 96 << 20
                        while left:
                            off = (96 << 20) - left
                            n = os.copy_file_range(fi, fo, left, off, off)
                            if n <= 0:
                                break
                            left -= n
                        took.append(time.perf_counter() - t)
                    finally:
                        os.close(fo)
                    os.unlink(mnt / f"dst{k}")
                    if len(waits) >= 40:
                        break
            finally:
                done.set()
                os.close(fi)

        t = threading.Thread(target=copy)
        t.start()
        i = 0
        while not done.is_set():
            s = time.perf_counter()
            assert not os.path.lexists(d / f"missing-{i}")
            waits.append(time.perf_counter() - s)
            i += 1
        t.join()
        assert took and len(took) <= 12
    # where the loop answers them, lookups keep coming during the copies
    # and the typical one takes a tiny part of a copy; where each waits for
    # the lock, about one is made per copy and each waits for most of it.
    # (Medians, not the longest: one lookup descheduled on a loaded machine
    # must not decide the test.)
    median = sorted(waits)[len(waits) // 2]
    copy_median = sorted(took)[len(took) // 2]
    assert len(waits) >= 20 and median < copy_median / 20, \
        (len(waits), median, took)
    repair_clean(img)


def test_volume_names_lists_the_open_group(tmp_path):
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        v.group = 256
        root = v.rootino
        d = v.mkdir(root, b"d", 0o755).ino
        fh, _a = v.create(d, b"a", 0o100644)
        v.release(fh)
        v.end_group()
        fh, _a = v.create(d, b"b", 0o100644)     # in an open group
        v.release(fh)
        assert v._grouped
        assert sorted(v.names(d)) == [b"a", b"b"]
        assert v._grouped                         # listing did not end the group
        # a create the caller knows to be missing
        fh, _a = v.create(d, b"c", 0o100644, absent=True)
        v.release(fh)
        assert sorted(v.names(d)) == [b"a", b"b", b"c"]
        v.end_group()
        assert sorted(v.names(d)) == [b"a", b"b", b"c"]
    finally:
        v.close()
    repair_clean(img)


def test_volume_names_none_for_a_large_directory(tmp_path, monkeypatch):
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        d = v.mkdir(v.rootino, b"d", 0o755).ino
        for i in range(200):
            fh, _a = v.create(d, b"file-%04d" % i, 0o100644)
            v.release(fh)
        v.sync()
        assert len(v.names(d)) == 200
        monkeypatch.setattr(VOL, "NAMES_DIR_BYTES", 4096)
        assert v.names(d) is None
    finally:
        v.close()
    # a read-only mount's volume lists the same
    v = Volume(img, readonly=True)
    try:
        d = v.find(v.rootino, b"d").ino
        assert v.names(d) is None
        monkeypatch.setattr(VOL, "NAMES_DIR_BYTES", 4 << 20)
        assert sorted(v.names(d)) == [b"file-%04d" % i for i in range(200)]
    finally:
        v.close()
