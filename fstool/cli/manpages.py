"""Manual pages generated from the click definitions: ``fstool(1)`` and one
``fstool-COMMAND(1)`` per command (a group's subcommands are sections of
its page), written to man/ by ``python -m fstool.cli.manpages`` and
installed with the package (setup.py's data_files: share/man/man1).  A test
keeps man/ equal to what the definitions give, so the pages cannot drift
from ``--help``."""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

from .main import COMMANDS, cli

MAN_DIR = Path(__file__).resolve().parent.parent.parent / "man"
SECTION = "1"
SOURCE = "fstool"
MANUAL = "fstool manual"


def _esc(text: str) -> str:
    """``text`` safe in roff: backslashes and hyphens escaped, no line
    starting with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + ln if ln[:1] in (".", "'") else ln for ln in text.split("\n"))


def _paragraphs(help_text: str) -> list[str]:
    """Click's help text as roff paragraphs: blank-line separated and
    rewrapped, except those click keeps as they are (a ``\\b`` line first),
    which stay lines (.nf)."""
    out = []
    for para in inspect.cleandoc(help_text or "").split("\n\n"):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            out.append("\n".join([".nf"] + [_esc(ln) for ln in lines[1:]] + [".fi"]))
            continue
        para = " ".join(ln.strip() for ln in lines if ln.strip())
        if para:
            out.append(_esc(para))
    return out


def _context(cmd: click.Command, path: str) -> click.Context:
    """A context for ``cmd`` under fstool's (its -h/--help spelling)."""
    top = click.Context(cli, info_name="fstool", **cli.context_settings)
    return top if cmd is cli else click.Context(cmd, info_name=path, parent=top)


def _usage(cmd: click.Command, path: str) -> str:
    ctx = _context(cmd, path)
    pieces = cmd.collect_usage_pieces(ctx)
    return f"{path} {' '.join(pieces)}".strip()


def _options(cmd: click.Command, path: str) -> list[str]:
    ctx = _context(cmd, path)
    lines = []
    for p in cmd.get_params(ctx):
        # options only: the arguments are in the synopsis (click 8.5 and
        # later give arguments a help record too, 8.4 and before none)
        if not isinstance(p, click.Option):
            continue
        rec = p.get_help_record(ctx)
        if rec is None:
            continue
        names, text = rec
        lines += [".TP", f"\\fB{_esc(names)}\\fR", _esc(text or "")]
    return lines


def _command_body(cmd: click.Command, path: str) -> list[str]:
    lines = [".SH SYNOPSIS", f"\\fB{_esc(_usage(cmd, path))}\\fR", ".SH DESCRIPTION"]
    for para in _paragraphs(cmd.help or cmd.short_help or ""):
        lines += [para, ".PP"]
    if lines[-1] == ".PP":
        lines.pop()
    opts = _options(cmd, path)
    if opts:
        lines += [".SH OPTIONS"] + opts
    return lines


def _header(name: str, summary: str) -> list[str]:
    title = _esc(name.upper())
    return [f'.TH {title} {SECTION} "" "{SOURCE}" "{MANUAL}"',
            ".SH NAME", f"{_esc(name)} \\- {_esc(summary)}"]


_FOOTER = [".SH EXIT STATUS",
           "0 success; 1 the command failed; 2 bad arguments; 3 the image cannot be "
           "opened or read; 4 no XFS filesystem; 5 a format or feature fstool does not "
           "support; 6 the image is corrupt; 7 refused (busy, dirty log, needs repair); "
           "70 internal error; 130 interrupted.  \\fBfstool check\\fR keeps "
           "\\fBxfs_repair\\fR's statuses and \\fBrepair\\fR has its own: see its page.",
           ".SH SEE ALSO", "\\fBfstool\\fR(1), \\fBxfs_repair\\fR(8), \\fBxfs_db\\fR(8), "
           "\\fBmkfs.xfs\\fR(8)"]


def pages() -> dict[str, str]:
    """File name -> roff text of every page."""
    ctx = click.Context(cli, info_name="fstool")
    out = {}
    top = _header("fstool", "build, inspect, check and repair XFS v5 images offline")
    top += _command_body(cli, "fstool")
    top += [".SH COMMANDS"]
    for name in sorted(COMMANDS):
        top += [".TP", f"\\fBfstool {_esc(name)}\\fR", _esc(COMMANDS[name][2]),
                f"See \\fBfstool\\-{_esc(name)}\\fR({SECTION})."]
    top += [".SH SHELL COMPLETION",
            "\\fBfstool completion bash|zsh|fish\\fR prints the script that completes "
            "fstool's commands and options in that shell; see \\fBfstool\\-completion\\fR(1)."]
    out[f"fstool.{SECTION}"] = "\n".join(top + _FOOTER) + "\n"
    for name in sorted(COMMANDS):
        cmd = cli.get_command(ctx, name)
        path = f"fstool {name}"
        lines = _header(f"fstool-{name}", COMMANDS[name][2]) + _command_body(cmd, path)
        if isinstance(cmd, click.Group):
            sub_ctx = click.Context(cmd, info_name=path, parent=ctx)
            for sub in cmd.list_commands(sub_ctx):
                sc = cmd.get_command(sub_ctx, sub)
                body = _command_body(sc, f"{path} {sub}")
                # the subcommand's sections one level down
                lines += [f".SH {_esc(path.upper())} {_esc(sub.upper())}"]
                lines += [".SS" + ln[3:] if ln.startswith(".SH") else ln for ln in body]
        out[f"fstool-{name}.{SECTION}"] = "\n".join(lines + _FOOTER) + "\n"
    return out


def write(directory: Path = MAN_DIR) -> list[Path]:
    """Write every page into ``directory`` (removing pages no command has)."""
    directory.mkdir(parents=True, exist_ok=True)
    want = pages()
    for old in directory.glob(f"*.{SECTION}"):
        if old.name not in want:
            old.unlink()
    written = []
    for name, text in want.items():
        p = directory / name
        p.write_text(text)
        written.append(p)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else MAN_DIR):
        print(path)
