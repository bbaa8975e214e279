"""Start-up: the entry loads only what the command that runs needs.

Each case runs ``python -v -m fstool ...`` (a real process, as a user runs
it) and reads the modules it imported from the interpreter's verbose
report (-X importtime misses what importlib.import_module loads, as the
command group does): rich only where a table, console or bar is made, no other command's
module, and check without mkfs, its writers and ctypes.  Quick: one 64 MiB image.
"""
import os
import shutil
import subprocess
import sys

import click
import pytest

from fixtures import pptr
from fstool.cli import quick
from fstool.cli.commands import COMMANDS
from fstool.cli.quickspec import SPECS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def imported(*args) -> set:
    """The modules ``fstool ARGS`` imports (the interpreter's verbose
    report: one ``import 'NAME' # LOADER`` line a module)."""
    r = subprocess.run([sys.executable, "-v", "-m", "fstool", *map(str, args)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    mods = {line.split("'")[1] for line in r.stderr.splitlines()
            if line.startswith("import '")}
    assert "fstool.cli.main" in mods          # the report was read
    return mods


def _rich(mods) -> set:
    return {m for m in mods if m == "rich" or m.startswith("rich.")}


def _commands(mods) -> set:
    return {m for m in mods if m.startswith("fstool.cli.")} - {
        "fstool.cli", "fstool.cli.main", "fstool.cli.console", "fstool.cli.exits",
        "fstool.cli.options", "fstool.cli.commands", "fstool.cli.group", "fstool.cli.quick",
        "fstool.cli.quickspec", "fstool.cli.plain", "fstool.cli.path_run", "fstool.cli.units"}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    img = tmp_path_factory.mktemp("startup") / "s.img"
    r = subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", "--size", "64m", img],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return img


def test_help_loads_no_command_and_no_rich():
    mods = imported("--help")
    assert _commands(mods) == set()
    assert _rich(mods) == set()


def test_check_loads_only_check(image):
    for args in (["check", image], ["check", "--json", image]):
        mods = imported(*args)
        assert _commands(mods) == {"fstool.cli.check_run"}
        # and a plain check runs without click (cli/quick.py)
        assert not _click_loaded(mods)
        # output into a pipe is plain text or JSON: no rich
        assert _rich(mods) == set()
        # check reads; it needs none of mkfs's writers
        assert not {"fstool.ops.mkfs", "fstool.fs.btree_write", "fstool.ns.attrbuild"} & mods
        # nor ctypes, which only writes use (sync_file_range, fallocate)
        assert "ctypes" not in mods


@pytest.mark.parametrize("args", [["info", "--json"], ["ls"], ["ls", "--json"],
                                  ["agstats", "--format", "plain"]])
def test_plain_and_json_output_load_no_rich(image, args):
    mods = imported(*args[:1], image, *args[1:])
    assert _rich(mods) == set()


def test_a_table_still_loads_rich(image):
    """The other side: --format table draws with rich."""
    mods = imported("agstats", "--format", "table", image)
    assert "rich.table" in mods


def test_plain_mdrestore_loads_no_click(image, tmp_path):
    """``fstool mdrestore DUMP IMAGE`` restores without click (cli/quick.py:
    loading click costs more CPU than the restore of a 140 MiB dump), and
    says what the command run through click says; --json, --help and a
    DUMP that is no file still go through click."""
    dump = tmp_path / "s.md"
    r = subprocess.run([sys.executable, "-m", "fstool", "metadump", image, dump], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    mods = imported("mdrestore", dump, tmp_path / "a.img")
    assert not {m for m in mods if m == "click" or m.startswith("click.")}
    assert _commands(mods) == set() and "fstool.cli.quick" in mods
    # the same through click: "--" (which only click reads) before the paths
    plain, clicked = (subprocess.run([sys.executable, "-m", "fstool", "mdrestore", *extra, dump,
                                      tmp_path / name], cwd=ROOT, capture_output=True,
                                     text=True) for extra, name in (([], "b.img"),
                                                                    (["--"], "c.img")))
    assert plain.returncode == clicked.returncode == 0, plain.stderr + clicked.stderr
    assert plain.stdout.replace("b.img", "c.img") == clicked.stdout != ""
    assert open(tmp_path / "a.img", "rb").read() == open(tmp_path / "b.img", "rb").read() \
        == open(tmp_path / "c.img", "rb").read()
    # --json too, the same through both
    plain, clicked = (subprocess.run([sys.executable, "-m", "fstool", "mdrestore", "--json",
                                      *extra, dump, tmp_path / "j.img"], cwd=ROOT,
                                     capture_output=True, text=True) for extra in ([], ["--"]))
    assert plain.returncode == clicked.returncode == 0 and plain.stdout == clicked.stdout != ""
    for args in (["--help"], ["--", dump, tmp_path / "e.img"],
                 [tmp_path / "missing.md", tmp_path / "d.img"]):
        r = subprocess.run([sys.executable, "-v", "-m", "fstool", "mdrestore", *map(str, args)],
                           cwd=ROOT, capture_output=True, text=True)
        assert "import 'click'" in r.stderr, args
    r = subprocess.run([sys.executable, "-m", "fstool", "mdrestore", tmp_path / "missing.md",
                        tmp_path / "d.img"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr


def _click_loaded(mods) -> bool:
    return any(m == "click" or m.startswith("click.") for m in mods)


@pytest.fixture(scope="module")
def pimg():
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    return pptr.pptr_image()


def _fstool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)


def test_path_runs_without_click(pimg):
    """``fstool path`` (--all, one or several INOs, --json) runs without
    click (cli/quick.py) and prints, to both streams, and exits as the
    command run through click ("--", which only click reads, before
    IMAGE); what quick.py does not read goes to click."""
    ino = max(pptr.load_paths(pimg))
    cases = [["--all"], ["--all", "--json"], [ino], [128, ino], ["--json", ino],
             [1 << 40]]                                 # an inode that cannot be read
    for opts in cases:
        flags = [a for a in opts if isinstance(a, str)]
        inos = [a for a in opts if not isinstance(a, str)]
        mods = imported("path", *flags, pimg, *inos) if opts != [1 << 40] else None
        if mods is not None:
            assert not _click_loaded(mods), opts
            assert _commands(mods) == set() and "fstool.cli.quick" in mods
        plain = _fstool("path", *flags, pimg, *inos)
        clicked = _fstool("path", *flags, "--", pimg, *inos)
        assert (plain.returncode, plain.stdout, plain.stderr) == \
            (clicked.returncode, clicked.stdout, clicked.stderr), opts
        assert plain.stdout or plain.returncode == 1, opts
    for status, args in ((0, ["--help"]), (2, [pimg]), (2, ["--all", pimg, ino]),
                         (0, ["--all", "--all", pimg]), (2, [pimg, "x"]),
                         (2, ["--offset", "-1", pimg, ino]),
                         (2, ["--partition", "1", "--offset", "0", pimg, ino])):
        r = subprocess.run([sys.executable, "-v", "-m", "fstool", "path", *map(str, args)],
                           cwd=ROOT, capture_output=True, text=True)
        assert "import 'click'" in r.stderr, args
        assert r.returncode == status, (args, r.stderr[-500:])


def test_check_runs_without_click(image, tmp_path):
    """``fstool check`` (plain, --json, -j 2) runs without click (cli/quick.py)
    and prints, to both streams, and exits as the command run through
    click ("--", which only click reads, before IMAGE), on a clean image
    and a damaged one (the AGI's sector overwritten); --format, which
    quick.py leaves to click, goes through click."""
    bad = tmp_path / "bad.img"
    shutil.copyfile(image, bad)
    with open(bad, "r+b") as f:
        f.seek(1024)
        f.write(b"\xa5" * 64)
    for img in (image, bad):
        for opts in ([], ["--json"], ["-j", "2"]):
            mods = imported("check", *opts, img) if img == image else None
            if mods is not None:
                assert not _click_loaded(mods), opts
                assert "fstool.cli.quick" in mods and "fstool.cli.check" not in mods
            plain = _fstool("check", *opts, img)
            clicked = _fstool("check", *opts, "--", img)
            assert (plain.returncode, plain.stdout, plain.stderr) == \
                (clicked.returncode, clicked.stdout, clicked.stderr), (img, opts)
            assert plain.returncode == (0 if img == image else 1), plain.stderr
    r = subprocess.run([sys.executable, "-v", "-m", "fstool", "check", "--format", "plain",
                        str(image)], cwd=ROOT, capture_output=True, text=True)
    assert "import 'click'" in r.stderr and r.returncode == 0


def test_quick_spec_is_the_click_commands():
    """cli/quickspec.py is what ``python3 -m fstool.cli.quick`` writes from
    the click commands today (an option added to a click command and not
    to the spec fails here), and each quick runner takes exactly the
    parameters the click command gives its callback."""
    import inspect
    import importlib
    with open(quick.SPEC_FILE) as f:
        assert f.read() == quick.generated(), "run: python3 -m fstool.cli.quick"
    assert set(SPECS) == set(quick.RUNNERS)
    for name, runner in quick.RUNNERS.items():
        assert set(inspect.signature(runner).parameters) == {p[0] for p in SPECS[name]}
    # what a new option does to the spec: it no longer matches
    module, attr, _ = COMMANDS["path"]
    cmd = getattr(importlib.import_module(f"fstool.cli.{module}"), attr)
    grown = click.Command(cmd.name, params=[*cmd.params, click.Option(["--depth"], type=int)],
                          callback=cmd.callback)
    assert quick.spec_of(grown) != SPECS["path"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_quick_parse_agrees_with_click(name, tmp_path):
    """Every command line quick.py reads, it reads as click does: the same
    values for the command's callback (click's own parse, make_context);
    the rest it leaves to click (None)."""
    import importlib
    module, attr, _ = COMMANDS[name]
    cmd = getattr(importlib.import_module(f"fstool.cli.{module}"), attr)
    f = tmp_path / "f"
    f.write_bytes(b"x")
    d = tmp_path / "d"
    d.mkdir()
    words = [str(f), str(d), str(tmp_path / "new"), "5", "0", "-1", "x", "1_0", "--all",
             "--json", "--replay-in-memory", "--offset", "--offset=3", "--offset=-2", "--partition", "2",
             "--logdev", "-l", "--log-image", f"--log-image={tmp_path / 'l'}", "--", "-h",
             "-j", "--jobs", "--jobs=2", "--format", "--format=plain"]
    import random
    rng = random.Random(37)
    read = 0
    for _ in range(20000):
        args = [rng.choice(words) for _ in range(rng.randint(0, 5))]
        kw = quick.parse(SPECS[name], args)
        if kw is None:
            continue
        read += 1
        assert quick.click_params(cmd, args) == kw, args
    assert read > 20
