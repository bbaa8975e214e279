"""What the kernel does after replaying the log, before the mount completes.

* intents left without a done item are finished, in log order, as the
  kernel's xlog_recover_process_intents does: an EFI's extents are freed
  (whatever rmap records they still have removed, the EFI naming no
  owner), an RUI's reverse mappings made (map, unmap, convert, their shared
  variants, alloc, free), a CUI's reference counts moved (increase,
  decrease — freeing what loses its last reference — and copy-on-write
  staging extents recorded or dropped), a BUI's file mapping added to or
  removed from an inode's data fork, an ATTRI redone whole from the name
  and value it logged (xfs_attri_recover_work), an XMI's mapping exchange
  resumed from the state it logged (xfs_exchmaps_recover_work); each gets
  its done item.  What cannot be finished exactly (BUIs of an attr fork,
  unknown ATTRI or XMI flags, attr fork exchanges) is refused before
  anything is written;
* the regular files those intents read in lose their blocks past the size
  they had then, as the kernel's inactivation of them at unmount does;
* the inodes on the AGI unlinked lists (open when the system stopped, but
  unlinked) are freed with their blocks, as inode inactivation does;
* copy-on-write staging extents left in the refcount btrees are dropped and
  their blocks freed (xfs_reflink_recover_cow);
* the superblock's lazy counters are recomputed from the AG headers.

The freeing is one transaction of the write session
(``fstool.ns.writer.Writer``), opened with ``recovering=`` the recovered
head and tail: it accepts the image while its log is still dirty, and its
journal writes the transaction as a checkpoint right after the replayed log
(with an EFD for every EFI it finished), writes it back, then writes the
unmount record.  Interrupted anywhere, a new replay reaches the same image:
before the commit record the checkpoint is ignored and the work redone;
after it, the checkpoint is replayed and nothing is left to do.  This
module is the only place recovery touches the write side.
"""
from __future__ import annotations

import struct

from ..alloc import rmap as R
from ..alloc.refcount import COW_FLAG
from ..errors import FsToolError, NoDataError, UnsupportedError
from ..format import constants as C, log as L, parent as P
from ..format.structs import DINODE, SB, SB as SBL
from ..fs import btree as B
from ..fs.filesystem import Filesystem
from ..io import verify as V
from ..log.items import intent_what
from ..fs import attr as FA
from ..ns.fileio import FileIO
from ..ns.namespace import Namespace
from ..ns.writer import Writer
from ..trans.logwriter import done_regions, efd_regions

FINISHABLE = {L.XFS_LI_EFI, L.XFS_LI_RUI, L.XFS_LI_CUI, L.XFS_LI_BUI, L.XFS_LI_ATTRI,
              L.XFS_LI_XMI}
_PPTR_OPS = {L.XFS_ATTRI_OP_FLAGS_PPTR_SET, L.XFS_ATTRI_OP_FLAGS_PPTR_REMOVE,
             L.XFS_ATTRI_OP_FLAGS_PPTR_REPLACE}
_XATTR_OPS = {L.XFS_ATTRI_OP_FLAGS_SET, L.XFS_ATTRI_OP_FLAGS_REMOVE,
              L.XFS_ATTRI_OP_FLAGS_REPLACE}
_ATTR_FILTERS = C.XFS_ATTR_ROOT | C.XFS_ATTR_SECURE | C.XFS_ATTR_PARENT
_DIFLAG_REALTIME = 1                 # XFS_DIFLAG_REALTIME
_MAX_FILEOFF = (1 << 54) - 1         # XFS_MAX_FILEOFF (xfs_verify_fileext)


class IntentRefused(UnsupportedError):
    """Replay needs work fstool cannot do (the CLI's "unsupported" exit
    status); nothing was written."""


