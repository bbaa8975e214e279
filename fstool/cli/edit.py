"""Scripted edits of an image: mkdir, put, rm, ln, mv, setattr.

Each command is one transaction: it either happens completely or the image
is left as it was."""
import click

from ..ops import edit
from .options import emit_json, image_arg, json_opt
from .populate import timestamp_ns


def no_check_option(f):
    return click.option("--no-check", is_flag=True,
                        help="Write even when fstool check finds problems in the image "
                             "(by default the image is checked first and refused then).")(f)


def no_punch_option(f):
    return click.option("--no-punch", is_flag=True,
                        help="Keep the blocks this edit frees allocated in the image file "
                             "(by default they are punched out, giving the space back to "
                             "the host).")(f)


def _ts():
    return timestamp_ns(None)


def _mode(text):
    try:
        v = int(text, 8)
    except (TypeError, ValueError):
        raise click.BadParameter(f"{text!r} is not an octal mode", param_hint="--mode") from None
    if not 0 <= v <= 0o7777:
        raise click.BadParameter(f"{text!r} is out of range", param_hint="--mode")
    return v


@click.command("mkdir")
@json_opt
@image_arg
@click.argument("path")
@click.option("-p", "--parents", is_flag=True, help="Create missing parents; no error if "
                                                    "it exists.")
@click.option("--mode", default="755", show_default=True, help="Permissions (octal).")
@click.option("--owner", default="0:0", show_default=True, metavar="UID:GID")
@no_check_option
def mkdir_cmd(image, path, parents, mode, owner, as_json, no_check):
    """Create directory PATH inside IMAGE."""
    uid, gid = _owner(owner)
    emit_json(edit.mkdir(image, path, parents=parents, perm=_mode(mode), uid=uid, gid=gid,
                         timestamp_ns=_ts(), check=not no_check), as_json)


def _owner(text):
    try:
        u, _, g = text.partition(":")
        return int(u), int(g or u)
    except ValueError:
        raise click.BadParameter(f"{text!r}: use UID:GID numbers", param_hint="--owner") \
            from None


@click.command("put")
@json_opt
@image_arg
@click.argument("hostfile", type=click.Path(exists=True, dir_okay=False))
@click.argument("path")
@click.option("--mode", help="Permissions (octal; default: the host file's).")
@click.option("--owner", metavar="UID:GID", help="Owner (default: the host file's).")
@click.option("-f", "--force", is_flag=True, help="Replace PATH if it exists.")
@no_punch_option
@no_check_option
def put_cmd(image, hostfile, path, mode, owner, force, as_json, no_check, no_punch):
    """Copy HOSTFILE to PATH inside IMAGE (sparse regions stay holes)."""
    uid = gid = None
    if owner:
        uid, gid = _owner(owner)
    emit_json(edit.put(image, hostfile, path, perm=_mode(mode) if mode else None, uid=uid,
                       gid=gid, force=force, timestamp_ns=_ts(), check=not no_check,
                       punch=not no_punch),
              as_json)


@click.command("cp")
@json_opt
@image_arg
@click.argument("src")
@click.argument("dst")
@click.option("--reflink", type=click.Choice(["auto", "always", "never"]), default="auto",
              show_default=True,
              help="Share the source's blocks (always: or fail; auto: where the filesystem "
                   "has reflink) or copy them (never).")
@click.option("-f", "--force", is_flag=True, help="Replace DST if it exists.")
@no_punch_option
@no_check_option
def cp_cmd(image, src, dst, reflink, force, as_json, no_check, no_punch):
    """Copy the regular file SRC to DST inside IMAGE, sharing its blocks
    (reflink, as cp --reflink does on a mounted XFS) where the filesystem
    allows it.  DST takes SRC's mode and owner and the time of the copy."""
    emit_json(edit.cp(image, src, dst, reflink=reflink, force=force, timestamp_ns=_ts(),
                      check=not no_check, punch=not no_punch), as_json)


@click.command("rm")
@json_opt
@image_arg
@click.argument("paths", nargs=-1, required=True)
@click.option("-r", "--recursive", is_flag=True, help="Remove directories and their contents.")
@click.option("-f", "--force", is_flag=True, help="No error for missing paths.")
@no_punch_option
@no_check_option
def rm_cmd(image, paths, recursive, force, as_json, no_check, no_punch):
    """Remove files (or, with -r, whole trees) from IMAGE."""
    emit_json(edit.rm(image, paths, recursive=recursive, force=force, timestamp_ns=_ts(),
                      check=not no_check, punch=not no_punch),
              as_json)


@click.command("ln")
@json_opt
@image_arg
@click.argument("target")
@click.argument("path")
@click.option("-s", "--symbolic", is_flag=True, help="Make a symbolic link holding TARGET.")
@click.option("--owner", default="0:0", show_default=True, metavar="UID:GID")
@no_check_option
def ln_cmd(image, target, path, symbolic, owner, as_json, no_check):
    """Create PATH as a hard link to TARGET (a path in the image), or with -s
    a symlink whose content is TARGET."""
    uid, gid = _owner(owner)
    emit_json(edit.ln(image, target, path, symbolic=symbolic, uid=uid, gid=gid,
                      timestamp_ns=_ts(), check=not no_check), as_json)


@click.command("mv")
@json_opt
@image_arg
@click.argument("src")
@click.argument("dst")
@click.option("--no-replace", is_flag=True, help="Fail if DST exists (RENAME_NOREPLACE).")
@click.option("--exchange", is_flag=True, help="Swap SRC and DST, which must both exist "
                                              "(RENAME_EXCHANGE).")
@no_punch_option
@no_check_option
def mv_cmd(image, src, dst, no_replace, exchange, as_json, no_check, no_punch):
    """Rename SRC to DST inside IMAGE (both paths in the image), replacing
    DST if it exists, as rename(2) does."""
    emit_json(edit.mv(image, src, dst, no_replace=no_replace, exchange=exchange,
                      timestamp_ns=_ts(), check=not no_check, punch=not no_punch), as_json)


@click.command("setattr")
@json_opt
@image_arg
@click.argument("path")
@click.option("--mode", help="New permissions (octal).")
@click.option("--owner", metavar="UID:GID", help="New owner and group.")
@click.option("--mtime", type=float, help="Modification time, seconds since the epoch.")
@click.option("--atime", type=float, help="Access time, seconds since the epoch.")
@click.option("--set-xattr", "set_x", multiple=True, metavar="NAME=VALUE",
              help="Set an xattr (user., trusted. or security. name); repeatable.")
@click.option("--remove-xattr", "rm_x", multiple=True, metavar="NAME",
              help="Remove an xattr; repeatable.")
@no_punch_option
@no_check_option
def setattr_cmd(image, path, mode, owner, mtime, atime, set_x, rm_x, as_json, no_check,
                no_punch):
    """Change permissions, owner, times or xattrs of PATH in IMAGE."""
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

    emit_json(edit.setattr(image, path, perm=perm, uid=uid, gid=gid, atime_ns=ns_time(atime),
                           mtime_ns=ns_time(mtime), set_xattrs=sets, remove_xattrs=rm_x,
                           timestamp_ns=_ts(), check=not no_check, punch=not no_punch), as_json)
