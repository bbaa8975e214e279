"""fstool mdrestore: an image made again from a metadump (v1 or v2, as
xfs_metadump 6.1 and 6.10.1 or ``fstool metadump`` write them): every
extent of the dump written at its place in a sparse image file of the
filesystem's size (or onto a block device), then the primary superblock
as xfs_mdrestore leaves it.  Apart from :mod:`fstool.ops.metadump` so that
restoring loads no more than it uses.
"""
from __future__ import annotations

import mmap
import os
import stat

from .._backend import parsers
from ..errors import ImageError, ImageTruncatedError, InvalidArgument, NotXfsError
from ..format import constants as C, metadump as M
from ..io.dumpfile import MAP_FLAGS, DumpFile, fixed_primary

BB = C.BBSIZE
WINDOW = 1 << 20        # the dump read this much at a time; larger extents copied in the kernel
IOV_MAX = 1024


def refuse_same(src, dst, why: str) -> None:
    """Refuse a target that is the source under another name."""
    try:
        same = os.path.samefile(os.fspath(src), os.fspath(dst))
    except OSError:
        return
    if same:
        raise InvalidArgument(f"{dst} is {src}: {why}")


def _open_target(image, size: int) -> int:
    """The image to restore into: a regular file created or truncated to
    ``size`` bytes, or a block device (not mounted) of at least that size."""
    path = os.fspath(image)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISBLK(st.st_mode):
        from ..io.lock import refuse_if_mounted  # lazy: start-up (for a device target only)
        refuse_if_mounted(path)
        fd = os.open(path, os.O_RDWR | os.O_EXCL | os.O_CLOEXEC)
        if os.lseek(fd, 0, os.SEEK_END) < size:
            os.close(fd)
            raise InvalidArgument(f"{path}: the device is smaller than the filesystem in "
                                  f"the dump ({size} bytes)")
        return fd
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InvalidArgument(f"{path}: not a regular file or block device")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        os.ftruncate(fd, size)
    except OSError as e:
        raise ImageError(f"{path}: cannot create the image: {e.strerror}") from None
    return fd


def _copy(d: DumpFile, off: int, fd: int, at: int, n: int) -> None:
    """``n`` bytes of the dump at ``off`` to ``fd`` at ``at``: in the kernel
    (copy_file_range) where it can, else read and written."""
    done = 0
    while done < n:
        try:
            k = os.copy_file_range(d.fd, fd, n - done, off + done, at + done)
        except OSError:
            k = 0
        if k <= 0:
            break
        done += k
    while done < n:
        k = min(n - done, 8 << 20)
        os.pwrite(fd, d._read(off + done, k), at + done)
        done += k


def _pwritev(fd: int, iov: list, at: int, n: int) -> None:
    """``iov`` (``n`` bytes in all) written at ``at`` in one call where it
    can (a short write: the rest one piece at a time)."""
    done = os.pwritev(fd, iov, at)
    if done < n:
        rest = memoryview(b"".join(iov))[done:]
        while rest:
            rest = rest[os.pwrite(fd, rest, at + n - len(rest)):]


def mdrestore(dump, image, *, log_image=None) -> dict:
    """Write the metadata of ``dump`` into the image file ``image`` (made
    or truncated to the filesystem's size), then the primary superblock as
    xfs_mdrestore leaves it; an external log a v2 dump holds goes to
    ``log_image``."""
    refuse_same(dump, image, "restoring would truncate the dump it reads")
    d = DumpFile(dump)
    try:
        _raw, f = d.primary()
        if d.compat & M.XFS_MD2_COMPAT_EXTERNALLOG and log_image is None:
            raise InvalidArgument(f"{d.path}: the dump holds an external log: give "
                                  "--log-image")
        sectsize = f["sb_sectsize"]
        size = f["sb_dblocks"] * f["sb_blocksize"]
        fd = _open_target(image, size)
        lfd = -1
        try:
            if log_image is not None:
                lfd = os.open(os.fspath(log_image), os.O_RDWR | os.O_CREAT | os.O_TRUNC,
                              0o644)
                os.ftruncate(lfd, f["sb_logblocks"] * f["sb_blocksize"])
            primary = bytearray(sectsize)
            if d.version == 2:
                sectors = _restore_v2(d, fd, lfd, primary)
            else:
                sectors = _restore(d, fd, lfd, primary)
            os.pwrite(fd, fixed_primary(bytes(primary), sectsize), 0)
        finally:
            os.close(fd)
            if lfd >= 0:
                os.close(lfd)
    finally:
        d.close()
    return {"version": d.version, "sectors": sectors, "image_bytes": size}


