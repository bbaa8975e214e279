"""The mounted image: every FUSE operation as a plain method.

One :class:`~fstool.ns.writer.Writer` for the mount's life; each operation
that changes the image is one transaction (``_tx``), which the journal
gathers into checkpoints (delayed logging: many small operations share
one).  ``sync`` (fsync, fdatasync, the checkpoint timer, unmount) writes
the checkpoint.  Errors carry the errno the kernel's XFS returns; the FUSE
adapter hands it back unchanged.

Inode numbers are the image's.  Attributes come back as :class:`Attr`.

File data (until the extent-map layer writes in place): a regular file
being written is *staged* — its content is held in an unlinked host file
beside the image (holes kept), reads and writes go there, and it is written
back into the image as new extents (the old ones freed, so a crash leaves
the old content or the new, never a mix) when the file is flushed
(``close``), fsync'd, truncated, by the checkpoint timer and at unmount.
A file unlinked while open keeps its staged content until its last close.
"""
from __future__ import annotations

import errno
import os
import stat as pystat
import tempfile

from ..errors import FsToolError, WriteRefused
from ..format import constants as C
from .icache import InodeCache

NAME_MAX = 255
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
XATTR_NAMESPACES = ("user.", "trusted.", "security.")
XATTR_SIZE_MAX = 65536
DIR_STATES_KEPT = 1024        # directories whose entries stay decoded between operations


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


class Staged:
    """A regular file's content held on the host while it is written."""
    __slots__ = ("f", "size", "dirty", "mtime_ns", "ctime_ns", "orphan", "attr")

    def __init__(self, f, size: int):
        self.f = f
        self.size = size
        self.dirty = False
        self.mtime_ns = None
        self.ctime_ns = None
        self.orphan = False          # unlinked while open: never written back
        self.attr = None             # an orphan's last attributes

    def blocks(self) -> int:
        return os.fstat(self.f.fileno()).st_blocks


class Handle:
    __slots__ = ("ino", "flags", "listing")

    def __init__(self, ino: int, flags: int = 0):
        self.ino = ino
        self.flags = flags
        self.listing = None


