"""Sources for populate: a host directory, a tar archive or an mkfs.xfs
protofile, turned into one stream of :class:`Entry` records.

Parents always come before their children and a hard link after the entry it
links to.  Paths are relative POSIX paths ("" is the source's root), str with
surrogateescape for bytes that are not UTF-8, so any name round-trips.
Names that could escape the destination (absolute paths, ``..``), names
over 255 bytes, NUL bytes and over-long symlink targets are refused with a
one-line error naming the entry, or skipped and reported with keep_going.
"""
from __future__ import annotations

import io
import os
import posixpath
import re
import stat as pystat
import sys
import tarfile
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

from .._backend import writers
from ..errors import FsToolError, InvalidArgument, NameTooLongError
from ..io.sparse import data_ranges_of
from ..ns.attrbuild import check_symlink_target
from ..ns.dirbuild import NAME_MAX, check_name

ANY_SIZE = 1 << 62          # stat_plain_files' size limit for runs: none
# a host directory walked on a thread of its own (DirSource.entries with
# ahead): at most this many entries (a run's files each counted) waiting
# for the consumer, handed over in chunks of up to WALK_CHUNK items
WALK_AHEAD = 8192
WALK_CHUNK = 64
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass(slots=True)
class Entry:
    path: str
    kind: str              # file dir symlink fifo chardev blockdev socket hardlink
    mode: int              # permission bits, suid/sgid/sticky included
    uid: int = 0
    gid: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    size: int = 0
    target: bytes | str | None = None     # symlink target (bytes) / hardlink: earlier path
    rdev: tuple | None = None
    xattrs: list = field(default_factory=list)
    open: Callable[[], BinaryIO] | None = None
    data_ranges: list | None = None
    crtime_ns: int = 0
    # a directory the source did not list, made as the parent of this member
    # (tar): it never replaces what is there, and changes no directory
    implied_by: str | None = None

    # an Entry can stand in for the namespace layer's Meta
    @property
    def perm(self) -> int:
        return self.mode


def squash_owner(uid: int, gid: int) -> tuple[int, int]:
    """Everything owned by root."""
    return 0, 0


def parse_owner_map(text: str) -> Callable[[int, int], tuple[int, int]]:
    """``"1000:1000=0:0,1001:100=5:5"``: owners to replace; others are kept.
    A side may be ``UID`` alone (any group, group kept)."""
    table = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        src, sep, dst = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r}: use FROM=TO, e.g. 1000:1000=0:0")
        try:
            su, _, sg = src.partition(":")
            du, _, dg = dst.partition(":")
            key = (int(su), int(sg) if sg else None)
            value = (int(du), int(dg) if dg else None)
        except ValueError:
            raise ValueError(f"{item!r}: owners are numbers, e.g. 1000:1000=0:0") from None
        if any(v is not None and not 0 <= v <= 0xFFFFFFFF for v in key + value):
            raise ValueError(f"{item!r}: owners are numbers from 0 to 4294967295")
        table[key] = value

    def mapper(uid: int, gid: int) -> tuple[int, int]:
        hit = table.get((uid, gid)) or table.get((uid, None))
        if hit is None:
            return uid, gid
        return hit[0], gid if hit[1] is None else hit[1]
    return mapper


def check_path(path: str, what: str) -> str:
    """A safe relative path, normalised; raises InvalidArgument (or
    NameTooLongError for a name of more than NAME_MAX bytes)."""
    raw = path.encode("utf-8", "surrogateescape")
    if b"\0" in raw:
        raise InvalidArgument(f"{what}: path contains a NUL byte")
    if raw.startswith(b"/"):
        raise InvalidArgument(f"{what}: absolute path {path!r} would escape the destination")
    parts = []
    for p in path.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            raise InvalidArgument(f"{what}: path {path!r} has '..', which could escape the "
                                  "destination")
        try:
            check_name(p.encode("utf-8", "surrogateescape"))
        except NameTooLongError as e:
            raise NameTooLongError(f"{what}: {e}") from None
        parts.append(p)
    return "/".join(parts)


