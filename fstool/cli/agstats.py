import json

import click
from rich.table import Table

from ..ops import stats
from .console import console
from .options import image_arg, json_opt, open_fs


@click.command("agstats")
@json_opt
@image_arg
def cmd(as_json, image):
    """Per-AG statistics: size, free blocks, longest free extent, free extent
    count, inodes allocated and free, inode chunks (full, partial, empty,
    sparse), each btree's height and block count, AGFL fill; then totals."""
    with open_fs(image) as fs:
        s = stats.agstats(fs)
    if as_json:
        click.echo(json.dumps(s))
        return

    rows, tot = s["ags"], s["total"]
    trees = sorted({n for r in rows for n in r["btrees"]}, key=stats.AG_TREES.index)

    def table(title, cols, cells, total):
        t = Table(title=title)
        for c in ["AG"] + cols:
            t.add_column(c, justify="right")
        for r in rows:
            t.add_row(str(r["agno"]), *[str(v) for v in cells(r)])
        t.add_row("all", *[str(v) for v in total], style="bold")
        console().print(t)

    table("space (blocks)", ["size", "free", "longest free", "free extents", "AGFL"],
          lambda r: (r["size"], r["free_blocks"], r["longest_free"], r["free_extents"],
                     f"{r['agfl_count']}/{r['agfl_size']}"),
          (tot["size"], tot["free_blocks"], tot["longest_free"], tot["free_extents"],
           tot["agfl_count"]))
    ch = ("full", "partial", "empty", "sparse")
    table("inodes", ["allocated", "free"] + [f"{c} chunks" for c in ch],
          lambda r: (r["inodes"], r["free_inodes"], *[r["chunks"][c] for c in ch]),
          (tot["inodes"], tot["free_inodes"], *[tot["chunks"][c] for c in ch]))
    table("btrees (height/blocks)", trees,
          lambda r: [f"{r['btrees'][n]['height']}/{r['btrees'][n]['blocks']}" for n in trees],
          [f"-/{tot['btree_blocks'][n]}" for n in trees])
