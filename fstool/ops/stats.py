"""Btree dumps, AG statistics, free-space histograms and fragmentation: the
data behind ``btree dump``, ``agstats``, ``freesp`` and ``frag``.

Figures follow xfs_db's definitions (freesp counts AGFL blocks as one-block
free extents; frag's "ideal" is the number of runs of a fork that are
contiguous in file offset) so the two can be compared number for number.
"""
from __future__ import annotations

import heapq
import struct

from ..errors import BadValue, FsToolError, InvalidArgument
from ..format import constants as C
from ..fs import btree
from .names import shown_name

AG_TREES = ("bnobt", "cntbt", "inobt", "finobt", "refcountbt", "rmapbt")


def ag_tree(fs, agno: int, name: str):
    """(reader, root pointer, height) of an AG btree, or None when the
    filesystem does not have that tree."""
    sb = fs.sb
    if name in ("bnobt", "cntbt", "rmapbt", "refcountbt"):
        agf = fs.agf(agno)
        if name == "bnobt":
            bt, root, levels = btree.BNOBT, agf["agf_roots"][0], agf["agf_levels"][0]
        elif name == "cntbt":
            bt, root, levels = btree.CNTBT, agf["agf_roots"][1], agf["agf_levels"][1]
        elif name == "rmapbt":
            if not sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT):
                return None
            bt, root, levels = btree.RMAPBT, agf["agf_roots"][2], agf["agf_levels"][2]
        else:
            if not sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
                return None
            bt, root, levels = btree.REFCOUNTBT, agf["agf_refcount_root"], \
                agf["agf_refcount_level"]
    elif name in ("inobt", "finobt"):
        agi = fs.agi(agno)
        if name == "inobt":
            bt, root, levels = fs.inobt_type(), agi["agi_root"], agi["agi_level"]
        else:
            if not sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT):
                return None
            bt, root, levels = fs.inobt_type(free=True), agi["agi_free_root"], \
                agi["agi_free_level"]
    else:
        raise BadValue(f"unknown btree {name!r} (one of {', '.join(AG_TREES)})")
    return fs.ag_btree(agno, bt), root, levels


def _block_record(reader, blk, maxrecs_leaf, maxrecs_node) -> dict:
    bt = reader.bt
    out = {"block": blk.addr, "daddr": blk.daddr, "level": blk.level,
           "numrecs": blk.numrecs, "leftsib": blk.leftsib, "rightsib": blk.rightsib}
    if blk.level == 0:
        out["recs"] = [dict(zip(bt.rec_names, r)) for r in blk.recs]
        out["fill"] = blk.numrecs / maxrecs_leaf
    else:
        out["keys"] = [dict(zip(bt.key_names, struct.unpack(bt.key_fmt, k))) for k in blk.keys]
        out["ptrs"] = blk.ptrs
        out["fill"] = blk.numrecs / maxrecs_node
    return out


def dump_ag_btree(fs, agno: int, name: str) -> dict:
    """Every block of an AG btree, top level first."""
    t = ag_tree(fs, agno, name)
    if t is None:
        raise InvalidArgument(f"this filesystem has no {name}")
    reader, root, height = t
    return _dump(reader, [root], height, {"tree": name, "agno": agno, "root": root,
                                          "height": height})


def dump_bmbt(fs, ino: int, attr: bool = False) -> dict:
    """The block map of an inode's fork: the bmbt blocks when the fork is in
    btree format, else the extent list held in the inode."""
    node = fs.inode(ino)
    fmt = node.aformat if attr else node.format
    head = {"tree": "bmbt", "ino": ino, "fork": "attr" if attr else "data",
            "format": C.DINODE_FORMAT_NAMES.get(fmt, str(fmt))}
    if fmt != C.XFS_DINODE_FMT_BTREE:
        head.update(height=0, levels=[], extents=[dict(zip(btree.BMBT.rec_names, e))
                                                  for e in node.extents(attr)])
        return head
    level, keys, ptrs = node.bmbt_root(attr)
    reader = fs.bmbt_reader(ino)
    head["root"] = {"level": level, "keys": [{"startoff": k} for k in keys], "ptrs": ptrs}
    return _dump(reader, ptrs, level, dict(head, height=level + 1))


def _dump(reader, root_ptrs, root_level, head) -> dict:
    """``root_level``: the level the root pointers sit at, one above the
    blocks they point to (the tree height for an AG root pointer)."""
    bs = reader.blocksize
    leaf_max = reader.bt.maxrecs(bs, True)
    node_max = reader.bt.maxrecs(bs, False)
    levels = []
    for row in reader.levels(root_ptrs, root_level):
        levels.append([_block_record(reader, b, leaf_max, node_max) for b in row])
    head["levels"] = levels
    return head


