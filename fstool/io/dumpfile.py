"""Reading xfs_metadump's files (v1 and v2, :mod:`fstool.format.metadump`):
the extents a dump holds, where each lies in the dump file, and the image
they make — for ``fstool mdrestore`` and for reading a dump in place, as
an image whose blocks outside the dump read as zeros.
"""
from __future__ import annotations

import bisect
import mmap
import os
import struct

from .._backend import parsers
from ..errors import ImageTruncatedError, NotXfsError
from ..format import constants as C, metadump as M
from ..format.structs import SB

BB = C.BBSIZE
MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
MAGICS = (M.XFS_MD_MAGIC_V1.to_bytes(4, "big"), M.XFS_MD_MAGIC_V2.to_bytes(4, "big"))


class DumpFile:
    """A dump file opened for reading: ``version``, ``compat`` (v2 flags)
    and :meth:`index`, the extents in file order."""

    def __init__(self, path, fd: int | None = None):
        self.path = os.fspath(path)
        self.own = fd is None
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC) if fd is None else fd
        self.size = os.fstat(self.fd).st_size
        self.compat = 0
        try:
            head = os.pread(self.fd, M.V2_HDR.size, 0)
            if len(head) < 4:
                raise NotXfsError("metadump", f"{self.path}: too short to be a metadump")
            magic = struct.unpack_from(">I", head)[0]
            if magic == M.XFS_MD_MAGIC_V1:
                self.version = 1
            elif magic == M.XFS_MD_MAGIC_V2:
                self.version = 2
                if len(head) < M.V2_HDR.size:
                    raise ImageTruncatedError(f"{self.path}: the metadump ends in its header")
                _m, _v, self.compat, incompat, reserved = M.V2_HDR.unpack(head)
                if incompat:
                    raise NotXfsError("metadump", f"{self.path}: unknown incompat flags "
                                      f"0x{incompat:x} in the metadump header")
                if reserved:
                    raise NotXfsError("metadump", f"{self.path}: the metadump header's "
                                      "reserved field is not zero")
            else:
                raise NotXfsError("metadump", f"{self.path}: not a metadata dump (magic "
                                  f"0x{magic:08x}, expected XFSM or XMD2)")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.own and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def _read(self, off: int, n: int) -> bytes:
        data = os.pread(self.fd, n, off)
        if len(data) != n:
            raise ImageTruncatedError(f"{self.path}: the metadump ends early (at byte "
                                      f"{off + len(data)})")
        return data

    def index(self, window: int = 0):
        """(daddr, sectors, file offset, log device) of every extent, in
        file order; the first is the primary superblock.  With ``window``
        (bytes), each comes with its bytes too, a fifth item: the dump is
        read that much at a time, sequentially, and an extent larger than
        ``window`` comes with None (to be copied from its offset)."""
        rd = _Reader(self, window)
        it = self._v1(rd) if self.version == 1 else self._v2(rd)
        ext = next(it, None)
        if ext is None:
            raise ImageTruncatedError(f"{self.path}: the metadump holds no superblock")
        if ext[0] != 0 or ext[1] == 0 or ext[3]:
            raise NotXfsError("metadump", f"{self.path}: the first block is not the "
                              "primary superblock")
        yield ext
        yield from it

    def _v1(self, rd):
        off = 0
        while True:
            if off == self.size and off:
                return
            raw = rd.get(off, BB)
            magic, count, blocklog, _info = M.V1_HDR.unpack_from(raw)
            if magic != M.XFS_MD_MAGIC_V1:
                raise NotXfsError("metadump", f"{self.path}: bad index magic 0x{magic:08x} "
                                  f"at byte {off}")
            if blocklog != M.V1_BLOCKLOG:
                raise NotXfsError("metadump", f"{self.path}: unsupported block size "
                                  f"2^{blocklog}")
            if count > M.V1_INDICES or (off == 0 and count == 0):
                raise NotXfsError("metadump", f"{self.path}: bad block count {count}")
            if count == 0:
                return
            daddrs = struct.unpack_from(f">{count}Q", raw, M.V1_HDR.size)
            data = off + BB
            if data + count * BB > self.size:
                raise ImageTruncatedError(f"{self.path}: the metadump ends early (at byte "
                                          f"{self.size})")
            # runs of consecutive daddrs are one extent
            i = 0
            while i < count:
                j = i + 1
                while j < count and daddrs[j] == daddrs[j - 1] + 1:
                    j += 1
                yield rd.extent(daddrs[i], j - i, data + i * BB, False)
                i = j
            off = data + count * BB
            if count < M.V1_INDICES:
                return

    def _v2(self, rd):
        off = M.V2_HDR.size
        unpack, hsz = M.V2_EXTENT.unpack, M.V2_EXTENT.size
        get, window = rd.get, rd.window
        while off < self.size:
            addr, nsect = unpack(get(off, hsz))
            dev = addr & M.XME_ADDR_DEVICE_MASK
            if dev not in (M.XME_ADDR_DATA_DEVICE, M.XME_ADDR_LOG_DEVICE):
                raise NotXfsError("metadump", f"{self.path}: invalid device in extent "
                                  f"address 0x{addr:x}")
            data = off + hsz
            n = nsect * BB
            if data + n > self.size:
                raise ImageTruncatedError(f"{self.path}: the metadump ends early (at byte "
                                          f"{self.size})")
            ext = (addr & M.XME_ADDR_DADDR_MASK, nsect, data, dev == M.XME_ADDR_LOG_DEVICE)
            yield ext + (get(data, n),) if window else ext
            off = data + n

    def primary(self) -> tuple[bytes, dict]:
        """The primary superblock sector as the dump holds it, and its fields."""
        daddr, nsect, off, _log = next(self.index())
        raw = self._read(off, min(nsect * BB, 512))
        f = SB.unpack(raw[:SB.size])
        if f["sb_magicnum"] != C.XFS_SB_MAGIC:
            raise NotXfsError("metadump", f"{self.path}: bad magic number for the primary "
                              "superblock")
        sectsize, bsize = f["sb_sectsize"], f["sb_blocksize"]
        if not 512 <= sectsize <= 32768 or sectsize & (sectsize - 1) or \
                not 512 <= bsize <= 65536 or bsize & (bsize - 1):
            raise NotXfsError("metadump", f"{self.path}: bad sector size {sectsize} or "
                              f"block size {bsize} in the metadump")
        return raw, f


