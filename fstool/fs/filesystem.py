"""The filesystem object: geometry, verified metadata reads, inodes and paths.

``Filesystem`` is what :func:`fstool.open_image` returns.  Everything is read
on demand through a bounded cache; nothing reads the whole image.
"""
from __future__ import annotations

import io
import itertools
import os
import struct
from collections import OrderedDict
from typing import Iterator, NamedTuple

from ..errors import (BadValue, CorruptionError, ImageTruncatedError, InvalidArgument,
                      IsADirectoryImageError, NotADirectoryImageError, NotFoundError,
                      NotXfsError, SymlinkLoopError)
from ..format import constants as C
from ..format.structs import AGF, AGFL, AGI
from ..io import verify as V
from ..io.buf import Buf, BufferCache
from ..format import metadump as M
from ..io.device import Device
from ..io.dumpfile import DumpImage
from ..io.logdev import paired
from . import attr as xattr
from . import btree
from . import dir as xdir
from . import parent as pptr
from .._backend import parsers
from .inode import Inode
from .osapi import FileReader, ImageDirEntry, ScandirIterator
from .superblock import Superblock
from ..log import Log
from ..errors import LogDeviceNeeded, LogDeviceTooSmall, ReadOnlyError

MAX_SYMLINK_HOPS = 40
DIR_INODES_CACHED = 1024      # decoded directory inodes kept
CLUSTERS_CACHED = 64          # inode clusters kept (1 MiB with 512-byte inodes)
DENTRIES_CACHED = 4096        # (directory, name) -> inode entries kept
WALK_BATCH = 256              # inodes decoded per native call while walking
_DOT = (b".", b"..")


class DirEntry(NamedTuple):
    """A name in a directory: ``name`` (bytes), ``ino`` and ``ftype``."""
    name: bytes
    ino: int
    ftype: int