def check_intents(intents: dict, sb=None) -> list:
    """The unfinished intents as dicts; raises IntentRefused naming the first
    one fstool cannot finish (``sb``: the superblock, for the features an
    ATTRI or XMI needs)."""
    out = []
    for (code, iid), (lsn, d, blk) in sorted(intents.items(), key=lambda kv: kv[1][0]):
        if code == L.XFS_LI_BUI and any(e["flags"] & (L.XFS_BMAP_EXTENT_ATTR_FORK |
                                                      L.XFS_BMAP_EXTENT_REALTIME)
                                        for e in d["extents"]):
            raise IntentRefused(
                f"record at log block {blk}: BUI intent 0x{iid:x} maps an attr fork or "
                "realtime extent, which fstool cannot finish; nothing was written: mount "
                "the image with the kernel to recover it")
        why = "unsupported intent type" if code not in FINISHABLE else \
            _unfinishable(d, sb) if code in (L.XFS_LI_ATTRI, L.XFS_LI_XMI) else \
            _bad_bmap(d, sb) if code == L.XFS_LI_BUI and sb is not None else None
        if why:
            raise IntentRefused(f"record at log block {blk}: {_refused(d, why)}")
        out.append(d)
    return out


def _bad_bmap(d: dict, sb) -> str | None:
    """What xfs_bui_validate rejects in a BUI's mapping: blocks outside
    an AG's space past its headers, a file range past the largest offset,
    no blocks."""
    for e in d["extents"]:
        fsb, n = e["startblock"], e["len"]
        agno, agbno = fsb >> sb.agblklog, fsb & ((1 << sb.agblklog) - 1)
        ag_len = min(sb.agblocks, sb.dblocks - agno * sb.agblocks)
        first = 3 * sb.sectsize // sb.blocksize + 1      # past XFS_AGFL_BLOCK
        if not n or agno >= sb.agcount or agbno < first or agbno + n > ag_len:
            return f"a mapping of blocks {fsb}+{n} outside the filesystem's data space"
        if e["startoff"] + n > _MAX_FILEOFF:
            return "a mapping past the largest file offset"
    return None


def _unfinishable(d: dict, sb=None) -> str | None:
    """Why an ATTRI or XMI cannot be finished exactly as the kernel would
    (what xfs_attri_validate and xfs_xmi_validate reject, and what fstool
    has no writer for), or None."""
    if d["type_code"] == L.XFS_LI_ATTRI:
        if sb is not None and d["op_flags"] in _PPTR_OPS and \
                not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_PARENT):
            return "a parent pointer change on a filesystem without parent pointers"
        if sb is not None and d["op_flags"] in _XATTR_OPS and \
                not sb.log_incompat & C.XFS_SB_FEAT_LOG_INCOMPAT_XATTRS:
            # xfs_attri_validate: the kernel's mount refuses it too
            return ("an xattr change logged on a filesystem without the logged xattrs "
                    "log feature")
        if d["op_flags"] == L.XFS_ATTRI_OP_FLAGS_REMOVE and d["value_len"]:
            return "an xattr remove with a value"
        op = d["op_flags"]
        if op & ~L.XFS_ATTRI_OP_FLAGS_TYPE_MASK or op not in L.ATTRI_OP_NAMES:
            return f"unknown attr operation flags 0x{op:x}"
        if d["filter"] & ~_ATTR_FILTERS:
            return f"unknown attr filter flags 0x{d['filter']:x}"
        if not d["name_len"] or "name" not in d:
            return "no attr name logged"
        pptr = op in _PPTR_OPS
        if pptr != bool(d["filter"] & C.XFS_ATTR_PARENT) or \
                (pptr and d["filter"] != C.XFS_ATTR_PARENT):
            return f"{d['op']} in namespace {d['filter_names']}"
        if pptr and any(len(d.get(k, b"")) != P.XFS_PARENT_REC_SIZE for k in
                        (("value", "new_value") if op == L.XFS_ATTRI_OP_FLAGS_PPTR_REPLACE
                         else ("value",))):
            return "a parent pointer value that is not a parent record"
        if op == L.XFS_ATTRI_OP_FLAGS_PPTR_REPLACE and "new_name" not in d:
            return "a parent pointer replace without its new name"
        return None
    if sb is not None and not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_EXCHRANGE):
        return "an exchange on a filesystem without the exchange-range feature"
    flags = d["flags"]
    known = 0
    for bit, _name in L.EXCHMAPS_FLAG_NAMES:
        known |= bit
    if flags & ~known:
        return f"unknown exchange flags 0x{flags:x}"
    if flags & L.XFS_EXCHMAPS_ATTR_FORK:
        return "an attr fork exchange, which fstool has no writer for"
    if d["inode1"] == d["inode2"]:
        return "both sides are one inode"
    if any(d[k] + d["blockcount"] > _MAX_FILEOFF for k in ("startoff1", "startoff2")):
        return "a range past the largest file offset"
    return None


