"""``fstool path``: the paths of inodes from their parent pointers.

One inode is walked through the filesystem object (``fs.parent``).  Many,
or every inode (``--all``), are read a whole inode chunk at a time: the
inode btrees give the chunks, ``parsers.PathTable.add_chunk`` keeps the
parent pointers of every inode whose attr fork is in the inode, and only
inodes with attr blocks (or that do not verify) are read one by one.  Each
directory's paths are then worked out once, and ``--all``'s text is written
by the table into one buffer.
"""
from __future__ import annotations

from typing import Iterator

from .._backend import parsers
from ..errors import FsToolError, UnsupportedError
from ..format import constants as C
from ..fs import attr as xattr
from ..fs.parent import Broken, PathWalker

# inode chunks read per pread (contiguous ones), as check reads them
_READ_LIMIT = 2 << 20


def require_parent_pointers(fs) -> None:
    if not fs.has_parent_pointers:
        raise UnsupportedError("this filesystem has no parent pointers (mkfs -n parent=1): "
                               "paths cannot be found from an inode")


def _chunks(fs, agno: int) -> Iterator[tuple[int, int, int]]:
    """(first inode, free mask, holemask) of every inode chunk of an AG."""
    sb = fs.sb
    agi = fs.agi(agno)
    reader = fs.ag_btree(agno, fs.inobt_type())
    for rec in reader.ag_records(agi["agi_root"], agi["agi_level"]):
        startino, holemask, _count, _free, free = rec
        yield (agno << sb.agino_log) | startino, free, holemask


def scan_parents(fs) -> tuple:
    """(table, unread): a ``parsers.PathTable`` holding every in-use
    inode's parent pointers, and the inodes that could not be read
    ([(ino, why)])."""
    sb = fs.sb
    isize = sb.inodesize
    per_block = sb.inopblock
    blocklog = sb.blocklog
    table = parsers.PathTable(sb.rootino, errors=FsToolError)
    unread: list = []
    others: list = []
    nblk = max(1, (64 * isize) >> blocklog)
    # one buffer for every read, filled in place: no new memory (and page
    # faults) for each run of chunks
    buf = bytearray(max(_READ_LIMIT, nblk << blocklog))
    view = memoryview(buf)
    for agno in range(sb.agcount):
        try:
            chunks = list(_chunks(fs, agno))
        except FsToolError as e:
            unread.append((None, f"AG {agno}: {e}"))
            continue
        k = 0
        while k < len(chunks):
            # a run of chunks that follow one another on disk, read at once
            first = chunks[k][0]
            blk0 = (first & ((1 << sb.agino_log) - 1)) >> sb.inopblog
            base0 = (first % per_block) * isize
            j = k + 1
            while not base0 and j < len(chunks) and (j - k + 1) * nblk << blocklog <= _READ_LIMIT and \
                    ((chunks[j][0] & ((1 << sb.agino_log) - 1)) >> sb.inopblog) == \
                    blk0 + (j - k) * nblk and not chunks[j][0] % per_block:
                j += 1
            try:
                fs.dev.preadinto(view[:(j - k) * nblk << blocklog],
                                 fs.agb_to_daddr(agno, blk0) << C.BBSHIFT)
            except FsToolError:
                for first_ino, _free, _hole in chunks[k:j]:
                    others.extend(first_ino + i for i in range(64))
                k = j
                continue
            for m in range(k, j):
                first_ino, free, hole = chunks[m]
                others.extend(table.add_chunk(buf, base0 + ((m - k) * nblk << blocklog), isize,
                                              first_ino, free, hole))
            k = j
    for ino in others:
        try:
            node = fs.inode(ino)
            if not node.mode:
                continue
            parents = list(xattr.iter_parents(node))
        except FsToolError as e:
            unread.append((ino, str(e)))
            continue
        table.add(ino, node.mode, node.gen, parents)
    return table, unread


def _metadata_inodes(fs) -> tuple:
    """The superblock's metadata inodes (realtime bitmap and summary,
    quotas): no paths are given for them."""
    f = fs.sb.fields
    return tuple({f[k] for k in ("sb_rbmino", "sb_rsumino", "sb_uquotino", "sb_gquotino",
                                 "sb_pquotino")})


class AllPaths(PathWalker):
    """The paths of every in-use inode, read in one scan."""

    def __init__(self, fs):
        require_parent_pointers(fs)
        table, self.unread = scan_parents(fs)
        super().__init__(fs, table)
        self.skip = _metadata_inodes(fs)

    def __iter__(self) -> Iterator[tuple[int, list[bytes]]]:
        """(inode, its paths) of every inode in use but the superblock's
        metadata inodes, in inode order."""
        table = self.table
        order = table.order()
        recs = table.recs
        for k in range(table.count) if order is None else order:
            ino = recs[4 * k]
            if ino not in self.skip:
                yield ino, table.paths_at(k)

    def render(self, write=None) -> tuple[bytes, list]:
        """(text, broken): every "INO PATH" line, in inode order, names
        escaped as :func:`fstool.ops.names.shown_name` shows them (UTF-8),
        and the pointers that lead nowhere as (the inode being walked,
        :class:`Broken`).  With ``write``, the text goes to it in pieces
        of whole lines (each a view valid for the call) and the text
        returned is empty."""
        text, tagged = self.table.render(self.skip, write)
        return text, [(top, Broken(child, xattr.Parent._make(p), why))
                      for top, child, p, why in tagged]


def one_inode(fs, ino: int) -> PathWalker:
    """A walker for a few inodes, reading through ``fs``."""
    require_parent_pointers(fs)
    return PathWalker(fs)
