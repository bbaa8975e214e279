"""What writes, truncates and chowns take away through the mount, now that
the native loop negotiates FUSE_HANDLE_KILLPRIV_V2 (the kernel leaves it
to the server and stops asking for security.capability before every
write): set-user-ID and set-group-ID (where the group may execute) when a
caller without CAP_FSETID writes or truncates, on every chown of what is
not a directory, and a file's capabilities on every write, truncate and
chown; the same modes and xattrs as the kernel's XFS in one scenario.
And the negotiation itself: 50 writes to a file with an xattr ask the
server for security.capability once, not 50 times."""
from __future__ import annotations

import os
import struct
import subprocess

import pytest

from fixtures import images
from fixtures.fusemount import FuseMounted, fstool_image, fuse_skip_reason, run_native_session

NOBODY = 65534
# a valid VFS_CAP_REVISION_2 value: cap_net_raw (13) permitted and effective
CAP_VALUE = struct.pack("<IIIII", 0x02000000 | 1, 1 << 13, 0, 0, 0)
CAP = "security.capability"


def _file(path, mode: int) -> None:
    with open(path, "wb") as f:
        f.write(b"data")
    os.chmod(path, mode)


def _write(path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"more")
    finally:
        os.close(fd)


def _caps(path) -> bool:
    try:
        os.getxattr(path, CAP)
        return True
    except OSError:
        return False


def scenario(root) -> dict:
    """Modes and capabilities after each change, as stat shows them."""
    os.chmod(root, 0o777)
    got = {}
    p = lambda n: os.path.join(root, n)   # noqa: E731
    _file(p("w_suid"), 0o6777)
    _as_user(lambda: _write(p("w_suid")))
    _file(p("w_sgid_nox"), 0o2767)
    _as_user(lambda: _write(p("w_sgid_nox")))
    _file(p("w_root"), 0o6777)
    _write(p("w_root"))
    _file(p("trunc"), 0o6777)
    _as_user(lambda: os.truncate(p("trunc"), 1))
    _file(p("o_trunc"), 0o6777)
    _as_user(lambda: os.close(os.open(p("o_trunc"), os.O_WRONLY | os.O_TRUNC)))
    _file(p("trunc_root"), 0o6777)
    os.truncate(p("trunc_root"), 1)
    _file(p("chown"), 0o6755)
    os.chown(p("chown"), 1, 1)
    os.mkfifo(p("fifo"))
    os.chmod(p("fifo"), 0o6755)
    os.chown(p("fifo"), 1, 1)
    os.mkdir(p("dir"))
    os.chmod(p("dir"), 0o6755)
    os.chown(p("dir"), 1, 1)
    for name in ("w_suid", "w_sgid_nox", "w_root", "trunc", "o_trunc", "trunc_root", "chown",
                 "fifo", "dir"):
        got[name] = oct(os.stat(p(name)).st_mode & 0o7777)
    for name, change in (("cap_write", _write), ("cap_trunc", lambda q: os.truncate(q, 1)),
                         ("cap_chown", lambda q: os.chown(q, 2, 2)),
                         ("cap_kept", lambda q: os.utime(q, ns=(1, 1)))):
        _file(p(name), 0o755)
        os.setxattr(p(name), CAP, CAP_VALUE)
        change(p(name))
        got[name] = _caps(p(name))
    return got