def summarize_dump(dump: dict) -> dict:
    """Height, blocks per level and mean fill factor per level."""
    per_level = []
    for row in dump["levels"]:
        per_level.append({"level": row[0]["level"] if row else None, "blocks": len(row),
                          "records": sum(b["numrecs"] for b in row),
                          "fill": (sum(b["fill"] for b in row) / len(row)) if row else 0.0})
    out = {k: dump[k] for k in ("tree", "height") if k in dump}
    for k in ("agno", "ino", "fork", "format"):
        if k in dump:
            out[k] = dump[k]
    out["blocks"] = sum(p["blocks"] for p in per_level)
    out["per_level"] = per_level
    return out


def _agfl_blocks(fs, agno: int, agf: dict) -> list:
    slots = fs.agfl(agno)["agfl_bno"]
    first, count = agf["agf_flfirst"], agf["agf_flcount"]
    return [slots[(first + i) % len(slots)] for i in range(min(count, len(slots)))]


def agstats(fs) -> dict:
    """Per-AG and total figures for space, inodes and btrees."""
    rows = []
    for agno in range(fs.sb.agcount):
        agf = fs.agf(agno)
        agi = fs.agi(agno)
        row = {"agno": agno, "size": agf["agf_length"], "free_blocks": agf["agf_freeblks"],
               "longest_free": agf["agf_longest"], "agfl_count": agf["agf_flcount"],
               "agfl_size": (fs.sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4,
               "inodes": agi["agi_count"], "free_inodes": agi["agi_freecount"]}
        reader, root, height = ag_tree(fs, agno, "bnobt")
        row["free_extents"] = sum(1 for _ in reader.ag_records(root, height))
        full = partial = sparse = empty = 0
        reader, root, height = ag_tree(fs, agno, "inobt")
        for _start, holemask, count, freecount, _free in reader.ag_records(root, height):
            if holemask:
                sparse += 1
            if freecount == 0:
                full += 1
            elif freecount == count:
                empty += 1
            else:
                partial += 1
        row["chunks"] = {"full": full, "partial": partial, "empty": empty, "sparse": sparse}
        trees = {}
        for name in AG_TREES:
            t = ag_tree(fs, agno, name)
            if t is None:
                continue
            reader, root, height = t
            trees[name] = {"height": height,
                           "blocks": sum(1 for _ in reader.blocks([root], height))}
        row["btrees"] = trees
        rows.append(row)
    total = {k: sum(r[k] for r in rows) for k in ("size", "free_blocks", "agfl_count",
                                                  "inodes", "free_inodes", "free_extents")}
    total["longest_free"] = max(r["longest_free"] for r in rows)
    total["chunks"] = {k: sum(r["chunks"][k] for r in rows)
                       for k in ("full", "partial", "empty", "sparse")}
    total["btree_blocks"] = {n: sum(r["btrees"].get(n, {}).get("blocks", 0) for r in rows)
                             for n in AG_TREES if any(n in r["btrees"] for r in rows)}
    for r in rows + [total]:
        # used: everything not free (headers, btrees, the log, inodes, data)
        r["used_blocks"] = r["size"] - r["free_blocks"]
        r["used_pct"] = round(r["used_blocks"] * 100.0 / r["size"], 2) if r["size"] else 0.0
    return {"blocksize": fs.sb.blocksize, "ags": rows, "total": total}


def freesp(fs, agnos=None) -> dict:
    """Free-extent size histogram in power-of-two bins, as xfs_db freesp
    (bnobt records plus each AGFL block as a one-block extent)."""
    agblocks = fs.sb.agblocks
    lows = []
    b = 1
    while b < agblocks:
        lows.append(b)
        b *= 2
    bins = [{"from": lo, "to": (lows[i + 1] - 1 if i + 1 < len(lows) else agblocks),
             "extents": 0, "blocks": 0} for i, lo in enumerate(lows)]
    total_ext = total_blocks = 0
    wanted = range(fs.sb.agcount) if agnos is None else agnos
    for agno in wanted:
        if not 0 <= agno < fs.sb.agcount:
            raise BadValue(f"AG {agno} does not exist (the filesystem has "
                           f"{fs.sb.agcount} AGs)")
        agf = fs.agf(agno)
        lengths = [1] * len(_agfl_blocks(fs, agno, agf))
        reader, root, height = ag_tree(fs, agno, "bnobt")
        lengths += [length for _start, length in reader.ag_records(root, height)]
        for length in lengths:
            total_ext += 1
            total_blocks += length
            for hb in bins:
                if hb["to"] >= length:
                    hb["extents"] += 1
                    hb["blocks"] += length
                    break
    for hb in bins:
        hb["pct"] = hb["blocks"] * 100.0 / total_blocks if total_blocks else 0.0
    return {"bins": [hb for hb in bins if hb["extents"]], "total_extents": total_ext,
            "total_blocks": total_blocks,
            "average": total_blocks / total_ext if total_ext else 0.0}


def format_freesp(h: dict, summary: bool = True) -> str:
    """Text laid out as xfs_db freesp prints it."""
    lines = [f"{'from':>7s} {'to':>7s} {'extents':>7s} {'blocks':>7s} {'pct':>6s}"]
    for b in h["bins"]:
        lines.append(f"{b['from']:7d} {b['to']:7d} {b['extents']:7d} {b['blocks']:7d} "
                     f"{b['pct']:6.2f}")
    if summary:
        lines.append(f"total free extents {h['total_extents']}")
        lines.append(f"total free blocks {h['total_blocks']}")
        lines.append(f"average free extent size {h['average']:g}")
    return "\n".join(lines)


def _ideal(exts) -> int:
    runs = 0
    prev_end = None
    for startoff, _sb, count, _u in exts:
        if prev_end is None or startoff != prev_end:
            runs += 1
        prev_end = startoff + count
    return runs


def iter_allocated_inodes(fs):
    """Every allocated inode, found through the inobt (sparse chunks and free
    inodes skipped), AG by AG in inode order."""
    sb = fs.sb
    for agno in range(sb.agcount):
        reader, root, height = ag_tree(fs, agno, "inobt")
        for startino, holemask, _count, _freecount, free in reader.ag_records(root, height):
            for i in range(64):
                if (holemask >> (i // 4)) & 1 or (free >> i) & 1:
                    continue
                yield fs.inode((agno << sb.agino_log) | (startino + i))


def frag(fs, top: int = 10) -> dict:
    """File fragmentation as xfs_db frag counts it (data forks of files,
    directories and symlinks, and attr forks), plus the most fragmented forks."""
    actual = ideal = 0
    worst: list = []
    for node in iter_allocated_inodes(fs):
        per = []
        if node.ifmt in (C.S_IFREG, C.S_IFDIR, C.S_IFLNK) and node.nextents:
            per.append(("data", node.extents(False)))
        if node.forkoff and node.anextents:
            per.append(("attr", node.extents(True)))
        for fork, exts in per:
            a, i = len(exts), _ideal(exts)
            actual += a
            ideal += i
            item = (a, node.ino, fork, node.type_name, node.size, i)
            if not top or a <= i:
                continue                # listed: only forks in more extents than ideal
            if len(worst) < top:
                heapq.heappush(worst, item)
            elif item > worst[0]:
                heapq.heapreplace(worst, item)
    factor = (actual - ideal) * 100.0 / actual if actual else 0.0
    worst.sort(reverse=True)
    paths = paths_of(fs, {ino for _a, ino, *_r in worst})
    return {"actual": actual, "ideal": ideal, "factor": factor,
            "average": actual / ideal if ideal else None,
            "worst": [{"ino": ino, "path": paths.get(ino), "fork": fork, "type": t,
                       "size": size, "extents": a, "ideal": i}
                      for a, ino, fork, t, size, i in worst]}


def paths_of(fs, inos) -> dict:
    """A path (text, names escaped for display) to each of ``inos`` that a
    directory reaches, walking directories from the root only until all
    are found; inodes no directory names are left out."""
    want = set(inos)
    found: dict = {}
    if fs.sb.rootino in want:
        found[fs.sb.rootino] = "/"
    todo, seen = [(fs.sb.rootino, "")], {fs.sb.rootino}
    while todo and len(found) < len(want):
        dino, dpath = todo.pop()
        try:
            entries = fs.listdir(dino)
        except FsToolError:
            continue                    # a directory that cannot be read: skip it
        for e in entries:
            path = f"{dpath}/{shown_name(e.name)}"
            if e.ino in want and e.ino not in found:
                found[e.ino] = path
            if e.ftype == C.XFS_DIR3_FT_DIR and e.ino not in seen:
                seen.add(e.ino)
                todo.append((e.ino, path))
    return found


def format_frag(f: dict) -> str:
    # with no extents at all xfs_db divides 0 by 0 and prints glibc's "-nan"
    avg = "-nan" if f["average"] is None else f"{f['average']:.2f}"
    return (f"actual {f['actual']}, ideal {f['ideal']}, fragmentation factor "
            f"{f['factor']:.2f}%\n"
            "Note, this number is largely meaningless.\n"
            f"Files on this filesystem average {avg} extents per file")