def unlinked_inodes(fs) -> list:
    """(agno, bucket, [inode numbers]) of every AGI unlinked chain."""
    out = []
    sb = fs.sb
    for agno in range(sb.agcount):
        agi = fs.agi(agno)
        for b, head in enumerate(agi["agi_unlinked"]):
            chain = []
            agino = head
            seen = set()
            while agino != C.NULLAGINO and agino not in seen and len(chain) < 1 << 20:
                seen.add(agino)
                ino = (agno << sb.agino_log) | agino
                chain.append(ino)
                raw = fs.inode(ino).raw
                agino = struct.unpack_from(">I", raw, 96)[0]
            if chain:
                out.append((agno, b, chain))
    return out


def cow_leftovers(fs) -> list:
    """(agno, startblock, blockcount) of the CoW staging extents left in the
    refcount btrees (the kernel frees them at every mount of a reflink
    filesystem: xfs_reflink_recover_cow)."""
    out = []
    sb = fs.sb
    if not sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
        return out
    for agno in range(sb.agcount):
        agf = fs.agf(agno)
        root, level = agf["agf_refcount_root"], agf["agf_refcount_level"]
        if not root or not level:
            continue
        reader = B.BtreeReader(fs, B.REFCOUNTBT, agno=agno, owner=agno,
                               addr_to_daddr=lambda a, agno=agno: fs.agb_to_daddr(agno, a))
        for start, count, _refc in reader.ag_records(root, level):
            if start & COW_FLAG:
                out.append((agno, start & ~COW_FLAG, count))
    return out


def free_leftovers(w, ns=None) -> tuple[int, int]:
    """In the open transaction of session ``w``: the inodes on the AGI
    unlinked lists freed with their blocks (as inode inactivation does),
    the lists emptied, and the CoW staging extents left in the refcount
    btrees dropped, their blocks freed (xfs_reflink_recover_cow).
    Returns (inodes freed, staging extents dropped)."""
    ns = ns or Namespace(w)
    inodes = extents = 0
    for agno, bucket, chain in unlinked_inodes(w.fs):
        ag = w.ag(agno)
        for ino in chain:
            ns._destroy(ino)          # its blocks, then the inode
            inodes += 1
        ag.agi["agi_unlinked"][bucket] = C.NULLAGINO
        ag.agi_dirty = True
    for agno, start, count in cow_leftovers(w.fs):
        w.ag(agno).refc.cow_remove(start, count)
        w.space.free_ag_extent(agno, start, count, owner=R.COW)
        extents += 1
    return inodes, extents


def unlinked_faults(fs, chains: list) -> list:
    """What keeps the :func:`unlinked_inodes` ``chains`` from being freed
    as recovery frees them: an inode that is free, has links or hashes to
    another bucket, a chain that loops.  Messages, empty when none."""
    out = []
    sb = fs.sb
    for agno, bucket, chain in chains:
        for ino in chain:
            node = fs.inode(ino)
            agino = ino & ((1 << sb.agino_log) - 1)
            why = "is free" if not node.mode else \
                f"has {node.nlink} links" if node.nlink else \
                f"hashes to bucket {agino % C.XFS_AGI_UNLINKED_BUCKETS}" \
                if agino % C.XFS_AGI_UNLINKED_BUCKETS != bucket else None
            if why:
                out.append(f"AG {agno}: unlinked bucket {bucket} chains inode {ino}, which "
                           f"{why}")
        last = fs.inode(chain[-1]).next_unlinked
        if last != C.NULLAGINO:
            out.append(f"AG {agno}: unlinked bucket {bucket} loops back to inode "
                       f"{(agno << sb.agino_log) | last}")
    return out


