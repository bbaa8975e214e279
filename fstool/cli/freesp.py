import json

import click
from rich.table import Table

from ..ops import stats
from .console import bar, console, is_tty
from .options import image_arg, json_opt, open_fs


@click.command("freesp")
@click.option("--ag", "agnos", type=click.IntRange(min=0), multiple=True,
              help="Only this AG (repeatable).")
@json_opt
@image_arg
def cmd(agnos, as_json, image):
    """Histogram of free extent sizes in power-of-two bins, as xfs_db freesp
    -s (AGFL blocks count as one-block extents).  On a terminal each bin gets
    a bar; piped, the text is exactly xfs_db's."""
    with open_fs(image) as fs:
        h = stats.freesp(fs, list(agnos) or None)
    if as_json:
        click.echo(json.dumps(h))
        return
    if not is_tty():
        click.echo(stats.format_freesp(h))
        return

    t = Table(title="free space")
    for c in ("from", "to", "extents", "blocks", "pct"):
        t.add_column(c, justify="right")
    t.add_column("")
    for b in h["bins"]:
        t.add_row(str(b["from"]), str(b["to"]), str(b["extents"]), str(b["blocks"]),
                  f"{b['pct']:.2f}", bar(b["pct"] / 100.0))
    console().print(t)
    console().print(f"total free extents {h['total_extents']}, total free blocks "
                    f"{h['total_blocks']}, average free extent size {h['average']:g}")
