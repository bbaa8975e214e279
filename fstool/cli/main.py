"""``fstool`` entry point: a click group whose subcommands load on demand, so
``--help`` is instant (cli/group.py), and one place that turns errors into
one clear line.  click itself is loaded only when the command line needs it:
a plain ``fstool mdrestore DUMP IMAGE`` runs without it (cli/quick.py)."""
from __future__ import annotations

import os
import sys

from .commands import COMMANDS


def __getattr__(name: str):
    """``cli``, the click group (cli/group.py), loaded on first use."""
    if name == "cli":
        from .group import cli  # lazy: start-up (click: not for a plain mdrestore)
        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _unless_interrupted(status, as_json: bool):
    """``status``, or 128 + the signal that came while a write was under
    way and was kept until it ended (the command then stopped on its own)."""
    from ..io.signals import pending  # lazy: start-up, as main's
    sig = pending()
    if sig is None:
        return status
    from .console import error_line  # lazy: start-up, as main's
    error_line("interrupted", as_json, 128 + sig)
    return 128 + sig


def _remount_request(args) -> bool:
    """Whether ``args`` are mount.fuse's call for a remount: SOURCE
    MOUNTPOINT -o OPTIONS with ``remount`` among the options."""
    if len(args) < 4 or args[0] in COMMANDS or args[0].startswith("-"):
        return False
    opts = [o for i, a in enumerate(args[:-1]) if a == "-o" for o in args[i + 1].split(",")]
    return "remount" in opts


class _NotRaised(Exception):
    """Stands for click's exceptions where click is not loaded."""


def main(argv=None):
    from ..errors import FsToolError, errno_of  # lazy: start-up, as below
    from . import exits  # lazy: start-up, as below
    from .exits import (EXIT_FAILURE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE,  # lazy: start-up
                        exit_status)
    from .quick import command as quick_command  # lazy: start-up, as above
    exits.AS_PROGRAM = argv is None
    if exits.AS_PROGRAM:
        # SIGINT and SIGTERM end the command with 130 and 143, once any
        # write under way is done (fstool/io/signals.py)
        from ..io import signals  # lazy: start-up, as above
        signals.install()
    args = list(argv if argv is not None else sys.argv[1:])
    if not args:
        args = ["--help"]          # no command: show the help, not an error
    as_json = "--json" in args

    def fail(msg: str, status: int, exc: BaseException | None = None) -> None:
        from .console import error_line  # lazy: start-up (click), on errors only
        error_line(msg, as_json, status, None if exc is None else errno_of(exc))
        sys.exit(status)

    if _remount_request(args):
        # mount(8) -o remount on a fuse.fstool mount runs mount.fuse, which
        # runs "fstool SOURCE MOUNTPOINT -o remount,...": say plainly that
        # an fstool mount is not remounted
        fail(f"{args[1]}: an fstool mount cannot be remounted; unmount it (fstool umount "
             f"{args[1]}) and mount it again (fstool mount [--ro] {args[0]} {args[1]})",
             EXIT_FAILURE)
    quick = quick_command(args)
    if quick is None:
        import click  # lazy: start-up (not for what cli/quick.py runs)
        from .group import cli  # lazy: start-up, as above
        Abort, Exit = click.exceptions.Abort, click.exceptions.Exit
        UsageError, ClickException = click.UsageError, click.ClickException
    else:
        Abort = Exit = UsageError = ClickException = _NotRaised
    try:
        if quick is None:
            cli.main(args=args, prog_name="fstool", standalone_mode=False)
        else:
            quick()
        from ..io.signals import raise_pending  # lazy: start-up, as above
        raise_pending()
    except Abort as e:
        # click turns Ctrl-C (and our SIGTERM) into Abort: its cause says which
        cause = e.__cause__
        if isinstance(cause, KeyboardInterrupt):
            fail("interrupted", getattr(cause, "exit_status", EXIT_INTERRUPTED))
        fail("aborted", EXIT_FAILURE)
    except Exit as e:
        sys.exit(_unless_interrupted(e.exit_code, as_json))
    except SystemExit as e:
        sys.exit(_unless_interrupted(e.code, as_json))
    except UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        fail(f"{e.format_message()}{hint}", EXIT_USAGE)
    except ClickException as e:
        fail(e.format_message(), e.exit_code)
    except FsToolError as e:
        fail(str(e), exit_status(e), e)
    except BrokenPipeError:
        # the reader went away (e.g. `fstool cat ... | head`): not an error
        try:
            sys.stdout = None
        finally:
            os._exit(0)
    except KeyboardInterrupt as e:
        fail("interrupted", getattr(e, "exit_status", EXIT_INTERRUPTED))
    except OSError as e:
        fail(_os_error_text(e), EXIT_FAILURE, e)
    except Exception as e:  # an fstool bug: one line, traceback on request
        if os.environ.get("FSTOOL_DEBUG"):
            raise
        fail(f"internal error: {type(e).__name__}: {e} (set FSTOOL_DEBUG=1 for a traceback)",
             EXIT_INTERNAL)


def _os_error_text(e: OSError) -> str:
    """'PATH: reason' for an error naming a file, as other tools print it
    (not Python's '[Errno N] reason: 'PATH'')."""
    if e.filename is not None and e.strerror:
        name = os.fsdecode(e.filename)
        if e.filename2 is not None:
            name += f" -> {os.fsdecode(e.filename2)}"
        return f"{name}: {e.strerror}"
    return str(e)


if __name__ == "__main__":
    main()
