import click

from .options import image_arg, open_fs


@click.command("cat")
@image_arg
@click.argument("path")
def cmd(image, path):
    """Write the contents of the file PATH in IMAGE to standard output."""
    import shutil
    import sys

    with open_fs(image) as fs:
        stream = fs.open(path)
        shutil.copyfileobj(stream, sys.stdout.buffer, 4 << 20)
        sys.stdout.buffer.flush()