class Filesystem:
    def __init__(self, path, cache_bytes: int = 64 << 20, writable: bool = False, *,
                 logdev=None):
        self.dev = Device(path, writable=writable)
        # an external log: the file given for it (``--logdev``), opened on use
        self.logdev_path = logdev if logdev is not None else paired(path)
        self._log_dev = None
        try:
            if self.dev.size < C.BBSIZE:
                raise NotXfsError("superblock", f"{self.dev.path}: {self.dev.size} bytes is "
                                  "too small to hold an XFS superblock", agno=0, block=0)
            head = self.dev.pread(0, min(self.dev.size, 32768))
            self.sb = sb = Superblock(head[:max(C.BBSIZE, _sectsize_guess(head))])
            need = sb.dblocks * sb.blocksize
            if self.dev.size < need:
                raise ImageTruncatedError(
                    f"{self.dev.path}: image is truncated: the superblock describes "
                    f"{need} bytes but the file holds {self.dev.size}")
        except BaseException:
            self.dev.close()
            raise
        if self.logdev_path is None and self.external_log and self.dev.dump is not None and \
                self.dev.dump.dump.compat & M.XFS_MD2_COMPAT_EXTERNALLOG:
            # a v2 metadump read in place that holds the external log
            self._log_dev = DumpImage(self.dev.dump.dump, log=True)
        self.cache = BufferCache(cache_bytes, block_bb=1 << (sb.blocklog - C.BBSHIFT))
        # decoded directory inodes (lookups go through them again and again)
        # and the last inode clusters read: small on purpose, so that walking
        # a large tree neither evicts the metadata cache nor grows with it.
        # Writers drop both with ``_inodes.clear()`` (see drop_caches).
        self._inodes = _InodeCache(DIR_INODES_CACHED, CLUSTERS_CACHED, DENTRIES_CACHED)
        self._agbno_mask = (1 << sb.agblklog) - 1
        self._bb_per_fsb_log = sb.blocklog - C.BBSHIFT
        self._ag_len = [sb.agblocks] * (sb.agcount - 1) + \
            [sb.dblocks - (sb.agcount - 1) * sb.agblocks]
        # the kernel's inode cluster: 8 KiB scaled by the inode size over 256
        cluster_bytes = max(sb.blocksize, 8192 * sb.inodesize // 256)
        self._cluster_blocks = max(1, cluster_bytes >> sb.blocklog)
        self.uuid = sb.meta_uuid
        self._blocklog = sb.blocklog
        self._agblklog = sb.agblklog
        self._agblocks = sb.agblocks
        # what parsers.check_extents needs to keep an extent inside its AG
        self._extent_bounds = (sb.agblklog, sb.agblocks, sb.agcount, self._ag_len[-1])
        self._read_geometry = self._extent_bounds + (sb.blocklog,)
        self._set_read_ctx()
        # what stat() reports for every file: a device number made from the
        # uuid (one per image), the kernel's preferred I/O size on 4 KiB pages
        self.st_dev = int.from_bytes(self.uuid[:4], "big") & 0x7FFFFFFF
        self.st_blksize = max(4096, sb.blocksize)
        self._stat_ctx = (self.st_dev, self.st_blksize, self._bb_per_fsb_log)
        self._geometry = (sb.agcount, sb.agblocks, self._ag_len[-1], sb.inopblog,
                          sb.agino_log, self._cluster_blocks, self._bb_per_fsb_log,
                          sb.inodelog)

    # -- the device -------------------------------------------------------
    @property
    def dev(self):
        """The image (a :class:`~fstool.io.device.Device`, or a look-alike
        put in its place, such as the in-memory replay's overlay)."""
        return self._dev

    @dev.setter
    def dev(self, dev) -> None:
        self._dev = dev
        if hasattr(self, "_read_geometry"):
            self._set_read_ctx()

    def _set_read_ctx(self) -> None:
        """What parsers.single_extent_read needs: the geometry, the image's
        descriptor and size, and a read-ahead state for small files read one
        after the other (only while nothing writes: the window it keeps
        would go stale).  The descriptor is -1 (every read takes the
        device's own pread) once closed, when the device is a look-alike,
        whose bytes need not be the file's, or a partition of a disk image
        (its offsets are not the file's)."""
        dev = self._dev
        fd = dev.fd if type(dev) is Device and dev.fd >= 0 and not dev.start and \
            dev.dump is None else -1
        ra = parsers.read_ahead_state() if fd >= 0 and not dev.writable else None
        self._read_ctx = self._read_geometry + (fd, dev.size if fd >= 0 else 0, ra)

    # -- the log ------------------------------------------------------------
    @property
    def external_log(self) -> bool:
        """Whether the log is on a device of its own (mkfs.xfs -l logdev=)."""
        return self.sb.logstart == 0

    @property
    def logdev_given(self) -> bool:
        """Whether the log can be reached: an internal log, or an external
        one whose device was given."""
        return not self.external_log or self.logdev_path is not None or \
            self._log_dev is not None

    def require_log(self) -> None:
        """Raise :class:`LogDeviceNeeded` when the log is external and its
        device was not given (:class:`LogDeviceTooSmall` when the device
        given is shorter than the log)."""
        self._require_given()
        if self.external_log:
            self.log_dev                # opened now: one too small is said here

    def _require_given(self) -> None:
        if not self.logdev_given:
            raise LogDeviceNeeded(
                f"{self._dev.path}: the log is on an external device: pass --logdev FILE "
                "(the file or device given to mkfs.xfs -l logdev=)")

    def _log_size_fits(self, dev) -> None:
        """Raise :class:`LogDeviceTooSmall` when the external log device
        ``dev`` is shorter than the log the superblock describes."""
        need = self.sb.logblocks * self.sb.blocksize
        if dev.size < need:
            raise LogDeviceTooSmall(
                f"{dev.path}: the log device holds {dev.size} bytes, the superblock's log "
                f"needs {need} ({self.sb.logblocks} blocks of {self.sb.blocksize}): the wrong "
                "--logdev, or one cut short")

    @property
    def log_dev(self):
        """The device the log is on: the image itself, or the external log
        device (opened on first use, writable when the image is); without
        one given, :class:`LogDeviceNeeded`."""
        if not self.external_log:
            return self._dev
        if self._log_dev is None:
            self._require_given()
            # a partition of a disk is named as images are (FILE@N); a log
            # file has no partition table to look for
            dev = Device(self.logdev_path, writable=self._dev.writable, whole=True)
            try:
                self._log_size_fits(dev)
            except BaseException:
                dev.close()
                raise
            self._log_dev = dev
        return self._log_dev

    def open_log_writable(self, image_out):
        """The log's device opened for writing, for a writer that opened
        ``image_out`` (the image, writable) itself: that one for an
        internal log, else the external log device opened anew (the
        caller closes it when it is not ``image_out``)."""
        if not self.external_log:
            return image_out
        self.require_log()
        dev = Device(self.logdev_path, writable=True, whole=True)
        try:
            self._log_size_fits(dev)
        except BaseException:
            dev.close()
            raise
        return dev

    @property
    def log_start_daddr(self) -> int:
        """The log's first sector on :attr:`log_dev`."""
        return 0 if self.external_log else self.fsb_to_daddr(self.sb.logstart)

    def log_sync(self) -> None:
        """Flush the log device, and the image with it when the log is its
        own: a log record may say (in its tail) that in-place writes are
        done, which must then be on disk too."""
        if self._log_dev is not None:
            self._dev.fsync()
        self.log_dev.fsync()

    @property
    def log(self):
        """The internal log, read-only (:class:`fstool.log.Log`)."""
        if getattr(self, "_log", None) is None:
            self._log = Log(self)
        return self._log

    # -- lifetime ---------------------------------------------------------
    def close(self) -> None:
        self._read_ctx = self._read_geometry + (-1, 0, None)
        self._dev.close()
        if self._log_dev is not None:
            self._log_dev.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- geometry -----------------------------------------------------------
    def agb_to_daddr(self, agno: int, agbno: int) -> int:
        return (agno * self.sb.agblocks + agbno) << (self.sb.blocklog - C.BBSHIFT)

    def fsb_to_daddr(self, fsbno: int) -> int:
        sb = self.sb
        # the AG number is 32 bits wide (XFS_FSB_TO_AGNO): bits above it are
        # dropped, by the kernel and xfs_repair alike
        agno = (fsbno >> sb.agblklog) & 0xFFFFFFFF
        agbno = fsbno & ((1 << sb.agblklog) - 1)
        if agno >= sb.agcount or agbno >= sb.agblocks:
            raise CorruptionError("block map", f"block {fsbno} (AG {agno} block {agbno}) "
                                  "lies outside the filesystem", agno=agno, block=agbno)
        return self.agb_to_daddr(agno, agbno)

    def _fsb_offset(self, fsbno: int) -> int:
        """Byte offset of a filesystem block already known to lie inside its
        AG (an extent that passed check_extents)."""
        return (((fsbno >> self._agblklog) * self._agblocks + (fsbno & self._agbno_mask))
                << self._blocklog)

    def ag_length(self, agno: int) -> int:
        """Blocks in AG ``agno`` (the last AG may be shorter)."""
        return self._ag_len[agno]

    def ino_location(self, ino: int) -> tuple[int, int, int]:
        """(agno, agbno, index within block) of an inode number, validated."""
        sb = self.sb
        agno = ino >> sb.agino_log
        agino = ino & ((1 << sb.agino_log) - 1)
        agbno = agino >> sb.inopblog
        if agno >= sb.agcount or agbno >= self.ag_length(agno) or agbno == 0:
            raise CorruptionError("inode number", f"{ino} lies outside the filesystem",
                                  agno=agno, block=agbno, ino=ino)
        return agno, agbno, agino & (sb.inopblock - 1)

    # -- metadata reads -----------------------------------------------------
    def read_meta(self, daddr: int, length: int, bt: V.BufType, *, owner=None,
                  agno=None, block=None, ino=None, pieces=None, keep=True):
        """Read and verify one metadata buffer (cached); its contents.
        ``pieces`` lists (daddr, nbytes) for buffers spread over
        discontiguous extents.  ``keep=False``: a buffer not cached is read
        and verified but not cached, and its bytes are returned as read, to
        be looked at, not changed (a block read once, as check reads
        directory blocks)."""
        if not keep and self.cache.get((daddr, length)) is None:
            return self._read_verified(daddr, length, bt, pieces, owner, agno, block, ino)[0]
        return self.get_buf(daddr, length, bt, owner=owner, agno=agno, block=block, ino=ino,
                            pieces=pieces, keep=keep).data

    def get_buf(self, daddr: int, length: int, bt: V.BufType, *, owner=None, agno=None,
                block=None, ino=None, pieces=None, keep=True) -> Buf:
        """The cached :class:`~fstool.io.buf.Buf` for a metadata block, read
        and verified as ``bt`` on first use.  Inside a write session this is
        the buffer the open transaction changes.  With ``keep=False`` a
        buffer read now is not added to the cache."""
        key = (daddr, length)
        buf = self.cache.get(key)
        if buf is not None:
            if bt.name not in buf.verified and not (buf.dirty or buf.new or buf.pins):
                V.verify(buf.data, bt, uuid=self.uuid, daddr=daddr, owner=owner, agno=agno,
                         block=block, ino=ino)
                buf.verified.add(bt.name)
            return buf
        raw, pieces = self._read_verified(daddr, length, bt, pieces, owner, agno, block, ino)
        buf = Buf(daddr, length, bytearray(raw), bt, pieces)
        buf.verified.add(bt.name)
        return self.cache.insert(buf) if keep else buf

    def _read_verified(self, daddr, length, bt, pieces, owner, agno, block, ino):
        """(the bytes of a metadata buffer read from the image and verified
        as ``bt``, its pieces or None for one contiguous read)."""
        if pieces and len(pieces) > 1:
            raw = b"".join(self.dev.pread(d << C.BBSHIFT, n) for d, n in pieces)
        else:
            pieces = None
            raw = self.dev.pread(daddr << C.BBSHIFT, length)
        V.verify(raw, bt, uuid=self.uuid, daddr=daddr, owner=owner, agno=agno,
                 block=block, ino=ino)
        return raw, pieces

    def _ag_sector(self, agno: int, sector: int, bt: V.BufType) -> bytes:
        if not 0 <= agno < self.sb.agcount:
            raise BadValue(f"AG {agno} does not exist (the filesystem has "
                           f"{self.sb.agcount} AGs)")
        ss = self.sb.sectsize
        daddr = self.agb_to_daddr(agno, 0) + sector * (ss >> C.BBSHIFT)
        return self.read_meta(daddr, ss, bt, agno=agno, block=0)

    def superblock_raw(self, agno: int = 0) -> bytes:
        """The primary (AG 0) or a secondary superblock sector, verified."""
        return self._ag_sector(agno, 0, V.SB)

    def _ag_header(self, agno: int, sector: int, bt: V.BufType, layout, prefix: str) -> dict:
        """A verified AG header sector decoded with ``layout``; its sequence
        number and (for the AGF and AGI) its length must fit this AG."""
        buf = self._ag_sector(agno, sector, bt)
        d = layout.unpack(buf)
        if d[prefix + "seqno"] != agno:
            raise CorruptionError(bt.name, f"sequence number {d[prefix + 'seqno']}",
                                  agno=agno, field=prefix + "seqno")
        length = d.get(prefix + "length")
        if length is not None and length != self.ag_length(agno):
            raise CorruptionError(bt.name, f"length {length}, expected "
                                  f"{self.ag_length(agno)}", agno=agno, field=prefix + "length")
        d["_raw"] = buf
        return d

    def agf(self, agno: int) -> dict:
        return self._ag_header(agno, 1, V.AGF, AGF, "agf_")

    def agi(self, agno: int) -> dict:
        return self._ag_header(agno, 2, V.AGI, AGI, "agi_")

    def agfl(self, agno: int) -> dict:
        d = self._ag_header(agno, 3, V.AGFL, AGFL, "agfl_")
        raw = d["_raw"]
        n = (self.sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        d["agfl_bno"] = [int.from_bytes(raw[C.XFS_AGFL_HDR_SIZE + 4 * i:
                                            C.XFS_AGFL_HDR_SIZE + 4 * i + 4], "big")
                         for i in range(n)]
        return d

    # -- btrees ---------------------------------------------------------------
    def ag_btree(self, agno: int, bt: btree.BtreeType) -> btree.BtreeReader:
        length = self.ag_length(agno)

        def to_daddr(agbno: int) -> int:
            if not 0 < agbno < length:
                raise CorruptionError(bt.buftype.name, f"pointer to block {agbno} outside "
                                      f"the AG ({length} blocks)", agno=agno, block=agbno)
            return self.agb_to_daddr(agno, agbno)
        return btree.BtreeReader(self, bt, agno=agno, owner=agno, addr_to_daddr=to_daddr)

    def bmbt_reader(self, ino: int) -> btree.BtreeReader:
        return btree.BtreeReader(self, btree.BMBT, agno=None, owner=ino,
                                 addr_to_daddr=self.fsb_to_daddr)

    def inobt_type(self, free: bool = False) -> btree.BtreeType:
        return btree.inobt_type(self.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES), free)

    # -- inodes ---------------------------------------------------------------
    def inode(self, ino: int) -> Inode:
        """The inode ``ino``, read and verified (directories stay cached)."""
        cache = self._inodes
        cached = cache.dirs.get(ino) or cache.recent.get(ino)
        if cached is not None:
            return cached
        if not 0 <= ino < 1 << 64:
            raise CorruptionError("inode number", f"{ino} lies outside the filesystem",
                                  ino=ino)
        out: list = []
        self._load_inodes((ino,), out)
        node = out[0]
        if node.mode & C.S_IFMT == C.S_IFDIR:
            cache.keep_dir(node)
        else:
            cache.keep_recent(node)
        return node

    def inodes(self, inos) -> list:
        """The inodes ``inos`` (a sequence of numbers), read and verified in
        one pass: an inode cluster is read once for the neighbours in it."""
        out: list = []
        self._load_inodes(inos, out)
        return out

    def inode_crc_mended(self, ino: int) -> Inode:
        """The inode ``ino`` read as if its CRC were right (everything else
        verified as :meth:`inode` does): for a repair that rewrites the CRC
        and must see the inode as it will be.  Not cached."""
        return self.inode_as(ino, lambda raw: raw)

    def inode_as(self, ino: int, edit) -> Inode:
        """The inode ``ino`` read as ``edit`` (its on-disk bytes -> the bytes
        a repair writes) leaves it, its CRC made right and everything else
        verified as :meth:`inode` does.  Not cached."""
        buf, off = self.inode_cluster(ino)
        data = bytearray(buf.data)
        isz = self.sb.inodesize
        raw = bytearray(edit(bytes(data[off:off + isz])))
        struct.pack_into("<I", raw, C.XFS_DINODE_CRC_OFF,
                         parsers.xfs_cksum(bytes(raw), C.XFS_DINODE_CRC_OFF))
        data[off:off + isz] = raw
        out: list = []
        self._cluster = lambda _daddr, _nblocks: data
        try:
            self._load_inodes((ino,), out)
        finally:
            del self._cluster           # the class's reader again
        return out[0]

    def _load_inodes(self, inos, out: list) -> None:
        """Decode ``inos`` into ``out``; a failure raises CorruptionError with
        the inodes before it already in ``out``."""
        try:
            parsers.load_inodes(Inode, self, inos, self._cluster, self.uuid, self._geometry, out)
        except CorruptionError:
            raise
        except ValueError as e:
            if len(e.args) != 3:
                raise
            i, field, detail = e.args
            ino = inos[i]
            if field == "location":
                sb = self.sb
                raise CorruptionError("inode number", detail, agno=ino >> sb.agino_log,
                                      block=(ino >> sb.inopblog) & self._agbno_mask,
                                      ino=ino) from None
            raise CorruptionError("inode", detail, ino=ino, field=field) from None
        except OverflowError:
            bad = next(i for i in inos if not 0 <= i < 1 << 64)
            raise CorruptionError("inode number", f"{bad} lies outside the filesystem",
                                  ino=bad) from None

    def _cluster(self, daddr: int, nblocks: int):
        """The inode cluster at ``daddr``: the metadata cache's buffer when it
        holds one (a writer's changes live there), else, when only reading,
        one of the last few clusters read (so that a walk does not flush the
        metadata cache)."""
        nbytes = nblocks << self.sb.blocklog
        cached = self.cache.get((daddr, nbytes))
        if cached is not None:
            return cached.data
        if self.dev.writable:
            return self._cluster_buf(daddr, nbytes).data
        clusters = self._inodes.clusters
        buf = clusters.get(daddr)
        if buf is None:
            buf = self.dev.pread(daddr << C.BBSHIFT, nbytes)
            clusters[daddr] = buf
            if len(clusters) > self._inodes.max_clusters:
                clusters.popitem(last=False)
        return buf

    def _cluster_buf(self, daddr: int, nbytes: int) -> Buf:
        buf = self.cache.get((daddr, nbytes))
        if buf is None:
            raw = self.dev.pread(daddr << C.BBSHIFT, nbytes)
            buf = self.cache.insert(Buf(daddr, nbytes, bytearray(raw), V.DINO))
        return buf

    def inode_cluster(self, ino: int) -> tuple[Buf, int]:
        """The inode cluster buffer holding ``ino`` (in the metadata cache,
        where a writer changes it) and the inode's byte offset in it; the
        number is not validated (see :meth:`ino_location`)."""
        sb = self.sb
        agno = ino >> sb.agino_log
        agbno = (ino >> sb.inopblog) & self._agbno_mask
        cstart = agbno - agbno % self._cluster_blocks
        nblocks = min(self._cluster_blocks, self._ag_len[agno] - cstart)
        daddr = (agno * sb.agblocks + cstart) << self._bb_per_fsb_log
        self._inodes.clusters.pop(daddr, None)
        buf = self._cluster_buf(daddr, nblocks << sb.blocklog)
        off = (((agbno - cstart) << sb.inopblog) + (ino & (sb.inopblock - 1))) << sb.inodelog
        return buf, off

    def drop_caches(self) -> None:
        """Forget every cached buffer and inode (after the image changed)."""
        self.cache.clear()
        self._inodes.clear()

    # -- what writers tell the read model -----------------------------------------
    def forget_inode(self, ino: int) -> None:
        """Drop the decoded copy of an inode a writer has just changed (and
        the names and paths resolved before, which it may invalidate)."""
        self.forget_inodes((ino,))

    def forget_inodes(self, inos) -> None:
        """forget_inode of each of ``inos`` (new inodes, mostly: nothing
        of theirs cached, and nothing to look up)."""
        cache = self._inodes
        dirs, recent = cache.dirs, cache.recent
        if dirs or recent:
            for ino in inos:
                dirs.pop(ino, None)
                recent.pop(ino, None)
        if cache.dentries:
            cache.dentries.clear()
        if cache.paths:
            cache.paths.clear()
        if cache.listed:
            cache.listed.clear()

    def forget_all_inodes(self) -> None:
        self._inodes.clear()

    def forget_cluster(self, buf) -> None:
        """Drop decoded inodes of an inode cluster buffer that went away."""
        if buf.bt is not None and buf.bt.inodes:
            first = self.daddr_to_ino(buf.daddr)
            for i in range(buf.length >> self.sb.inodelog):
                self.forget_inode(first + i)
            self._inodes.clusters.pop(buf.daddr, None)

    def daddr_to_ino(self, daddr: int) -> int:
        """The number of the first inode in the block at ``daddr``."""
        sb = self.sb
        agno, agbno = divmod(daddr >> self._bb_per_fsb_log, sb.agblocks)
        return (agno << sb.agino_log) | (agbno << sb.inopblog)

    @property
    def root(self) -> Inode:
        return self.inode(self.sb.rootino)

    # -- directories ----------------------------------------------------------
    def listdir(self, where) -> list[DirEntry]:
        """Entries of a directory (path, inode number or Inode), without ``.``
        and ``..``, in on-disk order."""
        node = self._as_inode(where)
        if not node.is_dir:
            raise NotADirectoryImageError(where if isinstance(where, str) else f"inode {node.ino}")
        make = DirEntry._make
        return [make(e) for ents in xdir.entry_lists(node) for e in ents]

    def parent_of(self, node: Inode) -> int:
        return xdir.parent(node)

    def dir_lookup(self, node: Inode, name: bytes) -> int | None:
        """Inode number of ``name`` in directory ``node``, or None (through
        the cache of names recently looked up or listed by scandir); the
        child's inode is not read."""
        key = (node.ino, name)
        cache = self._inodes
        v = cache.dentries.get(key)
        if v is None:
            ino = xdir.lookup(node, name)
            if ino is not None:
                cache.keep_dentry(key, ino)
            return ino
        return v if type(v) is int else v.ino

    def _child(self, node: Inode, name: bytes) -> Inode | None:
        """The inode ``name`` names in directory ``node``, or None.  The name
        cache holds an inode number, or the Inode itself when scandir
        decoded it."""
        v = self._inodes.dentries.get((node.ino, name))
        if v is not None and type(v) is not int:
            return v
        ino = v if v is not None else self.dir_lookup(node, name)
        return None if ino is None else self.inode(ino)

    def lookup(self, path: str | bytes, follow: bool = False) -> Inode:
        """The inode at ``path`` (absolute inside the image).  Symlinks in the
        middle of the path are followed inside the image; the last component
        is followed only when ``follow`` is true."""
        # a path scandir has just listed (what os-style loops open next)
        node = self._inodes.listed.get(path)
        if node is not None and not (follow and node.mode & C.S_IFMT == C.S_IFLNK):
            return node
        bpath = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
        # the directory part of a path resolved before comes from the cache
        head, _sep, tail = bpath.rpartition(b"/")
        cache = self._inodes
        parent = cache.paths.get(head) if tail and tail != b"." and tail != b".." else None
        if parent is not None:
            child = self._child(parent, tail)
            if child is None:
                raise NotFoundError(path if isinstance(path, str) else
                                    path.decode("utf-8", "surrogateescape"))
            if not (follow and child.mode & C.S_IFMT == C.S_IFLNK):
                return child
        spath = path if isinstance(path, str) else path.decode("utf-8", "surrogateescape")
        parts = [p for p in bpath.split(b"/") if p and p != b"."]
        node = self.root
        stack = [node]       # directories from the root, for ".."
        hops = 0
        plain = True         # no "..", no symlink: stack[-2] is the parent of path
        while parts:
            name = parts.pop(0)
            if not node.is_dir:
                raise NotADirectoryImageError(spath)
            if name == b"..":
                plain = False
                if len(stack) > 1:
                    stack.pop()
                node = stack[-1]
                continue
            child = self._child(node, name)
            if child is None:
                raise NotFoundError(spath)
            if child.is_symlink and (parts or follow):
                plain = False
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise SymlinkLoopError(spath)
                target = self.readlink(child)
                tparts = [p for p in target.split(b"/") if p and p != b"."]
                if target.startswith(b"/"):
                    stack = [self.root]
                parts = tparts + parts
                node = stack[-1]
                continue
            node = child
            stack.append(node)
        if plain and len(stack) >= 2 and tail and tail != b".":
            cache.keep_path(head, stack[-2])
        return node

    def _as_inode(self, where, follow: bool = False) -> Inode:
        if isinstance(where, str):
            return self.lookup(where, follow=follow)
        if isinstance(where, Inode):
            return where
        if isinstance(where, int):
            return self.inode(where)
        if isinstance(where, ImageDirEntry) and not (follow and where.is_symlink()):
            return where._node if where._node is not None else self.inode(where.inode())
        if not isinstance(where, bytes):
            where = os.fspath(where)
        return self.lookup(where, follow=follow)

    def walk(self, top="/") -> Iterator[tuple[str, Inode]]:
        """Depth-first (path, inode) for ``top`` and everything below it, names
        decoded with surrogateescape; a directory's entries come in on-disk
        order, each subdirectory's contents right after it.  Directory cycles
        raise CorruptionError."""
        node = self._as_inode(top)
        start = top if isinstance(top, str) else "/"
        yield start, node
        if not node.is_dir:
            return
        on_path = {node.ino}
        # frames: [directory, its batches of (path, inode), the current batch]
        stack = [[node, self._child_batches(start, node), iter(())]]
        while stack:
            frame = stack[-1]
            for item in frame[2]:
                yield item
                child = item[1]
                if child.mode & C.S_IFMT == C.S_IFDIR:
                    if child.ino in on_path:
                        raise CorruptionError("directory", f"cycle: {item[0]} leads back to "
                                              "an ancestor", ino=child.ino)
                    on_path.add(child.ino)
                    stack.append([child, self._child_batches(item[0], child), iter(())])
                    break
            else:
                batch = next(frame[1], None)
                if batch is not None:
                    frame[2] = iter(batch)
                else:
                    stack.pop()
                    on_path.discard(frame[0].ino)

    def _child_batches(self, path: str, dnode: Inode) -> Iterator[list]:
        """Lists of (path, inode) for the entries of ``dnode``, the inodes of
        each list decoded in one native call.  An entry whose inode fails
        verification ends the last list; the error is raised after it."""
        prefix = path if path.endswith("/") else path + "/"
        load = self._load_inodes
        for ents in xdir.entry_lists(dnode):
            for k in range(0, len(ents), WALK_BATCH):
                part = ents[k:k + WALK_BATCH] if len(ents) > WALK_BATCH else ents
                nodes: list = []
                try:
                    load([e[1] for e in part], nodes)
                except CorruptionError:
                    yield [(prefix + e[0].decode("utf-8", "surrogateescape"), child)
                           for e, child in zip(part, nodes)]
                    raise
                yield [(prefix + e[0].decode("utf-8", "surrogateescape"), child)
                       for e, child in zip(part, nodes)]

    # -- files, symlinks, xattrs ------------------------------------------------
    def read(self, where, offset: int = 0, size: int = -1) -> bytes:
        """File data; a path that names a symlink reads the file it points to."""
        node = self._as_inode(where, follow=True)
        if node.is_dir:
            raise IsADirectoryImageError(where if isinstance(where, str) else f"inode {node.ino}")
        return node.read(offset, size)

    def open(self, where, mode: str = "rb", buffering: int = -1, encoding=None, errors=None,
             newline=None):
        """A file in the image as a read-only stream, like the built-in
        ``open``: mode "rb" (the default) gives a seekable binary reader
        (``read``, ``readinto``, ``seek``, ``tell``, ``readline``..., an
        ``io.RawIOBase`` that reads straight from the image; ``buffering``
        > 1 puts an ``io.BufferedReader`` of that size in front), mode "r" a
        text reader.  Symlinks are followed."""
        if mode == "rb" and buffering < 2 and type(where) is str:
            # a regular file scandir has just listed (os-style loops): no
            # lookup, no checks left
            node = self._inodes.listed.get(where)
            if node is not None and node.mode & 0o170000 == 0o100000:
                return FileReader(node, where)
        if mode != "rb" and mode not in ("r", "rt", "br", "tr"):
            if set(mode) - set("rbt"):
                raise ReadOnlyError(f"{where}: the image is read-only (mode {mode!r})")
            raise InvalidArgument(f"invalid mode {mode!r}")
        node = self._as_inode(where, follow=True)
        if node.mode & C.S_IFMT == C.S_IFDIR:
            raise IsADirectoryImageError(where if isinstance(where, str) else f"inode {node.ino}")
        raw = FileReader(node, where if isinstance(where, (str, bytes)) else None)
        if "b" in mode:
            if buffering > 1:
                return io.BufferedReader(raw, buffering)
            # the raw reader reads ranges straight through the extent map:
            # a buffer in front of it would only copy
            return raw
        if buffering == 0:
            raise InvalidArgument("can't have unbuffered text I/O")
        stream = io.BufferedReader(raw, buffering if buffering > 1 else
                                   max(io.DEFAULT_BUFFER_SIZE, self.sb.blocksize))
        return io.TextIOWrapper(stream, encoding=encoding or "utf-8", errors=errors,
                                newline=newline)

    # -- os-style queries ----------------------------------------------------------
    def stat(self, where, follow_symlinks: bool = True) -> os.stat_result:
        """``os.stat_result`` of a path (or inode number, or Inode): times to
        the nanosecond (``st_mtime_ns``...), ``st_ino``, ``st_nlink``,
        ``st_blocks`` (512-byte units), ``st_rdev`` for devices.  A symlink at
        the end of the path is followed unless ``follow_symlinks`` is false."""
        return self._as_inode(where, follow=follow_symlinks).stat()

    def lstat(self, where) -> os.stat_result:
        """``stat`` of the path itself, not of a symlink's target."""
        return self._as_inode(where).stat()

    def scandir(self, where="/") -> ScandirIterator:
        """The entries of a directory as ``os.scandir`` gives them
        (``ImageDirEntry``: name, path, inode(), is_dir(), is_file(),
        is_symlink(), stat()), without ``.`` and ``..``, in on-disk order.
        Names and paths are bytes when ``where`` is bytes."""
        node = self._as_inode(where, follow=True)
        if not node.is_dir:
            raise NotADirectoryImageError(where if isinstance(where, str) else f"inode {node.ino}")
        return ScandirIterator(self._scandir(where, node))

    def _scandir(self, where, node: Inode) -> Iterator[ImageDirEntry]:
        # the inodes are decoded a batch at a time (an entry whose inode
        # fails is left to fail when its stat() is asked for); the names go
        # to the name cache, so opening what was just listed costs no
        # directory search
        dentries = self._inodes.dentries
        listed = self._inodes.listed
        most = self._inodes.max_dentries
        make = parsers.dir_entries
        dino = node.ino
        as_bytes = isinstance(where, bytes)
        if as_bytes:
            prefix = where if where.endswith(b"/") else where + b"/"
        else:
            base = where if isinstance(where, str) else "/"
            prefix = base if base.endswith("/") else base + "/"
        for ents in xdir.entry_lists(node):
            for k in range(0, len(ents), WALK_BATCH):
                part = ents[k:k + WALK_BATCH] if len(ents) > WALK_BATCH else ents
                nodes: list = []
                try:
                    self._load_inodes([e[1] for e in part], nodes)
                except CorruptionError:
                    nodes += [None] * (len(part) - len(nodes))
                # both caches start again when full (cheaper than dropping
                # the oldest name one at a time)
                if len(dentries) + len(part) > most:
                    dentries.clear()
                if len(listed) + len(part) > most:
                    listed.clear()
                yield from make(ImageDirEntry, self, part, nodes, prefix, as_bytes, dino,
                                dentries, listed)

    def exists(self, path) -> bool:
        """Whether ``path`` names something (symlinks followed, as os.path.exists)."""
        return self._query(path, True) is not None

    def isdir(self, path) -> bool:
        node = self._query(path, True)
        return node is not None and node.is_dir

    def isfile(self, path) -> bool:
        node = self._query(path, True)
        return node is not None and node.is_reg

    def islink(self, path) -> bool:
        node = self._query(path, False)
        return node is not None and node.is_symlink

    def _query(self, path, follow: bool):
        try:
            return self._as_inode(path, follow=follow)
        except (FileNotFoundError, NotADirectoryError, SymlinkLoopError):
            return None

    def readlink(self, where) -> bytes:
        node = self._as_inode(where)
        return xattr.read_symlink(node)

    def xattrs(self, where) -> dict[str, bytes]:
        """All extended attributes as {"user.name": value}."""
        node = self._as_inode(where)
        return {name: value for name, value in xattr.iter_xattrs(node)}

    def xattr(self, where, name: str) -> bytes | None:
        """The value of one extended attribute ("user.name"), or None: found
        by its hash, without reading the others."""
        return xattr.get(self._as_inode(where), name)

    def xattr_names(self, where) -> list[str]:
        node = self._as_inode(where)
        return [name for name, _ in xattr.iter_xattrs(node, values=False)]

    @property
    def has_parent_pointers(self) -> bool:
        return self.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_PARENT)

    def parents(self, where) -> list[xattr.Parent]:
        """The parent pointers of ``where`` (itself: symlinks are not
        followed), as ``Parent(ino, gen, name)``: each directory that names
        it, that directory's generation and the name (bytes).  Empty on a
        filesystem without parent pointers."""
        return list(xattr.iter_parents(self._as_inode(where)))

    def paths(self, where) -> list[str]:
        """Every path of ``where`` (an inode number, an Inode or a path)
        found by following parent pointers up to the root, as
        ``xfs_io -c 'parent -p'`` lists them.  Parent pointers that lead
        nowhere are left out (``fstool.fs.parent.paths`` says which)."""
        found, _broken = pptr.paths(self, self._as_inode(where).ino)
        return [p.decode("utf-8", "surrogateescape") for p in found]


