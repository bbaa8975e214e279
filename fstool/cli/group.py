"""The click group of every command (``fstool --help`` lists them from
:data:`fstool.cli.commands.COMMANDS`, each command's module imported only when
it runs)."""
from __future__ import annotations

import importlib

import click

from .. import __version__
from .commands import COMMANDS


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
