"""Whole-disk images: their partition table (GPT or MBR) and the byte window
of the partition a command works on.

A disk image holds a partition table and, in one of its partitions, the
filesystem.  ``IMAGE@SEL`` names that partition (``SEL`` is its number, its
GPT name, its PARTUUID or the label of the XFS filesystem in it; ``+BYTES``
is a byte offset, the window running to the end of the file), and
:func:`locate` turns the name into (file, start, length): the
:class:`~fstool.io.device.Device` then reads and writes only that window of
the file, so that everything above it sees a plain image, and nothing
outside the partition is read or written.  A disk image named without a
partition opens its one XFS partition (a note on stderr says which); with
several, or none, the error lists the partitions.

GPT: the primary header (LBA 1, on 512- or 4096-byte sectors) and its
entry array are checked by their CRC32s, and so is the backup header at the
LBA the primary names (normally the disk's last) and its copy of the
entries; a damaged primary is read from the backup (as gdisk and the
kernel do), a damaged or missing backup is reported.  MBR: the four primary
entries and the logical partitions of an extended one (its chain of EBRs),
numbered from 5 as Linux numbers them.

Our own parser: both formats are a few fixed-size records; the one
maintained Python library for them (pyparted) binds libparted and opens
the device itself, which costs far more than reading two sectors and
could not hand back a byte window of an already open file.
"""
from __future__ import annotations

import os
import struct
import sys
import zlib
from typing import NamedTuple

from ..errors import ImageError, ImageNotFoundError, InvalidArgument, NotXfsError

SECTOR = 512
GPT_SIGNATURE = b"EFI PART"
_GPT_HEADER = struct.Struct("<8sIIIIQQQQ16sQIII")
_GPT_ENTRY = struct.Struct("<16s16sQQQ72s")
_MBR_ENTRY = struct.Struct("<B3sB3sII")
_EXTENDED = (0x05, 0x0F, 0x85)
MAX_LOGICAL = 256              # EBRs followed at most (a loop is a damaged chain)
XFS_MAGIC = b"XFSB"

GPT_TYPES = {
    "c12a7328-f81f-11d2-ba4b-00a0c93ec93b": "EFI System",
    "21686148-6449-6e6f-744e-656564454649": "BIOS boot",
    "0fc63daf-8483-4772-8e79-3d69d8477de4": "Linux filesystem",
    "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f": "Linux swap",
    "e6d6d379-f507-44c2-a23c-238f2a3df928": "Linux LVM",
    "a19d880f-05fc-4d3b-a006-743f0f84911e": "Linux RAID",
    "933ac7e1-2eb4-4f13-b844-0e14e2aef915": "Linux home",
    "3b8f8425-20e0-4f3b-907f-1a25a76f98e8": "Linux server data",
    "4d21b016-b534-45c2-a9fb-5c16e091fd2d": "Linux variable data",
    "7ec6f557-3bc5-4aca-b293-16ef5df639d1": "Linux temporary data",
    "bc13c2ff-59e6-4262-a352-b275fd6f7172": "Linux extended boot",
    "44479540-f297-41b2-9af7-d131d5f0458a": "Linux root (x86)",
    "4f68bce3-e8cd-4db1-96e7-fbcaf984b709": "Linux root (x86-64)",
    "b921b045-1df0-41c3-af44-4c6f280d3fae": "Linux root (ARM-64)",
    "69dad710-2ce4-4e3c-b16c-21a1d49abed3": "Linux root (ARM)",
    "8484680c-9521-48c6-9c11-b0720656f69e": "Linux /usr (x86-64)",
    "b0e01050-ee5f-4390-949a-9101b17104e9": "Linux /usr (ARM-64)",
    "75250d76-8cc6-458e-bd66-bd47cc81a812": "Linux /usr (x86)",
    "ebd0a0a2-b9e5-4433-87c0-68b6b72699c7": "Microsoft basic data",
    "e3c9e316-0b5c-4db8-817d-f92df00215ae": "Microsoft reserved",
    "de94bba4-06d1-4d40-a16a-bfd50179d6ac": "Windows recovery",
    "516e7cb6-6ecf-11d6-8ff8-00022d09712b": "FreeBSD UFS",
    "48465300-0000-11aa-aa11-00306543ecac": "Apple HFS/HFS+",
}
MBR_TYPES = {
    0x01: "FAT12", 0x04: "FAT16 <32M", 0x05: "Extended", 0x06: "FAT16", 0x07: "HPFS/NTFS/exFAT",
    0x0B: "W95 FAT32", 0x0C: "W95 FAT32 (LBA)", 0x0E: "W95 FAT16 (LBA)",
    0x0F: "W95 Ext'd (LBA)", 0x82: "Linux swap", 0x83: "Linux", 0x85: "Linux extended",
    0x8E: "Linux LVM", 0xA5: "FreeBSD", 0xEE: "GPT", 0xEF: "EFI (FAT-12/16/32)",
    0xFD: "Linux raid autodetect",
}


