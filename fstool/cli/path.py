"""fstool path: every path of an inode, from its parent pointers."""
import json
import sys

import click

from ..errors import FsToolError
from ..ops.names import shown_name
from ..ops.parents import AllPaths, one_inode
from .exits import finish
from .options import image_arg, json_opt, open_fs, replay_opt


@click.command("path")
@click.option("--all", "every", is_flag=True, help="Every inode in use (one line per path: "
              "INO PATH).")
@replay_opt
@json_opt
@image_arg
@click.argument("inos", nargs=-1, type=int, metavar="[INO]...")
def cmd(every, as_json, image, inos, replay_in_memory):
    """Print every path of inode INO in IMAGE, found by following its parent
    pointers up to the root (like xfs_io's 'parent -p' on a mount).  The
    filesystem needs parent pointers (mkfs -n parent=1).

    With several INOs or --all, each line is "INO PATH".  With --json,
    one object per inode: {"ino", "paths", "broken"}, broken listing the
    parent pointers that lead nowhere (names that are not UTF-8 escaped as
    \\udcXX).  Exit status 1 when an inode cannot
    be read or a parent pointer leads nowhere."""
    if not inos and not every:
        raise click.UsageError("give an inode number, or --all")
    if inos and every:
        raise click.UsageError("give inode numbers or --all, not both")
    status = 0
    out = sys.stdout
    with open_fs(image, replay_in_memory) as fs:
        if every and not as_json:
            walker = AllPaths(fs)
            try:
                _text, broken = walker.render(_utf8_writer(out))
                out.flush()
            except BrokenPipeError:
                finish(0)               # the reader went away (path --all | head)
            for ino, b in broken:
                status = 1
                click.echo(f"fstool: inode {ino}: parent pointer {b.parent.ino}/"
                           f"{shown_name(b.parent.name)}: {b.why}", err=True)
            status |= _report_unread(walker)
            if status:
                sys.exit(status)
            return
        if every:
            walker = AllPaths(fs)
            todo = iter(walker)
        else:
            walker = one_inode(fs, inos[0])
            todo = _each_readable(walker, inos)
        prefix = every or len(inos) > 1
        seen_broken = 0
        lines = []
        for ino, found in todo:
            broken = walker.broken[seen_broken:]
            seen_broken = len(walker.broken)
            if broken:
                status = 1
            if as_json:
                lines.append(json.dumps({
                    "ino": ino,
                    "paths": [p.decode("utf-8", "surrogateescape") for p in found],
                    "broken": [{"parent": b.parent.ino, "gen": b.parent.gen,
                                "name": b.parent.name.decode("utf-8", "surrogateescape"),
                                "why": b.why} for b in broken]}))
            else:
                head = f"{ino} " if prefix else ""
                lines.extend(head + shown_name(p) for p in found)
                for b in broken:
                    click.echo(f"fstool: inode {ino}: parent pointer {b.parent.ino}/"
                               f"{shown_name(b.parent.name)}: {b.why}", err=True)
            if len(lines) >= 4096:
                out.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            out.write("\n".join(lines) + "\n")
        status |= _report_unread(walker)
    if status:
        sys.exit(status)


def _each_readable(walker, inos):
    """(ino, its paths) of each of ``inos`` in turn; one that cannot be
    read is put in the walker's ``unread`` (reported at the end, as
    --all reports them) and left out."""
    walker.unread = []
    for ino in inos:
        try:
            found = walker.paths(ino)
        except FsToolError as e:
            walker.unread.append((ino, str(e)))
            continue
        yield ino, found


def _report_unread(walker) -> int:
    """Say which inodes could not be read; 1 when some could not."""
    unread = getattr(walker, "unread", ())
    for ino, why in unread:
        click.echo(f"fstool: inode {ino}: {why}" if ino is not None else f"fstool: {why}",
                   err=True)
    return 1 if unread else 0


def _utf8_writer(out):
    """A function that writes UTF-8 text (bytes of whole lines) to the text
    stream ``out``: its binary buffer when it writes UTF-8, else the text
    decoded."""
    raw = getattr(out, "buffer", None)
    if raw is not None and (getattr(out, "encoding", "") or "").lower().replace("-", "") \
            in ("utf8", "utf_8"):
        out.flush()
        return raw.write
    return lambda text: out.write(str(text, "utf-8"))
