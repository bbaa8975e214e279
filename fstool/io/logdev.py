"""The external log device paired with an image name.

A filesystem made with ``mkfs.xfs -l logdev=FILE`` keeps its log in another
file (or block device).  The command line names it with ``--logdev FILE``
(xfs_repair's and xfs_db's ``-l``); the pairing is kept here, by image name,
so that every filesystem opened on that image during the command finds its
log without each operation carrying it.  The API passes it to
:class:`~fstool.fs.filesystem.Filesystem` directly (``logdev=``).
"""
from __future__ import annotations

import os

_PAIRED: dict = {}


def pair(image, logdev) -> None:
    """``logdev`` holds the external log of the filesystem ``image`` names
    (None: forget the pairing)."""
    key = os.fspath(image)
    if logdev is None:
        _PAIRED.pop(key, None)
    else:
        _PAIRED[key] = os.fspath(logdev)


def paired(image) -> str | None:
    """The external log device given for ``image``, or None."""
    try:
        return _PAIRED.get(os.fspath(image))
    except TypeError:
        return None


def replay_command(image) -> str:
    """The command that replays the log of ``image`` (with its --logdev)."""
    log = paired(image)
    return f"fstool log replay {image}" + (f" --logdev {log}" if log else "")