class Source:
    kind = "?"

    def __init__(self, owner_map=None, keep_going=False, report=None, clamp_ns=None):
        self.owner_map = owner_map
        self.keep_going = keep_going
        self.report = report or (lambda msg: None)
        # tar's --clamp-mtime: modification times after clamp_ns become clamp_ns
        self.clamp_ns = clamp_ns

    def clamped(self, stream):
        """``stream`` of entries (and EmptyFiles runs) with every modification
        time later than ``clamp_ns`` set to it; unchanged without a clamp."""
        t = self.clamp_ns
        if t is None:
            return stream
        return self._clamp(stream, t)

    @staticmethod
    def _clamp(stream, t: int):
        for e in stream:
            if isinstance(e, EmptyFiles):
                if any(it[5] > t for it in e.items):
                    e.items = [it if it[5] <= t else it[:5] + (t,) + it[6:] for it in e.items]
            elif e.mtime_ns > t:
                e.mtime_ns = t
            yield e

    def owners(self, uid, gid):
        return self.owner_map(uid, gid) if self.owner_map else (uid, gid)

    def bad(self, exc: Exception) -> None:
        if not self.keep_going:
            raise exc
        self.report(str(exc))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        pass


class EmptyFiles:
    """A run of plain empty files (regular, size 0, one link, no xattrs) in
    one directory, as :meth:`DirSource.entries` gives them with
    ``runs=True``: ``items`` holds ``(name bytes, perm, uid, gid, atime_ns,
    mtime_ns)`` in source order.  Expanded, each item is an ordinary file
    :class:`Entry`."""
    __slots__ = ("path", "items")

    def __init__(self, path: str, items: list):
        self.path = path
        self.items = items

    def entry(self, item) -> Entry:
        name, perm, uid, gid, atime_ns, mtime_ns = item
        rel = _child_path(self.path, name)
        e = Entry(rel, "file", perm, uid, gid, atime_ns, mtime_ns, 0)
        e.open = _empty_file
        return e

    def name_path(self, name: bytes) -> str:
        return _child_path(self.path, name)


class PlainFiles(EmptyFiles):
    """A run of plain files (regular, one link, no xattrs, no holes) in one
    directory of a host source: ``items`` holds ``(name bytes, perm, uid,
    gid, atime_ns, mtime_ns, size)`` in source order; ``dirpath`` is the
    host directory (bytes) to read them from."""
    __slots__ = ("dirpath",)

    def __init__(self, path: str, items: list, dirpath: bytes):
        super().__init__(path, items)
        self.dirpath = dirpath

    def entry(self, item) -> Entry:
        name, perm, uid, gid, atime_ns, mtime_ns, size = item
        e = Entry(_child_path(self.path, name), "file", perm, uid, gid, atime_ns, mtime_ns,
                  0, size)
        full = self.dirpath + b"/" + name
        e.open = lambda: open(full, "rb", buffering=0)
        return e


def _child_path(parent: str, name: bytes) -> str:
    n = name.decode("utf-8", "surrogateescape") if _UTF8 else os.fsdecode(name)
    return f"{parent}/{n}" if parent else n


def _empty_file():
    return io.BytesIO(b"")


_UTF8 = sys.getfilesystemencoding().lower() in ("utf-8", "utf8") and \
    sys.getfilesystemencodeerrors() == "surrogateescape"


