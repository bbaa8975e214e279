"""``fstool metadump``: an image's metadata alone, in xfs_metadump's file
formats (``fstool mdrestore``, back to an image, is fstool/cli/mdrestore.py)."""
import click

from ..ops.metadump import MAX_EXTLEN, metadump
from .console import human_bytes, warn
from .options import emit_json, image_arg, json_opt


@click.command("metadump")
@click.option("-o", "keep_names", is_flag=True,
              help="Keep names, xattr names and values and the label as they are "
                   "(by default they are obfuscated as xfs_metadump does).")
@click.option("-a", "full_blocks", is_flag=True,
              help="Copy metadata blocks whole (by default their unused parts are zeroed, "
                   "as xfs_metadump does).")
@click.option("-v", "--version", "version", type=click.Choice(["1", "2"]),
              help="Dump format: 1 (XFSM) or 2 (XMD2, xfsprogs 6.10).  Default 1, or 2 "
                   "when --logdev gives an external log (only v2 holds it).")
@click.option("--no-log", is_flag=True, help="Leave the log out of the dump.")
@click.option("-m", "--max-extent", type=click.IntRange(min=1), default=MAX_EXTLEN,
              metavar="BLOCKS", show_default=True,
              help="Skip the rest of a metadata mapping at an extent longer than this.")
@json_opt
@image_arg
@click.argument("out", type=click.Path(dir_okay=False))
def metadump_cmd(keep_names, full_blocks, version, no_log, max_extent, as_json, image, out):
    """Write the metadata of IMAGE to the file OUT in xfs_metadump's format:
    superblocks and AG headers, every btree block, inode clusters,
    directory, attribute and symlink blocks, quota and realtime metadata,
    and the log (a clean log is replaced by an empty clean one unless -o
    and -a are both given).  File data is never copied.  xfs_mdrestore or
    'fstool mdrestore' make an image of it again.

    Exit status: 0 done; see fstool's exit-status page for the rest.
    """
    r = metadump(image, out, version=int(version) if version else None,
                 obfuscate=not keep_names,
                 full_blocks=full_blocks, log=not no_log, max_extent=max_extent)
    for w in r["warnings"][:10]:
        warn(w)
    if len(r["warnings"]) > 10:
        warn(f"... and {len(r['warnings']) - 10} more (--json lists them all)")
    if as_json:
        emit_json(r, True)
        return
    click.echo(f"{out}: metadump v{r['version']}, {r['buffers']} buffers, "
               f"{human_bytes(r['bytes'])}"
               + (", names obfuscated" if r["obfuscated"] else "")
               + (", dirty log" if r["dirty_log"] else ""))
