"""Field-by-field views of on-disk structures (the data behind
``fstool sb|agf|agi|agfl|inode``), in the spirit of xfs_db's print."""
from __future__ import annotations

import datetime
import uuid as uuidlib

from ..format import constants as C, structs as S
from ..fs import dir as xdir
from ..errors import BadValue, CorruptionError

# fields shown in hex, as xfs_db does
_HEX = {"magicnum", "versionnum", "features2", "bad_features2", "features_compat",
        "features_ro_compat", "features_incompat", "features_log_incompat", "crc",
        "magic", "flags2", "lsn", "flags", "mode"}


class Field:
    __slots__ = ("name", "value", "text")

    def __init__(self, name: str, value, text: str | None = None):
        self.name = name
        self.value = value
        self.text = text if text is not None else _text(name, value)


# inode and block pointers: all ones is NULL, which xfs_db prints as "null"
_POINTERS = {"rootino", "rbmino", "rsumino", "uquotino", "gquotino", "pquotino", "newino",
             "dirino", "next_unlinked", "unlinked", "leftsib", "rightsib", "bno"}
_NULLS = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)


def pointer_text(value: int) -> str:
    """A pointer as xfs_db prints it: ``null`` for NULL (all ones)."""
    return "null" if value in _NULLS else str(value)


def _text(name: str, value) -> str:
    if isinstance(value, list):
        return " ".join(_text(name, v) for v in value)
    if isinstance(value, int) and name in _HEX:
        return f"0x{value:x}"
    if isinstance(value, int) and name in _POINTERS:
        return pointer_text(value)
    return str(value)


def _value(raw):
    if isinstance(raw, bytes):
        if len(raw) == 16:
            return str(uuidlib.UUID(bytes=raw))
        return raw.hex()
    return raw


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix):] if name.startswith(prefix) else name


def _from_layout(d: dict, layout, prefix: str, skip=()) -> list[Field]:
    out = []
    for fname, _code in layout.fields:
        if fname in skip:
            continue
        out.append(Field(_strip(fname, prefix), _value(d[fname])))
    return out


def describe_sb(fs, agno: int = 0) -> list[Field]:
    raw = fs.superblock_raw(agno)
    d = S.SB.unpack(raw)
    fields = _from_layout(d, S.SB, "sb_", skip=("sb_fname",))
    label = d["sb_fname"].split(b"\0", 1)[0].decode("utf-8", "replace")
    fields.insert(19, Field("fname", label, f'"{label}"'))
    return fields


def describe_agf(fs, agno: int) -> list[Field]:
    d = fs.agf(agno)
    out = []
    for fname, _code in S.AGF.fields:
        if fname == "agf_roots":
            for i, n in enumerate(("bnoroot", "cntroot", "rmaproot")):
                out.append(Field(n, d[fname][i]))
        elif fname == "agf_levels":
            for i, n in enumerate(("bnolevel", "cntlevel", "rmaplevel")):
                out.append(Field(n, d[fname][i]))
        elif fname in ("agf_spare64", "agf_spare2"):
            continue
        else:
            out.append(Field(_strip(fname, "agf_"), _value(d[fname])))
    return out


def describe_agi(fs, agno: int) -> list[Field]:
    d = fs.agi(agno)
    out = []
    for fname, _code in S.AGI.fields:
        if fname == "agi_unlinked":
            buckets = {i: v for i, v in enumerate(d[fname]) if v != C.NULLAGINO}
            out.append(Field("unlinked", buckets,
                             " ".join(f"{i}:{v}" for i, v in buckets.items()) or "(none)"))
        elif fname == "agi_pad32":
            continue
        else:
            out.append(Field(_strip(fname, "agi_"), _value(d[fname])))
    return out


def describe_agfl(fs, agno: int) -> list[Field]:
    d = fs.agfl(agno)
    out = _from_layout(d, S.AGFL, "agfl_")
    agf = fs.agf(agno)
    first, count = agf["agf_flfirst"], agf["agf_flcount"]
    slots = d["agfl_bno"]
    live = [slots[(first + i) % len(slots)] for i in range(min(count, len(slots)))]
    out.append(Field("bno", live, " ".join(map(str, live)) or "(empty)"))
    return out


def inode_of(fs, spec: str) -> int:
    """The inode a command line names: a number (decimal, or 0x hex), or a
    path in the image.  A number the filesystem cannot have is the
    argument's fault (BadValue, exit status 2), not the image's."""
    text = spec.strip()
    try:
        ino = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return fs.lookup(spec).ino
    try:
        if ino < 0 or ino >= 1 << 64:
            raise CorruptionError("inode number", "out of range")
        fs.ino_location(ino)
    except CorruptionError:
        sb = fs.sb
        agno, agbno = ino >> sb.agino_log, (ino & ((1 << sb.agino_log) - 1)) >> sb.inopblog
        where = f"AG {agno}, block {agbno}" if ino >= 0 else "a negative number"
        raise BadValue(f"inode {ino} is not an inode number of this filesystem ({where}; it "
                       f"has {sb.agcount} AG{'s' if sb.agcount != 1 else ''} of "
                       f"{sb.agblocks} blocks)") from None
    return ino


def describe_inode(fs, ino: int) -> list[Field]:
    node = fs.inode(ino)
    d = S.DINODE.unpack(node.raw)
    out = []
    for fname, _code in S.DINODE.fields:
        name = _strip(fname, "di_")
        v = _value(d[fname])
        if fname == "di_mode":
            out.append(Field(name, v, f"0{v:o}"))
        elif fname in ("di_format", "di_aformat"):
            out.append(Field(name, v, f"{v} ({C.DINODE_FORMAT_NAMES.get(v, '?')})"))
        elif fname in ("di_atime", "di_mtime", "di_ctime", "di_crtime"):
            ns = getattr(node, fname[3:] + "_ns")
            out.append(Field(name + "_ns", ns, _fmt_ns(ns)))
        elif fname == "di_pad2":
            continue
        else:
            out.append(Field(name, v))
    out.append(Field("nextents_effective", node.nextents))
    out.append(Field("anextents_effective", node.anextents))
    out.append(Field("type", node.type_name))
    if node.is_dir:
        out.append(Field("dir_form", xdir.form(node)))
    if node.format in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        exts = node.extents()
        out.append(Field("extents", [list(e) for e in exts],
                         "; ".join(f"[{o},{b},{n}{',unwritten' if u else ''}]"
                                   for o, b, n, u in exts[:64])
                         + (f" ... ({len(exts)} in all)" if len(exts) > 64 else "")))
    rdev = node.rdev
    if rdev is not None:
        out.append(Field("rdev", list(rdev), f"{rdev[0]},{rdev[1]}"))
    return out


def _fmt_ns(ns: int) -> str:
    sec, frac = divmod(ns, C.NSEC_PER_SEC)
    try:
        when = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + \
            datetime.timedelta(seconds=sec)
        return f"{when.strftime('%Y-%m-%d %H:%M:%S')}.{frac:09d} UTC"
    except OverflowError:
        return f"{sec}.{frac:09d}"