class DirSource(Source):
    """A host directory, walked depth-first in byte order of names."""
    kind = "dir"
    host_files = True           # an entry's open() opens a host file by path

    def __init__(self, root: str, **kw):
        super().__init__(**kw)
        self.root = os.fspath(root)

    def _entry(self, rel: str, full, st, links: dict, pre: tuple | None = None) -> Entry:
        """The entry of host path ``full`` from its lstat ``st``; ``pre``,
        when given, is ``st`` as ``writers.scan_names`` described it, with
        its xattr names' length and symlink target, read already."""
        uid, gid = self.owners(st.st_uid, st.st_gid)
        e = Entry(rel, "file", st.st_mode & 0o7777, uid, gid, st.st_atime_ns,
                  st.st_mtime_ns, st.st_ctime_ns)
        fmt = pystat.S_IFMT(st.st_mode)
        if fmt != pystat.S_IFDIR and st.st_nlink > 1:
            key = (st.st_dev, st.st_ino)
            first = links.get(key)
            if first is not None:
                e.kind, e.target = "hardlink", first
                return e
            links[key] = rel
        if fmt == pystat.S_IFREG:
            e.size = st.st_size
            e.open = lambda full=full: open(full, "rb", buffering=0)
            if st.st_size and st.st_blocks * 512 < st.st_size:
                fd = os.open(full, os.O_RDONLY)
                try:
                    e.data_ranges = data_ranges_of(fd, st)
                finally:
                    os.close(fd)
        elif fmt == pystat.S_IFDIR:
            e.kind = "dir"
        elif fmt == pystat.S_IFLNK:
            e.kind = "symlink"
            if pre is None:
                target = os.readlink(os.fsencode(full))
            elif pre[14]:
                raise OSError(pre[14], os.strerror(pre[14]))
            else:
                target = pre[13]
            e.target = check_symlink_target(target, rel)
        elif fmt == pystat.S_IFIFO:
            e.kind = "fifo"
        elif fmt == pystat.S_IFSOCK:
            e.kind = "socket"
        elif fmt in (pystat.S_IFCHR, pystat.S_IFBLK):
            e.kind = "chardev" if fmt == pystat.S_IFCHR else "blockdev"
            e.rdev = (os.major(st.st_rdev), os.minor(st.st_rdev))
        # (names that cannot be listed count as none)
        e.xattrs = self._xattrs(full) if pre is None or pre[12] > 0 else []
        return e

    @staticmethod
    def _xattrs(full) -> list:
        try:
            names = os.listxattr(full, follow_symlinks=False)
        except OSError:
            return []
        out = []
        for n in sorted(names):
            try:
                out.append((n, os.getxattr(full, n, follow_symlinks=False)))
            except OSError:
                continue
        return out

    def __iter__(self) -> Iterator[Entry]:
        return self.entries()

    def entries(self, runs: bool = False, ahead: bool = False):
        """Every entry, parents first.  With ``runs``, consecutive plain
        files of a directory (regular, one link, no xattrs, no holes) come
        as one :class:`PlainFiles`.  With ``ahead``, the directory is walked
        on a thread of its own (:func:`walk_ahead`), its system calls
        overlapping the consumer's work; the entries, and the errors and
        reports, come in the same order either way."""
        if ahead:
            return self.clamped(walk_ahead(lambda bad: self._walk(runs, bad),
                                           self.keep_going, self.report))
        return self.clamped(self._walk(runs))

    def _walk(self, runs: bool, bad=None):
        """The walk; ``bad`` (Source.bad by default) is told of each entry
        that cannot be read."""
        bad = bad or self.bad
        links: dict = {}
        st = os.lstat(self.root)
        yield self._entry("", self.root, st, links)
        stack = [("", self.root)]
        owner_map = self.owner_map
        scan_names = writers.scan_names
        while stack:
            rel, full = stack.pop()
            bfull = os.fsencode(full)
            try:
                fd = os.open(bfull, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    names = sorted(os.listdir(bfull))
                except BaseException:
                    os.close(fd)
                    raise
            except OSError as e:
                bad(FsToolError(f"{full}: cannot list: {e.strerror}"))
                continue
            subdirs = []
            run: list = []
            try:
                # every name's lstat (and readlink, and whether it has
                # xattrs) in one call, with the interpreter let go once
                # (native); plain files, with runs, apart
                plain, other = scan_names(fd, bfull, names, ANY_SIZE if runs else -1, True)
                for k, bname in enumerate(names):
                    if plain[k] is not None and len(bname) <= NAME_MAX:
                        it = plain[k]
                        if owner_map is not None:
                            uid, gid = owner_map(it[2], it[3])
                            it = (bname, it[1], uid, gid) + it[4:]
                        run.append(it)
                        continue
                    cfull = bfull + b"/" + bname
                    try:
                        if len(bname) > NAME_MAX:
                            raise NameTooLongError(f"{_child_path(rel, bname)}: name of "
                                                   f"{len(bname)} bytes; XFS allows at most "
                                                   f"{NAME_MAX}")
                        pre = other[k]
                        if type(pre) is tuple:
                            ent = self._entry(_child_path(rel, bname), os.fsdecode(cfull),
                                              _Stat(*pre[:12]), links, pre)
                        elif pre is not None:
                            raise OSError(pre, os.strerror(pre))
                        else:       # looked at again, the general way
                            cst = os.lstat(bname, dir_fd=fd)
                            ent = self._entry(_child_path(rel, bname), os.fsdecode(cfull),
                                              cst, links)
                    except (OSError, InvalidArgument) as exc:
                        msg = exc if isinstance(exc, FsToolError) else \
                            FsToolError(f"{os.fsdecode(cfull)}: {exc.strerror}")
                        bad(msg)
                        continue
                    if run:
                        yield PlainFiles(rel, run, bfull)
                        run = []
                    yield ent
                    if ent.kind == "dir":
                        subdirs.append((ent.path, os.fsdecode(cfull)))
            finally:
                os.close(fd)
            if run:
                yield PlainFiles(rel, run, bfull)
            stack.extend(reversed(subdirs))


class _Stat:
    """The fields of an lstat that DirSource._entry reads, from
    ``writers.scan_names``."""
    __slots__ = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
                 "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_dev", "st_ino", "st_rdev")

    def __init__(self, mode, nlink, uid, gid, size, blocks, atime_ns, mtime_ns, ctime_ns,
                 dev, ino, rdev):
        self.st_mode, self.st_nlink, self.st_uid, self.st_gid = mode, nlink, uid, gid
        self.st_size, self.st_blocks, self.st_dev, self.st_ino = size, blocks, dev, ino
        self.st_atime_ns, self.st_mtime_ns, self.st_ctime_ns = atime_ns, mtime_ns, ctime_ns
        self.st_rdev = rdev


