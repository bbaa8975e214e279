"""Argument types shared by commands."""
import functools
import click
from ..errors import InvalidArgument
from .console import emit_json, json_opt, warn  # noqa: F401 - the commands take them from here
from .plain import image_name, open_fs, warn_live_mount  # noqa: F401 - as above


def _image_arg(f, logdev: bool):
    """The IMAGE argument of a command, with --partition and --offset for
    a filesystem inside a whole-disk image (also written IMAGE@N,
    IMAGE@NAME, IMAGE@PARTUUID: fstool/io/partition.py): they come to the
    command as one image name; with ``logdev``, --logdev FILE names the
    external log of that image (fstool/io/logdev.py pairs it with the name,
    so that every filesystem opened on it finds its log)."""
    @functools.wraps(f)
    def run(*args, partition=None, offset=None, logdev=None, **kw):
        try:
            kw["image"] = image_name(kw["image"], partition, offset, logdev)
        except InvalidArgument as e:
            raise click.UsageError(str(e)) from None
        return f(*args, **kw)

    if logdev:
        run = click.option("--logdev", "logdev", metavar="FILE",
                           help="The external log of IMAGE (the file or device given to "
                                "mkfs.xfs -l logdev=; FILE@N for a partition): needed by "
                                "what reads or writes the log.")(run)
    run = click.option("--offset", type=click.IntRange(min=0), metavar="BYTES",
                       help="The filesystem starts this many bytes into IMAGE (and runs to "
                            "its end): for a partition table fstool does not read.")(run)
    run = click.option("--partition", metavar="N|NAME|PARTUUID",
                       help="The partition of a whole-disk IMAGE (GPT or MBR) to work on: "
                            "its number, GPT name, PARTUUID or XFS label; also written "
                            "IMAGE@N ('fstool disk IMAGE' lists them).")(run)
    return click.argument("image", type=click.Path())(run)


def image_arg(f):
    """IMAGE, --partition, --offset and --logdev (:func:`_image_arg`)."""
    return _image_arg(f, True)


def image_arg_no_log(f):
    """IMAGE, --partition and --offset, for a command that never reads a
    log (mkfs, undo)."""
    return _image_arg(f, False)




replay_opt = click.option(
    "--replay-in-memory", "replay_in_memory", is_flag=True,
    help="Show the image as it would be after replaying a dirty log, "
         "without changing it.")
