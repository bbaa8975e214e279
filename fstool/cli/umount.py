"""``fstool umount``: unmount an fstool mount and wait until the image is
written back."""
import click
from ..mount.run import unmount


@click.command("umount")
@click.argument("mountpoint", type=click.Path())
@click.option("--timeout", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for the server to finish writing the image.")
def cmd(mountpoint, timeout):
    """Unmount MOUNTPOINT (an fstool mount) and wait until its server has
    written everything back and the image's log is clean: once this
    returns the image can be copied, checked or mounted again.
    (`fusermount3 -u` returns while the server still writes its last
    checkpoint.)"""
    unmount(mountpoint, timeout)