def _against_kernel(tmp_path, scenario, needs: str):
    """``scenario`` run on a kernel XFS mount (the reference), then on an
    fstool mount (``-o allow_other``): the two must give the same answers;
    returns the reference's answers and the fstool image."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    if os.geteuid() != 0:
        pytest.skip(f"needs root (files of another user, {needs})")
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS (the reference)")
    ref = tmp_path / "kernel.img"
    subprocess.run(["truncate", "-s", "512m", str(ref)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(ref)], check=True)
    with images.Mounted(ref) as k:
        want = scenario(k)
    img = fstool_image(tmp_path, "64m")
    m = FuseMounted(img, "-o", "allow_other")
    with m as mnt:
        got = scenario(mnt)
    assert m.returncode == 0, m.stderr
    assert got == want
    return want, img


def test_writes_truncates_and_chowns_take_away_what_the_kernels_xfs_does(tmp_path):
    want, img = _against_kernel(tmp_path, scenario, "capabilities")
    assert want["w_suid"] == "0o777" and want["cap_write"] is False   # the reference's own
    with images.Mounted(img) as k:      # what the image holds
        assert oct(os.stat(k / "w_suid").st_mode & 0o7777) == want["w_suid"]
        assert not _caps(k / "cap_write")


def test_writes_ask_for_security_capability_once(tmp_path):
    """The native loop in this process over a counting handler: with
    FUSE_HANDLE_KILLPRIV_V2 negotiated (kernels from 5.11 offer it), 50
    writes to a file with an xattr (its getxattr goes to the handler) call
    the handler's getxattr at most once (the kernel marks the file as
    having nothing to take away after the first); without it, 50 times."""
    release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    if release < (5, 11):
        pytest.skip("the kernel offers no FUSE_HANDLE_KILLPRIV_V2 before Linux 5.11")
    asked = []
    seen = {}

    def wrap(ops):
        plain = ops.getxattr

        def getxattr(node, name):
            asked.append(name)
            return plain(node, name)
        ops.getxattr = getxattr

    def work(session, mnt):
        fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.setxattr(fd, "user.k", b"v")
            asked.clear()
            for i in range(50):
                os.pwrite(fd, b"x" * 4096, i * 4096)
        finally:
            os.close(fd)
        seen["v2"] = session.killpriv_v2
        seen["asked"] = list(asked)

    run_native_session(tmp_path, wrap, work)
    assert seen.get("v2") is True, "FUSE_HANDLE_KILLPRIV_V2 not negotiated"
    assert len(seen["asked"]) <= 1, seen["asked"]


def _as_user(fn, groups=()) -> None:
    """``fn()`` in a child process running as user and group 65534, with
    ``groups`` as its supplementary groups."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups(list(groups))
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            fn()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _fallocate(path) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 65536)
    finally:
        os.close(fd)


def _copy_into(src):
    def copy(path) -> None:
        fi = os.open(src, os.O_RDONLY)
        fo = os.open(path, os.O_WRONLY)
        try:
            assert os.copy_file_range(fi, fo, 4, 0, 0) == 4
        finally:
            os.close(fi)
            os.close(fo)
    return copy


def group_scenario(root) -> dict:
    """The modes after a chown by a caller in and not in the file's group
    (by its supplementary groups, which FUSE requests do not carry), and
    after fallocate, copy_file_range and write by root and by another user
    (in the file's group by a supplementary group or not)."""
    os.chmod(root, 0o777)
    p = lambda n: os.path.join(root, n)   # noqa: E731
    got = {}
    for name, groups in (("chown_out", ()), ("chown_in", (5,))):
        _file(p(name), 0o644)
        os.chown(p(name), NOBODY, 5)
        os.chmod(p(name), 0o6744)
        _as_user(lambda q=p(name): os.chown(q, NOBODY, -1), groups)
    _file(p("chown_root"), 0o644)
    os.chown(p("chown_root"), NOBODY, 5)
    os.chmod(p("chown_root"), 0o6744)
    os.chown(p("chown_root"), 0, -1)
    _file(p("src"), 0o644)
    for what, change in (("falloc", _fallocate), ("copy", _copy_into(p("src"))),
                         ("write", _write)):
        for name, mode, user, groups in (("x", 0o6777, True, ()), ("out", 0o2767, True, ()),
                                         ("in", 0o2767, True, (0,)), ("root", 0o6777, False, ())):
            q = p(f"{what}_{name}")
            _file(q, mode)
            if user:
                _as_user(lambda q=q: change(q), groups)
            else:
                change(q)
    for name in sorted(os.listdir(root)):
        got[name] = oct(os.stat(p(name)).st_mode & 0o7777)
    return got


def test_chown_fallocate_and_copy_file_range_take_away_what_the_kernels_xfs_does(tmp_path):
    """set-group-ID goes on a chown by a caller not in the file's group
    (its supplementary groups read from /proc/<pid>/status); fallocate and
    copy_file_range by a caller but root take set-user-ID and set-group-ID
    away, as the kernel's XFS does (file_modified)."""
    want, _img = _against_kernel(tmp_path, group_scenario, "other callers' groups")
    # the reference's own answers, where the two rules show
    assert (want["chown_out"], want["chown_in"]) == ("0o744", "0o2744")
    assert (want["falloc_x"], want["falloc_root"]) == ("0o777", "0o6777")