def needs_writer(fs, intents: list) -> bool:
    return bool(intents) or bool(unlinked_inodes(fs)) or bool(cow_leftovers(fs))


def writer_supported(fs) -> str | None:
    """None when the writer can do the work after replay on this
    filesystem, else why not (every supported filesystem can now)."""
    return None


def refuse_unfinishable(view, intents: list, why: str) -> None:
    """``view`` is the image as replayed (in memory): refuse, before anything
    is written, when what follows replay cannot be done here."""
    work = []
    if intents:
        work.append(f"{len(intents)} unfinished intents")
    n = sum(len(c) for _a, _b, c in unlinked_inodes(view))
    if n:
        work.append(f"{n} inodes on the AGI unlinked lists (files deleted while open)")
    cow = cow_leftovers(view)
    if cow:
        work.append(f"{len(cow)} leftover CoW staging extents")
    if work:
        raise IntentRefused(
            f"after replay the kernel would free {', '.join(work)}; {why}; nothing was "
            "written: mount the image with the kernel to recover it")


def finish_with_writer(path, intents: list, position: tuple, *,
                       undo=None) -> tuple[dict, dict]:
    """Finish the unfinished intents, free the unlinked inodes and the
    leftover CoW extents in one journaled transaction of a write session
    that goes on from ``position`` (head block, cycle, last record block,
    tail LSN); the superblock counters come out recomputed from every AG and
    the log-incompatible feature bits cleared, as an unmount leaves them.
    ``undo``: given the writer's device before it writes (an undo file's
    recorder, ops/logops.replay).
    Returns (what was done, with ``logged``: what its checkpoint put in the
    log; the counters before and after)."""
    done = {"efi_extents": 0, "rui_extents": 0, "cui_extents": 0, "bui_extents": 0,
            "attr_intents": 0, "exchange_intents": 0, "eof_trimmed": 0,
            "unlinked_inodes": 0, "cow_extents": 0}
    # names are not changed here: parent pointers change only as the
    # unfinished ATTRIs of the log ask
    with Writer(path, recovering=position, keeps_parents=True) as w:
        if undo is not None:
            undo(w.dev)
        w.space.kernel_freelist = True
        sb = w.sb
        f0 = sb.fields
        before = {k: f0[k] for k in ("sb_icount", "sb_ifree", "sb_fdblocks")}
        with w.transaction():
            tx = w.tx
            ns = Namespace(w)
            ns.match_incomplete = True
            evicted = _recovered_inodes(w, intents)
            for d in intents:
                code = d["type_code"]
                if code == L.XFS_LI_EFI:
                    for start, length in d["extents"]:
                        # an EFI names no owner: whatever rmap is left goes
                        w.space.free_extent(start, length, owner=R.UNKNOWN)
                        done["efi_extents"] += 1
                    w.journal.add_item(efd_regions(d["id"], d["extents"]))
                    continue
                if code == L.XFS_LI_ATTRI:
                    _finish_attr(ns, d)
                    done["attr_intents"] += 1
                elif code == L.XFS_LI_XMI:
                    _finish_exchange(w, d)
                    done["exchange_intents"] += 1
                else:
                    finish, key = _PER_EXTENT.get(code, (_finish_bmap, "bui_extents"))
                    for e in d["extents"]:
                        finish(w, e)
                        done[key] += 1
                w.journal.add_item(done_regions(L.INTENT_DONE[code], d["id"]))
            io = FileIO(w)
            for ino, size in evicted.items():
                if io.evict_trim(ino, size):
                    done["eof_trimmed"] += 1
            done["unlinked_inodes"], done["cow_extents"] = free_leftovers(w, ns)
            # every AG's counters summed into the superblock (the session
            # does that at commit for the AGs it changed; all of them here)
            for agno in range(sb.agcount):
                w.ag(agno).agf_dirty = True
            sbuf = tx.read_buf(0, sb.sectsize, V.SB, agno=0, block=0)
            sbuf.data[SBL.offset("sb_features_log_incompat"):
                      SBL.offset("sb_features_log_incompat") + 4] = bytes(4)
        w.journal.push()
        logged = w.journal.last_checkpoint
        after_sb = SBL.unpack(w.fs.get_buf(0, sb.sectsize, V.SB).data)
        after = {k: after_sb[k] for k in ("sb_icount", "sb_ifree", "sb_fdblocks")}
    done["logged"] = logged
    return done, {"before": before, "after": after}


