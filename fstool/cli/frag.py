import json

import click
from rich.table import Table

from ..ops import stats
from .console import bar, console
from .options import image_arg, json_opt, open_fs


@click.command("frag")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many of the most fragmented forks to list.")
@json_opt
@image_arg
def cmd(top, as_json, image):
    """File fragmentation as xfs_db frag reports it (extents actually used
    against the ideal, one per run contiguous in file offset), then the most
    fragmented forks."""
    with open_fs(image) as fs:
        f = stats.frag(fs, top)
    if as_json:
        click.echo(json.dumps(f))
        return
    click.echo(stats.format_frag(f))
    if not f["worst"]:
        return

    t = Table(title="most fragmented")
    for c in ("inode", "fork", "type", "size", "extents", "ideal"):
        t.add_column(c, justify="right")
    t.add_column("")
    most = f["worst"][0]["extents"]
    for w in f["worst"]:
        t.add_row(str(w["ino"]), w["fork"], w["type"], str(w["size"]), str(w["extents"]),
                  str(w["ideal"]), bar(w["extents"] / most))
    console().print(t)
