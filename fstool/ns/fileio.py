"""File data on the write path: read, write, truncate, fallocate, seek and
release of regular files, one call per operation, through the block map
(:mod:`fstool.ns.bmap`).

Interface.  :class:`FileIO` is made once per write session
(``FileIO(writer)``) and takes inode numbers::

    io = FileIO(w)
    io.write(ino, 0, b"hello")          # -> 5
    io.read(ino, 0, 4096)               # -> b"hello"
    io.fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096)
    io.seek_data(ino, 0), io.seek_hole(ino, 0)
    io.truncate(ino, 0)
    io.release(ino)                     # the last close: trims preallocation
    io.extents(ino)                     # [(startoff, fsbno, blocks, unwritten)]

Every call that changes the image runs inside the session's open
transaction when there is one (the caller commits it), else in a
transaction of its own, committed before the call returns; on an error
nothing is changed.  Errors carry the kernel's errnos (``exc.errno``):
EINVAL, EFBIG, ENOSPC, ENXIO, EOPNOTSUPP.

What each call does, in the kernel's terms:

* ``write`` maps holes with newly allocated blocks (near the previous
  extent, else near the inode), turns unwritten extents it covers into
  written ones, and writes the data straight to the image before the
  transaction that maps it commits (the journal flushes the device before a
  checkpoint's commit record, so a mapping never reaches the log before its
  data).  Partial blocks of new or unwritten blocks are filled with zeros.
  With ``fill_blocks`` set (the mount sets 64 KiB), a write into a hole
  inside the file's size maps and writes the whole aligned run of that
  many blocks around it that is a hole, zeros around its data (see
  ``_widen``).
  A write that starts past the end of the file first zeroes whatever
  written blocks lie between the old end and the write (the kernel's EOF
  zeroing).  Size, mtime, ctime and di_nblocks follow.
* ``write_new`` writes the data of several files with nothing mapped yet
  from their start (the mount's delayed allocation): the files whose
  inodes lie in one AG get their blocks from one allocation, one file
  after another in inode order, exactly the blocks each needs, nothing
  held past the ends.
* ``truncate`` zeroes the tail of the new last block and unmaps every block
  past it (fallocated ones too, as the kernel's xfs_itruncate_extents
  does); growing zeroes from the old end as ``write`` does.
* ``fallocate``: mode 0 and ``FALLOC_FL_KEEP_SIZE`` map unwritten extents
  over the holes of the range (block-rounded) and set XFS_DIFLAG_PREALLOC;
  ``PUNCH_HOLE|KEEP_SIZE`` unmaps the whole blocks of the range and zeroes
  the written parts of partial ones (up to the end of the file);
  ``ZERO_RANGE`` is a punch followed by an unwritten allocation of the
  block-rounded range, as xfs_file_fallocate does.  COLLAPSE_RANGE,
  INSERT_RANGE and NO_HIDE_STALE get EOPNOTSUPP (the kernel supports the
  first two; fstool does not yet); UNSHARE_RANGE gives the range private
  copies of shared blocks, then allocates like mode 0.  Argument checks
  follow vfs_fallocate's order.
* ``remap`` (reflink, the kernel's xfs_reflink_remap_range): the
  destination range is unmapped, then maps the source's written blocks
  (holes and unwritten extents, which read as zeros, stay holes), each
  block gaining a reference in the refcount btree; both files get the
  reflink flag.
  ``copy_range`` is copy_file_range(2): the whole blocks shared that way,
  the partial ones copied.
* ``seek_data``/``seek_hole`` answer as the kernel does for a file with no
  cached pages: unwritten extents are holes, the end of the file is a hole,
  ENXIO at or past the end.

Speculative preallocation.  A write that grows a file also holds physical
blocks past its end for the appends that follow, as the kernel's delayed
allocation does: 64 KiB while the file is smaller than that (the kernel
keeps such a file's pages in memory and allocates them together; fstool
allocates as it writes, so this least hold stands in), else twice the run of
contiguous blocks that ends at the write (or the file's size in blocks
once that passes half a record's length), rounded down to a power of two,
at most one bmbt record's length, cut by four and more when free space is
below 5 %, 4 % ... 1 % of the filesystem, and at least 64 KiB.  The held
blocks stay free on disk: the session's allocator steps around them as it
steps around busy blocks, and the next append of this file takes them
exactly where they are, so a file that grows by small appends stays in a
few large extents while other files are written.  ``release`` (the last
close) gives them back; so does truncation, a failed transaction, and any
allocation that would otherwise run out of space.  Since nothing past the
end of the file ever reaches the image, a crash leaves nothing to trim, and
small files written one after another end up adjacent.  ``release`` also
trims blocks past the end that the image already holds (written by a
kernel, say) unless the file was preallocated or is append-only, as the
kernel's xfs_free_eofblocks does.

Shared blocks (reflink).  A file with the reflink flag may share blocks with
others (the refcount btree counts the references).  Freeing its blocks takes
a reference from each, and frees only those whose last reference went; any
call that would change the data of a shared block (a write, the zeroing of
a partial block by a truncate, punch or zero range) first gives the file
private copies of the shared blocks it touches (copy on write: new blocks
with the same data, mapped in the same transaction; the old ones lose a
reference), then writes in place.

Costs.  Every call reads the inode from its cluster buffer and edits the
map record by record (see :mod:`fstool.ns.bmap`): its cost depends on the
extents it touches and the height of the bmbt, never on the file's size.
A truncate (or a release's trim) of a file with many extents runs in
transactions of 1,024 records after the one that sets the size, as the
kernel's does, when the call runs in transactions of its own.  Not done
here: COLLAPSE_RANGE and INSERT_RANGE.
"""
from __future__ import annotations

import bisect

import stat as pystat

from ..alloc.space import MAXEXTLEN
from ..errors import (CorruptionError, FileTooBigError, ImageTruncatedError, InvalidArgument,
                      IsADirectoryImageError, NoSuchOffsetError, NoSpaceError,
                      UnsupportedError)
from ..format import constants as C
from ..format.structs import DINODE
from ..fs.icore import encode_ts
from .bmap import ForkMap

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_NO_HIDE_STALE = 0x04
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_ZERO_RANGE = 0x10
FALLOC_FL_INSERT_RANGE = 0x20
FALLOC_FL_UNSHARE_RANGE = 0x40
_VFS_MODES = (FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_NO_HIDE_STALE
              | FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_INSERT_RANGE
              | FALLOC_FL_UNSHARE_RANGE)