_RMAP_OPS = {1: "map", 2: "map_shared", 3: "unmap", 4: "unmap_shared", 5: "convert",
             6: "convert_shared", 7: "map", 8: "unmap"}


def _finish_rmap(w, e: dict) -> None:
    """One extent of an RUI (xfs_rmap_finish_one)."""
    flags = e["flags"]
    op = _RMAP_OPS.get(flags & L.XFS_RMAP_EXTENT_TYPE_MASK)
    if op is None:
        raise IntentRefused(f"RUI extent of unknown type {flags & 0xFF}")
    owner = e["owner"]
    fl = 0
    if flags & L.XFS_RMAP_EXTENT_ATTR_FORK:
        fl |= R.ATTR_FORK
    if flags & L.XFS_RMAP_EXTENT_BMBT_BLOCK:
        fl |= R.BMBT_BLOCK
    offset = 0 if R.non_inode(owner) or fl & R.BMBT_BLOCK else e["startoff"]
    unwritten = bool(flags & L.XFS_RMAP_EXTENT_UNWRITTEN)
    agno, agbno = w.space.fsb_split(e["startblock"])
    w.space.rmap_op(agno, op, agbno, e["len"], R.Owner(owner, offset, fl), unwritten)


def _finish_refcount(w, e: dict) -> None:
    """One extent of a CUI (xfs_refcount_finish_one): a reference more or
    less (blocks losing their last freed), or a staging extent recorded or
    dropped."""
    op = e["flags"] & L.XFS_REFCOUNT_EXTENT_TYPE_MASK
    agno, agbno = w.space.fsb_split(e["startblock"])
    refc = w.ag(agno).refc
    n = e["len"]
    if op in (1, 2):
        for start, k in refc.adjust(agbno, n, +1 if op == 1 else -1):
            w.space.free_ag_extent(agno, start, k, owner=None)
    elif op == 3:
        refc.cow_add(agbno, n)
    elif op == 4:
        refc.cow_remove(agbno, n)
    else:
        raise IntentRefused(f"CUI extent of unknown type {op}")


def _recovered_inodes(w, intents: list) -> dict:
    """{inode: size} of the files the kernel's recovery of these intents
    reads in (BUI owners, both XMI files, ATTRI inodes), each with the size
    it has when first read, before the intents change it: the kernel keeps
    that size in its in-memory inode (recovery changes only the on-disk
    one), and when the inode is evicted at unmount the blocks past it are
    freed (xfs_inactive).  An ATTRI's inode counts only when its data fork
    is in the inode: a bmbt one is not read in, and then nothing is
    freed."""
    out = {}
    for d in intents:
        code = d["type_code"]
        if code == L.XFS_LI_BUI:
            inos = [e["owner"] for e in d["extents"]]
        elif code == L.XFS_LI_XMI:
            inos = [d["inode1"], d["inode2"]]
        elif code == L.XFS_LI_ATTRI:
            inos = [d["ino"]]
            node = w.fs.inode(d["ino"])
            if node.format == C.XFS_DINODE_FMT_BTREE:
                continue
        else:
            continue
        for ino in inos:
            if ino not in out:
                out[ino] = w.fs.inode(ino).size
    return out


