"""Attribute forks, as xfs_repair's process_attributes looks at them:
shortform entries, leaf blocks (entry table, flags and namespaces, names,
hashes, the name area and the header's usedbytes and firstused), the node
form's da-btree, and remote values.  The parent pointers met on the way are
kept for the namespace phase (``ctx.pptrs_seen``); an attribute of the
parent namespace whose value is no parent record is reported
(PARENT_GARBAGE), as xfs_repair's phase 6 reports it."""
from __future__ import annotations

from ..._backend import checks, parsers
from ...errors import CorruptionError, FsToolError
from ...format import constants as C
from ...format import parent as P
from ...fs import attrleaf as L, dabtree as DA
from ...io import verify as V
from ..names import quoted_name
from .dirs import check_da_tree
from .superblocks import check_lsn


def attr_name_ok(name: bytes, flags: int = 0) -> bool:
    """xfs_attr_namecheck: shorter than MAXNAMELEN, no NUL; a parent
    pointer's name is a directory entry's (no '/' either)."""
    return len(name) < 256 and b"\0" not in name and \
        not (flags & C.XFS_ATTR_PARENT and b"/" in name)


def attr_flags_problem(flags: int, shortform: bool, parent_fs: bool) -> str | None:
    """What xfs_repair (6.10) finds wrong with an attribute entry's flags,
    or None: bits no entry has (a shortform entry has namespace bits only:
    the kernel's shortform verifier refuses the inode otherwise), more than
    one namespace, a parent pointer on a filesystem without them.  (An
    incomplete entry is reported on its own.)"""
    nsp = C.XFS_ATTR_NSP_ONDISK_MASK
    allowed = nsp | C.XFS_ATTR_INCOMPLETE
    if not shortform:
        allowed |= C.XFS_ATTR_LOCAL
    if flags & ~allowed:
        return f"has unknown flags 0x{flags:02x}"
    if bin(flags & nsp).count("1") > 1:
        return f"is in more than one namespace (flags 0x{flags:02x})"
    if flags & C.XFS_ATTR_PARENT and not parent_fs:
        return "is a parent pointer on a filesystem without them"
    return None


def check_xattrs(ctx, node) -> None:
    """The attr fork of ``node``; its parent pointers go to
    ``ctx.pptrs_seen`` ([(p_ino, p_gen, name)]), ``ctx.pptrs_whole``
    saying whether every entry was read."""
    ctx.pptrs_seen = []
    ctx.pptrs_whole = False
    before = len(ctx.findings)
    fmt = node.aformat
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        _sf_attrs(ctx, node)
    elif fmt in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        if node.anextents:
            _longform_attrs(ctx, node)
    ctx.pptrs_whole = not any(f.code in ("XATTR", "XATTR_NODE", "CHECK_ABORTED")
                              for f in ctx.findings[before:])


def _seen_pptr(ctx, node, flags, name, value, **where) -> None:
    """Keep a parent pointer met in the attr fork; one whose value is no
    parent record is garbage (xfs_parent_from_attr refuses it)."""
    if value is None or len(value) != P.XFS_PARENT_REC_SIZE:
        ctx.report("PARENT_GARBAGE", f"inode {node.ino}: parent pointer "
                   f"{quoted_name(name)} has a value of "
                   f"{'remote' if value is None else len(value)} bytes, not a parent "
                   "record", ino=node.ino, fork="attr", structure="attr",
                   field="valuelen", **where)
        return
    p_ino, p_gen = P.unpack_rec(value)
    ctx.pptrs_seen.append((p_ino, p_gen, bytes(name)))


def _xbad(ctx, node, detail, field=None, **more) -> None:
    ctx.report("XATTR", f"inode {node.ino}: {detail}", ino=node.ino, fork="attr",
               structure="attr", field=field, **more)