class NoXfsPartition(NotXfsError):
    """A disk image none of whose partitions holds XFS."""

    def __init__(self, msg: str):
        super().__init__("superblock", msg, agno=0, block=0)
        self.args = (msg,)


class Partition(NamedTuple):
    """One partition: ``start`` and ``size`` in bytes."""
    number: int
    start: int
    size: int
    type: str           # the GPT type GUID, or the MBR type as "0x83"
    type_name: str
    name: str = ""      # the GPT partition name (PARTLABEL); "" on MBR
    uuid: str = ""      # PARTUUID: the GPT unique GUID, or MBR's "disk id-NN"
    kind: str = ""      # MBR: "primary", "extended" or "logical"
    bootable: bool = False
    xfs: bool = False   # an XFS superblock at its start
    fs_label: str = ""  # that filesystem's label

    def describe(self) -> str:
        """One line: number, name, type, size and whether it holds XFS."""
        name = f" {self.name!r}" if self.name else ""
        fs = f"XFS{f' {self.fs_label!r}' if self.fs_label else ''}" if self.xfs else "not XFS"
        return f"{self.number}{name} ({self.type_name}, {human_size(self.size)}, {fs})"


class Table(NamedTuple):
    kind: str                   # "gpt" or "mbr"
    sector: int
    disk_id: str
    partitions: list
    disk_size: int
    notes: list                 # what is wrong with the table but did not stop reading it
    first_usable: int = 0       # GPT: in sectors
    last_usable: int = 0


class Window(NamedTuple):
    """What an image name comes to: ``file`` and the byte range of it
    (``length`` 0: to the end of the file), the partition when one was
    chosen, and a note for stderr when it was chosen for the user."""
    file: str
    start: int = 0
    length: int = 0
    partition: Partition | None = None
    note: str | None = None


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" and n != int(n) else f"{int(n)} {unit}"
        n /= 1024
    return f"{n} B"


def _guid(raw: bytes) -> str:
    """A GPT GUID (16 bytes, its first three fields little-endian) as text,
    as str(uuid.UUID(bytes_le=raw)) gives it (the uuid module is not loaded
    for it: it costs every command's start-up more than the whole table)."""
    return f"{raw[3::-1].hex()}-{raw[5:3:-1].hex()}-{raw[7:5:-1].hex()}-{raw[8:10].hex()}-" \
           f"{raw[10:16].hex()}"


def _pread(fd: int, n: int, off: int) -> bytes:
    """``n`` bytes at ``off``; nothing when the range cannot be read (a
    damaged table's LBA can be past any file offset)."""
    if off < 0 or off + n > 1 << 63:
        return b""
    try:
        return os.pread(fd, n, off)
    except OSError:
        return b""


# -- GPT -----------------------------------------------------------------------

def _gpt_header(fd: int, lba: int, sector: int, disk_size: int):
    """(fields, entries bytes) of the GPT header at ``lba`` when it and its
    entry array pass their CRCs; else (None, why)."""
    raw = _pread(fd, sector, lba * sector)
    if len(raw) < _GPT_HEADER.size or raw[:8] != GPT_SIGNATURE:
        return None, "no GPT header there"
    h = _GPT_HEADER.unpack_from(raw)
    (_sig, _rev, hsize, hcrc, _res, my_lba, alt_lba, first, last, disk_guid, entries_lba,
     count, esize, ecrc) = h
    if not 92 <= hsize <= sector:
        return None, f"header size {hsize} out of range"
    body = bytearray(raw[:hsize])
    body[16:20] = b"\0\0\0\0"
    if zlib.crc32(body) != hcrc:
        return None, "header CRC mismatch"
    if my_lba != lba:
        return None, f"it says it lies at LBA {my_lba}"
    if esize < _GPT_ENTRY.size or esize % 8 or count > 65536 or count * esize > 16 << 20:
        return None, f"{count} entries of {esize} bytes"
    n = count * esize
    entries = _pread(fd, n, entries_lba * sector)
    if len(entries) != n:
        return None, "its entry array lies beyond the end of the image"
    if zlib.crc32(entries) != ecrc:
        return None, "entry array CRC mismatch"
    return (my_lba, alt_lba, first, last, disk_guid, entries_lba, count, esize, ecrc), entries