class _Raised:
    """An exception of the walking thread, raised in the consumer's turn."""
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Report(str):
    """A message of the walking thread, reported in the consumer's turn."""


def walk_ahead(walk_of, keep_going: bool, report, limit: int = WALK_AHEAD,
               chunk_items: int = WALK_CHUNK):
    """The items of ``walk_of(bad)``, unchanged and in order, taken on a
    thread of their own while the consumer works on those before them (the
    walk's system calls let go of the interpreter).  ``bad(exc)`` raises
    ``exc`` or, with ``keep_going``, has ``report`` given its message when
    the consumer reaches that point of the walk, so that errors and
    reports come where the walk met them.  At most ``limit`` entries (a
    run of files counting its files) wait for the consumer; the walk stops
    when the consumer does (it is closed, its directories with it)."""
    cond = threading.Condition()
    queue: deque = deque()              # (chunk, weight)
    st = {"weight": 0, "done": False, "stop": False, "hungry": False}

    def walker():
        chunk: list = []
        weight = 0

        def bad(exc):
            if not keep_going:
                raise exc
            chunk.append(_Report(str(exc)))

        def flush(last: bool = False) -> bool:
            nonlocal chunk, weight
            with cond:
                while st["weight"] >= limit and not st["stop"] and not last:
                    cond.wait()
                if st["stop"]:
                    return False
                if chunk:
                    queue.append((chunk, weight))
                    st["weight"] += weight
                st["hungry"] = False
                if last:
                    st["done"] = True
                cond.notify_all()
            chunk, weight = [], 0
            return True

        walk = walk_of(bad)
        try:
            for item in walk:
                chunk.append(item)
                weight += len(item.items) if isinstance(item, EmptyFiles) else 1
                if (len(chunk) >= chunk_items or st["hungry"]) and not flush():
                    break
        except BaseException as exc:        # handed to the consumer
            chunk.append(_Raised(exc))
        finally:
            walk.close()
            flush(last=True)

    thread = threading.Thread(target=walker, name="fstool-walk", daemon=True)
    thread.start()
    try:
        while True:
            with cond:
                while not queue and not st["done"]:
                    st["hungry"] = True
                    cond.wait()
                if not queue:
                    break
                chunk, weight = queue.popleft()
                st["weight"] -= weight
                cond.notify_all()
            for item in chunk:
                if type(item) is _Report:
                    report(str(item))
                elif type(item) is _Raised:
                    raise item.exc
                else:
                    yield item
    finally:
        with cond:
            st["stop"] = True
            cond.notify_all()
        thread.join()


def _pax_ns(member: tarfile.TarInfo, key: str, fallback: float) -> int:
    v = member.pax_headers.get(key)
    if v is not None:
        try:
            whole, _, frac = v.partition(".")
            neg = whole.startswith("-")
            ns = abs(int(whole)) * 10**9 + int((frac + "000000000")[:9] or 0)
            return -ns if neg else ns
        except ValueError:
            pass
    return int(round(fallback * 10**9))


