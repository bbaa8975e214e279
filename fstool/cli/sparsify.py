"""``fstool sparsify``: give an image's free space back to the host."""
import json

import click

from ..ops.sparsify import sparsify
from .console import human_bytes
from .options import image_arg, json_opt


@click.command("sparsify")
@click.option("--zero", is_flag=True,
              help="Write zeros over free space instead of punching holes (for image "
                   "formats or hosts that need it).")
@click.option("-n", "--dry-run", is_flag=True, help="Count the free space; write nothing.")
@click.option("--no-check", is_flag=True,
              help="Do not check the image first (the free-space btrees are then trusted "
                   "as they are).")
@json_opt
@image_arg
def cmd(zero, dry_run, no_check, as_json, image):
    """Punch every free extent out of IMAGE, so that the host stores only
    the blocks the filesystem uses.  The image is checked first, its log
    must be clean, and it must not be mounted.

    Exit status: 0 done; 7 refused (busy, dirty log, or check found
    problems); see fstool's exit-status page for the rest.
    """
    r = sparsify(image, zero=zero, dry_run=dry_run, check=not no_check)
    if as_json:
        click.echo(json.dumps(r.as_dict()))
        return
    verb = "would " + ("zero" if zero else "punch") if dry_run else \
        ("zeroed" if zero else "punched")
    click.echo(f"{verb} {r.ranges} free extents, {human_bytes(r.bytes)}")
    if r.host_before is not None and r.host_after is not None:
        click.echo(f"image file on the host: {human_bytes(r.host_before)} allocated before, "
                   f"{human_bytes(r.host_after)} after (the filesystem uses "
                   f"{human_bytes(r.used_bytes)})")
