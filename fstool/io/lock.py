"""Refuse to write images the kernel has mounted or another fstool has open.

An image has one identity whatever name reaches it: the file that holds it,
as its (st_dev, st_ino), and the range of that file it spans.  A path, a
hard link, a symlink, a bind mount or a /proc link all stat to that file; a
loop device stands for its backing file and the range it maps (the
LOOP_GET_STATUS64 ioctl gives the backing file's device and inode numbers,
the offset and the size limit; /sys/block/loopN/loop gives the same where
the device cannot be opened).  A block device that is not a loop device is
its own identity, its device number.

Both guards key on it:

- ``refuse_if_mounted`` (the kernel's holds): the device itself mounted or
  held by a device stacked on it (device mapper, md), or any loop device
  over an overlapping range of the same file mounted, held or attached;
- ``ImageLock`` (a live fstool's hold): an exclusive flock on the file that
  holds the image, so that the lock taken through /dev/loopN and the one
  taken through the file's path, a hard link or a bind mount are one lock.
  A loop device whose backing file cannot be opened here (deleted, or in
  another mount namespace) is locked itself; a writable block device is
  also opened exclusively (O_EXCL), which the kernel refuses while another
  writer or a mount has it.

An external log (``--logdev``: io/logdev.py) is part of the filesystem: both
guards cover it as they cover the image, and the kernel's hold on it as a
mount's log device (``-o logdev=/dev/loopN``, shown in the mount's options)
counts as a mount.

Nothing here opens the image in a way that could block: the backing file
is opened with O_NONBLOCK and checked with fstat before it is locked.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat as pystat
import struct
from typing import NamedTuple

from ..errors import ImageBusy, ImageError
import re

from .device import Device
from .logdev import paired
from .partition import Window, locate

__all__ = ["ImageBusy", "ImageLock", "Identity", "identify", "refuse_if_mounted",
           "users_of"]

LOOP_GET_STATUS64 = 0x4C05
# struct loop_info64: lo_device, lo_inode, lo_rdevice, lo_offset, lo_sizelimit
# (u64 each), four u32, then the names and key: 232 bytes
_LOOP_INFO64 = struct.Struct("=QQQQQ")
_LOOP_INFO64_SIZE = 232
_OPEN_QUIET = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class Identity(NamedTuple):
    """What an image is, whatever name reached it."""
    key: tuple                   # ("file", st_dev, st_ino) or ("blockdev", st_rdev)
    start: int = 0               # the byte range of that file the image spans
    length: int = 0              # 0: to the end of the file
    loop: str | None = None      # the loop device (name in /dev) it was reached through
    backing: str | None = None   # that loop device's backing file, as the kernel names it

    def overlaps(self, other: "Identity") -> bool:
        if self.key != other.key:
            return False
        a_end = self.start + self.length if self.length else None
        b_end = other.start + other.length if other.length else None
        return (b_end is None or self.start < b_end) and (a_end is None or other.start < a_end)


def _decode_dev(huge: int) -> int:
    """The kernel's new_encode_dev form (loop_info64.lo_device) as st_dev."""
    major = (huge & 0xFFF00) >> 8
    minor = (huge & 0xFF) | ((huge >> 12) & 0xFFF00)
    return os.makedev(major, minor)