def _restore(d: DumpFile, fd: int, lfd: int, primary: bytearray) -> int:
    """Write every extent of the dump ``d`` at its place (``lfd``: the
    external log's, -1 for none), what falls in the primary superblock's
    sector into ``primary`` too; the sectors written."""
    sectsize = len(primary)
    sectors = 0
    # extents that follow one another on their target (a dump lists
    # adjacent metadata blocks one by one) go out in one pwritev
    iov, run_fd, run_at, run_end = [], -1, 0, 0
    for daddr, nsect, off, log, data in d.index(WINDOW):
        target = lfd if log else fd
        if target < 0:
            raise InvalidArgument(f"{d.path}: the dump holds an external log: "
                                  "give --log-image")
        at, total = daddr * BB, nsect * BB
        sectors += nsect
        if not log and at < sectsize:
            k = min(total, sectsize - at)
            primary[at:at + k] = d._read(off, k)
        if data is not None and at == run_end and target == run_fd and \
                len(iov) < IOV_MAX:
            iov.append(data)
            run_end += total
            continue
        if iov:
            _pwritev(run_fd, iov, run_at, run_end - run_at)
            iov = []
        if data is None:
            _copy(d, off, target, at, total)
            run_fd = -1
        else:
            iov, run_fd, run_at, run_end = [data], target, at, at + total
    if iov:
        _pwritev(run_fd, iov, run_at, run_end - run_at)
    return sectors


def _restore_v2(d: DumpFile, fd: int, lfd: int, primary: bytearray) -> int:
    """:func:`_restore` for a v2 dump: its extents written natively
    (``parsers.md2_restore``) straight from a read-only mapping of the
    dump, a window of it at a time; what it leaves (an extent past the
    window, one larger than the window, one it cannot place) is looked at
    here."""
    sectsize = len(primary)
    sectors = 0
    pos = M.V2_HDR.size
    buf, start = b"", 0
    try:
        while True:
            pos, n = parsers.md2_restore(buf, start, pos, d.size, fd, lfd, primary, WINDOW)
            sectors += n
            if pos >= d.size:
                return sectors
            addr, nsect = M.V2_EXTENT.unpack(d._read(pos, M.V2_EXTENT.size))
            dev = addr & M.XME_ADDR_DEVICE_MASK
            if dev not in (M.XME_ADDR_DATA_DEVICE, M.XME_ADDR_LOG_DEVICE):
                raise NotXfsError("metadump", f"{d.path}: invalid device in extent "
                                  f"address 0x{addr:x}")
            log = dev == M.XME_ADDR_LOG_DEVICE
            data, total = pos + M.V2_EXTENT.size, nsect * BB
            if data + total > d.size:
                raise ImageTruncatedError(f"{d.path}: the metadump ends early (at byte "
                                          f"{d.size})")
            target = lfd if log else fd
            if target < 0:
                raise InvalidArgument(f"{d.path}: the dump holds an external log: "
                                      "give --log-image")
            if total > WINDOW:
                at = (addr & M.XME_ADDR_DADDR_MASK) * BB
                if not log and at < sectsize:
                    k = min(total, sectsize - at)
                    primary[at:at + k] = d._read(data, k)
                _copy(d, data, target, at, total)
                sectors += nsect
                pos = data + total
                continue
            # the extent runs past the window: the next window starts with it
            if not isinstance(buf, bytes):
                buf.close()
            start = pos - pos % mmap.ALLOCATIONGRANULARITY
            buf = mmap.mmap(d.fd, min(WINDOW + BB + pos - start, d.size - start), MAP_FLAGS,
                            mmap.PROT_READ, offset=start)
    finally:
        if not isinstance(buf, bytes):
            buf.close()
