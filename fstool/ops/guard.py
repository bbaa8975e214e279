"""Before writing: make sure the image is sound enough to write to.

Writers change an image on the assumption that what they read is right: a
wrong free-space count or a broken free inode btree would be carried into
every change.  So before an image is opened for writing, ``fstool check``
runs over it (it takes a fraction of a second for hundreds of thousands of
inodes); when it finds errors, the write is refused with the findings and a
pointer to repair.  ``--no-check`` skips this for those who know.
"""
from __future__ import annotations

from ..errors import FsToolError, WriteRefused
from ..fs.filesystem import Filesystem
from .check import check

SHOWN = 3         # findings named in the refusal


def require_sound(image, ignore=()) -> list:
    """Raise WriteRefused when fstool check finds errors in ``image``
    (besides findings whose code is in ``ignore``, which are returned).
    Images that cannot be opened, or whose log is dirty, are left to the
    writer itself to refuse with its own message."""
    try:
        fs = Filesystem(image)
    except FsToolError:
        return []
    with fs:
        fs.require_log()    # an external log not given: as the writer would refuse
        checker = check(fs)
    if checker.log_dirty:
        return []
    errors = [f for f in checker.findings if f.severity == "error"]
    ignored = [f for f in errors if f.code in ignore]
    errors = [f for f in errors if f.code not in ignore]
    if not errors:
        return ignored
    shown = "; ".join(f"{f.code}: {f.message}" for f in errors[:SHOWN])
    more = f" (and {len(errors) - SHOWN} more)" if len(errors) > SHOWN else ""
    raise WriteRefused(f"{image}: fstool check finds {len(errors)} problem(s), so it is not "
                       f"written to: {shown}{more}; repair it first (fstool check IMAGE "
                       "lists them all), or pass --no-check to write anyway")