def check_intent_inodes(fs, intents: list) -> None:
    """``fs``: the image as replayed (in memory).  Refuse, before anything
    is written, an ATTRI or XMI whose inodes the kernel's recovery would
    not get (free, another generation, unreadable) or an XMI of files that
    are not regular files on the data device; and an intent whose inode's
    fork it works on cannot be read (a damaged block the kernel's recovery
    would stop at too)."""
    for d in intents:
        code = d["type_code"]
        if code == L.XFS_LI_ATTRI:
            node = _intent_inode(fs, d, d["ino"],
                                 d["igen"] if d["op_flags"] in _PPTR_OPS else None)
            _readable(d, node, lambda n: list(FA.iter_attrs(n)))
        elif code == L.XFS_LI_XMI:
            for k in ("1", "2"):
                node = _intent_inode(fs, d, d["inode" + k], d["igen" + k])
                if not node.is_reg or node.flags & _DIFLAG_REALTIME:
                    raise _refused(d, f"inode {node.ino} is not a regular file on the "
                                      "data device, which fstool cannot exchange")
                _readable(d, node, lambda n: n.extents())
        elif code == L.XFS_LI_BUI:
            for e in d["extents"]:
                _readable(d, _intent_inode(fs, d, e["owner"], None), lambda n: n.extents())


def _readable(d: dict, node, read) -> None:
    try:
        read(node)
    except (FsToolError, ValueError) as e:
        raise _refused(d, f"inode {node.ino}: {e}") from None


def _refused(d: dict, why: str) -> IntentRefused:
    what = intent_what(d)
    return IntentRefused(f"{d['type']} intent 0x{d['id']:x}{f' ({what})' if what else ''} "
                         f"has no done item and fstool cannot finish it ({why}); nothing "
                         "was written: mount the image with the kernel to recover it")


def _intent_inode(fs, d: dict, ino: int, gen: int | None):
    """The inode an ATTRI or XMI names, as the kernel's recovery gets it
    (xlog_recover_iget, and with the generation for a file handle:
    xlog_recover_iget_handle); refused when it is free or another file."""
    try:
        node = fs.inode(ino)
    except (FsToolError, ValueError) as e:
        raise _refused(d, f"inode {ino} cannot be read: {e}") from None
    if not node.mode or (gen is not None and node.gen != gen):
        raise _refused(d, f"it names inode {ino}"
                          f"{'' if gen is None else f' generation 0x{gen:x}'}, which is "
                          f"{'free' if not node.mode else f'generation 0x{node.gen:x}'}")
    return node


def _finish_attr(ns, d: dict) -> None:
    """An ATTRI redone whole from the name and value it logged
    (xfs_attri_recover_work): a set or replace removes what has the name
    (a parent pointer: the name and value) and adds it with the logged
    value; a remove removes it when it is there; a parent pointer replace
    removes the old name and value and adds the new ones.  The inode's
    times are left as the logged change left them (recovery does not
    touch them)."""
    ino = d["ino"]
    op = d["op_flags"]
    pptr = op in _PPTR_OPS
    _intent_inode(ns.fs, d, ino, d["igen"] if pptr else None)
    name = d["name"].encode("utf-8", "surrogateescape")
    ctime = DINODE.unpack(ns.raw_inode(ino))["di_ctime"]
    if pptr:
        old = (C.XFS_ATTR_PARENT, name, bytes(d["value"]))
        if op == L.XFS_ATTRI_OP_FLAGS_PPTR_REPLACE:
            new = (C.XFS_ATTR_PARENT, d["new_name"].encode("utf-8", "surrogateescape"),
                   bytes(d["new_value"]))
            ns._change_pptrs(ino, add=[new], remove=[old])
        elif op == L.XFS_ATTRI_OP_FLAGS_PPTR_SET:
            ns._change_pptrs(ino, add=[old], remove=[old])
        else:
            ns._change_pptrs(ino, remove=[old])
    else:
        key = FA.full_name(d["filter"], name)
        if op == L.XFS_ATTRI_OP_FLAGS_REMOVE:
            try:
                ns.remove_xattr(ino, key)
            except NoDataError:
                pass            # nothing to remove is no error in recovery
        else:
            ns.set_xattr(ino, key, bytes(d.get("value", b"")))
    ns._patch(ino, ctime=ctime)


