import click

from ..ops.extract import Extractor
from .console import err, warn
from .exits import EXIT_FAILURE
from .options import emit_json, image_arg, json_opt, open_fs, replay_opt


@click.command("get")
@click.option("-f", "--force", is_flag=True,
              help="Extract into a non-empty directory / replace an existing file.")
@click.option("--no-xattrs", is_flag=True, help="Do not copy extended attributes.")
@click.option("--owners/--no-owners", default=None,
              help="Set owners from the image (default: only when run as root).")
@json_opt
@replay_opt
@image_arg
@click.argument("path")
@click.argument("dest", type=click.Path())
def cmd(force, no_xattrs, owners, as_json, image, path, dest, replay_in_memory):
    """Extract PATH (a file or a whole tree) from IMAGE to DEST.

    Modes, timestamps, symlinks, hardlinks, device nodes, fifos, sockets and
    xattrs are kept; owners when run as root.  Nothing is ever written
    outside DEST, whatever names the image holds.  Entries that cannot be
    extracted are reported and make the exit status 1.  With --json, a
    summary object (files, dirs, bytes, warnings, errors) is printed.
    """

    with open_fs(image, replay_in_memory) as fs:
        ex = Extractor(fs, owners=owners, xattrs=not no_xattrs)
        stats = ex.extract(path, dest, force=force)
    if as_json:
        emit_json({"path": path, "dest": dest, "files": stats.files, "dirs": stats.dirs,
                   "bytes": stats.bytes, "warnings": list(stats.warnings),
                   "errors": list(stats.errors)}, True)
    else:
        for w in stats.warnings:
            warn(w)
        for e in stats.errors:
            err(e)
    if stats.errors:
        raise SystemExit(EXIT_FAILURE)
