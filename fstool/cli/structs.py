"""Field-by-field prints of on-disk structures (like xfs_db's print)."""
import click

from .console import print_fields
from .options import image_arg, json_opt, open_fs
from ..ops import inspect


def _ag_command(name, describe_name, doc):
    @click.command(name, help=doc)
    @json_opt
    @image_arg
    @click.argument("agno", type=click.IntRange(min=0), default=0)
    def command(as_json, image, agno):
        with open_fs(image) as fs:
            print_fields(getattr(inspect, describe_name)(fs, agno), as_json)
    return command


sb_cmd = _ag_command("sb", "describe_sb",
                     "Print the superblock of AG AGNO (default 0, the primary).")
agf_cmd = _ag_command("agf", "describe_agf", "Print the AGF (free space header) of AG AGNO.")
agi_cmd = _ag_command("agi", "describe_agi", "Print the AGI (inode header) of AG AGNO.")
agfl_cmd = _ag_command("agfl", "describe_agfl",
                       "Print the AGFL of AG AGNO with the live free-list blocks.")


@click.command("inode")
@json_opt
@image_arg
@click.argument("inode")
def inode_cmd(as_json, image, inode):
    """Print an inode field by field, with its extent map.  INODE is an
    inode number (decimal or 0x hex) or a path in the image."""
    with open_fs(image) as fs:
        print_fields(inspect.describe_inode(fs, inspect.inode_of(fs, inode)), as_json)