def _read_gpt(fd: int, sector: int, disk_size: int) -> Table:
    notes = []
    last_lba = disk_size // sector - 1
    primary, entries = _gpt_header(fd, 1, sector, disk_size)
    if primary is None:
        backup, b_entries = _gpt_header(fd, last_lba, sector, disk_size)
        if backup is None:
            raise ImageError(f"the GPT is damaged: primary header: {entries}; backup header "
                             f"at LBA {last_lba}: {b_entries}")
        notes.append(f"the primary GPT header is damaged ({entries}): the backup at LBA "
                     f"{last_lba} was read instead")
        h, entries = backup, b_entries
    else:
        h = primary
        alt = primary[1]
        if alt > last_lba:
            notes.append(f"the backup GPT header lies at LBA {alt}, beyond the end of the "
                         f"image (LBA {last_lba}): the image is truncated or was cut")
        else:
            backup, why = _gpt_header(fd, alt, sector, disk_size)
            if backup is None:
                notes.append(f"the backup GPT header at LBA {alt} is damaged ({why})")
            elif backup[4] != primary[4] or backup[8] != primary[8] or backup[1] != 1 or \
                    backup[2:4] != primary[2:4]:
                notes.append(f"the backup GPT header at LBA {alt} does not match the primary")
            if alt != last_lba:
                notes.append(f"the backup GPT header is at LBA {alt}, not at the image's "
                             f"last sector ({last_lba}): the image was grown")
    _my, _alt, first, last, disk_guid, _elba, count, esize, _ecrc = h
    parts = []
    zero = bytes(16)
    for i in range(count):
        off = i * esize
        if entries[off:off + 16] == zero:
            continue
        tguid, uguid, lo, hi, attrs, name = _GPT_ENTRY.unpack_from(entries, off)
        if hi < lo:
            notes.append(f"partition {i + 1} ends (LBA {hi}) before it starts (LBA {lo})")
            continue
        t = _guid(tguid)
        nm = name.decode("utf-16-le", "replace").split("\0", 1)[0]
        parts.append(Partition(i + 1, lo * sector, (hi - lo + 1) * sector, t,
                               GPT_TYPES.get(t, t.upper()), nm, _guid(uguid),
                               bootable=bool(attrs & 4)))
    return Table("gpt", sector, _guid(disk_guid).upper(), parts, disk_size, notes, first, last)


# -- MBR -----------------------------------------------------------------------

def _mbr_entries(sect: bytes):
    out = []
    for i in range(4):
        boot, _chs, ptype, _chs2, lba, n = _MBR_ENTRY.unpack_from(sect, 446 + 16 * i)
        out.append((boot, ptype, lba, n))
    return out


def _read_mbr(fd: int, sect0: bytes, disk_size: int) -> Table | None:
    entries = _mbr_entries(sect0)
    if any(boot not in (0, 0x80) for boot, _t, _l, _n in entries):
        return None             # boot code, not a table (a FAT or NTFS boot sector)
    if all(t == 0 for _b, t, _l, _n in entries):
        return None
    disk_id = int.from_bytes(sect0[440:444], "little")
    notes = []
    parts = []
    for i, (boot, ptype, lba, n) in enumerate(entries):
        if ptype == 0 or n == 0:
            continue
        kind = "extended" if ptype in _EXTENDED else "primary"
        parts.append(Partition(i + 1, lba * SECTOR, n * SECTOR, f"0x{ptype:02x}",
                               MBR_TYPES.get(ptype, f"type 0x{ptype:02x}"),
                               uuid=f"{disk_id:08x}-{i + 1:02d}", kind=kind,
                               bootable=boot == 0x80))
        if kind == "extended":
            _logical(fd, lba, disk_id, disk_size, parts, notes)
    return Table("mbr", SECTOR, f"0x{disk_id:08x}", parts, disk_size, notes)


