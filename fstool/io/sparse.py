"""Where a host file holds data: SEEK_DATA/SEEK_HOLE, so holes stay holes."""
from __future__ import annotations

import errno
import os


def data_ranges_of(fd: int, st: os.stat_result | None = None):
    """(offset, length) of each data region of an open file, or None when
    the file is dense (or the host cannot say)."""
    st = st or os.fstat(fd)
    size = st.st_size
    if size == 0 or st.st_blocks * 512 >= size:
        return None
    out = []
    pos = 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:      # only a hole remains
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            out.append((start, min(end, size) - start))
            pos = end
    except OSError:
        return None
    finally:
        os.lseek(fd, 0, os.SEEK_SET)
    return out
