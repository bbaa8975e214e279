"""fstool mount as mount(8), df and a careful user see it: the image's path
as the source and fuse.fstool as the type (-o fsname=/subtype= honoured), a
busy or non-empty mountpoint refused, `fstool umount` returning once the
image is written and clean, -f saying what it serves, check warning about
a live read-write mount, remount refused with one clear line."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.fusemount import FuseMounted, env, fstool_image, fuse_skip_reason, is_mounted

REPO = Path(__file__).resolve().parent.parent


def fstool(*args, **kw):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, env=env(), timeout=120, **kw)


@pytest.fixture(autouse=True)
def need_fuse():
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")


def entries(mnt) -> list:
    """The /proc/self/mounts lines (source, type, options) at ``mnt``."""
    p = os.path.realpath(mnt)
    with open("/proc/self/mounts") as f:
        return [ln.split()[0:1] + ln.split()[2:4] for ln in f if ln.split()[1] == p]


@pytest.fixture
def mnt(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    yield d
    if is_mounted(d):
        subprocess.run(["fusermount3", "-u", "-z", str(d)], capture_output=True)


def test_source_is_the_image_and_type_fuse_fstool(tmp_path, mnt):
    img = fstool_image(tmp_path, "64m")
    r = fstool("mount", img, mnt)
    assert r.returncode == 0, r.stderr
    try:
        assert entries(mnt) == [[str(img), "fuse.fstool", entries(mnt)[0][2]]]
        df = subprocess.run(["df", str(mnt)], capture_output=True, text=True).stdout
        assert str(img) in df
        # a second mount onto it (of another image) is refused, nothing stacked
        (tmp_path / "other").mkdir()
        other = fstool_image(tmp_path / "other", "64m")
        again = fstool("mount", other, mnt)
        assert again.returncode == 1 and "already mounted" in again.stderr, again.stderr
        assert len(entries(mnt)) == 1
        # the same image: held by the mount (status 7, as every writer says)
        assert fstool("mount", img, mnt).returncode == 7
        # check and the readers say a live read-write mount serves the image
        c = fstool("check", img)
        assert "fstool mount serves it read-write" in c.stderr, c.stderr
        assert "fstool mount serves it" in fstool("ls", img).stderr
    finally:
        u = fstool("umount", mnt)
    assert u.returncode == 0, u.stderr
    assert not is_mounted(mnt)
    # named as asked
    r = fstool("mount", "-o", "fsname=disk-one,subtype=xfsimg", img, mnt)
    assert r.returncode == 0, r.stderr
    try:
        assert [e[:2] for e in entries(mnt)] == [["disk-one", "fuse.xfsimg"]]
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)


def test_non_empty_mountpoint_needs_nonempty(tmp_path, mnt):
    img = fstool_image(tmp_path, "64m")
    (mnt / "hidden").write_text("x")
    r = fstool("mount", img, mnt)
    assert r.returncode == 1 and "not empty" in r.stderr and "nonempty" in r.stderr
    assert not is_mounted(mnt)
    r = fstool("mount", "-o", "nonempty", img, mnt)
    assert r.returncode == 0, r.stderr
    assert fstool("umount", mnt).returncode == 0
    assert (mnt / "hidden").read_text() == "x"


def test_umount_returns_once_the_image_is_written_and_clean(tmp_path, mnt):
    img = fstool_image(tmp_path, "256m")
    assert fstool("mount", img, mnt).returncode == 0
    data = os.urandom(40 << 20)
    (mnt / "f").write_bytes(data)
    for i in range(200):
        (mnt / f"s{i}").write_text(str(i))
    u = fstool("umount", mnt)
    assert u.returncode == 0, u.stderr
    # the server let the image go: nobody holds its lock any more, at once
    with open(img, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    from fstool.fs.filesystem import Filesystem
    from fstool.fs.logstate import log_is_clean
    fs = Filesystem(str(img))
    try:
        assert log_is_clean(fs)[0]
        assert fs.read("/f") == data and fs.exists("/s199")
    finally:
        fs.close()
    # nothing mounted there any more: a clear line
    again = fstool("umount", mnt)
    assert again.returncode == 1 and "nothing is mounted" in again.stderr


def test_foreground_says_what_it_serves(tmp_path):
    img = fstool_image(tmp_path, "64m")
    m = FuseMounted(img)
    with m as where:
        pass
    lines = [ln for ln in m.stderr.splitlines() if ln.strip()]
    assert lines[:1] == [f"fstool: serving {img} at {where} (read-write); stop with "
                         f"'fstool umount {where}' or Ctrl-C"], m.stderr


def test_remount_is_refused_with_one_clear_line(tmp_path, mnt):
    """mount(8) -o remount on a fuse.fstool mount runs mount.fuse, which
    runs 'fstool SOURCE MOUNTPOINT -o remount,...' (the fstool on mount's
    PATH): that call is refused with one line and the mount left as it was.
    (mount(8) runs helpers with its own PATH, so the test makes mount.fuse's
    call itself.)"""
    img = fstool_image(tmp_path, "64m")
    assert fstool("mount", img, mnt).returncode == 0
    try:
        r = fstool(img, mnt, "-o", "rw,remount,ro,nosuid,nodev")
        assert r.returncode == 1
        assert r.stderr.strip().splitlines() == [
            f"fstool: error: {mnt}: an fstool mount cannot be remounted; unmount it (fstool "
            f"umount {mnt}) and mount it again (fstool mount [--ro] {img} {mnt})"]
        assert "rw" in entries(mnt)[0][2].split(",")
        assert (mnt / "x").write_text("y") == 1
    finally:
        assert fstool("umount", mnt).returncode == 0


def test_help_and_page_agree_on_default_permissions():
    h = fstool("mount", "--help").stdout
    assert "always on" not in h
    page = (REPO / "docs" / "commands" / "mount.md").read_text()
    assert "default_permissions is on unless root mounts without allow_other" in \
        " ".join(h.split())
    assert "On by default, except when root mounts without" in page