class TarSource(Source):
    """A tar archive (plain, gz, bz2, xz, zstd); read in one streaming pass."""
    kind = "tar"

    def __init__(self, path: str, **kw):
        super().__init__(**kw)
        self.path = os.fspath(path)
        self._raw = open(self.path, "rb")
        head = self._raw.read(4)
        self._raw.seek(0)
        stream = self._raw
        if head == ZSTD_MAGIC:
            try:
                import zstandard  # lazy: optional dependency (zstd archives only)
            except ImportError:
                raise FsToolError(f"{self.path}: a zstd archive; install the 'zstandard' "
                                  "package to read it (pip install zstandard)") from None
            stream = zstandard.ZstdDecompressor().stream_reader(self._raw)
        try:
            self.tar = tarfile.open(fileobj=stream, mode="r|*")
        except tarfile.TarError as e:
            raise FsToolError(f"{self.path}: not a readable tar archive: {e}") from None

    def close(self):
        self._raw.close()

    def __iter__(self) -> Iterator[Entry]:
        return self.clamped(self._members())

    def _members(self) -> Iterator[Entry]:
        seen_dirs = {""}
        try:
            for m in self.tar:
                try:
                    rel = check_path(m.name, m.name)
                except (InvalidArgument, NameTooLongError) as exc:
                    self.bad(exc)
                    continue
                # parents the archive did not list
                parts = rel.split("/") if rel else []
                for k in range(1, len(parts)):
                    p = "/".join(parts[:k])
                    if p not in seen_dirs:
                        seen_dirs.add(p)
                        ns = int(m.mtime * 10**9)
                        uid, gid = self.owners(0, 0)
                        yield Entry(p, "dir", 0o755, uid, gid, ns, ns, ns, implied_by=rel)
                try:
                    e = self._entry(m, rel)
                except (InvalidArgument, NameTooLongError) as exc:
                    self.bad(exc)
                    continue
                if e is None:
                    continue
                if e.kind == "dir":
                    if rel in seen_dirs and rel:
                        pass
                    seen_dirs.add(rel)
                yield e
        except tarfile.TarError as exc:
            raise FsToolError(f"{self.path}: damaged tar archive: {exc}") from None

    def _entry(self, m: tarfile.TarInfo, rel: str):
        uid, gid = self.owners(m.uid, m.gid)
        mtime = _pax_ns(m, "mtime", m.mtime)
        atime = _pax_ns(m, "atime", m.mtime)
        e = Entry(rel, "file", m.mode & 0o7777, uid, gid, atime, mtime, mtime)
        e.xattrs = sorted((k[len(p):], v.encode("utf-8", "surrogateescape")
                           if isinstance(v, str) else v)
                          for k, v in m.pax_headers.items()
                          for p in ("SCHILY.xattr.", "LIBARCHIVE.xattr.") if k.startswith(p))
        if m.isdir():
            e.kind = "dir"
        elif m.issym():
            e.kind = "symlink"
            e.target = check_symlink_target(m.linkname.encode("utf-8", "surrogateescape"), rel)
        elif m.islnk():
            e.kind = "hardlink"
            e.target = check_path(m.linkname, f"{rel}: hard link target")
        elif m.ischr() or m.isblk():
            e.kind = "chardev" if m.ischr() else "blockdev"
            e.rdev = (m.devmajor, m.devminor)
        elif m.isfifo():
            e.kind = "fifo"
        elif m.isreg():
            e.size = m.size
            data = self.tar.extractfile(m)
            # a streamed archive can be read only once, in order: buffer
            # small members, spool large ones
            e.open = _spooled(data, m.size)
            if m.sparse:
                e.data_ranges = [(off, n) for off, n in m.sparse if n]
        else:
            self.report(f"{rel}: unsupported tar member type {m.type!r}, skipped")
            return None
        return e


def _spooled(data, size):
    if size <= 8 << 20:
        buf = data.read()
        return lambda: io.BytesIO(buf)
    tmp = tempfile.TemporaryFile()
    while True:
        chunk = data.read(1 << 20)
        if not chunk:
            break
        tmp.write(chunk)

    def opener():
        tmp.seek(0)
        return _NoClose(tmp)
    return opener


