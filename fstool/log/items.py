"""Log items decoded into plain dicts (for printing, JSON and recovery)."""
from __future__ import annotations

import struct

from ..format import log as L
from ..format.structs import PARENT_REC
from .reassemble import Item

_EXT64 = L.EXTENT_64.struct
_EXT32 = L.EXTENT_32.struct
_MAP = L.MAP_EXTENT.struct
_PHYS = L.PHYS_EXTENT.struct


class ItemError(ValueError):
    pass


def _need(region: bytes, layout, what: str) -> dict:
    if len(region) < layout.size:
        raise ItemError(f"{what}: {len(region)} bytes, the format needs {layout.size}")
    return layout.unpack(region)


def _extents(region: bytes, hdr_size: int, count: int, what: str) -> list:
    avail = len(region) - hdr_size
    if count * _EXT64.size == avail:
        st = _EXT64
    elif count * _EXT32.size == avail:
        st = _EXT32
    else:
        raise ItemError(f"{what}: {count} extents do not fit {avail} bytes")
    return [(v[0], v[1]) for v in (st.unpack_from(region, hdr_size + i * st.size)
                                   for i in range(count))]


def inode_format(region: bytes) -> dict:
    if len(region) == L.INODE_LOG_FORMAT.size:
        return L.INODE_LOG_FORMAT.unpack(region)
    if len(region) == L.INODE_LOG_FORMAT_32.size:
        d = L.INODE_LOG_FORMAT_32.unpack(region)
        d["ilf_pad"] = 0
        return d
    raise ItemError(f"inode log format of {len(region)} bytes")


