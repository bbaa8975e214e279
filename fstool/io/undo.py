"""Undo files: every byte range of an image saved before it is first
overwritten, so that the change can be taken back (e2fsprogs' undo
io_manager, in a format of our own).

A :class:`UndoRecorder` is attached to a writable :class:`~fstool.io.device.Device`
(``dev.write_hook``).  Before each write it saves the 512-byte sectors of the
range that were not saved yet, as they are on the image, appending them to
the undo file (which is flushed before the device is).  :meth:`finish`
closes the file with a trailer: the list of saved ranges and a SHA-256
digest of what the image holds there after the change, plus the primary
superblock and every AG header sector.  :func:`apply_undo` puts the saved
bytes back, refusing when the image no longer matches that digest (it was
changed since) or the undo file is incomplete.

File layout (all big-endian)::

    header   b"FSTUNDO1", u64 image size, u32 sector size of the digest's
             extra sectors, u32 count of extra sectors, u64 their offsets
    records  b"R", u64 offset, u32 length, the original bytes
    trailer  b"T", 32-byte digest, b"FSTUNDOK"
"""
from __future__ import annotations

import hashlib
import os
import struct

from ..errors import BadValue, FsToolError, InvalidArgument, WriteRefused
from ..format.structs import SB
from .device import Device
from .logdev import paired
from .signals import held

MAGIC = b"FSTUNDO1"
DONE = b"FSTUNDOK"
SECTOR = 512
_HDR = struct.Struct(">8sQII")
_REC = struct.Struct(">cQI")


class UndoError(FsToolError):
    """An undo file that cannot be applied."""


class UndoFileError(UndoError, BadValue):
    """The file given is no undo file: missing, unreadable, not one, or
    damaged (the command line's fault: exit status 2)."""


class UndoRefused(UndoError, WriteRefused):
    """The undo file does not fit the image (changed since, another size)
    or is incomplete: nothing is written (exit status 7)."""


class UndoLogExternal(BadValue):
    """--undo-file on a filesystem whose log is on a device of its own,
    for a command that may write the log: the undo file holds the image's
    blocks only (exit status 2, nothing written)."""


def refuse_external_log(path, command: str) -> None:
    """Raise :class:`UndoLogExternal` when the primary superblock of
    ``path`` puts the log on an external device (``sb_logstart`` 0): what
    ``command`` writes into that log could not be put back by ``fstool
    undo``, which would restore the image and leave the log as the command
    left it."""
    dev = Device(path)
    try:
        raw = dev.pread(0, SECTOR) if dev.size >= SECTOR else b""
    finally:
        dev.close()
    if raw[:4] != b"XFSB" or \
            struct.unpack_from(">Q", raw, SB.offset("sb_logstart"))[0] != 0:
        return
    log = paired(path)
    raise UndoLogExternal(
        f"{path}: --undo-file cannot save what {command} writes into the external log "
        f"({f'--logdev {log}' if log else 'the --logdev device'}): an undo file holds the "
        "image's blocks only; copy the image and the log device instead, and run without "
        "--undo-file")


class UndoRecorder:
    """Saves what a device's writes overwrite; see the module docstring.

    ``extra`` lists (offset, length) ranges the digest covers besides the
    written ones (the superblock and AG headers)."""

    def __init__(self, dev, path, extra: list):
        self.dev = dev
        self.path = os.fspath(path)
        self.saved: set = set()          # sector numbers saved
        self.ranges: list = []           # (offset, length) in order of saving
        self.extra = sorted(set(extra))
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                              0o600)
        except OSError as e:
            raise InvalidArgument(f"{self.path}: cannot create the undo file: "
                                  f"{e.strerror}") from None
        head = _HDR.pack(MAGIC, dev.size, SECTOR, len(self.extra))
        head += b"".join(struct.pack(">QI", o, n) for o, n in self.extra)
        self._write(head)
        self.dirty = False

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    # -- the device's hooks ---------------------------------------------------
    def before_write(self, offset: int, length: int) -> None:
        first, last = offset // SECTOR, (offset + length - 1) // SECTOR
        run = None
        for s in range(first, last + 1):
            if s in self.saved:
                if run is not None:
                    self._save(*run)
                    run = None
                continue
            self.saved.add(s)
            run = (run[0], run[1] + 1) if run is not None else (s, 1)
        if run is not None:
            self._save(*run)

    def _save(self, sector: int, count: int) -> None:
        off, n = sector * SECTOR, count * SECTOR
        n = min(n, self.dev.size - off)
        data = self.dev.pread(off, n)
        self._write(_REC.pack(b"R", off, n) + data)
        self.ranges.append((off, n))
        self.dirty = True

    def before_truncate(self, new_size: int, chunk: int = 1 << 20) -> None:
        """Save what a truncation to ``new_size`` cuts off and was not
        saved before (chunks of zeros, holes included, are left out: undo
        extends the file with a hole)."""
        off = new_size
        while off < self.dev.size:
            n = min(chunk, self.dev.size - off)
            if self.dev.pread(off, n).count(0) != n:
                self.before_write(off, n)
            off += n
        self.before_fsync()

    def before_fsync(self) -> None:
        if self.dirty:
            os.fsync(self.fd)
            self.dirty = False

    # -- the end -----------------------------------------------------------------
    def finish(self, dev=None) -> None:
        """Write the trailer: the image as the change left it is what undo
        will expect to find.  ``dev`` reads the image (the device written,
        unless it is closed by then)."""
        dev = dev or self.dev
        digest = image_digest(dev.pread, dev.size, self.ranges, self.extra)
        self._write(b"T" + digest + DONE)
        os.fsync(self.fd)
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def image_digest(pread, size: int, ranges, extra) -> bytes:
    """SHA-256 over the image's bytes at ``ranges`` and ``extra``."""
    h = hashlib.sha256()
    h.update(struct.pack(">Q", size))
    for off, n in sorted(set(ranges) | set(extra)):
        n = min(n, size - off)
        if n > 0:
            h.update(struct.pack(">QI", off, n))
            h.update(pread(off, n))
    return h.digest()


