"""Refuse to write images the kernel has mounted or another fstool has open.

The guard compares files, not paths: an image reached through a hard link,
a bind mount or a renamed path is still the file a loop device holds.  A
loop device's backing file is identified by the device and inode numbers
the kernel reports for it (LOOP_GET_STATUS64), falling back to the backing
file's path where the loop device cannot be opened; a block device by its
device number in the mount table and in the holders of other devices.
"""
from __future__ import annotations

import fcntl
import os
import struct

from ..errors import ImageBusy

__all__ = ["ImageBusy", "ImageLock", "refuse_if_mounted", "users_of"]

LOOP_GET_STATUS64 = 0x4C05
_LOOP_INFO64_SIZE = 232


def _mounted_devices() -> dict[int, str]:
    """Device number -> mount point, from /proc/self/mountinfo."""
    out: dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 5:
                    continue
                major, _, minor = parts[2].partition(":")
                try:
                    out.setdefault(os.makedev(int(major), int(minor)),
                                   parts[4].replace("\\040", " "))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def _loop_backing(name: str):
    """(st_dev, st_ino) of the file behind /dev/<name>, or None."""
    try:
        fd = os.open(f"/dev/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            buf = bytearray(_LOOP_INFO64_SIZE)
            fcntl.ioctl(fd, LOOP_GET_STATUS64, buf)
            dev, ino = struct.unpack_from("=QQ", buf, 0)
            return dev, ino
        except OSError:
            pass
        finally:
            os.close(fd)
    try:
        with open(f"/sys/block/{name}/loop/backing_file") as f:
            backing = f.read().strip()
        st = os.stat(backing)
        return st.st_dev, st.st_ino
    except OSError:
        return None


def _loop_rdev(name: str):
    try:
        with open(f"/sys/block/{name}/dev") as f:
            major, _, minor = f.read().strip().partition(":")
        return os.makedev(int(major), int(minor))
    except (OSError, ValueError):
        return None


def users_of(st: os.stat_result) -> list[str]:
    """What holds the image described by ``st``: mount points and loop
    devices, as readable phrases; empty when nothing does."""
    import stat as pystat
    mounts = _mounted_devices()
    found = []
    if pystat.S_ISBLK(st.st_mode):
        mnt = mounts.get(st.st_rdev)
        if mnt:
            found.append(f"is mounted at {mnt}")
        try:
            holders = os.listdir(f"/sys/dev/block/{os.major(st.st_rdev)}:"
                                 f"{os.minor(st.st_rdev)}/holders")
        except OSError:
            holders = []
        if holders:
            found.append(f"is held by {', '.join(sorted(holders))}")
        return found
    try:
        names = sorted(n for n in os.listdir("/sys/block") if n.startswith("loop"))
    except OSError:
        names = []
    for name in names:
        if _loop_backing(name) != (st.st_dev, st.st_ino):
            continue
        rdev = _loop_rdev(name)
        mnt = mounts.get(rdev) if rdev is not None else None
        if mnt:
            found.append(f"is mounted at {mnt} (through /dev/{name})")
        else:
            found.append(f"is attached to /dev/{name}")
    return found


def refuse_if_mounted(path) -> None:
    """Raise ImageBusy when the file or device at ``path`` is mounted or
    attached to a loop device."""
    try:
        st = os.stat(path)
    except OSError:
        return
    found = users_of(st)
    if found:
        what = "; ".join(found)
        hint = "unmount it first" if "mounted" in what else \
            "detach it (losetup -d) before writing"
        raise ImageBusy(f"{os.fspath(path)}: {what}; {hint}")


class ImageLock:
    """An exclusive flock on the image for the duration of a write."""

    def __init__(self, fd: int, path: str):
        self.fd = fd
        self.path = path

    def __enter__(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ImageBusy(f"{self.path}: another fstool is using this image") from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