class Volume:
    """An image mounted: see the module docstring."""

    def __init__(self, image, *, readonly: bool = False, timestamp_ns: int | None = None,
                 stage_dir: str | None = None, cache_bytes: int = 128 << 20):
        from ..fs.mount import Filesystem
        from ..io.lock import ImageLock, refuse_if_mounted
        from ..ns.namespace import Namespace
        from ..ns.writer import Writer
        self.image = os.fspath(image)
        self.readonly = readonly
        self._lock = None
        if readonly:
            refuse_if_mounted(self.image)
            self.w = None
            self.fs = Filesystem(self.image, cache_bytes=cache_bytes)
            try:
                self._lock = ImageLock(self.fs.dev.fd, self.image)
                self._lock.__enter__()
                from ..fs.logstate import log_is_clean
                clean, why = log_is_clean(self.fs)
                if not clean:
                    raise WriteRefused(f"{self.image}: the journal is dirty ({why}); replay "
                                       "it first (fstool log replay, or a kernel mount)")
            except BaseException:
                self.fs.close()
                raise
            self.ns = None
        else:
            self.w = Writer(self.image, timestamp_ns=timestamp_ns, cache_bytes=cache_bytes)
            self.fs = self.w.fs
            self.ns = Namespace(self.w)
        self._Namespace = Namespace
        sb = self.fs.sb
        self.sb = sb
        self.rootino = sb.rootino
        self.icache = InodeCache()
        self.handles: dict[int, Handle] = {}
        self.next_fh = 1
        self.opens: dict[int, int] = {}
        self.staged: dict[int, Staged] = {}
        self.stage_dir = stage_dir or os.path.dirname(os.path.abspath(self.image))
        self.closed = False
        self.dirty_since_sync = False

    # -- lifetime --------------------------------------------------------------------
    def close(self) -> None:
        """Write back every staged file, write the last checkpoint and the
        log's unmount record, release the image."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.w is not None:
                self.write_back_all()
                for ino in [i for i, s in self.staged.items() if s.orphan]:
                    self._destroy_orphan(ino)
                self.w.close()
            else:
                self.fs.close()
        finally:
            for stg in self.staged.values():
                stg.f.close()
            self.staged.clear()
            if self._lock is not None:
                try:
                    self._lock.__exit__(None, None, None)
                except OSError:
                    pass

    def sync(self) -> None:
        """Everything done so far is on disk: staged files written back and a
        checkpoint written (fsync, fdatasync, the timer, unmount)."""
        if self.w is None:
            return
        self.write_back_all()
        if self.dirty_since_sync:
            self.w.sync()
            self.dirty_since_sync = False

    def write_back_all(self) -> None:
        for ino, stg in list(self.staged.items()):
            if stg.dirty and not stg.orphan:
                with self._tx():
                    self._write_back(ino, stg)

    # -- transactions ------------------------------------------------------------------
    def _writable(self) -> None:
        if self.w is None:
            raise oserror(errno.EROFS)

    def _tx(self):
        return _Op(self)

    # -- attributes ------------------------------------------------------------------------
    def getattr(self, ino: int) -> Attr:
        a = self.icache.get(ino)
        if a is not None:
            return a
        stg = self.staged.get(ino)
        if stg is not None and stg.orphan:
            a = stg.attr
            a.size = stg.size
            if stg.mtime_ns is not None:
                a.mtime_ns = stg.mtime_ns
                a.ctime_ns = stg.ctime_ns
            return a
        try:
            node = self.fs.inode(ino)
        except FsToolError:
            raise oserror(errno.ENOENT, f"inode {ino}") from None
        if node.mode == 0 or (node.nlink == 0 and not node.is_dir):
            raise oserror(errno.ENOENT, f"inode {ino}")
        a = Attr(node.stat(), node.gen)
        if stg is not None:
            a.size = stg.size
            bs = self.sb.blocksize
            a.blocks = max(a.blocks, ((stg.blocks() * 512 + bs - 1) // bs) * (bs // 512))
            if stg.mtime_ns is not None:
                a.mtime_ns = stg.mtime_ns
            if stg.ctime_ns is not None:
                a.ctime_ns = stg.ctime_ns
        self.icache.put(ino, a)
        return a

    def _is_dir(self, ino: int) -> bool:
        return pystat.S_ISDIR(self.getattr(ino).mode)

    def setattr(self, ino: int, *, mode=None, uid=None, gid=None, size=None, atime_ns=None,
                mtime_ns=None) -> Attr:
        self._writable()
        a = self.getattr(ino)
        stg = self.staged.get(ino)
        if stg is not None and stg.orphan:
            # an open unlinked file: only its in-memory attributes change
            if size is not None:
                stg.f.truncate(size)
                stg.size = size
            for k, v in (("mode", None if mode is None else (a.mode & C.S_IFMT) | mode & 0o7777),
                         ("uid", uid), ("gid", gid), ("atime_ns", atime_ns),
                         ("mtime_ns", mtime_ns)):
                if v is not None:
                    setattr(stg.attr, k, v)
            return stg.attr
        with self._tx() as ns:
            if size is not None:
                if pystat.S_ISDIR(a.mode):
                    raise oserror(errno.EISDIR)
                if not pystat.S_ISREG(a.mode):
                    raise oserror(errno.EINVAL)
                stg = self._stage(ino)
                stg.f.truncate(size)
                stg.mtime_ns = stg.ctime_ns = ns.now
                stg.size = size
                stg.dirty = True
            if any(v is not None for v in (mode, uid, gid, atime_ns, mtime_ns)):
                ns.setattr(ino, mode=mode, uid=uid, gid=gid, atime_ns=atime_ns,
                           mtime_ns=mtime_ns)
                if ino in ns.dirs:
                    ns.mtime_set.pop(ino, None)
                if stg is not None and mtime_ns is not None:
                    stg.mtime_ns = mtime_ns
            if stg is not None and stg.dirty:
                self._write_back(ino, stg)
            self._touch(ino)
        self._unstage_if_idle(ino)
        return self.getattr(ino)

    # -- names ----------------------------------------------------------------------------
    def _check_name(self, name: bytes) -> None:
        if len(name) > NAME_MAX:
            raise oserror(errno.ENAMETOOLONG)
        if not name or b"/" in name or b"\0" in name:
            raise oserror(errno.EINVAL)

    def _dir_node(self, ino: int):
        a = self.getattr(ino)
        if not pystat.S_ISDIR(a.mode):
            raise oserror(errno.ENOTDIR)
        return a

    def child(self, parent: int, name: bytes):
        """(ino, ftype) of ``name`` in directory ``parent``, or None."""
        if self.ns is not None:
            return self.ns.child(parent, name)
        fs = self.fs
        ino = fs.dir_lookup(fs.inode(parent), name)
        return None if ino is None else (ino, 0)

    def parent_of(self, ino: int) -> int:
        if self.ns is not None:
            return self.ns.dir_state(ino).parent
        return self.fs.parent_of(self.fs.inode(ino))

    def lookup(self, parent: int, name: bytes) -> Attr:
        """The inode ``name`` names in ``parent`` (one more kernel reference)."""
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
                raise oserror(errno.ENOENT)
            ino = ent[0]
        a = self.getattr(ino)
        self.icache.ref(ino)
        return a

    def forget(self, ino: int, n: int) -> None:
        self.icache.forget(ino, n)

    def entries(self, ino: int) -> list:
        """[(name, ino)] of a directory, "." and ".." first."""
        self._dir_node(ino)
        if self.ns is not None:
            st = self.ns.dir_state(ino)
            out = [(b".", ino), (b"..", st.parent)]
            out.extend((name, e[0]) for name, e in st.entries.items())
        else:
            node = self.fs.inode(ino)
            out = [(b".", ino), (b"..", self.fs.parent_of(node))]
            out.extend((e.name, e.ino) for e in self.fs.listdir(node))
        self._trim_dir_states()
        return out

    def _trim_dir_states(self) -> None:
        ns = self.ns
        if ns is not None and len(ns.dirs) > DIR_STATES_KEPT and self.w.tx is None:
            ns.dirs.clear()

    # -- making names ------------------------------------------------------------------------
    def _meta(self, parent: int, perm: int, uid: int, gid: int, is_dir: bool):
        from ..ns.namespace import Meta
        pa = self.getattr(parent)
        if pa.mode & pystat.S_ISGID:
            # BSD group semantics of a setgid directory, as the kernel applies them
            gid = pa.gid
            if is_dir:
                perm |= pystat.S_ISGID
        now = self.ns.now
        return Meta(perm=perm, uid=uid, gid=gid, atime_ns=now, mtime_ns=now, ctime_ns=now)

    def _new(self, parent: int, name: bytes, make) -> Attr:
        self._writable()
        self._check_name(name)
        self._dir_node(parent)
        with self._tx() as ns:
            if ns.child(parent, name) is not None:
                raise oserror(errno.EEXIST)
            ino = make(ns)
            self._touch(parent)
        a = self.getattr(ino)
        self.icache.ref(ino)
        return a

    def mkdir(self, parent: int, name: bytes, mode: int, uid: int = 0, gid: int = 0) -> Attr:
        return self._new(parent, name, lambda ns: ns.mkdir(
            parent, name, self._meta(parent, mode & 0o7777, uid, gid, True)))

    def create(self, parent: int, name: bytes, mode: int, flags: int = 0, uid: int = 0,
               gid: int = 0):
        """A new empty regular file, opened: (handle, Attr)."""
        a = self._new(parent, name, lambda ns: ns.create_file(
            parent, name, self._meta(parent, mode & 0o7777, uid, gid, False)))
        return self.open(a.ino, flags), a

    def mknod(self, parent: int, name: bytes, mode: int, rdev: int = 0, uid: int = 0,
              gid: int = 0) -> Attr:
        kind = mode & C.S_IFMT
        if kind == C.S_IFREG or kind == 0:
            return self._new(parent, name, lambda ns: ns.create_file(
                parent, name, self._meta(parent, mode & 0o7777, uid, gid, False)))
        if kind not in (C.S_IFCHR, C.S_IFBLK, C.S_IFIFO, C.S_IFSOCK):
            raise oserror(errno.EINVAL)
        dev = (os.major(rdev), os.minor(rdev))
        return self._new(parent, name, lambda ns: ns.mknod(
            parent, name, kind, self._meta(parent, mode & 0o7777, uid, gid, False), rdev=dev))

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
            if ns.child(parent, name) is not None:
                raise oserror(errno.EEXIST)
            ns.link(parent, name, ino)
            self._touch(parent, ino)
        a = self.getattr(ino)
        self.icache.ref(ino)
        return a

    # -- removing names ------------------------------------------------------------------------
    def _remove_name(self, ns, parent: int, name: bytes, ino: int) -> None:
        """Remove a non-directory name.  An inode losing its last name while
        open stays allocated (link count 0) with its content until the last
        close, as the kernel keeps it; the kernel still knows it by its
        number, which must not name another file meanwhile."""
        a = self.getattr(ino)
        if a.nlink > 1 or not self.opens.get(ino) or not pystat.S_ISREG(a.mode):
            ns.unlink(parent, name)
            return
        stg = self._stage(ino)
        stg.orphan = True
        stg.dirty = False
        a = a.copy()
        a.nlink = 0
        a.size = stg.size
        stg.attr = a
        pst = ns.dir_state(parent)
        del pst.entries[name]
        pst.changed = True
        ns._patch(ino, nlink_delta=-1, ctime_ns=ns.now)

    def _destroy_orphan(self, ino: int) -> None:
        stg = self.staged.pop(ino)
        stg.f.close()
        with self._tx() as ns:
            ns._destroy(ino)
        self.icache.invalidate(ino)

    def unlink(self, parent: int, name: bytes) -> None:
        self._writable()
        self._dir_node(parent)
        with self._tx() as ns:
            ent = ns.child(parent, name)
            if ent is None:
                raise oserror(errno.ENOENT)
            ino = ent[0]
            if pystat.S_ISDIR(self.getattr(ino).mode):
                raise oserror(errno.EISDIR)
            self._remove_name(ns, parent, name, ino)
            self._touch(parent, ino)

    def rmdir(self, parent: int, name: bytes) -> None:
        self._writable()
        self._dir_node(parent)
        if name == b".":
            raise oserror(errno.EINVAL)
        if name == b"..":
            raise oserror(errno.ENOTEMPTY)
        with self._tx() as ns:
            ent = ns.child(parent, name)
            if ent is None:
                raise oserror(errno.ENOENT)
            ino = ent[0]
            if not self._is_dir(ino):
                raise oserror(errno.ENOTDIR)
            if ns.dir_state(ino).entries:
                raise oserror(errno.ENOTEMPTY)
            ns.unlink(parent, name, rmdir=True)
            self._touch(parent, ino)

    def rename(self, sparent: int, sname: bytes, dparent: int, dname: bytes,
               flags: int = 0) -> None:
        self._writable()
        self._check_name(dname)
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or \
                flags == RENAME_NOREPLACE | RENAME_EXCHANGE:
            raise oserror(errno.EINVAL)
        self._dir_node(sparent)
        self._dir_node(dparent)
        with self._tx() as ns:
            sst = ns.dir_state(sparent)
            dst = ns.dir_state(dparent)
            sent = sst.entries.get(sname)
            if sent is None:
                raise oserror(errno.ENOENT)
            dent = dst.entries.get(dname)
            sino = sent[0]
            sdir = self._is_dir(sino)
            if sdir and dparent != sparent and self._is_ancestor(sino, dparent):
                raise oserror(errno.EINVAL)
            if flags & RENAME_EXCHANGE:
                if dent is None:
                    raise oserror(errno.ENOENT)
                dino = dent[0]
                if dino == sino:
                    return
                ddir = self._is_dir(dino)
                if ddir and sparent != dparent and self._is_ancestor(dino, sparent):
                    raise oserror(errno.EINVAL)
                sst.entries[sname] = dent
                dst.entries[dname] = sent
                sst.changed = dst.changed = True
                self._moved(ns, sino, sdir, sparent, dparent)
                self._moved(ns, dino, ddir, dparent, sparent)
                self._touch(sparent, dparent, sino, dino)
                return
            if dent is not None:
                if flags & RENAME_NOREPLACE:
                    raise oserror(errno.EEXIST)
                dino = dent[0]
                if dino == sino:
                    return              # two names of one inode: nothing to do
                ddir = self._is_dir(dino)
                if sdir and not ddir:
                    raise oserror(errno.ENOTDIR)
                if ddir and not sdir:
                    raise oserror(errno.EISDIR)
                if ddir and ns.dir_state(dino).entries:
                    raise oserror(errno.EEXIST)     # what XFS returns here
                if ddir:
                    ns.unlink(dparent, dname, rmdir=True)
                else:
                    self._remove_name(ns, dparent, dname, dino)
                self._touch(dino)
            del sst.entries[sname]
            sst.changed = True
            dst.entries[dname] = sent
            dst.changed = True
            self._moved(ns, sino, sdir, sparent, dparent)
            self._touch(sparent, dparent, sino)

    def _is_ancestor(self, ino: int, of: int) -> bool:
        """True when directory ``ino`` is ``of`` or above it."""
        seen = 0
        cur = of
        while True:
            if cur == ino:
                return True
            if cur == self.rootino or seen > 4096:
                return False
            cur = self.ns.dir_state(cur).parent
            seen += 1

    def _moved(self, ns, ino: int, is_dir: bool, old_parent: int, new_parent: int) -> None:
        """An inode renamed: its change time moves; a directory moved to
        another parent gets its ".." rewritten and the parents' link counts."""
        if is_dir and old_parent != new_parent:
            st = ns.dir_state(ino)
            st.parent = new_parent
            st.changed = True
            # the moved directory keeps its modification time
            ns.mtime_set[ino] = self.getattr(ino).mtime_ns
            ns.dir_state(old_parent).nlink -= 1
            ns.dir_state(new_parent).nlink += 1
        elif not is_dir:
            ns._patch(ino, ctime_ns=ns.now)
        else:
            ns.mtime_set[ino] = self.getattr(ino).mtime_ns
            ns.dir_state(ino).changed = True

    # -- open files --------------------------------------------------------------------------------
    def open(self, ino: int, flags: int = 0) -> int:
        a = self.getattr(ino)
        if flags & (os.O_WRONLY | os.O_RDWR) and self.w is None:
            raise oserror(errno.EROFS)
        if pystat.S_ISDIR(a.mode) and flags & (os.O_WRONLY | os.O_RDWR):
            raise oserror(errno.EISDIR)
        if flags & os.O_TRUNC and flags & (os.O_WRONLY | os.O_RDWR) and \
                pystat.S_ISREG(a.mode):
            # libfuse asks for atomic O_TRUNC: the truncation is the open's
            self.setattr(ino, size=0)
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
        """Entries of an open directory from ``cookie`` on: (name, ino,
        next cookie).  The listing is taken when reading starts (cookie 0),
        so removals while it is read skip or repeat nothing; names gone since
        are left out."""
        h = self.handle(fh)
        if cookie == 0 or h.listing is None:
            h.listing = self.entries(h.ino)
        listing = h.listing
        for i in range(cookie, len(listing)):
            name, ino = listing[i]
            if i >= 2:
                cur = self.child(h.ino, name)
                if cur is None or cur[0] != ino:
                    continue
            yield name, ino, i + 1

    def read(self, fh: int, off: int, size: int) -> bytes:
        h = self.handle(fh)
        stg = self.staged.get(h.ino)
        if stg is not None:
            return os.pread(stg.f.fileno(), size, off)
        node = self.fs.inode(h.ino)
        if node.is_dir:
            raise oserror(errno.EISDIR)
        return node.read(off, size)

    def write(self, fh: int, off: int, data: bytes) -> int:
        self._writable()
        h = self.handle(fh)
        stg = self._stage(h.ino)
        end = off + len(data)
        if end > stg.size:
            self._reserve(stg, data)
        n = os.pwrite(stg.f.fileno(), data, off)
        if off + n > stg.size:
            stg.size = off + n
        stg.dirty = True
        stg.mtime_ns = stg.ctime_ns = self.w.now_ns()
        self.icache.invalidate(h.ino)
        return n

    def _reserve(self, stg: Staged, data: bytes) -> None:
        """ENOSPC at write time, as the kernel gives it, rather than at
        write-back: the staged files must fit the free space (a rewrite needs
        its new blocks before the old ones are freed)."""
        bs = self.sb.blocksize
        # blocks the staged files hold (holes need none), and this write's
        need = (len(data) + bs - 1) // bs + 1
        for s in self.staged.values():
            if s.dirty and not s.orphan or s is stg:
                need += (s.blocks() * 512 + bs - 1) // bs
        free = self.free_blocks()
        # room for the block maps, free lists and btree splits of the write-back
        margin = 8 * self.sb.agcount + need // 256 + 16
        if need + margin > free:
            raise oserror(errno.ENOSPC)

    def flush(self, fh: int) -> None:
        h = self.handle(fh)
        stg = self.staged.get(h.ino)
        if stg is not None and stg.dirty and not stg.orphan:
            with self._tx():
                self._write_back(h.ino, stg)

    def fsync(self, fh: int, datasync: bool = False) -> None:
        self.flush(fh)
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
        stg = self.staged.get(ino)
        if stg is None:
            return
        if stg.orphan:
            self._destroy_orphan(ino)
            return
        if stg.dirty:
            with self._tx():
                self._write_back(ino, stg)
        self._unstage_if_idle(ino)

    def _unstage_if_idle(self, ino: int) -> None:
        stg = self.staged.get(ino)
        if stg is not None and not self.opens.get(ino) and not stg.dirty:
            del self.staged[ino]
            stg.f.close()
            self.icache.invalidate(ino)

    # -- staging ---------------------------------------------------------------------------------
    def _stage(self, ino: int) -> Staged:
        stg = self.staged.get(ino)
        if stg is not None:
            return stg
        node = self.fs.inode(ino)
        if not node.is_reg:
            raise oserror(errno.EISDIR if node.is_dir else errno.EINVAL)
        f = tempfile.TemporaryFile(dir=self.stage_dir, prefix=".fstool-mount-")
        size = node.size
        fd = f.fileno()
        bs = self.sb.blocksize
        if node.format in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            for o, _b, n, *_ in node.extents():
                pos, stop = o * bs, min((o + n) * bs, size)
                while pos < stop:
                    chunk = node.read(pos, min(stop - pos, 1 << 20))
                    if not chunk:
                        break
                    os.pwrite(fd, chunk, pos)
                    pos += len(chunk)
        elif size:
            os.pwrite(fd, node.read(0, size), 0)
        f.truncate(size)
        stg = self.staged[ino] = Staged(f, size)
        return stg

    def _write_back(self, ino: int, stg: Staged) -> None:
        """Inside a transaction: the staged content becomes the file's data
        (new extents; the old ones freed with the transaction)."""
        from ..format.structs import DINODE
        from ..fs.icore import encode_ts
        from ..io.sparse import data_ranges_of
        from ..ns import files as F
        from ..ns.namespace import owned_blocks
        w = self.w
        node = self.fs.inode(ino)
        raw = w.inodes.raw_inode(ino)
        d = DINODE.unpack(raw)
        old = []
        if node.format in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            old = owned_blocks(node, attr=False)
        for fsbno, n in old:
            w.space.free_extent(fsbno, n)
        old_blocks = sum(n for _b, n in old)
        fd = stg.f.fileno()
        st = os.fstat(fd)
        ranges = data_ranges_of(fd, st)
        stg.f.seek(0)
        exts = F.write_data(w, w.inodes.ino_fsb(ino), stg.f, stg.size, ranges) \
            if stg.size else []
        forkoff = d["di_forkoff"]
        lit = self.sb.inodesize - C.XFS_DINODE_CORE_SIZE
        space = forkoff * 8 if forkoff else lit
        fork = F.map_fork(w, ino, exts, space)
        buf = bytearray(raw)
        c = C.XFS_DINODE_CORE_SIZE
        buf[c:c + space] = bytes(space)
        buf[c:c + len(fork.literal)] = fork.literal
        d["di_format"] = fork.fmt
        if d["di_flags2"] & C.XFS_DIFLAG2_NREXT64:
            d["di_big_nextents"] = fork.nextents
        else:
            d["di_nextents"] = fork.nextents
        d["di_size"] = stg.size
        d["di_nblocks"] += fork.blocks - old_blocks
        bigtime = bool(d["di_flags2"] & C.XFS_DIFLAG2_BIGTIME)
        if stg.mtime_ns is not None:
            d["di_mtime"] = encode_ts(stg.mtime_ns, bigtime)
        if stg.ctime_ns is not None:
            d["di_ctime"] = encode_ts(stg.ctime_ns, bigtime)
        d["di_changecount"] += 1
        packed = DINODE.pack(d)
        buf[:len(packed)] = packed
        w.inodes.put_inode(ino, w.enc.seal(buf))
        stg.dirty = False
        stg.mtime_ns = stg.ctime_ns = None
        self._touch(ino)

    # -- xattrs ---------------------------------------------------------------------------------------
    def _xattr_name(self, name: bytes) -> str:
        s = name.decode("utf-8", "surrogateescape")
        if not s.startswith(XATTR_NAMESPACES) or s in XATTR_NAMESPACES:
            raise oserror(errno.EOPNOTSUPP)
        if len(name) > NAME_MAX:
            raise oserror(errno.ERANGE)
        return s

    def _xattrs(self, ino: int) -> dict:
        self.getattr(ino)
        stg = self.staged.get(ino)
        if stg is not None and stg.orphan:
            return {}
        return self.fs.xattrs(ino)

    def getxattr(self, ino: int, name: bytes) -> bytes:
        v = self._xattrs(ino).get(name.decode("utf-8", "surrogateescape"))
        if v is None:
            raise oserror(errno.ENODATA)
        return bytes(v)

    def listxattr(self, ino: int) -> list:
        return [k.encode("utf-8", "surrogateescape") for k in self._xattrs(ino)]

    def setxattr(self, ino: int, name: bytes, value: bytes, flags: int = 0) -> None:
        self._writable()
        key = self._xattr_name(name)
        if len(value) > XATTR_SIZE_MAX:
            raise oserror(errno.E2BIG)
        cur = self._xattrs(ino)
        if flags & 1 and key in cur:
            raise oserror(errno.EEXIST)
        if flags & 2 and key not in cur:
            raise oserror(errno.ENODATA)
        cur[key] = bytes(value)
        self._set_xattrs(ino, cur)

    def _set_xattrs(self, ino: int, xattrs: dict) -> None:
        with self._tx() as ns:
            ns.set_xattrs(ino, xattrs)
            self._touch(ino)
        if any(len(v) > self.sb.blocksize - C.XFS_ATTR3_RMT_HDR_SIZE for v in xattrs.values()):
            # a value over several remote blocks is built as one buffer, which
            # the reader (one block at a time) does not find in the cache
            # until the checkpoint has written it in place
            self.w.journal.push()

    def removexattr(self, ino: int, name: bytes) -> None:
        self._writable()
        key = name.decode("utf-8", "surrogateescape")
        cur = self._xattrs(ino)
        if key not in cur:
            raise oserror(errno.ENODATA)
        del cur[key]
        self._set_xattrs(ino, cur)

    # -- the filesystem ----------------------------------------------------------------------------------
    def _counters(self) -> dict:
        from ..format.structs import SB
        from ..io import verify as V
        buf = self.fs.get_buf(0, self.sb.sectsize, V.SB, agno=0, block=0)
        return SB.unpack(bytes(buf.data))

    def free_blocks(self) -> int:
        return self._counters()["sb_fdblocks"]

    def statfs(self) -> dict:
        sb = self.sb
        f = self._counters()
        free = f["sb_fdblocks"]
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
    image, the caches and the namespace state are as they were."""

    def __init__(self, vol: Volume):
        self.vol = vol
        self.nested = False

    def __enter__(self):
        vol = self.vol
        w = vol.w
        if w.tx is not None:
            self.nested = True
            return vol.ns
        w.begin()
        vol.ns.now = w.now_ns()
        return vol.ns

    def __exit__(self, etype, exc, tb):
        if self.nested:
            return False
        vol = self.vol
        w = vol.w
        ns = vol.ns
        if etype is None:
            try:
                changed = [ino for ino, st in ns.dirs.items() if st.changed]
                ns.finish()
                w.commit()
            except BaseException:
                if w.tx is not None:
                    w.abort()
                self._reset()
                raise
            ns.committed()
            ns.mtime_set.clear()
            vol.dirty_since_sync = True
            for ino in changed:
                vol.icache.invalidate(ino)
            vol._trim_dir_states()
            return False
        w.abort()
        self._reset()
        return False

    def _reset(self) -> None:
        vol = self.vol
        vol.ns = vol._Namespace(vol.w)
        vol.icache.clear_attrs()