class _NoClose(io.RawIOBase):
    def __init__(self, f):
        self.f = f

    def read(self, n=-1):
        return self.f.read(n)

    def seek(self, off, whence=0):
        return self.f.seek(off, whence)

    def fileno(self):
        # the spooled member starts at offset 0 of the file: the data copy
        # may take it from there by descriptor
        return self.f.fileno()

    def readable(self):
        return True

    def close(self):
        self.f.close()


class ProtoSource(Source):
    """An mkfs.xfs protofile: boot line, "blocks inodes" line, the root's
    mode/uid/gid, then nested entries ``name mode uid gid [extra]`` closed
    by ``$``.  Modes are a type letter (- b c d p l s), a setuid (u or -) and
    a setgid (g or -) letter and octal permissions.  There are no times in
    the format: every entry gets the run's timestamp."""
    kind = "proto"
    host_files = True           # an entry's open() opens a host file by path

    def __init__(self, path: str, now_ns: int | None = None, **kw):
        super().__init__(**kw)
        self.path = os.fspath(path)
        self.base = os.path.dirname(os.path.abspath(self.path))
        with open(self.path, "rb") as f:
            text = f.read().decode("utf-8", "surrogateescape")
        if "#" in text and _COMMENT_LINE.search(text):
            self.tokens = [t for line in text.splitlines() for t in line.split()
                           if not line.lstrip().startswith("#")]
        else:
            self.tokens = text.split()
        sde = os.environ.get("SOURCE_DATE_EPOCH")
        self.now = now_ns if now_ns is not None else \
            int(sde) * 10**9 if sde and sde.isdigit() else time.time_ns()

    def _mode(self, tok: str, where: str) -> tuple[str, int]:
        if len(tok) != 6 or tok[0] not in "-bcdpls" or tok[1] not in "-u" or \
                tok[2] not in "-g":
            raise InvalidArgument(f"{self.path}: {where}: bad mode {tok!r} (like -u-755)")
        try:
            perm = int(tok[3:], 8)
        except ValueError:
            raise InvalidArgument(f"{self.path}: {where}: bad mode {tok!r}") from None
        perm |= (0o4000 if tok[1] == "u" else 0) | (0o2000 if tok[2] == "g" else 0)
        kind = {"-": "file", "b": "blockdev", "c": "chardev", "d": "dir", "p": "fifo",
                "l": "symlink", "s": "socket"}[tok[0]]
        return kind, perm

    def __iter__(self) -> Iterator[Entry]:
        return self.clamped(self._parse(False))

    def entries(self, runs: bool = False):
        """Every entry, parents first.  With ``runs``, consecutive empty
        regular files of a directory come as one :class:`EmptyFiles`."""
        return self.clamped(self._parse(runs))

    def _parse(self, runs: bool) -> Iterator[Entry]:
        toks = self.tokens
        if len(toks) < 6:
            raise InvalidArgument(f"{self.path}: too short for a protofile")
        pos = 3                       # boot image, blocks, inodes
        now = self.now
        # protofiles repeat a handful of modes, owners and host files: each
        # is parsed, mapped or looked at once
        modes: dict = {}
        owners: dict = {}
        hosts: dict = {}

        def num(i, what):
            try:
                return int(toks[i], 0)
            except (IndexError, ValueError):
                raise InvalidArgument(f"{self.path}: expected a number for {what}") from None

        def mode(tok, where):
            got = modes.get(tok)
            if got is None:
                got = modes[tok] = self._mode(tok, where)
            return got

        def owner(i):
            key = (toks[i], toks[i + 1]) if i + 1 < len(toks) else None
            got = owners.get(key)
            if got is None:
                got = self.owners(num(i, "uid"), num(i + 1, "gid"))
                if key is not None:
                    owners[key] = got
            return got

        def host_size(tok):
            """Size of a host file named by the protofile (readable), or the
            OSError that stops it being used."""
            got = hosts.get(tok)
            if got is None:
                host = os.path.join(self.base, tok)
                try:
                    st = os.stat(host)
                    os.close(os.open(host, os.O_RDONLY))
                    got = (host, st.st_size)
                except OSError as exc:
                    got = (host, exc)
                hosts[tok] = got
            return got

        kind, perm = self._mode(toks[pos], "root")
        uid, gid = owner(pos + 1)
        yield Entry("", "dir", perm, uid, gid, now, now, now)
        pos += 3
        stack = [""]
        ntoks = len(toks)
        # a run of empty files belongs to the directory on top of the stack:
        # it is given out before anything else and whenever that changes
        run: list = []
        # what the common line needs, filled by the general path below: the
        # permissions of file modes, mapped owners, empty readable host files
        file_perms: dict = {}
        empty_hosts: set = set()
        while stack:
            if runs:
                # the common line, an empty file whose mode, owners and host
                # file were seen before, in a few dictionary lookups
                while pos + 4 < ntoks:
                    name = toks[pos]
                    perm = file_perms.get(toks[pos + 1])
                    if perm is None or name == "$":
                        break
                    ids = owners.get((toks[pos + 2], toks[pos + 3]))
                    if ids is None or toks[pos + 4] not in empty_hosts or "/" in name or \
                            "\0" in name or name == "." or name == "..":
                        break
                    bname = name.encode("utf-8", "surrogateescape")
                    if len(bname) > NAME_MAX:
                        break
                    run.append((bname, perm, ids[0], ids[1], now, now))
                    pos += 5
            if pos >= ntoks:
                raise InvalidArgument(f"{self.path}: unexpected end (missing '$')")
            name = toks[pos]
            if name == "$":
                if run:
                    yield EmptyFiles(stack[-1], run)
                    run = []
                stack.pop()
                pos += 1
                continue
            kind, perm = mode(toks[pos + 1] if pos + 1 < ntoks else "", name)
            uid, gid = owner(pos + 2)
            pos += 4
            parent = stack[-1]
            if kind == "file":
                if pos >= ntoks:
                    raise InvalidArgument(f"{self.path}: unexpected end (missing '$')")
                file_perms[toks[pos - 3]] = perm
                host, size = host_size(toks[pos])
                if size == 0:
                    empty_hosts.add(toks[pos])
                pos += 1
                if size == 0 and runs and "/" not in name and "\0" not in name and \
                        name != "." and name != "..":
                    bname = name.encode("utf-8", "surrogateescape")
                    if len(bname) <= NAME_MAX:
                        run.append((bname, perm, uid, gid, now, now))
                        continue
            rel = check_path(f"{parent}/{name}" if parent else name, name)
            e = Entry(rel, kind, perm, uid, gid, now, now, now)
            if kind == "file":
                if type(size) is not int:
                    self.bad(FsToolError(f"{host}: {size.strerror}"))
                    continue
                e.size = size
                e.open = lambda host=host: open(host, "rb", buffering=0)
            elif kind in ("chardev", "blockdev"):
                e.rdev = (num(pos, "major"), num(pos + 1, "minor"))
                pos += 2
            elif kind == "symlink":
                if pos >= ntoks:
                    raise InvalidArgument(f"{self.path}: unexpected end (missing '$')")
                e.target = check_symlink_target(toks[pos].encode("utf-8", "surrogateescape"), rel)
                pos += 1
            if run:
                yield EmptyFiles(parent, run)
                run = []
            yield e
            if kind == "dir":
                stack.append(rel)


_COMMENT_LINE = re.compile(r"^[ \t]*#", re.M)


def _looks_like_proto(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    toks = head.split()
    return len(toks) >= 6 and toks[1].isdigit() and toks[2].isdigit() and \
        len(toks[3]) == 6 and toks[3][0] == "d"


def open_source(spec, *, owner_map=None, keep_going=False, report=None,
                clamp_ns=None) -> Source:
    """The source at ``spec`` (a directory, tar archive or protofile);
    ``clamp_ns`` clamps modification times to it (see Source.clamped)."""
    path = os.fspath(spec)
    kw = dict(owner_map=owner_map, keep_going=keep_going, report=report, clamp_ns=clamp_ns)
    if os.path.isdir(path):
        return DirSource(path, **kw)
    if not os.path.exists(path):
        raise FsToolError(f"{path}: no such file or directory")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == ZSTD_MAGIC or tarfile.is_tarfile(path):
        return TarSource(path, **kw)
    if _looks_like_proto(path):
        return ProtoSource(path, **kw)
    raise FsToolError(f"{path}: neither a directory, a tar archive nor an mkfs.xfs protofile")


__all__ = ["Entry", "EmptyFiles", "Source", "open_source", "squash_owner", "parse_owner_map", "posixpath"]
