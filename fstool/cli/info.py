import click

from .console import bytes_opt, size_text
from .options import image_arg, json_opt, open_fs
from ..ops.info import geometry
import json
from ..ops.info import format_geometry
from ..ops.resize import minimum_size


@click.command("info")
@image_arg
@json_opt
@bytes_opt
def cmd(image, as_json, raw):
    """Show the geometry and features of IMAGE in the layout mkfs.xfs and
    xfs_info print, followed by the superblock counters (the size and free
    space in KiB/MiB/GiB and blocks; -b: blocks only) and the smallest size
    'fstool resize' can shrink it to."""
    with open_fs(image) as fs:
        g = geometry(fs)
        g["min_blocks"] = minimum_size(fs) // fs.sb.blocksize
    if as_json:
        click.echo(json.dumps(g))
        return
    click.echo(format_geometry(g, image, size_text=None if raw else size_text))