MAX_BYTES = (1 << 63) - 1          # s_maxbytes of a 64-bit kernel
PREALLOC_MIN_BYTES = 64 << 10      # the kernel's default allocsize
_ZERO_CHUNK = 1 << 20
# free blocks per block of FileIO.fill_blocks below which a write into a
# hole is not widened
FILL_ROOM = 64
_END = 1 << 54                     # past the last block a file may map
_INF = 1 << 64
# the records a full read of a btree extent map decodes in the time of one
# range lookup in it (FileIO._looked_up)
LOOKUP_RECORDS = 128
TRUNCATE_STEP = 1024               # records unmapped per transaction of a truncate
_CORE = C.XFS_DINODE_CORE_SIZE


class _File:
    """One regular file for the length of one call."""
    __slots__ = ("ino", "raw", "d", "size", "nblocks", "map", "space", "nrext64",
                 "touched", "reflink")

    def __init__(self, io: "FileIO", ino: int, write: bool):
        w = io.w
        raw = w.inodes.raw_inode(ino)
        d = DINODE.unpack(raw)
        mode = d["di_mode"]
        if not pystat.S_ISREG(mode):
            if pystat.S_ISDIR(mode):
                raise IsADirectoryImageError(f"inode {ino}")
            raise InvalidArgument(f"inode {ino} is not a regular file")
        # a reflinked file: its blocks may be shared with other files
        self.reflink = bool(d["di_flags2"] & C.XFS_DIFLAG2_REFLINK)
        self.ino = ino
        self.raw = raw
        self.d = d
        self.size = d["di_size"]
        self.nblocks = d["di_nblocks"]
        forkoff = d["di_forkoff"]
        self.space = forkoff * 8 if forkoff else io.literal
        self.nrext64 = bool(d["di_flags2"] & C.XFS_DIFLAG2_NREXT64)
        nextents = d["di_big_nextents"] if self.nrext64 else d["di_nextents"]
        self.map = ForkMap(io.fs, ino, d["di_format"], raw[_CORE:_CORE + self.space],
                           self.space, nextents, w=w if write else None,
                           near=w.inodes.ino_fsb(ino), shared=self.reflink)
        self.touched = False


