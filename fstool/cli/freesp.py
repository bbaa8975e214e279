import click

from .console import format_opt, output_style, print_table
from .options import image_arg, json_opt, open_fs
from ..ops import stats
import json


@click.command("freesp")
@click.option("--ag", "agnos", type=click.IntRange(min=0), multiple=True,
              help="Only this AG (repeatable).")
@json_opt
@format_opt
@image_arg
def cmd(agnos, as_json, fmt, image):
    """Histogram of free extent sizes in power-of-two bins of blocks, as
    xfs_db freesp -s (AGFL blocks count as one-block extents).  On a
    terminal (or with --format table) each bin gets a bar of its share of
    the free blocks; piped (or --format plain), the text is exactly
    xfs_db's."""
    with open_fs(image) as fs:
        h = stats.freesp(fs, list(agnos) or None)
    style = output_style(fmt, as_json)
    if style == "json":
        click.echo(json.dumps(h))
        return
    if style == "plain":
        click.echo(stats.format_freesp(h))
        return
    print_table("free space (extents of from-to blocks)", ("from", "to", "extents", "blocks"),
                [(b["from"], b["to"], b["extents"], b["blocks"]) for b in h["bins"]], style,
                bars=("% of free", [b["pct"] / 100.0 for b in h["bins"]]))
    click.echo(f"total free extents {h['total_extents']}, total free blocks "
               f"{h['total_blocks']}, average free extent size {h['average']:g}")
