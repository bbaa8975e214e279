"""``fstool undo``: put back what a change saved in an undo file."""
import json

import click

from ..errors import FsToolError, ImageBusy
from ..ops.repair import undo
from .options import image_arg, json_opt


@click.command("undo")
@json_opt
@image_arg
@click.argument("undo_file", type=click.Path(dir_okay=False))
def cmd(as_json, image, undo_file):
    """Put back into IMAGE every block UNDO_FILE saved (fstool repair
    --undo-file).  Refuses when the image has changed since the undo file
    was written, when the undo file is incomplete, or when the image is in
    use.

    Exit status: 0 done; 4 refused or could not run; 7 the image is busy
    (mounted, attached to a loop device, held by another fstool).
    """


    try:
        n = undo(image, undo_file)
    except FsToolError as e:
        if not isinstance(e, ImageBusy):
            e.exit_status = 4
        raise
    if as_json:
        click.echo(json.dumps({"restored_bytes": n}))
    else:
        click.echo(f"restored {n} bytes from {undo_file}")
