"""populate: add a tree (host directory, tar archive or protofile) to an image.

The run commits in batches: a transaction holds a few thousand entries
(ending where the source moves on to another directory when it can), so
memory stays bounded and the journal checkpoints as it goes.  A batch is
all or nothing: after a crash the image holds the batches committed before
it, each file whole.  If anything fails (bad member, ENOSPC, unreadable
file without --keep-going), the batch in progress is dropped and the error
says how many entries the earlier batches added.  Files are written as they
stream from the source; a directory changed by a batch is encoded once, at
the end of the batch, in its form at that point.
"""
from __future__ import annotations

import posixpath
import stat as pystat
from dataclasses import dataclass, field

from ..errors import FsToolError, InvalidArgument, NotADirectoryImageError, NotFoundError
from ..format import constants as C
from ..ns.namespace import ExistsError, Meta, Namespace
from ..errors import NoSpaceError as NoSpace
from ..ns.writer import Writer

# entries per transaction (a batch may run on to the end of its directory,
# up to four times this)
BATCH_ENTRIES = 16384
# a checkpoint after this many batches or bytes of file data at the most, so
# that a crash loses little of a long run (counted, not timed: the same
# input must give the same image, log included)
CHECKPOINT_BATCHES = 4
CHECKPOINT_DATA = 256 << 20
# files of a host source opened ahead of their turn, their first bytes read
# by the kernel meanwhile (posix_fadvise WILLNEED): at most this many files,
# this many bytes asked for, and this much of each file
READAHEAD_FILES = 128
READAHEAD_BYTES = 32 << 20
READAHEAD_HEAD = 2 << 20
KIND_MODE = {"fifo": C.S_IFIFO, "chardev": C.S_IFCHR, "blockdev": C.S_IFBLK,
             "socket": C.S_IFSOCK}


@dataclass
class PopulateStats:
    files: int = 0
    dirs: int = 0
    symlinks: int = 0
    special: int = 0
    hardlinks: int = 0
    bytes: int = 0
    skipped: list = field(default_factory=list)

    @property
    def entries(self) -> int:
        return self.files + self.dirs + self.symlinks + self.special + self.hardlinks


def _mkdirs(ns: Namespace, path: str, meta: Meta) -> int:
    """Inode of ``path`` in the image, creating missing directories."""
    ino = ns.w.sb.rootino
    for part in [p for p in path.split("/") if p]:
        name = part.encode("utf-8", "surrogateescape")
        ent = ns.child(ino, name)
        if ent is None:
            ino = ns.mkdir(ino, name, meta)
        elif ent[1] != C.XFS_DIR3_FT_DIR and not ns._is_dir(ent[0]):
            raise NotADirectoryImageError(path)
        else:
            ino = ent[0]
    return ino


