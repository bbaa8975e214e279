"""The mounted image: every FUSE operation as a plain method.

One :class:`~fstool.ns.writer.Writer` for the mount's life; each operation
that changes the image is one transaction (``_tx``), which the journal
gathers into checkpoints (delayed logging: many small operations share
one).  ``sync`` (fsync, fdatasync, the checkpoint timer, unmount) writes
the checkpoint.  Errors carry the errno the kernel's XFS returns; the FUSE
adapter hands it back unchanged.

Group commit (``group`` > 1, which the mount sets): consecutive creates of
files, devices, fifos and sockets share one transaction, committed when
``group`` of them are in it or anything else comes (every public method
but the lookups, attribute reads, creates and closes ends the group
first).  What a checkpoint holds, and so what a crash keeps, is what it
would be without grouping; only the in-memory commit is shared.  When an
operation of an open group fails, or the group's commit does, the group is
taken back and its earlier operations done again, each in its own
transaction, with their own times: the state is what it would have been
without grouping.  Should one of them come out differently (another inode
number than the one the kernel was given), the volume stops writing
(EIO), as the kernel's XFS shuts down on a change it cannot finish.

Inode numbers are the image's.  Attributes come back as :class:`Attr`.

Names go through :class:`~fstool.ns.namespace.Namespace` (incremental
directory changes, the kernel's readdir cookies, rename, xattrs one at a
time), file data through :class:`~fstool.ns.fileio.FileIO` (the block map:
writes, truncates and reads in place, speculative preallocation given back
at the last close).  A file whose last name goes while it is open stays
allocated on the AGI unlinked list (so the kernel's log recovery or
xfs_repair frees it after a crash) until its last close.
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import stat as pystat

from ..alloc.space import resv_asks
from ..errors import FsToolError, WriteRefused
from ..format import constants as C
from ..format.structs import DINODE, SB
from ..fs.dirform import NAME_MAX
from ..fs.filesystem import Filesystem
from ..fs.inode import raw_stat
from ..fs.logstate import log_is_clean
from ..io import verify as V
from ..io.lock import ImageLock, refuse_if_mounted
from ..ns.fileio import FileIO
from ..ns.namespace import Meta, Namespace
from ..ns.writer import Writer
from .icache import InodeCache

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
XATTR_NAMESPACES = ("user.", "trusted.", "security.")
XATTR_SIZE_MAX = 65536

log = logging.getLogger("fstool.mount")

# read-ahead of sequential readers: the image's pages of the next WINDOW
# bytes of the file asked for (posix_fadvise WILLNEED) while the reader
# is still on the current ones; the window doubles from the first to the
# last figure as the reader keeps on, and starts again at any jump
READAHEAD_FIRST = 1 << 20
READAHEAD_MAX = 16 << 20
# a reader is sequential from a read that starts where its last ended; once
# it is, a read starting this close to there still is (the kernel's own
# read-ahead sends several reads at once, the mount's threads may answer
# them out of order)
READAHEAD_SLACK = 1 << 20

# a write into a hole inside a file fills the whole aligned run of this
# many bytes around it that is a hole (zeros around the data): random
# writes into a new sparse file then take one transaction per run instead
# of one per block, the writes after the first into a run being overwrites
# in place (FileIO.fill_blocks; docs/performance.md)
HOLE_FILL_BYTES = 64 << 10

# the metadata buffer cache of a mount (bytes) and the decoded attributes
# it keeps (InodeCache.max_attrs).  Both fill up during a long run of
# creates and stay full (the server's RSS after 250,000 creates: 212 MiB;
# bench/bench_mount_rss.py); 16 MiB and 8,192 kept it at 84 MiB, but made
# the server's CPU per 4 KiB random read or 70/30 I/O 1.2-1.6x in a
# side-by-side run (docs/performance.md), so they stay as they were
CACHE_BYTES = 128 << 20
ATTRS_CACHED = 65536

# the most data fork records a request loop is given a copy of (fast_map)
FAST_MAP_RECORDS = 1 << 16

# free blocks per create of a group below which creates are neither grouped
# nor answered before their names are added (a create takes far fewer: its
# share of an inode chunk, a few directory blocks and btree splits)
ROOM_BLOCKS = 32

# names remembered missing at most (Volume.find)
ABSENT_MAX = 64

# delayed allocation (Volume.write): the writes of a new file from its
# start on are kept in memory, up to DELAY_FILE bytes a file and
# DELAY_TOTAL in all, and put in the image (its blocks allocated once, the
# exact number) with the next change of anything else, checkpoint or sync,
# as the kernel's XFS keeps a new file's pages until writeback: `tar x`
# and cp then allocate once per file, not once per write with a hold past
# the end given back at close (docs/performance.md)
DELAY_FILE = 1 << 20
DELAY_TOTAL = 64 << 20

# the xattr a write, truncate or chown takes away (file capabilities)
SECURITY_CAPABILITY = b"security.capability"

# the largest directory (bytes) whose names a request loop is given to keep
# (Volume.names): about 100,000 names
NAMES_DIR_BYTES = 4 << 20

_FORKOFF = DINODE.offset("di_forkoff")
_MODE = DINODE.offset("di_mode")


def caller_groups(pid: int):
    """The supplementary groups of process ``pid`` (/proc/<pid>/status,
    its Groups: line), which FUSE requests do not carry; None where they
    cannot be read (the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Groups:"):
                    return frozenset(int(g) for g in line[7:].split())
    except (OSError, ValueError):
        pass
    return None


def in_group(gid: int, pid: int | None, group: int) -> bool:
    """Whether a caller of group ``gid`` (process ``pid``, None: unknown)
    is in ``group``: its own group, or one of its supplementary groups."""
    if gid == group:
        return True
    groups = caller_groups(pid) if pid is not None else None
    return groups is not None and group in groups


def oserror(code: int, what: str = "") -> OSError:
    return OSError(code, os.strerror(code) + (f": {what}" if what else ""))


class Attr:
    """What ``stat`` shows for an inode."""
    __slots__ = ("ino", "mode", "nlink", "uid", "gid", "rdev", "size", "blocks", "blksize",
                 "atime_ns", "mtime_ns", "ctime_ns", "gen")

    def __init__(self, st, gen: int = 0):
        self.ino = st.st_ino
        self.mode = st.st_mode
        self.nlink = st.st_nlink
        self.uid = st.st_uid
        self.gid = st.st_gid
        self.rdev = st.st_rdev
        self.size = st.st_size
        self.blocks = st.st_blocks
        self.blksize = st.st_blksize
        self.atime_ns = st.st_atime_ns
        self.mtime_ns = st.st_mtime_ns
        self.ctime_ns = st.st_ctime_ns
        self.gen = gen

    def copy(self) -> "Attr":
        a = Attr.__new__(Attr)
        for k in Attr.__slots__:
            setattr(a, k, getattr(self, k))
        return a


class Handle:
    __slots__ = ("ino", "flags", "listing", "next", "ahead", "window")

    def __init__(self, ino: int, flags: int = 0):
        self.ino = ino
        self.flags = flags
        self.listing = None
        self.next = 0                   # where the last read ended
        self.ahead = 0                  # where the read-ahead asked for ends
        self.window = 0                 # its size (0: the reader is not sequential)


class Volume:
    """An image mounted: see the module docstring."""

    def __init__(self, image, *, readonly: bool = False, timestamp_ns: int | None = None,
                 cache_bytes: int = CACHE_BYTES, discard: bool = False):
        self.image = os.fspath(image)
        self.readonly = readonly
        self._lock = None
        if readonly:
            refuse_if_mounted(self.image)
            self.w = None
            self.fs = Filesystem(self.image, cache_bytes=cache_bytes)
            try:
                self._lock = ImageLock(self.fs.dev, self.image)
                self._lock.__enter__()
                clean, why = log_is_clean(self.fs)
                if not clean:
                    raise WriteRefused(f"{self.image}: the journal is dirty ({why}); replay "
                                       "it first (fstool log replay, or a kernel mount)")
            except BaseException:
                self.fs.close()
                raise
            self.ns = None
        else:
            # names go through the namespace layer, which keeps parent
            # pointers with them
            self.w = Writer(self.image, timestamp_ns=timestamp_ns, cache_bytes=cache_bytes,
                            discard=discard, keeps_parents=True)
            self.fs = self.w.fs
            self.ns = Namespace(self.w)
            self.ns.is_open = self._is_open
            self.fileio = FileIO(self.w)
            self.fileio.fill_blocks = max(1, HOLE_FILL_BYTES >> self.w.sb.blocklog)
        self._Namespace = Namespace
        sb = self.fs.sb
        self.sb = sb
        self.rootino = sb.rootino
        self.icache = InodeCache(ATTRS_CACHED)
        self.handles: dict[int, Handle] = {}
        self.next_fh = 1
        self.opens: dict[int, int] = {}
        self.closed = False
        self.dirty_since_sync = False
        self.changes = 0                # operations ended (committed or aborted)
        # (parent, name) of the negative finds since the count of operations
        # was _absent_at: still missing, as only creates of other names have
        # ended since (the kernel's lookups and creates of several processes
        # interleave: the create of a name need not follow its lookup)
        self._absent: set = set()
        self._absent_at = 0
        self.group = 1                  # operations per transaction at most (group commit)
        self._grouped: list = []        # (make, now, parent, ino) of the open group's creates
        self._in_op = False             # an operation's transaction is running
        self._redoing = False           # a group's creates done again (_redo)
        self._resv = None               # the per-AG reservations' blocks (_reserved)
        self.failed = None              # why the volume stopped writing
        self.on_stop = None             # called once writes stop (a loop's fast path ends)
        self._group_room = False        # free space sure to last the open group
        # ino -> {field: value} of inode core changes not yet logged: the
        # times of overwrites and of delayed writes, the mode, owner and
        # times of setattrs that change nothing else (see _settle)
        self._core: dict[int, dict] = {}
        # ino -> bytearray: a new file's data from offset 0, not yet in the
        # image (delayed allocation, see write); the blocks it will take are
        # counted as used (free_blocks, statfs) from the write on
        self._delayed: dict[int, bytearray] = {}
        self._delayed_bytes = 0
        self._delayed_blocks = 0
        # a write or truncate took set-user-ID or set-group-ID away (what
        # the kernel caches of the mode is then stale: the request loop
        # tells it, and clears this)
        self.privileges_dropped = False

    # -- lifetime --------------------------------------------------------------------
    def close(self) -> None:
        """Close what is still open, write the last checkpoint and the
        log's unmount record, release the image."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.w is not None:
                self.end_group()
                try:
                    self._settle()
                except Exception as e:  # noqa: BLE001 - the rest is still written
                    # what cannot be put in the image is lost, as the
                    # kernel loses delayed pages it cannot write back; all
                    # else is still checkpointed and the log closed
                    log.error("the data of %d files and %d inodes' changes kept in "
                              "memory could not be written (%s: %s); dropped",
                              len(self._delayed), len(self._core), type(e).__name__, e)
                    self._delayed.clear()
                    self._core.clear()
                    self._delayed_bytes = self._delayed_blocks = 0
                # files still open (the kernel closes them all before it
                # lets the mount go, unless the process is told to stop)
                for ino in list(self.opens):
                    self.opens.pop(ino)
                    self._last_close(ino)
                self.w.close()
            else:
                self.fs.close()
        finally:
            if self._lock is not None:
                try:
                    self._lock.__exit__(None, None, None)
                except OSError:
                    pass

    def sync(self) -> None:
        """Everything done so far is on disk: a checkpoint written (fsync,
        fdatasync, the timer, unmount)."""
        if self.w is None:
            return
        self.end_group()
        self._settle()
        if self.dirty_since_sync:
            self.w.sync()
            self.dirty_since_sync = False

    def _is_open(self, ino: int) -> bool:
        return bool(self.opens.get(ino))

    # -- transactions ------------------------------------------------------------------
    def _writable(self) -> None:
        if self.w is None:
            raise oserror(errno.EROFS)
        if self.failed is not None:
            raise oserror(errno.EIO, self.failed)

    def _tx(self, group: bool = False):
        return _Op(self, group)

    def end_group(self) -> None:
        """Commit the open group of creates, if any."""
        redo = self._grouped
        if not redo:
            return
        self._grouped = []
        try:
            self._commit()
        except Exception as e:          # noqa: BLE001 - every failure is answered the same
            log.warning("a group of %d creates did not commit (%s: %s); each is done "
                        "again on its own", len(redo), type(e).__name__, e)
            self._redo(redo)

    def _commit(self) -> None:
        """Commit the open transaction (on an error: aborted, raised)."""
        w = self.w
        ns = self.ns
        try:
            changed = [ino for ino, st in ns.dirs.items() if st.changed]
            ns.finish()
            w.commit()
        except BaseException:
            self._abort()
            raise
        ns.committed()
        ns.mtime_set.clear()
        self.dirty_since_sync = True
        for ino in changed:
            self.icache.invalidate(ino)

    def _abort(self) -> None:
        """Undo the open transaction: the image, the caches and the
        namespace state as they were before it."""
        if self.w.tx is not None:
            self.w.abort()
        self.ns = self._Namespace(self.w)
        self.ns.is_open = self._is_open
        self.icache.clear_attrs()

    def _settle(self) -> None:
        """What was kept in memory put in the image, in one transaction:
        the data of delayed writes (each file's blocks allocated at once,
        exactly as many as it needs, nothing held past its end), then the
        inode core changes not yet logged (the times of overwrites and
        delayed writes, the setattrs kept by :meth:`setattr`).  Before the
        next checkpoint and before any other change, as the kernel's XFS
        writes a file's delayed pages back and logs an inode's changes in
        the next checkpoint with all else that changed.  On an error
        nothing is dropped (the next change or sync tries again)."""
        core = self._core
        delayed = self._delayed
        if not core and not delayed:
            return
        if self._grouped:
            self.end_group()
            if not core and not delayed:
                return
        w = self.w
        w.begin()
        try:
            if delayed:
                self.fileio.write_new(list(delayed.items()))
            ns = self.ns
            touch = self.fileio.touch
            for ino, f in core.items():
                if len(f) == 2 and "mtime_ns" in f and f["mtime_ns"] == f.get("ctime_ns") \
                        and self._regular(ino):
                    # the times of writes alone (a utimes of a directory,
                    # symlink or device with mtime = ctime looks the same:
                    # those go through setattr below)
                    touch(ino, f["mtime_ns"])
                    continue
                ns.now = f["ctime_ns"]
                ns.setattr(ino, mode=f.get("mode"), uid=f.get("uid"), gid=f.get("gid"),
                           atime_ns=f.get("atime_ns"), mtime_ns=f.get("mtime_ns"))
                ns.mtime_set.pop(ino, None)
            self._commit()
        except BaseException:
            if w.tx is not None:
                self._abort()
            self.icache.clear_attrs()
            raise
        for ino in delayed:
            self.icache.invalidate(ino)
        delayed.clear()
        core.clear()
        self._delayed_bytes = self._delayed_blocks = 0
        self.dirty_since_sync = True

    def _core_set(self, ino: int, **fields) -> None:
        """Inode core ``fields`` of ``ino`` changed in memory, logged by
        :meth:`_settle`; what stat shows follows at once."""
        f = self._core.get(ino)
        if f is None:
            self._core[ino] = fields
        else:
            f.update(fields)
        self.dirty_since_sync = True
        a = self.icache.get(ino)
        if a is not None:
            self.icache.put(ino, self._kept(ino, a.copy()))

    def _kept(self, ino: int, a: Attr) -> Attr:
        """``a`` (an inode as the image has it) with what is kept in memory
        for it: delayed data (its size, and its blocks as st_blocks, as the
        kernel counts delayed blocks), inode core changes not yet logged."""
        f = self._core.get(ino)
        if f is not None:
            mode = f.get("mode")
            if mode is not None:
                a.mode = (a.mode & C.S_IFMT) | mode
            for k in ("uid", "gid", "atime_ns", "mtime_ns", "ctime_ns"):
                v = f.get(k)
                if v is not None:
                    setattr(a, k, v)
        data = self._delayed.get(ino)
        if data is not None:
            a.size = len(data)
            a.blocks = self._blocks_of(len(data)) << (self.sb.blocklog - 9)
        return a

    def _forget_kept(self, ino: int):
        """What is kept in memory for ``ino`` (its delayed data, its inode
        core changes), taken out before a change that frees the inode, so
        that the change's :meth:`_settle` allocates and writes nothing for
        it: the kernel's XFS drops a freed file's delayed pages unwritten.
        What :meth:`_keep_again` puts back if the change fails."""
        data = self._delayed.pop(ino, None)
        if data is not None:
            self._delayed_bytes -= len(data)
            self._delayed_blocks -= self._blocks_of(len(data))
        return data, self._core.pop(ino, None)

    def _keep_again(self, ino: int, kept) -> None:
        data, core = kept
        if data is not None:
            self._delayed[ino] = data
            self._delayed_bytes += len(data)
            self._delayed_blocks += self._blocks_of(len(data))
        if core is not None:
            self._core[ino] = core
        self.icache.invalidate(ino)

    def _freed_by_unlink(self, ino: int) -> bool:
        """Whether removing one name of ``ino`` frees it: its last name, and
        not open."""
        if self.opens.get(ino):
            return False
        try:
            return self.getattr(ino).nlink == 1
        except OSError:
            return False

    def _truncate_kept(self, ino: int, size: int, fields: dict) -> bool:
        """A truncate of a file whose data is all kept in memory to no more
        than it holds: made in memory (the kept data cut, an emptied file
        left with nothing kept), no block allocated or written for what is
        cut; with ``fields``, the other inode core changes of the setattr.
        True when made so."""
        data = self._delayed.get(ino)
        if data is None or size > len(data):
            return False
        self._delayed_bytes -= len(data) - size
        self._delayed_blocks -= self._blocks_of(len(data)) - self._blocks_of(size)
        if size:
            del data[size:]
        else:
            del self._delayed[ino]
        now = self.w.now_ns()
        fields.setdefault("mtime_ns", now)
        fields["ctime_ns"] = now
        self.icache.invalidate(ino)
        self._core_set(ino, **fields)
        return True

    def _regular(self, ino: int) -> bool:
        """Whether ``ino`` is a regular file, as the open transaction has it."""
        raw = self.w.inodes.raw_inode(ino)
        return pystat.S_ISREG(int.from_bytes(raw[_MODE:_MODE + 2], "big"))

    def _forkoff(self, ino: int) -> int:
        """di_forkoff of ``ino`` as the open transaction has it (nonzero:
        the inode has xattrs), without decoding the inode."""
        return self.w.inodes.raw_inode(ino)[_FORKOFF]

    def _blocks_of(self, nbytes: int) -> int:
        return (nbytes + self.sb.blocksize - 1) >> self.sb.blocklog

    def _redo(self, redo: list) -> None:
        """The creates of a group taken back, done again one transaction
        each, with their own times; any that fails or names another inode
        than before stops the volume's writes."""
        # the kept data and inode changes wait until the creates are made
        # again: some of them are of those very inodes
        self._redoing = True
        try:
            self._redo_each(redo)
        finally:
            self._redoing = False

    def _redo_each(self, redo: list) -> None:
        for make, now, parent, ino in redo:
            try:
                with _Op(self) as ns:
                    ns.now = now
                    again = make(ns)
                    self._touch(parent)
            except Exception as e:      # noqa: BLE001 - any failure here stops writes
                again = f"{type(e).__name__}: {e}"
            if again != ino:
                self._stop_writes(f"a create of inode {ino} in directory {parent} could not "
                                  f"be done again ({again})")
                raise oserror(errno.EIO, self.failed)

    def _stop_writes(self, why: str) -> None:
        """What the kernel was told no longer holds: no more writes (EIO),
        as the kernel's XFS shuts down on a change it cannot finish."""
        if self.failed is None:
            self.failed = why + "; writes stopped"
            log.error("%s", self.failed)
            if self.on_stop is not None:
                self.on_stop()

    # -- attributes ------------------------------------------------------------------------
    def getattr(self, ino: int) -> Attr:
        a = self.icache.get(ino)
        if a is not None:
            return a
        ns = self.ns
        if ns is not None and ino in ns.unsaved:
            # a directory of the open group of creates: its inode written first
            ns.save_dir(ino)
        try:
            node = self.fs.inode(ino)
        except FsToolError:
            raise oserror(errno.ENOENT, f"inode {ino}") from None
        if node.mode == 0 or (node.nlink == 0 and not node.is_dir
                              and not self.opens.get(ino)):
            raise oserror(errno.ENOENT, f"inode {ino}")
        a = Attr(node.stat(), node.gen)
        if ino in self._core or ino in self._delayed:
            a = self._kept(ino, a)
        self.icache.put(ino, a)
        return a

    def access(self, ino: int, mask: int, uid: int, gid: int) -> None:
        """access(2), faccessat(2) and chdir, which the kernel asks about
        only when it does not check permissions itself (a root mount
        without allow_other, where fstool leaves default_permissions off):
        the kernel's rules from the mode and owner.  Root reads and writes
        anything and searches any directory, and executes a file with an
        execute bit; anyone else by the owner, group or other bits (the
        caller's primary group; ``mask`` is R_OK|W_OK|X_OK, 0 for F_OK)."""
        a = self.getattr(ino)
        mask &= 7
        if not mask:
            return
        mode = a.mode
        if uid == 0:
            if mask & 1 and not pystat.S_ISDIR(mode) and not mode & 0o111:
                raise oserror(errno.EACCES)
            return
        if uid == a.uid:
            bits = mode >> 6
        elif gid == a.gid:
            bits = mode >> 3
        else:
            bits = mode
        if mask & ~bits & 7:
            raise oserror(errno.EACCES)

    def _is_dir(self, ino: int) -> bool:
        return pystat.S_ISDIR(self.getattr(ino).mode)

    def setattr(self, ino: int, *, mode=None, uid=None, gid=None, size=None, atime_ns=None,
                mtime_ns=None, kill_gid: int | None = None, caller=None) -> Attr:
        """``kill_gid``: the group of a truncating caller that may not keep
        set-user-ID and set-group-ID; ``caller``: (uid, gid, pid) of the
        request, where known (see :meth:`_privileges_lost`).  A change of
        only the inode core (mode, owner, times) takes no transaction: it
        is kept in memory, shown at once, and logged with the next change
        or checkpoint (:meth:`_settle`, before that change: the log holds
        the changes in the order they were made), as the kernel's XFS logs
        an inode changed several times once.  A directory's too: _settle
        applies it with the same namespace call a transaction of its own
        would make, and every change that reads the directory (a create's
        inherited group and set-group-ID, a lookup's search permission)
        sees the kept mode and owner through :meth:`getattr` or comes after
        the settle; the open group of creates is committed first, so that
        its creates stay before the change.  A truncate of a file whose
        data is all kept is made in memory (:meth:`_truncate_kept`)."""
        self._writable()
        a = self.getattr(ino)
        if size is not None:
            if pystat.S_ISDIR(a.mode):
                raise oserror(errno.EISDIR)
            if not pystat.S_ISREG(a.mode):
                raise oserror(errno.EINVAL)
        caps = False
        if size is not None or uid is not None or gid is not None:
            kept, caps = self._privileges_lost(ino, a, kill_gid if size is not None else None,
                                               uid is not None or gid is not None, caller)
            if mode is None and kept is not None:
                mode = kept
                self.privileges_dropped = True
        if not caps:
            fields = {k: v for k, v in (("mode", mode), ("uid", uid), ("gid", gid),
                                        ("atime_ns", atime_ns), ("mtime_ns", mtime_ns))
                      if v is not None}
            if size is None:
                if self._grouped and pystat.S_ISDIR(a.mode):
                    # the open group's creates (in this directory, maybe)
                    # logged first: _settle applies the kept change after
                    # them, and a create's times must not come after a
                    # utimes made later
                    self.end_group()
                fields["ctime_ns"] = self.w.now_ns()
                self._core_set(ino, **fields)
                return self.getattr(ino)
            if self._truncate_kept(ino, size, fields):
                return self.getattr(ino)
        with self._tx() as ns:
            if caps:
                ns.remove_xattr(ino, SECURITY_CAPABILITY)
            if size is not None:
                self.fileio.truncate(ino, size, touch=True)
            if any(v is not None for v in (mode, uid, gid, atime_ns, mtime_ns)):
                ns.setattr(ino, mode=mode, uid=uid, gid=gid, atime_ns=atime_ns,
                           mtime_ns=mtime_ns)
                ns.mtime_set.pop(ino, None)
            self._touch(ino)
        return self.getattr(ino)

    def _privileges_lost(self, ino: int, a: Attr, kill_gid: int | None, chown: bool,
                         caller=None):
        """What a write or truncate (``kill_gid``: the group of a caller
        that may not keep set-user-ID and set-group-ID, as the kernel says
        with FUSE_HANDLE_KILLPRIV_V2; None: one that may) or a chown takes
        away, as the kernel's XFS does (setattr_should_drop_suidgid):
        set-user-ID, and set-group-ID where the group may execute or where
        the caller is not in the file's group (for a chown: a caller but
        root, ``caller`` = (uid, gid, pid) where known), of any file but a
        directory for a chown, of a regular file for a write or truncate; a
        regular file's capabilities (security.capability) always.  The
        caller's groups are its own group and, FUSE requests carrying no
        others, those /proc/<pid>/status lists for its process (where that
        cannot be read: its own group only, so set-group-ID goes where the
        kernel might keep it).  (The new mode, None where it stays; whether
        security.capability goes.)"""
        if pystat.S_ISDIR(a.mode):
            return None, False
        reg = pystat.S_ISREG(a.mode)
        mode = new = a.mode & 0o7777
        kill = kill_gid is not None and reg
        pid = caller[2] if caller is not None else None
        if kill or chown:
            new &= ~pystat.S_ISUID
            if new & pystat.S_ISGID and (
                    new & pystat.S_IXGRP or
                    kill and not in_group(kill_gid, pid, a.gid) or
                    chown and caller is not None and caller[0] != 0 and
                    not in_group(caller[1], pid, a.gid)):
                new &= ~pystat.S_ISGID
        caps = False
        if reg and self.ns is not None and self._forkoff(ino):
            try:
                self.ns.get_xattr(ino, SECURITY_CAPABILITY)
                caps = True
            except OSError:
                pass
        return (new if new != mode else None), caps

    def _modified(self, ns, ino: int, caller) -> None:
        """What a change of a regular file's data by ``caller`` ((uid, gid,
        pid) or None: unknown) takes away, in the open transaction, as the
        kernel's file_modified does for fallocate and copy_file_range: its
        capabilities, and for a caller but root set-user-ID and set-group-ID
        (:meth:`_privileges_lost`)."""
        a = self.getattr(ino)
        kill_gid = caller[1] if caller is not None and caller[0] != 0 else None
        mode, caps = self._privileges_lost(ino, a, kill_gid, False, caller)
        if caps:
            ns.remove_xattr(ino, SECURITY_CAPABILITY)
        if mode is not None:
            ns.setattr(ino, mode=mode)
            self.privileges_dropped = True

    # -- names ----------------------------------------------------------------------------
    def _check_name(self, name: bytes) -> None:
        if len(name) > NAME_MAX:
            raise oserror(errno.ENAMETOOLONG)
        if not name or b"/" in name or b"\0" in name:
            raise oserror(errno.EINVAL)

    def _dir_node(self, ino: int) -> None:
        ns = self.ns
        if ns is not None and ino in ns.unsaved:
            return                      # a directory that is gaining names
        if not pystat.S_ISDIR(self.getattr(ino).mode):
            raise oserror(errno.ENOTDIR)

    def child(self, parent: int, name: bytes):
        """(ino, ftype) of ``name`` in directory ``parent``, or None."""
        if self.ns is not None:
            return self.ns.lookup_child(parent, name)
        fs = self.fs
        ino = fs.dir_lookup(fs.inode(parent), name)
        return None if ino is None else (ino, 0)

    def parent_of(self, ino: int) -> int:
        if self.ns is not None:
            return self.ns.lookup_child(ino, b"..")[0]
        return self.fs.parent_of(self.fs.inode(ino))

    def lookup(self, parent: int, name: bytes) -> Attr:
        """The inode ``name`` names in ``parent`` (one more kernel reference)."""
        a = self.find(parent, name)
        if a is None:
            raise oserror(errno.ENOENT)
        return a

    def find(self, parent: int, name: bytes) -> Attr | None:
        """``lookup``, with None for a name that is not there (the common
        negative lookup before every create costs no exception)."""
        self._dir_node(parent)
        if name == b".":
            ino = parent
        elif name == b"..":
            ino = self.parent_of(parent)
        else:
            if len(name) > NAME_MAX:
                raise oserror(errno.ENAMETOOLONG)
            ent = self.child(parent, name)
            if ent is None:
                absent = self._absent
                if self._absent_at != self.changes or len(absent) >= ABSENT_MAX:
                    absent.clear()
                    self._absent_at = self.changes
                absent.add((parent, name))
                return None
            ino = ent[0]
        a = self.getattr(ino)
        self.icache.ref(ino)
        return a

    def names(self, ino: int):
        """Every name of directory ``ino`` but "." and "..", for a request
        loop that keeps them to answer lookups of missing names itself; None
        for a directory larger than NAMES_DIR_BYTES (listing it is not worth
        it).  Names this volume adds later reach such a loop through the
        requests that add them."""
        self._dir_node(ino)
        ns = self.ns
        # (a directory gaining names in the open group of creates is not
        # asked for its size: that would write its inode early)
        if (ns is None or ino not in ns.unsaved) and \
                self.getattr(ino).size > NAMES_DIR_BYTES:
            return None
        if ns is None:
            return [n for n, _i in self.entries(ino)[2:]]
        return ns.list_names(ino)

    def forget(self, ino: int, n: int) -> None:
        self.icache.forget(ino, n)

    def entries(self, ino: int) -> list:
        """[(name, ino)] of a directory, "." and ".." first."""
        self._dir_node(ino)
        if self.ns is not None:
            return [(name, cino) for name, cino, _ft, _c in self.ns.readdir(ino)]
        node = self.fs.inode(ino)
        out = [(b".", ino), (b"..", self.fs.parent_of(node))]
        out.extend((e.name, e.ino) for e in self.fs.listdir(node))
        return out

    # -- making names ------------------------------------------------------------------------
    def _meta(self, parent: int, perm: int, uid: int, gid: int, is_dir: bool):
        ns = self.ns
        # mode and group (a directory gaining names in the open group of
        # creates keeps both; its inode is written at the group's end)
        pa = ns.unsaved[parent][0].node if parent in ns.unsaved else self.getattr(parent)
        if pa.mode & pystat.S_ISGID:
            # BSD group semantics of a setgid directory, as the kernel applies them
            gid = pa.gid
            if is_dir:
                perm |= pystat.S_ISGID
        now = self.ns.now
        return Meta(perm=perm, uid=uid, gid=gid, atime_ns=now, mtime_ns=now, ctime_ns=now)

    def _new(self, parent: int, name: bytes, make, group: bool = False, halves=None,
             later=None, absent: bool = False) -> Attr:
        """``make(ns)`` -> the new inode, in a transaction of its own or,
        with ``group``, in the open group of creates (``make`` must then
        give the same inode when done again from the same state).

        With ``halves`` = (first, second) and ``later``, a list: when the
        group has room (:meth:`_room`), only ``first(ns)`` -> inode runs
        now, and the rest of the operation, ``second(ns, inode)``, is
        appended to ``later`` for the caller to run as soon as it has
        answered, before anything else (the mount's native loop does: the
        kernel's caller goes on meanwhile).  Should that part fail, the
        answer given is wrong and the volume stops writing.

        ``absent``: the caller knows ``name`` is not in ``parent`` (the
        native loop's kept names): the namespace does not look again."""
        self._writable()
        self._check_name(name)
        self._dir_node(parent)
        # near a full filesystem, one transaction each: creates done again
        # one by one must not find less room than they had in the group
        fresh = group                   # a file, fifo or socket: see _fresh_attr
        group = group and self.group > 1 and self._room()
        if not group:
            later = None
        before = self.changes
        op = self._tx(group)
        ns = op.__enter__()
        try:
            # the namespace refuses a name in use (EEXIST) before it
            # allocates anything; the kernel's lookup of the name just
            # before found it missing, unless something changed since
            if absent or (self._absent_at == self.changes and
                          (parent, name) in self._absent):
                ns.known_absent = (parent, name)
            try:
                ino = make(ns) if later is None else halves[0](ns)
            finally:
                ns.known_absent = None
            if later is None:
                self._touch(parent)
                op.redo = (make, ns.now, parent, ino)
        except BaseException as e:
            op.__exit__(type(e), e, e.__traceback__)
            raise
        if later is None:
            op.__exit__(None, None, None)
            self._made(parent, name, before)
        else:
            later.append(lambda: self._second_half(op, ns, make, halves[1], parent, name, ino,
                                                   before))
        a = self._fresh_attr(ino) if fresh else None
        if a is None:
            a = self.getattr(ino)
        self.icache.ref(ino)
        return a

    def _fresh_attr(self, ino: int):
        """The Attr of a file, fifo or socket just made, from the inode as
        this operation wrote it (put_inode; nothing changes a new inode but
        through it), without decoding it from its cluster; else None."""
        raw = self.w.inodes.written.get(ino)
        if raw is None:
            return None
        mode = (raw[2] << 8) | raw[3]
        if pystat.S_ISCHR(mode) or pystat.S_ISBLK(mode) or pystat.S_ISDIR(mode):
            return None
        a = Attr(*raw_stat(self.fs, ino, raw))
        self.icache.put(ino, a)
        return a

    def _made(self, parent: int, name: bytes, before: int) -> None:
        """``name`` made in ``parent`` by the one operation that ended since
        the count was ``before``: the other names found missing still are."""
        if self._absent_at == before and self.changes == before + 1:
            self._absent.discard((parent, name))
            self._absent_at = self.changes

    def _second_half(self, op, ns, make, second, parent: int, name: bytes, ino: int,
                     before: int) -> None:
        try:
            second(ns, ino)
            self._touch(parent)
            op.redo = (make, ns.now, parent, ino)
        except BaseException as e:
            op.__exit__(type(e), e, e.__traceback__)
            self._stop_writes(f"inode {ino}, already created for the kernel, could not be "
                              f"named in directory {parent} ({type(e).__name__}: {e})")
            raise
        op.__exit__(None, None, None)
        self._made(parent, name, before)

    def _room(self) -> bool:
        """Whether free space leaves no doubt that the open group of creates
        can finish, and each of them again on its own (inode chunks,
        directory blocks, btree splits, free list refills): judged from the
        committed counters as a group starts.  Directory blocks
        larger than a filesystem block are taken whole, so free space in
        pieces smaller than a few of them is not enough."""
        if not self._grouped:
            room = self.free_blocks() >= ROOM_BLOCKS * self.group
            fsbs = self.sb.dirblkfsbs
            if room and fsbs > 1:
                fs = self.fs
                room = max(fs.agf(agno)["agf_longest"]
                           for agno in range(self.sb.agcount)) >= 4 * fsbs
            self._group_room = room
        return self._group_room

    def mkdir(self, parent: int, name: bytes, mode: int, uid: int = 0, gid: int = 0) -> Attr:
        return self._new(parent, name, lambda ns: ns.mkdir(
            parent, name, self._meta(parent, mode & 0o7777, uid, gid, True)))

    def create(self, parent: int, name: bytes, mode: int, flags: int = 0, uid: int = 0,
               gid: int = 0, later=None, absent: bool = False):
        """A new empty regular file, opened: (handle, Attr).  ``later`` and
        ``absent``: see :meth:`_new` (the name is added after the answer)."""
        def meta():
            return self._meta(parent, mode & 0o7777, uid, gid, False)

        a = self._new(parent, name, lambda ns: ns.create_file(parent, name, meta()), True,
                      (lambda ns: ns.new_empty_file(parent, name, meta()),
                       lambda ns, ino: ns.name_new_file(parent, name, ino)), later, absent)
        # a file just made is not truncated by O_TRUNC (nor are its times
        # changed), as the kernel's open leaves a file it has created
        return self.open(a.ino, flags & ~os.O_TRUNC), a

    def mknod(self, parent: int, name: bytes, mode: int, rdev: int = 0, uid: int = 0,
              gid: int = 0) -> Attr:
        kind = mode & C.S_IFMT
        if kind == C.S_IFREG or kind == 0:
            return self._new(parent, name, lambda ns: ns.create_file(
                parent, name, self._meta(parent, mode & 0o7777, uid, gid, False)), True)
        if kind not in (C.S_IFCHR, C.S_IFBLK, C.S_IFIFO, C.S_IFSOCK):
            raise oserror(errno.EINVAL)
        dev = (os.major(rdev), os.minor(rdev))
        return self._new(parent, name, lambda ns: ns.mknod(
            parent, name, kind, self._meta(parent, mode & 0o7777, uid, gid, False), rdev=dev),
            True)

    def symlink(self, parent: int, name: bytes, target: bytes, uid: int = 0,
                gid: int = 0) -> Attr:
        if len(target) >= C.XFS_SYMLINK_MAXLEN:
            raise oserror(errno.ENAMETOOLONG)
        if not target:
            raise oserror(errno.ENOENT)
        return self._new(parent, name, lambda ns: ns.symlink(
            parent, name, target, self._meta(parent, 0o777, uid, gid, False)))

    def readlink(self, ino: int) -> bytes:
        if not pystat.S_ISLNK(self.getattr(ino).mode):
            raise oserror(errno.EINVAL)
        return bytes(self.fs.readlink(ino))

    def link(self, ino: int, parent: int, name: bytes) -> Attr:
        self._writable()
        self._check_name(name)
        self._dir_node(parent)
        a = self.getattr(ino)
        if pystat.S_ISDIR(a.mode):
            raise oserror(errno.EPERM)
        with self._tx() as ns:
            if ns.lookup_child(parent, name) is not None:
                raise oserror(errno.EEXIST)
            ns.link(parent, name, ino)
            self._touch(parent, ino)
        a = self.getattr(ino)
        self.icache.ref(ino)
        return a

    # -- removing names ------------------------------------------------------------------------
    def unlink(self, parent: int, name: bytes) -> None:
        """Remove a name; an open inode losing its last name stays on the
        AGI unlinked list until its last close."""
        self._writable()
        self._dir_node(parent)
        # a file kept in memory that this frees: its kept data dropped, not
        # written first (_forget_kept)
        ent = self.child(parent, name)
        kept = None
        if ent is not None and (ent[0] in self._delayed or ent[0] in self._core) and \
                self._freed_by_unlink(ent[0]):
            freed = ent[0]
            kept = self._forget_kept(freed)
        try:
            with self._tx() as ns:
                ent = ns.lookup_child(parent, name)
                if ent is None:
                    raise oserror(errno.ENOENT)
                ino = ent[0]
                if pystat.S_ISDIR(self.getattr(ino).mode):
                    raise oserror(errno.EISDIR)
                ns.unlink(parent, name)
                self._touch(parent, ino)
        except BaseException:
            if kept is not None:
                self._keep_again(freed, kept)
            raise

    def rmdir(self, parent: int, name: bytes) -> None:
        self._writable()
        self._dir_node(parent)
        if name == b".":
            raise oserror(errno.EINVAL)
        if name == b"..":
            raise oserror(errno.ENOTEMPTY)
        with self._tx() as ns:
            ent = ns.lookup_child(parent, name)
            if ent is None:
                raise oserror(errno.ENOENT)
            ino = ent[0]
            if not self._is_dir(ino):
                raise oserror(errno.ENOTDIR)
            ns.unlink(parent, name, rmdir=True)
            self._touch(parent, ino)

    def rename(self, sparent: int, sname: bytes, dparent: int, dname: bytes,
               flags: int = 0) -> None:
        self._writable()
        self._check_name(dname)
        self._dir_node(sparent)
        self._dir_node(dparent)
        with self._tx() as ns:
            src = ns.lookup_child(sparent, sname)
            dst = ns.lookup_child(dparent, dname)
            ns.rename(sparent, sname, dparent, dname, flags)
            self._touch(sparent, dparent, *(e[0] for e in (src, dst) if e is not None))

    # -- open files --------------------------------------------------------------------------------
    def open(self, ino: int, flags: int = 0, kill_gid: int | None = None) -> int:
        """``kill_gid``: the group of a caller of O_TRUNC that may not keep
        set-user-ID and set-group-ID (:meth:`setattr`)."""
        a = self.getattr(ino)
        if flags & (os.O_WRONLY | os.O_RDWR) and self.w is None:
            raise oserror(errno.EROFS)
        if pystat.S_ISDIR(a.mode) and flags & (os.O_WRONLY | os.O_RDWR):
            raise oserror(errno.EISDIR)
        if flags & os.O_TRUNC and flags & (os.O_WRONLY | os.O_RDWR) and \
                pystat.S_ISREG(a.mode):
            # libfuse asks for atomic O_TRUNC: the truncation is the open's
            self.setattr(ino, size=0, kill_gid=kill_gid)
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = Handle(ino, flags)
        self.opens[ino] = self.opens.get(ino, 0) + 1
        return fh

    def opendir(self, ino: int) -> int:
        self._dir_node(ino)
        return self.open(ino, 0)

    def handle(self, fh: int) -> Handle:
        h = self.handles.get(fh)
        if h is None:
            raise oserror(errno.EBADF)
        return h

    def readdir(self, fh: int, cookie: int):
        """Entries of an open directory from ``cookie`` on: (name, ino, next
        cookie).  The cookies are the kernel's (a position in the directory
        that stays valid while other entries come and go), so removals while
        a directory is read skip or repeat nothing."""
        h = self.handle(fh)
        if self.ns is not None:
            for name, ino, _ft, nxt in self.ns.readdir(h.ino, cookie):
                yield name, ino, nxt
            return
        # read-only: the listing taken when reading starts
        if cookie == 0 or h.listing is None:
            h.listing = self.entries(h.ino)
        for i in range(cookie, len(h.listing)):
            name, ino = h.listing[i]
            yield name, ino, i + 1

    def read(self, fh: int, off: int, size: int) -> bytes:
        h = self.handle(fh)
        kept = self._delayed.get(h.ino)
        if kept is not None:
            return bytes(kept[off:off + size]) if off >= 0 else b""
        if self.w is not None:
            self._read_ahead(h, off, size)
            return self.fileio.read(h.ino, off, size)
        node = self.fs.inode(h.ino)
        if node.is_dir:
            raise oserror(errno.EISDIR)
        return node.read(off, size)

    def read_map(self, fh: int, off: int, size: int, zeros_max: int):
        """Where the bytes of :meth:`read` lie in the image: [(byte offset,
        length)], -1 for zeros; None where only :meth:`read` can say (a
        read-only mount)."""
        h = self.handle(fh)
        if self.w is None or h.ino in self._delayed:
            return None             # (delayed data: read() has it)
        self._read_ahead(h, off, size)
        out = self.fileio.read_map(h.ino, off, size, zeros_max)
        base = self.w.dev.start           # a partition of a disk image: where it starts
        return [(a + base if a >= 0 else a, n) for a, n in out] if base else out

    def _read_ahead(self, h: Handle, off: int, size: int) -> None:
        """Read-ahead for a sequential reader of handle ``h`` (see
        READAHEAD_FIRST): the host kernel reads the image's pages of what
        comes next while this read is answered, so a cold sequential read
        does not wait on the disk for every request."""
        end = off + size
        if off != h.next and not (h.window and abs(off - h.next) <= READAHEAD_SLACK):
            # a jump: not (or no longer) sequential
            h.window = h.ahead = 0
            h.next = end
            return
        h.next = max(h.next, end)
        if h.window and h.ahead - end >= h.window // 2:
            return
        h.window = min(max(2 * h.window, READAHEAD_FIRST), READAHEAD_MAX)
        start = max(h.ahead, end)
        stop = end + h.window
        if stop <= start:
            return
        h.ahead = stop
        fd = self.w.dev.fd
        try:
            for at, n in self.fileio.read_map(h.ino, start, stop - start, stop - start):
                if at >= 0:
                    os.posix_fadvise(fd, at + self.w.dev.start, n, os.POSIX_FADV_WILLNEED)
        except (OSError, FsToolError):
            # only advice: the read itself says what is wrong
            pass

    @property
    def image_fd(self) -> int:
        """The image file's descriptor, which the offsets of read_map and
        fast_map (with fast_geometry) are in."""
        return self.fs.dev.fd

    def write(self, fh: int, off: int, data: bytes, kill_gid: int | None = None,
              caller=None) -> int:
        """Overwrites of written blocks inside the file's size go straight
        to the image with no transaction (the kernel's XFS does not log data
        either), their times logged with the next change or checkpoint
        (:meth:`_settle`); the writes of a file with nothing in the image
        yet are kept in memory (:meth:`_delay`); any other write is a
        transaction.  A write takes away the file's capabilities, and with
        ``kill_gid`` its set-user-ID and set-group-ID (:meth:`_privileges_lost`;
        ``caller``: (uid, gid, pid) of the request, for the caller's
        supplementary groups), in the write's transaction."""
        self._writable()
        h = self.handle(fh)
        ino = h.ino
        a = self.getattr(ino)
        mode, caps = self._privileges_lost(ino, a, kill_gid, False, caller)
        if mode is None and not caps and self._delay(h, a, off, data):
            return len(data)
        if self._grouped:
            self.end_group()
        if ino in self._delayed:
            self._settle()
        if mode is not None or caps:
            with self._tx() as ns:
                if caps:
                    ns.remove_xattr(ino, SECURITY_CAPABILITY)
                if mode is not None:
                    ns.setattr(ino, mode=mode)
                    self.privileges_dropped = True
                n = self.fileio.write(ino, off, data)
            self.icache.invalidate(ino)
            return n
        now = self.w.now_ns()
        if self.fileio.overwrite(ino, off, data):
            self.overwrote(ino, now)
            return len(data)
        with self._tx():
            n = self.fileio.write(h.ino, off, data)
        self.icache.invalidate(h.ino)
        return n

    def _delay(self, h: Handle, a: Attr, off: int, data) -> bool:
        """Keep a write in memory (delayed allocation, see DELAY_FILE) where
        it may be: a regular file with nothing in the image yet (size 0, no
        blocks) or whose data is all kept already, the write from offset 0
        to at most DELAY_FILE bytes with no gap, not O_SYNC or O_DSYNC,
        the room it takes sure to be there (it is counted as used at once:
        statfs shows it, and a write that would not find room when the
        data goes to the image is not kept but made at once, failing with
        ENOSPC where it would have).  True when kept."""
        ino = h.ino
        kept = self._delayed.get(ino)
        if kept is None:
            if a.size or a.blocks or not pystat.S_ISREG(a.mode) or \
                    h.flags & (os.O_SYNC | os.O_DSYNC) or self.fileio.held.get(ino):
                return False
            have = 0
        else:
            have = len(kept)
        n = len(data)
        end = off + n
        if off > have or end > DELAY_FILE or not n:
            return False
        grown = max(end, have) - have
        if self._delayed_bytes + grown > DELAY_TOTAL:
            return False
        more = self._blocks_of(max(end, have)) - self._blocks_of(have)
        if more and self.free_blocks() - self._reserved() - more < \
                ROOM_BLOCKS * (self.group + len(self._delayed) + 1):
            # near a full filesystem the write is made at once, failing
            # where it would (the group of creates and the delayed files'
            # own metadata keep their room)
            return False
        if kept is None:
            kept = self._delayed[ino] = bytearray()
        kept[off:end] = data
        self._delayed_bytes += grown
        self._delayed_blocks += more
        now = self.w.now_ns()
        self._core_set(ino, mtime_ns=now, ctime_ns=now)
        return True

    def overwrote(self, ino: int, now: int) -> None:
        """An overwrite of ``ino`` made at ``now`` (ns) without a transaction
        (:meth:`write`, or a request loop's own, see :meth:`fast_map`): its
        mtime and ctime, logged with the next change or checkpoint
        (:meth:`_settle`), and shown from now on."""
        self._core_set(ino, mtime_ns=now, ctime_ns=now)

    def fast_map(self, ino: int):
        """What a request loop needs to answer reads and overwrites of the
        regular file ``ino`` itself, valid until anything but such reads and
        overwrites happens (the native loop drops it at its next call that
        may change anything): (size, may_write, the time of changes or -1
        for the clock's, whether the file has no xattrs (getxattr answers
        ENODATA, as :meth:`getxattr` does without reading anything), the
        data fork's records (startoff, fsbno, blockcount, unwritten) as the
        read model keeps them, in file order: the caller turns them into
        image offsets with :attr:`fast_geometry`, leaving to :meth:`read`
        any record outside the filesystem or the image); None where only
        :meth:`read` and :meth:`write` can say (not a regular file, a map
        too large to copy).  ``may_write``: an overwrite of written blocks
        inside the size may go straight to the image, as :meth:`write`
        makes it (a writable volume, a file whose blocks are not shared);
        the loop then reports each with :meth:`overwrote` and the bytes
        with Device.wrote_elsewhere.  A read-only mount's maps never go
        stale (nothing changes) and never allow writes."""
        w = self.w
        if self.closed or ino in self._delayed:
            return None             # (delayed data: read() and write() have it)
        if self._grouped:
            a = self.getattr(ino)
            if pystat.S_ISREG(a.mode) and not a.size and not a.blocks:
                # an empty file (one just made in the open group of creates,
                # its first write coming): its map without ending the group
                return 0, False, -1 if w.timestamp_ns is None else w.timestamp_ns, \
                    not self._forkoff(ino), []
            self.end_group()
        try:
            node = self.fs.inode(ino)
        except FsToolError:
            return None
        if not node.is_reg or node.nextents > FAST_MAP_RECORDS or \
                (node.nlink == 0 and not self.opens.get(ino)):
            return None
        recs = node.extents()
        if w is None:
            return node.size, False, -1, not node.forkoff, recs
        dev = w.dev
        if dev._gather:
            dev.flush_gathered()
        # (and nothing a write takes away: no set-user-ID or set-group-ID,
        # no xattrs, so no capabilities; _privileges_lost)
        # (the mode as stat shows it: a chmod may be kept in memory)
        may_write = self.failed is None and dev.write_hook is None and \
            not node.flags2 & C.XFS_DIFLAG2_REFLINK and not node.forkoff and \
            not self.getattr(ino).mode & (pystat.S_ISUID | pystat.S_ISGID)
        fixed = w.timestamp_ns
        return node.size, may_write, -1 if fixed is None else fixed, not node.forkoff, recs

    @property
    def fast_geometry(self) -> tuple:
        """What turns :meth:`fast_map`'s records into image byte offsets:
        (blocklog, agblklog, agblocks, agcount, where the filesystem starts
        in the image file, its size in bytes)."""
        sb = self.sb
        dev = self.fs.dev
        return sb.blocklog, sb.agblklog, sb.agblocks, sb.agcount, dev.start, dev.size

    def fallocate(self, fh: int, mode: int, off: int, length: int, caller=None) -> None:
        """fallocate(2): allocate, keep size, punch hole, zero range; what
        the change takes away from ``caller`` ((uid, gid, pid) of the
        request) as the kernel's XFS does (:meth:`_modified`)."""
        self._writable()
        h = self.handle(fh)
        with self._tx() as ns:
            self.fileio.fallocate(h.ino, mode, off, length)
            self._modified(ns, h.ino, caller)
        self.icache.invalidate(h.ino)

    def copy_file_range(self, fh_in: int, off_in: int, fh_out: int, off_out: int,
                        length: int, caller=None) -> int:
        """copy_file_range(2) between two open files: whole blocks shared
        where the filesystem has reflink, the rest copied; one transaction,
        which takes away from the destination what the change takes away
        for ``caller`` (:meth:`_modified`)."""
        self._writable()
        src, dst = self.handle(fh_in), self.handle(fh_out)
        with self._tx() as ns:
            n = self.fileio.copy_range(src.ino, off_in, dst.ino, off_out, length)
            if n:
                self._modified(ns, dst.ino, caller)
        self.icache.invalidate(src.ino)
        self.icache.invalidate(dst.ino)
        return n

    def lseek(self, fh: int, off: int, whence: int) -> int:
        """lseek(2) with SEEK_DATA (3) or SEEK_HOLE (4), from the block map
        (ENXIO at or past the end of the file)."""
        h = self.handle(fh)
        if whence not in (os.SEEK_DATA, os.SEEK_HOLE):
            raise oserror(errno.EINVAL)
        if h.ino in self._delayed:
            self._settle()
        if self.w is not None:
            io = self.fileio
            return io.seek_data(h.ino, off) if whence == os.SEEK_DATA else \
                io.seek_hole(h.ino, off)
        raise oserror(errno.ENOSYS)         # read-only: the kernel's own answer

    def flush(self, fh: int) -> None:
        """close(2) of one descriptor: the data is in the image already;
        durability is fsync's."""
        self.handle(fh)

    def fsync(self, fh: int, datasync: bool = False) -> None:
        self.handle(fh)
        self.sync()

    def release(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        if h is None:
            return
        ino = h.ino
        left = self.opens.get(ino, 1) - 1
        if left:
            self.opens[ino] = left
            return
        self.opens.pop(ino, None)
        if self.w is not None:
            self._last_close(ino)

    def _last_close(self, ino: int) -> None:
        """Preallocation past the end given back; an inode with no name left
        freed."""
        a = self.icache.get(ino)
        if a is not None and a.nlink and (not a.blocks or ino in self._delayed) and \
                self.fileio.held.get(ino) is None:
            # nothing mapped, nothing held, still named: nothing to do (the
            # common close of a new empty file costs no transaction)
            return
        try:
            node = self.fs.inode(ino)
        except FsToolError:
            return
        if node.mode == 0:
            return
        # a file with no name left: what is kept of it dropped, not written
        # first (_forget_kept)
        kept = self._forget_kept(ino) if node.nlink == 0 else None
        try:
            with self._tx() as ns:
                if node.is_reg:
                    self.fileio.release(ino)
                if node.nlink == 0:
                    # a file, or a directory removed while open
                    ns.inactivate(ino)
        except BaseException:
            if kept is not None:
                self._keep_again(ino, kept)
            raise
        self._touch(ino)

    # -- xattrs ---------------------------------------------------------------------------------------
    def _xattr_name(self, name: bytes) -> str:
        s = name.decode("utf-8", "surrogateescape")
        if not s.startswith(XATTR_NAMESPACES) or s in XATTR_NAMESPACES:
            raise oserror(errno.EOPNOTSUPP)
        if len(name) > NAME_MAX:
            raise oserror(errno.ERANGE)
        return s

    def getxattr(self, ino: int, name: bytes) -> bytes:
        self.getattr(ino)
        ns = self.ns
        if ns is not None and len(name) <= NAME_MAX and ino not in ns.dirs and \
                not self._forkoff(ino):
            # no attr fork, so no xattr: the kernel asks for
            # security.capability before every write to a file (answered
            # without ending the open group of creates)
            raise oserror(errno.ENODATA)
        if self._grouped:
            self.end_group()
        if self.ns is None:
            v = self.fs.xattrs(ino).get(name.decode("utf-8", "surrogateescape"))
            if v is None:
                raise oserror(errno.ENODATA)
            return bytes(v)
        return bytes(self.ns.get_xattr(ino, name))

    def listxattr(self, ino: int) -> list:
        self.getattr(ino)
        names = self.fs.xattrs(ino) if self.ns is None else self.ns.list_xattr(ino)
        return [k.encode("utf-8", "surrogateescape") for k in names]

    def setxattr(self, ino: int, name: bytes, value: bytes, flags: int = 0) -> None:
        self._writable()
        self._xattr_name(name)
        if len(value) > XATTR_SIZE_MAX:
            raise oserror(errno.E2BIG)
        self.getattr(ino)
        with self._tx() as ns:
            ns.set_xattr(ino, name, bytes(value), flags)
            self._touch(ino)

    def removexattr(self, ino: int, name: bytes) -> None:
        self._writable()
        self.getattr(ino)
        with self._tx() as ns:
            ns.remove_xattr(ino, name)
            self._touch(ino)

    # -- the filesystem ----------------------------------------------------------------------------------
    def _counters(self) -> dict:
        buf = self.fs.get_buf(0, self.sb.sectsize, V.SB, agno=0, block=0)
        return SB.unpack(bytes(buf.data))

    def _reserved(self) -> int:
        """Blocks of free space file data may never take: the per-AG
        reservations the kernel keeps for its btrees' largest size
        (counted whole, an upper bound), which sb_fdblocks includes."""
        if self._resv is None:
            sb, w = self.sb, self.w
            self._resv = sum(
                sum(resv_asks(sb, agno, min(sb.agblocks, sb.dblocks - agno * sb.agblocks),
                              w.reflink, w.finobt, w.sparse, w.rmapbt))
                for agno in range(sb.agcount))
        return self._resv

    def free_blocks(self) -> int:
        """Free blocks, less those delayed writes will take."""
        return self._counters()["sb_fdblocks"] - self._delayed_blocks

    def statfs(self) -> dict:
        sb = self.sb
        f = self._counters()
        free = f["sb_fdblocks"] - self._delayed_blocks
        used_inodes = f["sb_icount"] - f["sb_ifree"]
        # the kernel's xfs_fs_statfs: inodes that free space could still hold
        files = min(f["sb_icount"] + (free << sb.inopblog),
                    (sb.dblocks * f["sb_imax_pct"] // 100) << sb.inopblog
                    if f["sb_imax_pct"] else 1 << 62)
        files = max(files, f["sb_icount"])
        logblocks = sb.logblocks if sb.logstart else 0
        return {"bsize": sb.blocksize, "frsize": sb.blocksize,
                "blocks": sb.dblocks - logblocks, "bfree": free, "bavail": free,
                "files": files, "ffree": files - used_inodes, "namemax": NAME_MAX}

    # -- bookkeeping ----------------------------------------------------------------------------------
    def _touch(self, *inos) -> None:
        inv = self.icache.invalidate
        for ino in inos:
            inv(ino)


class _Op:
    """One operation, one transaction: commit on success; on an error the
    image, the caches and the namespace state are as they were.  With
    ``group`` (which :meth:`Volume._new` gives only where the volume groups
    and has room) the transaction stays open for the creates that follow
    (see the module docstring)."""

    def __init__(self, vol: Volume, group: bool = False):
        self.vol = vol
        self.nested = False
        self.group = group              # the caller has judged the group possible
        self.redo = None

    def __enter__(self):
        vol = self.vol
        w = vol.w
        if vol._in_op:
            self.nested = True
            return vol.ns
        if vol._grouped and not self.group:
            vol.end_group()
        if w.tx is None:
            if not vol._redoing:
                vol._settle()
            w.begin()
        vol._in_op = True
        ns = vol.ns
        ns.now = w.now_ns()
        ns.defer_saves = self.group
        return ns

    def __exit__(self, etype, exc, tb):
        if self.nested:
            return False
        vol = self.vol
        vol._in_op = False
        vol.changes += 1
        if etype is None:
            if self.group:
                vol._grouped.append(self.redo)
                if len(vol._grouped) >= vol.group:
                    vol.end_group()
            else:
                vol._commit()
            return False
        redo = vol._grouped
        vol._grouped = []
        vol._abort()
        if redo:
            vol._redo(redo)
        return False


def _ends_group(fn):
    @functools.wraps(fn)
    def op(self, *args, **kw):
        if self._grouped and not self._in_op:
            self.end_group()
        return fn(self, *args, **kw)
    return op


# what an open group of creates lets run in it: reads of names and
# attributes, the creates themselves, opens and closes (a close that has
# work to do starts a transaction of its own, which ends the group)
_IN_GROUP = {"find", "child", "names", "getattr", "access", "forget", "create", "mknod",
             "open", "release", "handle", "end_group", "sync", "close",
             # each ends the group itself unless it only keeps its change in
             # memory (delayed writes, setattrs of the inode core) or answers
             # from the inode as the open transaction has it
             "write", "setattr", "fast_map", "getxattr",
             # (the counters as the last commit left them)
             "free_blocks"}
for _name, _fn in list(vars(Volume).items()):
    if callable(_fn) and not _name.startswith("_") and _name not in _IN_GROUP:
        setattr(Volume, _name, _ends_group(_fn))
del _name, _fn