def _logical(fd: int, ext_lba: int, disk_id: int, disk_size: int, parts, notes) -> None:
    """The logical partitions of the extended partition at ``ext_lba``:
    each EBR's first entry is one (its start relative to that EBR), its
    second points to the next EBR (relative to the extended partition)."""
    ebr = ext_lba
    seen = set()
    number = 5
    while ebr and len(seen) < MAX_LOGICAL:
        if ebr in seen:
            notes.append(f"the chain of logical partitions loops at LBA {ebr}")
            return
        seen.add(ebr)
        sect = _pread(fd, SECTOR, ebr * SECTOR)
        if len(sect) < SECTOR or sect[510:512] != b"\x55\xaa":
            notes.append(f"no extended boot record at LBA {ebr}: the logical partitions "
                         "end there")
            return
        (b1, t1, l1, n1), (_b2, t2, l2, n2) = _mbr_entries(sect)[:2]
        if t1 and n1:
            parts.append(Partition(number, (ebr + l1) * SECTOR, n1 * SECTOR, f"0x{t1:02x}",
                                   MBR_TYPES.get(t1, f"type 0x{t1:02x}"),
                                   uuid=f"{disk_id:08x}-{number:02d}", kind="logical",
                                   bootable=b1 == 0x80))
            number += 1
        ebr = ext_lba + l2 if t2 in _EXTENDED and n2 else 0


# -- reading a table -----------------------------------------------------------

def read_table(fd: int, size: int, head: bytes | None = None) -> Table | None:
    """The partition table of the open file ``fd`` (``size`` bytes; ``head``
    its first bytes when already read), or None when it has none."""
    if head is None or len(head) < 2 * SECTOR:
        head = _pread(fd, 8192, 0)
    if len(head) < 2 * SECTOR:
        return None
    if head[SECTOR:SECTOR + 8] == GPT_SIGNATURE:
        table = _read_gpt(fd, SECTOR, size)
    elif head[4096:4104] == GPT_SIGNATURE:
        table = _read_gpt(fd, 4096, size)
    elif head[510:512] != b"\x55\xaa":
        return None
    else:
        entries = _mbr_entries(head)
        if any(t == 0xEE for _b, t, _l, _n in entries):
            # a protective MBR whose GPT header is gone: the backup may serve
            try:
                table = _read_gpt(fd, SECTOR, size)
            except ImageError:
                return None
        else:
            table = _read_mbr(fd, head, size)
            if table is None:
                return None
    parts = []
    for p in table.partitions:
        if p.kind == "extended":
            parts.append(p)
            continue
        if p.start + p.size > size:
            table.notes.append(f"partition {p.number} ends beyond the end of the image "
                               f"({p.start + p.size} > {size} bytes)")
        sb = _pread(fd, 120, p.start) if p.start < size else b""
        if sb[:4] == XFS_MAGIC:
            label = sb[108:120].split(b"\0", 1)[0].decode("utf-8", "replace")
            p = p._replace(xfs=True, fs_label=label)
        parts.append(p)
    return table._replace(partitions=parts)


