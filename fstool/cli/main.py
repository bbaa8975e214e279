"""``fstool`` entry point: a click group whose subcommands load on demand, so
``--help`` is instant, and one place that turns errors into one clear line."""
from __future__ import annotations

import importlib
import os
import sys

import click

from .. import __version__

# command name -> (module, attribute, one-line help)
COMMANDS = {
    "mkfs": ("mkfs", "cmd", "Create an XFS v5 filesystem (mkfs.xfs defaults and options)."),
    "check": ("check", "cmd", "Check an image like xfs_repair -n (exit 0 clean, 1 corrupt)."),
    "disk": ("disk", "cmd", "List the partition table of a whole-disk image (IMAGE@N)."),
    "info": ("info", "cmd", "Show geometry, features and counters (like mkfs.xfs / xfs_info)."),
    "ls": ("ls", "cmd", "List a directory in the image."),
    "stat": ("stat", "cmd", "Show everything about one file in the image."),
    "path": ("path", "cmd", "Print every path of an inode, from its parent pointers."),
    "cat": ("cat", "cmd", "Write a file's contents to standard output."),
    "get": ("get", "cmd", "Extract a file or a tree from the image onto the host."),
    "sb": ("structs", "sb_cmd", "Print a superblock field by field."),
    "agf": ("structs", "agf_cmd", "Print an AG free-space header field by field."),
    "agi": ("structs", "agi_cmd", "Print an AG inode header field by field."),
    "agfl": ("structs", "agfl_cmd", "Print an AG free list field by field."),
    "inode": ("structs", "inode_cmd", "Print an inode field by field."),
    "btree": ("btree", "cmd", "Dump any btree block by block, or summarise it."),
    "agstats": ("agstats", "cmd", "Per-AG space, inode and btree statistics."),
    "freesp": ("freesp", "cmd", "Free extent size histogram (like xfs_db freesp)."),
    "frag": ("frag", "cmd", "File fragmentation (like xfs_db frag)."),
    "populate": ("populate", "cmd", "Add a directory, tar archive or protofile to an image."),
    "mkdir": ("edit", "mkdir_cmd", "Create a directory in an image."),
    "put": ("edit", "put_cmd", "Copy a host file into an image."),
    "rm": ("edit", "rm_cmd", "Remove files or trees from an image."),
    "cp": ("edit", "cp_cmd", "Copy a file inside an image, sharing its blocks (reflink)."),
    "ln": ("edit", "ln_cmd", "Create a hard or symbolic link in an image."),
    "mv": ("edit", "mv_cmd", "Rename or move a file or directory in an image."),
    "setattr": ("edit", "setattr_cmd", "Change mode, owner, times or xattrs in an image."),
    "log": ("log", "cmd", "Print, replay or zero the log (journal) of an image."),
    "mount": ("mount", "cmd", "Mount an image read-write through FUSE."),
    "umount": ("umount", "cmd", "Unmount an fstool mount and wait until the image is written."),
    "repair": ("repair", "cmd", "Repair what check finds (exit 0 clean, 1 repaired, 4 not)."),
    "admin": ("admin", "cmd", "Set or print the label and UUID (like xfs_admin -L/-U/-l/-u)."),
    "resize": ("resize", "cmd", "Grow or shrink an image offline (-M: to its smallest size)."),
    "sparsify": ("sparsify", "cmd", "Punch the free space out of an image file."),
    "metadump": ("metadump", "metadump_cmd",
                 "Copy an image's metadata to a file in xfs_metadump's format."),
    "mdrestore": ("mdrestore", "mdrestore_cmd",
                  "Make an image from a metadump (xfs_metadump's or fstool's)."),
    "undo": ("undo", "cmd", "Put back the blocks an undo file saved (repair --undo-file)."),
    "completion": ("completion", "cmd", "Print the shell completion script (bash, zsh, fish)."),
}

class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        spec = COMMANDS.get(name)
        if spec is None:
            return None
        module = importlib.import_module(f"fstool.cli.{spec[0]}")
        return getattr(module, spec[1])

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _version_text() -> str:
    from .._backend import NAME  # lazy: start-up (loads the native parsers)
    return f"fstool {__version__} (fstool-xfs), parser backend: {NAME}"


def _print_version(ctx, _param, value):
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and the parser backend.")
def cli():
    """fstool: build, inspect, check and repair XFS v5 images offline.

    Every command takes an image file (or block device) and never needs root
    or a kernel mount to read it.  Set FSTOOL_PURE_PYTHON=1 to use the
    pure-Python parsers instead of the native ones.
    """


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


def main(argv=None):
    from ..errors import FsToolError, errno_of  # lazy: start-up, as below
    from . import exits  # lazy: start-up, as below
    from .console import error_line  # lazy: start-up (rich), as below
    from .exits import (EXIT_FAILURE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE,  # lazy: start-up
                        exit_status)
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
        error_line(msg, as_json, status, None if exc is None else errno_of(exc))
        sys.exit(status)

    if _remount_request(args):
        # mount(8) -o remount on a fuse.fstool mount runs mount.fuse, which
        # runs "fstool SOURCE MOUNTPOINT -o remount,...": say plainly that
        # an fstool mount is not remounted
        fail(f"{args[1]}: an fstool mount cannot be remounted; unmount it (fstool umount "
             f"{args[1]}) and mount it again (fstool mount [--ro] {args[0]} {args[1]})",
             EXIT_FAILURE)
    try:
        cli.main(args=args, prog_name="fstool", standalone_mode=False)
        from ..io.signals import raise_pending  # lazy: start-up, as above
        raise_pending()
    except click.exceptions.Abort as e:
        # click turns Ctrl-C (and our SIGTERM) into Abort: its cause says which
        cause = e.__cause__
        if isinstance(cause, KeyboardInterrupt):
            fail("interrupted", getattr(cause, "exit_status", EXIT_INTERRUPTED))
        fail("aborted", EXIT_FAILURE)
    except click.exceptions.Exit as e:
        sys.exit(_unless_interrupted(e.exit_code, as_json))
    except SystemExit as e:
        sys.exit(_unless_interrupted(e.code, as_json))
    except click.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        fail(f"{e.format_message()}{hint}", EXIT_USAGE)
    except click.ClickException as e:
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
        fail(str(e), EXIT_FAILURE, e)
    except Exception as e:  # an fstool bug: one line, traceback on request
        if os.environ.get("FSTOOL_DEBUG"):
            raise
        fail(f"internal error: {type(e).__name__}: {e} (set FSTOOL_DEBUG=1 for a traceback)",
             EXIT_INTERNAL)


if __name__ == "__main__":
    main()
