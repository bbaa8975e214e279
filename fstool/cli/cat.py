import shutil
import sys

import click

from .options import image_arg, open_fs, replay_opt


@click.command("cat")
@replay_opt
@image_arg
@click.argument("path")
def cmd(image, path, replay_in_memory):
    """Write the contents of the file PATH in IMAGE to standard output."""

    with open_fs(image, replay_in_memory) as fs:
        stream = fs.open(path)
        shutil.copyfileobj(stream, sys.stdout.buffer, 4 << 20)
        sys.stdout.buffer.flush()
