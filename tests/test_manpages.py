"""Manual pages generated from the click definitions (man/, installed into
share/man/man1) stay equal to what the definitions give, name every option
of every command, render without a warning; `fstool completion` prints a
working completion script for bash, zsh and fish."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from fstool.cli import manpages
from fstool.cli.main import COMMANDS, cli

REPO = Path(__file__).resolve().parent.parent


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fstool", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_man_pages_are_current():
    """man/ is what `python -m fstool.cli.manpages` writes from today's
    definitions (regenerate it when a command or option changes)."""
    want = manpages.pages()
    have = {p.name: p.read_text() for p in (REPO / "man").glob("*.1")}
    assert set(have) == set(want)
    for name, text in want.items():
        assert have[name] == text, f"man/{name} is stale: python -m fstool.cli.manpages"


def test_every_command_and_option_has_its_page():
    pages = manpages.pages()
    assert "fstool.1" in pages
    ctx = click.Context(cli, info_name="fstool", **cli.context_settings)
    for name in COMMANDS:
        page = pages[f"fstool-{name}.1"]
        cmd = cli.get_command(ctx, name)
        cmds = [cmd] if not isinstance(cmd, click.Group) else \
            [cmd.get_command(ctx, s) for s in cmd.list_commands(ctx)]
        for c in cmds:
            for p in c.params:
                for opt in getattr(p, "opts", []):
                    if opt.startswith("-"):
                        assert opt.replace("-", "\\-") in page, (name, opt)
        assert f"fstool\\-{name}" in pages["fstool.1"], name


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff not installed")
def test_pages_render_without_warnings(tmp_path):
    for name, text in manpages.pages().items():
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=text,
                           capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), (name, r.stderr)


@pytest.mark.skipif(shutil.which("man") is None, reason="man not installed")
def test_man_finds_the_installed_pages(tmp_path):
    """setup.py installs man/ into share/man/man1: `man fstool` finds it
    there."""
    r = subprocess.run([sys.executable, "setup.py", "-q", "install_data",
                        f"--install-dir={tmp_path}"], cwd=REPO, capture_output=True,
                       text=True, env={**os.environ, "FSTOOL_NO_NATIVE": "1"})
    assert r.returncode == 0, r.stderr
    installed = tmp_path / "share" / "man" / "man1"
    assert {p.name for p in installed.iterdir()} == set(manpages.pages())
    shown = subprocess.run(["man", "-P", "cat", "fstool-check"], capture_output=True,
                           text=True, env={**os.environ, "MANPATH": str(tmp_path / "share/man"),
                                           "MANWIDTH": "100"})
    assert shown.returncode == 0, shown.stderr
    assert "fstool check" in shown.stdout and "--format" in shown.stdout.replace("‐", "-")


def test_completion_scripts():
    for shell, marker in (("bash", "complete -o nosort -F"), ("zsh", "compdef"),
                          ("fish", "complete --no-files --command fstool")):
        r = run("completion", shell)
        assert r.returncode == 0, r.stderr
        assert "_FSTOOL_COMPLETE" in r.stdout and marker in r.stdout, (shell, r.stdout[:300])
    assert run("completion", "tcsh").returncode == 2
    # what the bash script asks for: the commands that start with "ag"
    r = run(env={"_FSTOOL_COMPLETE": "bash_complete", "COMP_WORDS": "fstool ag",
                 "COMP_CWORD": "1"})
    names = {ln.split(",", 1)[1] for ln in r.stdout.splitlines()}
    assert names == {"agf", "agfl", "agi", "agstats"}, r.stdout
    r = run(env={"_FSTOOL_COMPLETE": "bash_complete", "COMP_WORDS": "fstool check --f",
                 "COMP_CWORD": "2"})
    assert "plain,--format" in r.stdout, r.stdout
