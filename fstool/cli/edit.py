"""Scripted edits of an image: mkdir, put, rm, ln, setattr.

Each command is one transaction: it either happens completely or the image
is left as it was."""
import click


def _edit(image, fn):
    from ..fs.namespace import Namespace
    from ..fs.writer import Writer
    from .populate import timestamp_ns
    with Writer(image, timestamp_ns=timestamp_ns(None)) as w:
        with w.transaction():
            ns = Namespace(w)
            result = fn(ns)
            ns.finish()
    return result


def _meta(ns, mode, uid, gid):
    from ..fs.namespace import Meta
    return Meta(perm=mode, uid=uid, gid=gid, atime_ns=ns.now, mtime_ns=ns.now,
                ctime_ns=ns.now)


def _mode(text):
    try:
        v = int(text, 8)
    except (TypeError, ValueError):
        raise click.BadParameter(f"{text!r} is not an octal mode", param_hint="--mode") from None
    if not 0 <= v <= 0o7777:
        raise click.BadParameter(f"{text!r} is out of range", param_hint="--mode")
    return v


@click.command("mkdir")
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@click.argument("path")
@click.option("-p", "--parents", is_flag=True, help="Create missing parents; no error if "
                                                    "it exists.")
@click.option("--mode", default="755", show_default=True, help="Permissions (octal).")
@click.option("--owner", default="0:0", show_default=True, metavar="UID:GID")
def mkdir_cmd(image, path, parents, mode, owner):
    """Create directory PATH inside IMAGE."""
    from ..fs.namespace import split_path
    uid, gid = _owner(owner)
    perm = _mode(mode)

    def run(ns):
        meta = _meta(ns, perm, uid, gid)
        if parents:
            from ..ops.populate import _mkdirs
            return _mkdirs(ns, path, meta)
        parent, name = split_path(path)
        return ns.mkdir(ns.lookup(parent), name, meta)
    _edit(image, run)


def _owner(text):
    try:
        u, _, g = text.partition(":")
        return int(u), int(g or u)
    except ValueError:
        raise click.BadParameter(f"{text!r}: use UID:GID numbers", param_hint="--owner") \
            from None


@click.command("put")
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@click.argument("hostfile", type=click.Path(exists=True, dir_okay=False))
@click.argument("path")
@click.option("--mode", help="Permissions (octal; default: the host file's).")
@click.option("--owner", metavar="UID:GID", help="Owner (default: the host file's).")
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
def put_cmd(image, hostfile, path, mode, owner, force):
    """Copy HOSTFILE to PATH inside IMAGE (sparse regions stay holes)."""
    import os

    from ..fs.namespace import split_path
    from ..io.sparse import data_ranges_of
    st = os.stat(hostfile)
    uid, gid = _owner(owner) if owner else (st.st_uid, st.st_gid)
    perm = _mode(mode) if mode else st.st_mode & 0o7777

    def run(ns):
        from ..fs.namespace import Meta
        parent, name = split_path(path)
        pino = ns.lookup(parent)
        if ns.child(pino, name) is not None and force:
            ns.unlink(pino, name)
        meta = Meta(perm=perm, uid=uid, gid=gid, atime_ns=st.st_atime_ns,
                    mtime_ns=st.st_mtime_ns, ctime_ns=ns.now)
        with open(hostfile, "rb") as f:
            ranges = data_ranges_of(f.fileno(), st)
            return ns.create_file(pino, name, meta, f, st.st_size, ranges)
    _edit(image, run)


@click.command("rm")
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@click.argument("paths", nargs=-1, required=True)
@click.option("-r", "--recursive", is_flag=True, help="Remove directories and their contents.")
@click.option("-f", "--force", is_flag=True, help="No error for missing paths.")
def rm_cmd(image, paths, recursive, force):
    """Remove files (or, with -r, whole trees) from IMAGE."""
    from ..errors import NotFoundError
    from ..fs.namespace import split_path

    def remove_tree(ns, parent, name):
        ent = ns.child(parent, name)
        if ent is None:
            raise NotFoundError(name.decode("utf-8", "surrogateescape"))
        if recursive and ns._is_dir(ent[0]):
            for child in list(ns.dir_state(ent[0]).entries):
                remove_tree(ns, ent[0], child)
            ns.unlink(parent, name, rmdir=True)
        else:
            ns.unlink(parent, name)

    def run(ns):
        for p in paths:
            parent, name = split_path(p)
            try:
                remove_tree(ns, ns.lookup(parent), name)
            except NotFoundError:
                if not force:
                    raise NotFoundError(p) from None
    _edit(image, run)


@click.command("ln")
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@click.argument("target")
@click.argument("path")
@click.option("-s", "--symbolic", is_flag=True, help="Make a symbolic link holding TARGET.")
@click.option("--owner", default="0:0", show_default=True, metavar="UID:GID")
def ln_cmd(image, target, path, symbolic, owner):
    """Create PATH as a hard link to TARGET (a path in the image), or with -s
    a symlink whose content is TARGET."""
    from ..fs.namespace import split_path
    uid, gid = _owner(owner)

    def run(ns):
        parent, name = split_path(path)
        pino = ns.lookup(parent)
        if symbolic:
            return ns.symlink(pino, name, target.encode("utf-8", "surrogateescape"),
                              _meta(ns, 0o777, uid, gid))
        ns.link(pino, name, ns.lookup(target))
    _edit(image, run)


@click.command("setattr")
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@click.argument("path")
@click.option("--mode", help="New permissions (octal).")
@click.option("--owner", metavar="UID:GID", help="New owner and group.")
@click.option("--mtime", type=float, help="Modification time, seconds since the epoch.")
@click.option("--atime", type=float, help="Access time, seconds since the epoch.")
@click.option("--set-xattr", "set_x", multiple=True, metavar="NAME=VALUE",
              help="Set an xattr (user., trusted. or security. name); repeatable.")
@click.option("--remove-xattr", "rm_x", multiple=True, metavar="NAME",
              help="Remove an xattr; repeatable.")
def setattr_cmd(image, path, mode, owner, mtime, atime, set_x, rm_x):
    """Change permissions, owner, times or xattrs of PATH in IMAGE."""
    from ..errors import NotFoundError
    uid = gid = None
    if owner:
        uid, gid = _owner(owner)
    perm = _mode(mode) if mode else None
    sets = {}
    for item in set_x:
        k, sep, v = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: use NAME=VALUE", param_hint="--set-xattr")
        sets[k] = v.encode("utf-8", "surrogateescape")

    def ns_time(t):
        return None if t is None else int(round(t * 1e9))

    def run(ns):
        ino = ns.lookup(path)
        ns.setattr(ino, mode=perm, uid=uid, gid=gid, atime_ns=ns_time(atime),
                   mtime_ns=ns_time(mtime))
        if sets or rm_x:
            cur = dict(ns.fs.xattrs(ino)) if ino not in ns.dirs or not ns.dirs[ino].new \
                else dict(ns.dirs[ino].meta.xattrs)
            for k in rm_x:
                if k not in cur:
                    raise NotFoundError(f"{path}: no xattr {k!r}")
                del cur[k]
            cur.update(sets)
            ns.set_xattrs(ino, cur)
    _edit(image, run)
