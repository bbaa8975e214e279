import json

import click

from ..format import constants as C
from ..fs import dir as xdir
from ..ops.inspect import _fmt_ns
from ..ops.names import shown_name
from ..ops.listing import entry_record, mode_string, parent_records
from .options import image_arg, json_opt, open_fs, replay_opt


@click.command("stat")
@replay_opt
@json_opt
@image_arg
@click.argument("path")
def cmd(as_json, image, path, replay_in_memory):
    """Show everything about PATH in IMAGE: type, mode, owner, size, links,
    timestamps to the nanosecond, data fork layout, device numbers, xattrs
    and, on a filesystem with parent pointers, the parents (each directory
    naming the file: its inode, generation and the name)."""
    with open_fs(image, replay_in_memory) as fs:
        node = fs.lookup(path)
        rec = entry_record(fs, "/" + path.strip("/"), node)
        if fs.has_parent_pointers:
            rec["parents"] = parent_records(fs, node)
        rec.update({
            "atime_ns": node.atime_ns, "ctime_ns": node.ctime_ns,
            "crtime_ns": node.crtime_ns, "nblocks": node.nblocks,
            "format": C.DINODE_FORMAT_NAMES.get(node.format, str(node.format)),
            "nextents": node.nextents, "generation": node.gen,
        })
        if node.is_dir:
            rec["dir_form"] = xdir.form(node)
        if as_json:
            click.echo(json.dumps(rec))
            return
        click.echo(f"  File: {rec['path']}" + (f" -> {rec['target']}" if "target" in rec else ""))
        click.echo(f"  Type: {rec['type']}    Inode: {node.ino}    Links: {node.nlink}")
        click.echo(f"  Size: {node.size}    Blocks: {node.nblocks}    "
                   f"Fork: {rec['format']} ({node.nextents} extents)"
                   + (f"    Directory form: {rec['dir_form']}" if node.is_dir else ""))
        if "rdev" in rec:
            click.echo(f"Device: {rec['rdev'][0]},{rec['rdev'][1]}")
        click.echo(f"Access: (0{node.perm:04o}/{mode_string(node)})  Uid: {node.uid}  "
                   f"Gid: {node.gid}")
        for label, ns in (("Access", node.atime_ns), ("Modify", node.mtime_ns),
                          ("Change", node.ctime_ns), (" Birth", node.crtime_ns)):
            click.echo(f"{label}: {_fmt_ns(ns)}")
        if rec["xattrs"]:
            click.echo("Xattrs: " + ", ".join(rec["xattrs"]))
        for p in rec.get("parents", ()):
            click.echo(f"Parent: {p['ino']} (generation {p['gen']}) {shown_name(p['name'])}")
