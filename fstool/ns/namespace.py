"""Names and inodes on the write path: create, link, unlink, rename and
change attributes of files in an image, inside a Writer's transaction,
using only the session's public parts (its transaction, space and inode
allocators, inode encoder).

Two ways of changing directories:

* incremental (the default, for edits and the FUSE mount): every insert,
  remove or replace of one entry changes only the blocks the kernel would
  (:mod:`fstool.ns.dirops`), in the open transaction; nothing about a
  directory is kept once the transaction commits;
* bulk (``Namespace(w, bulk=True)``, for populate): directories are kept as
  ordered entry maps and encoded whole at :meth:`Namespace.finish`, in
  whichever form their size calls for, which is the fast path for filling
  new directories.

Regular files are written as they come: data first, then the inode.

The methods the FUSE mount codes against (every one inside an open
transaction unless said otherwise; names are bytes; errors are
:mod:`fstool.errors` classes carrying the kernel's errno)::

    lookup_child(parent, name) -> (ino, ftype) | None   # also outside a transaction
    readdir(ino, cookie=0) -> iter of (name, ino, ftype, next_cookie)
        # also outside a transaction (then nothing is pinned: the way to
        # list a large directory); dir2 cookies as the kernel's: "." and
        # ".." first; a cookie stays valid across inserts and removes of
        # other entries; 0 starts over
    mkdir(parent, name, meta) -> ino
    create_file(parent, name, meta, stream=None, size=0, data_ranges=None) -> ino
    symlink(parent, name, target, meta) -> ino
    mknod(parent, name, kind, meta, rdev=(0, 0)) -> ino
    link(parent, name, ino)
    unlink(parent, name, rmdir=False, keep=False) -> ino
        # keep=True (or is_open(ino) true): a last link dropped leaves the
        # inode allocated on the AGI unlinked list; inactivate(ino) frees it
    rename(src_parent, src_name, dst_parent, dst_name, flags=0)
        # flags: RENAME_NOREPLACE (1), RENAME_EXCHANGE (2)
    setattr(ino, mode=, uid=, gid=, atime_ns=, mtime_ns=)
    get_xattr(ino, name) -> bytes          # name as the VFS gives it: "user.x";
                                           # get/list also outside a transaction
    set_xattr(ino, name, value, flags=0)   # XATTR_CREATE (1), XATTR_REPLACE (2)
    remove_xattr(ino, name)
    list_xattr(ino) -> [name, ...]
    inactivate(ino)

On a filesystem with parent pointers (``mkfs -n parent=1``) every change
of a name changes the parent pointers of the inode it names in the same
transaction, as the kernel does: a new inode is written with the pointer of
its first name in its attr fork, ``link`` adds one, ``unlink`` of a name
whose inode lives on removes one, ``rename`` replaces one (both, for an
exchange).  An attr fork in blocks is changed in place, one hash path per
pointer (attrops.AttrFork, which hashes a pointer with the parent hash and
finds it by name and value); a shortform one goes through the attr fork
writer of the xattrs (the fork encoded whole, in the form its size calls
for).  A parent pointer names the directory, the directory's generation
and the entry's name.

``ns.now`` is the time stamped on changes; a long-lived caller sets it
before each operation, and calls ``ns.committed()`` after each commit (the
per-transaction directory state is dropped; an aborted transaction's is
never reused).  ``ns.is_open`` (a callable, None by default) tells
unlink and rename which inodes are still open and must outlive their last
name.
"""
from __future__ import annotations

import os
import stat as pystat
import struct
from operator import itemgetter

from .._backend import writers
from ..alloc import rmap as R
from ..errors import (CorruptionError, ExistsError, FsToolError, InvalidArgument,
                      IsADirectoryImageError, NoDataError, NotADirectoryImageError, NotEmptyError,
                      NotFoundError, NotPermittedError, RangeError, TooBigError)
from ..format import constants as C
from ..format import parent as P
from ..format.structs import DINODE
from ..fs import attr as FA, attrleaf as ALEAF
from ..fs.btree import pack_bmbt_rec
from ..fs.icore import InodeEdit, InodeSpec, encode_dev, encode_ts
from . import attrbuild as AB, dirbuild as DB, files as F
from .attrops import AttrFork
from .bmap import ForkMap, free_fork, owned_blocks, owned_extents
from .dirbuild import check_name, check_names
from .dirops import Dir, sf_encode
from .writer import Writer

FTYPE = {C.S_IFREG: C.XFS_DIR3_FT_REG_FILE, C.S_IFDIR: C.XFS_DIR3_FT_DIR,
         C.S_IFCHR: C.XFS_DIR3_FT_CHRDEV, C.S_IFBLK: C.XFS_DIR3_FT_BLKDEV,
         C.S_IFIFO: C.XFS_DIR3_FT_FIFO, C.S_IFSOCK: C.XFS_DIR3_FT_SOCK,
         C.S_IFLNK: C.XFS_DIR3_FT_SYMLINK}


DirNotEmpty = NotEmptyError
# a plain file's size in an item of create_plain_files
_SIZE = itemgetter(6)
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
XATTR_CREATE = 1
XATTR_REPLACE = 2


class Meta:
    """Ownership, permissions and times for a new inode."""
    __slots__ = ("perm", "uid", "gid", "atime_ns", "mtime_ns", "ctime_ns", "crtime_ns",
                 "xattrs", "pptrs")

    def __init__(self, perm=0o644, uid=0, gid=0, atime_ns=0, mtime_ns=0, ctime_ns=0,
                 crtime_ns=None, xattrs=(), pptrs=()):
        self.perm = perm & 0o7777
        self.uid, self.gid = uid, gid
        self.atime_ns, self.mtime_ns, self.ctime_ns = atime_ns, mtime_ns, ctime_ns
        self.crtime_ns = ctime_ns if crtime_ns is None else crtime_ns
        self.xattrs = list(xattrs)      # [("user.x", b"value"), ...]
        # parent pointers, as attributes: [(XFS_ATTR_PARENT, name, record)]
        self.pptrs = list(pptrs)


def with_pptrs(meta, pptrs) -> Meta:
    """A Meta as ``meta`` (a Meta, or what stands in for one: populate's
    source entries) with the parent pointers ``pptrs``; the caller's may
    serve several new inodes, so it is copied."""
    return Meta(meta.perm, meta.uid, meta.gid, meta.atime_ns, meta.mtime_ns, meta.ctime_ns,
                meta.crtime_ns, meta.xattrs, pptrs)


def has_attrs(meta) -> bool:
    """Whether a new inode of ``meta`` has an attr fork: xattrs or parent
    pointers."""
    return bool(meta.xattrs or getattr(meta, "pptrs", None))


class DirState:
    """A directory being changed: entries in on-disk order."""
    __slots__ = ("ino", "parent", "entries", "new", "meta", "nlink", "attrs", "changed")

    def __init__(self, ino, parent, entries, new, meta=None, nlink=2):
        self.ino = ino
        self.parent = parent
        self.entries = entries          # dict name -> (ino, ftype), insertion ordered
        self.new = new
        self.meta = meta
        self.nlink = nlink
        self.attrs = None
        self.changed = True


