"""The filesystem object: geometry, verified metadata reads, inodes and paths.

``Filesystem`` is what :func:`fstool.open_image` returns.  Everything is read
on demand through a bounded cache; nothing reads the whole image.
"""
from __future__ import annotations

import io
import itertools
import posixpath
from typing import Iterator, NamedTuple

from ..errors import (CorruptionError, ImageError, InvalidArgument, IsADirectoryImageError,
                      NotADirectoryImageError, NotFoundError, SymlinkLoopError)
from ..format import constants as C
from ..format.structs import AGF, AGFL, AGI
from ..io import verify as V
from ..io.device import BufferCache, Device
from . import attr as xattr
from . import btree
from . import dir as xdir
from .inode import Inode
from .superblock import Superblock

MAX_SYMLINK_HOPS = 40


class DirEntry(NamedTuple):
    """A name in a directory: ``name`` (bytes), ``ino`` and ``ftype``."""
    name: bytes
    ino: int
    ftype: int


class Filesystem:
    def __init__(self, path, cache_bytes: int = 64 << 20, writable: bool = False):
        self.dev = Device(path, writable=writable)
        try:
            if self.dev.size < C.BBSIZE:
                raise ImageError(f"{self.dev.path}: {self.dev.size} bytes is too small to "
                                 "hold an XFS superblock")
            head = self.dev.pread(0, min(self.dev.size, 32768))
            self.sb = sb = Superblock(head[:max(C.BBSIZE, _sectsize_guess(head))])
            need = sb.dblocks * sb.blocksize
            if self.dev.size < need:
                raise ImageError(
                    f"{self.dev.path}: image is truncated: the superblock describes "
                    f"{need} bytes but the file holds {self.dev.size}")
        except BaseException:
            self.dev.close()
            raise
        self.cache = BufferCache(cache_bytes)
        self._inodes: dict = {}
        self._inode_cache_max = 8192
        self._agbno_mask = (1 << sb.agblklog) - 1
        self._bb_per_fsb_log = sb.blocklog - C.BBSHIFT
        self._ag_len = [sb.agblocks] * (sb.agcount - 1) + \
            [sb.dblocks - (sb.agcount - 1) * sb.agblocks]
        # the kernel's inode cluster: 8 KiB scaled by the inode size over 256
        cluster_bytes = max(sb.blocksize, 8192 * sb.inodesize // 256)
        self._cluster_blocks = max(1, cluster_bytes >> sb.blocklog)
        self.uuid = sb.meta_uuid

    # -- lifetime ---------------------------------------------------------
    def close(self) -> None:
        self.dev.close()

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
                  agno=None, block=None, ino=None, pieces=None) -> bytes:
        """Read and verify one metadata buffer (cached).  ``pieces`` lists
        (daddr, nbytes) for buffers spread over discontiguous extents."""
        key = (daddr, length, bt.name)
        buf = self.cache.get(key)
        if buf is not None:
            return buf
        if pieces and len(pieces) > 1:
            buf = b"".join(self.dev.pread(d << C.BBSHIFT, n) for d, n in pieces)
        else:
            buf = self.dev.pread(daddr << C.BBSHIFT, length)
        V.verify(buf, bt, uuid=self.uuid, daddr=daddr, owner=owner, agno=agno,
                 block=block, ino=ino)
        self.cache.put(key, buf)
        return buf

    def _ag_sector(self, agno: int, sector: int, bt: V.BufType) -> bytes:
        if not 0 <= agno < self.sb.agcount:
            raise InvalidArgument(f"AG {agno} does not exist (the filesystem has "
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
        sparse = self.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES)
        if free:
            return btree.FINOBT_SPARSE if sparse else btree.FINOBT_FULL
        return btree.INOBT_SPARSE if sparse else btree.INOBT_FULL

    # -- inodes ---------------------------------------------------------------
    def inode(self, ino: int) -> Inode:
        cached = self._inodes.get(ino)
        if cached is not None:
            return cached
        sb = self.sb
        agno = ino >> sb.agino_log
        agbno = (ino >> sb.inopblog) & self._agbno_mask
        if agno >= sb.agcount or agbno == 0 or agbno >= self._ag_len[agno]:
            raise CorruptionError("inode number", f"{ino} lies outside the filesystem",
                                  agno=agno, block=agbno, ino=ino)
        # read a whole inode cluster at a time: neighbours are usually next
        cstart = agbno - agbno % self._cluster_blocks
        nblocks = min(self._cluster_blocks, self._ag_len[agno] - cstart)
        daddr = (agno * sb.agblocks + cstart) << self._bb_per_fsb_log
        key = (daddr, nblocks, "inode cluster")
        cluster = self.cache.get(key)
        if cluster is None:
            cluster = self.dev.pread(daddr << C.BBSHIFT, nblocks << sb.blocklog)
            self.cache.put(key, cluster)
        off = (((agbno - cstart) << sb.inopblog) + (ino & (sb.inopblock - 1))) << sb.inodelog
        node = Inode(self, ino, cluster[off:off + sb.inodesize])
        inodes = self._inodes
        inodes[ino] = node
        if len(inodes) > self._inode_cache_max:
            # drop the oldest half: cheaper than strict LRU upkeep on every hit
            for old in list(itertools.islice(inodes, len(inodes) // 2)):
                del inodes[old]
        return node

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
        return [make(e) for e in xdir.iter_entries(node)]

    def parent_of(self, node: Inode) -> int:
        return xdir.parent(node)

    def dir_lookup(self, node: Inode, name: bytes) -> int | None:
        return xdir.lookup(node, name)

    def lookup(self, path: str | bytes, follow: bool = False) -> Inode:
        """The inode at ``path`` (absolute inside the image).  Symlinks in the
        middle of the path are followed inside the image; the last component
        is followed only when ``follow`` is true."""
        bpath = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
        spath = path if isinstance(path, str) else path.decode("utf-8", "surrogateescape")
        parts = [p for p in bpath.split(b"/") if p and p != b"."]
        node = self.root
        stack = [node]       # directories from the root, for ".."
        hops = 0
        while parts:
            name = parts.pop(0)
            if not node.is_dir:
                raise NotADirectoryImageError(spath)
            if name == b"..":
                if len(stack) > 1:
                    stack.pop()
                node = stack[-1]
                continue
            ino = xdir.lookup(node, name)
            if ino is None:
                raise NotFoundError(spath)
            child = self.inode(ino)
            if child.is_symlink and (parts or follow):
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
        return node

    def _as_inode(self, where, follow: bool = False) -> Inode:
        if isinstance(where, Inode):
            return where
        if isinstance(where, int):
            return self.inode(where)
        return self.lookup(where, follow=follow)

    def walk(self, top="/") -> Iterator[tuple[str, Inode]]:
        """Depth-first (path, inode) for ``top`` and everything below it, names
        decoded with surrogateescape.  Directory cycles raise CorruptionError."""
        node = self._as_inode(top)
        start = top if isinstance(top, str) else "/"
        yield start, node
        if not node.is_dir:
            return
        on_path = {node.ino}
        stack = [(start, node, iter(self.listdir(node)))]
        while stack:
            path, dnode, it = stack[-1]
            ent = next(it, None)
            if ent is None:
                stack.pop()
                on_path.discard(dnode.ino)
                continue
            child = self.inode(ent.ino)
            cpath = posixpath.join(path, ent.name.decode("utf-8", "surrogateescape"))
            yield cpath, child
            if child.is_dir:
                if child.ino in on_path:
                    raise CorruptionError("directory", f"cycle: {cpath} leads back to an "
                                          "ancestor", ino=child.ino)
                on_path.add(child.ino)
                stack.append((cpath, child, iter(self.listdir(child))))

    # -- files, symlinks, xattrs ------------------------------------------------
    def read(self, where, offset: int = 0, size: int = -1) -> bytes:
        """File data; a path that names a symlink reads the file it points to."""
        node = self._as_inode(where, follow=True)
        if node.is_dir:
            raise IsADirectoryImageError(where if isinstance(where, str) else f"inode {node.ino}")
        return node.read(offset, size)

    def open(self, where) -> "FileReader":
        """A seekable binary stream; symlinks in paths are followed."""
        node = self._as_inode(where, follow=True)
        if node.is_dir:
            raise IsADirectoryImageError(where if isinstance(where, str) else f"inode {node.ino}")
        return FileReader(node)

    def readlink(self, where) -> bytes:
        node = self._as_inode(where)
        return xattr.read_symlink(node)

    def xattrs(self, where) -> dict[str, bytes]:
        """All extended attributes as {"user.name": value}."""
        node = self._as_inode(where)
        return {name: value for name, value in xattr.iter_xattrs(node)}

    def xattr_names(self, where) -> list[str]:
        node = self._as_inode(where)
        return [name for name, _ in xattr.iter_xattrs(node, values=False)]


def _sectsize_guess(head: bytes) -> int:
    """The sector size the superblock claims, bounded, so its CRC can be checked."""
    if len(head) >= 104:
        ss = int.from_bytes(head[102:104], "big")
        if 512 <= ss <= len(head) and not ss & (ss - 1):
            return ss
    return C.BBSIZE


class FileReader(io.RawIOBase):
    """A read-only, seekable stream over a file in the image."""

    def __init__(self, node: Inode):
        super().__init__()
        self.node = node
        self.pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_SET:
            self.pos = offset
        elif whence == io.SEEK_CUR:
            self.pos += offset
        else:
            self.pos = self.node.size + offset
        self.pos = max(0, self.pos)
        return self.pos

    def tell(self):
        return self.pos

    def readinto(self, b):
        data = self.node.read(self.pos, len(b))
        n = len(data)
        b[:n] = data
        self.pos += n
        return n
