"""``fstool check`` without click: what the command does once its command
line is read (by click, cli/check.py, or without it, cli/quick.py).  click
and the table printer load only when there are findings to show or an
error to say."""
import gc
import sys
import warnings

import fstool

from ..errors import (CorruptionError, FsToolError, ImageTruncatedError, LogDeviceNeeded,
                      UnknownFeatureError, UnsupportedError, errno_of)
from ..io.device import Device
from ..io.logdev import replay_command
from ..ops import check as C
from ..ops.check.superblocks import contradicted_primary
from ..ops.names import json_exact
from .exits import finish
from .plain import echo, is_tty, output_style, warn_live_mount


def run(jobs: int, as_json: bool, fmt, image: str) -> None:
    """Check ``image`` and say what was found; ends the process with the
    check's exit status (exits.finish)."""
    # the command ends when the findings are out (finish): the cyclic
    # collector would only walk, again and again, the objects the check
    # keeps to the end (ops.check.check turns it off while it runs; left on
    # after it, the first collection walked all of them, 10 ms on the
    # varied tree)
    gc.disable()
    style = output_style(fmt, as_json)
    as_json = style == "json"
    warn_live_mount(image)
    try:
        with warnings.catch_warnings():
            # the check reports the log itself (LOG_DIRTY, its findings)
            warnings.simplefilter("ignore", fstool.FsToolWarning)
            fs = fstool.open_image(image)
    except CorruptionError as e:
        # the primary superblock cannot be trusted (xfs_repair -n looks for
        # a secondary and reports the primary as bad)
        _emit([C.Finding("SB_PRIMARY", str(e), structure="sb", agno=0, block=0,
                         field=e.field)], style)
        sys.exit(C.EXIT_CORRUPT)
    except UnknownFeatureError as e:
        # what xfs_repair -n does too: a superblock it cannot vouch for
        _emit([C.Finding("SB_FEATURES", str(e), structure="sb", agno=0, block=0,
                         field="sb_features_incompat")], style)
        sys.exit(C.EXIT_CORRUPT)
    except UnsupportedError as e:
        # a layout fstool does not handle (v4, a realtime section) that only the primary says: damage, as xfs_repair -n says
        _cannot_check(image, e, style, as_json)
    except FsToolError as e:
        status = C.EXIT_CORRUPT if isinstance(e, ImageTruncatedError) else C.EXIT_OPERATIONAL
        _error_line(str(e), as_json, status, errno_of(e))
        sys.exit(status)
    with fs:
        try:
            fs.require_log()      # the log phase's clean/dirty judgement reads it
        except LogDeviceNeeded as e:
            # unless only a damaged primary says the log is external
            _cannot_check(image, e, style, as_json)
        if is_tty() and not as_json:
            with _PhaseBars() as bars:
                checker = C.check(fs, bars.update, jobs=jobs)
        else:
            checker = C.check(fs, jobs=jobs)
    _emit(checker.findings, style)
    if checker.log_dirty and not as_json:
        echo(f"fstool: error: the log is dirty: replay it first with "
             f"'{replay_command(image)}'", err=True)
    finish(checker.exit_code)


def _error_line(msg: str, as_json: bool, status: int, errno=None) -> None:
    from .console import error_line  # lazy: click only for an error to say
    error_line(msg, as_json, status, errno)


def _cannot_check(image, e, style, as_json) -> None:
    """Exit on a layout check cannot take (``e``): as damage when the
    secondary superblocks contradict what the primary alone says (as
    xfs_repair -n judges it), else as the one-line operational error."""
    found = _contradicted(image)
    if not found:
        _error_line(str(e), as_json, C.EXIT_OPERATIONAL, errno_of(e))
        sys.exit(C.EXIT_OPERATIONAL)
    _emit(found, style)
    sys.exit(C.EXIT_CORRUPT)


def _contradicted(image) -> list:
    """Findings for a primary superblock whose unsupported layout the
    secondaries deny (ops.check.superblocks.contradicted_primary)."""
    dev = Device(image)
    try:
        return contradicted_primary(dev)
    finally:
        dev.close()


class _PhaseBars:
    """A progress bar per phase, on a terminal (gone when the check ends)."""

    def __enter__(self):
        from rich.progress import (BarColumn,  # lazy: start-up (bars only on a terminal)
                                   MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn)
        from .console import console  # lazy: as above
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description:<14}"),
                                 BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=console(), transient=True)
        self.progress.start()
        self.tasks = {}
        return self

    def update(self, phase, done, total):
        task = self.tasks.get(phase)
        if task is None:
            for t in self.tasks.values():          # the phase before is over
                self.progress.update(t, total=1, completed=1)
            task = self.tasks[phase] = self.progress.add_task(phase.replace("_", " "),
                                                              total=None)
        self.progress.update(task, completed=done, total=total)

    def __exit__(self, *exc):
        self.progress.stop()


def _emit(findings, style):
    if style == "json":
        import json  # lazy: start-up (only for --json)
        for f in findings:
            echo(json.dumps(json_exact(f.as_dict())))
        return
    if not findings:
        echo("no problems found")
        return
    rows = []
    for f in findings:
        where = ", ".join(x for x in (
            f.structure or "",
            f"AG {f.agno}" if f.agno is not None else "",
            f"block {f.block}" if f.block is not None else "",
            f"inode {f.ino}" if f.ino is not None else "",
            f"{f.fork} fork block {f.offset}" if f.offset is not None else "") if x)
        rows.append((f.code, f.severity, where, f.message))
    from .console import print_table  # lazy: click and the tables only for findings to show
    print_table(f"{len(findings)} problem{'s' if len(findings) != 1 else ''} found",
                ("code", "severity", "where", "problem"), rows, style, left=(0, 1, 2, 3))
