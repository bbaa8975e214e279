"""What commands share that needs no click: the lines they print to
stderr, JSON output, and IMAGE opened for reading (with --partition,
--offset and --logdev as the command line gives them).  The commands cli/
quick.py runs without click use these; cli/console.py and cli/options.py
hand the same functions to the click commands, so both ways print the
same."""
from __future__ import annotations

import sys
import warnings

import fstool
from ..errors import DirtyLogWarning, FsToolWarning, LogUnreadableWarning
from ..io.lock import fstool_mounts_of
from ..io.logdev import pair, replay_command
from ..io.partition import join
from ..ops.names import json_exact


def echo(msg: str, err: bool = False) -> None:
    """``msg`` and a newline on stdout (stderr with ``err``), flushed as
    click.echo does."""
    out = sys.stderr if err else sys.stdout
    out.write(f"{msg}\n")
    out.flush()


def is_tty() -> bool:
    return sys.stdout.isatty()


def output_style(fmt: str | None, as_json: bool = False) -> str:
    """"json", "table" or "plain": --json or --format json, else --format,
    else a table on a terminal and plain text anywhere else."""
    if as_json or fmt == "json":
        return "json"
    if fmt:
        return fmt
    return "table" if is_tty() else "plain"


def warn(msg: str) -> None:
    echo(f"fstool: warning: {msg}", err=True)


def emit_json(obj, as_json: bool) -> None:
    """Print ``obj`` as one line of JSON when ``as_json`` (else nothing)."""
    if as_json:
        import json  # lazy: start-up (only for --json)
        echo(json.dumps(json_exact(obj), ensure_ascii=False))


def image_name(image: str, partition=None, offset=None, logdev=None) -> str:
    """The image name IMAGE, ``--partition`` and ``--offset`` come to, paired
    with its external log ``--logdev`` (io/logdev.py); raises
    InvalidArgument for a partition and an offset both, or either with an
    IMAGE@N name."""
    if partition is not None or offset is not None:
        image = join(image, partition, offset)
    if logdev is not None:
        pair(image, logdev)
    return image


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
