"""``fstool sparsify``: give an image's free space back to the host."""
import click

from .console import bytes_opt, size_text
from .edit import no_check_option
from .options import emit_json, image_arg, json_opt


@click.command("sparsify")
@click.option("--zero", is_flag=True,
              help="Write zeros over the free blocks instead of punching them out (for "
                   "copies and formats that need zeros rather than holes).")
@no_check_option
@json_opt
@bytes_opt
@image_arg
def cmd(zero, no_check, as_json, raw, image):
    """Punch every free extent out of IMAGE (fallocate PUNCH_HOLE): the image
    file keeps its size and its contents, and the host gets back the space
    its free blocks held.  Only free blocks are written; the image is checked
    first (refused when check finds errors), and a dirty log, a mounted or
    busy image are refused (exit status 7)."""
    from ..ops.sparsify import sparsify
    rep = sparsify(image, zero=zero, check=not no_check)
    if as_json:
        emit_json(rep, True)
        return
    verb = "zeroed" if zero else "punched out"
    click.echo(f"{image}: {verb} {size_text(rep['bytes'], raw)} of free space in "
               f"{rep['free_extents']} free extents; the image file takes "
               f"{size_text(rep['allocated_after'], raw)} on the host (it took "
               f"{size_text(rep['allocated_before'], raw)})")
