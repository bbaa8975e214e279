import click

from .console import bytes_opt, size_text
from .options import replay_opt, image_arg, json_opt, open_fs
from ..ops.listing import entry_record, mode_string, parent_records
from ..ops.names import shown_name
from ..ops.inspect import _fmt_ns
from ..format import constants as C
from ..fs import dir as xdir
import json
from ..ops.names import json_exact


@click.command("stat")
@replay_opt
@json_opt
@bytes_opt
@image_arg
@click.argument("path")
def cmd(as_json, raw, image, path, replay_in_memory):
    """Show everything about PATH in IMAGE: type, mode, owner, size, links,
    timestamps to the nanosecond, data fork layout, device numbers, xattrs
    and, on a filesystem with parent pointers, the parents (each directory
    naming the file: its inode, generation and the name).

    Size is in bytes and in KiB/MiB/GiB (-b: bytes only); Blocks counts
    512-byte units, as stat(1) and os.stat's st_blocks do; FS blocks counts
    the filesystem's blocks the file holds (di_nblocks)."""

    with open_fs(image, replay_in_memory) as fs:
        node = fs.lookup(path)
        rec = entry_record(fs, "/" + path.strip("/"), node)
        if fs.has_parent_pointers:
            rec["parents"] = parent_records(fs, node)
        rec.update({
            "atime_ns": node.atime_ns, "ctime_ns": node.ctime_ns,
            "crtime_ns": node.crtime_ns, "nblocks": node.nblocks,
            "blocks": fs.stat(node).st_blocks, "blksize": fs.sb.blocksize,
            "format": C.DINODE_FORMAT_NAMES.get(node.format, str(node.format)),
            "nextents": node.nextents, "generation": node.gen,
        })
        if node.is_dir:
            rec["dir_form"] = xdir.form(node)
        if as_json:
            click.echo(json.dumps(json_exact(rec)))
            return
        click.echo(f"  File: {rec['path']}" + (f" -> {rec['target']}" if "target" in rec else ""))
        click.echo(f"  Type: {rec['type']}    Inode: {node.ino}    Links: {node.nlink}")
        size = str(node.size) if raw or node.size < 1024 else \
            f"{node.size} ({size_text(node.size)})"
        click.echo(f"  Size: {size}    Blocks: {rec['blocks']}    IO Block: {rec['blksize']}"
                   f"    FS blocks: {node.nblocks}")
        click.echo(f"  Fork: {rec['format']} ({node.nextents} extents)"
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