def read_undo(path, partial: bool = False) -> tuple[int, list, list, bytes]:
    """(image size, [(offset, original bytes)], extra ranges, digest) of an
    undo file; UndoError when it is not one or is incomplete.  With
    ``partial``, the records of an incomplete one (a change killed before it
    finished: every range it overwrote was saved first, a record cut short
    by the kill saved a range not written yet) and digest None."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UndoFileError(f"{path}: cannot read the undo file: {e.strerror}") from None
    if len(raw) < _HDR.size or raw[:8] != MAGIC:
        raise UndoFileError(f"{path}: not an fstool undo file")
    _m, size, sector, nextra = _HDR.unpack_from(raw, 0)
    pos = _HDR.size
    if sector != SECTOR or pos + 12 * nextra > len(raw):
        raise UndoFileError(f"{path}: damaged undo file header")
    extra = [struct.unpack_from(">QI", raw, pos + 12 * i) for i in range(nextra)]
    pos += 12 * nextra
    records = []
    while pos < len(raw) and raw[pos:pos + 1] == b"R":
        if pos + _REC.size > len(raw):
            break
        _t, off, n = _REC.unpack_from(raw, pos)
        pos += _REC.size
        if pos + n > len(raw):
            if partial:
                break
            raise UndoFileError(f"{path}: the undo file is truncated")
        records.append((off, raw[pos:pos + n]))
        pos += n
    if raw[pos:pos + 1] != b"T" or raw[pos + 33:pos + 41] != DONE or pos + 41 != len(raw):
        if partial:
            return size, records, extra, None
        raise UndoRefused(f"{path}: the undo file is incomplete (the change that wrote it did "
                          "not finish); it cannot be applied")
    return size, records, extra, raw[pos + 1:pos + 33]


@held()
def roll_back(dev, path) -> int:
    """Put back what an incomplete undo file saved (the crash guard of a
    change killed on the way: the image then holds what it held before the
    change); returns the bytes restored."""
    size, records, _extra, _digest = read_undo(path, partial=True)
    if dev.size != size:
        raise UndoRefused(f"{dev.path}: the image is {dev.size} bytes, the undo file was made "
                          f"for one of {size} bytes")
    total = 0
    for off, data in records:
        if off < 0 or off + len(data) > dev.size:
            raise UndoRefused(f"{path}: a saved range lies outside the image")
        dev.pwrite(off, data)
        total += len(data)
    dev.fsync()
    return total


@held()
def apply_undo(dev, path) -> int:
    """Put back what an undo file saved; returns the bytes restored.
    Refuses (UndoError) when the image changed since the undo file was
    completed."""
    size, records, extra, digest = read_undo(path)
    # an image file the change extended (repair --extend-truncated) is cut
    # back to its old size once its blocks are back; one it truncated
    # (resize's shrink) is extended first
    grown = dev.size > size and not dev.fixed_size
    shrunk = dev.size < size and not dev.fixed_size
    if dev.size != size and not (grown or shrunk):
        raise UndoRefused(f"{dev.path}: the image is {dev.size} bytes, the undo file was made "
                          f"for one of {size} bytes")
    ranges = [(off, len(data)) for off, data in records]
    for off, n in ranges:
        if off < 0 or off + n > max(dev.size, size):
            raise UndoRefused(f"{path}: a saved range lies outside the image")
    if image_digest(dev.pread, dev.size, ranges, extra) != digest:
        if grown:
            raise UndoRefused(f"{dev.path}: the image is {dev.size} bytes, the undo file was "
                              f"made for one of {size} bytes (or one it extended, unchanged "
                              "since)")
        raise UndoRefused(f"{dev.path}: the image has changed since the undo file was written; "
                          "refusing to put the old blocks back")
    total = 0
    if shrunk:
        dev.resize(size)
    for off, data in records:
        dev.pwrite(off, data)
        total += len(data)
    dev.fsync()
    if grown:
        dev.resize(size)
        dev.fsync()
    return total
