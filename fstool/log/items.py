"""Log items decoded into plain dicts (for printing, JSON and recovery)."""
from __future__ import annotations

import struct

from ..format import constants as C
from ..format import log as L
from ..format import parent as P
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
        out.update(size=struct.unpack_from("<H", r[0], 2)[0],
                   intent_id=struct.unpack_from("<Q", r[0], 8)[0])
    elif code == L.XFS_LI_ATTRI:
        out.update(_attri(r))
    elif code == L.XFS_LI_XMI:
        f = _need(r[0], L.XMI_LOG_FORMAT, "XMI")
        out.update(size=f["xmi_size"], id=f["xmi_id"], inode1=f["xmi_inode1"],
                   igen1=f["xmi_igen1"],
                   inode2=f["xmi_inode2"], igen2=f["xmi_igen2"],
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


def _attri(r: list) -> dict:
    """An attribute intent: the operation, the inode (and generation, for
    parent pointer operations), the namespace, and the name and value
    regions that follow it (a parent pointer replace logs the old and the
    new name; its old and new values have the one length), decoded as
    parent pointers when the namespace is the parent one (as xfs_logprint
    prints them)."""
    _need(r[0], L.ATTRI_LOG_FORMAT, "ATTRI")
    f = L.attri_format(r[0])
    op_flags = f["alfi_op_flags"]
    op = op_flags & L.XFS_ATTRI_OP_FLAGS_TYPE_MASK
    name_len, new_name_len = f["name_len"], f["new_name_len"]
    value_len, new_value_len = f["value_len"], f["new_value_len"]
    out = {"size": f["alfi_size"], "id": f["alfi_id"], "ino": f["alfi_ino"],
           "igen": f["alfi_igen"],
           "op": L.ATTRI_OP_NAMES.get(op, "?"), "op_flags": op_flags,
           "filter": f["alfi_attr_filter"],
           "filter_names": L.flag_names(f["alfi_attr_filter"], L.ATTR_FILTER_NAMES),
           "name_len": name_len, "new_name_len": new_name_len, "value_len": value_len,
           "new_value_len": new_value_len}
    if len(r) == 1:
        # the format region alone: the per-record view, one op at a time
        return out
    regions = iter(r[1:])
    for key, n in (("name", name_len), ("new_name", new_name_len), ("value", value_len),
                   ("new_value", new_value_len)):
        if n:
            got = next(regions, None)
            if got is None:
                raise ItemError(f"ATTRI: its {key.replace('_', '')} region is missing")
            out[key] = bytes(got[:n])
    if f["alfi_attr_filter"] & C.XFS_ATTR_PARENT:
        out["pptr"] = _pptr_update(out)
    for key in ("name", "new_name"):
        if key in out:
            out[key] = _text(out[key])
    return out


def _text(name: bytes) -> str:
    """A name as text (bytes that are not UTF-8 as surrogate escapes)."""
    return name.decode("utf-8", "surrogateescape")


def _pptr_update(d: dict) -> list:
    """The parent pointers an attribute intent of the parent namespace
    names: [{tag, p_ino, p_gen, name}] (tag NAME, or OLDNAME and NEWNAME for
    a replace; a value too short for a parent record is CORRUPT)."""
    pairs = [("name", "value"), ("new_name", "new_value")]
    both = "name" in d and "new_name" in d
    out = []
    for (nk, vk), tag in zip(pairs, ("OLDNAME" if both else "NAME", "NEWNAME")):
        if nk not in d:
            continue
        value = d.get(vk, b"")
        if len(value) < P.XFS_PARENT_REC_SIZE:
            out.append({"tag": tag, "corrupt": True})
            continue
        p_ino, p_gen = P.unpack_rec(value[:P.XFS_PARENT_REC_SIZE])
        out.append({"tag": tag, "p_ino": p_ino, "p_gen": p_gen, "name": _text(d[nk])})
    return out


def _shown(name: str) -> str:
    """A name quoted on one line (control and non-UTF-8 bytes escaped)."""
    return repr(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


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
    if t in ("ATTRI", "ATTRD", "XMI", "XMD"):
        return "\n".join(logprint_lines(d))
    if "intent_id" in d:
        return f"{t}  intent 0x{d['intent_id']:x}"
    if t == "DQUOT":
        return f"DQUOT id {d['id']} daddr {d['blkno']} len {d['len']}"
    return f"{t} ({d['regions']} regions)"


# -- attribute and mapping-exchange items as xfs_logprint 6.10.1 prints them --------------

#: the most of a value xfs_logprint shows of a whole ATTRI (-t)
_VALUE_SHOWN = 128


def print_or_dump(data: bytes) -> list[str]:
    """A region as xfs_logprint shows it: its bytes as text when every one
    is printable ASCII, else a hex dump (the offset, then the bytes in
    groups of two, sixteen bytes a line; a last line, empty when the dump
    ends a line, closes it)."""
    if all(0x20 <= c < 0x7F for c in data):
        return [data.decode("ascii")]
    lines, cur = [], ""
    for i, c in enumerate(data):
        if i % 16 == 0:
            cur += f"{i:08x} "
        cur += f"{c:02x}"
        if (i + 1) % 16 == 0:
            lines.append(cur)
            cur = ""
        elif (i + 1) % 2 == 0:
            cur += " "
    lines.append(cur)
    return lines


def attri_header(d: dict) -> str:
    """An ATTRI's format region, as xfs_logprint's ``ATTRI:  #regs:`` line."""
    return (f"ATTRI:  #regs: {d['size']}\tf: 0x{d['op_flags']:x}, ino: 0x{d['ino']:x}, "
            f"igen: 0x{d['igen']:x}, attr_filter: 0x{d['filter']:x}, name_len: "
            f"{d['name_len']}, new_name_len: {d['new_name_len']}, value_len: "
            f"{d['value_len']}, new_value_len: {d['new_value_len']}  id: 0x{d['id']:x}")


def attri_region_lines(d: dict, role: str, data: bytes) -> list[str]:
    """One region of an ATTRI (``d`` its format, decoded) as xfs_logprint's
    record dump shows the op carrying it: a name by the op's length, a
    value by the format's."""
    if role in ("name", "newname"):
        return [f"ATTRI:  {role} len:{len(data)}"] + print_or_dump(data)
    n = d["value_len"] if role == "value" else d["new_value_len"]
    return [f"ATTRI:  {role} len:{n}"] + print_or_dump(data[:n])


def _raw(name) -> bytes:
    return name.encode("utf-8", "surrogateescape") if isinstance(name, str) else bytes(name)


def pptr_lines(d: dict) -> list[str]:
    """The ``PPTR:`` lines xfs_logprint ends a parent-namespace ATTRI with
    (``d`` holding its name and value regions): per parent pointer, the
    lengths, then the parent's inode and generation and the name (bytes
    that are not UTF-8 as \\xNN)."""
    lens = {"NAME": ("name_len", "value_len"), "OLDNAME": ("name_len", "value_len"),
            "NEWNAME": ("new_name_len", "new_value_len")}
    out = []
    for p in _pptr_update({k: _raw(v) for k, v in d.items()
                           if k in ("name", "new_name", "value", "new_value")}):
        tag = p["tag"]
        if p.get("corrupt"):
            out.append(f"PPTR: {tag} CORRUPT")
            continue
        nl, vl = (d[k] for k in lens[tag])
        name = _raw(p["name"]).decode("utf-8", "backslashreplace")
        out += [f"PPTR: {tag} attr_namelen {nl} attr_valuelen {vl}",
                f"PPTR: {tag} parent_ino {p['p_ino']} parent_gen {p['p_gen']} name '{name}'"]
    return out


def logprint_lines(d: dict) -> list[str]:
    """An ATTRI, ATTRD, XMI or XMD item as xfs_logprint 6.10.1 prints it
    (an ATTRI whole, as -t shows it: its name and value regions, the value
    cut at 128 bytes, and its parent pointers; from its format region
    alone, the first line)."""
    t = d["type"]
    if t == "ATTRD":
        return [f"ATTRD:  #regs: {d['size']}\tid: 0x{d['intent_id']:x}"]
    if t == "XMD":
        return [f"XMD:  #regs: {d['size']}\t                 id: 0x{d['intent_id']:x}"]
    if t == "XMI":
        return [f"XMI:  #regs: {d['size']}\tnum_extents: 1  id: 0x{d['id']:x}",
                f"(ino1: 0x{d['inode1']:x}, igen1: 0x{d['igen1']:x}, ino2: 0x{d['inode2']:x}, "
                f"igen2: 0x{d['igen2']:x}, off1: {d['startoff1']}, off2: {d['startoff2']}, "
                f"len: {d['blockcount']}, flags: 0x{d['flags']:x})"]
    lines = [attri_header(d)]
    for key, role, n in (("name", "name", d["name_len"]),
                         ("new_name", "newname", d["new_name_len"])):
        if key in d:
            lines += [f"ATTRI:  {role} len:{n}"] + print_or_dump(_raw(d[key])[:n])
    for key, role, n in (("value", "value", d["value_len"]),
                         ("new_value", "newvalue", d["new_value_len"])):
        if key in d:
            lines += [f"ATTRI:  {role} len:{n}"] + print_or_dump(d[key][:min(n, _VALUE_SHOWN)])
    if d["filter"] & C.XFS_ATTR_PARENT and any(k in d for k in ("name", "new_name")):
        lines += pptr_lines(d)
    return lines


def intent_what(d: dict) -> str:
    """What a decoded ATTRI or XMI intent asks for, in a few words (for
    messages naming the intent); empty for other items."""
    if d["type"] == "ATTRI":
        kind = "parent pointer" if d["filter"] & C.XFS_ATTR_PARENT else "xattr"
        names = [_shown(d[k]) for k in ("name", "new_name") if k in d]
        return " ".join([d["op"], "of", kind] + ([" -> ".join(names)] if names else [])
                        + ["on inode", str(d["ino"])])
    if d["type"] == "XMI":
        return (f"exchange of {d['blockcount']} blocks at offsets {d['startoff1']}/"
                f"{d['startoff2']} between inodes {d['inode1']} and {d['inode2']}")
    return ""
