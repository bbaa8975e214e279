import click

from .console import bytes_opt, format_opt, output_style, print_table, size_text
from .options import image_arg, json_opt, open_fs
from ..ops import stats
import json


@click.command("frag")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many of the most fragmented forks to list.")
@json_opt
@format_opt
@bytes_opt
@image_arg
def cmd(top, as_json, fmt, raw, image):
    """File fragmentation as xfs_db frag reports it (extents actually used
    against the ideal, one per run contiguous in file offset), then the
    most fragmented forks: only those in more extents than ideal, by path
    (the first a directory walk from the root finds; inodes no directory
    names show none), most extents first."""
    with open_fs(image) as fs:
        f = stats.frag(fs, top)
    style = output_style(fmt, as_json)
    if style == "json":
        click.echo(json.dumps(f))
        return
    click.echo(stats.format_frag(f))
    if not f["worst"]:
        if top:
            click.echo("no fragmented files")
        return
    print_table("most fragmented", ("path", "inode", "fork", "type", "size", "extents",
                                    "ideal extents"),
                [(w["path"] or "(no path)", w["ino"], w["fork"], w["type"],
                  size_text(w["size"], raw), w["extents"], w["ideal"]) for w in f["worst"]],
                style, left=(0, 2, 3))
