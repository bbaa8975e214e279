"""Inode allocation through the inobt and finobt (the kernel's xfs_ialloc).

Inodes go to the free inode nearest the parent directory (a finobt lookup,
or a walk outwards in the inobt without one); new directories rotate across
AGs (inode64).  When an AG has no free inode, a new chunk is allocated right
after the AG's newest one, else aligned near the inode btree root, else as
a sparse cluster when free space is too fragmented for a whole chunk.

Inode records a transaction changes are kept as :class:`Chunk` objects and
written into the inobt and finobt once, when it commits.  Inodes themselves
live in inode cluster buffers (one per ``inode_cluster_size`` bytes, as the
kernel reads them): :meth:`InodeAllocator.put_inode` writes an encoded inode
into its cluster buffer through the transaction.  A fresh chunk's cluster
buffers are new buffers; its free inodes are initialised when the
transaction commits, with the ones allocated meanwhile written in place.
"""
from __future__ import annotations

from .._backend import parsers, writers
from ..errors import CorruptionError, NoSpaceError
from ..format import constants as C
from ..fs.icore import _BIG_OFF, InodeSpec
from ..io import verify as V
from ..trans.busy import coalesce
from . import rmap as R

XFS_INODES_PER_CHUNK = 64
XFS_INODES_PER_HOLEMASK_BIT = 4
ALL_FREE = (1 << 64) - 1


def present_mask(holemask: int) -> int:
    """Bitmap of the inodes a record really has (each holemask bit hides 4)."""
    present = ALL_FREE
    while holemask:
        b = (holemask & -holemask).bit_length() - 1
        holemask &= holemask - 1
        present &= ~(0xF << (XFS_INODES_PER_HOLEMASK_BIT * b))
    return present


def chunk_align(sb) -> int:
    """The inode numbers an inode chunk may start at are multiples of this:
    64 with sparse inodes (records are aligned to a full chunk), else the
    inode alignment (sb_inoalignmt blocks, or one block without it)."""
    f = sb.fields
    if f["sb_spino_align"]:
        return XFS_INODES_PER_CHUNK
    return min(XFS_INODES_PER_CHUNK, max(1, f["sb_inoalignmt"]) << sb.inopblog)


def chunk_start(known, agino: int, align: int):
    """The start of the chunk holding ``agino``, among the starts for which
    ``known(start)`` is true, or None: chunks start at multiples of
    ``align`` (chunk_align), not always of 64."""
    s = agino - agino % align
    low = agino - XFS_INODES_PER_CHUNK
    while s > low:
        if known(s):
            return s
        s -= align
    return None


class Chunk:
    """An inode btree record being changed by the open transaction."""
    __slots__ = ("agno", "startino", "holemask", "count", "freecount", "free", "in_fino",
                 "new", "put", "loaded", "present")

    def __init__(self, agno, rec, in_fino: bool, new: bool):
        self.agno = agno
        self.startino, self.holemask, self.count, self.freecount, self.free = rec
        self.loaded = None if new else tuple(rec)   # the record as read
        self.in_fino = in_fino
        self.new = new           # made by this transaction
        self.put = 0             # inodes of a new chunk written by this transaction
        self.present = present_mask(self.holemask)

    @property
    def rec(self) -> tuple:
        return (self.startino, self.holemask, self.count, self.freecount, self.free)


