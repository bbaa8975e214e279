"""One facade for terminal output: rich on a terminal, plain when piped."""
from __future__ import annotations


import json

import click

from ..ops.names import json_exact
from .plain import emit_json, is_tty, output_style, warn  # noqa: F401 - the commands take them from here
from .units import human_bytes  # noqa: F401 - the commands take it from here


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
    click.echo(json.dumps(json_exact(rec), ensure_ascii=False), err=True)


json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def console():
    """Rich's console: the terminal's width on a terminal; elsewhere (a
    table asked for with --format table into a pipe or file) as wide as
    the table needs, not 80 columns."""
    from rich.console import Console  # lazy: start-up (rich only for tables and bars)
    return Console(highlight=False, soft_wrap=True, width=None if is_tty() else 1000)


def print_fields(fields, as_json: bool) -> None:
    """Print Field objects as ``name = value`` lines (xfs_db style) or JSON."""
    if as_json:
        click.echo(json.dumps({f.name: f.value for f in fields}, ensure_ascii=False))
        return
    for f in fields:
        click.echo(f"{f.name} = {f.text}")


# -- tables and sizes: boxes on a terminal, plain aligned columns elsewhere ------

FORMATS = ("plain", "table", "json")
BAR = 10            # a table's bars, in characters

format_opt = click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default=None,
    help="table: boxed, with bars (the default on a terminal); plain: aligned columns "
         "without box characters (the default into a pipe or a file); json: as --json.")


def print_table(title: str | None, headers, rows, style: str, *, left=(), total=None,
                bars=None) -> None:
    """Rows of cells under ``headers``: a rich table with ``style`` "table",
    plain aligned columns (two spaces apart, numbers to the right, no box
    characters, never wrapped) otherwise.  Columns whose index is in
    ``left`` are aligned left.  ``total`` is a last row (bold in a table).
    ``bars`` is (label, one fraction per row and for the total): a last
    column of that label holding the percentage, with a bar before it in a
    table."""
    rows = [[str(c) for c in r] for r in rows]
    every = rows + ([[str(c) for c in total]] if total is not None else [])
    headers = list(headers)
    if bars is not None:
        label, fracs = bars
        headers.append(label)
        for r, f in zip(every, fracs):
            pct = f"{f * 100:.1f}%"
            r.append(f"{bar(f, BAR):<{BAR}} {pct:>6}" if style == "table" else pct)
        if style == "table":
            left = (*left, len(headers) - 1)
    if style == "table":
        from rich import box  # lazy: start-up (rich only for tables and bars)
        from rich.table import Table  # lazy: start-up (rich only for tables and bars)
        t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for i, h in enumerate(headers):
            # numbers, sizes and bars never wrap
            t.add_column(h, justify="left" if i in left else "right",
                         no_wrap=i not in left or (bars is not None and i == len(headers) - 1))
        for k, r in enumerate(every):
            t.add_row(*r, style="bold" if total is not None and k == len(rows) else None)
        console().print(t)
        return
    table = [headers] + every
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    if title:
        click.echo(title)
    for r in table:
        cells = [c.ljust(w) if i in left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        click.echo("  ".join(cells).rstrip())


bytes_opt = click.option(
    "-b", "--bytes", "raw", is_flag=True,
    help="Sizes as raw numbers (bytes, blocks) instead of KiB/MiB/GiB.")


def size_text(nbytes: int, raw: bool = False) -> str:
    """A size for people: ``512 B``, ``2.9 MiB``... (IEC units, one
    decimal below 10 of a unit, as df -h rounds); the number of bytes
    itself with ``raw``."""
    if raw:
        return str(nbytes)
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            break
        n /= 1024
    if unit == "B":
        return f"{nbytes} B"
    return f"{n:.1f} {unit}" if n < 10 else f"{n:.0f} {unit}"


def blocks_text(blocks: int, blocksize: int, raw: bool = False) -> str:
    """A count of filesystem blocks for people (their size), or the count
    itself with ``raw``."""
    return str(blocks) if raw else size_text(blocks * blocksize)


def bar(fraction: float, width: int = 30) -> str:
    """A horizontal bar of ``fraction`` (0..1) in block characters."""
    fraction = max(0.0, min(1.0, fraction))
    eighths = int(round(fraction * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
