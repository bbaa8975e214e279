"""fstool mount: the command (daemon, foreground, refusals, --ro) and the
Volume under it, driven directly (no FUSE needed for those)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time

import pytest

from fixtures import images
from fixtures.fusemount import (FuseMounted, env, fstool_image, fuse_skip_reason, is_mounted,
                                leave_log_dirty)


def fstool(*args, **kw):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, env=env(), **kw)


def expect_errno(code: int, fn) -> None:
    """``fn()`` fails with errno ``code`` (an OSError or an fstool error)."""
    from fstool.errors import errno_of
    with pytest.raises(Exception) as e:
        fn()
    assert errno_of(e.value) == code, e.value


def need_fuse():
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")


def log_clean(img) -> bool:
    from fstool.fs.logstate import log_is_clean
    from fstool.fs.filesystem import Filesystem
    fs = Filesystem(str(img))
    try:
        return log_is_clean(fs)[0]
    finally:
        fs.close()


def dirty_image(tmp_path):
    """An image whose log holds checkpoints and no unmount record: a
    mount session that synced and died."""
    img = leave_log_dirty(fstool_image(tmp_path, "64m"))
    assert not log_clean(img)
    return img


# -- the Volume, without FUSE ---------------------------------------------------------

def test_volume_operations_and_errnos(tmp_path):
    from fstool.mount.volume import RENAME_EXCHANGE, RENAME_NOREPLACE, Volume
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        r = v.rootino
        d = v.mkdir(r, b"d", 0o755, 1000, 1000)
        assert (d.uid, d.gid, d.mode & 0o7777, v.getattr(r).nlink) == (1000, 1000, 0o755, 3)
        expect_errno(errno.EEXIST, lambda: v.mkdir(r, b"d", 0o755))
        expect_errno(errno.ENAMETOOLONG, lambda: v.lookup(r, b"x" * 256))
        fh, f = v.create(d.ino, b"f", 0o640)
        assert v.write(fh, 0, b"abc" * 1000) == 3000
        assert v.read(fh, 2990, 100) == b"cabcabcabc"
        v.release(fh)
        assert v.getattr(f.ino).size == 3000
        v.sync()                    # (delayed allocation: in the image from a sync on)
        assert v.fs.inode(f.ino).read() == b"abc" * 1000
        expect_errno(errno.ENOTEMPTY, lambda: v.rmdir(r, b"d"))
        v.link(f.ino, r, b"g")
        assert v.getattr(f.ino).nlink == 2
        expect_errno(errno.EEXIST, lambda: v.rename(r, b"g", d.ino, b"f", RENAME_NOREPLACE))
        v.symlink(r, b"s", b"target")
        v.rename(r, b"s", r, b"d", RENAME_EXCHANGE)
        assert v.readlink(v.lookup(r, b"d").ino) == b"target"
        assert v.getattr(v.lookup(r, b"s").ino).nlink == 2
        expect_errno(errno.EINVAL, lambda: v.rename(r, b"s", v.lookup(r, b"s").ino, b"inside"))
        v.setxattr(f.ino, b"user.k", b"v")
        assert v.listxattr(f.ino) == [b"user.k"]
        expect_errno(errno.EOPNOTSUPP, lambda: v.setxattr(f.ino, b"nonsense.k", b"v"))
        # an open file that loses its last name keeps its content until closed
        fh = v.open(f.ino, os.O_RDWR)
        v.unlink(r, b"g")
        v.unlink(v.lookup(r, b"s").ino, b"f")
        assert v.getattr(f.ino).nlink == 0
        assert v.read(fh, 0, 3) == b"abc"
        v.release(fh)
        expect_errno(errno.ENOENT, lambda: v.getattr(f.ino))
    finally:
        v.close()
    assert log_clean(img)
    r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True)
    if images.xfsprogs_available():
        assert r.returncode == 0, r.stdout


def test_access_follows_the_kernels_rules(tmp_path):
    """Volume.access, asked by the kernel when it does not check
    permissions itself: root reads and writes anything, searches any
    directory and executes what has an execute bit; others go by the
    owner, group or other bits.  (The root cases are compared with the
    kernel's XFS by the mount's POSIX scenario.)"""
    from fstool.mount.volume import Volume
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    R, W, X = os.R_OK, os.W_OK, os.X_OK
    try:
        r = v.rootino
        fh, f = v.create(r, b"f", 0o640, 0, 1000, 2000)
        v.release(fh)
        fh, e = v.create(r, b"e", 0o001, 0, 1000, 2000)
        v.release(fh)
        shut = v.mkdir(r, b"shut", 0o000, 1000, 2000)
        for ino, uid, gid, mask, ok in [
                (f.ino, 0, 0, R | W, True), (f.ino, 0, 0, X, False), (f.ino, 0, 0, 0, True),
                (e.ino, 0, 0, X, True), (shut.ino, 0, 0, R | W | X, True),
                (f.ino, 1000, 1, R | W, True), (f.ino, 1000, 1, X, False),
                (f.ino, 5, 2000, R, True), (f.ino, 5, 2000, W, False),
                (f.ino, 5, 6, R, False), (f.ino, 5, 6, 0, True),
                (e.ino, 5, 6, X, True), (e.ino, 1000, 6, X, False),
                (shut.ino, 1000, 2000, X, False)]:
            if ok:
                v.access(ino, mask, uid, gid)
            else:
                expect_errno(errno.EACCES, lambda: v.access(ino, mask, uid, gid))
    finally:
        v.close()


def test_default_permissions_unless_only_root_can_enter():
    """The kernel checks permissions except on a root mount without
    allow_other (only processes all of whose ids are 0 get in)."""
    from fstool.mount.run import fuse_options
    assert "default_permissions" not in fuse_options(False, [], euid=0)
    assert "default_permissions" in fuse_options(False, ["allow_other"], euid=0)
    assert "default_permissions" in fuse_options(False, ["default_permissions"], euid=0)
    assert "default_permissions" in fuse_options(True, [], euid=1000)


def test_last_close_of_empty_files(tmp_path):
    """The last close of an empty file costs no transaction, unless the
    file lost its last name while open (then it is freed) or holds
    preallocation (then that goes back)."""
    from fstool.mount.volume import Volume
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        r = v.rootino
        fh, kept = v.create(r, b"kept", 0o644)
        v.release(fh)
        assert v.getattr(kept.ino).nlink == 1
        fh, gone = v.create(r, b"gone", 0o644)
        v.unlink(r, b"gone")
        assert v.getattr(gone.ino).nlink == 0       # cached as the kernel's fstat sees it
        v.release(fh)
        expect_errno(errno.ENOENT, lambda: v.getattr(gone.ino))
        fh, grown = v.create(r, b"grown", 0o644)
        # (a write leaving a gap is not delayed: its blocks are allocated at
        # once, with a hold past them)
        v.write(fh, 8192, b"x")
        assert v.fileio.held.get(grown.ino) is not None
        v.release(fh)
        assert v.fileio.held.get(grown.ino) is None
    finally:
        v.close()
    if images.xfsprogs_available():
        r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True)
        assert r.returncode == 0, r.stdout


def test_a_directory_removed_while_open_is_freed_at_its_last_close(tmp_path):
    """rmdir of a directory something holds open (opendir) keeps the inode
    on the AGI unlinked list until the last close, which frees it, as for
    files (it used to stay there: xfs_repair -n reported it)."""
    from fstool.mount.volume import Volume
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        r = v.rootino
        d = v.mkdir(r, b"d", 0o755)
        fh = v.opendir(d.ino)
        v.rmdir(r, b"d")
        assert v.getattr(d.ino).nlink == 0
        v.release(fh)
        expect_errno(errno.ENOENT, lambda: v.getattr(d.ino))
    finally:
        v.close()
    if images.xfsprogs_available():
        r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout[-2000:]


def test_create_after_a_negative_lookup(tmp_path):
    """A create skips its own lookup of a name the kernel has just found
    missing, but only while nothing changed since: a name made in between
    is still refused with EEXIST, in shortform and block directories."""
    from fstool.mount.volume import Volume
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        r = v.rootino
        for n in range(40):                 # past the shortform directory
            name = b"f%02d" % n
            assert v.find(r, name) is None
            fh, _a = v.create(r, name, 0o644)
            v.release(fh)
            assert v.find(r, b"x%02d" % n) is None
            v.mkdir(r, b"x%02d" % n, 0o755)  # made after the negative lookup
            expect_errno(errno.EEXIST, lambda: v.create(r, b"x%02d" % n, 0o644))
            assert v.find(r, b"y%02d" % n) is None
            v.link(v.find(r, name).ino, r, b"y%02d" % n)
            expect_errno(errno.EEXIST, lambda: v.mknod(r, b"y%02d" % n, 0o644))
        assert len(v.entries(r)) == 2 + 3 * 40
    finally:
        v.close()
    if images.xfsprogs_available():
        r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True)
        assert r.returncode == 0, r.stdout


def test_readdir_survives_removals_while_listing(tmp_path):
    from fstool.mount.volume import Volume
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        d = v.mkdir(v.rootino, b"d", 0o755)
        for i in range(200):
            v.release(v.create(d.ino, b"%d" % i, 0o644)[0])
        fh = v.opendir(d.ino)
        seen = []
        cookie = 0
        while True:
            batch = list(v.readdir(fh, cookie))[:7]      # small reads, as getdents does
            if not batch:
                break
            for name, _ino, cookie in batch:
                seen.append(name)
                if name not in (b".", b".."):
                    v.unlink(d.ino, name)
        v.release(fh)
        assert sorted(seen) == sorted([b".", b".."] + [b"%d" % i for i in range(200)])
        assert [n for n, _ in v.entries(d.ino)] == [b".", b".."]
    finally:
        v.close()


def test_inode_cache_follows_the_kernels_references(tmp_path):
    from fstool.mount.volume import Volume
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    try:
        v.icache.max_attrs = 64
        d = v.mkdir(v.rootino, b"d", 0o755)
        inos = [v.mknod(d.ino, b"%d" % i, 0o10644).ino for i in range(300)]
        assert len(v.icache.attrs) <= 64
        for i in range(300):
            v.lookup(d.ino, b"%d" % i)
        assert v.icache.refs_of(inos[0]) == 2           # mknod's entry and the lookup
        assert len(v.icache) == 301
        for ino in inos[:-1]:
            v.forget(ino, 1)
        assert len(v.icache) == 301 and v.icache.refs_of(inos[5]) == 1
        for ino in inos:
            v.forget(ino, 2)
        assert list(v.icache.inodes()) == [d.ino] and len(v.icache) == 1
        assert len(v.icache.chunks) == 1
    finally:
        v.close()


def test_read_only_volume_refuses_changes(tmp_path):
    from fstool.mount.volume import Volume
    img = fstool_image(tmp_path, "64m")
    before = img.read_bytes()[:1 << 20]
    v = Volume(img, readonly=True)
    try:
        assert [n for n, _ in v.entries(v.rootino)] == [b".", b".."]
        expect_errno(errno.EROFS, lambda: v.mkdir(v.rootino, b"x", 0o755))
    finally:
        v.close()
    assert img.read_bytes()[:1 << 20] == before


def test_dirty_log_is_refused(tmp_path):
    from fstool.errors import WriteRefused
    from fstool.mount.volume import Volume
    img = dirty_image(tmp_path)
    for ro in (False, True):
        with pytest.raises(WriteRefused, match="fstool log replay"):
            Volume(img, readonly=ro)


# -- the command ---------------------------------------------------------------------------

def test_mount_returns_once_live_and_unmount_leaves_a_clean_log(tmp_path):
    need_fuse()
    img = fstool_image(tmp_path, "64m")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = fstool("mount", img, mnt, timeout=60)
    assert r.returncode == 0, r.stderr
    try:
        assert is_mounted(mnt)
        (mnt / "hello").write_text("world")
        os.mkdir(mnt / "dir")
        # a second mount of the same image is refused while the first runs
        other = tmp_path / "other"
        other.mkdir()
        r2 = fstool("mount", img, other, timeout=60)
        assert r2.returncode == 7 and "another fstool" in r2.stderr, r2.stderr
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
    # the daemon writes everything back and lets go of the image
    deadline = time.monotonic() + 30
    while True:
        import fcntl
        with open(img, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the mount process did not finish"
                time.sleep(0.1)
    assert log_clean(img)
    assert fstool("cat", img, "/hello").stdout == "world"
    assert sorted(fstool("ls", img, "/").stdout.split()) == ["dir", "hello"]


def test_mount_refuses_a_dirty_log_with_exit_7(tmp_path):
    need_fuse()
    img = dirty_image(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for args in ((), ("--ro",), ("-f",)):
        r = fstool("mount", *args, img, mnt, timeout=60)
        assert r.returncode == 7, r.stderr
        assert "fstool log replay" in r.stderr
        assert r.stderr.count("\n") == 1
        assert not is_mounted(mnt)


def test_mount_refuses_a_kernel_mounted_image(tmp_path):
    need_fuse()
    if not images.loop_available():
        pytest.skip("needs root and a kernel loop mount of XFS")
    img = tmp_path / "k.img"
    subprocess.run(["truncate", "-s", "320m", str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", str(img)], check=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with images.Mounted(img):
        r = fstool("mount", img, mnt, timeout=60)
    assert r.returncode == 7 and "mounted" in r.stderr, r.stderr


def test_names_are_resolved_as_the_caller_sees_them(tmp_path):
    """What the mount process (in /, with a /proc/self of its own) is given:
    the file the caller's name leads to."""
    (tmp_path / "W.img").write_bytes(b"")
    code = ("import sys\nfrom fstool.mount.run import resolved\n"
            "print('\\n'.join(resolved(a) for a in sys.argv[1:]))")
    fd = os.open(tmp_path / "W.img", os.O_RDONLY)
    try:
        r = subprocess.run([sys.executable, "-c", code, "/proc/self/cwd/W.img", "W.img",
                            f"/proc/{os.getpid()}/fd/{fd}", "/proc/self/cwd/nothing"],
                           cwd=tmp_path, capture_output=True, text=True, env=env(), check=True)
    finally:
        os.close(fd)
    real = os.path.realpath(tmp_path)
    assert r.stdout.split() == [f"{real}/W.img"] * 3 + ["/proc/self/cwd/nothing"]


