import json

import click

from ..ops.info import format_geometry, geometry
from .options import image_arg, json_opt, open_fs


@click.command("info")
@image_arg
@json_opt
def cmd(image, as_json):
    """Show the geometry and features of IMAGE in the layout mkfs.xfs and
    xfs_info print, followed by the superblock counters."""
    with open_fs(image) as fs:
        g = geometry(fs)
    if as_json:
        click.echo(json.dumps(g))
        return
    click.echo(format_geometry(g, image))
