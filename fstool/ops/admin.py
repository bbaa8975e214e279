"""The label and UUID of a filesystem, as xfs_admin -L / -U set them.

The label (``sb_fname``, 12 bytes) is changed in one journaled transaction
on the primary superblock, then every secondary superblock is rewritten
from it (as resize rewrites them).

A new UUID on a v5 filesystem goes where the kernel and xfs_db put it:
the metadata blocks keep the UUID they are stamped with, which moves to
``sb_meta_uuid`` under the incompat META_UUID feature the first time the
UUID changes; setting the UUID back to that one (``restore``) clears the
feature.  Every log record carries the UUID as well and the kernel refuses
a log whose newest record carries a UUID other than the superblock's (a
nil one it accepts, as xfs_repair does), so the clean log gets one
unmount record at its head carrying a nil UUID, then the primary
superblock's sector is written in place, then the secondaries, then
another unmount record carrying the new UUID.  Each record is written
whole or, torn, fails its CRC and leaves the record before it the head:
killed at any point the image mounts, with the old UUID or the new one,
and running the command again finishes it.  Killed between the primary
and the last secondary of a change that sets or clears META_UUID, the
secondaries not yet written differ from the primary in that feature
(xfs_repair -n and fstool check name them; xfs_admin has the same window):
no order of the writes avoids it, and the run that finishes the change
rewrites them.
"""
from __future__ import annotations

import os
import uuid as uuidlib

from ..errors import InvalidArgument, WriteRefused
from ..format import constants as C, log as L
from ..format.structs import SB
from ..fs.filesystem import Filesystem
from ..fs.logstate import log_is_clean
from ..io import verify as V
from ..io.device import Device
from ..io.lock import ImageLock, refuse_if_mounted
from ..log.head import find_state
from ..ns.writer import Writer
from .logops import stamp

LABEL_MAX = 12


def parse_label(text: str) -> bytes:
    """The label's bytes; ``--`` is the empty label (as xfs_admin -L --)."""
    if text == "--":
        return b""
    raw = text.encode("utf-8")
    if len(raw) > LABEL_MAX:
        raise InvalidArgument(f"label {text!r} is {len(raw)} bytes; at most {LABEL_MAX}")
    if b"\0" in raw:
        raise InvalidArgument("a label cannot hold a NUL byte")
    return raw


def _read_primary(path) -> dict:
    dev = Device(path)
    try:
        return SB.unpack(dev.pread(0, SB.size))
    finally:
        dev.close()