def test_mount_of_a_proc_self_name(tmp_path):
    need_fuse()
    img = fstool_image(tmp_path, "64m")
    os.rename(img, tmp_path / "W.img")
    (tmp_path / "m2").mkdir()
    r = subprocess.run([sys.executable, "-m", "fstool", "mount", "/proc/self/cwd/W.img",
                        "/proc/self/cwd/m2"], cwd=tmp_path, capture_output=True, text=True,
                       env=env(), timeout=60)
    try:
        assert r.returncode == 0, r.stderr
        assert is_mounted(tmp_path / "m2")
    finally:
        subprocess.run(["fusermount3", "-u", str(tmp_path / "m2")], capture_output=True)


def test_mount_arguments(tmp_path):
    img = fstool_image(tmp_path, "64m")
    r = fstool("mount", img, tmp_path / "missing")
    assert r.returncode == 2 and "missing" in r.stderr
    r = fstool("mount", tmp_path / "nope.img", tmp_path)
    assert r.returncode != 0 and r.stderr.count("\n") == 1


def test_read_only_mount(tmp_path):
    need_fuse()
    img = fstool_image(tmp_path, "64m")
    m = FuseMounted(img, "--ro")
    with m as mnt:
        assert os.listdir(mnt) == []
        expect_errno(errno.EROFS, lambda: os.mkdir(mnt / "x"))
    assert m.returncode == 0


