"""``fstool mdrestore``: an image made again from a metadump."""
import click

from .console import json_opt
from .quick import restore


@click.command("mdrestore")
@click.option("-l", "--log-image", type=click.Path(dir_okay=False),
              help="Where to write an external log a v2 dump holds.")
@json_opt
@click.argument("dump", type=click.Path(exists=True, dir_okay=False))
@click.argument("image", type=click.Path(dir_okay=False))
def mdrestore_cmd(log_image, as_json, dump, image):
    """Make the image file IMAGE from the metadump DUMP (v1 or v2, as
    xfs_metadump or 'fstool metadump' write them): IMAGE is created or
    truncated to the filesystem's size, every block of the dump written
    at its place, the rest left as holes.

    Exit status: 0 done; 4 DUMP is not a metadump; 6 DUMP is truncated or
    damaged; see fstool's exit-status page for the rest.
    """
    restore(log_image, as_json, dump, image)
