"""The external log device paired with an image name.

A filesystem made with ``mkfs.xfs -l logdev=FILE`` keeps its log in another
file (or block device).  The command line names it with ``--logdev FILE``
(xfs_repair's and xfs_db's ``-l``); the pairing is kept here, by the image's
name and by the identity of the file it names (its st_dev and st_ino, or a
block device's st_rdev, and the partition the name selects), so that every
filesystem opened on that image during the command finds its log without
each operation carrying it, whatever name reaches the image: the name as
given, ./IMAGE, the absolute path (the mount's daemon works from /), a
symlink or a hard link.  The API passes it to
:class:`~fstool.fs.filesystem.Filesystem` directly (``logdev=``).
"""
from __future__ import annotations

import os
import stat

from .partition import split

_PAIRED: dict = {}


def _keys(image) -> list:
    """What ``image`` is paired by: its name, and the identity of the file
    it names with the partition it selects (when the file exists)."""
    name = os.fspath(image)
    keys = [name]
    try:
        path, selector = split(name)
        st = os.stat(path)
    except (OSError, ValueError, TypeError):
        return keys
    ident = ("dev", st.st_rdev) if stat.S_ISBLK(st.st_mode) else ("file", st.st_dev, st.st_ino)
    keys.append((ident, selector))
    return keys


def pair(image, logdev) -> None:
    """``logdev`` holds the external log of the filesystem ``image`` names
    (None: forget the pairing)."""
    if logdev is not None:
        # absolute: the mount's daemon works from /, where a relative name
        # given on the command line names nothing
        logdev = os.path.abspath(os.fspath(logdev))
    for key in _keys(image):
        if logdev is None:
            _PAIRED.pop(key, None)
        else:
            _PAIRED[key] = logdev


def paired(image) -> str | None:
    """The external log device given for ``image`` (under any name of
    it), or None."""
    try:
        keys = _keys(image)
    except TypeError:
        return None
    for key in keys:
        log = _PAIRED.get(key)
        if log is not None:
            return log
    return None


def replay_command(image) -> str:
    """The command that replays the log of ``image`` (with its --logdev)."""
    log = paired(image)
    return f"fstool log replay {image}" + (f" --logdev {log}" if log else "")
