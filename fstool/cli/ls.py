import click

from .console import bytes_opt, size_text
from .options import replay_opt, image_arg, json_opt, open_fs
import json
import time
from ..ops.listing import entry_record, iter_listing, mode_string
from ..ops.names import json_exact, shown_name


@click.command("ls")
@click.option("-l", "long", is_flag=True, help="Long listing: mode, links, owner, size, time.")
@click.option("-R", "recursive", is_flag=True, help="List everything below PATH.")
@click.option("--parents", "with_parents", is_flag=True,
              help="With --json: add each file's parent pointers (key parents).")
@replay_opt
@json_opt
@bytes_opt
@image_arg
@click.argument("path", default="/")
def cmd(long, recursive, with_parents, as_json, raw, image, path, replay_in_memory):
    """List PATH (default /) in IMAGE.  -l shows sizes in B/KiB/MiB/GiB
    (-b: in bytes).

    With --json, print one JSON object per line with the keys path, type,
    mode, uid, gid, size, nlink, ino, mtime_ns, xattrs, and target (symlinks)
    or rdev (devices), and with --parents the parent pointers ({ino, gen,
    name} of each directory naming the file).  Names that are not UTF-8 are
    escaped as \\udcXX.
    """


    if with_parents and not as_json:
        raise click.UsageError("--parents goes with --json")
    with open_fs(image, replay_in_memory) as fs:
        out = click.get_text_stream("stdout")
        for p, name, node in iter_listing(fs, path, recursive):
            if as_json:
                out.write(json.dumps(json_exact(entry_record(fs, p, node,
                                                              with_parents=with_parents)))
                          + "\n")
                continue
            shown = shown_name(p if recursive else name)
            if not long:
                out.write(shown + "\n")
                continue
            if node.rdev is not None:
                size = f"{node.rdev[0]}, {node.rdev[1]}"
            else:
                size = size_text(node.size, raw)
            sec = node.mtime_ns // 1_000_000_000
            try:
                when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(sec))
            except (OverflowError, OSError, ValueError):
                when = str(sec)
            line = (f"{mode_string(node)} {node.nlink:>3} {node.uid:>5} {node.gid:>5} "
                    f"{size:>10} {when} {shown}")
            if node.is_symlink:
                line += " -> " + shown_name(
                    fs.readlink(node).decode("utf-8", "surrogateescape"))
            out.write(line + "\n")
