"""Exit statuses: one meaning each, the same in every command.

    0   success
    1   the command failed for a reason not listed below (a path missing in
        the image, a name already taken, no space left, a host file that
        cannot be read or written), or it finished but skipped entries
    2   bad arguments (unknown option, invalid value: errors.BadValue,
        missing argument)
    3   the image cannot be opened or read (missing, a directory,
        permission denied, I/O error)
    4   the image holds no XFS filesystem
    5   the image uses a format or feature fstool does not support
    6   the image is corrupt (metadata failed verification, truncated)
    7   refused: the image is busy (mounted, attached to a loop device,
        held by another fstool, under any of its names: fstool/io/lock.py)
        or must not be written as it is (dirty log, marked as needing
        repair)
    70  internal error (a bug in fstool; FSTOOL_DEBUG=1 shows the traceback)
    130 interrupted (SIGINT), 143 (SIGTERM): errors.Interrupted, io/signals.py

``fstool check`` keeps the statuses of ``xfs_repair`` instead: 0 clean,
1 corruption found, 2 dirty log, 4 the check could not run; the ``log``
commands exit 4 when the log cannot be read or replayed, ``repair`` when
it cannot run (a busy image is 7 for it too, bad arguments 2).
docs/commands/exit-status.md lists them for users.
"""
from __future__ import annotations

import os
import sys

from .. import errors as E

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NO_IMAGE = 3
EXIT_NOT_XFS = 4
EXIT_UNSUPPORTED = 5
EXIT_CORRUPT = 6
EXIT_REFUSED = 7
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

# set by cli.main.main when it runs as the program, not called from Python
AS_PROGRAM = False


def finish(status: int) -> None:
    """End a read-only command that has written all it will, with
    ``status``.  Run as the program, the process ends at once once its
    output is flushed: the interpreter's teardown would free one by one
    every object the command built (tens of milliseconds after a large
    check) for nothing.  Called from Python, this is ``sys.exit``."""
    if AS_PROGRAM:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:
            pass                # the reader went away: nothing more to say
        os._exit(status)
    sys.exit(status)


def exit_status(exc: BaseException) -> int:
    """The exit status for an error that ends a command."""
    own = getattr(exc, "exit_status", None)
    if own is not None:
        # commands with statuses of their own (fstool log, like check)
        return own
    if isinstance(exc, E.BadValue):
        return EXIT_USAGE
    if isinstance(exc, E.NotXfsError):
        return EXIT_NOT_XFS
    if isinstance(exc, (E.CorruptionError, E.ImageTruncatedError)):
        return EXIT_CORRUPT
    if isinstance(exc, E.UnsupportedError):
        return EXIT_UNSUPPORTED
    if isinstance(exc, (E.ImageBusy, E.WriteRefused)):
        return EXIT_REFUSED
    if isinstance(exc, E.ImageError):
        return EXIT_NO_IMAGE
    return EXIT_FAILURE
