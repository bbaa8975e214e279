"""The os/pathlib-shaped Python API (stat, lstat, scandir, open, exists...)
gives what the kernel gives for the same image through os."""
import errno
import io
import os
import shutil
import stat

import pytest

import fstool
from fixtures import images

STAT_FIELDS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns",
               "st_mtime_ns", "st_ctime_ns", "st_atime", "st_mtime", "st_ctime", "st_blocks",
               "st_rdev", "st_blksize")


def _stat_tuple(s):
    return {f: getattr(s, f) for f in STAT_FIELDS} | {"int times": (s[7], s[8], s[9])}


@pytest.fixture(scope="module")
def mounted(kernel_img):
    with images.Mounted(kernel_img, readonly=True, nouuid=True) as mnt:
        yield kernel_img, mnt


def _paths(mnt):
    out = ["/"]
    for root, dirs, files in os.walk(mnt):
        rel = "/" + os.path.relpath(root, mnt).lstrip(".")
        rel = rel.rstrip("/") or "/"
        out += [os.path.join(rel, n) for n in dirs + files]
    return out


def test_stat_and_lstat_equal_the_kernel(mounted):
    img, mnt = mounted
    paths = _paths(mnt)
    with fstool.open_image(img) as fs:
        checked = 0
        for p in paths:
            host = os.path.join(mnt, p.lstrip("/"))
            ours, theirs = fs.lstat(p), os.lstat(host)
            assert isinstance(ours, os.stat_result)
            assert _stat_tuple(ours) == _stat_tuple(theirs), p
            try:
                theirs = os.stat(host)
            except OSError as e:
                with pytest.raises(OSError) as ei:
                    fs.stat(p)
                assert ei.value.errno == e.errno, p
                continue
            assert _stat_tuple(fs.stat(p)) == _stat_tuple(theirs), p
            checked += 1
        assert checked > 10000
        # every file of one image reports one device number
        assert len({fs.lstat(p).st_dev for p in paths[:50]}) == 1


def test_scandir_equals_os_scandir(mounted):
    img, mnt = mounted
    with fstool.open_image(img) as fs:
        for d in ("/", "/files", "/links/a", "/symlinks", "/special", "/dirs/d500", "/names"):
            host = os.path.join(mnt, d.lstrip("/"))
            with os.scandir(host) as it:
                theirs = {e.name: e for e in it}
            with fs.scandir(d) as it:
                ours = {e.name: e for e in it}
            assert sorted(ours) == sorted(theirs), d
            for name, e in ours.items():
                t = theirs[name]
                assert e.path == os.path.join(d, name)
                assert e.inode() == t.inode()
                for follow in (True, False):
                    assert e.is_dir(follow_symlinks=follow) == t.is_dir(follow_symlinks=follow)
                    assert e.is_file(follow_symlinks=follow) == \
                        t.is_file(follow_symlinks=follow)
                assert e.is_symlink() == t.is_symlink()
                assert _stat_tuple(e.stat(follow_symlinks=False)) == \
                    _stat_tuple(t.stat(follow_symlinks=False))
                assert e.stat(follow_symlinks=False) is e.stat(follow_symlinks=False)
                assert os.fspath(e) == e.path
                if t.is_file():                 # an entry opens as its path does
                    with fs.open(e) as a, open(t.path, "rb") as b:
                        assert a.read() == b.read()
        # bytes in, bytes out, as os.scandir does
        names = sorted(e.name for e in fs.scandir(b"/names"))
        assert names == sorted(os.listdir(os.path.join(mnt, "names").encode()))
        assert all(isinstance(e.path, bytes) for e in fs.scandir(b"/names"))


