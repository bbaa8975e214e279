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

import hashlib
import os
import posixpath
import stat as pystat
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import itemgetter

from .._backend import writers
from . import gc_paused
from ..errors import (FsToolError, ImageError, InvalidArgument, NoSpaceError as NoSpace,
                      NotADirectoryImageError, NotFoundError, UnsupportedError)
from ..format import constants as C
from ..ns.dirbuild import check_name
from ..ns.fileio import FileIO
from ..ns.files import SMALL_COPY
from ..ns.namespace import ExistsError, Meta, Namespace
from ..ns.writer import Writer
from .guard import require_sound
from .sources import EmptyFiles, PlainFiles, open_source

# entries per transaction (a batch may run on to the end of its directory,
# up to four times this)
BATCH_ENTRIES = 16384
# a checkpoint after this many batches or bytes written to the image at the
# most, so that a crash loses little of a long run (counted, not timed: the
# same input must give the same image, log included; data shared with the
# source by reflink is not written, and a run redoes it at no cost)
CHECKPOINT_BATCHES = 4
CHECKPOINT_DATA = 256 << 20
# files of a host source opened ahead of their turn, their first bytes read
# by the kernel meanwhile (posix_fadvise WILLNEED): at most this many files,
# this many bytes asked for, and this much of each file
READAHEAD_FILES = 128
READAHEAD_BYTES = 32 << 20
READAHEAD_HEAD = 2 << 20
READAHEAD_ENTRIES = 4096
# a slice of a run: at most this much small files' data read ahead of their
# inodes, and this many larger files open for copying (RunReader)
RUN_DATA = 8 << 20
RUN_OPEN = 64
# a slice of at most this much data and this many larger files is small:
# handing each alone to the reader's thread and back costs more than the
# read (a real tree's directories mostly hold a few small files), so the
# small first slices of runs queued ahead go to it GROUP_RUNS (or
# RUN_INLINE bytes) at a time, and a small later slice is read when its
# turn comes, by the thread that writes it
RUN_INLINE = 256 << 10
RUN_INLINE_OPEN = 4
GROUP_RUNS = 32
# a plain file's size in a run's item
_SIZE = itemgetter(6)
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
    # with reflink: files whose content an earlier file had, and their bytes
    # (their blocks are that file's, shared)
    shared_files: int = 0
    shared_bytes: int = 0

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


class Dedupe:
    """populate --reflink: regular files of equal content share blocks.
    Each file's content is hashed (BLAKE2b) as it comes; a file whose size
    and hash an earlier file of the run had is made empty and given that
    file's blocks by a remap (one reference more each in the refcount
    btree), as ``cp --reflink`` would share them."""

    def __init__(self, w):
        self.io = FileIO(w)
        self.first: dict = {}         # (size, digest) -> inode
        self.key_of: dict = {}        # inode -> (size, digest)

    @staticmethod
    def digest(stream) -> bytes:
        h = hashlib.blake2b(digest_size=32)
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
        stream.seek(0)
        return h.digest()

    def forget(self, ino: int) -> None:
        key = self.key_of.pop(ino, None)
        if key is not None and self.first.get(key) == ino:
            del self.first[key]