class FileIO:
    """File data operations of one write session; see the module docstring."""

    def __init__(self, w):
        self.w = w
        self.fs = w.fs
        self.dev = w.dev
        sb = w.sb
        self.bs = sb.blocksize
        self.blog = sb.blocklog
        self.literal = sb.inodesize - _CORE
        self.prealloc_min = max(1, PREALLOC_MIN_BYTES >> self.blog)
        # ino -> [logical block, fsbno, count]: blocks held past the end of
        # a growing file (the space allocator's ``reserved`` holds the same)
        self.held: dict = {}
        self._caller_tx = False
        self._lookups = None            # [decoded inode, range lookups made in it]
        # blocks of the aligned run a write into a hole inside the file
        # fills whole (zeros around the data); 0: only the write's blocks
        # (see :meth:`_widen`)
        self.fill_blocks = 0

    # -- public: reading -----------------------------------------------------------
    def read(self, ino: int, off: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``off`` (short at the end of the file);
        holes and unwritten extents read as zeros."""
        segments = self.read_map(ino, off, size, max(size, 1))
        out = bytearray(sum(k for _at, k in segments))
        view = memoryview(out)
        pos = 0
        for at, k in segments:
            if at >= 0:
                self.dev.preadinto(view[pos:pos + k], at)
            pos += k
        return bytes(out)

    def read_map(self, ino: int, off: int, size: int, zeros_max: int) -> list:
        """Where the bytes :meth:`read` would give lie: [(image byte offset,
        length)] in file order, -1 for zeros (holes, unwritten extents; runs
        of at most ``zeros_max``), for a caller that reads the image itself
        (the mount's splice to /dev/fuse).  Writes still gathered are put
        in the image first."""
        if off < 0 or size < 0:
            raise InvalidArgument(f"read of {size} bytes at offset {off}")
        blog = self.blog
        # the read model's decoded inode (kept until the inode is next
        # written): no decode of the inode per read
        node = self.fs.inode(ino)
        if node.is_reg:
            end = min(node.size, off + size)
            if off >= end:
                return []
            recs = self._mapped(node, off >> blog, (end + self.bs - 1) >> blog)
        else:
            f = _File(self, ino, False)         # refuses what is not a regular file
            end = min(f.size, off + size)
            if off >= end:
                return []
            recs = f.map.range(off >> blog, (end + self.bs - 1) >> blog)
        out: list = []
        dev = self.dev
        pos = off

        def zeros(n: int) -> None:
            while n > 0:
                k = min(n, zeros_max)
                out.append((-1, k))
                n -= k

        for o, p, n, u in recs:
            lo, hi = max(o << blog, off), min((o + n) << blog, end)
            if hi <= lo:
                continue
            if lo > pos:
                zeros(lo - pos)
            if u:
                zeros(hi - lo)
            else:
                at = self._byte(p) + lo - (o << blog)
                if at + hi - lo > dev.size:
                    raise ImageTruncatedError(
                        f"{dev.path}: inode {ino} maps data past the end of the image")
                out.append((at, hi - lo))
            pos = hi
        if pos < end:
            zeros(end - pos)
        if dev._gather:
            dev.flush_gathered()
        return out

    def extents(self, ino: int) -> list:
        """The data fork's records: (startoff, fsbno, blockcount, unwritten)."""
        return _File(self, ino, False).map.all()

    def seek_data(self, ino: int, off: int) -> int:
        """lseek(SEEK_DATA): the first offset >= ``off`` holding data."""
        return self._seek(ino, off, True)

    def seek_hole(self, ino: int, off: int) -> int:
        """lseek(SEEK_HOLE): the first offset >= ``off`` in a hole (the end
        of the file counts as one)."""
        return self._seek(ino, off, False)

    def _seek(self, ino: int, off: int, data: bool) -> int:
        f = _File(self, ino, False)
        if off < 0 or off >= f.size:
            raise NoSuchOffsetError(f"inode {ino}: offset {off} is at or past the end of the file")
        blog = self.blog
        pos = off >> blog
        while True:
            # the record mapping pos (for data: or the next one after a hole)
            r = f.map.next(pos) if data else f.map.lookup(pos)
            if r is None or r[3] or (r[0] << blog) >= f.size:
                if not data:
                    return min(max(off, pos << blog), f.size)
                if r is None or (r[0] << blog) >= f.size:
                    raise NoSuchOffsetError(f"inode {ino}: no data at or after offset {off}")
            elif data:
                return max(off, r[0] << blog)
            pos = r[0] + r[2]

    # -- public: changing --------------------------------------------------------------
    def write(self, ino: int, off: int, data, hold: bool = True) -> int:
        """Write ``data`` at ``off``; returns the bytes written.  ``hold``:
        a write that grows the file holds blocks past its end for the
        appends that follow (False: the caller knows none follow, as the
        mount's delayed allocation does: only the blocks written)."""
        n = len(data)
        if off < 0:
            raise InvalidArgument(f"write at offset {off}")
        if n == 0:
            return 0
        if off >= MAX_BYTES:
            raise FileTooBigError(f"write at offset {off}: past the largest file size")
        if off + n > MAX_BYTES:
            data = data[:MAX_BYTES - off]
        return self._run(ino, self._write, ino, off, memoryview(data).cast("B"), hold)

    def write_new(self, files) -> None:
        """The data of files with nothing in the image yet (size 0, nothing
        mapped), ``files`` = [(ino, data from offset 0)]: the blocks of
        the files whose inodes lie in one AG are taken as one extent near
        the first inode where free space has one (one edit of the free
        space btrees for them all; each file's blocks after the last
        one's, as one write after another would leave them), exactly the
        blocks each needs, nothing held past the ends.  A file that does
        not fit in what was found is written on its own (:meth:`write`)."""
        groups: dict = {}
        ag_of = self.w.inodes.ino_split
        for ino, data in sorted(files, key=lambda f: f[0]):
            groups.setdefault(ag_of(ino)[0], []).append((ino, data))
        for group in groups.values():
            self._run(group[0][0], self._write_new, group)

    def _write_new(self, group: list) -> None:
        space = self.w.space
        need = [self._blocks(len(data)) for _ino, data in group]
        i = 0
        while i < len(group):
            ino, data = group[i]
            f = _File(self, ino, True)
            if f.size or f.map.nextents or not need[i]:
                self._write(ino, 0, memoryview(data).cast("B"), False)
                i += 1
                continue
            want = min(sum(need[i:]), MAXEXTLEN)
            try:
                fsbno, n = space.alloc_blocks(self.w.inodes.ino_fsb(ino), need[i], want,
                                              owner=None)
            except NoSpaceError:
                # no extent holds this file whole: its blocks in pieces
                self._write(ino, 0, memoryview(data).cast("B"), False)
                i += 1
                continue
            pos = fsbno
            while i < len(group) and need[i] <= fsbno + n - pos:
                ino, data = group[i]
                if f is None:
                    f = _File(self, ino, True)
                    if f.size or f.map.nextents:
                        break
                k = need[i]
                self.dev.pwrite(self._byte(pos), bytes(data) + bytes((k << self.blog)
                                                                     - len(data)))
                f.map.add((0, pos, k, 0))
                f.nblocks += k
                self._store(f, size=len(data))
                f = None
                pos += k
                i += 1
            if pos < fsbno + n:
                space.unalloc(pos, fsbno + n - pos, owner=None)

    def overwrite(self, ino: int, off: int, data) -> bool:
        """Write ``data`` at ``off`` straight to the image, with no
        transaction, where nothing but the data changes: every block of
        the range mapped, written (not unwritten, not a hole) and not
        shared, and the range inside the file's size; False (nothing done)
        otherwise.  The kernel's XFS does not log data either; the times
        the write changes are the caller's to set (:meth:`touch`)."""
        n = len(data)
        if n == 0 or off < 0:
            return False
        end = off + n
        # the read model's decoded inode and its extent list, both kept
        # until the inode is next written: no decode per write
        node = self.fs.inode(ino)
        if not node.is_reg or node.flags2 & C.XFS_DIFLAG2_REFLINK or end > node.size:
            return False
        blog = self.blog
        b0, b1 = off >> blog, self._blocks(end)
        exts = self._mapped(node, b0, b1)
        i = 0
        pieces = []
        pos = b0
        while pos < b1:
            if i >= len(exts):
                return False
            o, p, k, u = exts[i]
            if u or o > pos or o + k <= pos:
                return False
            hi = min(o + k, b1)
            pieces.append((pos, p + pos - o, hi - pos))
            pos = hi
            i += 1
        view = memoryview(data).cast("B")
        dev = self.dev
        for lblk, fsbno, k in pieces:
            bstart = lblk << blog
            ds, de = max(bstart, off), min((lblk + k) << blog, end)
            dev.pwrite(self._byte(fsbno) + ds - bstart, view[ds - off:de - off])
        return True

    def _mapped(self, node, b0: int, b1: int) -> list:
        """The records of the read model's decoded regular file ``node``
        overlapping its blocks [b0, b1), in order: from its extent list
        (decoded once, kept until the inode is next written), or looked up
        in a btree map not read whole since the inode changed (a write that
        allocates changes it), so that writes alternating between holes
        and written blocks do not read the whole map each time."""
        if node.format == C.XFS_DINODE_FMT_BTREE and not node.extents_loaded and \
                self._looked_up(node):
            off, space = node.fork_bounds(False)
            return ForkMap(self.fs, node.ino, node.format, node.raw[off:off + space], space,
                           node.nextents).range(b0, b1)
        exts = node.extents()
        i = max(bisect.bisect_right(exts, (b0, _INF)) - 1, 0)
        out = []
        while i < len(exts):
            r = exts[i]
            if r[0] >= b1:
                break
            if r[0] + r[2] > b0:
                out.append(r)
            i += 1
        return out

    def _looked_up(self, node) -> bool:
        """Whether :meth:`overwrite` looks up only its range in ``node``'s
        btree map (True) or reads the map whole (False, kept with the decoded
        inode until it changes): the whole map once as many lookups were
        made in this same decoded inode as make up the cost of reading
        every record (each lookup costs about LOOKUP_RECORDS records)."""
        seen = self._lookups
        if seen is None or seen[0] is not node:
            self._lookups = [node, 1]
            return True
        seen[1] += 1
        return seen[1] * LOOKUP_RECORDS < node.nextents

    def touch(self, ino: int, now_ns: int) -> None:
        """mtime and ctime set to ``now_ns`` (and the change count moved
        on) in the open transaction: the inode update of writes done by
        :meth:`overwrite`, as a write through the block map makes it."""
        self._store(_File(self, ino, True), now_ns=now_ns)

    def truncate(self, ino: int, size: int, touch: bool | None = None) -> None:
        """Set the file's size.  mtime and ctime change when the size does
        (or when ``touch`` says so, as ftruncate does)."""
        if size < 0:
            raise InvalidArgument(f"truncate to {size} bytes")
        if size > MAX_BYTES:
            raise FileTooBigError(f"truncate to {size} bytes: past the largest file size")
        if self._run(ino, self._truncate, ino, size, touch):
            # the size is set and logged; the rest past it goes in steps
            while self._run(ino, self._trim_eof, ino):
                pass

    def fallocate(self, ino: int, mode: int, off: int, length: int) -> None:
        """fallocate(2) for the modes listed in the module docstring."""
        if off < 0 or length <= 0:
            raise InvalidArgument(f"fallocate of {length} bytes at offset {off}")
        if mode & ~_VFS_MODES:
            raise UnsupportedError(f"fallocate mode {mode:#x}")
        if mode & FALLOC_FL_PUNCH_HOLE and mode & FALLOC_FL_ZERO_RANGE:
            raise UnsupportedError("fallocate: punch hole and zero range together")
        if mode & FALLOC_FL_PUNCH_HOLE and not mode & FALLOC_FL_KEEP_SIZE:
            raise UnsupportedError("fallocate: punch hole needs keep size")
        for only in (FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE):
            if mode & only and mode & ~only:
                raise InvalidArgument(f"fallocate mode {mode:#x}")
        if mode & FALLOC_FL_UNSHARE_RANGE and mode & ~(FALLOC_FL_UNSHARE_RANGE |
                                                       FALLOC_FL_KEEP_SIZE):
            raise InvalidArgument(f"fallocate mode {mode:#x}")
        if off + length > MAX_BYTES:
            raise FileTooBigError(f"fallocate to {off + length} bytes: past the largest "
                                  "file size")
        if mode & (FALLOC_FL_NO_HIDE_STALE | FALLOC_FL_COLLAPSE_RANGE |
                   FALLOC_FL_INSERT_RANGE):
            raise UnsupportedError(f"fallocate mode {mode:#x} is not supported")
        self._run(ino, self._fallocate, ino, mode, off, length)

    def remap(self, src: int, soff: int, dst: int, doff: int, length: int) -> int:
        """Share ``length`` bytes of file ``src`` at ``soff`` into file
        ``dst`` at ``doff`` (FICLONERANGE): offsets block-aligned, the
        length too unless the range ends at the source's end of file (then
        the destination's size grows to hold it).  Returns the bytes
        shared."""
        bs = self.bs
        if soff < 0 or doff < 0 or length < 0:
            raise InvalidArgument(f"remap of {length} bytes from {soff} to {doff}")
        if not self.w.reflink:
            raise UnsupportedError("this filesystem has no reflink feature (refcount btree)")
        if soff % bs or doff % bs:
            raise InvalidArgument(f"remap offsets {soff} and {doff} are not block-aligned")
        size = _File(self, src, False).size
        length = min(length, max(size - soff, 0))
        if length % bs and (soff + length != size or
                            doff + length < _File(self, dst, False).size):
            raise InvalidArgument(f"remap length {length} is not block-aligned and does not "
                                  "end both files")
        if not length:
            return 0
        if src == dst and soff < doff + length and doff < soff + length:
            raise InvalidArgument("remap ranges of one file overlap")
        blog = self.blog
        a, n = soff >> blog, self._blocks(length)
        done = 0
        while done < n:
            done += self._run(dst, self._remap, src, a + done, dst, (doff >> blog) + done,
                              n - done, doff + length)
        return length

    def _remap(self, src_ino: int, a: int, dst_ino: int, d: int, n: int,
               dst_end: int) -> int:
        """One transaction of a remap: up to TRUNCATE_STEP source records
        from block ``a`` into ``d``; returns the blocks it covered."""
        self._unhold(src_ino)
        self._unhold(dst_ino)
        src = _File(self, src_ino, True)
        dst = src if dst_ino == src_ino else _File(self, dst_ino, True)
        recs = src.map.range(a, a + n, TRUNCATE_STEP)
        covered = n
        if len(recs) >= TRUNCATE_STEP:
            # the rest in the next transaction: up to the end of the last record
            last = recs[-1]
            covered = min(n, last[0] + last[2] - a)
        space = self.w.space
        # the destination's old blocks go (a reference each, where shared)
        self._unmap(dst, d, d + covered)
        for f in (src, dst):
            if not f.reflink:
                f.reflink = f.map.shared = True
                f.d["di_flags2"] |= C.XFS_DIFLAG2_REFLINK
        for o, p, k, u in recs:
            lo, hi = max(o, a), min(o + k, a + covered)
            if hi <= lo or u:
                # unwritten source blocks are not shared: they read as
                # zeros, and the destination gets a hole there, as the
                # kernel's xfs_reflink_remap_extent leaves it
                continue
            phys = p + (lo - o)
            space.share(phys, hi - lo)
            dst.map.add((d + (lo - a), phys, hi - lo, u))
            dst.nblocks += hi - lo
        if dst is not src:
            self._store(src, times=False)
        self._store(dst, size=max(dst.size, dst_end))
        return covered

    def map_extent(self, ino: int, lblk: int, fsbno: int, n: int, unwritten: int) -> None:
        """Map blocks another step of the operation allocated (or shares)
        into a hole of the data fork (a BUI's map, xfs_bmapi_remap):
        di_nblocks grows, the size stays."""
        def run():
            f = _File(self, ino, True)
            f.map.add((lblk, fsbno, n, unwritten))
            f.nblocks += n
            self._store(f, times=False)
        self._run(ino, run)

    def unmap_extent(self, ino: int, lblk: int, n: int) -> None:
        """Unmap [lblk, lblk+n) of the data fork without freeing the blocks
        (a BUI's unmap, xfs_bunmapi with XFS_BMAPI_REMAP)."""
        def run():
            f = _File(self, ino, True)
            for _o, _p, k, _u in f.map.remove(lblk, lblk + n):
                f.nblocks -= k
            self._store(f, times=False)
        self._run(ino, run)

    def move_extents(self, ino: int, moves: list) -> None:
        """Give data extents of the data fork new blocks that another step
        allocated and filled (a shrink's move): ``moves`` are (lblk,
        blocks, [(lblk, fsbno, blocks)...], unwritten), each extent
        unmapped and its pieces mapped in its place, in one change of the
        inode (an unmap and a map each, as :meth:`unmap_extent` and
        :meth:`map_extent` make them; the size stays)."""
        def run():
            f = _File(self, ino, True)
            for lblk, n, pieces, unwritten in moves:
                for _o, _p, k, _u in f.map.remove(lblk, lblk + n):
                    f.nblocks -= k
                for o, fsbno, k in pieces:
                    f.map.add((o, fsbno, k, unwritten))
                    f.nblocks += k
            self._store(f, times=False)
        self._run(ino, run)

    def exchange_mappings(self, ino1: int, off1: int, ino2: int, off2: int, count: int, *,
                          isize1: int = -1, isize2: int = -1, set_sizes: bool = False,
                          ino1_written: bool = False, clear_reflink=(False, False)) -> int:
        """Exchange the data fork mappings of blocks [off1, off1+count) of
        file ``ino1`` with those of [off2, off2+count) of ``ino2``, as the
        kernel's xfs_exchmaps_finish_one steps do, in the open transaction:
        each step takes the next mapping of file 1 (a hole or an extent),
        trimmed to the mapping of file 2 at the same place, and where the
        two name different blocks the files trade them (the blocks are
        neither freed nor allocated).  With ``ino1_written`` the holes and
        unwritten extents of file 1 are skipped.  A file gaining a mapping
        past its size grows to cover it, up to ``isize1``/``isize2`` (its
        intended size; negative: none); with ``set_sizes`` the files end
        with those sizes.  If one file has shared blocks, both are marked so
        before; ``clear_reflink`` clears the mark after.  Returns the steps
        made."""
        if self.w.tx is None:
            raise RuntimeError("exchange_mappings runs in the caller's transaction")
        f1 = _File(self, ino1, True)
        f2 = _File(self, ino2, True)
        if f1.reflink != f2.reflink:
            for f in (f1, f2):
                f.reflink = f.map.shared = True
                f.d["di_flags2"] |= C.XFS_DIFLAG2_REFLINK
        if self.w.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64):
            # the wide extent counters, where the filesystem has them
            # (xfs_exchmaps_upgrade_extent_counts)
            for f in (f1, f2):
                if not f.nrext64:
                    d = f.d
                    d["di_flags2"] |= C.XFS_DIFLAG2_NREXT64
                    d["di_nextents"], d["di_anextents"] = d["di_anextents"], 0
                    f.nrext64 = True
        bs = self.bs
        steps = 0
        while count > 0:
            m1 = self._mapping(f1, off1, count)
            if ino1_written and (m1[1] is None or m1[3]):
                off1, off2, count = off1 + m1[2], off2 + m1[2], count - m1[2]
                continue
            m2 = self._mapping(f2, off2, m1[2])
            n = min(m1[2], m2[2])
            if m1[1] == m2[1]:
                if m1[1] is not None and m1[3] != m2[3]:
                    raise CorruptionError("bmap", f"inodes {ino1} and {ino2} map block "
                                          f"{m1[1]} written and unwritten", ino=ino1)
                off1, off2, count = off1 + n, off2 + n, count - n
                continue
            f1.map.remove(off1, off1 + n)
            f2.map.remove(off2, off2 + n)
            if m2[1] is not None:
                f1.map.add((off1, m2[1], n, m2[3]))
                f1.nblocks += n
                f2.nblocks -= n
            if m1[1] is not None:
                f2.map.add((off2, m1[1], n, m1[3]))
                f2.nblocks += n
                f1.nblocks -= n
            for f, off, isize in ((f1, off1, isize1), (f2, off2, isize2)):
                if isize >= 0:
                    grown = min((off + n) * bs, isize)
                    if grown > f.size:
                        f.size = grown
            off1, off2, count = off1 + n, off2 + n, count - n
            steps += 1
        if set_sizes:
            f1.size, f2.size = isize1, isize2
        for f, clear in zip((f1, f2), clear_reflink):
            if clear:
                f.reflink = f.map.shared = False
                f.d["di_flags2"] &= ~C.XFS_DIFLAG2_REFLINK
        self._store(f1, size=f1.size, times=False)
        self._store(f2, size=f2.size, times=False)
        return steps

    @staticmethod
    def _mapping(f: _File, lblk: int, count: int) -> tuple:
        """(lblk, fsbno or None for a hole, blocks, unwritten) of what maps
        ``lblk`` of ``f``, at most ``count`` blocks (xfs_bmapi_read of one
        mapping)."""
        r = f.map.next(lblk)
        if r is None or r[0] >= lblk + count:
            return (lblk, None, count, 0)
        o, p, n, u = r
        if o > lblk:
            return (lblk, None, o - lblk, 0)
        return (lblk, p + lblk - o, min(o + n - lblk, count), u)

    def copy_range(self, src: int, soff: int, dst: int, doff: int, length: int) -> int:
        """copy_file_range(2): up to ``length`` bytes (short at the source's
        end of file); where source and destination offsets fall alike in
        their blocks the whole blocks between are shared (as the kernel's
        XFS does on a reflink filesystem), the rest copied."""
        size = _File(self, src, False).size
        length = min(length, max(size - soff, 0))
        if length <= 0:
            return 0
        bs = self.bs
        if src == dst and soff < doff + length and doff < soff + length:
            raise InvalidArgument("copy ranges of one file overlap")
        head = -soff % bs
        if not self.w.reflink or head != -doff % bs or head >= length:
            self.copy_bytes(src, soff, dst, doff, length)
            return length
        whole = (length - head) // bs * bs
        if head:
            self.copy_bytes(src, soff, dst, doff, head)
        if soff + length == size and doff + length >= _File(self, dst, False).size:
            # the source's last partial block goes with the rest where it
            # ends the destination too (else it is copied, as the kernel's
            # remap shortened to whole blocks leaves it)
            whole = length - head
        if whole:
            self.remap(src, soff + head, dst, doff + head, whole)
        tail = length - head - whole
        if tail:
            self.copy_bytes(src, soff + head + whole, dst, doff + head + whole, tail)
        return length

    def copy_bytes(self, src: int, soff: int, dst: int, doff: int, length: int) -> None:
        """Copy data between files by reading and writing (holes are written
        as zeros)."""
        step = 1 << 20
        pos = 0
        while pos < length:
            k = min(step, length - pos)
            self.write(dst, doff + pos, self.read(src, soff + pos, k))
            pos += k

    def release(self, ino: int) -> None:
        """The file's last close: blocks held past its end go back, and
        blocks the image holds past its end are freed (unless preallocated
        or append-only)."""
        self._unhold(ino)
        raw = self.w.inodes.raw_inode(ino)
        d = DINODE.unpack(raw)
        if not pystat.S_ISREG(d["di_mode"]) or d["di_flags"] & (C.XFS_DIFLAG_PREALLOC |
                                                                 C.XFS_DIFLAG_APPEND):
            return
        if d["di_flags2"] & C.XFS_DIFLAG2_REFLINK:
            return
        f = _File(self, ino, False)
        last = f.map.last()
        if last is None or last[0] + last[2] <= self._blocks(f.size):
            return
        while self._run(ino, self._trim_eof, ino):
            pass

    def evict_trim(self, ino: int, size: int) -> bool:
        """What the kernel's inactivation of an evicted inode does to a
        regular file (xfs_can_free_eofblocks, xfs_free_eofblocks), in the
        open transaction: the data blocks mapped past ``size`` (the size its
        in-memory inode has, which may be older than the one on disk) are
        freed, unless the file is preallocated or append-only or ``size`` is
        0.  The size on disk stays.  True when blocks were freed."""
        d = DINODE.unpack(self.w.inodes.raw_inode(ino))
        if not pystat.S_ISREG(d["di_mode"]) or not size or \
                d["di_flags"] & (C.XFS_DIFLAG_PREALLOC | C.XFS_DIFLAG_APPEND):
            return False
        f = _File(self, ino, True)
        last = f.map.last()
        if last is None or last[0] + last[2] <= self._blocks(size):
            return False
        self._unmap(f, self._blocks(size), _END)
        self._store(f, times=False)
        return True

    def drop_preallocation(self) -> None:
        """Give back the blocks held past the end of every growing file (a
        mount calls this before it unmounts, or when space runs short)."""
        self._unhold_all()

    # -- transactions ------------------------------------------------------------------------
    def _run(self, ino: int, fn, *args):
        """Run ``fn`` in the open transaction, else in one of its own; when
        space runs out while blocks are held for growing files, give those
        back and try once more."""
        w = self.w
        if w.tx is not None:
            w.tx.onabort.append(lambda _tx, ino=ino: self._unhold(ino))
            self._caller_tx = True
            try:
                return fn(*args)
            except NoSpaceError:
                # the caller aborts; its retry finds the held blocks free
                self._unhold_all()
                raise
            finally:
                self._caller_tx = False
        for attempt in (0, 1):
            w.begin()
            try:
                out = fn(*args)
                w.commit()
                return out
            except NoSpaceError:
                w.abort()
                self._unhold(ino)
                if attempt or not self.held:
                    raise
                self._unhold_all()
            except BaseException:
                w.abort()
                self._unhold(ino)
                raise

    def _store(self, f: _File, *, size: int | None = None, times: bool = True,
               flags: int = 0, now_ns: int | None = None) -> None:
        """Put the changed inode back: fork, size, block count, times."""
        w = self.w
        d = f.d
        fmt, lit = f.map.finish()
        raw = bytearray(f.raw)
        raw[_CORE:_CORE + f.space] = lit
        d["di_format"] = fmt
        if f.nrext64:
            d["di_big_nextents"] = f.map.nextents
        else:
            d["di_nextents"] = f.map.nextents
        d["di_nblocks"] = f.nblocks + f.map.bmbt_delta
        f.map.bmbt_delta = 0
        if size is not None:
            d["di_size"] = size
            f.size = size
        if times:
            ts = encode_ts(w.now_ns() if now_ns is None else now_ns,
                           bool(d["di_flags2"] & C.XFS_DIFLAG2_BIGTIME))
            d["di_mtime"] = d["di_ctime"] = ts
        d["di_flags"] |= flags
        d["di_changecount"] += 1
        packed = DINODE.pack(d)
        raw[:len(packed)] = packed
        w.inodes.put_inode(f.ino, w.enc.seal(raw))

    # -- helpers -----------------------------------------------------------------------------
    def _byte(self, fsbno: int) -> int:
        return self.fs.fsb_to_daddr(fsbno) << 9

    def _blocks(self, nbytes: int) -> int:
        return (nbytes + self.bs - 1) >> self.blog

    def _unshare(self, f: _File, a: int, b: int) -> None:
        """Copy on write: the blocks mapped in [a, b) that other files share
        are replaced by private copies (new blocks holding the same data,
        unwritten ones left unwritten), so that the file's data can then be
        changed in place.  The old blocks lose one reference each.  The
        copies are written before the transaction that maps them commits,
        as all new data is: a crash leaves the file on its old blocks."""
        if not f.reflink:
            return
        space = self.w.space
        todo = []
        for o, p, n, u in f.map.range(a, b):
            lo, hi = max(o, a), min(o + n, b)
            phys = p + (lo - o)
            for sp, sn, _c in space.shared_blocks(phys, hi - lo):
                todo.append((lo + (sp - phys), sp, sn, u))
        if not todo:
            return
        blog = self.blog
        dev = self.dev
        for lblk, old, n, u in todo:
            pieces = space.alloc_run(old, n, owner=None)
            if not u:
                pos = 0
                for fsbno, k in pieces:
                    dev.copy_from(dev.fd, self._byte(old + pos), self._byte(fsbno), k << blog)
                    pos += k
            f.map.remove(lblk, lblk + n)
            space.free_shared(old, n, owner=None)
            pos = 0
            for fsbno, k in pieces:
                f.map.add((lblk + pos, fsbno, k, u))
                pos += k

    def _zero_written(self, f: _File, lo: int, hi: int) -> None:
        """Zero the bytes [lo, hi) that written extents hold (holes and
        unwritten extents read as zeros already)."""
        if hi <= lo:
            return
        blog = self.blog
        self._unshare(f, lo >> blog, self._blocks(hi))
        for o, p, n, u in f.map.range(lo >> blog, self._blocks(hi)):
            if u:
                continue
            a, b = max(o << blog, lo), min((o + n) << blog, hi)
            if b <= a:
                continue
            at = self._byte(p) + a - (o << blog)
            if b - a <= _ZERO_CHUNK:
                self.dev.pwrite(at, bytes(b - a))
            else:
                self.dev.zero_range(at, b - a)

    def _unmap(self, f: _File, a: int, b: int, limit: int | None = None) -> bool:
        """Unmap logical blocks [a, b) (the first ``limit`` records of them)
        and free what they mapped; True when records remain."""
        space = self.w.space
        gone = f.map.remove(a, b, limit)
        # (the map unmapped them from the rmapbt)
        free = space.free_shared if f.reflink else space.free_extent
        for _o, p, n, _u in gone:
            free(p, n, owner=None)
            f.nblocks -= n
        return limit is not None and len(gone) >= limit and f.map.next(a) is not None \
            and f.map.next(a)[0] < b

    # -- held blocks (speculative preallocation) ---------------------------------------------
    def _unhold(self, ino: int) -> None:
        self.held.pop(ino, None)
        self.w.space.reserved.pop(ino, None)

    def _unhold_all(self) -> None:
        for ino in list(self.held):
            self._unhold(ino)

    def _hold(self, ino: int, lblk: int, fsbno: int, count: int) -> None:
        if count <= 0:
            self._unhold(ino)
            return
        agno, agbno = self.w.space.fsb_split(fsbno)
        self.held[ino] = [lblk, fsbno, count]
        self.w.space.reserved[ino] = (agno, agbno, agbno + count)

    def _take_held(self, ino: int, lblk: int, want: int):
        """(fsbno, n) taken from the blocks held for this file when they
        continue it at ``lblk``, else None."""
        h = self.held.get(ino)
        if h is None:
            return None
        hl, hf, hn = h
        if hl != lblk:
            if lblk >= hl:
                self._unhold(ino)          # the file went elsewhere
            return None
        self.w.space.reserved.pop(ino, None)
        got = self.w.space.alloc_exact(hf, min(want, hn), owner=None)
        if not got:
            self._unhold(ino)
            return None
        self._hold(ino, hl + got, hf + got, hn - got)
        return hf, got

    def _free_blocks(self) -> int:
        w = self.w
        total = 0
        for agno in range(w.sb.agcount):
            ag = w.ags.get(agno)
            if ag is not None:
                total += ag.agf["agf_freeblks"] + ag.flcount
                continue
            c = w._ag_counters.get(agno)
            if c is None:
                agf = self.fs.agf(agno)
                c = (0, 0, agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"])
            total += c[2]
        return total

    def _prealloc_blocks(self, f: _File, lblk: int) -> int:
        """Blocks to hold past a write that fills the hole at ``lblk`` up to
        the end of the file: the kernel's speculative preallocation size,
        in outline."""
        mn = self.prealloc_min
        if f.size < PREALLOC_MIN_BYTES:
            # the kernel holds nothing past a file this small, whose pages
            # wait in memory and are allocated together; fstool allocates
            # as it writes, so the least hold stands in for that
            return mn
        prev = f.map.prev(lblk)
        if prev is None or prev[0] + prev[2] < lblk:
            return mn
        plen = prev[2]
        for _ in range(16):
            if plen > MAXEXTLEN // 2:
                break
            r = f.map.prev(prev[0])
            if r is None or r[0] + r[2] != prev[0] or r[1] + r[2] != prev[1]:
                break
            plen += r[2]
            prev = r
        n = plen * 2
        if n > MAXEXTLEN:
            n = lblk
        n = min(n, 1 << 21)
        free = self._free_blocks()
        dblocks = self.w.sb.fields["sb_dblocks"]
        shift = 0
        for pct in (5, 4, 3, 2, 1):
            if free < dblocks * pct // 100:
                shift = shift + 1 if shift else 2
        n >>= shift
        if n:
            n = 1 << (n.bit_length() - 1)
        n = min(n, MAXEXTLEN)
        if n >= free:
            n = free >> 4
        return max(n, mn)

    # -- allocation ---------------------------------------------------------------------------
    def _target(self, f: _File, lblk: int) -> int:
        """Where blocks for ``lblk`` should go: after the previous extent
        (leaving room for the gap), before the next one, else near the inode."""
        agblocks = self.w.sb.fields["sb_agblocks"]
        space = self.w.space
        r = f.map.prev(lblk)
        if r is not None:
            end = r[1] + r[2]
            t = end + (lblk - (r[0] + r[2]))
            agno, agbno = space.fsb_split(t)
            if agno == space.fsb_split(end - 1)[0] and agbno < agblocks:
                return t
            return end - 1
        r = f.map._ge(lblk)
        if r is not None and r[1] - (r[0] - lblk) >= (space.fsb_split(r[1])[0] <<
                                                       self.w.sb.agblklog):
            return r[1] - (r[0] - lblk)
        return self.w.inodes.ino_fsb(f.ino)

    def _allocate(self, f: _File, a: int, b: int, grows: bool) -> list:
        """Allocate blocks for the hole [a, b): [(lblk, fsbno, n)]."""
        space = self.w.space
        out = []
        pos = a
        target = None
        while pos < b:
            want = b - pos
            got = self._take_held(f.ino, pos, want)
            if got is not None:
                fsbno, n = got
            else:
                if target is None:
                    target = self._target(f, pos)
                extra = 0
                if grows and not out and pos + want >= self._blocks(f.size):
                    extra = self._prealloc_blocks(f, pos)
                # mapped to the file by the block map as it takes them
                fsbno, n = space.alloc_blocks(target, 1, min(want + extra, MAXEXTLEN),
                                              owner=None)
                if n > want:
                    space.unalloc(fsbno + want, n - want, owner=None)
                    self._hold(f.ino, pos + want, fsbno + want, n - want)
                    n = want
            out.append((pos, fsbno, n))
            pos += n
            target = fsbno + n
        return out

    def _map_holes(self, f: _File, a: int, b: int, unwritten: int) -> None:
        """Map every hole in [a, b) with new blocks."""
        holes = []
        pos = a
        for o, _p, n, _u in f.map.range(a, b):
            if o > pos:
                holes.append((pos, o))
            pos = max(pos, o + n)
        if pos < b:
            holes.append((pos, b))
        need = sum(y - x for x, y in holes)
        if need > self._free_blocks():
            raise NoSpaceError(f"inode {f.ino}: {need} blocks wanted, fewer are free")
        for x, y in holes:
            for lblk, fsbno, n in self._allocate(f, x, y, False):
                f.map.add((lblk, fsbno, n, unwritten))
                f.nblocks += n

    # -- the operations ------------------------------------------------------------------------
    def _widen(self, f: _File, off: int, data):
        """(offset, data) of a write into a hole inside the file's size
        widened to the hole's part of the aligned run of ``fill_blocks``
        blocks around it (never past the end of the file), zeros on either
        side: the blocks are allocated and written once, so that the writes
        that follow into the same run overwrite them in place (with no
        transaction, see :meth:`overwrite`) instead of each filling a hole of
        its own.  ext4 writes zeros the same way rather than leave small
        unwritten pieces (its extent_max_zeroout_kb).  What reads back is
        unchanged (a hole reads as zeros); the run counts as data for
        SEEK_DATA and in st_blocks.  Unchanged when free space is short."""
        k = self.fill_blocks
        blog = self.blog
        end = off + len(data)
        b0, b1 = off >> blog, self._blocks(end)
        fmap = f.map
        lo, hi = b0, b1
        if fmap.lookup(b0) is None:
            r = fmap.prev(b0)
            lo = max(b0 - b0 % k, r[0] + r[2] if r is not None else 0)
        if fmap.lookup(b1 - 1) is None:
            r = fmap._ge(b1)
            hi = min(b1 + (-b1) % k, self._blocks(f.size), r[0] if r is not None else _END)
        # a side grows only over holes: the partial blocks at the ends of
        # the write that are mapped keep their bytes around it
        start = lo << blog if lo < b0 else off
        stop = min(hi << blog, f.size) if hi > b1 else end
        if start == off and stop == end:
            return off, data
        if self._free_blocks() < FILL_ROOM * k:
            return off, data
        buf = bytearray(stop - start)
        buf[off - start:end - start] = data
        return start, memoryview(buf)

    def _write(self, ino: int, off: int, data, hold: bool = True) -> int:
        f = _File(self, ino, True)
        asked = len(data)
        if self.fill_blocks > 1 and off + asked <= f.size and not f.reflink:
            off, data = self._widen(f, off, data)
        blog = self.blog
        end = off + len(data)
        size0 = f.size
        b0, b1 = off >> blog, self._blocks(end)
        grows = end > size0 and hold
        # 0. blocks other files share are copied first (copy on write)
        self._unshare(f, b0, b1)
        # 1. decide where every block goes (allocations first: an ENOSPC
        #    leaves the file as it was)
        plan = []
        pos = b0
        for o, p, n, u in f.map.range(b0, b1):
            lo, hi = max(o, b0), min(o + n, b1)
            if lo > pos:
                plan += [(x, y, z, 2) for x, y, z in self._allocate(f, pos, lo, grows)]
            plan.append((lo, p + lo - o, hi - lo, u))
            pos = hi
        if pos < b1:
            plan += [(x, y, z, 2) for x, y, z in self._allocate(f, pos, b1, grows)]
        # 2. the old end of file: written blocks between it and the write read zeros
        if off > size0:
            self._zero_written(f, size0, off)
        # 3. the data, then the map
        dev = self.dev
        for lblk, fsbno, n, kind in plan:
            bstart, bend = lblk << blog, (lblk + n) << blog
            ds, de = max(bstart, off), min(bend, end)
            chunk = data[ds - off:de - off]
            if kind == 0:
                dev.pwrite(self._byte(fsbno) + ds - bstart, chunk)
                continue
            if ds > bstart or de < bend:
                buf = bytearray(bend - bstart)
                buf[ds - bstart:de - bstart] = chunk
                chunk = buf
            dev.pwrite(self._byte(fsbno), chunk)
            if kind == 1:
                f.map.set_state(lblk, lblk + n, 0)
            else:
                f.map.add((lblk, fsbno, n, 0))
                f.nblocks += n
        self._store(f, size=max(size0, end))
        return asked

    def _truncate(self, ino: int, size: int, touch) -> None:
        self._unhold(ino)
        f = _File(self, ino, True)
        size0 = f.size
        more = False
        if size < size0 or (size == size0 and f.map.nextents):
            self._zero_written(f, size, min(self._blocks(size) << self.blog, size0))
            more = self._unmap(f, self._blocks(size), _END, self._step())
        elif size > size0:
            self._zero_written(f, size0, size)
        self._store(f, size=size, times=size != size0 if touch is None else touch)
        return more

    def _trim_eof(self, ino: int) -> bool:
        """Free (some of) the blocks past the end of the file; True when
        more remain for another transaction."""
        f = _File(self, ino, True)
        more = self._unmap(f, self._blocks(f.size), _END, self._step())
        self._store(f, times=False)
        return more

    def _step(self) -> int | None:
        """Records one transaction unmaps when it is fstool's own (a large
        truncate goes in steps, as the kernel's xfs_itruncate_extents does;
        blocks past the end of a file meanwhile are harmless)."""
        return None if self._caller_tx else TRUNCATE_STEP

    def _fallocate(self, ino: int, mode: int, off: int, length: int) -> None:
        self._unhold(ino)
        f = _File(self, ino, True)
        blog = self.blog
        end = off + length
        flags = 0
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
            # whole blocks are unmapped, partial ones zeroed up to EOF
            a, b = self._blocks(off), end >> blog
            if b > a:
                self._unmap(f, a, b)
            self._zero_written(f, off, min(end, f.size))
        if not mode & FALLOC_FL_PUNCH_HOLE:
            self._map_holes(f, off >> blog, self._blocks(end), 1)
            flags = C.XFS_DIFLAG_PREALLOC
        size = None
        if not mode & FALLOC_FL_KEEP_SIZE and end > f.size:
            # growing: written blocks past the old end read as zeros, as
            # the kernel's size change makes them
            self._zero_written(f, f.size, end)
            size = end
        self._store(f, size=size, flags=flags)
