"""``fstool undo``: put back what a change saved in an undo file."""
import click

from .options import image_arg_no_log, json_opt
import json
from ..ops.repair import undo


@click.command("undo")
@json_opt
@image_arg_no_log
@click.argument("undo_file", type=click.Path(dir_okay=False))
def cmd(as_json, image, undo_file):
    """Put back into IMAGE every block UNDO_FILE saved (fstool repair
    --undo-file).  Refuses when the image has changed since the undo file
    was written, when the undo file is incomplete, or when the image is in
    use.

    Exit status: 0 done; 2 UNDO_FILE is missing, unreadable or not an undo
    file; 3 the image cannot be opened; 7 refused, nothing written: the
    image changed since, the undo file is incomplete, or the image is busy
    (mounted, attached to a loop device, held by another fstool).
    """


    n = undo(image, undo_file)
    if as_json:
        click.echo(json.dumps({"restored_bytes": n}))
    else:
        click.echo(f"restored {n} bytes from {undo_file}")