def _sysfs(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _devno(text: str | None) -> int | None:
    if not text:
        return None
    major, _, minor = text.partition(":")
    try:
        return os.makedev(int(major), int(minor))
    except ValueError:
        return None


def _loop_identity(name: str) -> Identity | None:
    """The backing file and range of loop device ``name`` ("loop3"), or None
    when it is not attached."""
    backing = _sysfs(f"/sys/block/{name}/loop/backing_file")
    try:
        fd = os.open(f"/dev/{name}", _OPEN_QUIET)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            buf = bytearray(_LOOP_INFO64_SIZE)
            fcntl.ioctl(fd, LOOP_GET_STATUS64, buf)
            dev, ino, _rdev, offset, sizelimit = _LOOP_INFO64.unpack_from(buf, 0)
            return Identity(("file", _decode_dev(dev), ino), offset, sizelimit, name, backing)
        except OSError:
            if backing is None:
                return None          # ENXIO: nothing attached
        finally:
            os.close(fd)
    if backing is None:
        return None
    try:
        st = os.stat(backing)
    except OSError:
        return None
    try:
        offset = int(_sysfs(f"/sys/block/{name}/loop/offset") or 0)
        sizelimit = int(_sysfs(f"/sys/block/{name}/loop/sizelimit") or 0)
    except ValueError:
        offset = sizelimit = 0
    return Identity(("file", st.st_dev, st.st_ino), offset, sizelimit, name, backing)


def _block_name(rdev: int) -> str | None:
    """The kernel's name of block device ``rdev`` ("loop3", "sda1")."""
    try:
        return os.path.basename(os.readlink(f"/sys/dev/block/{os.major(rdev)}:"
                                            f"{os.minor(rdev)}"))
    except OSError:
        return None


def identify(st: os.stat_result) -> Identity:
    """The identity of the image whose stat (or fstat) is ``st``."""
    if pystat.S_ISBLK(st.st_mode):
        name = _block_name(st.st_rdev)
        if name and os.path.isdir(f"/sys/block/{name}/loop"):
            ident = _loop_identity(name)
            if ident is not None:
                return ident
        return Identity(("blockdev", st.st_rdev), loop=name)
    return Identity(("file", st.st_dev, st.st_ino))


def _unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (\\040 for a space...) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_table() -> list[tuple[str, str, str, str]]:
    """(mount point, type, source, mount options) of every mount, from
    /proc/self/mountinfo."""
    return [line[:4] for line in _mount_lines()]


def mount_device(mountpoint: str) -> str | None:
    """The device number ("major:minor") of the last mount at
    ``mountpoint`` (an absolute path), from /proc/self/mountinfo (no call
    into the mounted filesystem); None when nothing is mounted there."""
    found = None
    for line in _mount_lines():
        if line[0] == mountpoint and line[4] is not None:
            found = f"{os.major(line[4])}:{os.minor(line[4])}"
    return found


FSTOOL_FUSE_TYPE = "fuse.fstool"


def fstool_mounts_of(path, writable_only: bool = False) -> list[str]:
    """Mount points of the fstool mounts serving the image at ``path``
    (their source is the image's path: fstool mount's fsname), read-write
    ones only with ``writable_only``."""
    found = []
    for mnt, fstype, source, opts in mount_table():
        if fstype != FSTOOL_FUSE_TYPE or (writable_only and "rw" not in opts.split(",")):
            continue
        try:
            if os.path.samefile(source, path):
                found.append(mnt)
        except OSError:
            continue
    return found


def _mounted_devices() -> dict[int, str]:
    """Device number -> what the kernel's mounts make of it ("is mounted at
    /mnt", "is the log device of the filesystem mounted at /mnt"), from
    /proc/self/mountinfo: the device a mount is of, and the devices its
    options name for its external log or realtime section (XFS's logdev=
    and rtdev=)."""
    out: dict[int, str] = {}
    for mnt, _type, _source, _opts, dev, extra in _mount_lines():
        if dev is not None:
            out.setdefault(dev, f"is mounted at {mnt}")
        for opt in extra.split(","):
            key, eq, name = opt.partition("=")
            if eq and key in ("logdev", "rtdev"):
                try:
                    st = os.stat(_unescape(name))
                except OSError:
                    continue
                if pystat.S_ISBLK(st.st_mode):
                    what = "log" if key == "logdev" else "realtime"
                    out.setdefault(st.st_rdev, f"is the {what} device of the filesystem "
                                               f"mounted at {mnt}")
    return out


def _mount_lines():
    """(mount point, type, source, mount options, device number, super
    options) of every line of /proc/self/mountinfo."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        head, sep, tail = line.partition(" - ")
        parts, rest = head.split(), tail.split()
        if sep and len(parts) >= 6 and len(rest) >= 2:
            yield (_unescape(parts[4]), rest[0], _unescape(rest[1]), parts[5],
                   _devno(parts[2]), rest[2] if len(rest) > 2 else "")


def _block_users(rdev: int, mounts: dict, window: tuple | None = None) -> list[str]:
    """What the kernel holds of block device ``rdev`` or its partitions:
    mount points and the devices stacked on them, as phrases.  With
    ``window`` (start, length: 0 to the end), in bytes of the device, only
    the partitions that overlap it count (the device itself always does)."""
    found = []
    base = f"/sys/dev/block/{os.major(rdev)}:{os.minor(rdev)}"
    devices = [(rdev, base)]
    try:
        for sub in sorted(os.listdir(base)):
            part = _devno(_sysfs(f"{base}/{sub}/dev")) \
                if os.path.exists(f"{base}/{sub}/partition") else None
            if part is not None and (window is None or
                                     _part_overlaps(f"{base}/{sub}", window)):
                devices.append((part, f"{base}/{sub}"))
    except OSError:
        pass
    for dev, where in devices:
        through = "" if dev == rdev else f" (through its partition {os.path.basename(where)})"
        mounted = mounts.get(dev)
        if mounted:
            found.append(f"{mounted}{through}")
        try:
            holders = sorted(os.listdir(f"{where}/holders"))
        except OSError:
            holders = []
        if holders:
            found.append(f"is held by {', '.join(holders)}{through}")
    return found


def _part_overlaps(sysdir: str, window: tuple) -> bool:
    """Whether the kernel's partition at ``sysdir`` overlaps ``window``
    (start, length; 0: to the end) in bytes of its disk."""
    try:
        p_start = int(_sysfs(f"{sysdir}/start") or "") * 512
        p_len = int(_sysfs(f"{sysdir}/size") or "") * 512
    except ValueError:
        return True
    start, length = window
    return (not length or p_start < start + length) and start < p_start + p_len


def _relative(me: Identity, other: Identity) -> tuple:
    """``me``'s byte range as offsets into the device ``other`` maps."""
    start = max(0, me.start - other.start)
    if not me.length:
        return start, 0
    return start, me.start + me.length - other.start - start


def users_of(st: os.stat_result, start: int = 0, length: int = 0) -> list[str]:
    """What the kernel holds of the image described by ``st``: mounts,
    devices stacked on it and loop devices over the same file (other than
    the one it is reached through), as readable phrases; empty when
    nothing does.  ``start`` and ``length`` (0: to the end) narrow the
    image to a window of it (a partition of a disk image): then only what
    holds bytes of that window counts."""
    mounts = _mounted_devices()
    me = identify(st)
    window = None
    if start or length:
        window = (start, length)
        me = me._replace(start=me.start + start, length=length or
                         (max(me.length - start, 1) if me.length else 0))
    found = _block_users(st.st_rdev, mounts, window) if pystat.S_ISBLK(st.st_mode) else []
    if me.key[0] != "file":
        return found
    try:
        names = sorted(n for n in os.listdir("/sys/block") if n.startswith("loop"))
    except OSError:
        names = []
    for name in names:
        if name == me.loop:
            continue
        other = _loop_identity(name)
        if other is None or not me.overlaps(other):
            continue
        rdev = _devno(_sysfs(f"/sys/block/{name}/dev"))
        uses = _block_users(rdev, mounts) if rdev is not None else []
        if window is not None and uses:
            # a disk attached for the partitions of it that are in use:
            # only those over the window count
            uses = _block_users(rdev, mounts, _relative(me, other))
            if not uses:
                continue
        if uses:
            found.extend(f"{u} (through /dev/{name})" for u in uses)
        else:
            found.append(f"is attached to /dev/{name}")
    return found


def refuse_if_mounted(path, logdev=True) -> None:
    """Raise ImageBusy when the file or device at ``path`` is mounted, held
    by another device or attached to a loop device, under any name; for a
    partition of a disk image (``disk.img@2``: io/partition.py), when
    anything holds bytes of that partition.  The same for its external log
    ``logdev`` (True: the one paired with ``path``, io/logdev.py; None:
    none), which a mount of this or another image may be using."""
    _refuse_held(locate(path), os.fspath(path))
    log = paired(path) if logdev is True else logdev
    if log:
        _refuse_held(_log_window(log), f"{os.fspath(log)} (the external log of "
                                        f"{os.fspath(path)})")


def _log_window(log) -> Window:
    """What an external log's name comes to: the whole file, or a
    partition named as images are (``disk@N``)."""
    log = os.fspath(log)
    return Window(log) if os.path.lexists(log) else locate(log)


def _refuse_held(where: Window, name: str) -> None:
    try:
        st = os.stat(where.file)
    except OSError:
        return
    found = users_of(st, where.start, where.length)
    if found:
        what = "; ".join(found)
        hint = "unmount it first" if "mounted" in what else \
            "detach it (losetup -d) before writing" if "attached" in what else \
            "release it first"
        raise ImageBusy(f"{name}: {what}; {hint}")


def _open_backing(ident: Identity) -> int | None:
    """A descriptor of the loop device's backing file, opened without
    blocking, when its name leads to the very file; else None."""
    if ident.backing is None or ident.key[0] != "file":
        return None
    try:
        fd = os.open(ident.backing, _OPEN_QUIET)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not pystat.S_ISREG(st.st_mode) or \
            ("file", st.st_dev, st.st_ino) != ident.key:
        os.close(fd)
        return None
    return fd


class ImageLock:
    """An exclusive flock, for the duration of a write, on the file that
    holds the image of ``dev`` (a Device): the image file itself, or the
    backing file of a loop device.  A partition of a disk image (a Device
    opened on a window of the file) takes a shared flock instead, which
    keeps out writers of the whole file, and an exclusive open file
    description lock (F_OFD_SETLK) on its byte range, which keeps out
    writers of the same partition and lets those of others be.

    ``logdev``, the filesystem's external log (True: the one paired with
    ``path``, io/logdev.py; None: none), is locked the same way, after the
    image: a writer holds both or neither."""

    def __init__(self, dev, path: str, logdev=True, *, what: str = "this image"):
        self.dev = dev
        self.path = path
        self.logdev = paired(path) if logdev is True else logdev
        self.what = what
        self._own = None           # a descriptor opened for the lock (backing file)
        self._fd = None            # the descriptor locked
        self._range = None         # the byte range locked (a partition), or None
        self._log = None           # (Device, ImageLock) of the external log

    def __enter__(self):
        self._lock_image()
        if self.logdev:
            try:
                self._lock_log()
            except BaseException:
                self._unlock_image()
                raise
        return self

    def _lock_log(self) -> None:
        try:
            dev = Device(self.logdev, whole=True)
        except ImageError:
            return               # no such log: what opens it says so
        mine = tuple(getattr(self.dev, k, None) for k in ("st_dev", "st_ino", "st_rdev",
                                                          "start"))
        if (dev.st_dev, dev.st_ino, dev.st_rdev, dev.start) == mine:
            dev.close()          # the image named as its own log: locked already
            return
        lock = ImageLock(dev, self.logdev, None,
                         what=f"this external log (of {self.path})")
        try:
            lock.__enter__()
        except BaseException:
            dev.close()
            raise
        self._log = (dev, lock)

    def _lock_image(self) -> None:
        fd = self.dev.fd
        own = None
        base = 0
        if self.dev.is_blockdev:
            ident = identify(os.fstat(fd))
            own = _open_backing(ident)
            if own is not None:
                fd = own
                base = ident.start
        start = getattr(self.dev, "start", 0)
        window = bool(start or getattr(self.dev, "partition", None) is not None)
        if window and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            # a write lock needs a descriptor open for writing: the same
            # file opened again (a reader that is about to write)
            again = _reopen_writable(fd)
            if again is not None:
                if own is not None:
                    os.close(own)
                own = fd = again
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if window else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            if window:
                try:
                    _range_lock(fd, fcntl.F_WRLCK, base + start, self.dev.size)
                except BlockingIOError:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    raise
        except BlockingIOError:
            if own is not None:
                os.close(own)
            raise ImageBusy(f"{self.path}: another fstool is using {self.what}") from None
        self._own, self._fd = own, fd
        self._range = (base + start, self.dev.size) if window else None

    def __exit__(self, *exc):
        log, self._log = self._log, None
        try:
            self._unlock_image()
        finally:
            if log is not None:
                dev, lock = log
                try:
                    lock.__exit__(None, None, None)
                finally:
                    dev.close()

    def _unlock_image(self) -> None:
        fd, own = self._fd, self._own
        self._fd = self._own = None
        if fd is None or own is None and self.dev.fd != fd:
            return               # closing the device let go of its lock
        try:
            if self._range is not None:
                _range_lock(fd, fcntl.F_UNLCK, *self._range)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            if own is not None:
                os.close(own)


def _reopen_writable(fd: int) -> int | None:
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC |
                       os.O_NOCTTY)
    except OSError:
        return None


# struct flock: l_type, l_whence (short), l_start, l_len (off_t), l_pid (int)
_FLOCK = struct.Struct("@hhqqi4x")
_F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)


def _range_lock(fd: int, kind: int, start: int, length: int) -> None:
    """An open file description lock (held by the open file, not the
    process, so that two opens in one process exclude each other as two
    processes do) of ``kind`` on [start, start+length) of ``fd``; raises
    BlockingIOError when another holds an overlapping one."""
    try:
        fcntl.fcntl(fd, _F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, start, length, 0))
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            raise BlockingIOError(e.errno, e.strerror) from None
        if kind != fcntl.F_UNLCK and e.errno not in (errno.EINVAL, errno.ENOLCK,
                                                      errno.EBADF):
            raise
