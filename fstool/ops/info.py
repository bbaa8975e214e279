"""Geometry and counters of an image, as mkfs.xfs and xfs_info present them."""
from __future__ import annotations

from ..format import constants as C


def geometry(fs) -> dict:
    sb = fs.sb
    f = sb.fields
    ro = sb.has_ro_compat
    inc = sb.has_incompat
    return {
        "isize": sb.inodesize,
        "agcount": sb.agcount,
        "agsize": sb.agblocks,
        "sectsz": sb.sectsize,
        "attr": 2,
        "projid32bit": 1,
        "crc": 1,
        "finobt": int(ro(C.XFS_SB_FEAT_RO_COMPAT_FINOBT)),
        "sparse": int(inc(C.XFS_SB_FEAT_INCOMPAT_SPINODES)),
        "rmapbt": int(ro(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT)),
        "reflink": int(ro(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)),
        "bigtime": int(inc(C.XFS_SB_FEAT_INCOMPAT_BIGTIME)),
        "inobtcount": int(ro(C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT)),
        "nrext64": int(inc(C.XFS_SB_FEAT_INCOMPAT_NREXT64)),
        "exchange": int(inc(C.XFS_SB_FEAT_INCOMPAT_EXCHRANGE)),
        "parent": int(inc(C.XFS_SB_FEAT_INCOMPAT_PARENT)),
        "bsize": sb.blocksize,
        "blocks": sb.dblocks,
        "imaxpct": f["sb_imax_pct"],
        "sunit": f["sb_unit"],
        "swidth": f["sb_width"],
        "naming_bsize": sb.dirblksize,
        "ascii_ci": 0,
        "ftype": int(sb.has_ftype),
        "log_blocks": sb.logblocks,
        "logstart": sb.logstart,
        "log_sectsz": f["sb_logsectsize"] or sb.sectsize,
        "log_sunit": f["sb_logsunit"] // sb.blocksize if f["sb_logsunit"] > 1 else 0,
        "lazy_count": 1,
        "uuid": str(sb.uuid),
        "label": sb.label,
        "icount": f["sb_icount"],
        "ifree": f["sb_ifree"],
        "fdblocks": f["sb_fdblocks"],
        "rootino": sb.rootino,
        "rt_extsize": f["sb_rextsize"] * sb.blocksize,
        "features": sb.feature_names(),
        # xfsprogs 6.10's layout shows the features it added
        **({"release": "6.10"} if inc(C.XFS_SB_FEAT_INCOMPAT_EXCHRANGE |
                                      C.XFS_SB_FEAT_INCOMPAT_PARENT) else {}),
    }


def format_geometry(g: dict, name: str, counters: bool = True, size_text=None) -> str:
    """Text laid out exactly as mkfs.xfs prints it, then (optionally) the
    identity and counters; ``size_text(nbytes)`` shows the filesystem's
    size and free space for people (else they are counted in blocks).
    With ``g["release"]`` "6.10" the layout is xfsprogs 6.10.1's, which
    adds the exchange-range and parent pointer features."""
    modern = g.get("release") == "6.10"
    lines = [
        f"meta-data={name:<22s} isize={g['isize']:<6d} agcount={g['agcount']}, "
        f"agsize={g['agsize']} blks",
        f"         ={'':<22s} sectsz={g['sectsz']:<5d} attr={g['attr']}, "
        f"projid32bit={g['projid32bit']}",
        f"         ={'':<22s} crc={g['crc']:<8d} finobt={g['finobt']}, sparse={g['sparse']}, "
        f"rmapbt={g['rmapbt']}",
        f"         ={'':<22s} reflink={g['reflink']:<4d} bigtime={g['bigtime']} "
        f"inobtcount={g['inobtcount']} nrext64={g['nrext64']}",
        *([f"         ={'':<22s} exchange={g.get('exchange', 0):<3d}"] if modern else []),
        f"data     ={'':<22s} bsize={g['bsize']:<6d} blocks={g['blocks']}, "
        f"imaxpct={g['imaxpct']}",
        f"         ={'':<22s} sunit={g['sunit']:<6d} swidth={g['swidth']} blks",
        f"naming   ={'version 2':<22s} bsize={g['naming_bsize']:<6d} ascii-ci={g['ascii_ci']}, "
        f"ftype={g['ftype']}" + (f", parent={g.get('parent', 0)}" if modern else ""),
        f"log      ={'internal log' if g.get('logstart', 1) else 'external':<22s} bsize={g['bsize']:<6d} blocks={g['log_blocks']}, "
        "version=2",
        f"         ={'':<22s} sectsz={g['log_sectsz']:<5d} sunit={g['log_sunit']} blks, "
        f"lazy-count={g['lazy_count']}",
        f"realtime ={'none':<22s} extsz={g['rt_extsize']:<6d} blocks=0, rtextents=0",
    ]
    if not counters:
        return "\n".join(lines)


    lines += [
        "",
        f"uuid     = {g['uuid']}",
        f"label    = \"{g['label']}\"",
        f"inodes   = {g['icount']} allocated, {g['ifree']} free",
    ]
    sizes = [("size", g["blocks"]), ("free", g["fdblocks"])]
    if "min_blocks" in g:
        sizes.append(("minimum", g["min_blocks"]))
    for label, blocks in sizes:
        shown = f"{size_text(blocks * g['bsize'])} ({blocks} blocks)" if size_text else \
            f"{blocks} blocks"
        lines.append(f"{label:<8} = {shown}")
    return "\n".join(lines)


def geometry_of_plan(geo) -> dict:
    """The same figures for a filesystem about to be made (fstool mkfs -N)."""
    return {
        "isize": geo.inodesize, "agcount": geo.agcount, "agsize": geo.agblocks,
        "sectsz": geo.sectsize, "attr": 2, "projid32bit": 1, "crc": 1,
        "finobt": int(geo.finobt), "sparse": int(geo.sparse), "rmapbt": int(geo.rmapbt),
        "reflink": int(geo.reflink), "bigtime": int(geo.bigtime),
        "inobtcount": int(geo.inobtcount),
        "nrext64": int(geo.nrext64), "bsize": geo.blocksize, "blocks": geo.dblocks,
        "imaxpct": geo.imaxpct, "sunit": 0, "swidth": 0, "naming_bsize": geo.dirblocksize,
        "ascii_ci": 0, "ftype": 1, "log_blocks": geo.logblocks,
        "log_sectsz": geo.sectsize,
        "log_sunit": geo.log_sunit // geo.blocksize,
        "lazy_count": 1,
        "rt_extsize": max(1, 4096 // geo.blocksize) * geo.blocksize,
        "exchange": int(geo.exchange), "parent": int(geo.parent), "release": geo.release,
    }