class InodeAllocator:
    def __init__(self, session):
        self.session = session
        self.fs = session.fs
        sb = self.sb = session.sb
        self.enc = session.enc
        f = sb.fields
        self.inoalign = max(1, f["sb_inoalignmt"])
        self.spino_align = f["sb_spino_align"]
        self.align = chunk_align(sb)
        self.sparse = session.sparse
        self.ialloc_blks = max(1, (XFS_INODES_PER_CHUNK * sb.inodesize) >> sb.blocklog)
        self.cluster_blocks = self.fs._cluster_blocks
        self.agirotor = 0
        # new inodes only in AGs below this one (None: any); a shrink moving
        # inodes out of the AGs it cuts sets it
        self.ag_limit = None
        self.chunks: dict = {}
        self.written: dict = {}         # ino -> the raw inode put_inode last stored in this transaction
        # agno -> (finobt, its keys_gen, [(start, end, hi looked up, record
        # lo, record hi)]): stretches of AG inode numbers (start, end] where
        # this transaction's finobt searches found no record starting, with
        # the records around them (_search_free_chunk), while the finobt's
        # keys are unchanged
        self.gaps: dict = {}

    def begin(self) -> None:
        self.chunks = {}
        self.written = {}
        self.gaps = {}

    def _chunk_of(self, agno: int, agino: int):
        """The chunk of this transaction holding the inode, or None."""
        chunks = self.chunks
        ch = chunks.get((agno, agino & ~(XFS_INODES_PER_CHUNK - 1)))
        if ch is not None or self.align == XFS_INODES_PER_CHUNK:
            return ch
        s = chunk_start(lambda s: (agno, s) in chunks, agino, self.align)
        return None if s is None else chunks[(agno, s)]

    # -- numbers ---------------------------------------------------------------------
    def ino_split(self, ino: int) -> tuple[int, int]:
        sb = self.sb
        return ino >> sb.agino_log, ino & ((1 << sb.agino_log) - 1)

    def ino_fsb(self, ino: int) -> int:
        agno, agino = self.ino_split(ino)
        return (agno << self.sb.agblklog) | (agino >> self.sb.inopblog)

    # -- inode buffers -----------------------------------------------------------------
    def raw_inode(self, ino: int) -> bytes:
        """The inode as the open transaction has it."""
        self.fs.ino_location(ino)
        buf, off = self.fs.inode_cluster(ino)
        return bytes(buf.data[off:off + self.sb.inodesize])

    def put_inode(self, ino: int, raw: bytes) -> None:
        """Store an encoded inode (with its CRC) in its cluster buffer."""
        s = self.session
        buf, off = self.fs.inode_cluster(ino)
        s.tx.join(buf)
        buf.data[off:off + len(raw)] = raw
        self.written[ino] = raw
        self.fs.forget_inode(ino)
        agno, agino = self.ino_split(ino)
        ch = self._chunk_of(agno, agino)
        if ch is not None and ch.new:
            ch.put |= 1 << (agino - ch.startino)

    def _new_cluster_bufs(self, agno: int, agbno: int, nblocks: int) -> None:
        """Cluster buffers for freshly allocated inode blocks (zeroed)."""
        fs, tx = self.fs, self.session.tx
        cb = self.cluster_blocks
        b = agbno
        while b < agbno + nblocks:
            n = min(cb, agbno + nblocks - b)
            tx.get_buf(fs.agb_to_daddr(agno, b), n << self.sb.blocklog, V.DINO)
            b += n

    # -- allocation ------------------------------------------------------------------------
    def _chunk(self, agno: int, rec: tuple, in_fino: bool) -> Chunk:
        key = (agno, rec[0])
        ch = self.chunks.get(key)
        if ch is None:
            ch = self.chunks[key] = Chunk(agno, rec, in_fino, new=False)
        return ch

    def _ag_has_room(self, ag) -> bool:
        if ag.agi["agi_freecount"] > 0:
            return True
        # the smallest chunk this filesystem can take: a sparse cluster or a whole chunk
        need = self.spino_align if self.sparse and self.spino_align else self.ialloc_blks
        return (ag.agf["agf_longest"] >= need or ag.longest_stale or
                self.session.journal.busy.ranges(ag.agno)) and \
            ag.agf["agf_freeblks"] + ag.flcount >= need + ag.space.min_freelist(ag)

    def alloc_inode(self, parent: int | None, is_dir: bool) -> int:
        """Allocate an inode: directories rotate across AGs, everything else
        goes to its parent's AG; within the AG, the free inode nearest the
        parent (finobt), else a new chunk."""
        return self._alloc(parent, is_dir)[2]

    def _alloc(self, parent: int | None, is_dir: bool) -> tuple:
        """(AG, chunk, inode number) of a new inode, as alloc_inode says."""
        s = self.session
        limit = self.ag_limit if self.ag_limit is not None else self.sb.agcount
        if not is_dir and parent is not None and parent >> self.sb.agino_log < limit:
            # fast path: the parent's AG still has the chunk nearest the parent
            aglog = self.sb.agino_log
            ag = s.ags.get(parent >> aglog)
            if ag is not None:
                hot = self._known_free_chunk(ag, parent & ((1 << aglog) - 1))
                if hot is not None:
                    return ag, hot, self._take_inodes(ag, hot, 1)[0]
        agcount = self.sb.agcount
        if is_dir or parent is None:
            start = self.agirotor
            self.agirotor = (self.agirotor + 1) % agcount
        else:
            start = self.ino_split(parent)[0]
        for k in range(agcount):
            agno = (start + k) % agcount
            if agno >= limit:
                continue
            ag = s.ag(agno)
            if not self._ag_has_room(ag):
                continue
            pagino = 0
            if parent is not None and self.ino_split(parent)[0] == agno:
                pagino = self.ino_split(parent)[1]
            # no free inode anywhere in the AG: straight to a new chunk
            ch = self._find_free_chunk(ag, pagino) if ag.agi["agi_freecount"] else None
            if ch is None:
                ch = self._new_chunk(ag)
            if ch is None:
                continue
            return ag, ch, self._take_inodes(ag, ch, 1)[0]
        raise NoSpaceError("no free inodes and no room for a new inode chunk in any AG")

    def alloc_inodes(self, parent: int, n: int) -> list:
        """``n`` inodes for files in directory ``parent``, the ones ``n``
        calls of :meth:`alloc_inode` would give."""
        out = []
        while len(out) < n:
            out.extend(self.alloc_group(parent, n - len(out)))
        return out

    def alloc_group(self, parent: int, n: int) -> list:
        """Up to ``n`` inodes for files in directory ``parent``, all from one
        chunk: the ones as many calls of :meth:`alloc_inode` would give
        (once one comes from a chunk, the next ones are that chunk's lowest
        free inodes until it is full), none of them allocating space after
        the first."""
        ag, ch, ino = self._alloc(parent, is_dir=False)
        k = min(ch.freecount, n - 1)
        return [ino] + self._take_inodes(ag, ch, k) if k else [ino]

    def _take_inodes(self, ag, ch: Chunk, k: int) -> list:
        """Take the chunk's ``k`` lowest free inodes (holes are marked free
        but absent) and return their numbers."""
        avail = ch.free & ch.present
        lo = (avail & -avail).bit_length() - 1
        run = ((1 << k) - 1) << lo if avail else 0
        if avail and avail & run == run:
            # consecutive: one inode, or the start of a fresh chunk
            idxs = range(lo, lo + k)
            taken = run
        else:
            idxs, taken = [], 0
            for _ in range(k):
                if not avail:
                    raise CorruptionError("inobt", f"record {ch.startino} claims free inodes "
                                          "but has none", agno=ag.agno)
                low = avail & -avail
                avail ^= low
                taken |= low
                idxs.append(low.bit_length() - 1)
        ch.free &= ~taken
        ch.freecount -= k
        ag.agi["agi_freecount"] -= k
        ag.agi_dirty = True
        if ch.freecount == 0 and ch.in_fino:
            ag.fino.delete((ch.startino,))
            ch.in_fino = False
        base = (ag.agno << self.sb.agino_log) | ch.startino
        return [base + i for i in idxs]

    def put_simple_inode(self, ino: int, item: tuple, ifmt: int, ctime_ns: int,
                         attr: tuple | None = None) -> None:
        """One new inode as :meth:`put_simple_inodes` writes it (empty data
        fork; ``attr``: its shortform attr fork, ``(forkoff, literal)``),
        encoded on its own and stored by :meth:`put_inode`, so that
        ``written`` holds it (a create's answer is made from it)."""
        enc = self.enc
        attrs = None if attr is None else (attr,)
        if enc.bigtime:
            raw = bytearray(self.sb.inodesize)
            if writers.fill_simple_inodes(raw, enc.simple_template(ifmt), ino, (ino,), (item,),
                                          0, 1, ifmt, ctime_ns, _BIG_OFF,
                                          C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum, None,
                                          enc.nrext64, attrs) == 1:
                self.put_inode(ino, bytes(raw))
                return
        self.put_simple_inodes([ino], [item], ifmt, ctime_ns, None, attrs)

    def put_simple_inodes(self, inos: list, items: list, ifmt: int, ctime_ns: int,
                          forks: list | None = None, attrs: list | None = None,
                          lits: list | None = None, nlinks: list | None = None) -> None:
        """Store new inodes: ``items`` holds ``(name, perm, uid, gid,
        atime_ns, mtime_ns, ...)`` per inode, ``ifmt`` the file type; the
        data forks are empty, or with ``forks`` given in extent format,
        ``forks[k]`` = ``(size, nblocks, nextents, packed records)``; the
        attr forks are empty, or with ``attrs`` given in shortform,
        ``attrs[k]`` = ``(forkoff, literal)``; with ``lits`` given (not
        with ``forks``), the data forks are local, ``lits[k]`` the bytes
        (a symlink's target, a shortform directory); with ``nlinks``,
        ``nlinks[k]`` is the link count (else 1)."""
        enc = self.enc
        put = self.put_inode

        def encoded(k: int) -> bytes:          # one inode, by the general encoder
            it = items[k]
            if forks is not None or attrs is not None or lits is not None or \
                    nlinks is not None:
                size, nblocks, nextents, recs = forks[k] if forks is not None else \
                    (len(lits[k]), 0, 0, lits[k]) if lits is not None else (0, 0, 0, b"")
                forkoff, alit = attrs[k] if attrs is not None else (0, b"")
                return enc.encode(inos[k], InodeSpec(
                    mode=ifmt | it[1], nlink=nlinks[k] if nlinks is not None else 1,
                    uid=it[2], gid=it[3], atime_ns=it[4], mtime_ns=it[5],
                    ctime_ns=ctime_ns, crtime_ns=ctime_ns, size=size, nblocks=nblocks,
                    nextents=nextents, data=recs, forkoff=forkoff,
                    fmt=C.XFS_DINODE_FMT_LOCAL if lits is not None else
                    C.XFS_DINODE_FMT_EXTENTS,
                    aformat=C.XFS_DINODE_FMT_LOCAL if forkoff else C.XFS_DINODE_FMT_EXTENTS,
                    attr=alit))
            return enc.simple(inos[k], ifmt | it[1], it[2], it[3], it[4], it[5], ctime_ns,
                              ctime_ns)
        if not enc.bigtime:
            for k, ino in enumerate(inos):
                put(ino, encoded(k))
            return
        # runs of inodes in a chunk made by this transaction are encoded
        # straight into its cluster buffers
        tpl = enc.simple_template(ifmt)
        fill = writers.fill_simple_inodes
        cksum = parsers.xfs_cksum
        sb = self.sb
        aglog = sb.agino_log
        agmask = (1 << aglog) - 1
        per_cluster = (self.cluster_blocks << sb.blocklog) >> sb.inodelog
        fs = self.fs
        n = len(inos)
        i = 0
        while i < n:
            ino = inos[i]
            agino = ino & agmask
            ch = self._chunk_of(ino >> aglog, agino)
            if ch is None or not ch.new:
                put(ino, encoded(i))
                i += 1
                continue
            # the inodes from i on that share this cluster
            cbase = ino - (agino % per_cluster)
            j = i + 1
            while j < n and cbase <= inos[j] < cbase + per_cluster:
                j += 1
            buf, off0 = fs.inode_cluster(cbase)
            self.session.tx.join(buf)
            k = i
            while k < j:
                k = fill(buf.data, tpl, cbase, inos, items, k, j, ifmt, ctime_ns, _BIG_OFF,
                         C.XFS_DINODE_CRC_OFF, cksum, forks, enc.nrext64, attrs, lits, nlinks)
                if k < j:
                    # a time outside the format: the clamping encoder
                    off = (inos[k] - cbase) << sb.inodelog
                    buf.data[off:off + sb.inodesize] = encoded(k)
                    k += 1
            base = (ch.agno << aglog) | ch.startino
            first = inos[i]
            if inos[j - 1] - first == j - 1 - i:       # consecutive: one mask
                ch.put |= ((1 << (j - i)) - 1) << (first - base)
            else:
                for x in inos[i:j]:
                    ch.put |= 1 << (x - base)
            if fs._inodes:
                fs.forget_inodes(inos[i:j])
            i = j

    def _own_chunk(self, ag, pagino: int):
        """The chunk of this transaction holding the parent's own inode
        (``pagino``) when it has a free inode (and is in the finobt, where
        there is one): the nearest free chunk to the parent, the one
        :meth:`_search_free_chunk` would find (the finobt's last record at
        or before the parent, or the inobt's first going outwards), so a
        directory made by this transaction finds its files' chunk with no
        search; noted as the parent's nearest like a found one.  None
        otherwise."""
        ch = self._chunk_of(ag.agno, pagino)
        if ch is None or not ch.freecount:
            return None
        fino = ag.fino
        if fino is not None:
            if not ch.in_fino:
                return None
            ag.hot_keys[pagino] = fino.keys_gen
        ag.hot[pagino] = ch
        return ch

    def _known_free_chunk(self, ag, pagino: int):
        """The free chunk nearest the parent where it is known without a
        search (:meth:`_find_free_chunk`'s answer then), else None."""
        # the chunk nearest the parent stays nearest while it has free
        # inodes: allocations only take inodes away, new chunks are only made
        # when no chunk has any, and frees reach the finobt at commit
        hot = ag.hot.get(pagino)
        if hot is not None and hot.freecount:
            return hot
        own = self._own_chunk(ag, pagino)
        if own is not None:
            return own
        fino = ag.fino
        if fino is not None:
            # the nearest chunk a past transaction found stays nearest while
            # the finobt is unchanged since (its own update of that record
            # included): no search
            near = ag.fino_near.get(pagino)
            if near is not None and near[0] == fino.gen:
                ch = ag.hot[pagino] = self._chunk(ag.agno, near[1], True)
                ag.hot_keys[pagino] = fino.keys_gen
                return ch
        return None

    def _find_free_chunk(self, ag, pagino: int):
        ch = self._known_free_chunk(ag, pagino)
        if ch is not None:
            return ch
        ch = self._search_free_chunk(ag, pagino)
        if ch is not None:
            ag.hot[pagino] = ch
            if ag.fino is not None:
                ag.hot_keys[pagino] = ag.fino.keys_gen
        return ch

    def remember_nearest(self) -> None:
        """At the end of commit: the chunks found nearest to a parent this
        transaction that are still free and in the finobt, with the finobt
        unchanged in its keys since they were found, are noted for the next
        transactions (:meth:`_find_free_chunk`)."""
        for ag in self.session.ags.values():
            fino = ag.fino
            if fino is None or not ag.hot:
                continue
            near = ag.fino_near
            if len(near) > 4096:
                near.clear()
            keys = ag.hot_keys
            for pagino, ch in ag.hot.items():
                if ch.in_fino and ch.freecount and keys.get(pagino) == fino.keys_gen:
                    near[pagino] = (fino.gen, ch.rec)
                else:
                    near.pop(pagino, None)

    def _search_free_chunk(self, ag, pagino: int):
        fino = ag.fino
        if fino is not None:
            got = self._gap(ag.agno, fino, pagino)
            if got is None:
                lo = fino.lookup_le((pagino,))
                hi = fino.lookup_ge((pagino + 1,)) if lo is None or \
                    lo[0] + XFS_INODES_PER_CHUNK <= pagino else None
                self._note_gap(ag.agno, fino, pagino, lo, hi)
            else:
                lo, hi = got
            cands = [r for r in (lo, hi) if r is not None]
            if not cands:
                return None
            rec = min(cands, key=lambda r: abs(r[0] - pagino))
            return self._chunk(ag.agno, rec, True)
        # no finobt: walk the inobt outwards from the parent's chunk
        left = ag.ino.iter_from((pagino,), reverse=True)
        right = ag.ino.iter_from((pagino + 1,))
        while left is not None or right is not None:
            for side in ("l", "r"):
                it = left if side == "l" else right
                if it is None:
                    continue
                rec = next(it, None)
                if rec is None:
                    if side == "l":
                        left = None
                    else:
                        right = None
                    continue
                ch = self._chunk(ag.agno, rec, False)
                if ch.freecount:
                    return ch
        return None

    def _gap(self, agno: int, fino, pagino: int):
        """(lo, hi) as _search_free_chunk's finobt lookups would find them
        for ``pagino``, from a stretch a past search of this transaction
        found without records (the finobt's keys unchanged since: inserts
        and deletes change keys_gen; a record changed in place is this
        transaction's chunk, which _chunk takes over the record), or
        None.  The creates of many directories whose nearest chunk has just
        filled ask the same question, one search each otherwise."""
        got = self.gaps.get(agno)
        if got is None or got[0] is not fino or got[1] != fino.keys_gen:
            return None
        for start, end, last, lo, hi in got[2]:
            # no record starts in (start, end]: lookup_le of pagino is lo;
            # lookup_ge of pagino + 1 is hi where hi was looked up
            if start <= pagino <= end:
                if lo is not None and lo[0] + XFS_INODES_PER_CHUNK > pagino:
                    return lo, None
                if last:
                    return lo, hi
        return None

    def _note_gap(self, agno: int, fino, pagino: int, lo, hi) -> None:
        got = self.gaps.get(agno)
        if got is None or got[0] is not fino or got[1] != fino.keys_gen:
            got = self.gaps[agno] = (fino, fino.keys_gen, [])
        if len(got[2]) >= 64:
            got[2].clear()
        start = -1 if lo is None else lo[0]
        looked = lo is None or lo[0] + XFS_INODES_PER_CHUNK <= pagino
        if looked:
            end = (1 << 32) if hi is None else hi[0] - 1
        else:
            end = pagino
        got[2].append((start, end, looked, lo, hi))

    def _new_chunk(self, ag):
        """Allocate a full inode chunk (aligned), right after the AG's newest
        chunk when that space is free, else near the inode btree root."""
        n = self.ialloc_blks
        got = None
        space = ag.space
        newino = ag.agi["agi_newino"]
        if newino != C.NULLAGINO:
            t = (newino >> self.sb.inopblog) + n
            if t % self.inoalign == 0 and t + n <= ag.length:
                got = space.alloc_in_ag(ag, t, n, n, exact=True, owner=R.INODES)
        if got is None:
            got = space.alloc_in_ag(ag, ag.agi["agi_root"], n, n, align=self.inoalign,
                                   owner=R.INODES)
        if got is None:
            return self._new_sparse_chunk(ag) if self.sparse else None
        agbno = got[0]
        space.allocated += n
        startino = agbno << self.sb.inopblog
        # a block of more than 64 inodes (64 KiB blocks) is allocated whole,
        # one record per 64 of its inodes (the kernel's ialloc_inos)
        nrecs = max(1, self.sb.inopblock // XFS_INODES_PER_CHUNK)
        first = None
        for k in range(nrecs):
            rec = (startino + k * XFS_INODES_PER_CHUNK, 0, XFS_INODES_PER_CHUNK,
                   XFS_INODES_PER_CHUNK, ALL_FREE)
            ag.ino.insert(rec)
            if ag.fino is not None:
                ag.fino.insert(rec)
            ch = self.chunks[(ag.agno, rec[0])] = Chunk(ag.agno, rec, ag.fino is not None,
                                                         new=True)
            first = first or ch
        # free inodes are filled in at commit (most slots are taken by
        # allocated inodes first)
        self._new_cluster_bufs(ag.agno, agbno, n)
        ag.agi["agi_count"] += nrecs * XFS_INODES_PER_CHUNK
        ag.agi["agi_freecount"] += nrecs * XFS_INODES_PER_CHUNK
        ag.agi["agi_newino"] = startino
        ag.agi_dirty = True
        return first

    def _new_sparse_chunk(self, ag):
        """When free space has no aligned room for a whole chunk: one inode
        cluster (sb_spino_align blocks) recorded as the present part of a
        chunk-aligned sparse record, merged into that record if it exists."""
        sb = self.sb
        n = self.spino_align
        if not n or n >= self.ialloc_blks:
            return None
        space = ag.space
        got = space.alloc_in_ag(ag, ag.agi["agi_root"], n, n, align=n, owner=R.INODES)
        if got is None:
            return None
        agbno = got[0]
        cstart = agbno - agbno % self.inoalign
        if cstart == 0 or cstart + self.ialloc_blks > ag.length:
            # the whole chunk's inode numbers must be valid: give it back
            space.free_ag_extent(ag.agno, agbno, n, owner=R.INODES)
            return None
        space.allocated += n
        startino = cstart << sb.inopblog
        first_idx = (agbno - cstart) << sb.inopblog
        ninodes = n << sb.inopblog
        present = ((1 << ninodes) - 1) << first_idx
        holemask = 0
        for b in range(XFS_INODES_PER_CHUNK // XFS_INODES_PER_HOLEMASK_BIT):
            if not (present >> (XFS_INODES_PER_HOLEMASK_BIT * b)) & 0xF:
                holemask |= 1 << b
        self._new_cluster_bufs(ag.agno, agbno, n)
        first = (ag.agno << sb.agino_log) | startino
        old = ag.ino.lookup_eq((startino,))
        if old is not None:
            ch = self.chunks.get((ag.agno, startino)) or \
                self._chunk(ag.agno, old, ag.fino is not None and old[3] > 0)
            if present & ch.present:
                raise CorruptionError("inobt", f"sparse chunk at {startino} already holds "
                                      "the inodes just allocated", agno=ag.agno)
            ch.holemask &= holemask
            ch.present |= present
            ch.count += ninodes
            ch.freecount += ninodes
            ch.free |= present
            for i in range(first_idx, first_idx + ninodes):
                self.put_inode(first + i, self.enc.free(first + i))
        else:
            rec = (startino, holemask, ninodes, ninodes, ALL_FREE)
            ag.ino.insert(rec)
            if ag.fino is not None:
                ag.fino.insert(rec)
            ch = self.chunks[(ag.agno, startino)] = Chunk(ag.agno, rec, ag.fino is not None,
                                                           new=True)
        ag.agi["agi_count"] += ninodes
        ag.agi["agi_freecount"] += ninodes
        ag.agi["agi_newino"] = startino
        ag.agi_dirty = True
        return ch

    def free_inode(self, ino: int) -> None:
        """Mark an inode free (its blocks must already be freed); the chunk is
        released when every inode in it is free, as the kernel does."""
        agno, agino = self.ino_split(ino)
        ag = self.session.ag(agno)
        rec = ag.ino.lookup_le((agino,))
        if rec is None or not rec[0] <= agino < rec[0] + XFS_INODES_PER_CHUNK:
            raise CorruptionError("inobt", f"inode {ino} is in no inode chunk", agno=agno,
                                  ino=ino)
        ch = self.chunks.get((agno, rec[0])) or self._chunk(agno, rec, bool(rec[3]) and
                                                              ag.fino is not None)
        bit = 1 << (agino - ch.startino)
        if ch.free & bit:
            raise CorruptionError("inobt", f"inode {ino} is already free", agno=agno, ino=ino)
        ch.free |= bit
        ch.freecount += 1
        ag.agi["agi_freecount"] += 1
        ag.agi_dirty = True
        self.put_inode(ino, self.enc.free(ino))

    def _put_free_inodes(self, ch: Chunk, missing: int) -> None:
        """The inodes of new chunk ``ch`` in ``missing`` (bits from its
        first inode) written free, as :meth:`put_inode` of ``enc.free`` would
        write each: a cluster buffer at a time, natively."""
        sb = self.sb
        per_cluster = (self.cluster_blocks << sb.blocklog) >> sb.inodelog
        tpl = self.enc.free(0)
        first = (ch.agno << sb.agino_log) | ch.startino
        fs = self.fs
        join = self.session.tx.join
        fill = writers.fill_free_inodes
        cksum = parsers.xfs_cksum
        ch.put |= missing
        inos = []
        while missing:
            i = (missing & -missing).bit_length() - 1
            # the cluster of that inode, and the inodes of missing in it
            shift = i - (ch.startino + i) % per_cluster
            span = (1 << (per_cluster + min(shift, 0))) - 1 << max(shift, 0)
            mine = missing & span
            missing &= ~span
            buf, _off = fs.inode_cluster(first + shift)
            join(buf)
            fill(buf.data, tpl, first + shift,
                 mine >> shift if shift >= 0 else mine << -shift,
                 C.XFS_DINODE_CRC_OFF, cksum)
            while mine:
                low = mine & -mine
                mine ^= low
                inos.append(first + low.bit_length() - 1)
        fs.forget_inodes(inos)

    # -- commit ---------------------------------------------------------------------------
    def finish(self) -> None:
        """At commit: initialise the free inodes of new chunks, write the
        changed inode records into the inobt and finobt, and release chunks
        whose inodes are all free."""
        s = self.session
        sb = self.sb
        for (agno, startino), ch in sorted(self.chunks.items()):
            if ch.new:
                missing = ch.present & ~ch.put & ch.free
                if missing:
                    self._put_free_inodes(ch, missing)
        for (agno, startino), ch in sorted(self.chunks.items()):
            ag = s.ag(agno)
            if not ch.new and ch.rec == ch.loaded and \
                    (ag.fino is None or ch.in_fino == bool(ch.freecount)):
                # unchanged; but an inode taken and freed again in one
                # transaction leaves the record as it was while the finobt
                # lost it when the chunk was (briefly) full
                continue
            if ch.freecount == ch.count and not ch.new and ch.count and \
                    sb.inopblock <= XFS_INODES_PER_CHUNK:
                # every inode free again: give the chunk back (not a chunk
                # sharing its block with another: the kernel keeps those),
                # a sparse one's allocated parts each (xfs_difree_inode_chunk)
                ag.ino.delete((startino,))
                if ch.in_fino:
                    ag.fino.delete((startino,))
                ag.agi["agi_count"] -= ch.count
                ag.agi["agi_freecount"] -= ch.count
                ag.agi_dirty = True
                if not ch.holemask:
                    s.space.free_ag_extent(agno, startino >> sb.inopblog, self.ialloc_blks,
                                            owner=R.INODES)
                    continue
                for a, b in coalesce([((startino + i) >> sb.inopblog,
                                       ((startino + i) >> sb.inopblog) + 1)
                                      for i in range(XFS_INODES_PER_CHUNK)
                                      if ch.present >> i & 1]):
                    s.space.free_ag_extent(agno, a, b - a, owner=R.INODES)
                continue
            ag.ino.update(ch.rec)
            if ag.fino is None:
                continue
            if ch.freecount and ch.in_fino:
                ag.fino.update(ch.rec)
            elif ch.freecount:
                ag.fino.insert(ch.rec)
                ch.in_fino = True
            elif ch.in_fino:
                ag.fino.delete((startino,))
                ch.in_fino = False
