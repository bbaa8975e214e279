"""Extract files or whole trees from an image onto the host.

Everything is created relative to directory file descriptors that fstool
opened itself with O_NOFOLLOW, and names are checked before use, so no name
in a damaged or hostile image can place anything outside the destination.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from ..errors import CorruptionError, FsToolError
from ..format import constants as C

CHUNK = 8 << 20


class ExtractError(FsToolError):
    pass


@dataclass
class ExtractStats:
    files: int = 0
    dirs: int = 0
    bytes: int = 0
    warnings: list = field(default_factory=list)   # could not preserve something
    errors: list = field(default_factory=list)     # entries that were not extracted


def _safe_name(name: bytes) -> bool:
    return bool(name) and name not in (b".", b"..") and b"/" not in name and b"\0" not in name


def _proc_path(dir_fd: int, name: bytes) -> bytes:
    return b"/proc/self/fd/%d/" % dir_fd + name


class Extractor:
    def __init__(self, fs, *, owners: bool | None = None, xattrs: bool = True,
                 progress=None):
        self.fs = fs
        self.owners = (os.geteuid() == 0) if owners is None else owners
        self.xattrs = xattrs
        self.stats = ExtractStats()
        self.links: dict[int, bytes] = {}   # ino -> host path of its first name
        self.progress = progress

    # -- entry points --------------------------------------------------------
    def extract(self, src: str, dest: str, force: bool = False) -> ExtractStats:
        node = self.fs.lookup(src)
        dest_b = os.fsencode(dest)
        if node.is_dir:
            if os.path.lexists(dest_b):
                if not os.path.isdir(dest_b) or os.path.islink(dest_b):
                    raise ExtractError(f"{dest}: exists and is not a directory")
                if os.listdir(dest_b) and not force:
                    raise ExtractError(f"{dest}: directory is not empty (use --force to "
                                       "extract into it anyway)")
            else:
                os.mkdir(dest_b, 0o700)
            fd = os.open(dest_b, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                self._tree(fd, os.path.abspath(dest_b), node)
                parent_fd = os.open(os.path.dirname(os.path.abspath(dest_b)) or b"/",
                                    os.O_RDONLY | os.O_DIRECTORY)
                try:
                    self._finish(parent_fd, os.path.basename(os.path.abspath(dest_b)), node,
                                 fd=fd)
                finally:
                    os.close(parent_fd)
            finally:
                os.close(fd)
            self.stats.dirs += 1
            return self.stats
        # a single file: DEST is a directory to put it in, or the new name
        if os.path.isdir(dest_b) and not os.path.islink(dest_b):
            parent, name = os.path.abspath(dest_b), os.fsencode(src.rstrip("/").rsplit("/", 1)[-1])
        else:
            parent, name = os.path.split(os.path.abspath(dest_b))
        if os.path.lexists(os.path.join(parent, name)) and not force:
            raise ExtractError(f"{os.fsdecode(os.path.join(parent, name))}: already exists "
                               "(use --force to replace it)")
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if force and os.path.lexists(os.path.join(parent, name)):
                os.unlink(name, dir_fd=fd)
            self._one(fd, parent, name, node)
        finally:
            os.close(fd)
        return self.stats

    # -- walking ------------------------------------------------------------------
    def _tree(self, dir_fd: int, host_dir: bytes, dnode) -> None:
        seen_dirs = {dnode.ino}
        stack = [(dir_fd, host_dir, self._entries(dnode), dnode, None)]
        while stack:
            fd, hdir, it, node, _ = stack[-1]
            try:
                ent = next(it, None)
            except FsToolError as e:     # a damaged directory: keep what was read
                self.stats.errors.append(f"{os.fsdecode(hdir)}: {e}")
                ent = None
            if ent is None:
                stack.pop()
                if stack:
                    pfd = stack[-1][0]
                    self._finish(pfd, os.path.basename(hdir), node, fd=fd)
                    os.close(fd)
                continue
            if not _safe_name(ent.name):
                self.stats.errors.append(f"{os.fsdecode(hdir)}: refused unsafe name "
                                         f"{ent.name!r} in the image")
                continue
            try:
                child = self.fs.inode(ent.ino)
            except FsToolError as e:
                self.stats.errors.append(f"{os.fsdecode(os.path.join(hdir, ent.name))}: {e}")
                continue
            if child.is_dir:
                if child.ino in seen_dirs:
                    self.stats.errors.append(f"{os.fsdecode(os.path.join(hdir, ent.name))}: "
                                             "directory cycle in the image; not followed")
                    continue
                seen_dirs.add(child.ino)
                try:
                    try:
                        os.mkdir(ent.name, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass    # merging into an existing tree (--force)
                    # O_NOFOLLOW: a symlink planted under this name is never entered
                    cfd = os.open(ent.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                  dir_fd=fd)
                except OSError as e:
                    self.stats.errors.append(f"{os.fsdecode(os.path.join(hdir, ent.name))}: "
                                             f"{e.strerror}")
                    continue
                self.stats.dirs += 1
                stack.append((cfd, os.path.join(hdir, ent.name), self._entries(child),
                              child, None))
            else:
                self._one(fd, hdir, ent.name, child)

    def _entries(self, dnode):
        """A directory's entries sorted by name, read lazily on first use so a
        damaged directory is reported where it is met."""
        yield from sorted(self.fs.listdir(dnode), key=lambda e: e.name)

    def _one(self, dir_fd: int, host_dir: bytes, name: bytes, node) -> None:
        host_path = os.path.join(host_dir, name)
        try:
            if node.nlink > 1 and node.ino in self.links:
                os.link(self.links[node.ino], name, dst_dir_fd=dir_fd, follow_symlinks=False)
                return
            if self._create(dir_fd, name, node):
                if node.nlink > 1:
                    self.links[node.ino] = host_path
        except FsToolError as e:
            self.stats.errors.append(f"{os.fsdecode(host_path)}: {e}")
        except OSError as e:
            self.stats.errors.append(f"{os.fsdecode(host_path)}: {e.strerror}")

    def _create(self, dir_fd: int, name: bytes, node) -> bool:
        ifmt = node.ifmt
        if ifmt == C.S_IFREG:
            if node.size >= 1 << 63:    # the kernel's inode verifier rejects these too
                raise CorruptionError("inode", f"inode {node.ino}: size {node.size} is "
                                      "beyond the largest file", ino=node.ino, field="di_size")
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                         dir_fd=dir_fd)
            try:
                self._copy_data(fd, node)
                self._finish(dir_fd, name, node, fd=fd)
            finally:
                os.close(fd)
            self.stats.files += 1
            return True
        if ifmt == C.S_IFLNK:
            os.symlink(self.fs.readlink(node), name, dir_fd=dir_fd)
        elif ifmt == C.S_IFIFO:
            os.mkfifo(name, 0o600, dir_fd=dir_fd)
        elif ifmt == C.S_IFSOCK:
            os.mknod(name, stat.S_IFSOCK | 0o600, dir_fd=dir_fd)
        elif ifmt in (C.S_IFCHR, C.S_IFBLK):
            major, minor = node.rdev
            try:
                os.mknod(name, ifmt | 0o600, os.makedev(major, minor), dir_fd=dir_fd)
            except PermissionError:
                self.stats.warnings.append(f"{os.fsdecode(name)}: device node not created "
                                           "(needs root)")
                return False
        else:
            self.stats.errors.append(f"{os.fsdecode(name)}: unknown file type "
                                     f"0o{node.mode:o}")
            return False
        self._finish(dir_fd, name, node)
        self.stats.files += 1
        return True

    def _copy_data(self, fd: int, node) -> None:
        """Write the file's data, leaving holes and unwritten extents as holes."""
        size = node.size
        if node.format == C.XFS_DINODE_FMT_LOCAL:
            os.write(fd, node.read(0, size))
        else:
            bs = self.fs.sb.blocksize
            for startoff, _sb, count, unwritten in node.extents():
                if unwritten:
                    continue
                pos = startoff * bs
                end = min(size, pos + count * bs)
                while pos < end:
                    n = min(CHUNK, end - pos)
                    data = node.read(pos, n)
                    os.pwrite(fd, data, pos)
                    pos += n
                    self.stats.bytes += n
        os.ftruncate(fd, size)

    def _finish(self, dir_fd: int, name: bytes, node, fd: int | None = None) -> None:
        """Owner, mode, xattrs and timestamps, in the order that keeps them."""
        is_link = node.is_symlink
        where = os.fsdecode(name)
        if self.owners:
            try:
                os.chown(name, node.uid, node.gid, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as e:
                self.stats.warnings.append(f"{where}: owner not set: {e.strerror}")
        if self.xattrs:
            target = fd if fd is not None else _proc_path(dir_fd, name)
            for xname, value in self.fs.xattrs(node).items():
                try:
                    if isinstance(target, int):
                        os.setxattr(target, xname, value)
                    else:
                        os.setxattr(target, xname, value, follow_symlinks=False)
                except OSError as e:
                    self.stats.warnings.append(f"{where}: xattr {xname} not set: {e.strerror}")
                except ValueError:      # a name holding a NUL byte: no host call takes it
                    self.stats.warnings.append(f"{where}: xattr {xname!r} not set: its name "
                                               "holds a NUL byte")
        if not is_link:
            os.chmod(name, node.perm, dir_fd=dir_fd)
        os.utime(name, ns=(node.atime_ns, node.mtime_ns), dir_fd=dir_fd, follow_symlinks=False)