def show(path) -> dict:
    """The label and UUIDs of the filesystem at ``path``."""
    with Filesystem(path) as fs:
        f = SB.unpack(fs.dev.pread(0, SB.size))
    meta = bool(f["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_META_UUID)
    return {"label": f["sb_fname"].split(b"\0", 1)[0].decode("utf-8", "replace"),
            "uuid": str(uuidlib.UUID(bytes=f["sb_uuid"])),
            "meta_uuid": str(uuidlib.UUID(bytes=f["sb_meta_uuid"])) if meta else None}


def _to_disk(f: dict) -> None:
    """What xfs_db's write of a superblock does besides the change: a quota
    inode of 0 is written as none (NULLFSINO), as the in-core superblock
    holds it."""
    for q in ("sb_uquotino", "sb_gquotino", "sb_pquotino"):
        if f[q] == 0:
            f[q] = C.NULLFSINO


def _rewrite_sbs(path, edit, first_ag: int) -> int:
    """Every superblock from AG ``first_ag`` on changed by ``edit`` (given
    its fields) in place, as xfs_db writes each one, its CRC renewed; the
    number rewritten."""
    fs = Filesystem(path, writable=True)
    n = 0
    try:
        sb = fs.sb
        with ImageLock(fs.dev, fs.dev.path):
            for agno in range(first_ag, sb.agcount):
                off = agno * sb.agblocks * sb.blocksize
                raw = bytearray(fs.dev.pread(off, sb.sectsize))
                f = SB.unpack(bytes(raw[:SB.size]))
                edit(f)
                _to_disk(f)
                packed = SB.pack(f)
                if packed == raw[:len(packed)]:
                    continue
                raw[:len(packed)] = packed
                V.stamp(V.SB, raw, f["sb_lsn"], blocksize=sb.blocksize)
                fs.dev.pwrite(off, bytes(raw))
                n += 1
            if n:
                fs.dev.fsync()
    finally:
        fs.close()
    return n


def set_label(path, label: bytes) -> list:
    """Write ``label`` into every superblock; the changes made."""
    path = os.fspath(path)
    changes = []

    def edit(f):
        f["sb_fname"] = label.ljust(LABEL_MAX, b"\0")
    w = Writer(path, keeps_parents=True)     # a label names no inode
    try:
        old = SB.unpack(w.dev.pread(0, SB.size))["sb_fname"].split(b"\0", 1)[0]
        if old != label:
            with w.transaction():
                def put(tx):
                    buf = tx.read_buf(0, w.sb.sectsize, V.SB, agno=0, block=0)
                    f = SB.unpack(buf.data)
                    edit(f)
                    _to_disk(f)
                    raw = SB.pack(f)
                    buf.data[:len(raw)] = raw
                w.tx.precommit.append(put)
            w.journal.sync()
            changes.append(f"label {old.decode('utf-8', 'replace')!r} -> "
                           f"{label.decode('utf-8')!r}")
    except BaseException:
        w.close()
        raise
    w.close()
    n = _rewrite_sbs(path, edit, 1)
    if n:
        changes.append(f"label written in {n} secondary superblock(s)")
    return changes


def new_uuid(f: dict, spec: str) -> bytes:
    """The UUID ``spec`` names for the superblock fields ``f``: a UUID,
    ``generate``, ``nil`` or ``restore`` (the one the metadata is stamped
    with)."""
    low = spec.lower()
    if low == "generate":
        return uuidlib.uuid4().bytes
    if low == "nil":
        return bytes(16)
    if low == "restore":
        if f["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_META_UUID:
            return f["sb_meta_uuid"]
        return f["sb_uuid"]
    try:
        return uuidlib.UUID(spec).bytes
    except ValueError:
        raise InvalidArgument(f"{spec!r}: not a UUID (nor generate, nil or restore)") \
            from None


def set_uuid(path, spec: str) -> list:
    """Give the filesystem the UUID ``spec`` names (see the module
    docstring); the changes made."""
    path = os.fspath(path)
    refuse_if_mounted(path)
    f = _read_primary(path)
    if f["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR:
        raise WriteRefused(f"{path}: the filesystem is marked as needing repair; run "
                           "fstool repair first")
    with Filesystem(path) as fs:
        clean, why = log_is_clean(fs)
    if not clean:
        raise WriteRefused(f"{path}: the log is dirty ({why}); replay it first "
                           "(fstool log replay) or mount and unmount it")
    new = new_uuid(f, spec)
    old = f["sb_uuid"]
    has_meta = bool(f["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_META_UUID)
    meta = f["sb_meta_uuid"] if has_meta else old
    changes = []
    if not has_meta and new != meta:
        changes.append("metadata UUID kept in sb_meta_uuid (incompat META_UUID set)")
    elif has_meta and new == meta:
        changes.append("UUID back to the metadata's (incompat META_UUID cleared)")

    def edit(g):
        # every superblock ends as the primary will: a run stopped between
        # the superblocks and run again finishes the secondaries the
        # primary is already ahead of
        if new != meta:
            g["sb_features_incompat"] |= C.XFS_SB_FEAT_INCOMPAT_META_UUID
            g["sb_meta_uuid"] = meta
        elif g["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_META_UUID:
            g["sb_features_incompat"] &= ~C.XFS_SB_FEAT_INCOMPAT_META_UUID
            g["sb_meta_uuid"] = bytes(16)
        g["sb_uuid"] = new
    if new != old:
        stamp(path, uuid=bytes(16))           # a log any superblock accepts
        changes.append(f"UUID {uuidlib.UUID(bytes=old)} -> {uuidlib.UUID(bytes=new)}")
    else:
        changes.clear()
    n = _rewrite_sbs(path, edit, 0)         # the primary first, then the secondaries
    if new == old and n:
        changes.append(f"UUID written in {n} secondary superblock(s)")
    if new != old or _log_uuid_nil(path):
        stamp(path, uuid=new)                 # the log with the filesystem's UUID
        changes.append("log marked clean with the new UUID")
    return changes


def _log_uuid_nil(path) -> bool:
    """Whether the log's newest record carries a nil UUID (a UUID change
    stopped before its last step)."""
    with Filesystem(path) as fs:
        ld, st = find_state(fs)
        if st.never_written or st.head_rec < 0:
            return False
        rec = L.REC_HEADER.unpack(ld.read(st.head_rec, 1))
        return rec["h_fs_uuid"] == bytes(16)