def decode(item: Item) -> dict:
    """One item as a dict: ``type`` (name), ``type_code`` and its fields."""
    r = item.regions
    code = item.type
    name = L.ITEM_NAMES.get(code, f"0x{code:x}")
    out = {"type": name, "type_code": code, "regions": len(r)}
    if code == L.XFS_LI_BUF:
        f = _need(r[0], L.BUF_LOG_FORMAT, "buffer item") if len(r[0]) >= \
            L.BUF_LOG_FORMAT.size else _short_blf(r[0])
        out.update(blkno=f["blf_blkno"], len=f["blf_len"], flags=f["blf_flags"],
                   blf_type=L.blft_from_flags(f["blf_flags"]),
                   buf_type=L.BLFT_NAMES[L.blft_from_flags(f["blf_flags"])]
                   if L.blft_from_flags(f["blf_flags"]) < len(L.BLFT_NAMES) else "?",
                   map_size=f["blf_map_size"], data_map=f["blf_data_map"][:f["blf_map_size"]],
                   cancel=bool(f["blf_flags"] & L.XFS_BLF_CANCEL),
                   inode_buf=bool(f["blf_flags"] & L.XFS_BLF_INODE_BUF),
                   flag_names=L.flag_names(f["blf_flags"] & ~L.XFS_BLFT_MASK,
                                           L.BLF_FLAG_NAMES),
                   logged_bytes=sum(len(x) for x in r[1:]))
    elif code == L.XFS_LI_INODE:
        f = inode_format(r[0])
        out.update(ino=f["ilf_ino"], fields=f["ilf_fields"],
                   field_names=L.flag_names(f["ilf_fields"], L.ILOG_NAMES),
                   dsize=f["ilf_dsize"], asize=f["ilf_asize"], blkno=f["ilf_blkno"],
                   len=f["ilf_len"], boffset=f["ilf_boffset"])
        if len(r) > 1 and len(r[1]) >= L.LOG_DINODE_V2_SIZE:
            core = r[1] + bytes(max(0, L.LOG_DINODE.size - len(r[1])))
            d = L.LOG_DINODE.unpack(core)
            out["core"] = {k: d[k] for k in ("di_mode", "di_format", "di_uid", "di_gid",
                                             "di_nlink", "di_size", "di_nblocks",
                                             "di_nextents", "di_anextents", "di_forkoff",
                                             "di_aformat", "di_flags", "di_flags2", "di_gen",
                                             "di_next_unlinked", "di_version")}
    elif code == L.XFS_LI_ICREATE:
        if len(r[0]) < L.ICREATE_LOG.size:
            raise ItemError(f"icreate item of {len(r[0])} bytes")
        f = L.unpack_icreate(r[0])
        out.update(agno=f["icl_ag"], agbno=f["icl_agbno"], count=f["icl_count"],
                   isize=f["icl_isize"], length=f["icl_length"], gen=f["icl_gen"])
    elif code in (L.XFS_LI_EFI, L.XFS_LI_EFI_RT):
        f = _need(r[0], L.EFI_LOG_FORMAT, "EFI")
        out.update(id=f["efi_id"], extents=_extents(r[0], 16, f["efi_nextents"], "EFI"))
    elif code in (L.XFS_LI_EFD, L.XFS_LI_EFD_RT):
        f = _need(r[0], L.EFD_LOG_FORMAT, "EFD")
        out.update(intent_id=f["efd_efi_id"],
                   extents=_extents(r[0], 16, f["efd_nextents"], "EFD"))
    elif code in (L.XFS_LI_RUI, L.XFS_LI_BUI, L.XFS_LI_RUI_RT):
        lay = L.BUI_LOG_FORMAT if code == L.XFS_LI_BUI else L.RUI_LOG_FORMAT
        pre = "bui" if code == L.XFS_LI_BUI else "rui"
        f = _need(r[0], lay, name)
        n = f[f"{pre}_nextents"]
        if len(r[0]) != 16 + n * _MAP.size:
            raise ItemError(f"{name}: {n} extents do not fit {len(r[0]) - 16} bytes")
        names = L.BMAP_TYPE_NAMES if code == L.XFS_LI_BUI else L.RMAP_TYPE_NAMES
        out.update(id=f[f"{pre}_id"], extents=[
            {"owner": v[0], "startblock": v[1], "startoff": v[2], "len": v[3],
             "flags": v[4], "op": names.get(v[4] & 0xFF, str(v[4] & 0xFF))}
            for v in (_MAP.unpack_from(r[0], 16 + i * _MAP.size) for i in range(n))])
    elif code in (L.XFS_LI_CUI, L.XFS_LI_CUI_RT):
        f = _need(r[0], L.CUI_LOG_FORMAT, name)
        n = f["cui_nextents"]
        if len(r[0]) != 16 + n * _PHYS.size:
            raise ItemError(f"{name}: {n} extents do not fit {len(r[0]) - 16} bytes")
        out.update(id=f["cui_id"], extents=[
            {"startblock": v[0], "len": v[1], "flags": v[2],
             "op": L.REFCOUNT_TYPE_NAMES.get(v[2] & 0xFF, str(v[2] & 0xFF))}
            for v in (_PHYS.unpack_from(r[0], 16 + i * _PHYS.size) for i in range(n))])
    elif code in (L.XFS_LI_RUD, L.XFS_LI_CUD, L.XFS_LI_BUD, L.XFS_LI_XMD, L.XFS_LI_ATTRD,
                  L.XFS_LI_RUD_RT, L.XFS_LI_CUD_RT):
        if len(r[0]) < 16:
            raise ItemError(f"{name} of {len(r[0])} bytes")
        out.update(intent_id=struct.unpack_from("<Q", r[0], 8)[0],
                   size=struct.unpack_from("<H", r[0], 2)[0])
    elif code == L.XFS_LI_ATTRI:
        out.update(attri(r))
    elif code == L.XFS_LI_XMI:
        f = _need(r[0], L.XMI_LOG_FORMAT, "XMI")
        out.update(id=f["xmi_id"], size=f["xmi_size"], inode1=f["xmi_inode1"],
                   inode2=f["xmi_inode2"], igen1=f["xmi_igen1"], igen2=f["xmi_igen2"],
                   startoff1=f["xmi_startoff1"], startoff2=f["xmi_startoff2"],
                   blockcount=f["xmi_blockcount"], flags=f["xmi_flags"],
                   flag_names=L.flag_names(f["xmi_flags"], L.EXCHMAPS_FLAG_NAMES),
                   isize1=f["xmi_isize1"], isize2=f["xmi_isize2"])
    elif code == L.XFS_LI_DQUOT:
        f = _need(r[0], L.DQ_LOGFORMAT, "dquot item")
        out.update(id=f["qlf_id"], blkno=f["qlf_blkno"], len=f["qlf_len"],
                   boffset=f["qlf_boffset"])
    elif code == L.XFS_LI_QUOTAOFF:
        f = _need(r[0], L.QOFF_LOGFORMAT, "quotaoff item")
        out.update(flags=f["qf_flags"])
    return out


