"""The FUSE operations over a :class:`~fstool.mount.volume.Volume`, once,
for both request loops (``fstool_native.fuseloop`` and pyfuse3).

Synchronous methods: FUSE node ids in; :class:`~fstool.mount.volume.Attr`,
bytes or ints out; every error an ``OSError`` carrying the errno the kernel
gets.  FUSE node ids are the image's inode numbers, except the root, which
FUSE calls 1 (no XFS inode can be number 1).  A front end only translates:
its request's arguments into a call here, the result into its reply.
Operations never interleave (the native loop's workers answer one request
at a time, under a lock; pyfuse3's loop is one task and no method yields),
so there is one transaction at a time.
"""
from __future__ import annotations

import errno
import functools
import logging
import time

from ..errors import errno_of

log = logging.getLogger("fstool.mount")

ROOT_NODE = 1

# fstool is the only writer: what the kernel caches stays true until fstool
# itself changes it, and every change goes through the kernel
ENTRY_TIMEOUT = 3600.0
ATTR_TIMEOUT = 3600.0

# creates that share one transaction (Volume's group commit): the kernel
# sends a lookup, a create and a release per new file, and the commit's
# work (inode btree records, AG headers, superblock counters, directory
# blocks encoded) is then done once for the group.  Creates spread over
# many directories gain as much as creates in one only when a group holds
# several of each directory's (its blocks joined and its inode written once
# a group): 256 measured 20% less server CPU per create than 32 round-robin
# over 100 directories (docs/performance.md)
GROUP_COMMIT = 256

# the longest run of zeros one piece of read_map's answer stands for (the
# native loop keeps zeros_max zero bytes to send)
ZEROS_MAX = 1 << 20

XATTR_CREATE = 1
XATTR_REPLACE = 2


def _errnos(fn):
    """Any error of ``fn`` as an OSError with its errno (EIO, logged, for
    the unexpected)."""
    @functools.wraps(fn)
    def op(*args, **kw):
        try:
            return fn(*args, **kw)
        except OSError as e:
            if e.errno:
                raise
            code = errno.EIO
            log.error("%s: %s: %s", fn.__name__, type(e).__name__, e)
        except Exception as e:          # noqa: BLE001 - every error becomes an errno
            code = errno_of(e)
            if code == errno.EIO:
                log.error("%s: %s: %s", fn.__name__, type(e).__name__, e)
        raise OSError(code, "") from None
    return op