def fixed_primary(sector: bytes, sectsize: int) -> bytes:
    """The primary superblock as xfs_mdrestore writes it last: decoded and
    encoded again (the sector past the structure zeroed, quota inodes of 0
    read as NULLFSINO, sb_meta_uuid only with the META_UUID feature),
    sb_inprogress cleared, a new CRC."""
    f = SB.unpack(sector[:SB.size])
    f["sb_inprogress"] = 0
    for q in ("sb_uquotino", "sb_gquotino", "sb_pquotino"):
        if f[q] == 0:
            f[q] = C.NULLFSINO
    if not f["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_META_UUID:
        f["sb_meta_uuid"] = bytes(16)
    out = bytearray(sectsize)
    out[:SB.size] = SB.pack(f)
    struct.pack_into("<I", out, C.XFS_SB_CRC_OFF,
                     parsers.xfs_cksum(bytes(out), C.XFS_SB_CRC_OFF))
    return bytes(out)


class _Reader:
    """Reads of a dump file made in order: with a ``window``, from a
    read-only mapping of that many bytes of the file at a time (extents
    then carry their bytes, views of the mapping: written from there
    without a copy in between), else one pread per read."""

    def __init__(self, dump: DumpFile, window: int):
        self.dump = dump
        self.window = window
        self.buf = memoryview(b"")
        self.start = 0

    def get(self, off: int, n: int):
        """``n`` bytes at ``off``; None for more than the window."""
        if not self.window:
            return self.dump._read(off, n)
        pos = off - self.start
        if pos < 0 or pos + n > len(self.buf):
            if n > self.window:
                return None
            if off + n > self.dump.size:
                raise ImageTruncatedError(f"{self.dump.path}: the metadump ends early (at "
                                          f"byte {self.dump.size})")
            start = off - off % mmap.ALLOCATIONGRANULARITY
            length = min(self.window + (off - start), self.dump.size - start)
            # the views of the last mapping unmap it when the caller drops them;
            # populated whole at once (every byte of it is read next): one
            # call instead of a page fault per page
            self.buf = memoryview(mmap.mmap(self.dump.fd, length, MAP_FLAGS,
                                            mmap.PROT_READ, offset=start))
            self.start, pos = start, off - start
        return self.buf[pos:pos + n]

    def extent(self, daddr: int, nsect: int, off: int, log: bool) -> tuple:
        if not self.window:
            return daddr, nsect, off, log
        return daddr, nsect, off, log, self.get(off, nsect * BB)


class DumpImage:
    """The image a dump makes, read in place: ``size`` (the filesystem's)
    and :meth:`pread`; what the dump does not hold reads as zeros, the
    primary superblock as xfs_mdrestore leaves it.  With ``log``, the
    external log a v2 dump holds instead (what xfs_mdrestore -l writes)."""

    writable = False

    def __init__(self, dump: DumpFile, log: bool = False):
        self.dump = dump
        self.log = log
        _raw, f = dump.primary()
        self.sectsize = f["sb_sectsize"]
        self.size = f["sb_logblocks" if log else "sb_dblocks"] * f["sb_blocksize"]
        runs = [(d * BB, (d + n) * BB, off) for d, n, off, on_log in dump.index()
                if on_log == log]
        ordered = sorted(runs, key=lambda r: r[0])
        if any(a[1] > b[0] for a, b in zip(ordered, ordered[1:])):
            ordered = _flatten(runs)
        self.starts = [r[0] for r in ordered]
        self.runs = ordered
        head = bytearray(self.sectsize)
        self._fill(head, 0)
        self.primary = fixed_primary(bytes(head), self.sectsize)

    def _fill(self, out: bytearray, offset: int) -> None:
        end = offset + len(out)
        i = max(0, bisect.bisect_right(self.starts, offset) - 1)
        while i < len(self.runs):
            s, e, foff = self.runs[i]
            if s >= end:
                break
            lo, hi = max(s, offset), min(e, end)
            if lo < hi:
                data = self.dump._read(foff + lo - s, hi - lo)
                out[lo - offset:hi - offset] = data
            i += 1

    def pread(self, offset: int, length: int) -> bytes:
        out = bytearray(length)
        self._fill(out, offset)
        if offset < self.sectsize and not self.log:
            n = min(self.sectsize, offset + length) - offset
            out[:n] = self.primary[offset:offset + n]
        return bytes(out)


    def close(self) -> None:
        """Nothing to close: the dump file is its device's."""


def _flatten(runs: list) -> list:
    """Runs (start, end, file offset) in dump order, overlaps resolved as a
    restore resolves them (the later write wins), sorted."""
    sectors: dict = {}
    for s, e, off in runs:
        for k in range((e - s) // BB):
            sectors[s // BB + k] = off + k * BB
    out: list = []
    for sec in sorted(sectors):
        off = sectors[sec]
        if out and out[-1][1] == sec * BB and out[-1][2] + (out[-1][1] - out[-1][0]) == off:
            out[-1] = (out[-1][0], out[-1][1] + BB, out[-1][2])
        else:
            out.append((sec * BB, sec * BB + BB, off))
    return out
