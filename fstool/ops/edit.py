"""Scripted edits of an image: mkdir, put, rm, ln, mv, setattr.

Each function checks the image (unless ``check=False``), opens it for
writing, makes its change in one transaction and returns a small summary
dict; it either happens completely or the image is left as it was (``rm``
of a large tree commits every few thousand removals, like ``rm -r`` on a
mounted filesystem).  ``timestamp_ns`` fixes "now" (for reproducible
builds); None means the clock.  ``punch`` (the default) punches the blocks
an edit frees out of the image file once they are free on disk, so the host
gets the space back; ``punch=False`` keeps them allocated.
"""
from __future__ import annotations

import os

from ..errors import ExistsError, InvalidArgument, NoDataError, NotFoundError, UnsupportedError
from ..io.sparse import data_ranges_of
from ..ns.fileio import FileIO
from ..ns.namespace import RENAME_EXCHANGE, RENAME_NOREPLACE, Meta, Namespace, split_path
from ..ns.writer import Writer
from .guard import require_sound
from .populate import _mkdirs


def _edit(image, timestamp_ns, fn, check=True, punch=True):
    if check:
        require_sound(image)
    with Writer(image, timestamp_ns=timestamp_ns, discard=punch, keeps_parents=True) as w:
        with w.transaction():
            ns = Namespace(w)
            result = fn(ns)
            ns.finish()
    return result


def _now_meta(ns: Namespace, perm: int, uid: int, gid: int) -> Meta:
    return Meta(perm=perm, uid=uid, gid=gid, atime_ns=ns.now, mtime_ns=ns.now,
                ctime_ns=ns.now)


def mkdir(image, path: str, *, parents: bool = False, perm: int = 0o755, uid: int = 0,
          gid: int = 0, timestamp_ns: int | None = None, check: bool = True) -> dict:
    """Create directory ``path``; with ``parents`` also its missing parents
    (and no error when it exists)."""
    def run(ns):
        meta = _now_meta(ns, perm, uid, gid)
        if parents:
            return _mkdirs(ns, path, meta)
        parent, name = split_path(path)
        return ns.mkdir(ns.lookup(parent), name, meta)
    return {"op": "mkdir", "path": path, "ino": _edit(image, timestamp_ns, run, check)}


def put(image, hostfile, path: str, *, perm: int | None = None, uid: int | None = None,
        gid: int | None = None, force: bool = False, timestamp_ns: int | None = None,
        check: bool = True, punch: bool = True) -> dict:
    """Copy a host file to ``path`` (holes stay holes); ``force`` replaces
    an existing file."""
    st = os.stat(hostfile)
    perm = st.st_mode & 0o7777 if perm is None else perm
    uid = st.st_uid if uid is None else uid
    gid = st.st_gid if gid is None else gid

    def run(ns):
        parent, name = split_path(path)
        pino = ns.lookup(parent)
        if ns.child(pino, name) is not None:
            if not force:
                raise ExistsError(f"{path}: already exists in the image (use --force to "
                                  "replace it)")
            ns.unlink(pino, name)
        # reading the host file moves its access time: a fixed build time
        # stands in for it, as populate does
        atime = st.st_atime_ns if timestamp_ns is None else timestamp_ns
        meta = Meta(perm=perm, uid=uid, gid=gid, atime_ns=atime, mtime_ns=st.st_mtime_ns,
                    ctime_ns=ns.now)
        with open(hostfile, "rb") as f:
            ranges = data_ranges_of(f.fileno(), st)
            return ns.create_file(pino, name, meta, f, st.st_size, ranges)
    ino = _edit(image, timestamp_ns, run, check, punch)
    return {"op": "put", "path": path, "ino": ino, "bytes": st.st_size}


def cp(image, src: str, dst: str, *, reflink: str = "auto", force: bool = False,
       timestamp_ns: int | None = None, check: bool = True, punch: bool = True) -> dict:
    """Copy the regular file ``src`` to ``dst`` inside the image.  Its
    blocks are shared (``reflink`` "always": or fail; "auto": where the
    filesystem has reflink) or copied ("never"); the new file takes the
    source's mode and owner, and the time of the copy."""
    if reflink not in ("auto", "always", "never"):
        raise InvalidArgument(f"--reflink={reflink}: auto, always or never")

    def run(ns):
        w = ns.w
        sino = ns.lookup(src)
        node = w.fs.inode(sino)
        if not node.is_reg:
            raise InvalidArgument(f"{src}: not a regular file")
        if reflink == "always" and not w.reflink:
            raise UnsupportedError(f"{image}: the filesystem has no reflink feature: "
                                   "blocks cannot be shared (--reflink=auto copies them)")
        parent, name = split_path(dst)
        pino = ns.lookup(parent)
        if ns.child(pino, name) is not None:
            if not force:
                raise ExistsError(f"{dst}: already exists in the image (use --force to "
                                  "replace it)")
            ns.unlink(pino, name)
        meta = Meta(perm=node.mode & 0o7777, uid=node.uid, gid=node.gid, atime_ns=ns.now,
                    mtime_ns=ns.now, ctime_ns=ns.now)
        dino = ns.create_file(pino, name, meta)
        io = FileIO(w)
        size = node.size
        if reflink == "never" or not w.reflink:
            io.copy_bytes(sino, 0, dino, 0, size)
        else:
            io.copy_range(sino, 0, dino, 0, size)
        io.release(dino)
        return dino, size
    dino, size = _edit(image, timestamp_ns, run, check, punch)
    return {"op": "cp", "path": dst, "ino": dino, "bytes": size}