def populate(image, source, dest: str = "/", *, owner_map=None, keep_going: bool = False,
             timestamp_ns: int | None = None, progress=None, overwrite: bool = True,
             report=None, fresh: bool = False, check: bool = True,
             batch_entries: int = BATCH_ENTRIES) -> PopulateStats:
    """Add everything ``source`` (a path, or an already opened Source)
    describes under ``dest`` in ``image``.

    ``fresh`` is for an image mkfs has just made with its superblock marked
    in progress: it is written without the journal (like mkfs.xfs -p) and
    marked finished at the end; until then no kernel mounts it.  Unless
    ``check`` is false, an existing image is checked first and refused when
    fstool check finds errors in it.  ``batch_entries`` is how many entries
    a transaction holds (up to four times as many to finish a directory)."""
    from .sources import open_source
    stats = PopulateStats()

    def note(msg: str) -> None:
        stats.skipped.append(msg)
        if report:
            report(msg)

    src = open_source(source, owner_map=owner_map, keep_going=keep_going, report=note) \
        if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") else source
    from .sources import EmptyFiles
    if check and not fresh:
        from .guard import require_sound
        require_sound(image)
    committed = [0]          # entries in committed batches
    with Writer(image, timestamp_ns=timestamp_ns, logged=not fresh) as w, src:
        now = w.now_ns()
        try:
            w.begin()
            ns = Namespace(w, now, bulk=True)
            root_meta = Meta(perm=0o755, atime_ns=now, mtime_ns=now, ctime_ns=now)
            base = _mkdirs(ns, dest, root_meta)
            inos = {"": base}          # relative dir path -> inode

            def one(e):
                try:
                    if timestamp_ns is not None:
                        # reading the source moves access times: a fixed
                        # build time stands in for them
                        e.atime_ns = timestamp_ns
                    _add(ns, e, inos, base, stats, now, overwrite)
                except NoSpace:
                    raise
                except (OSError, InvalidArgument, ExistsError) as exc:
                    if not keep_going or isinstance(exc, ExistsError) and not overwrite:
                        raise _wrap(e.path, exc) from None
                    note(f"{e.path}: skipped: {_msg(exc)}")

            since = {"batches": 0, "bytes": 0}

            def commit_batch():
                ns.finish()
                w.commit()
                ns.committed()
                committed[0] = stats.entries
                since["batches"] += 1
                if since["batches"] >= CHECKPOINT_BATCHES or \
                        stats.bytes - since["bytes"] >= CHECKPOINT_DATA:
                    w.journal.push()
                    since["batches"], since["bytes"] = 0, stats.bytes
                w.begin()

            last_dir = None
            walk = src.entries(runs=True) if hasattr(src, "entries") else src
            if getattr(src, "host_files", False):
                walk = read_ahead(walk)
            for e in walk:
                here = e.path if type(e) is EmptyFiles else e.path.rpartition("/")[0]
                pending = stats.entries - committed[0]
                if pending >= batch_entries and (here != last_dir or
                                                 pending >= 4 * batch_entries):
                    commit_batch()
                last_dir = here
                if type(e) is EmptyFiles:
                    _add_empty_files(ns, e, inos, stats, now, timestamp_ns, one)
                else:
                    one(e)
                if progress:
                    progress(stats)
            ns.finish()
            w.commit()
            committed[0] = stats.entries
            if fresh:
                w.finish_mkfs()
        except NoSpace as exc:
            w.abort()
            raise NoSpace(f"{image}: not enough space: {exc} (while adding "
                          f"{stats.entries} entries, {stats.bytes} bytes); "
                          f"{_kept(committed[0])}") from None
        except FsToolError as exc:
            w.abort()
            if committed[0]:
                exc.args = (f"{exc} ({_kept(committed[0])})",)
            raise
        except BaseException:
            w.abort()
            raise
    return stats


def read_ahead(walk, files: int = READAHEAD_FILES, nbytes: int = READAHEAD_BYTES,
               head: int = READAHEAD_HEAD):
    """The entries of ``walk``, unchanged and in order, each file among the
    next ``files`` (and ``nbytes`` of data) opened ahead of its turn with the
    kernel asked to start reading its first ``head`` bytes (posix_fadvise
    WILLNEED), so that the source's disk reads many files at once rather
    than one after another while the image is written.  For sources whose
    ``open`` opens a host file (a directory, a protofile's files); a file
    that cannot be opened ahead is opened in its turn, which reports the
    error in order.  Files opened ahead and not used are closed once the
    consumer has moved past them, or when the walk ends or is abandoned."""
    from collections import deque
    from .sources import EmptyFiles
    queue: deque = deque()        # (entry, file opened ahead or None, bytes asked)
    asked = opened = 0
    try:
        for e in walk:
            f = None
            want = 0
            if type(e) is not EmptyFiles and e.kind == "file" and e.size and e.open:
                f, want = _open_ahead(e, head)
            queue.append((e, f, want))
            if f is not None:
                opened += 1
                asked += want
            while queue and (opened > files or asked > nbytes):
                e, f, want = queue[0]
                yield e
                queue.popleft()
                if f is not None:
                    f.close()          # used and closed already, or left unused
                    opened -= 1
                    asked -= want
        while queue:
            e, f, want = queue[0]
            yield e
            queue.popleft()
            if f is not None:
                f.close()
    finally:
        # the one being used too: it stays queued until the consumer is done
        for _e, f, _w in queue:
            if f is not None:
                f.close()


def _open_ahead(e, head: int):
    """Open entry ``e``'s file now and ask the kernel to read its start;
    ``e.open`` then hands over that file.  (None, 0) when it cannot."""
    import os
    try:
        f = e.open()
    except OSError:
        return None, 0
    want = min(e.size, head)
    try:
        os.posix_fadvise(f.fileno(), 0, want, os.POSIX_FADV_WILLNEED)
    except (OSError, AttributeError, ValueError):
        pass
    e.open = lambda: f
    return f, want


