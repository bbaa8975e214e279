"""Per-AG state while a transaction changes an AG (the kernel's xfs_perag and
its header buffers).

A :class:`PerAG` reads the AG's three header sectors (AGF, AGI, AGFL)
through the open transaction, keeps them decoded while the transaction
changes them, and packs whatever changed back into the buffers when the
transaction commits.  It also holds the AG's btrees (bnobt, cntbt, inobt,
finobt), whose blocks come and go through the transaction too.

A PerAG outlives its transaction (the kernel keeps its xfs_perag for the
mount's life): the session asks it to :meth:`PerAG.rebind` to the next
transaction, which keeps the decoded headers and btree roots only if the
header buffers are the very objects it packed last and still hold
exactly the bytes it left there (a checkpoint stamping an LSN, an abort
putting old bytes back, the cache dropping a buffer, or anyone else
changing a header all make it start afresh).  A kept PerAG joins a
header to the transaction only when it writes it, at :meth:`PerAG.pack`.
Blocks of the btrees are joined anew in every transaction.
"""
from __future__ import annotations

import struct

from ..errors import CorruptionError, NoSpaceError
from ..format import constants as C
from ..format.structs import AGF, AGI
from ..fs import btree as B, btree_write as BW
from ..io import verify as V
from . import refcount, rmap


class TreeStore:
    """Blocks of one per-AG btree, seen through the open transaction (the
    btree engine's block store)."""

    def __init__(self, ag: "PerAG", kind: str, buftype: V.BufType):
        self.ag = ag
        self.kind = kind
        self.buftype = buftype
        self.blocksize = ag.sb.blocksize
        self.bb = ag.sb.blocksize >> C.BBSHIFT
        # blocks the open transaction already holds (emptied when the
        # PerAG moves on to the next one): the engine reads the same few
        # blocks over and over
        self._held: dict = {}

    def daddr(self, addr: int) -> int:
        return self.ag.fs.agb_to_daddr(self.ag.agno, addr)

    def read(self, addr: int) -> bytearray:
        data = self._held.get(addr)
        if data is not None:
            return data
        ag = self.ag
        if not 0 < addr < ag.length:
            raise CorruptionError(self.buftype.name, f"pointer to block {addr} outside the AG",
                                  agno=ag.agno, block=addr)
        data = self._held[addr] = ag.tx.read_buf(
            self.daddr(addr), self.blocksize, self.buftype, agno=ag.agno, block=addr,
            owner=ag.agno).data
        return data

    def new(self, addr: int) -> bytearray:
        data = self._held[addr] = self.ag.tx.get_buf(self.daddr(addr), self.blocksize,
                                                     self.buftype).data
        return data

    def dirty(self, addr: int) -> None:
        """Changes are found by comparing with the image's copy: nothing to do."""

    def alloc(self, near: int) -> int:
        ag = self.ag
        kind = self.kind
        if kind in ("bno", "cnt", "rmap"):
            # the free-space btrees and the rmapbt live off the free list
            # (their blocks stay OWN_AG in the rmapbt)
            bno = ag.agfl_get()
            ag.agf["agf_btreeblks"] += 1
            if kind == "rmap":
                ag.agf["agf_rmap_blocks"] += 1
            ag.agf_dirty = True
            return bno
        if kind == "refc":
            got = ag.space.alloc_in_ag(ag, near, 1, 1, owner=rmap.REFC, resv="meta")
            if got is None:
                raise NoSpaceError(f"AG {ag.agno} has no free block for a refcount btree "
                                   "block")
            ag.agf["agf_refcount_blocks"] += 1
            ag.agf_dirty = True
            return got[0]
        got = ag.space.alloc_in_ag(ag, near, 1, 1, owner=rmap.INOBT,
                                   resv="meta" if kind == "fino" else "none")
        if got is None:
            raise NoSpaceError(f"AG {ag.agno} has no free block for an inode btree block")
        ag.count_iblocks(kind, +1)
        return got[0]

    def free(self, addr: int) -> None:
        ag = self.ag
        kind = self.kind
        self._held.pop(addr, None)
        ag.tx.binval(self.daddr(addr), self.bb)
        if kind in ("bno", "cnt", "rmap"):
            ag.agfl_put(addr)
            ag.tx.mark_busy(ag.agno, addr, 1)
            ag.agf["agf_btreeblks"] -= 1
            if kind == "rmap":
                ag.agf["agf_rmap_blocks"] -= 1
            ag.agf_dirty = True
        elif kind == "refc":
            ag.space.free_ag_extent(ag.agno, addr, 1, owner=rmap.REFC)
            ag.agf["agf_refcount_blocks"] -= 1
            ag.agf_dirty = True
        else:
            ag.space.free_ag_extent(ag.agno, addr, 1, owner=rmap.INOBT)
            ag.count_iblocks(kind, -1)