def attri(regions) -> dict:
    """An ATTRI's fields and, from the regions after its format region,
    its name(s) and value(s); a parent pointer intent (filter PARENT) also
    gets ``pptr``: per name, the parent inode and generation its value
    (xfs_parent_rec) holds.  Regions not logged (as in the per-record view,
    which sees one op at a time) are left out."""
    if len(regions[0]) != L.ATTRI_LOG_FORMAT.size:
        raise ItemError(f"ATTRI format of {len(regions[0])} bytes, expected "
                        f"{L.ATTRI_LOG_FORMAT.size}")
    f = L.attri_format(regions[0])
    op = f["alfi_op_flags"] & L.XFS_ATTRI_OP_FLAGS_TYPE_MASK
    out = {"id": f["alfi_id"], "size": f["alfi_size"], "ino": f["alfi_ino"],
           "igen": f["alfi_igen"], "op_flags": f["alfi_op_flags"],
           "op": L.ATTRI_OP_NAMES.get(op, str(op)), "filter": f["alfi_attr_filter"],
           "filter_names": L.flag_names(f["alfi_attr_filter"], L.ATTRI_FILTER_NAMES),
           "name_len": f["name_len"], "new_name_len": f["new_name_len"],
           "value_len": f["value_len"], "new_value_len": f["new_value_len"]}
    got = {}
    for role, reg in zip(L.attri_region_roles(f), regions[1:]):
        got[role] = bytes(reg)
    for role in ("name", "newname"):
        if role in got:
            n = out["name_len" if role == "name" else "new_name_len"]
            out[role] = got[role][:n].decode("utf-8", "replace")
    for role in ("value", "newvalue"):
        if role in got:
            n = out["value_len" if role == "value" else "new_value_len"]
            out[role] = got[role][:n].hex()
    if f["alfi_attr_filter"] & L.XFS_ATTRI_FILTER_PARENT:
        pptr = []
        for tag, nrole, vrole in (("name", "name", "value"), ("newname", "newname", "newvalue")):
            if vrole not in got:
                continue
            val = got[vrole]
            if len(val) < PARENT_REC.size:
                pptr.append({"tag": tag, "corrupt": True})
                continue
            rec = PARENT_REC.unpack(val)
            pptr.append({"tag": tag, "parent_ino": rec["p_ino"], "parent_gen": rec["p_gen"],
                         "name": out.get(nrole, "")})
        if pptr:
            out["pptr"] = pptr
    return out


def _short_blf(region: bytes) -> dict:
    """A buffer log format logged with only the used words of its map."""
    if len(region) < 20 or (len(region) - 20) % 4:
        raise ItemError(f"buffer item format of {len(region)} bytes")
    padded = region + bytes(L.BUF_LOG_FORMAT.size - len(region))
    return L.BUF_LOG_FORMAT.unpack(padded)