# -- the two request loops --------------------------------------------------------------------

def need_loop(loop: str) -> None:
    need_fuse()
    from fstool.mount.run import fuse_available
    why = fuse_available(loop)
    if why:
        pytest.skip(f"the {loop} request loop: {why}")


def mapped(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


@pytest.mark.parametrize("loop", ["native", "pyfuse3"])
def test_both_request_loops(tmp_path, loop):
    """The same operations through either loop (the native one is the
    default where it is built); SIGTERM unmounts and writes everything back."""
    need_loop(loop)
    import signal
    img = fstool_image(tmp_path, "64m")
    m = FuseMounted(img, *(("--fuse-loop", loop) if loop == "pyfuse3" else ()))
    with m as mnt:
        maps = mapped(m.proc.pid)
        assert ("fuseloop" in maps) == (loop == "native")
        assert ("pyfuse3" in maps) == (loop == "pyfuse3")
        os.mkdir(mnt / "d", 0o750)
        (mnt / "d" / "f").write_bytes(b"x" * 70000)
        with open(mnt / "d" / "f", "r+b") as f:
            f.seek(100000)
            f.write(b"tail")
        assert (mnt / "d" / "f").read_bytes() == b"x" * 70000 + bytes(30000) + b"tail"
        os.truncate(mnt / "d" / "f", 5)
        os.utime(mnt / "d" / "f", ns=(1_000_000_123, 2_000_000_456))
        st = os.stat(mnt / "d" / "f")
        assert (st.st_size, st.st_mtime_ns) == (5, 2_000_000_456)
        os.chmod(mnt / "d" / "f", 0o600)
        assert os.stat(mnt / "d" / "f").st_mode & 0o7777 == 0o600
        os.symlink("f", mnt / "d" / "l")
        assert os.readlink(mnt / "d" / "l") == "f"
        os.link(mnt / "d" / "f", mnt / "h")
        assert os.stat(mnt / "h").st_nlink == 2
        os.mknod(mnt / "fifo", 0o644 | 0o010000)
        os.setxattr(mnt / "h", "user.k", b"v1")
        expect_errno(errno.EEXIST, lambda: os.setxattr(mnt / "h", "user.k", b"v",
                                                       os.XATTR_CREATE))
        expect_errno(errno.ENODATA, lambda: os.setxattr(mnt / "h", "user.n", b"v",
                                                        os.XATTR_REPLACE))
        assert os.getxattr(mnt / "h", "user.k") == b"v1"
        assert os.listxattr(mnt / "h") == ["user.k"]
        os.removexattr(mnt / "h", "user.k")
        assert os.listxattr(mnt / "h") == []
        os.rename(mnt / "h", mnt / "d" / "g")
        expect_errno(errno.ENOTEMPTY, lambda: os.rmdir(mnt / "d"))
        expect_errno(errno.ENOENT, lambda: os.stat(mnt / "missing"))
        assert sorted(os.listdir(mnt / "d")) == ["f", "g", "l"]
        assert sorted(os.listdir(mnt)) == ["d", "fifo"]
        os.unlink(mnt / "d" / "g")
        assert os.statvfs(mnt).f_namemax == 255
        m.proc.send_signal(signal.SIGTERM)
        m.proc.wait(60)
        assert not is_mounted(mnt)
    assert m.returncode == 0, m.stderr
    assert log_clean(img)
    assert fstool("cat", img, "/d/f").stdout == "xxxxx"
    assert sorted(fstool("ls", img, "/d").stdout.split()) == ["f", "l"]


def test_native_loop_writes_a_checkpoint_on_its_timer(tmp_path):
    """Changes not fsync'd reach the log within the checkpoint period:
    after a kill -9, log replay finds them."""
    need_loop("native")
    img = fstool_image(tmp_path, "64m")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = ("import sys\n"
            "from fstool.mount.run import serve\n"
            "serve(sys.argv[1], sys.argv[2], checkpoint_seconds=0.3, loop='native')\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(img), str(mnt)], env=env(),
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(mnt):
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (mnt / "kept").write_text("checkpointed")
        # ten checkpoint periods: room for a mount process that tests
        # running beside it keep off the CPU for a while
        time.sleep(3.0)
    finally:
        p.kill()
        p.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    assert not log_clean(img)
    r = fstool("log", "replay", img)
    assert r.returncode == 0, r.stderr
    assert fstool("cat", img, "/kept").stdout == "checkpointed"


def test_bad_fuse_option_is_one_line(tmp_path):
    need_loop("native")
    img = fstool_image(tmp_path, "64m")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for args in ((), ("-f",)):
        r = fstool("mount", *args, "-o", "no_such_option", img, mnt, timeout=60)
        assert r.returncode != 0
        assert r.stderr.count("\n") == 1 and "no_such_option" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert not is_mounted(mnt)


_SERIAL_SERVER = r'''
import json, os, sys, threading, time
from fstool.mount.ops import MountOps
from fstool.mount.run import fuse_options
from fstool.mount.volume import Volume
from fstool_native.fuseloop import Session

img, mnt, mode = sys.argv[1:4]
state = {"in": 0, "most": 0, "calls": 0, "threads": set(), "later": 0, "pending": 0}


class Ops(MountOps):
    # work a create leaves for after its answer is done before the next
    # request is taken
    def run_later(self):
        state["later"] += len(self.later)
        super().run_later()

    def lookup(self, parent, name):
        state["pending"] += bool(self.later)
        return super().lookup(parent, name)

    def create(self, *args):
        state["pending"] += bool(self.later)
        return super().create(*args)

    def listxattr(self, node):
        state["in"] += 1
        state["most"] = max(state["most"], state["in"])
        state["calls"] += 1
        state["threads"].add(threading.get_ident())
        time.sleep(0.002)          # the interpreter let go: another thread could run
        state["in"] -= 1
        if mode == "fail" and state["calls"] == 5:
            raise RuntimeError("a handler's own bug")
        return super().listxattr(node)


vol = Volume(img)
s = Session(Ops(vol), fuse_options(False, []))
s.mount(mnt)
print("ready", flush=True)
ticks = []
try:
    s.run(0.05, lambda: ticks.append(state["in"]))
    outcome = "ended"
except RuntimeError as e:
    outcome = f"raised: {e}"
finally:
    s.close()
    vol.close()
print(json.dumps({"most": state["most"], "calls": state["calls"], "outcome": outcome,
                  "later": state["later"], "pending": state["pending"],
                  "threads": len(state["threads"]), "ticks": len(ticks),
                  "tick_inside": max(ticks, default=0)}))
'''


@pytest.mark.parametrize("mode", ["serial", "fail"])
def test_native_loop_answers_one_request_at_a_time(tmp_path, mode):
    """The native loop's two workers read requests side by side but answer
    them one at a time (a handler that lets the interpreter go is never
    entered twice, nor is the timer's tick run inside one), with both
    workers answering; work a create leaves for after its answer is done
    before the next request; a handler's unexpected exception ends the loop
    and is raised from run(), the request getting EIO."""
    need_loop("native")
    import json
    img = fstool_image(tmp_path, "64m")
    (tmp_path / "f").touch()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _SERIAL_SERVER, str(img), str(mnt), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env())
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        os.close(os.open(mnt / "f", os.O_CREAT | os.O_WRONLY, 0o644))
        errors = []

        def client():
            for _ in range(40):
                try:
                    os.listxattr(mnt / "f")
                except OSError as e:
                    errors.append(e.errno)
        clients = [threading.Thread(target=client) for _ in range(4)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(60)
        if mode == "serial":
            for i in range(30):
                os.close(os.open(mnt / f"c{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            assert sorted(os.listdir(mnt)) == sorted(["f"] + [f"c{i}" for i in range(30)])
            subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
    got = json.loads(out.strip().splitlines()[-1])
    assert got["most"] == 1 and got["tick_inside"] == 0, got
    if mode == "serial":
        assert errors == [] and got["calls"] == 160 and got["outcome"] == "ended", (got, err)
        assert got["threads"] == 2 and got["ticks"] >= 1, got
        # every create (the first made "f") named its file after the
        # answer, and no request came in before that was done
        assert got["later"] == 31 and got["pending"] == 0, got
    else:
        assert got["outcome"] == "raised: a handler's own bug", (got, err)
        assert errno.EIO in errors, errors


def test_removals_racing_the_closes_before_them_leave_nothing_behind(tmp_path):
    """Directories and files opened, closed and removed, many times over:
    a close queues its RELEASE in the background (not waited for) ahead of
    the removal, and the loop's two workers may answer the two in either
    order, as with libfuse's multi-threaded loop.  Either way the inode is
    freed (at the removal, or at the last close when the removal came
    first); before directories were freed at their last close, pjdfstest
    left such directories on the AGI unlinked lists."""
    need_loop("native")
    img = fstool_image(tmp_path, "64m")
    with FuseMounted(img) as mnt:
        for i in range(300):
            d = mnt / f"d{i}"
            os.mkdir(d)
            os.close(os.open(d, os.O_RDONLY | os.O_DIRECTORY))
            os.rmdir(d)
            f = mnt / f"f{i}"
            fd = os.open(f, os.O_CREAT | os.O_RDWR, 0o644)
            os.write(fd, b"x" * (i * 37 % 9000))
            os.close(fd)
            os.unlink(f)
        assert os.listdir(mnt) == []
    assert log_clean(img)
    if images.xfsprogs_available():
        r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout[-2000:]
    if images.loop_available():
        with images.Mounted(img) as kmnt:
            assert os.listdir(kmnt) == []
            st = os.statvfs(kmnt)
            # every inode the churn made was freed: the root's chunk alone
            assert st.f_files - st.f_ffree <= 64, (st.f_files, st.f_ffree)
