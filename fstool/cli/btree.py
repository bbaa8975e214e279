import click

from .console import format_opt, output_style, print_table
from .options import replay_opt, image_arg, json_opt, open_fs
from ..ops import stats
from ..ops.inspect import inode_of
import json
from ..ops.inspect import pointer_text

TREES = ["bnobt", "cntbt", "inobt", "finobt", "refcountbt", "rmapbt"]


@click.group("btree")
def cmd():
    """Inspect btrees block by block."""


@cmd.command("dump")
@click.option("--ag", "agno", type=click.IntRange(min=0), help="AG of the tree to dump.")
@click.option("--tree", type=click.Choice(TREES), help="Which AG btree.")
@click.option("--inode", "ino", metavar="INODE",
              help="Dump the block map (bmbt) of this inode (a number or a path) instead.")
@click.option("--attr", is_flag=True, help="With --inode: the attr fork's block map.")
@click.option("--summary", is_flag=True, help="Height, blocks per level and fill factor only.")
@replay_opt
@json_opt
@format_opt
@image_arg
def dump_cmd(agno, tree, ino, attr, summary, as_json, fmt, image, replay_in_memory):
    """Dump an AG btree (--ag N --tree NAME) or an inode's bmbt (--inode INO):
    every block, top level first, with level, record count, siblings, keys,
    pointers and records (as xfs_db btdump shows them)."""
    if ino is None and (agno is None or tree is None):
        raise click.UsageError("give --ag and --tree, or --inode")
    if ino is not None and (agno is not None or tree is not None):
        raise click.UsageError("--inode cannot be combined with --ag/--tree")
    with open_fs(image, replay_in_memory) as fs:
        dump = stats.dump_bmbt(fs, inode_of(fs, ino), attr) if ino is not None else \
            stats.dump_ag_btree(fs, agno, tree)
    result = stats.summarize_dump(dump) if summary else dump
    style = output_style(fmt, as_json)
    if style == "json":
        click.echo(json.dumps(result))
        return
    if summary:
        _print_summary(result, style)
    else:
        _print_dump(dump)


def _print_dump(dump):
    out = click.echo
    if dump["tree"] == "bmbt":
        out(f"inode {dump['ino']} {dump['fork']} fork, format {dump['format']}")
        if "root" in dump:
            r = dump["root"]
            out(f"root in inode: level {r['level']}, {len(r['ptrs'])} pointers")
            out("keys = " + " ".join(f"{i + 1}:[{k['startoff']}]"
                                     for i, k in enumerate(r["keys"])))
            out("ptrs = " + " ".join(f"{i + 1}:{p}" for i, p in enumerate(r["ptrs"])))
        else:
            out("recs = [startoff,startblock,blockcount,extentflag]")
            for i, e in enumerate(dump["extents"]):
                out(f"{i + 1}:[{','.join(str(v) for v in e.values())}]")
            return
    name = dump["tree"]
    for row in dump["levels"]:
        for b in row:
            out(f"{name} level {b['level']} block {b['block']} daddr {b['daddr']} "
                f"numrecs {b['numrecs']} left {pointer_text(b['leftsib'])} "
                f"right {pointer_text(b['rightsib'])}")
            if b["level"] == 0:
                if b["recs"]:
                    fields = ",".join(b["recs"][0])
                    out(f"recs[1-{b['numrecs']}] = [{fields}]")
                for i, r in enumerate(b["recs"]):
                    out(f"{i + 1}:[{','.join(str(v) for v in r.values())}]")
            else:
                if b["keys"]:
                    out(f"keys[1-{b['numrecs']}] = [{','.join(b['keys'][0])}]")
                for i, (k, p) in enumerate(zip(b["keys"], b["ptrs"])):
                    out(f"{i + 1}:[{','.join(str(v) for v in k.values())}] -> {p}")


def _print_summary(s, style):
    where = f"AG {s['agno']}" if "agno" in s else f"inode {s['ino']} {s['fork']} fork"
    print_table(f"{s['tree']} of {where}: height {s['height']}, {s['blocks']} blocks",
                ("level", "blocks", "records", "fill"),
                [(lv["level"], lv["blocks"], lv["records"], f"{lv['fill'] * 100:.1f}%")
                 for lv in s["per_level"]], style)