def populate(image, source, dest: str = "/", *, owner_map=None, keep_going: bool = False,
             timestamp_ns: int | None = None, progress=None, overwrite: bool = True,
             report=None, fresh: bool = False, check: bool = True,
             batch_entries: int = BATCH_ENTRIES, reflink: bool = False) -> PopulateStats:
    """Add everything ``source`` (a path, or an already opened Source)
    describes under ``dest`` in ``image``.

    ``fresh`` is for an image mkfs has just made with its superblock marked
    in progress: it is written without the journal (like mkfs.xfs -p) and
    marked finished at the end; until then no kernel mounts it.  Unless
    ``check`` is false, an existing image is checked first and refused when
    fstool check finds errors in it.  ``batch_entries`` is how many entries
    a transaction holds (up to four times as many to finish a directory).
    With ``reflink``, files of equal content share their blocks
    (:class:`Dedupe`; the filesystem needs the reflink feature)."""
    stats = PopulateStats()

    def note(msg: str) -> None:
        stats.skipped.append(msg)
        if report:
            report(msg)

    src = open_source(source, owner_map=owner_map, keep_going=keep_going, report=note) \
        if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") else source
    if check and not fresh:
        require_sound(image)
    committed = [0]          # entries in committed batches
    devs: list = []          # the image's device, once open
    try:
        _populate(image, src, dest, stats, note, committed, devs, keep_going=keep_going,
                  timestamp_ns=timestamp_ns, progress=progress, overwrite=overwrite,
                  report=report, fresh=fresh, batch_entries=batch_entries, reflink=reflink)
    except Exception as exc:
        if devs and devs[0].data_write_failed and committed[0] and \
                not getattr(exc, "kept_told", False):
            # file data written behind failed and the error surfaced after
            # the batch loop (the last checkpoint, the device's close): what
            # the image holds is said as it is there
            raise _told(exc if isinstance(exc, FsToolError) else FsToolError(_msg(exc)),
                        _kept(committed[0], devs[0], image)) from None
        raise
    return stats


def _told(exc: FsToolError, kept: str) -> FsToolError:
    """``exc`` with what the image holds after it (``kept``) added."""
    exc.args = (f"{exc} ({kept})",)
    exc.kept_told = True
    return exc


def _populate(image, src, dest: str, stats: PopulateStats, note, committed: list, devs: list,
              *, keep_going: bool, timestamp_ns, progress, overwrite: bool, report,
              fresh: bool, batch_entries: int, reflink: bool) -> None:
    """populate's run, ``devs`` given the image's device once it is open."""
    with gc_paused(), Writer(image, timestamp_ns=timestamp_ns, logged=not fresh,
                             keeps_parents=True) as w, src:
        devs.append(w.dev)
        now = w.now_ns()
        # file data written by a thread of the device's own, behind this
        # one (the same bytes in the same places, counted when given)
        w.dev.write_behind()
        reader = RunReader(w.sb.blocksize)
        dedupe = None
        if reflink:
            if not w.reflink:
                raise UnsupportedError(f"{image}: the filesystem has no reflink feature: "
                                       "files cannot share blocks (--reflink)")
            dedupe = Dedupe(w)
        try:
            w.begin()
            ns = Namespace(w, now, bulk=True)
            root_meta = Meta(perm=0o755, atime_ns=now, mtime_ns=now, ctime_ns=now)
            base = _mkdirs(ns, dest, root_meta)
            # relative dir path -> inode; or, for a path a member may not
            # pass through, why (a str)
            inos = {"": base}

            def one(e):
                try:
                    if timestamp_ns is not None:
                        # reading the source moves access times: a fixed
                        # build time stands in for them
                        e.atime_ns = timestamp_ns
                    _add(ns, e, inos, base, stats, now, overwrite, report, dedupe)
                except NoSpace:
                    raise
                except (OSError, InvalidArgument, ExistsError) as exc:
                    if isinstance(exc, ImageError) or w.dev.data_write_failed:
                        # the image's device failed, not this entry: the
                        # run ends with the device's error as it is
                        raise
                    if not keep_going or isinstance(exc, ExistsError) and not overwrite:
                        raise _wrap(e.path, exc) from None
                    note(f"{e.path}: skipped: {_msg(exc)}")

            since = {"batches": 0, "bytes": w.dev.written}

            def commit_batch():
                ns.finish()
                w.commit()
                ns.committed()
                committed[0] = stats.entries
                since["batches"] += 1
                if since["batches"] >= CHECKPOINT_BATCHES or \
                        w.dev.written - since["bytes"] >= CHECKPOINT_DATA:
                    w.journal.push()
                    since["batches"], since["bytes"] = 0, w.dev.written
                w.begin()

            last_dir = None
            # (runs of plain files skip the per-file path that shares content)
            # (a host directory is walked on a thread of its own)
            # (any object with entries() is a source; only a host directory
            # walks ahead)
            ahead = {"ahead": True} if getattr(src, "kind", None) == "dir" else {}
            walk = src.entries(runs=dedupe is None, **ahead) if hasattr(src, "entries") else src
            if getattr(src, "host_files", False):
                walk = read_ahead(walk, prefetch=reader.start)
            # consecutive new symlinks of a directory, made in one batch
            links = SymlinkRun(ns, inos, stats, now, timestamp_ns)
            for e in walk:
                run = isinstance(e, EmptyFiles)
                here = e.path if run else e.path.rpartition("/")[0]
                pending = stats.entries + len(links.items) - committed[0]
                if pending >= batch_entries and (here != last_dir or
                                                 pending >= 4 * batch_entries):
                    links.flush()
                    commit_batch()
                last_dir = here
                if run:
                    links.flush()
                    _add_plain_files(ns, e, inos, stats, now, timestamp_ns, one, reader)
                elif not links.take(e, here):
                    links.flush()
                    one(e)
                if progress:
                    progress(stats)
            links.flush()
            ns.finish()
            w.commit()
            committed[0] = stats.entries
            if fresh:
                w.finish_mkfs()
        except NoSpace as exc:
            w.abort()
            err = NoSpace(f"{image}: not enough space: {exc} (while adding "
                          f"{stats.entries} entries, {stats.bytes} bytes); "
                          f"{_kept(committed[0], w.dev, image)}")
            err.kept_told = True
            raise err from None
        except FsToolError as exc:
            w.abort()
            if committed[0]:
                raise _told(exc, _kept(committed[0], w.dev, image))
            raise
        except BaseException:
            w.abort()
            raise
        finally:
            reader.close()