# -- shortform ---------------------------------------------------------------
def _sf_attrs(ctx, node) -> None:
    """process_shortform_attr."""
    fork = node.fork_bytes(attr=True)
    totsize, count = L.sf_header(fork)
    if count == 0:
        if totsize != L.SF_HDR:
            _xbad(ctx, node, f"no attributes but totsize {totsize}", "totsize",
                  found=totsize)
        return
    pos = L.SF_HDR
    remaining = totsize - L.SF_HDR
    i = 0
    while i < count:
        if pos + L.SF_ENTRY > totsize:
            break
        namelen, valuelen, flags = L.sf_entry(fork, pos)
        if namelen == 0:
            _xbad(ctx, node, f"shortform attribute {i} has a zero-length name",
                  "namelen", index=i)
            break
        if remaining < namelen or remaining - namelen < valuelen:
            _xbad(ctx, node, f"shortform attribute {i}: name or value too long",
                  "valuelen", index=i)
            break
        name = bytes(fork[pos + L.SF_ENTRY:pos + L.SF_ENTRY + namelen])
        why = attr_flags_problem(flags, True, ctx.has_pptr)
        name_ok = attr_name_ok(name, flags)
        if not name_ok:
            _xbad(ctx, node, f"shortform attribute {quoted_name(name)} has an illegal name",
                  "name", index=i)
        if flags & C.XFS_ATTR_INCOMPLETE:
            _xbad(ctx, node, f"shortform attribute {quoted_name(name)} is incomplete", "flags",
                  index=i)
        elif why:
            _xbad(ctx, node, f"shortform attribute {quoted_name(name)} {why}", "flags",
                  index=i, found=flags)
        elif name_ok and flags & C.XFS_ATTR_PARENT:
            value = pos + L.SF_ENTRY + namelen
            _seen_pptr(ctx, node, flags, name, fork[value:value + valuelen], index=i)
        size = L.SF_ENTRY + namelen + valuelen
        remaining -= size
        pos += size
        i += 1
    if i != count:
        _xbad(ctx, node, f"shortform count {count}, {i} attributes found", "count",
              expected=i, found=count)
    if totsize != pos:
        _xbad(ctx, node, f"shortform totsize {totsize}, the attributes end at {pos}",
              "totsize", expected=pos, found=totsize)


# -- leaf and node forms ------------------------------------------------------------
def _longform_attrs(ctx, node) -> None:
    """process_longform_attr: block 0 is a leaf or the da-btree root."""
    try:
        exts = node.extents(attr=True)
    except FsToolError as e:
        ctx.from_error("XATTR", e, ino=node.ino, fork="attr", structure="attr")
        return
    if not exts or exts[0][0] != 0:
        _xbad(ctx, node, "attr fork block 0 is missing", "extents")
        return

    def read(ablk):
        # the root, already read and judged below, is not judged twice
        return buf if ablk == 0 else _attr_block(ctx, node, ablk)
    try:
        buf = _attr_block(ctx, node, 0, root=True)
    except FsToolError as e:
        ctx.from_error("XATTR", e, ino=node.ino, fork="attr", structure="attr", offset=0)
        return
    magic = DA.magic(buf)
    if magic == C.XFS_ATTR3_LEAF_MAGIC:
        forw, back = DA.siblings(buf)
        if forw or back:
            _xbad(ctx, node, "attr leaf block 0 has siblings", "forw", offset=0)
        _attr_leaf(ctx, node, 0, buf, 0)
        return
    if magic != C.XFS_DA3_NODE_MAGIC:
        _xbad(ctx, node, f"attr block 0 has magic 0x{magic:x}", "magic", offset=0)
        return

    def leaf(ablk, lbuf, greatest):
        if DA.magic(lbuf) != C.XFS_ATTR3_LEAF_MAGIC:
            _xbad(ctx, node, f"attr block {ablk} in the leaf chain is not a leaf",
                  "magic", offset=ablk)
            return None
        hashes = _attr_leaf(ctx, node, ablk, lbuf, greatest)
        if hashes is None:
            return None
        return hashes[-1] if hashes else greatest

    def strict(ablk, nbuf):
        if not parsers.xfs_cksum_ok(nbuf, V.ATTR3_NODE_OR_LEAF.crc_off):
            return "CRC mismatch"
        if DA.uuid(nbuf) != ctx.fs.uuid or DA.owner(nbuf) != node.ino:
            return "wrong uuid or owner"
        return None
    check_da_tree(ctx, node, 0, read, leaf, "attr", ctx.attr_node_ents, strict=strict)