class _InodeCache:
    """Directory inodes by number (at most ``max_dirs``, oldest half dropped
    when full), the last 1,024 other inodes asked for by number, the inodes of the last
    256 directory paths resolved, the last inode clusters read (at most ``max_clusters``,
    oldest first), names recently looked up or listed, (directory inode,
    name) -> inode number or Inode (at most ``max_dentries``, emptied when
    full), and the paths scandir recently yielded with their inodes (as
    many, emptied when full)."""

    __slots__ = ("dirs", "recent", "clusters", "dentries", "paths", "listed", "max_dirs",
                 "max_clusters", "max_dentries")

    MAX_RECENT = 1024
    MAX_PATHS = 256

    def __init__(self, max_dirs: int, max_clusters: int, max_dentries: int = 4096):
        # OrderedDict: dropping the oldest is O(1) (a dict's first key is
        # found past every deleted slot before it)
        self.dirs: dict = {}
        self.recent: OrderedDict = OrderedDict()   # the last other inodes asked for
        self.clusters: OrderedDict = OrderedDict()
        # names (emptied when full: cheaper than dropping the oldest one by one)
        self.dentries: dict = {}
        self.paths: OrderedDict = OrderedDict()    # directory path (bytes) -> its inode
        # paths scandir yielded (str or bytes, as given) -> their decoded
        # inodes (emptied when full, like dentries)
        self.listed: dict = {}
        self.max_dirs = max_dirs
        self.max_clusters = max_clusters
        self.max_dentries = max_dentries

    def keep_recent(self, node) -> None:
        r = self.recent
        r[node.ino] = node
        if len(r) > self.MAX_RECENT:
            r.popitem(last=False)

    def keep_path(self, path: bytes, node) -> None:
        p = self.paths
        p[path] = node
        if len(p) > self.MAX_PATHS:
            p.popitem(last=False)

    def keep_dentry(self, key, ino) -> None:
        d = self.dentries
        if len(d) >= self.max_dentries:
            d.clear()
        d[key] = ino

    def keep_dir(self, node) -> None:
        dirs = self.dirs
        dirs[node.ino] = node
        if len(dirs) > self.max_dirs:
            for old in list(itertools.islice(dirs, len(dirs) // 2)):
                del dirs[old]

    def clear(self) -> None:
        self.dirs.clear()
        self.recent.clear()
        self.paths.clear()
        self.clusters.clear()
        self.dentries.clear()
        self.listed.clear()


def _sectsize_guess(head: bytes) -> int:
    """The sector size the superblock claims, bounded, so its CRC can be checked."""
    if len(head) >= 104:
        ss = int.from_bytes(head[102:104], "big")
        if 512 <= ss <= len(head) and not ss & (ss - 1):
            return ss
    return C.BBSIZE