def read_ahead(walk, files: int = READAHEAD_FILES, nbytes: int = READAHEAD_BYTES,
               head: int = READAHEAD_HEAD, prefetch=None, entries: int = READAHEAD_ENTRIES):
    """The entries of ``walk``, unchanged and in order, each file among the
    next ``files`` (and ``nbytes`` of data) opened ahead of its turn with the
    kernel asked to start reading its first ``head`` bytes (posix_fadvise
    WILLNEED), so that the source's disk reads many files at once rather
    than one after another while the image is written.  For sources whose
    ``open`` opens a host file (a directory, a protofile's files); a file
    that cannot be opened ahead is opened in its turn, which reports the
    error in order.  Files opened ahead and not used are closed once the
    consumer has moved past them, or when the walk ends or is abandoned.
    ``prefetch``, when given, is called with every run of files as it is
    queued and returns ``(bytes, files)`` it has started to read or open
    for it, counted against ``nbytes`` and ``files`` until the run is
    used.  At most ``entries`` entries and runs are queued at once."""
    queue: deque = deque()        # (entry, file opened ahead or None, bytes asked)
    asked = opened = 0
    try:
        for e in walk:
            f = None
            want = nopen = 0
            if isinstance(e, EmptyFiles):
                if prefetch is not None:
                    want, nopen = prefetch(e)
            elif e.kind == "file" and e.size and e.open:
                f, want = _open_ahead(e, head)
                nopen = 1 if f is not None else 0
            queue.append((e, f, want, nopen))
            opened += nopen
            asked += want
            while queue and (opened > files or asked > nbytes or len(queue) > entries):
                e, f, want, nopen = queue[0]
                yield e
                queue.popleft()
                asked -= want
                opened -= nopen
                if f is not None:
                    f.close()          # used and closed already, or left unused
        while queue:
            e, f, _want, _nopen = queue[0]
            yield e
            queue.popleft()
            if f is not None:
                f.close()
    finally:
        # the one being used too: it stays queued until the consumer is done
        for _e, f, _w, _n in queue:
            if f is not None:
                f.close()


def _open_ahead(e, head: int):
    """Open entry ``e``'s file now and ask the kernel to read its start;
    ``e.open`` then hands over that file.  (None, 0) when it cannot."""
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