def _attr_block(ctx, node, ablk: int, root: bool = False):
    """An attr leaf or node block, verified the way xfs_repair reads it:
    a block that cannot be mapped or read, or has neither magic, raises;
    block 0 must carry the right owner, address and uuid; a bad CRC
    anywhere is an error (XATTR_CRC: xfs_repair 6.10's "bad checksum for
    block N in attribute fork"; 6.1 let it pass); a bad identity on
    other blocks xfs_repair -n lets pass (reported as XATTR_VERIFY
    warnings: the kernel refuses to read them)."""
    bs = ctx.sb.blocksize
    daddr, _pieces = node.read_fork_blocks(ablk, 1, attr=True)
    buf = ctx.fs.dev.pread(daddr << C.BBSHIFT, bs)
    magic = DA.magic(buf)
    if magic not in (C.XFS_ATTR3_LEAF_MAGIC, C.XFS_DA3_NODE_MAGIC):
        raise CorruptionError("xattr block", f"bad magic 0x{magic:x}", ino=node.ino,
                              block=ablk, field="magic")
    where = dict(ino=node.ino, fork="attr", structure="attr", offset=ablk)
    crc_ok = parsers.xfs_cksum_ok(buf, V.ATTR3_NODE_OR_LEAF.crc_off)
    if not crc_ok:
        ctx.report("XATTR_CRC", f"inode {node.ino}: attr block {ablk} CRC mismatch",
                   field="crc", **where)
    bad = [(f, f"has the wrong {f}")
           for f, ok in (("blkno", DA.blkno(buf) == daddr),
                         ("uuid", DA.uuid(buf) == ctx.fs.uuid),
                         ("owner", DA.owner(buf) == node.ino)) if not ok]
    # the read verifier stops at a bad CRC: its structure checks are
    # only made on a block whose CRC is good (xfs_repair's own checks
    # of the entries follow either way)
    if crc_ok:
        faults = ([] if checks.attr_leaf_verify_ok(buf) else L.leaf_faults(buf, bs)) \
            if magic == C.XFS_ATTR3_LEAF_MAGIC else \
            DA.node_faults(buf, max(ctx.da_node_ents, ctx.attr_node_ents))
        # the read fails at the first: what xfs_repair reports
        bad += faults[:1]
    for f, detail in bad:
        ctx.report("XATTR" if root else "XATTR_VERIFY", f"inode {node.ino}: attr block "
                   f"{ablk} {detail}", field=f, **where)
    check_lsn(ctx, V.ATTR3_NODE_OR_LEAF.lsn_of(buf), "attr", ino=node.ino, offset=ablk,
                   fork="attr", field="lsn")
    return buf


def _attr_leaf(ctx, node, ablk, buf, last_hash):
    """process_leaf_attr_block: [lowest, greatest] hash of the entries,
    [] for an empty block, None when the block is bad."""
    bs = ctx.sb.blocksize
    count, usedbytes, firstused, holes = L.totals(buf)
    hdr = L.HDR
    where = dict(offset=ablk)
    if count == 0 and ablk == 0:
        return []          # repair leaves an empty block 0 alone in -n mode
    if count == 0 or hdr + L.ENTRY * count > bs:
        _xbad(ctx, node, f"attr leaf {ablk} has {count} entries", "count", found=count,
              **where)
        return None
    fast = checks.attr_leaf_entries(buf, count, last_hash, ctx.has_pptr)
    if fast is not None:
        # every entry sound (the entry loop below would find nothing):
        # only the remote values and the header's totals are left
        lo, hi, firstb, usedbs, remotes, pptrs = fast
        ctx.pptrs_seen.extend((i, g, bytes(n)) for i, g, n in pptrs)
        if ctx.has_pptr and len(pptrs) < _parent_entries(buf, count):
            _leaf_garbage(ctx, node, buf, count, ablk)
        for i, valueblk, valuelen in remotes:
            if not _remote_value(ctx, node, valueblk, valuelen, i, ablk):
                return None
        _attr_leaf_totals(ctx, node, ablk, holes, firstb, firstused, usedbs, usedbytes)
        return [lo, hi]
    used = bytearray(bs)
    used[:hdr + L.ENTRY * count] = b"\1" * (hdr + L.ENTRY * count)
    usedbs = 0
    firstb = bs
    hashes = []
    for i in range(count):
        h, nameidx, flags = L.entry(buf, i)
        if nameidx > bs:
            _xbad(ctx, node, f"attr leaf {ablk} entry {i} name index {nameidx} is beyond "
                  "the block", "nameidx", index=i, found=nameidx, **where)
            return None
        why = None if flags & C.XFS_ATTR_INCOMPLETE else \
            attr_flags_problem(flags, False, ctx.has_pptr)
        if why is None and flags & C.XFS_ATTR_PARENT and not flags & C.XFS_ATTR_LOCAL:
            why = "is a parent pointer with a remote value"
        if why:
            _xbad(ctx, node, f"attr leaf {ablk} entry {i} {why}", "flags", index=i,
                  found=flags, **where)
            return None
        if flags & C.XFS_ATTR_INCOMPLETE:
            _xbad(ctx, node, f"attr leaf {ablk} entry {i} is incomplete", "flags",
                  index=i, **where)
            return None
        value = None
        if flags & C.XFS_ATTR_LOCAL:
            if nameidx + L.LOCAL > bs:
                _xbad(ctx, node, f"attr leaf {ablk} entry {i} overruns the block",
                      "nameidx", index=i, **where)
                return None
            valuelen, namelen = L.local_name(buf, nameidx)
            nstart = nameidx + L.LOCAL
            name = bytes(buf[nstart:nstart + namelen])
            value = bytes(buf[nstart + namelen:nstart + namelen + valuelen])
            size = L.local_size(namelen, valuelen)
            if namelen == 0 or not attr_name_ok(name, flags) or nstart + namelen > bs:
                _xbad(ctx, node, f"attr leaf {ablk} entry {i} has a bad name", "name",
                      index=i, **where)
                return None
        else:
            if nameidx + L.REMOTE > bs:
                _xbad(ctx, node, f"attr leaf {ablk} entry {i} overruns the block",
                      "nameidx", index=i, **where)
                return None
            valueblk, valuelen, namelen = L.remote_name(buf, nameidx)
            name = bytes(buf[nameidx + L.REMOTE:nameidx + L.REMOTE + namelen])
            size = L.remote_size(namelen)
            if namelen == 0 or not attr_name_ok(name, flags) or valueblk == 0 or \
                    flags & C.XFS_ATTR_PARENT:
                _xbad(ctx, node, f"attr leaf {ablk} remote entry {i} is inconsistent"
                      + (" (a parent pointer's value is never remote)"
                         if flags & C.XFS_ATTR_PARENT else ""),
                      "valueblk", index=i, **where)
                return None
        want = P.attr_hash(flags, name, value)
        if h != want or h < last_hash:
            what = "its parent pointer hashes" if flags & C.XFS_ATTR_PARENT else \
                "its name hashes"
            _xbad(ctx, node, f"attr leaf {ablk} entry {quoted_name(name)} has hash "
                  f"0x{h:08x}, {what} to 0x{want:08x}", "hashval",
                  index=i, **where)
            return None
        if flags & C.XFS_ATTR_PARENT:
            _seen_pptr(ctx, node, flags, name, value, offset=ablk, index=i)
        if not flags & C.XFS_ATTR_LOCAL and not _remote_value(ctx, node, valueblk,
                                                              valuelen, i, ablk):
            return None
        last_hash = h
        hashes.append(h)
        end = nameidx + size
        if end > bs or any(used[nameidx:end]):
            _xbad(ctx, node, f"attr leaf {ablk} entry {i} overlaps another", "nameidx",
                  index=i, **where)
            return None
        used[nameidx:end] = b"\1" * (end - nameidx)
        usedbs += size
        firstb = min(firstb, nameidx)
    _attr_leaf_totals(ctx, node, ablk, holes, firstb, firstused, usedbs, usedbytes)
    return [hashes[0], hashes[-1]] if hashes else []


