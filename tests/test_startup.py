"""Start-up: the entry loads only what the command that runs needs.

Each case runs ``python -v -m fstool ...`` (a real process, as a user runs
it) and reads the modules it imported from the interpreter's verbose
report (-X importtime misses what importlib.import_module loads, as the
command group does): rich only where a table, console or bar is made, no other command's
module, and check without mkfs, its writers and ctypes.  Quick: one 64 MiB image.
"""
import os
import subprocess
import sys

import pytest

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
        "fstool.cli.options", "fstool.cli.commands", "fstool.cli.group", "fstool.cli.quick"}


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
        assert _commands(mods) == {"fstool.cli.check"}
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
    for args in (["--json", dump, tmp_path / "d.img"], ["--help"],
                 ["--", dump, tmp_path / "e.img"], [tmp_path / "missing.md", tmp_path / "d.img"]):
        r = subprocess.run([sys.executable, "-v", "-m", "fstool", "mdrestore", *map(str, args)],
                           cwd=ROOT, capture_output=True, text=True)
        assert "import 'click'" in r.stderr, args
    r = subprocess.run([sys.executable, "-m", "fstool", "mdrestore", tmp_path / "missing.md",
                        tmp_path / "d.img"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr
