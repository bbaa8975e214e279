"""fstool path: every path of an inode, from its parent pointers."""
import click

from .options import image_arg, json_opt, replay_opt
from .path_run import run


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
    run(every, as_json, image, inos, replay_in_memory)