class Namespace:
    def __init__(self, w: Writer, now_ns: int | None = None, *, bulk: bool = False):
        self.w = w
        self.fs = w.fs
        self.now = w.now_ns() if now_ns is None else now_ns
        self.bulk = bulk
        self.is_open = None
        # (parent, name) the caller has just found missing, with nothing
        # changed since: the next create of it needs no second lookup
        self.known_absent = None
        self.dirs: dict[int, DirState] = {}
        self._dcache: dict = {}             # ino -> dirops.Dir, for one transaction
        # with defer_saves, a directory gaining names has its inode written
        # once before the commit (or when its attributes are asked for),
        # not at every name: ino -> (Dir, time of its last change)
        self.defer_saves = False
        self.unsaved: dict = {}
        self._dkeep: dict = {}              # ino -> dirops.Dir, while still current
        self._dtx = None
        # directories whose modification time is given (by their source, or
        # setattr) rather than the time they last changed: kept across the
        # transactions of a session, so that a directory filled over several
        # batches keeps its source's time
        self.mtime_set: dict[int, int] = {}
        self.files = 0
        self.bytes = 0
        self.pool = F.DataPool(w)      # blocks for small files' data, ahead
        self.pptr = w.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_PARENT)
        self._sf_fit: dict = {}         # _sf_pointer's cache
        # attribute changes also find entries left incomplete (log recovery)
        self.match_incomplete = False

    def committed(self) -> None:
        """The transaction holding this namespace's changes committed: new
        directories now exist, and further changes start from there."""
        for st in self.dirs.values():
            st.new = False
            st.meta = None
            st.changed = False
        for d in self._dcache.values():
            d._bufs.clear()
        self._dcache = {}
        self._dtx = None
        if not self.bulk:
            self.dirs.clear()

    # -- incremental directories ---------------------------------------------------------
    def _dir(self, ino: int):
        """The directory ``ino`` for incremental changes: one object per
        transaction, and kept beyond it while the directory's inode is the
        one it was made from (the read model's decoded inode is the same
        object until anything writes the inode, and an abort drops every
        decoded inode) with no change of its own left unsaved."""
        tx = self.w.tx
        if tx is not None:
            if self._dtx is not tx:
                self._dcache = {}
                self._dtx = tx
            d = self._dcache.get(ino)
            if d is not None:
                d.now = self.now
                return d
        d = self._dkeep.get(ino)
        if d is None or d.node is None or d.map_changed or d.blocks_delta or \
                d.nlink_delta or self.fs.inode(ino) is not d.node:
            d = Dir(self.w, ino, self.now)
            keep = self._dkeep
            if len(keep) >= 4096:
                keep.clear()
            keep[ino] = d
        d.now = self.now
        if tx is not None:
            self._dcache[ino] = d
        return d

    def _forget_dir(self, ino: int) -> None:
        self._dcache.pop(ino, None)
        self._dkeep.pop(ino, None)

    def _incremental(self, ino: int) -> bool:
        return not self.bulk and ino not in self.dirs

    def lookup_child(self, parent: int, name: bytes):
        """(ino, ftype) of ``name`` in directory ``parent``, or None; reads
        only the blocks a hashed lookup needs."""
        if self._incremental(parent):
            if name == b".":
                self._dir(parent)
                return parent, C.XFS_DIR3_FT_DIR
            return self._dir(parent).lookup(name)
        st = self.dir_state(parent)
        if name == b".":
            return parent, C.XFS_DIR3_FT_DIR
        if name == b"..":
            return st.parent, C.XFS_DIR3_FT_DIR
        return st.entries.get(name)

    def readdir(self, ino: int, cookie: int = 0):
        """(name, ino, ftype, next_cookie) from ``cookie`` on (see the module
        docstring)."""
        if not self._incremental(ino):
            raise FsToolError("internal: readdir of a directory built in bulk before "
                              "its transaction committed")
        prev = None
        for pos, name, cino, ft in self._dir(ino).entries_from(cookie):
            if prev is not None:
                yield prev[0], prev[1], prev[2], pos
            if name is None:
                return
            prev = (name, cino, ft)

    def list_names(self, ino: int) -> list:
        """Every name in a directory but "." and ".."."""
        if not self._incremental(ino):
            return list(self.dir_state(ino).entries)
        return [n for n, _i, _f, _c in self.readdir(ino) if n not in (b".", b"..")]

    # -- reading the current state ---------------------------------------------
    def raw_inode(self, ino: int) -> bytes:
        return self.w.inodes.raw_inode(ino)

    def dir_state(self, ino: int) -> DirState:
        st = self.dirs.get(ino)
        if st is not None:
            return st
        node = self.fs.inode(ino)
        if not node.is_dir:
            raise NotADirectoryImageError(f"inode {ino}")
        entries = {e.name: (e.ino, e.ftype) for e in self.fs.listdir(node)}
        st = DirState(ino, self.fs.parent_of(node), entries, new=False, nlink=node.nlink)
        st.changed = False
        self.dirs[ino] = st
        return st

    def lookup(self, path: str) -> int:
        """Inode number of an absolute path inside the image (no symlinks
        followed; '.' and '..' resolved against the image), seeing this
        transaction's changes."""
        ino = self.w.sb.rootino
        for part in [p for p in path.encode("utf-8", "surrogateescape").split(b"/") if p]:
            try:
                ent = self.lookup_child(ino, part)
            except NotADirectoryImageError:
                raise NotADirectoryImageError(path) from None
            if ent is None:
                raise NotFoundError(path)
            ino = ent[0]
        return ino

    def child(self, parent: int, name: bytes):
        return self.lookup_child(parent, name)

    # -- creating ---------------------------------------------------------------
    def _new_name(self, parent: int, name: bytes):
        """Check that ``name`` is valid and unused in ``parent``."""
        check_name(name)
        absent, self.known_absent = self.known_absent, None
        if absent != (parent, name) and self.lookup_child(parent, name) is not None:
            raise ExistsError(f"{name.decode('utf-8', 'surrogateescape')}: already exists")
        return parent

    # -- parent pointers ---------------------------------------------------------------
    def _dir_gen(self, ino: int) -> int:
        """A directory's generation (di_gen); 0 for one made in bulk whose
        inode is not written yet (fstool writes every new inode with 0)."""
        st = self.dirs.get(ino)
        if st is not None and st.new:
            return 0
        if self._incremental(ino):
            # the Dir of a directory gaining the name holds it (a live
            # inode's generation never changes)
            return self._dir(ino).gen
        return _DI_GEN.get(self.raw_inode(ino))

    def _pptr(self, parent: int, name: bytes) -> tuple:
        """The parent pointer of the entry ``name`` of directory ``parent``,
        as an attribute (flags, name, value)."""
        return C.XFS_ATTR_PARENT, name if type(name) is bytes else bytes(name), \
            P.pack_rec(parent, self._dir_gen(parent))

    def _named(self, meta: Meta, parent: int, name: bytes) -> Meta:
        """``meta`` for a new inode named ``name`` in ``parent``: with its
        parent pointer where the filesystem keeps them."""
        return with_pptrs(meta, [self._pptr(parent, name)]) if self.pptr else meta

    def _pptrs_of(self, ino: int) -> list:
        """The parent pointers of ``ino`` as attributes (flags, name, value)."""
        st = self.dirs.get(ino)
        if st is not None and st.new:
            return list(st.meta.pptrs)
        return [(C.XFS_ATTR_PARENT, bytes(n), bytes(v))
                for _f, n, v in FA.iter_attrs(self.fs.inode(ino), True, P.is_parent)]

    def _change_pptrs(self, ino: int, add=(), remove=()) -> None:
        """Add and remove parent pointers of ``ino`` (attributes as _pptr
        makes them); nothing without the feature.  A pointer to remove that
        is not there is left alone.  An attr fork in blocks is changed in
        place (attrops.AttrFork, one hash path per pointer); a shortform
        one is written again whole."""
        if not self.pptr:
            return
        fork = self._attr_blocks(ino)
        if fork is not None:
            for flags, name, value in remove:
                fork.remove(flags, name, value=value)
            for flags, name, value in add:
                fork.set(flags, name, value)
            fork.save()
            self._patch(ino, ctime_ns=self.now)
            if remove and fork.leaf_form():
                self._leaf_to_shortform(ino, fork.leaf_entries())
            return
        cur = self._pptrs_of(ino)
        for t in remove:
            if t in cur:
                cur.remove(t)
        cur.extend(add)
        self.set_xattrs(ino, self._xattrs(ino), pptrs=cur)

    def renumber_parent(self, ino: int, names, old: int, new: int, gen: int) -> None:
        """The parent pointers of ``ino`` for its entries ``names`` in
        directory ``old`` name ``new`` instead: the directory got a new
        inode number (a shrink moved it), its generation ``gen`` kept.  A
        pointer's hash covers the parent's number, so each is taken out and
        put back (as the kernel's parent pointer replace does).  ``ino``'s
        ctime stays: nothing of the file changed."""
        ctime = DINODE.unpack(self.raw_inode(ino))["di_ctime"]
        self._change_pptrs(
            ino, add=[(C.XFS_ATTR_PARENT, bytes(n), P.pack_rec(new, gen)) for n in names],
            remove=[(C.XFS_ATTR_PARENT, bytes(n), P.pack_rec(old, gen)) for n in names])
        self._patch(ino, ctime=ctime)

    def _add_entry(self, parent: int, name: bytes, ino: int, ftype: int,
                   nlink_delta: int = 0) -> None:
        """Add a name that the caller has already validated."""
        if self._incremental(parent):
            d = self._dir(parent)
            d.add(name, ino, ftype)
            d.nlink_delta += nlink_delta
            if self.defer_saves and not nlink_delta:
                if parent in self.unsaved:
                    d.unsaved += 1
                self.unsaved[parent] = (d, self.now)
                return
            d.save()
            return
        st = self.dir_state(parent)
        if name in st.entries:
            raise ExistsError(f"{name.decode('utf-8', 'surrogateescape')}: already exists")
        st.entries[name] = (ino, ftype)
        st.nlink += nlink_delta
        st.changed = True

    def _attr_fork(self, ino: int, meta: Meta, data_fmt: int, data_bytes: int,
                   forkoff: int | None = None):
        """(forkoff, aformat, anextents, attr literal, attr blocks) for the
        xattrs and parent pointers of ``meta``."""
        if not has_attrs(meta):
            return 0, C.XFS_DINODE_FMT_EXTENTS, 0, b"", 0
        w = self.w
        attrs = self._attr_list(meta)
        fo, shortform = F.attr_forkoff(w.sb.inodesize, data_fmt, data_bytes, attrs)
        if forkoff is None:
            forkoff = fo
        elif shortform and AB.xattr_sf_size(attrs) > \
                w.sb.inodesize - C.XFS_DINODE_CORE_SIZE - forkoff * 8:
            shortform = False
        space = w.sb.inodesize - C.XFS_DINODE_CORE_SIZE - forkoff * 8
        plan = AB.encode_xattrs(attrs, ino=ino, uuid=w.uuid, blocksize=w.sb.blocksize,
                                inline_space=space if shortform else 0)
        if plan.local is not None:
            return forkoff, C.XFS_DINODE_FMT_LOCAL, 0, plan.local, 0
        exts = F.place_plan(w, plan, w.inodes.ino_fsb(ino), owner=R.fork(ino, 0, True))
        fork = F.map_fork(w, ino, exts, space, attr=True)
        return forkoff, fork.fmt, fork.nextents, fork.literal, fork.blocks

    def _put_new(self, ino: int, mode: int, meta: Meta, *, nlink=1, size=0, fork=None,
                 data=b"", fmt=C.XFS_DINODE_FMT_EXTENTS, nextents=0, nblocks=0,
                 forkoff=None) -> None:
        w = self.w
        if fork is not None:
            fmt, data, nextents, nblocks = fork.fmt, fork.literal, fork.nextents, fork.blocks
        forkoff, afmt, anext, alit, ablocks = self._attr_fork(ino, meta, fmt, len(data),
                                                              forkoff)
        if forkoff and len(data) > forkoff * 8:
            raise FsToolError(f"inode {ino}: data fork of {len(data)} bytes does not fit "
                              "beside its xattrs")
        spec = InodeSpec(mode=mode, nlink=nlink, uid=meta.uid, gid=meta.gid,
                         atime_ns=meta.atime_ns, mtime_ns=meta.mtime_ns,
                         ctime_ns=meta.ctime_ns, crtime_ns=meta.crtime_ns, size=size,
                         nblocks=nblocks + ablocks, fmt=fmt, nextents=nextents, data=data,
                         aformat=afmt, anextents=anext, forkoff=forkoff, attr=alit)
        w.inodes.put_inode(ino, w.enc.encode(ino, spec))

    def mkdir(self, parent: int, name: bytes, meta: Meta) -> int:
        self._new_name(parent, name)
        meta = self._named(meta, parent, name)
        ino = self.w.inodes.alloc_inode(parent, is_dir=True)
        if meta.mtime_ns != self.now:
            self.mtime_set[ino] = meta.mtime_ns
        if self._incremental(parent):
            # an empty shortform directory, as xfs_dir2_sf_create leaves it
            sf = sf_encode(parent, [])
            forkoff = self._forkoff_for(meta, C.XFS_DINODE_FMT_LOCAL, len(sf))
            self._put_new(ino, C.S_IFDIR | meta.perm, meta, nlink=2, size=len(sf),
                          fmt=C.XFS_DINODE_FMT_LOCAL, data=sf, forkoff=forkoff)
            self._add_entry(parent, name, ino, C.XFS_DIR3_FT_DIR, nlink_delta=1)
            return ino
        self._add_entry(parent, name, ino, C.XFS_DIR3_FT_DIR, nlink_delta=1)
        self.dirs[ino] = DirState(ino, parent, {}, new=True, meta=meta)
        return ino

    def create_file(self, parent: int, name: bytes, meta: Meta, stream=None, size: int = 0,
                    data_ranges=None) -> int:
        if not size and not meta.xattrs:
            # the common empty file: no data, no attr fork (but its parent
            # pointer)
            ino = self.new_empty_file(parent, name, meta)
            self.name_new_file(parent, name, ino)
            return ino
        self._new_name(parent, name)
        meta = self._named(meta, parent, name)
        w = self.w
        ino = w.inodes.alloc_inode(parent, is_dir=False)
        exts = F.write_data(w, ino, w.inodes.ino_fsb(ino), stream, size, data_ranges,
                            self.pool) if size else []
        lit = w.sb.inodesize - C.XFS_DINODE_CORE_SIZE
        forkoff = self._forkoff_for(meta, C.XFS_DINODE_FMT_EXTENTS,
                                    len(F.merge_extents(exts)) * F.BMBT_REC)
        fork = F.map_fork(w, ino, exts, forkoff * 8 or lit)
        self._add_entry(parent, name, ino, C.XFS_DIR3_FT_REG_FILE)
        self._put_new(ino, C.S_IFREG | meta.perm, meta, size=size, fork=fork, forkoff=forkoff)
        self.files += 1
        self.bytes += size
        return ino

    def new_empty_file(self, parent: int, name: bytes, meta: Meta) -> int:
        """The first half of creating an empty file without xattrs: the name
        checked, the inode taken and written (not yet named: the second
        half, :meth:`name_new_file`, must follow in the same transaction)."""
        self._new_name(parent, name)
        w = self.w
        ino = w.inodes.alloc_inode(parent, is_dir=False)
        sf = None
        if self.pptr and meta.ctime_ns == meta.crtime_ns:
            sf = self._sf_pointer(self._pptr(parent, name), 0)
        if sf is not None or (not self.pptr and meta.ctime_ns == meta.crtime_ns):
            w.inodes.put_simple_inode(ino, (name, meta.perm, meta.uid, meta.gid,
                                            meta.atime_ns, meta.mtime_ns),
                                      C.S_IFREG, meta.ctime_ns, sf)
        elif self.pptr:
            self._put_new(ino, C.S_IFREG | meta.perm, self._named(meta, parent, name))
        else:
            w.inodes.put_inode(ino, w.enc.simple(ino, C.S_IFREG | meta.perm, meta.uid,
                                                 meta.gid, meta.atime_ns, meta.mtime_ns,
                                                 meta.ctime_ns, meta.crtime_ns))
        self.files += 1
        return ino

    def name_new_file(self, parent: int, name: bytes, ino: int) -> None:
        """The second half: the new file's name added to ``parent``."""
        self._add_entry(parent, name, ino, C.XFS_DIR3_FT_REG_FILE)

    def create_plain_files(self, parent: int, items: list, ctime_ns: int,
                           data=None, where: str = "") -> None:
        """Create regular files without xattrs in one directory: ``items``
        holds ``(name, perm, uid, gid, atime_ns, mtime_ns)``, empty files,
        or with ``data`` = ``(buf, offsets, fds)`` the same with the size
        appended: file k's bytes in ``buf`` from ``offsets[k]`` padded with
        zeros to whole blocks, or when ``fds[k]`` is not -1, copied from that
        open host file as create_file copies one (shared blocks where it
        can; a descriptor handed to the device's thread behind is set to -1
        in ``fds``: the caller closes the others).  Change and creation
        times are ``ctime_ns``.  Inodes and
        blocks are taken, data written and entries added as create_file
        would take, write and add them one file after another.  A file that
        cannot be copied is named with ``where`` (its directory's path in
        the caller's terms) before its name: ``F.CopyFailed``."""
        names = [it[0] for it in items]
        ft = C.XFS_DIR3_FT_REG_FILE
        placed, pst = self._claim_names(parent, names, ft)
        inos, forks = self._place_files(parent, items, ctime_ns, data, placed, where)
        if self.pptr:
            self._put_plain_named(parent, names, inos, items, ctime_ns, forks)
        elif forks is not None and None in forks:
            # those with a block map are stored already
            keep = [k for k, f in enumerate(forks) if f is not None]
            batch = ([inos[k] for k in keep], [items[k] for k in keep],
                     [forks[k] for k in keep])
            self.w.inodes.put_simple_inodes(batch[0], batch[1], C.S_IFREG, ctime_ns, batch[2])
        else:
            self.w.inodes.put_simple_inodes(inos, items, C.S_IFREG, ctime_ns, forks)
        if pst is not None:
            pst.entries.update(zip(names, [(ino, ft) for ino in inos]))
            pst.changed = True
        self.files += len(items)
        if forks is not None:
            self.bytes += sum(map(_SIZE, items))

    def _claim_names(self, parent: int, names: list, ft: int) -> tuple:
        """The new names of a batch checked (all new to ``parent`` and
        distinct): ``(placed, None)`` for a directory changed in place,
        ``placed(k, ino)`` adding name k as its inode is taken, or ``(None,
        state)`` for one built in bulk, whose entries the caller adds."""
        check_names(names)
        if self._incremental(parent):
            if len(set(names)) != len(names):
                raise ExistsError("a name is given twice")
            for name in names:
                self._new_name(parent, name)

            def placed(k: int, ino: int) -> None:
                self._add_entry(parent, names[k], ino, ft)
            return placed, None
        pst = self.dir_state(parent)
        fresh = dict.fromkeys(names)
        if len(fresh) != len(names) or not pst.entries.keys().isdisjoint(fresh):
            for name in names:
                self._new_name(parent, name)
            raise ExistsError("a name is given twice")
        return None, pst

    def inline_symlinks(self) -> int:
        """The longest target :meth:`create_symlinks` takes (the inode's
        literal area; with parent pointers, see also
        :meth:`symlink_in_batch`)."""
        return self.w.sb.inodesize - C.XFS_DINODE_CORE_SIZE

    def symlink_in_batch(self, name: bytes, target: bytes) -> bool:
        """Whether :meth:`create_symlinks` takes a symlink named ``name``
        with ``target`` (at most :meth:`inline_symlinks` bytes): always
        without parent pointers; with them, when its pointer stays in
        shortform beside the target, as :meth:`symlink` would keep it."""
        if not self.pptr:
            return True
        return self._sf_fits(len(name), len(target), C.XFS_DINODE_FMT_LOCAL)

    def create_symlinks(self, parent: int, items: list, targets: list, ctime_ns: int) -> None:
        """Create symlinks without xattrs in one directory, as many calls
        of :meth:`symlink` would: ``items`` holds ``(name, perm, uid, gid,
        atime_ns, mtime_ns)``, ``targets`` their targets, each held in the
        inode (at most :meth:`inline_symlinks` bytes).  Change and creation
        times are ``ctime_ns``.  The inodes are written in one pass
        (``put_simple_inodes`` with local data forks)."""
        limit = self.inline_symlinks()
        for target in targets:
            AB.check_symlink_target(target)
            if len(target) > limit:
                raise InvalidArgument(f"symlink target of {len(target)} bytes: not held in "
                                      f"the inode (at most {limit} bytes here)")
        names = [it[0] for it in items]
        attrs = None
        if self.pptr:
            # each with its parent pointer in a shortform attr fork
            rec = P.pack_rec(parent, self._dir_gen(parent))
            attrs = []
            for name, target in zip(names, targets):
                sf = self._sf_pointer((C.XFS_ATTR_PARENT, bytes(name), rec), len(target),
                                      C.XFS_DINODE_FMT_LOCAL)
                if sf is None:
                    raise InvalidArgument(f"symlink {name!r}: its target and parent pointer "
                                          "are not both held in the inode")
                attrs.append(sf)
        ft = C.XFS_DIR3_FT_SYMLINK
        placed, pst = self._claim_names(parent, names, ft)
        inos, _ = self._place_files(parent, items, ctime_ns, None, placed)
        self.w.inodes.put_simple_inodes(inos, items, C.S_IFLNK, ctime_ns, attrs=attrs,
                                        lits=targets)
        if pst is not None:
            pst.entries.update(zip(names, [(ino, ft) for ino in inos]))
            pst.changed = True

    def _put_plain_named(self, parent: int, names: list, inos: list, items: list,
                         ctime_ns: int, forks) -> None:
        """The inodes of create_plain_files on a filesystem with parent
        pointers: each written with its pointer in its attr fork (one whose
        data needed a block map, stored already, gets it through the attr
        fork writer)."""
        rec = P.pack_rec(parent, self._dir_gen(parent))
        w = self.w
        fast_inos, fast_items, fast_forks, fast_attrs = [], [], [], []
        for k, ino in enumerate(inos):
            it = items[k]
            ptr = (C.XFS_ATTR_PARENT, bytes(names[k]), rec)
            fork = forks[k] if forks is not None else (0, 0, 0, b"")
            if fork is None:
                self._change_pptrs(ino, add=[ptr])
                continue
            size, nblocks, nextents, recs = fork
            sf = self._sf_pointer(ptr, len(recs))
            if sf is not None:
                # the common case: written with the plain inodes in one pass
                fast_inos.append(ino)
                fast_items.append(it)
                fast_forks.append(fork)
                fast_attrs.append(sf)
                continue
            meta = Meta(it[1], it[2], it[3], it[4], it[5], ctime_ns, ctime_ns, (), [ptr])
            self._put_new(ino, C.S_IFREG | it[1], meta, size=size, data=recs,
                          nextents=nextents, nblocks=nblocks)
        if fast_inos:
            w.inodes.put_simple_inodes(fast_inos, fast_items, C.S_IFREG, ctime_ns,
                                       fast_forks if forks is not None else None, fast_attrs)

    def _sf_pointer(self, ptr: tuple, data_bytes: int,
                    data_fmt: int = C.XFS_DINODE_FMT_EXTENTS) -> tuple | None:
        """(forkoff, literal) of a new inode's attr fork holding its parent
        pointer ``ptr`` alone, in shortform beside ``data_bytes`` of its
        data fork in ``data_fmt`` (extent records, or a local symlink
        target), as _attr_fork would make it; None where it would not be
        that."""
        got = self._sf_fit.get((len(ptr[1]), data_bytes, data_fmt))
        if got is None:
            self._sf_fits(len(ptr[1]), data_bytes, data_fmt)
            got = self._sf_fit[(len(ptr[1]), data_bytes, data_fmt)]
        return (got[0], ALEAF.sf_encode([ptr])) if got[1] else None

    def _sf_fits(self, name_len: int, data_bytes: int, data_fmt: int) -> bool:
        """Whether a parent pointer of a name of ``name_len`` bytes stays
        alone in a shortform attr fork beside ``data_bytes`` of data fork
        in ``data_fmt``.  It hangs on the sizes alone: cached by (name
        length, data bytes, format) in ``_sf_fit``."""
        key = (name_len, data_bytes, data_fmt)
        got = self._sf_fit.get(key)
        if got is None:
            isize = self.w.sb.inodesize
            ptr = (C.XFS_ATTR_PARENT, bytes(name_len), bytes(P.XFS_PARENT_REC_SIZE))
            forkoff, shortform = F.attr_forkoff(isize, data_fmt, data_bytes, [ptr])
            fits = shortform and forkoff and data_bytes <= forkoff * 8 and \
                len(ALEAF.sf_encode([ptr])) <= isize - C.XFS_DINODE_CORE_SIZE - forkoff * 8
            got = self._sf_fit[key] = (forkoff, bool(fits))
        return got[1]

    def _place_files(self, parent: int, items: list, ctime_ns: int, data, placed,
                     where: str = "") -> tuple:
        """Inodes, and with ``data`` blocks, for the files of
        create_plain_files, the data written: ``([ino], forks)``, forks None
        without data, else ``(size, nblocks, nextents, records)`` per file
        (None where the extents needed a block map: that inode is stored
        already, by the general encoder).  ``placed(k, ino)``, when given,
        is called as each file's inode and blocks are taken."""
        w = self.w
        n = len(items)
        inos: list = []
        if data is None or not any(it[6] for it in items):
            if placed is None:
                return w.inodes.alloc_inodes(parent, n), None
            while len(inos) < n:
                for ino in w.inodes.alloc_group(parent, n - len(inos)):
                    placed(len(inos), ino)
                    inos.append(ino)
            return inos, None
        buf, offsets, fds = data
        blog = w.sb.blocklog
        bs = w.sb.blocksize
        lit = w.sb.inodesize - C.XFS_DINODE_CORE_SIZE
        ino_fsb = w.inodes.ino_fsb
        daddr = w.fs.fsb_to_daddr
        dev = w.dev
        pool = self.pool
        view = memoryview(buf)
        forks: list = []
        k = 0
        # the small files' data, as [image offset, start, end in buf]: pieces
        # that follow one another in buf and on the device are one write,
        # made once the slice's blocks are all taken (they are free space
        # until the commit, so the order of these writes does not matter)
        writes: list = []
        # while the pool's run in the files' AG holds them, files read into
        # buf take their blocks natively (writers.place_pooled, as
        # DataPool.take would); the others, and a file the run cannot hold,
        # the general way (which refills the run)
        fast = pool is not None and placed is None
        place_pooled = writers.place_pooled
        agblklog = w.sb.agblklog
        agblocks = w.sb.agblocks
        take_max = pool.TAKE_MAX if pool is not None else 0
        places: list | None = [] if w.rmap_on else None
        while k < n:
            group = w.inodes.alloc_group(parent, n - k)
            g = 0
            while g < len(group):
                if fast and pool.tx is w.tx:
                    run = pool.runs.get(ino_fsb(group[g]) >> agblklog)
                    if run is not None:
                        m = place_pooled(items, offsets, fds, k, k + len(group) - g, run,
                                         take_max, blog, agblklog, agblocks, forks, writes,
                                         places) - k
                        if m:
                            inos.extend(group[g:g + m])
                            if places:
                                for j, fsbno, cnt in places:
                                    w.space.map_later(fsbno, cnt, R.data(inos[j], 0))
                                places.clear()
                            k += m
                            g += m
                            if g == len(group):
                                break
                ino = group[g]
                g += 1
                size = items[k][6]
                fd = fds[k]
                exts = []
                lblk = 0
                src = offsets[k]
                pieces = F.place_blocks(w, ino_fsb(ino), (size + bs - 1) >> blog, pool,
                                        owner=R.data(ino, 0)) if size else ()
                if fd >= 0:
                    pieces = list(pieces)
                    last_piece = len(pieces) - 1
                for p, (fsbno, cnt) in enumerate(pieces):
                    exts.append((lblk, fsbno, cnt))
                    off = daddr(fsbno) << C.BBSHIFT
                    if fd >= 0:
                        name = os.fsdecode(items[k][0])
                        # the last copy of the file takes its descriptor
                        # (fds[k] -1: the caller no longer closes it)
                        if F.copy_named(dev, fd, lblk << blog, off, cnt << blog, size, bs,
                                        f"{where}: {name}" if where else name,
                                        own=p == last_piece):
                            fds[k] = -1
                    else:
                        end = src + (cnt << blog)
                        last = writes[-1] if writes else None
                        if last is not None and last[2] == src and \
                                last[0] + (src - last[1]) == off:
                            last[2] = end
                        else:
                            writes.append([off, src, end])
                        src = end
                    lblk += cnt
                if len(exts) == 1:
                    forks.append((size, lblk, 1, pack_bmbt_rec(0, exts[0][1], lblk)))
                elif not exts:
                    forks.append((0, 0, 0, b""))
                else:
                    fork = F.map_fork(w, ino, exts, lit)
                    if fork.fmt == C.XFS_DINODE_FMT_EXTENTS:
                        forks.append((size, fork.blocks, fork.nextents, fork.literal))
                    else:
                        # too many pieces for the inode: a block map, by the
                        # general encoder
                        it = items[k]
                        w.inodes.put_inode(ino, w.enc.encode(ino, InodeSpec(
                            mode=C.S_IFREG | it[1], uid=it[2], gid=it[3], atime_ns=it[4],
                            mtime_ns=it[5], ctime_ns=ctime_ns, crtime_ns=ctime_ns, size=size,
                            nblocks=fork.blocks, fmt=fork.fmt, nextents=fork.nextents,
                            data=fork.literal)))
                        forks.append(None)
                if placed is not None:
                    placed(k, ino)
                inos.append(ino)
                k += 1
        for off, a, b in writes:
            dev.pwrite_data(off, view[a:b])
        return inos, forks

    @staticmethod
    def _attr_list(meta: Meta) -> list:
        out = []
        for name, value in meta.xattrs:
            flags, short = AB.split_name(name)
            out.append((flags, short, bytes(value)))
        return out + list(getattr(meta, "pptrs", ()))

    def _forkoff_for(self, meta: Meta, data_fmt: int, data_bytes: int) -> int:
        """The attr fork offset the kernel would pick when the xattrs are set
        while the data fork holds ``data_bytes``; 0 without xattrs."""
        if not has_attrs(meta):
            return 0
        return F.attr_forkoff(self.w.sb.inodesize, data_fmt, data_bytes,
                              self._attr_list(meta))[0]

    def symlink(self, parent: int, name: bytes, target: bytes, meta: Meta) -> int:
        self._new_name(parent, name)
        AB.check_symlink_target(target)
        meta = self._named(meta, parent, name)
        w = self.w
        ino = w.inodes.alloc_inode(parent, is_dir=False)
        lit = w.sb.inodesize - C.XFS_DINODE_CORE_SIZE
        fmt = C.XFS_DINODE_FMT_LOCAL if len(target) <= lit else C.XFS_DINODE_FMT_EXTENTS
        forkoff = self._forkoff_for(meta, fmt, len(target) if fmt == C.XFS_DINODE_FMT_LOCAL
                                    else F.BMBT_REC)
        space = forkoff * 8 or lit
        plan = AB.encode_symlink(target, ino=ino, uuid=w.uuid, blocksize=w.sb.blocksize,
                                 inline_space=space)
        self._add_entry(parent, name, ino, C.XFS_DIR3_FT_SYMLINK)
        if plan.local is not None:
            self._put_new(ino, C.S_IFLNK | meta.perm, meta, size=len(target),
                          fmt=C.XFS_DINODE_FMT_LOCAL, data=plan.local, forkoff=forkoff)
        else:
            exts = F.place_plan(w, plan, w.inodes.ino_fsb(ino), owner=R.data(ino, 0))
            fork = F.map_fork(w, ino, exts, space)
            self._put_new(ino, C.S_IFLNK | meta.perm, meta, size=len(target), fork=fork,
                          forkoff=forkoff)
        return ino

    def mknod(self, parent: int, name: bytes, kind: int, meta: Meta, rdev=(0, 0)) -> int:
        self._new_name(parent, name)
        meta = self._named(meta, parent, name)
        ino = self.w.inodes.alloc_inode(parent, is_dir=False)
        self._add_entry(parent, name, ino, FTYPE[kind])
        # fifos and sockets carry a (zero) device number too, like the kernel's
        dev = rdev if kind in (C.S_IFCHR, C.S_IFBLK) else (0, 0)
        self._put_new(ino, kind | meta.perm, meta, fmt=C.XFS_DINODE_FMT_DEV,
                      data=encode_dev(*dev))
        return ino

    def link(self, parent: int, name: bytes, ino: int) -> None:
        raw = self.raw_inode(ino)
        mode = struct.unpack_from(">H", raw, 2)[0]
        if pystat.S_ISDIR(mode):
            raise NotPermittedError("hard links to directories are not allowed")
        self._new_name(parent, name)
        if struct.unpack_from(">I", raw, 16)[0] == 0:
            # a file linked back from the unlinked list (O_TMPFILE style)
            self._unorphan(ino)
        self._add_entry(parent, name, ino, FTYPE.get(mode & C.S_IFMT, 0))
        self._change_pptrs(ino, add=[self._pptr(parent, name)])
        self._patch(ino, nlink_delta=1, ctime_ns=self.now)

    # -- changing existing inodes ---------------------------------------------------
    def _patch(self, ino: int, *, nlink_delta: int = 0, **fields) -> None:
        """Rewrite inode fields (di_ names without the prefix, or *_ns times)."""
        ed = InodeEdit(self.raw_inode(ino))
        ed.add("di_nlink", nlink_delta)
        for k, v in fields.items():
            if k.endswith("_ns"):
                ed.set_time("di_" + k[:-3], v)
            else:
                ed.set("di_" + k, v)
        ed.changed()
        self.w.inodes.put_inode(ino, ed.sealed())
        self._forget_dir(ino)

    def setattr(self, ino: int, *, mode=None, uid=None, gid=None, atime_ns=None,
                mtime_ns=None) -> None:
        fields = {"ctime_ns": self.now}
        if mode is not None:
            cur = DINODE.get(self.raw_inode(ino), "di_mode")
            fields["mode"] = (cur & C.S_IFMT) | (mode & 0o7777)
        if uid is not None:
            fields["uid"] = uid
        if gid is not None:
            fields["gid"] = gid
        if atime_ns is not None:
            fields["atime_ns"] = atime_ns
        if mtime_ns is not None:
            fields["mtime_ns"] = mtime_ns
            self.mtime_set[ino] = mtime_ns
        self._patch(ino, **fields)
        st = self.dirs.get(ino)
        if st is not None and st.new and st.meta is not None:
            m = st.meta
            if mode is not None:
                m.perm = mode & 0o7777
            if uid is not None:
                m.uid = uid
            if gid is not None:
                m.gid = gid
            if atime_ns is not None:
                m.atime_ns = atime_ns
            if mtime_ns is not None:
                m.mtime_ns = mtime_ns

    def set_xattrs(self, ino: int, xattrs: dict, pptrs=None) -> None:
        """Replace all of an inode's xattrs (``{"user.x": b"v"}``); the attr
        fork is rebuilt, its parent pointers kept (or, given ``pptrs``,
        replaced by those)."""
        st = self.dirs.get(ino)
        if st is not None and st.new:
            st.meta.xattrs = sorted(xattrs.items())
            if pptrs is not None:
                st.meta.pptrs = list(pptrs)
            return
        w = self.w
        if pptrs is None:
            pptrs = self._pptrs_of(ino) if self.pptr else ()
        raw = self.raw_inode(ino)
        node = self.fs.inode(ino)
        d = DINODE.unpack(raw)
        # release the old attr fork's blocks
        if node.forkoff and node.aformat != C.XFS_DINODE_FMT_LOCAL:
            ablocks_old = free_fork(w, node, attr=True)
        else:
            ablocks_old = 0
        fmt = d["di_format"]
        data_bytes = self._data_bytes(node)
        meta = Meta(xattrs=sorted(xattrs.items()), pptrs=pptrs)
        forced = None
        btree = fmt == C.XFS_DINODE_FMT_BTREE
        if btree and not node.forkoff and has_attrs(meta):
            # what the root holds, not the whole fork (xfs_bmap_bmdr_space)
            data_bytes = F.bmdr_space(struct.unpack_from(">H", node.fork_bytes(), 2)[0])
        if btree and node.forkoff:
            forced = node.forkoff       # the kernel never moves it beside a bmbt root
        elif has_attrs(meta) and not node.forkoff and fmt != C.XFS_DINODE_FMT_DEV:
            # a first xattr: the kernel settles the attr fork's offset with
            # the data fork as it is, then makes the data fork fit (a bmbt
            # root is laid out again for its smaller fork in any case)
            forced, _sf = F.attr_forkoff(w.sb.inodesize, fmt, data_bytes,
                                         self._attr_list(meta))
            if data_bytes > forced * 8 or btree:
                self._fit_data_fork(ino, node, forced * 8)
                raw = self.raw_inode(ino)
                node = self.fs.inode(ino)
                d = DINODE.unpack(raw)
                fmt = d["di_format"]
                data_bytes = node.nextents * F.BMBT_REC if fmt == C.XFS_DINODE_FMT_EXTENTS \
                    else forced * 8
        lit = w.sb.inodesize - C.XFS_DINODE_CORE_SIZE
        if not has_attrs(meta) and node.forkoff and node.is_symlink and \
                fmt == C.XFS_DINODE_FMT_EXTENTS and node.size <= lit:
            # the last xattr of a symlink whose target moved out for the attr
            # fork: the target comes back inline.  (The kernel leaves it in
            # its block, a form xfs_repair before 6.10 takes for damage.)
            target = self.fs.readlink(ino)
            d["di_nblocks"] -= free_fork(w, node, attr=False)
            d["di_format"] = fmt = C.XFS_DINODE_FMT_LOCAL
            d["di_big_nextents" if d["di_flags2"] & C.XFS_DIFLAG2_NREXT64 else "di_nextents"] = 0
            raw = bytes(raw[:C.XFS_DINODE_CORE_SIZE]) + target + \
                bytes(len(raw) - C.XFS_DINODE_CORE_SIZE - len(target))
            data_bytes = len(target)
        data = bytes(raw[C.XFS_DINODE_CORE_SIZE:C.XFS_DINODE_CORE_SIZE + data_bytes])
        if btree and forced and not has_attrs(meta):
            # beside a bmbt root the attr fork stays, empty (xfs_attr_sf_removename)
            forkoff, afmt, anext, alit, ablocks = forced, C.XFS_DINODE_FMT_LOCAL, 0, \
                _EMPTY_SF_ATTR, 0
        else:
            forkoff, afmt, anext, alit, ablocks = self._attr_fork(ino, meta, fmt, data_bytes,
                                                                  forced)
        if forkoff and data_bytes > forkoff * 8:
            raise FsToolError(f"inode {ino}: its data fork leaves no room for these xattrs")
        buf = bytearray(raw)
        lit0 = C.XFS_DINODE_CORE_SIZE
        buf[lit0:] = bytes(len(buf) - lit0)
        buf[lit0:lit0 + len(data)] = data
        if forkoff:
            buf[lit0 + forkoff * 8:lit0 + forkoff * 8 + len(alit)] = alit
        d["di_forkoff"] = forkoff
        d["di_aformat"] = afmt if forkoff else C.XFS_DINODE_FMT_EXTENTS
        if d["di_flags2"] & C.XFS_DIFLAG2_NREXT64:
            d["di_nextents"] = anext
        else:
            d["di_anextents"] = anext
        d["di_nblocks"] += ablocks - ablocks_old
        d["di_ctime"] = 0
        packed = DINODE.pack(d)
        buf[:len(packed)] = packed
        w.inodes.put_inode(ino, w.enc.seal(buf))
        self._patch(ino, ctime_ns=self.now)

    @staticmethod
    def _data_bytes(node) -> int:
        """The bytes the data fork of ``node`` takes in the inode."""
        fmt = node.format
        if fmt == C.XFS_DINODE_FMT_EXTENTS:
            return node.nextents * F.BMBT_REC
        if fmt == C.XFS_DINODE_FMT_LOCAL:
            return node.size
        if fmt == C.XFS_DINODE_FMT_DEV:
            return 8                    # the device number, rounded up to 8 bytes
        return node.forkoff * 8 if node.forkoff else len(node.fork_bytes())

    def _fit_data_fork(self, ino: int, node, space: int) -> None:
        """Make the data fork of ``ino`` fit in ``space`` bytes before an
        attr fork is added beside it, as the kernel's xfs_bmap_add_attrfork
        does: a shortform directory becomes a block directory, an inline
        symlink target moves to a block, an extent list moves into a
        one-leaf bmbt, and a bmbt root holding more pointers than the
        smaller fork can moves one level down."""

        w = self.w
        lit = w.sb.inodesize - C.XFS_DINODE_CORE_SIZE
        if node.format == C.XFS_DINODE_FMT_LOCAL and node.is_dir:
            d = self._dir(ino)
            d._sf_to_block()
            d.save(mtime_ns=node.mtime_ns)
            return
        raw = self.raw_inode(ino)
        d = DINODE.unpack(raw)
        buf = bytearray(raw)
        if node.format == C.XFS_DINODE_FMT_LOCAL:
            target = bytes(node.fork_bytes()[:node.size])
            plan = AB.encode_symlink(target, ino=ino, uuid=w.uuid, blocksize=w.sb.blocksize,
                                     inline_space=0)
            exts = F.place_plan(w, plan, w.inodes.ino_fsb(ino), owner=R.data(ino, 0))
            fork = F.map_fork(w, ino, exts, space)
            F.put_data_fork(d, buf, fork, lit, node.size)
            d["di_nblocks"] += fork.blocks
        elif node.format in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            fm = ForkMap(self.fs, ino, node.format, node.fork_bytes(), lit, node.nextents,
                         w=w, near=w.inodes.ino_fsb(ino))
            fm.space, fm.maxext = space, space // F.BMBT_REC
            if fm.tree is not None:
                fm.tree.shrink_root(space)
            fmt, fork = fm.finish()
            c = C.XFS_DINODE_CORE_SIZE
            buf[c:c + lit] = fork + bytes(lit - len(fork))
            d["di_format"] = fmt
            d["di_nblocks"] += fm.bmbt_delta
        else:
            raise FsToolError(f"inode {ino}: its data fork leaves no room for these xattrs")
        packed = DINODE.pack(d)
        buf[:len(packed)] = packed
        w.inodes.put_inode(ino, w.enc.seal(buf))

    # -- removing -------------------------------------------------------------------------
    def unlink(self, parent: int, name: bytes, *, rmdir: bool = False,
               keep: bool = False) -> int:
        """Remove ``name`` from ``parent`` (a directory only with ``rmdir``,
        and only when empty); returns the inode it named.  The inode is freed
        when its last link goes, unless ``keep`` or ``is_open(ino)``: then it
        stays allocated on the AGI unlinked list until :meth:`inactivate`."""
        if self._incremental(parent):
            return self._unlink(parent, name, rmdir, keep)
        pst = self.dir_state(parent)
        ent = pst.entries.get(name)
        if ent is None:
            raise NotFoundError(name.decode("utf-8", "surrogateescape"))
        ino, ftype = ent
        if ftype == C.XFS_DIR3_FT_DIR or self._is_dir(ino):
            child = self.dir_state(ino)
            if not rmdir:
                raise IsADirectoryImageError(name.decode("utf-8", "surrogateescape"))
            if child.entries:
                raise DirNotEmpty(f"{name.decode('utf-8', 'surrogateescape')}: directory "
                                  "not empty")
            del pst.entries[name]
            pst.changed = True
            pst.nlink -= 1
            self._destroy(ino)
            del self.dirs[ino]
            return ino
        del pst.entries[name]
        pst.changed = True
        raw = self.raw_inode(ino)
        nlink = struct.unpack_from(">I", raw, 16)[0]
        if nlink <= 1:
            self._destroy(ino)
        else:
            self._change_pptrs(ino, remove=[self._pptr(parent, name)])
            self._patch(ino, nlink_delta=-1, ctime_ns=self.now)
        return ino

    def _unlink(self, parent: int, name: bytes, rmdir: bool, keep: bool) -> int:
        d = self._dir(parent)
        ent = d.lookup(name) if name not in (b".", b"..") else None
        if ent is None:
            if name in (b".", b".."):
                raise InvalidArgument(f"{name.decode()}: cannot be removed")
            raise NotFoundError(name.decode("utf-8", "surrogateescape"))
        ino, ftype = ent
        shown = name.decode("utf-8", "surrogateescape")
        if ftype == C.XFS_DIR3_FT_DIR:
            if not rmdir:
                raise IsADirectoryImageError(shown)
            if not self._dir(ino).is_empty():
                raise NotEmptyError(f"{shown}: directory not empty")
            d.remove(name)
            d.nlink_delta -= 1
            d.save()
            self._drop_links(ino, 2, keep, (parent, name))
            return ino
        if rmdir:
            raise NotADirectoryImageError(shown)
        d.remove(name)
        d.save()
        self._drop_links(ino, 1, keep, (parent, name))
        return ino

    def _drop_links(self, ino: int, n: int, keep: bool = False, entry=None) -> None:
        """``n`` links to ``ino`` are gone, the last of them the entry
        ``entry`` (directory, name): free it at zero (or, when it is still
        open, put it on the unlinked list); an inode that stays loses the
        entry's parent pointer."""
        nlink = struct.unpack_from(">I", self.raw_inode(ino), 16)[0]
        stays = nlink > n or keep or (self.is_open is not None and self.is_open(ino))
        if stays and entry is not None:
            self._change_pptrs(ino, remove=[self._pptr(*entry)])
        if nlink > n:
            self._patch(ino, nlink_delta=-n, ctime_ns=self.now)
        elif stays:
            self._orphan(ino)
        else:
            self._forget_dir(ino)
            self._destroy(ino)

    # -- the AGI unlinked lists -------------------------------------------------------
    def _bucket(self, ino: int):
        agno, agino = self.w.inodes.ino_split(ino)
        return self.w.ag(agno), agino, agino % len(self.w.ag(agno).agi["agi_unlinked"])

    def _orphan(self, ino: int) -> None:
        """Link count 0, inode kept: at the head of its AGI unlinked bucket
        (xfs_iunlink)."""
        ag, agino, b = self._bucket(ino)
        head = ag.agi["agi_unlinked"][b]
        self._patch(ino, nlink=0, next_unlinked=head, ctime_ns=self.now)
        ag.agi["agi_unlinked"][b] = agino
        ag.agi_dirty = True

    def _unorphan(self, ino: int) -> None:
        """Take ``ino`` off its unlinked bucket (xfs_iunlink_remove)."""
        ag, agino, b = self._bucket(ino)
        sb = self.w.sb
        nxt = DINODE.unpack(self.raw_inode(ino))["di_next_unlinked"]
        cur = ag.agi["agi_unlinked"][b]
        if cur == agino:
            ag.agi["agi_unlinked"][b] = nxt
            ag.agi_dirty = True
        else:
            seen = 0
            while cur != C.NULLAGINO:
                cino = (ag.agno << sb.agino_log) | cur
                cn = DINODE.unpack(self.raw_inode(cino))["di_next_unlinked"]
                if cn == agino:
                    self._patch(cino, next_unlinked=nxt)
                    break
                cur = cn
                seen += 1
                if seen > 1 << 24:
                    raise CorruptionError("agi", "unlinked list cycle", agno=ag.agno)
            else:
                raise CorruptionError("agi", f"inode {ino} is not on its unlinked list",
                                      agno=ag.agno, ino=ino)
        self._patch(ino, next_unlinked=C.NULLAGINO)

    def inactivate(self, ino: int) -> None:
        """Free an inode left on the unlinked list by unlink(keep=True) (the
        last open reference went away)."""
        if struct.unpack_from(">I", self.raw_inode(ino), 16)[0] != 0:
            raise InvalidArgument(f"inode {ino} still has links")
        self._unorphan(ino)
        self._forget_dir(ino)
        self._destroy(ino)

    # -- rename -----------------------------------------------------------------------
    def _ancestors(self, ino: int):
        """``ino`` and every directory above it up to the root."""
        root = self.w.sb.rootino
        seen = set()
        while ino not in seen:
            seen.add(ino)
            yield ino
            if ino == root:
                return
            ent = self.lookup_child(ino, b"..")
            if ent is None:
                return
            ino = ent[0]

    def rename(self, src_parent: int, src_name: bytes, dst_parent: int, dst_name: bytes,
               flags: int = 0) -> None:
        """rename(2) with RENAME_NOREPLACE (1) and RENAME_EXCHANGE (2), as the
        kernel's xfs_rename and xfs_cross_rename do it."""
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or \
                flags == RENAME_NOREPLACE | RENAME_EXCHANGE:
            raise InvalidArgument(f"rename flags 0x{flags:x} are not valid")
        for nm in (src_name, dst_name):
            if nm in (b".", b".."):
                raise InvalidArgument(f"{nm.decode()}: cannot be renamed")
            check_name(nm)
        if not self._incremental(src_parent) or not self._incremental(dst_parent):
            raise FsToolError("internal: rename in a bulk-built directory")
        sd = self._dir(src_parent)
        dd = self._dir(dst_parent)
        src = sd.lookup(src_name)
        if src is None:
            raise NotFoundError(src_name.decode("utf-8", "surrogateescape"))
        dst = dd.lookup(dst_name)
        sino, sft = src
        s_dir = sft == C.XFS_DIR3_FT_DIR
        shown = dst_name.decode("utf-8", "surrogateescape")
        if flags & RENAME_EXCHANGE and dst is None:
            raise NotFoundError(shown)
        if flags & RENAME_NOREPLACE and dst is not None:
            raise ExistsError(f"{shown}: already exists")
        if s_dir and sino in self._ancestors(dst_parent):
            raise InvalidArgument("a directory cannot be moved under itself")
        if dst is not None:
            dino, dft = dst
            d_dir = dft == C.XFS_DIR3_FT_DIR
            if d_dir and dino in self._ancestors(src_parent):
                if flags & RENAME_EXCHANGE:
                    raise InvalidArgument("a directory cannot be moved under itself")
                raise NotEmptyError(f"{shown}: directory not empty")
            if dino == sino:
                return                     # two names of one inode: nothing to do
        if flags & RENAME_EXCHANGE:
            return self._exchange(sd, src_name, sino, sft, dd, dst_name, dino, dft)
        new_parent = src_parent != dst_parent
        if dst is not None:
            if s_dir and not d_dir:
                raise NotADirectoryImageError(shown)
            if d_dir and not s_dir:
                raise IsADirectoryImageError(shown)
            if d_dir and not self._dir(dino).is_empty():
                # xfs_rename answers EEXIST here (the VFS allows ENOTEMPTY too)
                raise ExistsError(f"{shown}: directory not empty")
            dd.replace(dst_name, sino, sft)
        else:
            dd.add(dst_name, sino, sft)
            if s_dir and new_parent:
                dd.nlink_delta += 1
        if s_dir and (new_parent or dst is not None):
            sd.nlink_delta -= 1
        sd.remove(src_name)
        if s_dir and new_parent:
            child = self._dir(sino)
            child.replace(b"..", dst_parent, C.XFS_DIR3_FT_DIR)
            child.save()
        dd.save()
        if new_parent:
            sd.save()
        self._change_pptrs(sino, add=[self._pptr(dst_parent, dst_name)],
                           remove=[self._pptr(src_parent, src_name)])
        self._patch(sino, ctime_ns=self.now)
        if dst is not None:
            self._drop_links(dino, 2 if d_dir else 1, entry=(dst_parent, dst_name))

    def _exchange(self, sd, sname, sino, sft, dd, dname, dino, dft) -> None:
        sd.replace(sname, dino, dft)
        dd.replace(dname, sino, sft)
        s_dir = sft == C.XFS_DIR3_FT_DIR
        d_dir = dft == C.XFS_DIR3_FT_DIR
        if sd.ino != dd.ino:
            # each directory moved gets its ".."; its link moves with it
            # unless the other side was a directory too
            for moved, is_dir, now_in, was_in, other_dir in ((dino, d_dir, sd, dd, s_dir),
                                                             (sino, s_dir, dd, sd, d_dir)):
                if is_dir:
                    child = self._dir(moved)
                    child.replace(b"..", now_in.ino, C.XFS_DIR3_FT_DIR)
                    child.save()
                    if not other_dir:
                        was_in.nlink_delta -= 1
                        now_in.nlink_delta += 1
            dd.save()
        sd.save()
        s_ptr, d_ptr = self._pptr(sd.ino, sname), self._pptr(dd.ino, dname)
        self._change_pptrs(sino, add=[d_ptr], remove=[s_ptr])
        self._change_pptrs(dino, add=[s_ptr], remove=[d_ptr])
        for ino in (sino, dino):
            self._patch(ino, ctime_ns=self.now)

    # -- xattrs, one at a time ----------------------------------------------------------
    # A shortform attr fork (a few hundred bytes at most) is rewritten whole
    # by set_xattrs, which also makes the conversions to and from leaf form
    # and moves the fork offset; a leaf or node form is changed in place,
    # one hash path of blocks per call (attrops.AttrFork).
    def _xattrs(self, ino: int) -> dict:
        st = self.dirs.get(ino)
        if st is not None and st.new:
            return dict(st.meta.xattrs)
        return dict(self.fs.xattrs(ino))

    @staticmethod
    def _xattr_name(name) -> str:
        s = name if isinstance(name, str) else name.decode("utf-8", "surrogateescape")
        if len(s.encode("utf-8", "surrogateescape")) > 255:
            raise RangeError(f"xattr name of {len(s)} bytes (at most 255)")
        AB.split_name(s)
        return s

    def _attr_blocks(self, ino: int):
        """The attr fork of ``ino`` to change in place (attrops.AttrFork), or
        None when it is shortform, absent or the inode is new in this batch."""
        st = self.dirs.get(ino)
        if st is not None and st.new:
            return None
        node = self.fs.inode(ino)
        if node.forkoff and node.aformat in (C.XFS_DINODE_FMT_EXTENTS,
                                             C.XFS_DINODE_FMT_BTREE) and node.extents(attr=True):
            return AttrFork(self.w, ino, self.match_incomplete)
        return None

    def _get_xattr(self, ino: int, key: str):
        st = self.dirs.get(ino)
        if st is not None and st.new:
            return dict(st.meta.xattrs).get(key)
        return self.fs.xattr(ino, key)

    def get_xattr(self, ino: int, name) -> bytes:
        """The value of one xattr (ENODATA when it has none by that name)."""
        key = self._xattr_name(name)
        v = self._get_xattr(ino, key)
        if v is None:
            raise NoDataError(f"inode {ino}: no xattr {key!r}")
        return bytes(v)

    def list_xattr(self, ino: int) -> list:
        st = self.dirs.get(ino)
        if st is not None and st.new:
            return [k for k, _v in st.meta.xattrs]
        return self.fs.xattr_names(ino)

    def set_xattr(self, ino: int, name, value: bytes, flags: int = 0) -> None:
        """Set one xattr; XATTR_CREATE (1) fails with EEXIST when it exists,
        XATTR_REPLACE (2) with ENODATA when it does not."""
        key = self._xattr_name(name)
        if len(value) > AB.MAX_VALUE:
            raise TooBigError(f"xattr value of {len(value)} bytes (at most {AB.MAX_VALUE})")
        if flags & (XATTR_CREATE | XATTR_REPLACE):
            there = self._get_xattr(ino, key) is not None
            if flags & XATTR_CREATE and there:
                raise ExistsError(f"xattr {key!r} exists")
            if flags & XATTR_REPLACE and not there:
                raise NoDataError(f"inode {ino}: no xattr {key!r}")
        fork = self._attr_blocks(ino)
        if fork is not None:
            fork.set(*AB.split_name(key), bytes(value))
            fork.save()
            self._patch(ino, ctime_ns=self.now)
            return
        cur = self._xattrs(ino)
        cur[key] = bytes(value)
        self.set_xattrs(ino, cur)

    def remove_xattr(self, ino: int, name) -> None:
        key = self._xattr_name(name)
        fork = self._attr_blocks(ino)
        if fork is not None:
            if not fork.remove(*AB.split_name(key)):
                raise NoDataError(f"inode {ino}: no xattr {key!r}")
            fork.save()
            self._patch(ino, ctime_ns=self.now)
            if fork.leaf_form():
                self._leaf_to_shortform(ino, fork.leaf_entries())
            return
        cur = self._xattrs(ino)
        if key not in cur:
            raise NoDataError(f"inode {ino}: no xattr {key!r}")
        del cur[key]
        self.set_xattrs(ino, cur)

    def _leaf_to_shortform(self, ino: int, ents) -> None:
        """A leaf-form fork whose entries now fit the inode goes back to
        shortform (xfs_attr3_leaf_to_shortform after xfs_attr_shortform_allfit);
        the last one gone takes the fork with it."""
        names = {}
        pptrs = []
        for e in ents:
            if e.value is None or e.flags & C.XFS_ATTR_INCOMPLETE:
                return              # remote values stay in blocks
            if P.is_parent(e.flags) and self.pptr:
                pptrs.append((C.XFS_ATTR_PARENT, e.name, e.value))
                continue
            full = FA.full_name(e.flags, e.name)
            if full is None:
                return              # other namespaces stay in blocks
            names[full] = e.value
        node = self.fs.inode(ino)
        meta = Meta(xattrs=sorted(names.items()), pptrs=pptrs)
        if has_attrs(meta) and not F.attr_forkoff(self.w.sb.inodesize, node.format,
                                                  self._data_bytes(node),
                                                  self._attr_list(meta))[1]:
            return
        self.set_xattrs(ino, names, pptrs=pptrs if self.pptr else None)

    def _is_dir(self, ino: int) -> bool:
        if ino in self.dirs:
            return True
        mode = struct.unpack_from(">H", self.raw_inode(ino), 2)[0]
        return pystat.S_ISDIR(mode)

    def _destroy(self, ino: int) -> None:
        """Free an inode and every block it owns."""
        w = self.w
        st = self.dirs.get(ino)
        if not (st is not None and st.new):
            node = self.fs.inode(ino)
            for attr in (False, True):
                if attr and not node.forkoff:
                    continue
                fmt = node.aformat if attr else node.format
                if fmt in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
                    free_fork(w, node, attr)
        w.inodes.free_inode(ino)

    # -- finishing ---------------------------------------------------------------------
    def save_dir(self, ino: int) -> None:
        """Write the inode of a directory whose save was deferred."""
        d, now = self.unsaved.pop(ino)
        d.now = now
        d.save()

    def finish(self) -> None:
        """Encode every changed directory (and give back the data blocks
        taken ahead and not used): the transaction can commit."""
        for ino in list(self.unsaved):
            self.save_dir(ino)
        w = self.w
        self.pool.release()
        sb = w.sb
        lit = sb.inodesize - C.XFS_DINODE_CORE_SIZE
        # new shortform directories without an attr fork, one after another:
        # their inodes filled in one pass (put_simple_inodes), in this order
        # and before anything else is put, as _put_new would one by one
        sf_inos: list = []
        sf_items: list = []
        sf_lits: list = []
        sf_nlinks: list = []
        sf_ctime = None

        def put_sf() -> None:
            if sf_inos:
                w.inodes.put_simple_inodes(sf_inos, sf_items, C.S_IFDIR, sf_ctime,
                                           lits=sf_lits, nlinks=sf_nlinks)
                sf_inos.clear()
                sf_items.clear()
                sf_lits.clear()
                sf_nlinks.clear()
        for ino, st in list(self.dirs.items()):
            if not st.changed:
                continue
            entries = [(name, cino, ft) for name, (cino, ft) in st.entries.items()]
            if st.new:
                meta = st.meta
                # the kernel adds xattrs while the directory is still empty
                forkoff = self._forkoff_for(meta, C.XFS_DINODE_FMT_LOCAL, 6)
                space = forkoff * 8 or lit
                plan = DB.encode_dir(entries, ino=ino, parent=st.parent, uuid=w.uuid,
                                     blocksize=sb.blocksize, dirblksize=sb.dirblksize,
                                     has_ftype=sb.has_ftype, inline_space=space)
                mode = C.S_IFDIR | meta.perm
                if plan.local is not None:
                    if not has_attrs(meta) and meta.crtime_ns == meta.ctime_ns and \
                            plan.size == len(plan.local) and \
                            (not sf_inos or sf_ctime == meta.ctime_ns):
                        sf_ctime = meta.ctime_ns
                        sf_inos.append(ino)
                        sf_items.append((None, meta.perm, meta.uid, meta.gid, meta.atime_ns,
                                         meta.mtime_ns))
                        sf_lits.append(plan.local)
                        sf_nlinks.append(st.nlink)
                    else:
                        put_sf()
                        self._put_new(ino, mode, meta, nlink=st.nlink, size=plan.size,
                                      fmt=C.XFS_DINODE_FMT_LOCAL, data=plan.local,
                                      forkoff=forkoff)
                else:
                    put_sf()
                    exts = F.place_plan(w, plan, w.inodes.ino_fsb(ino), owner=R.data(ino, 0))
                    fork = F.map_fork(w, ino, exts, space)
                    self._put_new(ino, mode, meta, nlink=st.nlink, size=plan.size, fork=fork,
                                  forkoff=forkoff)
            else:
                put_sf()
                self._rewrite_dir(st, entries)
            st.changed = False
        put_sf()

    def _rewrite_dir(self, st: DirState, entries: list) -> None:
        w = self.w
        sb = w.sb
        node = self.fs.inode(st.ino)
        raw = self.raw_inode(st.ino)
        d = DINODE.unpack(raw)
        forkoff = d["di_forkoff"]
        lit = sb.inodesize - C.XFS_DINODE_CORE_SIZE
        space = forkoff * 8 if forkoff else lit
        old_owned = []
        old_map = []
        if node.format in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            old_owned = owned_extents(node, attr=False)
            old_map = node.extents()
        old_blocks = sum(n for _b, n, _w, _u in old_owned)
        plan = DB.encode_dir(entries, ino=st.ino, parent=st.parent, uuid=w.uuid,
                             blocksize=sb.blocksize, dirblksize=sb.dirblksize,
                             has_ftype=sb.has_ftype, inline_space=space)
        reused = set()
        if plan.local is not None:
            fork = F.Fork(C.XFS_DINODE_FMT_LOCAL, plan.local, 0, 0)
        else:
            # blocks at the same logical offsets keep their place (a full
            # filesystem can still shrink a directory); the rest is new
            exts, reused = F.place_plan(w, plan, w.inodes.ino_fsb(st.ino), reuse=old_map,
                                        owner=R.data(st.ino, 0))
            fork = F.map_fork(w, st.ino, exts, space)
        for fsbno, n, who, _u in old_owned:
            for b in range(fsbno, fsbno + n):
                if b not in reused:
                    w.space.free_extent(b, 1, owner=who.at(b - fsbno))
        buf = bytearray(raw)
        F.put_data_fork(d, buf, fork, space, plan.size)
        d["di_nblocks"] += fork.blocks - old_blocks
        d["di_nlink"] = st.nlink
        bigtime = bool(d["di_flags2"] & C.XFS_DIFLAG2_BIGTIME)
        d["di_ctime"] = encode_ts(self.now, bigtime)
        d["di_mtime"] = encode_ts(self.mtime_set.get(st.ino, self.now), bigtime)
        d["di_changecount"] += 1
        packed = DINODE.pack(d)
        buf[:len(packed)] = packed
        w.inodes.put_inode(st.ino, w.enc.seal(buf))


_EMPTY_SF_ATTR = struct.pack(">HBB", 4, 0, 0)     # a shortform attr header, no entries
_DI_GEN = DINODE.field("di_gen")


def split_path(path: str) -> tuple[str, bytes]:
    """(parent directory, last name as bytes) of an absolute image path.
    '.' and '..' stay in the parent for :meth:`Namespace.lookup` to resolve
    against the image, as the kernel does (``/a/../x`` needs ``/a``); a
    path whose last name is one of them names no entry to make or remove."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise InvalidArgument("the root directory has no parent")
    if parts[-1] in (".", ".."):
        raise InvalidArgument(f"{path}: ends in '{parts[-1]}', which names no entry that can "
                              "be made, moved or removed")
    return "/" + "/".join(parts[:-1]), parts[-1].encode("utf-8", "surrogateescape")


__all__ = ["Namespace", "Meta", "ExistsError", "DirNotEmpty", "split_path", "owned_blocks",
           "owned_extents", "free_fork", "CorruptionError"]