class MountOps:
    """See the module docstring."""
    entry_timeout = ENTRY_TIMEOUT
    attr_timeout = ATTR_TIMEOUT
    zeros_max = ZEROS_MAX
    # writes, truncates and chowns take away set-user-ID, set-group-ID and
    # capabilities here (Volume._privileges_lost), as the kernel's XFS
    # does: the native loop negotiates FUSE_HANDLE_KILLPRIV_V2, and the
    # kernel stops asking for security.capability before every write
    kill_privileges = True

    def __init__(self, vol, writeback_cache: bool = False):
        self.vol = vol
        self.root = vol.rootino
        vol.group = GROUP_COMMIT
        # work an operation leaves for after its answer (a create names its
        # file then), run by a loop that sets answer_first, before it takes
        # the next request; other loops get every answer after all the work
        self.later: list = []
        self.answer_first = False
        # The kernel's writeback cache gathers small writes into large ones,
        # but its errors (ENOSPC above all) then come at close or fsync
        # instead of at write(); it is on only when asked for
        self.writeback_cache = writeback_cache
        # the native loop's fast path: ``drop_maps`` is set by the loop
        # (every file map it keeps goes stale); writes stopping, which
        # a call the loop deems harmless may bring (the end of a group of
        # creates), drops them
        self.drop_maps = None
        vol.on_stop = self._writes_stopped

    # -- numbering --------------------------------------------------------------------
    def ino(self, node: int) -> int:
        return self.root if node == ROOT_NODE else node

    def node(self, ino: int) -> int:
        return ROOT_NODE if ino == self.root else ino

    # -- names -------------------------------------------------------------------------
    @_errnos
    def lookup(self, parent: int, name: bytes):
        """The Attr ``name`` names, or None when nothing does (the kernel
        keeps that negative entry: every change reaches fstool through the
        kernel, which drops it then)."""
        return self.vol.find(self.ino(parent), name)

    def names(self, node: int):
        """Every name of directory ``node`` but "." and ".." (the native loop
        keeps them to answer lookups of missing names itself), or None where
        it should not (too many, not a directory); never raises."""
        try:
            return self.vol.names(self.ino(node))
        except Exception:               # noqa: BLE001 - lookups then all come here
            return None

    def forget(self, node: int, n: int) -> None:
        self.vol.forget(self.ino(node), n)

    @_errnos
    def getattr(self, node: int):
        return self.vol.getattr(self.ino(node))

    @_errnos
    def access(self, node: int, mask: int, uid: int, gid: int) -> None:
        self.vol.access(self.ino(node), mask, uid, gid)

    @_errnos
    def setattr(self, node: int, *, mode=None, uid=None, gid=None, size=None,
                atime_ns=None, mtime_ns=None, atime_now=False, mtime_now=False,
                kill_gid=None, caller=None):
        """``*_now``: the time of the request (utimensat's UTIME_NOW);
        ``kill_gid``, ``caller`` ((uid, gid, pid) of the request): see
        Volume.setattr."""
        if atime_now or mtime_now:
            now = time.time_ns()
            if atime_now:
                atime_ns = now
            if mtime_now:
                mtime_ns = now
        if mode is not None:
            mode &= 0o7777
        return self.vol.setattr(self.ino(node), mode=mode, uid=uid, gid=gid, size=size,
                                atime_ns=atime_ns, mtime_ns=mtime_ns,
                                kill_gid=kill_gid, caller=caller)

    @_errnos
    def readlink(self, node: int) -> bytes:
        return self.vol.readlink(self.ino(node))

    @_errnos
    def mkdir(self, parent: int, name: bytes, mode: int, uid: int, gid: int):
        return self.vol.mkdir(self.ino(parent), name, mode, uid, gid)

    @_errnos
    def mknod(self, parent: int, name: bytes, mode: int, rdev: int, uid: int, gid: int):
        return self.vol.mknod(self.ino(parent), name, mode, rdev, uid, gid)

    @_errnos
    def symlink(self, parent: int, name: bytes, target: bytes, uid: int, gid: int):
        return self.vol.symlink(self.ino(parent), name, target, uid, gid)

    @_errnos
    def link(self, node: int, new_parent: int, new_name: bytes):
        return self.vol.link(self.ino(node), self.ino(new_parent), new_name)

    @_errnos
    def unlink(self, parent: int, name: bytes) -> None:
        self.vol.unlink(self.ino(parent), name)

    @_errnos
    def rmdir(self, parent: int, name: bytes) -> None:
        self.vol.rmdir(self.ino(parent), name)

    @_errnos
    def rename(self, parent_old: int, name_old: bytes, parent_new: int, name_new: bytes,
               flags: int) -> None:
        self.vol.rename(self.ino(parent_old), name_old, self.ino(parent_new), name_new,
                        flags)

    # -- directories ------------------------------------------------------------------
    @_errnos
    def opendir(self, node: int) -> int:
        return self.vol.opendir(self.ino(node))

    @_errnos
    def readdir(self, fh: int, start: int, add) -> None:
        """Entries from cookie ``start`` on, each handed to ``add(name, Attr,
        next cookie)`` until it returns False (the reply is full); every
        entry taken but "." and ".." is one more kernel reference (readdirplus
        counts as a lookup)."""
        vol = self.vol
        getattr_ = vol.getattr
        ref = vol.icache.ref
        for name, ino, nxt in vol.readdir(fh, start):
            try:
                a = getattr_(ino)
            except OSError:
                continue
            if not add(name, a, nxt):
                return
            if name != b"." and name != b"..":
                ref(ino)

    def releasedir(self, fh: int) -> None:
        self.vol.release(fh)

    @_errnos
    def fsyncdir(self, fh: int, datasync: bool) -> None:
        self.vol.sync()

    # -- files --------------------------------------------------------------------------
    @_errnos
    def open(self, node: int, flags: int, kill_gid: int | None = None) -> int:
        return self.vol.open(self.ino(node), flags, kill_gid)

    @_errnos
    def create(self, parent: int, name: bytes, mode: int, flags: int, uid: int, gid: int,
               absent: bool = False):
        """(handle, Attr) of a new file, opened.  ``absent``: the loop knows
        ``name`` is not in ``parent`` (its kept names, see names())."""
        return self.vol.create(self.ino(parent), name, mode, flags, uid, gid,
                               self.later if self.answer_first else None, absent)

    def run_later(self) -> None:
        """What the last operation left for after its answer (never raises:
        a failure there has stopped the volume's writes, and is logged)."""
        later = self.later
        while later:
            fn = later.pop(0)
            try:
                fn()
            except Exception as e:      # noqa: BLE001 - the volume has stopped writing
                log.error("after an answer: %s: %s", type(e).__name__, e)

    @_errnos
    def read(self, fh: int, off: int, size: int) -> bytes:
        return self.vol.read(fh, off, size)

    @_errnos
    def read_map(self, fh: int, off: int, size: int):
        """Where a read's bytes lie in the image, for a loop that moves them
        from the image to the kernel itself (the native loop splices them):
        [(image byte offset, length)], -1 for at most zeros_max zeros; None:
        use read()."""
        return self.vol.read_map(fh, off, size, self.zeros_max)

    @property
    def image_fd(self) -> int:
        return self.vol.image_fd

    # -- the native loop's fast path -------------------------------------------------------
    def fast_map(self, node: int):
        """A regular file's map for a loop that answers its reads and
        overwrites itself (Volume.fast_map), or None; never raises (the
        request then goes to read or write, which say what is wrong)."""
        try:
            return self.vol.fast_map(self.ino(node))
        except Exception:               # noqa: BLE001 - the ordinary path reports it
            return None

    def _writes_stopped(self) -> None:
        if self.drop_maps is not None:
            self.drop_maps()

    @property
    def fast_geometry(self) -> tuple:
        return self.vol.fast_geometry

    @_errnos
    def overwritten(self, times: list, nbytes: int) -> None:
        """The overwrites the loop made itself since it last said: [(node,
        time in ns)] (the last of each file), ``nbytes`` written in all."""
        vol = self.vol
        for node, now in times:
            vol.overwrote(self.ino(node), now)
        if nbytes and vol.w is not None:
            vol.w.dev.wrote_elsewhere(nbytes)

    @property
    def write_hit(self):
        """What the loop calls after each write of its own to the image
        (offset in the image file, length), where the crash tests' fault
        hook or write log counts writes; else None."""
        return self.vol.w.dev.write_counter if self.vol.w is not None else None

    @_errnos
    def write(self, fh: int, off: int, buf, kill_gid: int | None = None, caller=None) -> int:
        """``kill_gid``, ``caller`` ((uid, gid, pid) of the request): see
        Volume.write."""
        return self.vol.write(fh, off, buf, kill_gid, caller)

    def privileges_dropped(self) -> bool:
        """A write or open since the last call took set-user-ID or
        set-group-ID away (Volume.privileges_dropped)."""
        vol = self.vol
        dropped, vol.privileges_dropped = vol.privileges_dropped, False
        return dropped

    def flush(self, fh: int) -> None:
        # close(2) has nothing to do here (the data is in the image already,
        # durability is fsync's): ENOSYS tells the kernel to stop sending
        # FLUSH at all, one round trip less per close (with the writeback
        # cache the kernel still writes its dirty pages back first)
        raise OSError(errno.ENOSYS, "")

    @_errnos
    def release(self, fh: int) -> None:
        self.vol.release(fh)

    @_errnos
    def fsync(self, fh: int, datasync: bool) -> None:
        self.vol.fsync(fh, datasync)

    @_errnos
    def fallocate(self, fh: int, mode: int, off: int, length: int, caller=None) -> None:
        """``caller``: (uid, gid, pid) of the request (Volume.fallocate)."""
        self.vol.fallocate(fh, mode, off, length, caller)

    @_errnos
    def copy_file_range(self, fh_in: int, off_in: int, fh_out: int, off_out: int,
                        length: int, flags: int, caller=None) -> int:
        """copy_file_range(2): whole blocks shared on a reflink filesystem
        (as the kernel's XFS does), the rest copied; ``caller``: (uid, gid,
        pid) of the request (Volume.copy_file_range)."""
        if flags:
            raise OSError(errno.EINVAL, "")
        return self.vol.copy_file_range(fh_in, off_in, fh_out, off_out, length, caller)

    @_errnos
    def lseek(self, fh: int, off: int, whence: int) -> int:
        """SEEK_DATA and SEEK_HOLE (the kernel answers the others itself)."""
        return self.vol.lseek(fh, off, whence)

    # -- xattrs -------------------------------------------------------------------------
    @_errnos
    def getxattr(self, node: int, name: bytes) -> bytes:
        return self.vol.getxattr(self.ino(node), name)

    @_errnos
    def setxattr(self, node: int, name: bytes, value: bytes, flags: int = 0) -> None:
        """XATTR_CREATE and XATTR_REPLACE checked here, as libfuse leaves them
        to the filesystem."""
        if flags & ~(XATTR_CREATE | XATTR_REPLACE):
            raise OSError(errno.EINVAL, "")
        if flags & XATTR_CREATE:
            try:
                self.vol.getxattr(self.ino(node), name)
            except OSError as e:
                if e.errno != errno.ENODATA:
                    raise
            else:
                raise OSError(errno.EEXIST, "")
        elif flags & XATTR_REPLACE:
            self.vol.getxattr(self.ino(node), name)
        self.vol.setxattr(self.ino(node), name, value)

    @_errnos
    def listxattr(self, node: int) -> bytes:
        """The names, each ending in NUL (listxattr(2)'s buffer)."""
        return b"".join(n + b"\0" for n in self.vol.listxattr(self.ino(node)))

    @_errnos
    def removexattr(self, node: int, name: bytes) -> None:
        self.vol.removexattr(self.ino(node), name)

    # -- the filesystem -----------------------------------------------------------------
    @_errnos
    def statfs(self) -> dict:
        """statvfs(3)'s fields, by their names."""
        s = self.vol.statfs()
        return {"f_bsize": s["bsize"], "f_frsize": s["frsize"], "f_blocks": s["blocks"],
                "f_bfree": s["bfree"], "f_bavail": s["bavail"], "f_files": s["files"],
                "f_ffree": s["ffree"], "f_favail": s["ffree"], "f_namemax": s["namemax"]}

    def checkpoint(self) -> None:
        """The timer's: a checkpoint of what changed since the last."""
        self.vol.sync()