def summary(d: dict) -> str:
    """One line for an item, like xfs_logprint's."""
    t = d["type"]
    if t == "BUF":
        flags = f" {d['flag_names']}" if d["flag_names"] != "0" else ""
        return (f"BUF  daddr {d['blkno']} len {d['len']} type {d['buf_type']}{flags} "
                f"regions {d['regions'] - 1} ({d['logged_bytes']} bytes)")
    if t == "INODE":
        core = d.get("core")
        extra = ""
        if core:
            extra = (f" mode 0{core['di_mode']:o} size {core['di_size']} nlink "
                     f"{core['di_nlink']} nextents {core['di_nextents']}")
        return (f"INODE ino {d['ino']} fields {d['field_names']} dsize {d['dsize']} "
                f"asize {d['asize']}{extra}")
    if t == "ICREATE":
        return (f"ICREATE AG {d['agno']} agbno {d['agbno']} len {d['length']} count "
                f"{d['count']} isize {d['isize']} gen 0x{d['gen']:x}")
    if t in ("EFI", "EFI_RT"):
        return f"{t}  id 0x{d['id']:x} extents {d['extents']}"
    if t in ("EFD", "EFD_RT"):
        return f"{t}  intent 0x{d['intent_id']:x} extents {d['extents']}"
    if t in ("RUI", "BUI", "CUI", "RUI_RT", "CUI_RT"):
        ex = ", ".join(f"{e['op']} {e['startblock']}+{e['len']}" for e in d["extents"])
        return f"{t}  id 0x{d['id']:x} [{ex}]"
    if t in ("ATTRD", "XMD"):
        return f"{t}  #regs: {d['size']} id: 0x{d['intent_id']:x}"
    if "intent_id" in d:
        return f"{t}  intent 0x{d['intent_id']:x}"
    if t == "ATTRI":
        return _attri_summary(d)
    if t == "XMI":
        return (f"XMI  #regs: {d['size']} num_extents: 1  id: 0x{d['id']:x} "
                f"(ino1: 0x{d['inode1']:x}, igen1: 0x{d['igen1']:x}, ino2: "
                f"0x{d['inode2']:x}, igen2: 0x{d['igen2']:x}, off1: {d['startoff1']}, "
                f"off2: {d['startoff2']}, len: {d['blockcount']}, flags: 0x{d['flags']:x})")
    if t == "DQUOT":
        return f"DQUOT id {d['id']} daddr {d['blkno']} len {d['len']}"
    return f"{t} ({d['regions']} regions)"


def _attri_summary(d: dict) -> str:
    """xfs_logprint's ATTRI line, then the names and, for a parent pointer,
    what each names (PPTR), all on one line."""
    line = (f"ATTRI  #regs: {d['size']} f: 0x{d['op_flags']:x} ({d['op']}), ino: "
            f"0x{d['ino']:x}, igen: 0x{d['igen']:x}, attr_filter: 0x{d['filter']:x}, "
            f"name_len: {d['name_len']}, new_name_len: {d['new_name_len']}, value_len: "
            f"{d['value_len']}, new_value_len: {d['new_value_len']}  id: 0x{d['id']:x}")
    for p in d.get("pptr", ()):
        tag = p["tag"].upper()
        if p.get("corrupt"):
            line += f"; PPTR: {tag} CORRUPT"
        else:
            line += (f"; PPTR: {tag} parent_ino {p['parent_ino']} parent_gen "
                     f"{p['parent_gen']} name {p['name']!r}")
    if "pptr" not in d:
        names = [f"{r} {d[r]!r}" for r in ("name", "newname") if r in d]
        if names:
            line += "; " + ", ".join(names)
    return line


def intent_what(d: dict) -> str:
    """What a decoded ATTRI or XMI intent asks for, in a few words (for
    messages naming the intent); empty for other items."""
    if d["type"] == "ATTRI":
        kind = "parent pointer" if d["filter"] & L.XFS_ATTRI_FILTER_PARENT else "xattr"
        names = [repr(d[r]) for r in ("name", "newname") if r in d]
        return " ".join([d["op"], "of", kind, " -> ".join(names), "on inode",
                         str(d["ino"])] if names else [d["op"], "of", kind, "on inode",
                                                       str(d["ino"])])
    if d["type"] == "XMI":
        return (f"exchange of {d['blockcount']} blocks at offsets {d['startoff1']}/"
                f"{d['startoff2']} between inodes {d['inode1']} and {d['inode2']}")
    return ""
