"""Argument types shared by commands."""
import functools
import click
import warnings
import fstool
from ..errors import DirtyLogWarning, FsToolWarning, LogUnreadableWarning
from ..errors import InvalidArgument
from ..io.logdev import pair, replay_command
from ..io.partition import join
from .console import emit_json, json_opt, warn  # noqa: F401 - the commands take them from here
from ..io.lock import fstool_mounts_of


def _image_arg(f, logdev: bool):
    """The IMAGE argument of a command, with --partition and --offset for
    a filesystem inside a whole-disk image (also written IMAGE@N,
    IMAGE@NAME, IMAGE@PARTUUID: fstool/io/partition.py): they come to the
    command as one image name; with ``logdev``, --logdev FILE names the
    external log of that image (fstool/io/logdev.py pairs it with the name,
    so that every filesystem opened on it finds its log)."""
    @functools.wraps(f)
    def run(*args, partition=None, offset=None, logdev=None, **kw):
        if partition is not None or offset is not None:
            try:
                kw["image"] = join(kw["image"], partition, offset)
            except InvalidArgument as e:
                raise click.UsageError(str(e)) from None
        if logdev is not None:
            pair(kw["image"], logdev)
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


def open_fs(image, replay_in_memory: bool = False):
    """Open IMAGE for a reading command.  A dirty log is never silent: it
    is replayed in memory when asked, else a warning says that what follows
    is the image before replay (open_image's warnings, said the CLI's way)."""

    warn_live_mount(image)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FsToolWarning)
        fs = fstool.open_image(image, replay_in_memory=replay_in_memory)
    for w in caught:
        m = w.message
        if isinstance(m, DirtyLogWarning):
            warn(f"{image}: the log is dirty; what follows is the image BEFORE replay (run "
                 f"'{replay_command(image)}', or add --replay-in-memory)")
        elif isinstance(m, LogUnreadableWarning):
            warn(f"{image}: the log cannot be read ({m.reason}); what follows is the image "
                 "as it is on disk")
        else:
            warnings.warn_explicit(m, w.category, w.filename, w.lineno)
    return fs


def warn_live_mount(image) -> None:
    """Warn when an fstool mount serves IMAGE read-write: what the file
    holds lags what the mount shows until the mount's next checkpoint."""
    for mnt in fstool_mounts_of(image, writable_only=True):
        warn(f"{image}: an fstool mount serves it read-write at {mnt}; what the image file "
             "holds may lag behind what the mount shows (unmount it first: fstool umount "
             f"{mnt})")

