"""The FUSE adapter: pyfuse3's low-level, inode-based operations over a
:class:`~fstool.mount.volume.Volume`.

FUSE node ids are the image's inode numbers, except the root, which FUSE
calls 1 (no XFS inode can be number 1).  Every handler is synchronous
underneath (no ``await`` between the start and the end of an operation),
so operations never interleave: one transaction at a time.  Errors become
``FUSEError`` with the errno they carry.
"""
from __future__ import annotations

import errno
import logging

import pyfuse3

from ..errors import errno_of

log = logging.getLogger("fstool.mount")

# fstool is the only writer: what the kernel caches stays true until fstool
# itself changes it, and every change goes through the kernel
ENTRY_TIMEOUT = 3600.0
ATTR_TIMEOUT = 3600.0


class FuseOps(pyfuse3.Operations):
    # The kernel's writeback cache gathers small writes into large ones, but
    # its errors (ENOSPC above all) then come at close or fsync instead of
    # at write(); it is on only when asked for (-o writeback_cache).
    enable_writeback_cache = False
    supports_dot_lookup = True

    def __init__(self, vol, writeback_cache: bool = False):
        super().__init__()
        self.enable_writeback_cache = writeback_cache
        self.vol = vol
        self.root = vol.rootino

    # -- numbering and attributes ------------------------------------------------------
    def _ino(self, node: int) -> int:
        return self.root if node == pyfuse3.ROOT_INODE else node

    def _node(self, ino: int) -> int:
        return pyfuse3.ROOT_INODE if ino == self.root else ino

    def _entry(self, a) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = self._node(a.ino)
        e.generation = a.gen
        e.entry_timeout = ENTRY_TIMEOUT
        e.attr_timeout = ATTR_TIMEOUT
        e.st_mode = a.mode
        e.st_nlink = a.nlink
        e.st_uid = a.uid
        e.st_gid = a.gid
        e.st_rdev = a.rdev
        e.st_size = a.size
        e.st_blksize = a.blksize
        e.st_blocks = a.blocks
        e.st_atime_ns = a.atime_ns
        e.st_mtime_ns = a.mtime_ns
        e.st_ctime_ns = a.ctime_ns
        return e

    def _call(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except pyfuse3.FUSEError:
            raise
        except Exception as e:          # noqa: BLE001 - every error becomes an errno
            code = errno_of(e)
            if code == errno.EIO:
                log.error("%s: %s: %s", getattr(fn, "__name__", fn), type(e).__name__, e)
            raise pyfuse3.FUSEError(code) from None

    # -- names -----------------------------------------------------------------------------
    async def lookup(self, parent_inode, name, ctx):
        try:
            return self._entry(self._call(self.vol.lookup, self._ino(parent_inode), name))
        except pyfuse3.FUSEError as e:
            if e.errno != errno.ENOENT:
                raise
        # a name that is not there: the kernel keeps the negative entry (every
        # change reaches fstool through the kernel, which drops it then)
        e = pyfuse3.EntryAttributes()
        e.st_ino = 0
        e.entry_timeout = ENTRY_TIMEOUT
        return e

    async def forget(self, inode_list):
        for node, n in inode_list:
            self.vol.forget(self._ino(node), n)

    async def getattr(self, inode, ctx):
        return self._entry(self._call(self.vol.getattr, self._ino(inode)))

    async def setattr(self, inode, attr, fields, fh, ctx):
        kw = {}
        if fields.update_mode:
            kw["mode"] = attr.st_mode & 0o7777
        if fields.update_uid:
            kw["uid"] = attr.st_uid
        if fields.update_gid:
            kw["gid"] = attr.st_gid
        if fields.update_size:
            kw["size"] = attr.st_size
        if fields.update_atime:
            kw["atime_ns"] = attr.st_atime_ns
        if fields.update_mtime:
            kw["mtime_ns"] = attr.st_mtime_ns
        return self._entry(self._call(self.vol.setattr, self._ino(inode), **kw))

    async def readlink(self, inode, ctx):
        return self._call(self.vol.readlink, self._ino(inode))

    async def mkdir(self, parent_inode, name, mode, ctx):
        return self._entry(self._call(self.vol.mkdir, self._ino(parent_inode), name, mode,
                                      ctx.uid, ctx.gid))

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        return self._entry(self._call(self.vol.mknod, self._ino(parent_inode), name, mode,
                                      rdev, ctx.uid, ctx.gid))

    async def symlink(self, parent_inode, name, target, ctx):
        return self._entry(self._call(self.vol.symlink, self._ino(parent_inode), name,
                                      target, ctx.uid, ctx.gid))

    async def link(self, inode, new_parent_inode, new_name, ctx):
        return self._entry(self._call(self.vol.link, self._ino(inode),
                                      self._ino(new_parent_inode), new_name))

    async def unlink(self, parent_inode, name, ctx):
        self._call(self.vol.unlink, self._ino(parent_inode), name)

    async def rmdir(self, parent_inode, name, ctx):
        self._call(self.vol.rmdir, self._ino(parent_inode), name)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self._call(self.vol.rename, self._ino(parent_inode_old), name_old,
                   self._ino(parent_inode_new), name_new, flags)

    # -- directories ------------------------------------------------------------------------
    async def opendir(self, inode, ctx):
        return self._call(self.vol.opendir, self._ino(inode))

    async def readdir(self, fh, start_id, token):
        vol = self.vol
        try:
            for name, ino, nxt in vol.readdir(fh, start_id):
                try:
                    a = vol.getattr(ino)
                except OSError:
                    continue
                if not pyfuse3.readdir_reply(token, name, self._entry(a), nxt):
                    return
                if name != b"." and name != b"..":
                    vol.icache.ref(ino)
        except pyfuse3.FUSEError:
            raise
        except Exception as e:          # noqa: BLE001
            raise pyfuse3.FUSEError(errno_of(e)) from None

    async def releasedir(self, fh):
        self.vol.release(fh)

    async def fsyncdir(self, fh, datasync):
        self._call(self.vol.sync)

    # -- files -----------------------------------------------------------------------------
    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=self._call(self.vol.open, self._ino(inode), flags))

    async def create(self, parent_inode, name, mode, flags, ctx):
        fh, a = self._call(self.vol.create, self._ino(parent_inode), name, mode, flags,
                           ctx.uid, ctx.gid)
        return pyfuse3.FileInfo(fh=fh), self._entry(a)

    async def read(self, fh, off, size):
        return self._call(self.vol.read, fh, off, size)

    async def write(self, fh, off, buf):
        return self._call(self.vol.write, fh, off, buf)

    async def flush(self, fh):
        # close(2) has nothing to do here (the data is in the image already,
        # durability is fsync's): ENOSYS tells the kernel to stop sending
        # FLUSH at all, one round trip less per close (with the writeback
        # cache the kernel still writes its dirty pages back first)
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def release(self, fh):
        self._call(self.vol.release, fh)

    async def fsync(self, fh, datasync):
        self._call(self.vol.fsync, fh, datasync)

    # -- xattrs -----------------------------------------------------------------------------
    async def getxattr(self, inode, name, ctx):
        return self._call(self.vol.getxattr, self._ino(inode), name)

    async def setxattr(self, inode, name, value, ctx):
        # pyfuse3 has already applied XATTR_CREATE / XATTR_REPLACE
        self._call(self.vol.setxattr, self._ino(inode), name, value)

    async def listxattr(self, inode, ctx):
        return self._call(self.vol.listxattr, self._ino(inode))

    async def removexattr(self, inode, name, ctx):
        self._call(self.vol.removexattr, self._ino(inode), name)

    # -- the filesystem ----------------------------------------------------------------------
    async def statfs(self, ctx):
        s = self._call(self.vol.statfs)
        st = pyfuse3.StatvfsData()
        st.f_bsize = s["bsize"]
        st.f_frsize = s["frsize"]
        st.f_blocks = s["blocks"]
        st.f_bfree = s["bfree"]
        st.f_bavail = s["bavail"]
        st.f_files = s["files"]
        st.f_ffree = s["ffree"]
        st.f_favail = s["ffree"]
        st.f_namemax = s["namemax"]
        return st