def _add_plain_files(ns: Namespace, run, inos: dict, stats: PopulateStats, now: int,
                     timestamp_ns, one, reader: "RunReader") -> None:
    """A run of plain files: names new to their directory are created in
    batches; a name already there, and a file that cannot be opened or
    read, take the ordinary path (replace or refuse, read or report), in
    source order.  A run of a host directory is taken a slice at a time
    from ``reader``: the small files' data read and the larger files
    opened before their inodes and blocks are taken."""
    parent = inos.get(run.path)
    items = run.items
    if type(parent) is not int:
        reader.drop(run)
        for it in items:
            one(run.entry(it))
        return
    if timestamp_ns is not None:
        items = [it[:4] + (timestamp_ns,) + it[5:] for it in items]
    entries = ns.dir_state(parent).entries
    for a, b, data, bad in reader.slices(run):
        part = items[a:b]
        try:
            # a name given twice in the run (a protofile may) takes the
            # ordinary path the second time, like a name already in the
            # directory
            pending: set = set()
            start = 0
            names = [it[0] for it in part]
            if not bad and entries.keys().isdisjoint(names) and \
                    len(set(names)) == len(names):
                # every name new and given once, every file read: the
                # loop below would make them one batch
                walk = [(len(part), None)]
            else:
                walk = enumerate(part + [None])
            for k, it in walk:
                if it is not None and it[0] not in entries and it[0] not in pending and \
                        k not in bad:
                    pending.add(it[0])
                    continue
                if k > start:
                    fds = data[2][start:k] if data is not None else None
                    try:
                        ns.create_plain_files(parent, part[start:k], now,
                                              (data[0], data[1][start:k], fds)
                                              if data is not None else None, run.path or "/")
                    except (OSError, FsToolError) as exc:
                        if isinstance(exc, NoSpace):
                            raise
                        raise _wrap(run.path or "/", exc) from None
                    finally:
                        if fds is not None:
                            # those handed to the device's thread (-1) are its to close
                            data[2][start:k] = fds
                    stats.files += k - start
                    if data is not None:
                        stats.bytes += sum(map(_SIZE, part[start:k]))
                if it is not None:
                    pending.clear()
                    one(run.entry(it))
                start = k + 1
        finally:
            if data is not None:
                _close_fds(data[2])


class SymlinkRun:
    """Consecutive symlinks of one directory that populate can make in one
    batch (``Namespace.create_symlinks``): new names, no xattrs, targets
    held in the inode (beside their parent pointers, where the filesystem
    keeps them).  Taken as the walk gives them and made when
    :meth:`flush` is called, before anything else happens to the image, so
    that inodes and entries are the ones one symlink after another would
    give."""

    def __init__(self, ns: Namespace, inos: dict, stats: PopulateStats, now: int,
                 timestamp_ns):
        self.ns, self.inos, self.stats, self.now = ns, inos, stats, now
        self.timestamp_ns = timestamp_ns
        self.limit = ns.inline_symlinks()
        self.path = None          # the directory of the run
        self.parent = 0
        self.items: list = []
        self.targets: list = []
        self.names: set = set()

    def take(self, e, here: str) -> bool:
        """Add entry ``e`` (in directory ``here``) to the run when it can
        be made in the batch; False (nothing taken) when not."""
        target = e.target
        if e.kind != "symlink" or e.xattrs or e.implied_by is not None or \
                type(target) is not bytes or not 0 < len(target) <= self.limit or \
                b"\0" in target or not e.path:
            return False
        if here != self.path:
            self.flush()
            parent = self.inos.get(here)
            if type(parent) is not int:
                return False
            self.path, self.parent = here, parent
        bname = e.path.rpartition("/")[2].encode("utf-8", "surrogateescape")
        if bname in self.names or self.ns.child(self.parent, bname) is not None or \
                not self.ns.symlink_in_batch(bname, target):
            return False
        try:
            check_name(bname)
        except FsToolError:
            return False
        atime = self.timestamp_ns if self.timestamp_ns is not None else e.atime_ns
        self.items.append((bname, e.mode, e.uid, e.gid, atime, e.mtime_ns))
        self.targets.append(target)
        self.names.add(bname)
        return True

    def flush(self) -> None:
        """Make the symlinks taken."""
        if not self.items:
            return
        items, targets = self.items, self.targets
        self.items, self.targets, self.names = [], [], set()
        try:
            self.ns.create_symlinks(self.parent, items, targets, self.now)
        except (OSError, FsToolError) as exc:
            if isinstance(exc, NoSpace):
                raise
            raise _wrap(self.path or "/", exc) from None
        self.stats.symlinks += len(items)