def table_of(path: str) -> Table | None:
    """The partition table of the file or device at ``path`` (None: none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise ImageNotFoundError(f"{path}: no such file") from None
    except OSError as e:
        raise ImageError(f"{path}: cannot open: {e.strerror}") from None
    try:
        return read_table(fd, os.lseek(fd, 0, os.SEEK_END))
    finally:
        os.close(fd)


# -- names ---------------------------------------------------------------------

def split(spec: str) -> tuple[str, str | None]:
    """(file, selector) of an image name: the name itself when a file by
    that name exists, else the longest prefix before an '@' that does; a
    name no prefix of which exists is returned whole (the open then says
    it does not exist)."""
    if os.path.lexists(spec) or "@" not in spec:
        return spec, None
    i = len(spec)
    while True:
        i = spec.rfind("@", 0, i)
        if i <= 0:
            return spec, None
        if os.path.lexists(spec[:i]):
            return spec[:i], spec[i + 1:]


def join(image: str, partition: str | None = None, offset: int | None = None) -> str:
    """The image name for ``--partition`` / ``--offset`` given with IMAGE."""
    if partition is not None and offset is not None:
        raise InvalidArgument("give --partition or --offset, not both")
    if partition is None and offset is None:
        return image
    if split(image)[1] is not None:
        raise InvalidArgument(f"{image}: names a partition already; --partition and "
                              "--offset are for a plain file name")
    return f"{image}@{partition}" if partition is not None else f"{image}@+{offset}"


def _listing(table: Table) -> str:
    return "; ".join(p.describe() for p in table.partitions if p.kind != "extended")


def _choose(path: str, table: Table, sel: str) -> Partition:
    parts = [p for p in table.partitions if p.kind != "extended"]
    if sel.isdigit():
        n = int(sel)
        for p in table.partitions:
            if p.number == n:
                if p.kind == "extended":
                    raise ImageError(f"{path}@{sel}: partition {n} is the extended partition "
                                     f"that holds the logical ones: {_listing(table)}")
                return p
        raise ImageError(f"{path}: no partition {n} in its {table.kind.upper()} table: "
                         f"{_listing(table) or 'it has none'}")
    low = sel.lower()
    for test in (lambda p: p.name == sel, lambda p: p.uuid.lower() == low,
                 lambda p: p.xfs and p.fs_label == sel):
        hits = [p for p in parts if test(p)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise ImageError(f"{path}: {len(hits)} partitions answer to {sel!r}: "
                             + "; ".join(p.describe() for p in hits) + "; give its number")
    raise ImageError(f"{path}: no partition named {sel!r} (by number, GPT name, PARTUUID or "
                     f"XFS label): {_listing(table) or 'it has none'}")


def window_of(path: str, fd: int, size: int, sel: str | None, head: bytes) -> Window:
    """The window of the file ``path`` (open as ``fd``, ``size`` bytes,
    starting with ``head``) that the selector ``sel`` names; with no
    selector, the whole file unless it is a disk image, whose one XFS
    partition is chosen (with a note)."""
    if sel is None:
        if head[:4] == XFS_MAGIC:
            return Window(path)
        table = read_table(fd, size, head)
        if table is None or not table.partitions:
            return Window(path)
        xfs = [p for p in table.partitions if p.xfs]
        if len(xfs) == 1:
            p = xfs[0]
            note = (f"{path}: a disk image ({table.kind.upper()}); opening its XFS "
                    f"partition {p.describe()}, {path}@{p.number}")
            return Window(path, p.start, _length(path, p, size), p, note)
        msg = (f"{path}: a disk image ({table.kind.upper()}) with "
               f"{'several XFS partitions' if xfs else 'no XFS partition'}; name one as "
               f"{path}@N (or --partition N): {_listing(table)}")
        if xfs:
            raise ImageError(msg)
        raise NoXfsPartition(msg)
    if sel[:1] == "+" and sel[1:].isdigit():
        start = int(sel[1:])
        if start >= size:
            raise ImageError(f"{path}: offset {start} lies at or beyond the end of the image "
                             f"({size} bytes)")
        return Window(path, start, size - start)
    if not sel:
        raise ImageError(f"{path}@: name a partition after the '@' (its number, GPT name or "
                         "PARTUUID)")
    table = read_table(fd, size, head)
    if table is None:
        raise ImageError(f"{path}: no partition table (GPT or MBR) to find partition "
                         f"{sel!r} in")
    p = _choose(path, table, sel)
    return Window(path, p.start, _length(path, p, size), p)


def _length(path: str, p: Partition, size: int) -> int:
    if p.start >= size:
        raise ImageError(f"{path}: partition {p.number} starts at byte {p.start}, beyond the "
                         f"end of the image ({size} bytes): the image is truncated")
    return min(p.size, size - p.start)


def locate(spec: str) -> Window:
    """The file and byte window an image name comes to (for the guards,
    before anything opens it)."""
    path, sel = split(os.fspath(spec))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return Window(path)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        head = _pread(fd, 8192, 0)
        return window_of(path, fd, size, sel, head)
    except (ImageError, OSError):
        # (a FIFO, a socket: the open that follows refuses it in its words)
        return Window(path)
    finally:
        os.close(fd)


_noted: set = set()


def notify(note: str) -> None:
    """Say ``note`` once per process (a command opens its image more than
    once)."""
    if note in _noted:
        return
    _noted.add(note)
    try:
        sys.stderr.write(f"fstool: note: {note}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
