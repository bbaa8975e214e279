"""``fstool mount``: the image as a live read-write filesystem through FUSE."""
import click

from ..errors import UnsupportedError
from ..mount.run import fuse_available, mount
from ..ops.guard import require_sound
from .exits import exit_status
from .options import image_arg


@click.command("mount")
@image_arg
@click.argument("mountpoint", type=click.Path(exists=True, file_okay=False))
@click.option("--ro", "readonly", is_flag=True, help="Mount read-only.")
@click.option("-f", "--foreground", is_flag=True,
              help="Stay in the foreground until unmounted (default: return once the "
                   "mount is live, serving it from a background process).")
@click.option("-o", "opts", multiple=True, metavar="OPTS",
              help="Mount options, comma-separated (allow_other, ro, default_permissions, "
                   "nonempty, fsname=, subtype=, writeback_cache...): see "
                   "docs/commands/mount.md.  default_permissions is on unless root mounts "
                   "without allow_other.")
@click.option("--no-check", is_flag=True,
              help="Mount even when fstool check finds problems in the image.")
@click.option("--fuse-loop", "loop", type=click.Choice(["native", "pyfuse3"]),
              default=None,
              help="The request loop: native (C, over libfuse3's low-level API; the "
                   "default where it was built) or pyfuse3 (the fallback).")
def cmd(image, mountpoint, readonly, foreground, opts, no_check, loop):
    """Mount IMAGE at MOUNTPOINT through FUSE (libfuse3).

    Unmount with `fstool umount MOUNTPOINT`, which waits until everything is
    written back and the log has its unmount record (`fusermount3 -u` or
    umount return before that).  mount(8) and df show the image's path as
    the source and fuse.fstool as the type.  A mountpoint something is
    mounted on, or a directory that is not empty (unless -o nonempty), is
    refused.
    Every change is journaled: fsync and fdatasync write a checkpoint, and
    one is written every few seconds; after a crash the kernel's mount or
    `fstool log replay` recovers the image.  Images that are mounted, in use
    by another fstool or carry a dirty log are refused (exit status 7).
    """
    why = fuse_available(loop)
    if why:
        raise UnsupportedError(f"cannot mount: {why}")
    options = [o for group in opts for o in group.split(",") if o]
    if "ro" in options:
        readonly = True
    if not readonly and not no_check:
        require_sound(image)
    mode = "read-only" if readonly else "read-write"

    def announce():
        click.echo(f"fstool: serving {image} at {mountpoint} ({mode}); stop with "
                   f"'fstool umount {mountpoint}' or Ctrl-C", err=True)
    mount(image, mountpoint, readonly=readonly, foreground=foreground, options=options,
          status_of=exit_status, loop=loop, announce=announce)