def _parent_entries(buf, count) -> int:
    """How many entries of an attr leaf block are in the parent namespace."""
    return sum(1 for i in range(count)
               if L.entry_flags(buf, i) & C.XFS_ATTR_NSP_ONDISK_MASK == C.XFS_ATTR_PARENT)


def _leaf_garbage(ctx, node, buf, count, ablk) -> None:
    """Report the parent-namespace entries of a sound leaf block whose
    value is not a parent record."""
    for i in range(count):
        _h, nameidx, flags = L.entry(buf, i)
        if flags & C.XFS_ATTR_NSP_ONDISK_MASK != C.XFS_ATTR_PARENT:
            continue
        valuelen, namelen = L.local_name(buf, nameidx)
        if valuelen != P.XFS_PARENT_REC_SIZE:
            name = bytes(buf[nameidx + L.LOCAL:nameidx + L.LOCAL + namelen])
            _seen_pptr(ctx, node, flags, name, bytes(valuelen), offset=ablk, index=i)


def _attr_leaf_totals(ctx, node, ablk, holes, firstb, firstused, usedbs, usedbytes):
    """The leaf header's firstused and usedbytes against the entries."""
    where = dict(offset=ablk)
    if (holes == 0 and firstb != firstused) or firstused > firstb:
        _xbad(ctx, node, f"attr leaf {ablk} says its names start at {firstused}, they "
              f"start at {firstb}", "firstused", expected=firstb, found=firstused,
              **where)
    if usedbs != usedbytes:
        _xbad(ctx, node, f"attr leaf {ablk} says {usedbytes} bytes used, its entries "
              f"use {usedbs}", "usedbytes", expected=usedbs, found=usedbytes,
              **where)


def _remote_value(ctx, node, valueblk, valuelen, i, ablk) -> bool:
    """rmtval_get: every block of a remote value mapped and sound."""
    bs = ctx.sb.blocksize
    per = bs - L.RMT_HDR
    if valuelen >= 1 << 31:
        # xfs_repair reads the length as a signed int: a negative length
        # reads nothing (the kernel would fail to read the value)
        ctx.report("XATTR_VERIFY", f"inode {node.ino}: remote value of attr leaf {ablk} "
                   f"entry {i} is {valuelen} bytes long", ino=node.ino, fork="attr",
                   structure="attr", offset=ablk, field="valuelen", index=i,
                   found=valuelen)
        return True
    nblocks = -(-valuelen // per) if valuelen else 0
    for b in range(valueblk, valueblk + nblocks):
        why = None
        try:
            daddr, _pieces = node.read_fork_blocks(b, 1, attr=True)
            buf = ctx.fs.dev.pread(daddr << C.BBSHIFT, bs)
        except FsToolError as e:
            why = str(e)
        else:
            # the read verifier xfs_repair uses (the owner is not
            # compared with the inode: the kernel's getxattr would)
            magic, off, nbytes = L.rmt_head(buf)
            if magic != C.XFS_ATTR3_RMT_MAGIC:
                why = f"bad magic 0x{magic:x}"
            elif not parsers.xfs_cksum_ok(buf, V.ATTR3_RMT.crc_off):
                why = "CRC mismatch"
            elif L.rmt_uuid(buf) != ctx.fs.uuid:
                why = "uuid does not match the filesystem"
            elif L.rmt_blkno(buf) != daddr:
                why = "records the wrong block number"
            # the verifier adds offset and length in 32 bits
            elif nbytes > per or (off + nbytes) & 0xFFFFFFFF > 65536 or \
                    L.rmt_owner(buf) == 0:
                why = "bad header"
        if why:
            _xbad(ctx, node, f"remote value block {b} of attr leaf {ablk} entry {i}: "
                  f"{why}", "valueblk", index=i, offset=b)
            return False
    return True
