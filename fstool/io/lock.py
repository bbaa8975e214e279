"""Refuse to write images the kernel has mounted or another fstool has open."""
from __future__ import annotations

import fcntl
import os

from ..errors import FsToolError


class ImageBusy(FsToolError):
    pass


def _backing_files() -> dict[str, str]:
    """Loop device -> the file behind it."""
    out = {}
    base = "/sys/block"
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        if not name.startswith("loop"):
            continue
        try:
            with open(f"{base}/{name}/loop/backing_file") as f:
                out[f"/dev/{name}"] = f.read().strip()
        except OSError:
            continue
    return out


def refuse_if_mounted(path: str) -> None:
    """Raise ImageBusy when ``path`` (a device, or a file behind a loop
    device) is mounted."""
    real = os.path.realpath(path)
    if not os.path.exists(real):
        return
    loops = _backing_files()
    busy_devs = {dev for dev, backing in loops.items()
                 if os.path.realpath(backing) == real}
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[:2] for line in f]
    except OSError:
        mounts = []
    for dev, mnt in mounts:
        if dev in busy_devs or (os.path.exists(dev) and dev.startswith("/dev/") and
                                os.path.realpath(dev) == real):
            raise ImageBusy(f"{path}: is mounted at {mnt}; unmount it first")
    if busy_devs and not os.path.isdir(real):
        raise ImageBusy(f"{path}: is attached to {', '.join(sorted(busy_devs))}; "
                        "detach it (losetup -d) before writing")


class ImageLock:
    """An exclusive flock on the image for the duration of a write."""

    def __init__(self, fd: int, path: str):
        self.fd = fd
        self.path = path

    def __enter__(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ImageBusy(f"{self.path}: another fstool is writing this image") from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