class RunReader:
    """Reads the runs of plain files of a host directory (:class:`PlainFiles`)
    a slice at a time, at most RUN_DATA bytes of small files and RUN_OPEN
    larger files: a file of up to SMALL_COPY bytes is read into the slice's
    buffer at a block-aligned offset (zeros after its end), a larger one
    opened (the kernel asked to read its start), all in one native call
    with the interpreter let go (``writers.read_files``).  Slices are read
    on a thread of the reader's own: the next slice of a run while the one
    before it is written, and the first slice of a run as soon as
    :meth:`start` sees the run queued (``read_ahead``), so that reading the
    source overlaps the rest of populate's work.  Small first slices
    (RUN_INLINE: most directories of a real tree) are handed to the thread
    together, up to GROUP_RUNS runs or RUN_INLINE bytes at once; a small
    later slice is read when its turn comes.  What a slice holds, and so
    the image, does not depend on when or by which thread it was read."""

    def __init__(self, blocksize: int):
        self.mask = blocksize - 1
        self.pool = None
        self.ahead: dict = {}        # id(run) -> future of its first slice
        self.group = None            # small first slices not yet handed to the thread

    def start(self, run) -> tuple:
        """Start reading the first slice of ``run`` when it is a run of a
        host directory; ``(bytes, files opened)`` that slice will hold,
        its directory included (opened by the read: see :meth:`_read`)."""
        if type(run) is not PlainFiles or id(run) in self.ahead or \
                not any(it[6] for it in run.items):
            return 0, 0
        bounds = self._bounds(run.items, 0)
        if self._inline(bounds):
            # small: read with the next small ones, in one hand-over
            group = self.group
            if group is None:
                group = self.group = _SliceGroup(self._send)
            part = group.add(run.items, run.dirpath, bounds)
            if group.bytes >= RUN_INLINE or len(group.jobs) >= GROUP_RUNS:
                self._send()
        else:
            part = self._pool().submit(self._read, run.items, run.dirpath, bounds)
        self.ahead[id(run)] = part
        # the directory held open counts as a file too
        return bounds[2], bounds[5] + 1

    def drop(self, run) -> None:
        """``run`` will not be taken after all."""
        got = self.ahead.pop(id(run), None)
        if got is not None:
            self._discard(got, -1)

    def slices(self, run):
        """``(a, b, (buf, offsets, fds), bad)`` for each slice ``items[a:b]``
        of a run of a host directory: file k's data in ``buf`` at
        ``offsets[k]``, or open as ``fds[k]`` (-1 for the others; the caller
        closes them), ``bad`` the indexes in the slice of the files that
        could not be read or opened.  A run of empty files from another
        source, or of empty files only, is one slice with neither."""
        if type(run) is not PlainFiles or not any(it[6] for it in run.items):
            yield 0, len(run.items), None, ()
            return
        items = run.items
        fut = self.ahead.pop(id(run), None)
        if fut is None:
            fut = self._submit(items, run.dirpath, self._bounds(items, 0))
        # the directory's descriptor, once a read has opened it and left it
        # open for the next slice (whose read then owns it)
        dirfd = -1
        try:
            while fut is not None:
                res = fut.result() if type(fut) is not tuple else fut
                b, dirfd = res[1], res[4]
                fut = self._submit(items, dirfd, self._bounds(items, b)) \
                    if b < len(items) else None
                yield res[:4]
        finally:
            if fut is not None:
                self._discard(fut, dirfd)

    def close(self) -> None:
        """Stop the thread; whatever was read ahead and not taken is let go."""
        for fut in self.ahead.values():
            self._discard(fut, -1)
        self.ahead.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    @staticmethod
    def _inline(bounds: tuple) -> bool:
        """Whether the slice of ``bounds`` is read when its turn comes."""
        return bounds[2] <= RUN_INLINE and bounds[5] <= RUN_INLINE_OPEN

    def _submit(self, items: list, where, bounds: tuple):
        """A future of the slice of ``bounds``, or the slice itself when it
        is small enough to read now (``where`` as :meth:`_read` takes it)."""
        if self._inline(bounds):
            return self._read(items, where, bounds)
        return self._pool().submit(self._read, items, where, bounds)

    def _send(self) -> None:
        """The small slices gathered so far handed to the thread."""
        group, self.group = self.group, None
        if group is not None:
            group.fut = self._pool().submit(self._read_group, group.jobs)

    def _pool(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="fstool-read")
        return self.pool

    @staticmethod
    def _discard(fut, dirfd: int) -> None:
        """A slice read and not taken: its open files closed, and the
        directory's descriptor: the one the read left open, or ``dirfd``
        given to a read that never ran."""
        if type(fut) is tuple:
            res = fut
        elif fut.cancel():
            _close_dir(dirfd)
            return
        else:
            try:
                res = fut.result()
            except Exception:
                return
        if res is None:             # given up before the group was read
            _close_dir(dirfd)
            return
        if res[2] is not None:
            _close_fds(res[2][2])
        _close_dir(res[4])

    def _bounds(self, items: list, a: int) -> tuple:
        """(a, b, bytes, offsets, sizes to read or ask for, files opened) of
        the slice of ``items`` from ``a``: offset -1 for a file to open
        (``writers.slice_bounds``)."""
        return writers.slice_bounds(items, a, self.mask, SMALL_COPY, RUN_DATA, RUN_OPEN,
                                    READAHEAD_HEAD)

    @staticmethod
    def _read(items: list, where, bounds: tuple) -> tuple:
        """The slice of ``bounds``: ``(a, b, (buf, offsets, fds), bad,
        dirfd)``.  ``where`` is the directory's descriptor, or its path
        (opened here, on whichever thread reads); the descriptor is closed
        here after the run's last slice, else left open in ``dirfd`` for
        the next (-1 when closed, or when the directory cannot be opened:
        its files are then taken one by one)."""
        a, b, total, offsets, want, _nopen = bounds
        dirfd = where if type(where) is int else _open_dir(where)
        if dirfd < 0:               # the directory cannot be opened: one by one
            return a, b, None, set(range(b - a)), -1
        try:
            buf = bytearray(total)
            bad, fds = writers.read_files(dirfd, [it[0] for it in items[a:b]], want, buf,
                                          offsets)
        except BaseException:
            _close_dir(dirfd)
            raise
        if b == len(items):
            _close_dir(dirfd)
            dirfd = -1
        return a, b, (buf, offsets, fds), {k for k, _err in bad}, dirfd

    @staticmethod
    def _read_group(jobs: list) -> list:
        """The first slices of ``jobs`` (``(items, directory path, bounds)``
        each, None for one given up) as :meth:`_read` gives them, all read
        in one native call into one buffer (each slice's offsets moved to
        its part)."""
        out: list = [None] * len(jobs)
        names: list = []
        want: list = []
        offs: list = []
        dirs: list = []
        spans = []
        total = 0
        for j, job in enumerate(jobs):
            if job is None:
                continue
            items, path, (a, b, nbytes, offsets, sizes, _nopen) = job
            dirfd = _open_dir(path)
            if dirfd < 0:           # the directory cannot be opened: one by one
                out[j] = (a, b, None, set(range(b - a)), -1)
                continue
            spans.append((j, a, b, len(names), dirfd))
            names.extend([it[0] for it in items[a:b]])
            want.extend(sizes)
            offs.extend([o + total if o >= 0 else o for o in offsets])
            dirs.extend([dirfd] * (b - a))
            total += nbytes
        if spans:
            try:
                buf = bytearray(total)
                bad, fds = writers.read_files(-1, names, want, buf, offs, dirs)
            except BaseException:
                for span in spans:
                    _close_dir(span[4])
                raise
            for j, a, b, first, dirfd in spans:
                if b == len(jobs[j][0]):       # the run's last slice
                    _close_dir(dirfd)
                    dirfd = -1
                end = first + b - a
                out[j] = (a, b, (buf, offs[first:end], fds[first:end]),
                          {k - first for k, _err in bad if first <= k < end}, dirfd)
        return out