RM_BATCH = 2048          # removals per transaction


def rm(image, paths, *, recursive: bool = False, force: bool = False,
       timestamp_ns: int | None = None, check: bool = True, punch: bool = True) -> dict:
    """Remove ``paths``; directories (and all below them) only with
    ``recursive``; missing paths are an error unless ``force``.  A large
    tree goes in several transactions (children before their directory),
    so a crash part way leaves part of it, never a broken one."""
    if check:
        require_sound(image)
    removed = [0]
    with Writer(image, timestamp_ns=timestamp_ns, discard=punch, keeps_parents=True) as w:
        w.begin()
        ns = Namespace(w)
        pending = [0]

        def step():
            pending[0] += 1
            removed[0] += 1
            if pending[0] >= RM_BATCH:
                ns.finish()
                w.commit()
                ns.committed()
                pending[0] = 0
                w.begin()

        def remove_tree(parent, name):
            ent = ns.child(parent, name)
            if ent is None:
                raise NotFoundError(name.decode("utf-8", "surrogateescape"))
            if recursive and ns._is_dir(ent[0]):
                for child in ns.list_names(ent[0]):
                    remove_tree(ent[0], child)
                ns.unlink(parent, name, rmdir=True)
            else:
                ns.unlink(parent, name)
            step()

        try:
            for p in paths:
                parent, name = split_path(p)
                try:
                    remove_tree(ns.lookup(parent), name)
                except NotFoundError:
                    if not force:
                        raise NotFoundError(p) from None
            ns.finish()
            w.commit()
        except BaseException:
            w.abort()
            raise
    return {"op": "rm", "paths": list(paths), "removed": removed[0]}


def ln(image, target: str, path: str, *, symbolic: bool = False, uid: int = 0, gid: int = 0,
       timestamp_ns: int | None = None, check: bool = True) -> dict:
    """``path`` as a hard link to ``target`` (a path in the image), or with
    ``symbolic`` a symlink whose content is ``target``."""
    def run(ns):
        parent, name = split_path(path)
        pino = ns.lookup(parent)
        if symbolic:
            return ns.symlink(pino, name, target.encode("utf-8", "surrogateescape"),
                              _now_meta(ns, 0o777, uid, gid))
        ino = ns.lookup(target)
        ns.link(pino, name, ino)
        return ino
    ino = _edit(image, timestamp_ns, run, check)
    return {"op": "ln", "path": path, "target": target, "symbolic": symbolic, "ino": ino}


def setattr(image, path: str, *, perm: int | None = None, uid: int | None = None,
            gid: int | None = None, atime_ns: int | None = None, mtime_ns: int | None = None,
            set_xattrs: dict | None = None, remove_xattrs=(),
            timestamp_ns: int | None = None, check: bool = True, punch: bool = True) -> dict:
    """Change permissions, owner, times or xattrs of ``path``."""
    set_xattrs = set_xattrs or {}

    def run(ns):
        ino = ns.lookup(path)
        ns.setattr(ino, mode=perm, uid=uid, gid=gid, atime_ns=atime_ns, mtime_ns=mtime_ns)
        # one xattr at a time: a leaf or node attr fork changes in place
        for k in remove_xattrs:
            try:
                ns.remove_xattr(ino, k)
            except NoDataError:
                raise NotFoundError(path, f"no xattr {k!r}") from None
        for k, v in set_xattrs.items():
            ns.set_xattr(ino, k, v)
        return ino
    ino = _edit(image, timestamp_ns, run, check, punch)
    return {"op": "setattr", "path": path, "ino": ino}


def mv(image, src: str, dst: str, *, no_replace: bool = False, exchange: bool = False,
       timestamp_ns: int | None = None, check: bool = True, punch: bool = True) -> dict:
    """Rename ``src`` to ``dst`` (paths in the image) as rename(2) does:
    an existing ``dst`` is replaced unless ``no_replace``; ``exchange`` swaps
    the two.  Directories move with their trees."""
    if no_replace and exchange:
        raise InvalidArgument("--no-replace and --exchange cannot be used together")
    flags = (RENAME_NOREPLACE if no_replace else 0) | (RENAME_EXCHANGE if exchange else 0)

    def run(ns):
        sparent, sname = split_path(src)
        dparent, dname = split_path(dst)
        ns.rename(ns.lookup(sparent), sname, ns.lookup(dparent), dname, flags)
        ent = ns.lookup_child(ns.lookup(dparent), dname)
        return ent[0]
    ino = _edit(image, timestamp_ns, run, check, punch)
    return {"op": "mv", "src": src, "dst": dst, "exchange": exchange, "ino": ino}