def _finish_exchange(w, d: dict) -> None:
    """An XMI resumed from the state it logged (xfs_exchmaps_recover_work):
    the rest of the range exchanged step by step, the sizes then set when it
    asks for that (to each file's size as replay left the other's, as the
    kernel's recovery takes them), and the reflink marks exchanged when the
    whole files were."""
    check_intent_inodes(w.fs, [d])
    n1, n2 = w.fs.inode(d["inode1"]), w.fs.inode(d["inode2"])
    flags = d["flags"]
    set_sizes = bool(flags & L.XFS_EXCHMAPS_SET_SIZES)
    isize1, isize2 = (n2.size, n1.size) if set_sizes else (-1, -1)
    r1 = bool(n1.flags2 & C.XFS_DIFLAG2_REFLINK)
    r2 = bool(n2.flags2 & C.XFS_DIFLAG2_REFLINK)
    bs = w.sb.blocksize
    whole = r1 != r2 and d["startoff1"] == d["startoff2"] == 0 and \
        d["blockcount"] == -(-n1.size // bs) == -(-n2.size // bs)
    FileIO(w).exchange_mappings(
        d["inode1"], d["startoff1"], d["inode2"], d["startoff2"], d["blockcount"],
        isize1=isize1, isize2=isize2, set_sizes=set_sizes,
        ino1_written=bool(flags & L.XFS_EXCHMAPS_INO1_WRITTEN),
        clear_reflink=(whole and r1, whole and r2))


def _finish_bmap(w, e: dict) -> None:
    """One extent of a BUI (xfs_bmap_finish_one): a file mapping added to or
    removed from an inode's data fork (the blocks neither allocated nor
    freed: the intents that go with it do that), its rmap changed with it."""
    op = e["flags"] & L.XFS_BMAP_EXTENT_TYPE_MASK
    unwritten = 1 if e["flags"] & L.XFS_BMAP_EXTENT_UNWRITTEN else 0
    io = FileIO(w)
    if op == 1:
        io.map_extent(e["owner"], e["startoff"], e["startblock"], e["len"], unwritten)
    elif op == 2:
        io.unmap_extent(e["owner"], e["startoff"], e["len"])
    else:
        raise IntentRefused(f"BUI extent of unknown type {op}")


# the intents finished one extent at a time: (finisher, count kept in the
# result); a BUI is the rest
_PER_EXTENT = {L.XFS_LI_RUI: (_finish_rmap, "rui_extents"),
               L.XFS_LI_CUI: (_finish_refcount, "cui_extents")}


def recompute_counters(dev, fs) -> dict:
    """xfs_initialize_perag_data: icount, ifree and fdblocks from every AG
    header; also clears the log-incompatible feature bits, as an unmount
    does.  Writes the primary superblock through ``dev``."""
    raw = bytearray(dev.pread(0, fs.sb.sectsize))
    f = SB.unpack(raw)
    view = fs
    if (f["sb_dblocks"], f["sb_agcount"]) != (fs.sb.dblocks, fs.sb.agcount):
        # the log changed the geometry (a grow or a shrink, which the
        # kernel's recovery takes up too): the AGs as replay left them
        view = Filesystem(dev.path)
    icount = ifree = fdblocks = 0
    try:
        for agno in range(view.sb.agcount):
            agf = view.agf(agno)
            agi = view.agi(agno)
            icount += agi["agi_count"]
            ifree += agi["agi_freecount"]
            fdblocks += agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"]
    finally:
        if view is not fs:
            view.close()
    before = {k: f[k] for k in ("sb_icount", "sb_ifree", "sb_fdblocks")}
    f.update(sb_icount=icount, sb_ifree=ifree, sb_fdblocks=fdblocks,
             sb_features_log_incompat=0)
    packed = SB.pack(f)
    raw[:len(packed)] = packed
    # the write verifier, keeping the superblock's LSN
    V.stamp(V.SB, raw, f["sb_lsn"], blocksize=fs.sb.blocksize)
    dev.pwrite(0, raw)
    return {"before": before, "after": {"sb_icount": icount, "sb_ifree": ifree,
                                        "sb_fdblocks": fdblocks}}
