"""Give an image's free space back to the host: ``fstool sparsify``.

Every free extent the bnobt records is punched out of the image file
(fallocate PUNCH_HOLE, the file's size kept), or with ``zero`` overwritten
with zeros where the file holds data there (for formats and copies that
need zeros rather than holes; a block device always gets zeros).  Only the
parts of the free extents where the file holds data are touched, so a run
over an image that is already sparse costs a few seeks.

Free space is trusted only on a sound image: the image is checked first
(``check=False`` skips it), a dirty log is refused (replay could write
into a block punched here before its buffer is whole again), and the image
must not be busy.  Nothing but free blocks is written: the filesystem
reads the same after as before.
"""
from __future__ import annotations

import os


def free_extents(fs):
    """(byte offset, byte length) of every free extent, AG by AG, in order."""
    from .stats import ag_tree
    blocklog = fs.sb.blocklog
    for agno in range(fs.sb.agcount):
        reader, root, height = ag_tree(fs, agno, "bnobt")
        for start, length in reader.ag_records(root, height):
            yield fs.agb_to_daddr(agno, start) << 9, length << blocklog


def _data_parts(ranges, start: int, length: int):
    """The parts of [start, start+length) that lie in ``ranges`` (sorted
    (offset, length) data regions; None: the whole file is data)."""
    if ranges is None:
        yield start, length
        return
    import bisect
    end = start + length
    i = max(bisect.bisect_right(ranges, (start, 1 << 63)) - 1, 0)
    while i < len(ranges) and ranges[i][0] < end:
        lo, hi = max(ranges[i][0], start), min(ranges[i][0] + ranges[i][1], end)
        if lo < hi:
            yield lo, hi - lo
        i += 1


def allocated_bytes(path) -> int:
    """What the host gives the file: st_blocks in 512-byte units."""
    return os.stat(path).st_blocks * 512


def sparsify(path, *, zero: bool = False, check: bool = True) -> dict:
    """Punch (or with ``zero`` overwrite with zeros) every free extent of
    the image at ``path``; what was done."""
    from ..errors import WriteRefused
    from ..fs.filesystem import Filesystem
    from ..fs.logstate import log_is_clean
    from ..io.device import Device
    from ..io.lock import ImageLock, refuse_if_mounted
    from ..io.sparse import data_ranges_of
    from .guard import require_sound
    path = os.fspath(path)
    refuse_if_mounted(path)
    if check:
        require_sound(path)
    fs = Filesystem(path)
    try:
        with ImageLock(fs.dev, path):
            clean, why = log_is_clean(fs)
            if not clean:
                raise WriteRefused(f"{path}: the log is dirty ({why}); its free space is not "
                                   f"known until it is replayed: run 'fstool log replay "
                                   f"{path}' first")
            before = allocated_bytes(path)
            out = Device(path, writable=True)
            try:
                ranges = None if out.is_blockdev else data_ranges_of(out.fd)
                extents = touched = 0
                zeros = bytes(1 << 20)
                for off, n in free_extents(fs):
                    extents += 1
                    for lo, m in _data_parts(ranges, off, n):
                        touched += m
                        if not zero:
                            out.zero_range(lo, m)
                            continue
                        for pos in range(lo, lo + m, len(zeros)):
                            out.pwrite(pos, zeros[:min(len(zeros), lo + m - pos)])
                out.fsync()
            finally:
                out.close()
    finally:
        fs.close()
    return {"image": path, "zero": zero, "free_extents": extents, "bytes": touched,
            "allocated_before": before, "allocated_after": allocated_bytes(path)}
