"""One facade for terminal output: rich on a terminal, plain when piped."""
from __future__ import annotations

import json
import sys

import click
from rich.console import Console


def err(msg: str) -> None:
    click.echo(f"fstool: error: {msg}", err=True)


def error_line(msg: str, as_json: bool, status: int, errno: int | None = None) -> None:
    """The one line an error ends a command with: ``fstool: error: ...``, or
    with --json a JSON object (error, exit_status, errno)."""
    if not as_json:
        err(msg)
        return
    rec = {"error": msg, "exit_status": status}
    if errno is not None:
        rec["errno"] = errno
    click.echo(json.dumps(rec, ensure_ascii=False), err=True)


def warn(msg: str) -> None:
    click.echo(f"fstool: warning: {msg}", err=True)


def console():
    return Console(highlight=False, soft_wrap=True)


def is_tty() -> bool:
    return sys.stdout.isatty()


def print_fields(fields, as_json: bool) -> None:
    """Print Field objects as ``name = value`` lines (xfs_db style) or JSON."""
    if as_json:
        click.echo(json.dumps({f.name: f.value for f in fields}, ensure_ascii=False))
        return
    for f in fields:
        click.echo(f"{f.name} = {f.text}")


def bar(fraction: float, width: int = 30) -> str:
    """A horizontal bar of ``fraction`` (0..1) in block characters."""
    fraction = max(0.0, min(1.0, fraction))
    eighths = int(round(fraction * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