def test_open_reads_like_a_host_file(mounted):
    img, mnt = mounted
    with fstool.open_image(img) as fs:
        for p in ("/files/sparse", "/files/prealloc", "/files/fragmented",
                  "/files/size_4097", "/files/size_0", "/symlinks/short"):
            host = os.path.join(mnt, p.lstrip("/"))
            with open(host, "rb") as h, fs.open(p) as f:
                want = h.read()
                assert f.read() == want
                assert f.tell() == len(want)
                # copyfileobj through the buffered reader
                f.seek(0)
                out = io.BytesIO()
                shutil.copyfileobj(f, out, 7777)
                assert out.getvalue() == want
                # positional reads and readinto
                for pos in (0, 1, 4095, 4096, len(want) // 2, max(0, len(want) - 3)):
                    f.seek(pos)
                    buf = bytearray(5000)
                    n = f.readinto(buf)
                    assert bytes(buf[:n]) == want[pos:pos + 5000], (p, pos)
                    assert f.tell() == pos + n
                if len(want) >= 2:
                    assert f.seek(-2, io.SEEK_END) == len(want) - 2
                    assert f.read(10) == want[-2:]
                assert f.seek(3, io.SEEK_CUR) == len(want) + 3
                assert f.read(10) == b""
                with pytest.raises(ValueError):
                    f.seek(-1)
        # a buffered reader on request, lines, and text mode
        want = open(os.path.join(mnt, "files/size_4097"), "rb").read()
        with fs.open("/files/size_4097", buffering=1000) as b:
            assert isinstance(b, io.BufferedReader) and b.read(10) == want[:10]
            assert b.readinto(bytearray(10)) == 10 and b.tell() == 20
        for p in ("/files/size_4097", "/files/fragmented", "/names/newline\nname"):
            if not fs.exists(p):
                continue
            host = os.path.join(mnt, p.lstrip("/"))
            with fs.open(p) as f, open(host, "rb") as h:
                assert list(f) == list(h), p
            with fs.open(p) as f, open(host, "rb") as h:
                assert f.readline(7) == h.readline(7) and f.tell() == h.tell()
                assert f.readlines() == h.readlines()
        with fs.open("/files/size_4097", "r", encoding="latin-1") as t:
            assert t.read() == open(os.path.join(mnt, "files/size_4097"),
                                    encoding="latin-1").read()
        with pytest.raises(OSError) as ei:       # what open() says on a read-only mount
            fs.open("/files/size_1", "wb")
        assert ei.value.errno == errno.EROFS
        f = fs.open("/files/size_1")
        f.close()
        with pytest.raises(ValueError):
            f.read()


def test_errors_are_the_builtin_ones(mounted):
    img, mnt = mounted
    with fstool.open_image(img) as fs:
        cases = [(fs.stat, "/no/such"), (fs.stat, "/files/size_1/x"), (fs.open, "/files"),
                 (fs.scandir, "/files/size_1"), (fs.listdir, "/files/size_1"),
                 (fs.read, "/dirs")]
        for fn, p in cases:
            host = os.path.join(mnt, p.lstrip("/"))
            hostfn = {fs.stat: os.stat, fs.open: open, fs.scandir: os.scandir,
                      fs.listdir: os.scandir, fs.read: lambda x: open(x).read()}[fn]
            with pytest.raises(OSError) as theirs:
                hostfn(host)
            with pytest.raises(OSError) as ours:
                fn(p)
            assert type(theirs.value) in type(ours.value).__mro__, p
            assert ours.value.errno == theirs.value.errno, p
            assert ours.value.filename == p
        for p in ("/", "/files", "/files/size_1", "/symlinks/short", "/symlinks/dangling",
                  "/no/such", "/files/size_1/x"):
            host = os.path.join(mnt, p.lstrip("/"))
            assert fs.exists(p) == os.path.exists(host), p
            assert fs.isdir(p) == os.path.isdir(host), p
            assert fs.isfile(p) == os.path.isfile(host), p
            assert fs.islink(p) == os.path.islink(host), p


def test_api_on_a_protofile_image(proto_img):
    """The same API where no kernel mount is possible: a protofile image
    read against the host tree it came from."""
    src = proto_img.with_suffix(".tree")
    with fstool.open_image(proto_img) as fs:
        n = 0
        for root, _dirs, files in os.walk(src):
            for name in files:
                host = os.path.join(root, name)
                p = "/" + os.path.relpath(host, src)
                if os.path.islink(host):
                    assert fs.islink(p)
                    continue
                hs, st = os.stat(host), fs.stat(p)
                assert (st.st_size, stat.S_IMODE(st.st_mode)) == \
                    (hs.st_size, stat.S_IMODE(hs.st_mode)), p
                with fs.open(p) as f, open(host, "rb") as h:
                    assert f.read() == h.read()
                n += 1
        assert n > 5
        with pytest.raises(FileNotFoundError):
            fs.stat("/definitely/missing")
        assert [e.name for e in fs.scandir("/dev")] == \
            [e.name.decode() for e in fs.listdir("/dev")]


def test_open_image_warns_on_a_dirty_log_and_replays_in_memory(tmp_path):
    """A dirty log is never silent in the API either: open_image warns with
    a DirtyLogWarning (an FsToolWarning, filterable), and with
    replay_in_memory=True reads the image as it is after replay, the file
    unchanged."""
    import subprocess
    import sys
    import warnings
    if not images.loop_available():
        pytest.skip("a dirty log needs a kernel loop mount of XFS")
    img = tmp_path / "dirty.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", "512m"],
                   check=True)
    images.shut_down_dirty(img, late="q")
    before = img.read_bytes()
    with pytest.warns(fstool.DirtyLogWarning, match="BEFORE replay") as caught:
        with fstool.open_image(img) as fs:
            assert not fs.exists("/a/q")
    assert issubclass(caught[0].category, fstool.FsToolWarning)
    assert caught[0].message.path == str(img)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fstool.FsToolWarning)
        with pytest.raises(fstool.DirtyLogWarning):
            fstool.open_image(img)
        # replayed in memory: no warning, the file as it is after replay
        with fstool.open_image(img, replay_in_memory=True) as fs:
            assert fs.exists("/a/q") and fs.isfile("/a/q")
    assert img.read_bytes() == before
    # a clean image: no warning at all
    clean = tmp_path / "clean.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(clean), "--size", "64m"],
                   check=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fstool.open_image(clean).close()