def _add_empty_files(ns: Namespace, run, inos: dict, stats: PopulateStats, now: int,
                     timestamp_ns, one) -> None:
    """A run of plain empty files: names new to their directory are created
    in one batch; a name already there takes the ordinary path (replace or
    refuse), in source order."""
    parent = inos.get(run.path)
    items = run.items
    if parent is None:
        for it in items:
            one(run.entry(it))
        return
    if timestamp_ns is not None:
        items = [(n, p, u, g, timestamp_ns, m) for n, p, u, g, _a, m in items]
    entries = ns.dir_state(parent).entries
    # a name given twice in the run (a protofile may) takes the ordinary
    # path the second time, like a name already in the directory
    pending: set = set()
    start = 0
    for k, it in enumerate(items):
        if it[0] in entries or it[0] in pending:
            pending.clear()
            if k > start:
                ns.create_empty_files(parent, items[start:k], now)
                stats.files += k - start
            one(run.entry(it))
            start = k + 1
        else:
            pending.add(it[0])
    if start < len(items):
        ns.create_empty_files(parent, items[start:] if start else items, now)
        stats.files += len(items) - start


def _kept(n: int) -> str:
    if not n:
        return "the filesystem is unchanged"
    return (f"the {n} entries added before it were committed and are in the image; "
            "the rest were not added")


def _msg(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _wrap(path: str, exc: BaseException) -> FsToolError:
    if isinstance(exc, FsToolError):
        return type(exc)(f"{path}: {exc}") if not str(exc).startswith(path) else exc
    return FsToolError(f"{path}: {_msg(exc)}")


def _add(ns: Namespace, e, inos: dict, base: int, stats: PopulateStats, now: int,
         overwrite: bool) -> None:
    path = e.path
    # the entry itself carries the new inode's attributes; change and
    # creation times are the run's
    e.ctime_ns = e.crtime_ns = now
    meta = e
    if path == "":
        if e.kind == "dir":
            ns.setattr(base, mode=e.mode, uid=e.uid, gid=e.gid, atime_ns=e.atime_ns,
                       mtime_ns=e.mtime_ns)
            if e.xattrs:
                ns.set_xattrs(base, dict(e.xattrs))
        return
    parent_path, _sep, name = path.rpartition("/")
    parent = inos.get(parent_path)
    if parent is None:
        raise InvalidArgument(f"{path}: its parent directory {parent_path!r} was not given "
                              "before it")
    bname = name.encode("utf-8", "surrogateescape")
    old = ns.child(parent, bname)
    if old is not None:
        if e.kind == "dir" and (old[1] == C.XFS_DIR3_FT_DIR or ns._is_dir(old[0])):
            # merge into the existing directory, taking the source's attributes
            inos[path] = old[0]
            ns.setattr(old[0], mode=e.mode, uid=e.uid, gid=e.gid, atime_ns=e.atime_ns,
                       mtime_ns=e.mtime_ns)
            if e.xattrs:
                ns.set_xattrs(old[0], dict(e.xattrs))
            return
        if not overwrite:
            raise ExistsError("already exists in the image")
        ns.unlink(parent, bname, rmdir=False)
    kind = e.kind
    if kind == "dir":
        inos[path] = ns.mkdir(parent, bname, meta)
        stats.dirs += 1
    elif kind == "file":
        stream = e.open() if e.size else None
        try:
            ns.create_file(parent, bname, meta, stream, e.size, e.data_ranges)
        finally:
            if stream is not None:
                stream.close()
        stats.files += 1
        stats.bytes += e.size
    elif kind == "symlink":
        target = e.target if isinstance(e.target, bytes) else \
            str(e.target).encode("utf-8", "surrogateescape")
        ns.symlink(parent, bname, target, meta)
        stats.symlinks += 1
    elif kind == "hardlink":
        tpath = e.target.decode("utf-8", "surrogateescape") if isinstance(e.target, bytes) \
            else e.target
        tparent, tname = posixpath.split(tpath.strip("/"))
        tdir = inos.get(tparent)
        ent = ns.child(tdir, tname.encode("utf-8", "surrogateescape")) if tdir else None
        if ent is None:
            raise NotFoundError(f"hard link target {tpath!r} is not in the source before it")
        ns.link(parent, bname, ent[0])
        stats.hardlinks += 1
    elif kind in KIND_MODE:
        ns.mknod(parent, bname, KIND_MODE[kind], meta, e.rdev or (0, 0))
        stats.special += 1
    else:
        raise InvalidArgument(f"unknown entry kind {kind!r}")


def mode_kind(mode: int) -> str:
    return {pystat.S_IFREG: "file", pystat.S_IFDIR: "dir", pystat.S_IFLNK: "symlink",
            pystat.S_IFIFO: "fifo", pystat.S_IFCHR: "chardev", pystat.S_IFBLK: "blockdev",
            pystat.S_IFSOCK: "socket"}.get(pystat.S_IFMT(mode), "unknown")
