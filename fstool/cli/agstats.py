import click

from .console import blocks_text, bytes_opt, format_opt, output_style, print_table
from .options import image_arg, json_opt, open_fs
from ..ops import stats
import json


@click.command("agstats")
@json_opt
@format_opt
@bytes_opt
@image_arg
def cmd(as_json, fmt, raw, image):
    """Per-AG statistics: size, used and free space (with a bar on a
    terminal), longest free extent, free extent count, inodes allocated and
    free, inode chunks (full, partial, empty, sparse), each btree's height
    and block count, AGFL fill; then totals.  Sizes in KiB/MiB/GiB (-b:
    blocks)."""
    with open_fs(image) as fs:
        s = stats.agstats(fs)
    style = output_style(fmt, as_json)
    if style == "json":
        click.echo(json.dumps(s))
        return
    rows, tot, bs = s["ags"], s["total"], s["blocksize"]
    trees = sorted({n for r in rows for n in r["btrees"]}, key=stats.AG_TREES.index)

    def table(title, cols, cells, total, bars=None):
        print_table(title, ["AG"] + cols, [[r["agno"], *cells(r)] for r in rows], style,
                    total=["all", *total], bars=bars)

    def size(n):
        return blocks_text(n, bs, raw)

    table("space (blocks; longest: the longest free extent, extents: free extents)" if raw
          else "space (longest: the longest free extent, extents: free extents)",
          ["size", "used", "free", "longest", "extents", "AGFL"],
          lambda r: (size(r["size"]), size(r["used_blocks"]), size(r["free_blocks"]),
                     size(r["longest_free"]), r["free_extents"],
                     f"{r['agfl_count']}/{r['agfl_size']}"),
          (size(tot["size"]), size(tot["used_blocks"]), size(tot["free_blocks"]),
           size(tot["longest_free"]), tot["free_extents"], tot["agfl_count"]),
          bars=("used %", [r["used_pct"] / 100.0 for r in rows + [tot]]))
    ch = ("full", "partial", "empty", "sparse")
    table("inodes (chunks: full, partial, empty, sparse)", ["allocated", "free", *ch],
          lambda r: (r["inodes"], r["free_inodes"], *[r["chunks"][c] for c in ch]),
          (tot["inodes"], tot["free_inodes"], *[tot["chunks"][c] for c in ch]))
    table("btrees (height/blocks)", trees,
          lambda r: [f"{r['btrees'][n]['height']}/{r['btrees'][n]['blocks']}" for n in trees],
          [f"-/{tot['btree_blocks'][n]}" for n in trees])