class _SliceGroup:
    """Small first slices of runs, read by the reader's thread in one task;
    :meth:`add` gives each run a stand-in for its future."""

    def __init__(self, send):
        self.send = send            # hands the group to the thread
        self.jobs: list = []        # (items, directory path, bounds), None once given up
        self.bytes = 0
        self.fut = None

    def add(self, items: list, path: bytes, bounds: tuple) -> "_GroupPart":
        self.jobs.append((items, path, bounds))
        self.bytes += bounds[2]
        return _GroupPart(self, len(self.jobs) - 1)


class _GroupPart:
    """One run's slice in a :class:`_SliceGroup`, as a future of it."""
    __slots__ = ("group", "k")

    def __init__(self, group: _SliceGroup, k: int):
        self.group, self.k = group, k

    def result(self):
        group = self.group
        if group.fut is None:
            group.send()
        return group.fut.result()[self.k]

    def cancel(self) -> bool:
        """True, nothing read, when the group is not handed over yet."""
        if self.group.fut is None:
            self.group.jobs[self.k] = None
            return True
        return False


def _open_dir(path: bytes) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return -1


def _close_dir(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _close_fds(fds: list) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)


def _kept(n: int, dev, image) -> str:
    if dev.data_write_failed:
        # file data written behind failed after the batches mapping it were
        # committed in memory: the device refuses every later write, so
        # nothing after the last checkpoint written reaches the image
        return ("file data could not be written: the image holds what the last "
                "checkpoint written before the error held; if its log is dirty, "
                f"'fstool log replay {image}' recovers it")
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
        if getattr(exc, "located", False) or str(exc).startswith(path) or \
                isinstance(exc, ImageError):
            # (an error of the image's device is not the entry's)
            return exc
        try:
            return type(exc)(f"{path}: {exc}")
        except TypeError:       # an error made of parts (CorruptionError): as it is
            return exc
    return FsToolError(f"{path}: {_msg(exc)}")


