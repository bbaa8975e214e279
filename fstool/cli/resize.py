"""``fstool resize``: grow or shrink an image offline."""
import json

import click

import fstool

from ..errors import InvalidArgument
from ..ops.resize import parse_size, resize
from .options import image_arg, json_opt


@click.command("resize")
@click.option("--size", "size_text", metavar="SIZE",
              help="The new size (bytes, or k/m/g/t with powers of 1024, or b for "
                   "filesystem blocks).")
@click.option("-M", "--minimum", is_flag=True,
              help="Shrink to the smallest size that holds what the filesystem holds.")
@click.option("--slack", type=click.FloatRange(0, 100, max_open=True), default=0.0,
              metavar="PERCENT", help="With -M: leave at least PERCENT of the new size free.")
@click.option("-n", "--dry-run", is_flag=True, help="Write nothing; say what would change.")
@click.option("--undo-file", type=click.Path(dir_okay=False),
              help="Save every block before it is overwritten; 'fstool undo IMAGE FILE' "
                   "puts them back.")
@click.option("--no-check", is_flag=True, help="Do not check the image before writing.")
@json_opt
@image_arg
def cmd(size_text, minimum, slack, dry_run, undo_file, no_check, as_json, image):
    """Grow or shrink IMAGE offline to --size SIZE (or, with -M, to the
    smallest size that holds its content).  Growing extends the last AG
    and adds AGs as xfs_growfs does; shrinking moves the log, the blocks
    of files (data, reflinked data once, directory, xattr, symlink and
    bmbt blocks) and inodes (to new numbers: directory entries, parent
    pointers and the superblock's quota inodes follow) out of the part cut
    off, drops the AGs at the end and cuts the tail of the last one kept
    (a size below the minimum is refused).  A dirty log is replayed first,
    and unlinked inodes and CoW staging extents are freed as a mount frees
    them.  The image file follows the new size.  A crash leaves a whole
    filesystem, and running resize again finishes an interrupted one.
    """

    size = None
    if size_text is not None:
        try:
            size = parse_size(size_text, _blocksize(image))
        except InvalidArgument as e:
            raise click.BadParameter(str(e), param_hint="--size") from None
    if (size is None) == (not minimum):
        raise click.UsageError("give --size SIZE or -M, one of them")
    if slack and not minimum:
        raise click.UsageError("--slack goes with -M")
    result = resize(image, size, minimum=minimum, slack=slack, undo_file=undo_file,
                    dry_run=dry_run, check=not no_check)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    for c in result.changes:
        click.echo(c)
    if result.new_dblocks == result.old_dblocks:
        click.echo(f"size unchanged: {result.new_size} bytes ({result.new_dblocks} blocks)")
    else:
        click.echo(f"{'would resize' if dry_run else 'resized'} from {result.old_size} to "
                   f"{result.new_size} bytes ({result.old_agcount} to {result.new_agcount} "
                   "AGs)")


def _blocksize(image) -> int:
    """The image's block size (for sizes given in blocks); 4096 when it
    cannot be read (opening it again then says why)."""
    try:
        with fstool.open_image(image) as fs:
            return fs.sb.blocksize
    except Exception:
        return 4096
