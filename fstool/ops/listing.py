"""Records describing files in an image: the data behind ``ls`` and ``stat``."""
from __future__ import annotations

from typing import Iterator

from ..format import constants as C


def parent_records(fs, node) -> list[dict]:
    """A file's parent pointers as JSON: the directory inode, its
    generation and the name (surrogateescape for bytes that are not UTF-8)."""
    return [{"ino": p.ino, "gen": p.gen, "name": p.name.decode("utf-8", "surrogateescape")}
            for p in fs.parents(node)]


def entry_record(fs, path: str, node, with_xattrs: bool = True,
                 with_parents: bool = False) -> dict:
    """The JSON record ``fstool ls --json`` prints for one file."""
    rec = {
        "path": path,
        "type": node.type_name,
        "mode": node.perm,
        "uid": node.uid,
        "gid": node.gid,
        "size": node.size,
        "nlink": node.nlink,
        "ino": node.ino,
        "mtime_ns": node.mtime_ns,
    }
    if node.is_symlink:
        rec["target"] = fs.readlink(node).decode("utf-8", "surrogateescape")
    rdev = node.rdev
    if rdev is not None:
        rec["rdev"] = list(rdev)
    if with_xattrs:
        rec["xattrs"] = sorted(fs.xattr_names(node))
    if with_parents:
        rec["parents"] = parent_records(fs, node)
    return rec


def iter_listing(fs, path: str, recursive: bool) -> Iterator[tuple[str, str, object]]:
    """(path, name, inode) triples as ``ls`` shows them: a directory's
    entries (all descendants with ``recursive``), or the file itself.  The
    name is the entry's whole name as the directory holds it (a damaged or
    crafted one may hold a '/'); paths join names with '/' as they are."""
    top = fs.lookup(path)
    path = "/" + path.strip("/") if path.strip("/") else "/"
    if not top.is_dir:
        yield path, path.rpartition("/")[2] or path, top
        return
    prefix = path.rstrip("/") + "/"
    if recursive:
        walker = fs.walk(top)
        next(walker)             # the directory itself is not listed
        for p, node in walker:
            yield prefix + p.lstrip("/"), p.rpartition("/")[2], node
        return
    entries = sorted(fs.listdir(top), key=lambda e: e.name)
    for ent in entries:
        name = ent.name.decode("utf-8", "surrogateescape")
        yield prefix + name, name, fs.inode(ent.ino)


def mode_string(node) -> str:
    """``ls -l`` style mode, e.g. ``drwxr-xr-t``."""
    kind = {C.S_IFDIR: "d", C.S_IFLNK: "l", C.S_IFIFO: "p", C.S_IFCHR: "c",
            C.S_IFBLK: "b", C.S_IFSOCK: "s"}.get(node.ifmt, "-")
    m = node.mode
    out = [kind]
    for shift, special, ch in ((6, 0o4000, "s"), (3, 0o2000, "s"), (0, 0o1000, "t")):
        r = "r" if m & (4 << shift) else "-"
        w = "w" if m & (2 << shift) else "-"
        x = m & (1 << shift)
        if m & special:
            e = ch if x else ch.upper()
        else:
            e = "x" if x else "-"
        out += [r, w, e]
    return "".join(out)
