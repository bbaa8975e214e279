"""fstool sparsify: give an image's free space back to the host.

Every extent the free-space btree (bnobt) of each AG lists is punched out
of the image file (``fallocate(PUNCH_HOLE | KEEP_SIZE)``), so the host
stores only what the filesystem uses; with ``zero`` the extents are
written with zeros instead (for image formats or hosts that need it, and
on block devices, where a punch is a discard).  Nothing the filesystem
uses is touched: the image is checked first (a bnobt that named a block in
use would otherwise lose it), the log must be clean (free space in the
AGFs is what the log leaves once replayed), and the image is locked and
must not be mounted.  The AGFL's blocks and the log are left as they are.
"""
from __future__ import annotations

import dataclasses
import os

from ..errors import FsToolError, WriteRefused
from ..fs.filesystem import Filesystem
from ..fs.logstate import log_is_clean
from ..io.device import punch_hole
from ..io.lock import ImageLock, refuse_if_mounted
from .guard import require_sound
from .stats import ag_tree


@dataclasses.dataclass
class SparsifyResult:
    ranges: int = 0                 # free extents punched (or zeroed)
    bytes: int = 0                  # their total size
    host_before: int | None = None  # bytes the host had allocated for the image file
    host_after: int | None = None
    used_bytes: int = 0             # the filesystem's blocks not in the bnobt
    written: bool = False
    mode: str = "punch"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def free_ranges(fs) -> list:
    """(byte offset, byte length) of every free extent the AGs' bnobts
    list, in disk order."""
    sb = fs.sb
    bs = sb.blocksize
    out = []
    for agno in range(sb.agcount):
        base = agno * sb.agblocks
        reader, root, height = ag_tree(fs, agno, "bnobt")
        for start, length in reader.ag_records(root, height):
            out.append(((base + start) * bs, length * bs))
    return out


def _host_allocated(path) -> int | None:
    st = os.stat(path)
    return st.st_blocks * 512 if os.path.isfile(path) else None


def sparsify(path, *, zero: bool = False, dry_run: bool = False,
             check: bool = True) -> SparsifyResult:
    """Punch (or, with ``zero``, zero) every free extent of the image at
    ``path``; ``dry_run`` only counts them."""
    path = os.fspath(path)
    refuse_if_mounted(path)
    if check:
        require_sound(path)
    result = SparsifyResult(mode="zero" if zero else "punch")
    fs = Filesystem(path, writable=not dry_run)
    try:
        with ImageLock(fs.dev, path) if not dry_run else _Nothing():
            clean, why = log_is_clean(fs)
            if not clean:
                raise WriteRefused(f"{path}: the journal is dirty ({why}); replay it first "
                                   "(fstool log replay, or a kernel mount): until then the "
                                   "free-space btrees may not say what is free")
            ranges = free_ranges(fs)
            result.ranges = len(ranges)
            result.bytes = sum(n for _o, n in ranges)
            result.used_bytes = fs.sb.dblocks * fs.sb.blocksize - result.bytes
            result.host_before = _host_allocated(path)
            if dry_run or not ranges:
                result.host_after = result.host_before
                return result
            dev = fs.dev
            if not zero and not dev.is_blockdev:
                # a host that cannot punch would have zeros written instead,
                # which takes space rather than giving it back
                off, length = ranges[0]
                try:
                    punch_hole(dev.fd, dev.start + off, length)   # (a partition's start)
                except OSError as e:
                    raise FsToolError(f"{path}: the host cannot punch holes in the image "
                                      f"({e.strerror}); --zero writes zeros instead") from None
            for off, length in ranges:
                dev.zero_range(off, length, punch=not zero)
            dev.fsync()
            result.written = True
    finally:
        fs.close()
    result.host_after = _host_allocated(path)
    return result


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
