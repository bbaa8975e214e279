import click

from .options import replay_opt, image_arg, open_fs


@click.command("cat")
@replay_opt
@image_arg
@click.argument("path")
def cmd(image, path, replay_in_memory):
    """Write the contents of the file PATH in IMAGE to standard output."""
    import shutil
    import sys

    with open_fs(image, replay_in_memory) as fs:
        stream = fs.open(path)
        shutil.copyfileobj(stream, sys.stdout.buffer, 4 << 20)
        sys.stdout.buffer.flush()
