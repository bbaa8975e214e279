"""The pyfuse3 front end: pyfuse3's low-level, inode-based ``Operations``
over :class:`~fstool.mount.ops.MountOps` (the fallback where
``fstool_native.fuseloop`` is not built).

Each handler translates only: pyfuse3's arguments into the MountOps call,
the result into pyfuse3's types, an ``OSError`` into ``FUSEError``.  Every
handler is synchronous underneath (no ``await`` between the start and the
end of an operation), so operations never interleave.
"""
from __future__ import annotations

import functools

import pyfuse3

from .ops import MountOps


def _fuse_errors(fn):
    @functools.wraps(fn)
    async def handler(*args, **kw):
        try:
            return fn(*args, **kw)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno) from None
    return handler


class FuseOps(pyfuse3.Operations):
    enable_writeback_cache = False
    supports_dot_lookup = True

    def __init__(self, ops: MountOps):
        super().__init__()
        self.enable_writeback_cache = ops.writeback_cache
        self.ops = ops

    def _entry(self, a) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.entry_timeout = self.ops.entry_timeout
        e.attr_timeout = self.ops.attr_timeout
        if a is None:                   # a negative entry
            e.st_ino = 0
            return e
        e.st_ino = self.ops.node(a.ino)
        e.generation = a.gen
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

    # -- names ---------------------------------------------------------------------------
    @_fuse_errors
    def lookup(self, parent_inode, name, ctx):
        return self._entry(self.ops.lookup(parent_inode, name))

    @_fuse_errors
    def forget(self, inode_list):
        for node, n in inode_list:
            self.ops.forget(node, n)

    @_fuse_errors
    def getattr(self, inode, ctx):
        return self._entry(self.ops.getattr(inode))

    @_fuse_errors
    def access(self, inode, mode, ctx):
        self.ops.access(inode, mode, ctx.uid, ctx.gid)
        return True

    @_fuse_errors
    def setattr(self, inode, attr, fields, fh, ctx):
        # pyfuse3 has already turned UTIME_NOW into the request's time
        kw = {}
        if fields.update_mode:
            kw["mode"] = attr.st_mode
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
        return self._entry(self.ops.setattr(inode, caller=(ctx.uid, ctx.gid, ctx.pid), **kw))

    @_fuse_errors
    def readlink(self, inode, ctx):
        return self.ops.readlink(inode)

    @_fuse_errors
    def mkdir(self, parent_inode, name, mode, ctx):
        return self._entry(self.ops.mkdir(parent_inode, name, mode, ctx.uid, ctx.gid))

    @_fuse_errors
    def mknod(self, parent_inode, name, mode, rdev, ctx):
        return self._entry(self.ops.mknod(parent_inode, name, mode, rdev, ctx.uid, ctx.gid))

    @_fuse_errors
    def symlink(self, parent_inode, name, target, ctx):
        return self._entry(self.ops.symlink(parent_inode, name, target, ctx.uid, ctx.gid))

    @_fuse_errors
    def link(self, inode, new_parent_inode, new_name, ctx):
        return self._entry(self.ops.link(inode, new_parent_inode, new_name))

    @_fuse_errors
    def unlink(self, parent_inode, name, ctx):
        self.ops.unlink(parent_inode, name)

    @_fuse_errors
    def rmdir(self, parent_inode, name, ctx):
        self.ops.rmdir(parent_inode, name)

    @_fuse_errors
    def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self.ops.rename(parent_inode_old, name_old, parent_inode_new, name_new, flags)

    # -- directories ----------------------------------------------------------------------
    @_fuse_errors
    def opendir(self, inode, ctx):
        return self.ops.opendir(inode)

    @_fuse_errors
    def readdir(self, fh, start_id, token):
        self.ops.readdir(fh, start_id, lambda name, a, nxt: pyfuse3.readdir_reply(
            token, name, self._entry(a), nxt))

    @_fuse_errors
    def releasedir(self, fh):
        self.ops.releasedir(fh)

    @_fuse_errors
    def fsyncdir(self, fh, datasync):
        self.ops.fsyncdir(fh, datasync)

    # -- files ----------------------------------------------------------------------------
    @_fuse_errors
    def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=self.ops.open(inode, flags))

    @_fuse_errors
    def create(self, parent_inode, name, mode, flags, ctx):
        fh, a = self.ops.create(parent_inode, name, mode, flags, ctx.uid, ctx.gid)
        return pyfuse3.FileInfo(fh=fh), self._entry(a)

    @_fuse_errors
    def read(self, fh, off, size):
        return self.ops.read(fh, off, size)

    @_fuse_errors
    def write(self, fh, off, buf):
        return self.ops.write(fh, off, buf)

    @_fuse_errors
    def flush(self, fh):
        self.ops.flush(fh)

    @_fuse_errors
    def release(self, fh):
        self.ops.release(fh)

    @_fuse_errors
    def fsync(self, fh, datasync):
        self.ops.fsync(fh, datasync)

    # -- xattrs ---------------------------------------------------------------------------
    @_fuse_errors
    def getxattr(self, inode, name, ctx):
        return self.ops.getxattr(inode, name)

    @_fuse_errors
    def setxattr(self, inode, name, value, ctx):
        # pyfuse3 has already applied XATTR_CREATE / XATTR_REPLACE
        self.ops.setxattr(inode, name, value)

    @_fuse_errors
    def listxattr(self, inode, ctx):
        # pyfuse3 wants the names as a list
        return [n for n in self.ops.listxattr(inode).split(b"\0") if n]

    @_fuse_errors
    def removexattr(self, inode, name, ctx):
        self.ops.removexattr(inode, name)

    # -- the filesystem ---------------------------------------------------------------------
    @_fuse_errors
    def statfs(self, ctx):
        st = pyfuse3.StatvfsData()
        for field, value in self.ops.statfs().items():
            setattr(st, field, value)
        return st