def _add(ns: Namespace, e, inos: dict, base: int, stats: PopulateStats, now: int,
         overwrite: bool, report=None, dedupe: Dedupe | None = None) -> None:
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
    if type(parent) is not int:
        if e.implied_by is not None and parent is not None:
            inos[path] = parent            # below a path refused already
            return
        if parent is None:
            raise InvalidArgument(f"{path}: its parent directory {parent_path!r} was not "
                                  "given before it")
        raise NotADirectoryImageError(path, parent)
    bname = name.encode("utf-8", "surrogateescape")
    old = ns.child(parent, bname)
    if old is not None:
        is_dir = e.kind == "dir" and (old[1] == C.XFS_DIR3_FT_DIR or ns._is_dir(old[0]))
        if e.implied_by is not None:
            # a parent only implied by a member's path: what is there stays
            # as it is, and no member goes through a symlink (or a file):
            # each member below it is refused with why
            if is_dir:
                inos[path] = old[0]
            else:
                kind = C.TYPE_NAMES.get(C.FTYPE_TO_IFMT.get(old[1]), "file")
                inos[path] = (f"its path passes through {path}, which is a {kind}, not a "
                              "directory; populate follows no symlinks (a member naming the "
                              "directory itself replaces it)")
            return
        if e.kind == "dir" and is_dir:
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
        if dedupe is not None:
            dedupe.forget(old[0])
        if e.kind == "dir" and old[1] == C.XFS_DIR3_FT_SYMLINK and report is not None:
            # as GNU tar does (without --keep-directory-symlink)
            report(f"{path}: the symlink there was replaced by the directory")
    kind = e.kind
    if kind == "dir":
        inos[path] = ns.mkdir(parent, bname, meta)
        stats.dirs += 1
    elif kind == "file":
        stream = e.open() if e.size else None
        try:
            if dedupe is not None and stream is not None:
                key = (e.size, dedupe.digest(stream))
                first = dedupe.first.get(key)
                if first is not None:
                    ino = ns.create_file(parent, bname, meta)
                    dedupe.io.remap(first, 0, ino, 0, e.size)
                    stats.shared_files += 1
                    stats.shared_bytes += e.size
                else:
                    ino = ns.create_file(parent, bname, meta, stream, e.size, e.data_ranges)
                    dedupe.first[key] = ino
                    dedupe.key_of[ino] = key
            else:
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
        ent = ns.child(tdir, tname.encode("utf-8", "surrogateescape")) \
            if type(tdir) is int else None
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