class PerAG:
    """One AG's headers and btrees for the open transaction."""

    def __init__(self, session, agno: int):
        self.session = session
        self.fs = fs = session.fs
        self.sb = sb = fs.sb
        self.tx = session.tx
        self.space = session.space
        self.agno = agno
        self.length = fs.ag_length(agno)
        self.saved = None          # the header bytes as the last commit left them
        self.agf_buf, self.agi_buf, self.agfl_buf = self._read_headers(self.tx)
        self.agf = f = AGF.unpack(self.agf_buf.data)
        self.agi = i = AGI.unpack(self.agi_buf.data)
        for name, d in (("agf", f), ("agi", i)):
            if d[name + "_seqno"] != agno or d[name + "_length"] != self.length:
                raise CorruptionError(name, f"sequence number {d[name + '_seqno']} or length "
                                      f"{d[name + '_length']} does not fit AG {agno}",
                                      agno=agno, field=name + "_seqno")
        nslots = (sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        self.agfl_slots = list(struct.unpack_from(f">{nslots}I", self.agfl_buf.data,
                                                  C.XFS_AGFL_HDR_SIZE))
        self.agf_dirty = self.agi_dirty = self.agfl_dirty = False
        uuid = fs.uuid
        self.bno = BW.ShortBtree(B.BNOBT, TreeStore(self, "bno", V.BNOBT),
                                 root=f["agf_roots"][0], levels=f["agf_levels"][0],
                                 agno=agno, uuid=uuid)
        self.cnt = BW.ShortBtree(B.CNTBT, TreeStore(self, "cnt", V.CNTBT),
                                 root=f["agf_roots"][1], levels=f["agf_levels"][1],
                                 agno=agno, uuid=uuid)
        self.ino = BW.ShortBtree(B.inobt_type(session.sparse), TreeStore(self, "ino", V.INOBT),
                                 root=i["agi_root"], levels=i["agi_level"], agno=agno, uuid=uuid)
        self.fino = None
        if session.finobt:
            self.fino = BW.ShortBtree(B.inobt_type(session.sparse, free=True),
                                      TreeStore(self, "fino", V.FINOBT),
                                      root=i["agi_free_root"], levels=i["agi_free_level"],
                                      agno=agno, uuid=uuid)
        # the reverse-mapping and refcount btrees (None without the feature,
        # or while a repair rebuilds the rmapbt whole instead)
        self.rmap = None
        if session.rmap_on:
            self.rmap = rmap.Rmap(BW.ShortBtree(B.RMAPBT, TreeStore(self, "rmap", V.RMAPBT),
                                                root=f["agf_roots"][2],
                                                levels=f["agf_levels"][2],
                                                agno=agno, uuid=uuid), agno,
                                  room=lambda: self.space.rmap_room(self))
        self.refc = None
        if session.reflink:
            self.refc = refcount.Refcount(
                BW.ShortBtree(B.REFCOUNTBT, TreeStore(self, "refc", V.REFCBT),
                              root=f["agf_refcount_root"], levels=f["agf_refcount_level"],
                              agno=agno, uuid=uuid), agno)
        self.longest_stale = False
        self.hot: dict = {}        # parent agino -> the free chunk nearest to it
        self.hot_keys: dict = {}   # parent agino -> finobt keys_gen when it was found
        # across transactions: parent agino -> (finobt gen, record) of the
        # free chunk nearest to it, good while the finobt is unchanged since
        self.fino_near: dict = {}

    # -- from one transaction to the next -------------------------------------
    def _read_headers(self, tx) -> tuple:
        ss = self.sb.sectsize
        base = self.fs.agb_to_daddr(self.agno, 0)
        step = ss >> C.BBSHIFT
        agno = self.agno
        return (tx.read_buf(base + step, ss, V.AGF, agno=agno, block=0),
                tx.read_buf(base + 2 * step, ss, V.AGI, agno=agno, block=0),
                tx.read_buf(base + 3 * step, ss, V.AGFL, agno=agno, block=0))

    def remember(self) -> None:
        """The open transaction is about to commit with these headers
        (packed already): what :meth:`rebind` expects to find next time."""
        self.saved = (bytes(self.agf_buf.data), bytes(self.agi_buf.data),
                      bytes(self.agfl_buf.data))

    def rebind(self, tx) -> bool:
        """Take part in transaction ``tx``, keeping what is decoded; False
        when the headers are not as the last commit left them (the caller
        then makes a fresh PerAG; the headers stay joined, which is
        harmless)."""
        saved = self.saved
        if saved is None:
            return False
        # the cache still holds the very buffers, unchanged: joined as they
        # are (what reading them through the transaction would give)
        get = self.fs.cache.get
        mine = (self.agf_buf, self.agi_buf, self.agfl_buf)
        for buf, raw in zip(mine, saved):
            if get(buf.key) is not buf or buf.stale or buf.data != raw:
                self.saved = None
                self._read_headers(tx)
                return False
        # not joined yet: :meth:`pack` joins a header when it writes it (most
        # transactions change the AGI alone)
        self.tx = tx
        for tree in self.trees():
            tree.store._held.clear()
        self.agf_dirty = self.agi_dirty = self.agfl_dirty = False
        self.longest_stale = False
        self.hot = {}
        self.hot_keys = {}
        return True

    def trees(self) -> list:
        """Every btree of the AG this state holds."""
        out = [self.bno, self.cnt, self.ino]
        if self.fino is not None:
            out.append(self.fino)
        if self.rmap is not None:
            out.append(self.rmap.tree)
        if self.refc is not None:
            out.append(self.refc.tree)
        return out

    # -- AGFL ring -----------------------------------------------------------
    @property
    def flcount(self) -> int:
        return self.agf["agf_flcount"]

    def agfl_get(self) -> int:
        f = self.agf
        if f["agf_flcount"] == 0:
            raise NoSpaceError(f"AG {self.agno}: the free list is empty")
        n = len(self.agfl_slots)
        if not 0 <= f["agf_flfirst"] < n:
            raise CorruptionError("agf", f"free list start {f['agf_flfirst']}", agno=self.agno,
                                  field="agf_flfirst")
        bno = self.agfl_slots[f["agf_flfirst"]]
        self.agfl_slots[f["agf_flfirst"]] = C.NULLAGBLOCK
        f["agf_flfirst"] = (f["agf_flfirst"] + 1) % n
        f["agf_flcount"] -= 1
        if not 0 < bno < self.length:
            raise CorruptionError("agfl", f"free list holds block {bno}", agno=self.agno)
        self.agf_dirty = self.agfl_dirty = True
        return bno

    def agfl_put(self, bno: int) -> None:
        f = self.agf
        n = len(self.agfl_slots)
        if f["agf_flcount"] >= n:
            raise NoSpaceError(f"AG {self.agno}: the free list is full")
        f["agf_fllast"] = (f["agf_fllast"] + 1) % n
        if f["agf_flcount"] == 0:
            f["agf_flfirst"] = f["agf_fllast"]
        self.agfl_slots[f["agf_fllast"]] = bno
        f["agf_flcount"] += 1
        self.agf_dirty = self.agfl_dirty = True

    def count_iblocks(self, kind: str, delta: int) -> None:
        if self.session.inobtcount:
            self.agi["agi_iblocks" if kind == "ino" else "agi_fblocks"] += delta
            self.agi_dirty = True

    def sync_roots(self) -> None:
        """Copy the btrees' current roots and heights into the AG headers."""
        f, i = self.agf, self.agi
        rt = self.rmap.tree if self.rmap is not None else None
        roots = [self.bno.root, self.cnt.root, rt.root if rt else f["agf_roots"][2]]
        levels = [self.bno.levels, self.cnt.levels, rt.levels if rt else f["agf_levels"][2]]
        if roots != f["agf_roots"] or levels != f["agf_levels"]:
            f["agf_roots"], f["agf_levels"] = roots, levels
            self.agf_dirty = True
        rc = self.refc.tree if self.refc is not None else None
        if rc is not None and (rc.root, rc.levels) != (f["agf_refcount_root"],
                                                       f["agf_refcount_level"]):
            f["agf_refcount_root"], f["agf_refcount_level"] = rc.root, rc.levels
            self.agf_dirty = True
        if (self.ino.root, self.ino.levels) != (i["agi_root"], i["agi_level"]):
            i["agi_root"], i["agi_level"] = self.ino.root, self.ino.levels
            self.agi_dirty = True
        if self.fino is not None and \
                (self.fino.root, self.fino.levels) != (i["agi_free_root"], i["agi_free_level"]):
            i["agi_free_root"], i["agi_free_level"] = self.fino.root, self.fino.levels
            self.agi_dirty = True

    def pack(self) -> None:
        """Write the changed headers into their buffers (at commit)."""
        join = self.tx.join
        if self.agf_dirty:
            raw = AGF.pack(self.agf)
            join(self.agf_buf).data[:len(raw)] = raw
        if self.agi_dirty:
            raw = AGI.pack(self.agi)
            join(self.agi_buf).data[:len(raw)] = raw
        if self.agfl_dirty:
            join(self.agfl_buf)
            struct.pack_into(f">{len(self.agfl_slots)}I", self.agfl_buf.data,
                             C.XFS_AGFL_HDR_SIZE, *self.agfl_slots)
        self.agf_dirty = self.agi_dirty = self.agfl_dirty = False

    def counters(self) -> tuple[int, int, int]:
        """(inodes, free inodes, free blocks) as the superblock counts them."""
        f, i = self.agf, self.agi
        return (i["agi_count"], i["agi_freecount"],
                f["agf_freeblks"] + f["agf_flcount"] + f["agf_btreeblks"])
