"""Scripting: every command that prints takes --json and prints JSON; each
situation (missing image, not XFS, unsupported feature, corrupt, refused,
bad arguments) ends every command with the same documented exit status;
--clamp-mtime makes builds of a touched tree byte-identical."""
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest

import fstool_native
from fstool.cli import exits as X
from fstool.cli.main import COMMANDS
from fstool.format import constants as C
from fstool.format.structs import SB


def run(*args, env=None, input=None):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, env=env, input=input, timeout=300)


def with_json(args):
    """``args`` with --json after the command (and subcommand) name."""
    k = 2 if args[0] in ("btree", "log") else 1
    return [*args[:k], "--json", *args[k:]]


def _tree(root):
    (root / "d").mkdir(parents=True)
    (root / "f").write_bytes(b"hello\n" * 100)
    (root / "d" / "g").write_bytes(os.urandom(9000))
    os.symlink("f", root / "l")


@pytest.fixture
def image(tmp_path):
    img = tmp_path / "a.img"
    src = tmp_path / "src"
    _tree(src)
    r = run("mkfs", "-q", "--size", "64m", img, "--populate", src)
    assert r.returncode == 0, r.stderr
    return img


def _read_commands(img):
    """One invocation of each command that reads an image, by command name."""
    return {
        "info": ["info", img], "ls": ["ls", img, "/"], "stat": ["stat", img, "/f"],
        "cat": ["cat", img, "/f"], "get": ["get", img, "/d", img.parent / "got"],
        "sb": ["sb", img], "agf": ["agf", img, "1"], "agi": ["agi", img],
        "agfl": ["agfl", img], "inode": ["inode", img, "128"],
        "btree": ["btree", "dump", "--ag", "0", "--tree", "bnobt", img],
        "agstats": ["agstats", img], "freesp": ["freesp", img], "frag": ["frag", img],
        "check": ["check", img], "log": ["log", "info", img],
    }


def _write_commands(img, host):
    return {
        "populate": ["populate", img, host], "mkdir": ["mkdir", img, "/new"],
        "put": ["put", img, host / "f", "/put"], "ln": ["ln", "-s", img, "/f", "/lnk"],
        "setattr": ["setattr", "--mode", "600", img, "/f"], "rm": ["rm", img, "/f"],
        "mv": ["mv", img, "/new", "/moved"], "cp": ["cp", img, "/put", "/put-copy"],
    }


def test_every_command_prints_json(image, tmp_path):
    host = tmp_path / "src"
    cmds = _read_commands(image)
    cmds.update(_write_commands(image, host))
    cmds["mkfs"] = ["mkfs", "--size", "64m", tmp_path / "m.img", "--populate", host]
    cmds["repair"] = ["repair", image]
    # undo: of a repair of a copy
    copy, undo = tmp_path / "u.img", tmp_path / "u.undo"
    shutil.copy(image, copy)
    assert run("repair", "--rebuild", "finobt", "--undo-file", undo, copy).returncode == 0
    cmds["undo"] = ["undo", copy, undo]
    cmds["disk"] = ["disk", image]
    cmds["admin"] = ["admin", "-l", image]
    grown = tmp_path / "g.img"
    assert run("mkfs", "--size", "64m", grown).returncode == 0
    cmds["resize"] = ["resize", grown, "--size", "96m"]
    cmds["sparsify"] = ["sparsify", grown]
    dump = tmp_path / "a.md"
    assert run("metadump", image, dump).returncode == 0
    cmds["metadump"] = ["metadump", image, tmp_path / "b.md"]
    cmds["mdrestore"] = ["mdrestore", dump, tmp_path / "r.img"]
    # path: of a parent-pointer image (populate keeps them)
    pimg = tmp_path / "pp.img"
    assert run("mkfs", "-n", "parent=1", "--size", "64m", "--populate", host,
               pimg).returncode == 0
    cmds["path"] = ["path", "--all", pimg]
    # cat writes the file's bytes and mount serves the image until unmounted:
    # the commands without --json (mount's statuses: tests/test_mount_cli.py)
    # completion prints a shell script (tests/test_manpages.py); umount prints
    # nothing (tests/test_mount_names.py)
    assert set(cmds) | {"mount", "completion", "umount"} == set(COMMANDS)
    del cmds["cat"]
    for name, args in cmds.items():
        r = run(*with_json(args))
        assert r.returncode == 0, (name, r.stderr)
        lines = r.stdout.splitlines()
        assert lines or name == "check", name      # check: one line per finding
        parsed = [json.loads(line) for line in lines]
        if name in ("mkfs", "populate", "get", "mkdir", "put", "rm", "ln", "setattr",
                    "repair", "undo", "cp", "resize", "sparsify"):
            assert len(parsed) == 1 and isinstance(parsed[0], dict), name
    # what the summaries say
    r = run("mkfs", "--json", "--size", "64m", "-f", tmp_path / "m.img", "--populate", host)
    rec = json.loads(r.stdout)
    assert rec["geometry"]["agcount"] >= 1 and rec["populate"]["files"] == 2
    assert rec["populate"]["symlinks"] == 1 and rec["populate"]["bytes"] == 9600
    r = run("put", "--json", image, host / "d" / "g", "/g2")
    assert json.loads(r.stdout) == {"op": "put", "path": "/g2", "ino": json.loads(
        run("stat", "--json", image, "/g2").stdout)["ino"], "bytes": 9000}
    r = run("get", "--json", image, "/d", tmp_path / "got2")
    assert json.loads(r.stdout)["files"] == 1 and json.loads(r.stdout)["errors"] == []


def _patch_sb(img, fn):
    with open(img, "r+b") as f:
        sb = bytearray(f.read(512))
        fn(sb)
        crc = fstool_native.load().xfs_cksum(bytes(sb), C.XFS_SB_CRC_OFF)
        struct.pack_into("<I", sb, C.XFS_SB_CRC_OFF, crc)
        f.seek(0)
        f.write(sb)


def _situations(tmp_path, image):
    """Images (or paths) that put commands in each situation."""
    out = {"missing image": tmp_path / "missing.img"}
    notxfs = tmp_path / "zeros.img"
    with open(notxfs, "wb") as f:
        f.truncate(64 << 20)
    out["not XFS"] = notxfs
    unsup = tmp_path / "unsup.img"
    shutil.copy(image, unsup)
    off = SB.offset("sb_features_incompat")

    def unknown_feature(sb):
        v = struct.unpack_from(">I", sb, off)[0] | (1 << 30)
        struct.pack_into(">I", sb, off, v)
    _patch_sb(unsup, unknown_feature)
    out["unsupported"] = unsup
    corrupt = tmp_path / "corrupt.img"
    shutil.copy(image, corrupt)
    with open(corrupt, "r+b") as f:
        f.truncate(os.path.getsize(corrupt) // 2)
    out["corrupt"] = corrupt
    return out


STATUS = {"missing image": X.EXIT_NO_IMAGE, "not XFS": X.EXIT_NOT_XFS,
          "unsupported": X.EXIT_UNSUPPORTED, "corrupt": X.EXIT_CORRUPT}


def test_each_situation_has_one_exit_status(image, tmp_path):
    host = tmp_path / "src"
    for situation, img in _situations(tmp_path, image).items():
        cmds = _read_commands(img)
        del cmds["check"]                      # xfs_repair's statuses, below
        cmds.update(_write_commands(img, host))
        for k, (name, args) in enumerate(cmds.items()):
            # with --json the one error line is a JSON object with the status
            r = run(*(args if name == "cat" or k % 4 == 0 else with_json(args)))
            assert r.returncode == STATUS[situation], (situation, name, r.returncode, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1, (situation, name, r.stderr)
            assert "Traceback" not in r.stderr
            if "--json" in r.args:
                assert json.loads(r.stderr)["exit_status"] == STATUS[situation]
    # check keeps xfs_repair -n's statuses: 4 when it cannot run, 1 for damage
    sit = _situations(tmp_path, image)
    assert run("check", sit["missing image"]).returncode == 4
    r = run("check", "--json", sit["missing image"])
    assert json.loads(r.stderr) == {"error": f"{sit['missing image']}: no such file",
                                    "exit_status": 4, "errno": 2}
    assert run("check", sit["corrupt"]).returncode == 1
    assert run("check", sit["not XFS"]).returncode == 1


def test_refused_and_bad_arguments(image, tmp_path):
    host = tmp_path / "src"
    with open(image, "rb+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)          # as another fstool writing it holds it
        for name, args in _write_commands(image, host).items():
            r = run(*args)
            assert r.returncode == X.EXIT_REFUSED, (name, r.stderr)
            assert "another fstool" in r.stderr
    for args in (["ls", "--bogus", image], ["mkdir", image], ["mkfs", image, "-b", "sise=1"],
                 ["btree", "dump", image], ["populate", image, tmp_path / "nope"],
                 ["setattr", "--mode", "9z", image, "/f"], ["nosuchcommand"]):
        r = run(*args)
        assert r.returncode == X.EXIT_USAGE, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    # a path missing inside a good image is the general failure
    for args in (["ls", image, "/nope"], ["stat", image, "/nope"], ["rm", image, "/nope"]):
        assert run(*args).returncode == X.EXIT_FAILURE


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mkfs.xfs"),
                    reason="needs root and a kernel loop mount")
def test_mounted_image_is_refused(image):
    from fixtures import images
    if not images.loop_available():
        pytest.skip("no kernel loop mount of XFS")
    with images.Mounted(image, nouuid=True):
        for args in (["mkdir", image, "/x"], ["mkfs", "-q", "-f", image]):
            r = run(*args)
            assert r.returncode == X.EXIT_REFUSED, (args, r.stderr)


def test_exit_statuses_are_documented():
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "commands",
                            "exit-status.md")).read()
    for name in dir(X):
        if name.startswith("EXIT_"):
            assert f"| {getattr(X, name)} |" in doc, name


def _build(tmp_path, src, tag, clamp=True):
    img = tmp_path / f"{tag}.img"
    args = ["mkfs", "-q", "--size", "64m", "--uuid", "7d1c4c1e-0c5b-4d0e-9a43-16c1a3a8f0aa",
            img, "--populate", src]
    if clamp:
        args.append("--clamp-mtime")
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    r = run(*args, env=env)
    assert r.returncode == 0, r.stderr
    return img.read_bytes()


def test_clamp_mtime_gives_identical_images(tmp_path):
    src = tmp_path / "src"
    _tree(src)
    (src / "d" / "empty").touch()
    old = 1_600_000_000
    os.utime(src / "d" / "g", (old, old))       # older than the build time: kept
    first = _build(tmp_path, src, "one")
    time.sleep(0.02)
    for p in (src / "f", src / "d" / "empty", src / "d", src):
        os.utime(p)                               # touched between the builds
    os.utime(src / "l", follow_symlinks=False)
    second = _build(tmp_path, src, "two")
    assert first == second
    # without the clamp the touched times reach the image, so the bytes differ
    third = _build(tmp_path, src, "three", clamp=False)
    assert third != second
    import fstool
    with fstool.open_image(tmp_path / "two.img") as fs:
        assert fs.stat("/f").st_mtime_ns == 1_700_000_000 * 10**9
        assert fs.stat("/d/g").st_mtime_ns == old * 10**9
    # and the clamp needs a time to clamp to
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    r = run("populate", "--clamp-mtime", tmp_path / "two.img", src, env=env)
    assert r.returncode == X.EXIT_USAGE and "SOURCE_DATE_EPOCH" in r.stderr


def test_check_output_survives_its_quick_exit(image, tmp_path):
    """check ends with os._exit (cli.exits.finish): whatever it printed must
    still reach a pipe when stdout is block-buffered (PYTHONUNBUFFERED
    unset), with the exit status of its findings."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = run("check", image, env=env)
    assert (r.returncode, r.stdout.strip()) == (0, "no problems found"), r
    damaged = tmp_path / "damaged.img"
    shutil.copy(image, damaged)
    with open(damaged, "r+b") as f:                 # AGF 0's free block count
        f.seek(SB.offset("sb_sectsize"))
        (sectsize,) = struct.unpack(">H", f.read(2))
        f.seek(sectsize + 52)
        (n,) = struct.unpack(">I", f.read(4))
        f.seek(sectsize + 52)
        f.write(struct.pack(">I", n + 1))
    r = run("check", "--json", damaged, env=env)
    found = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert r.returncode == 1 and found, r
    assert all("code" in f for f in found)


def _documented_statuses() -> set:
    """The statuses exit-status.md's table lists."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "commands",
                            "exit-status.md")).read()
    return {int(line.split("|")[1]) for line in doc.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}


def _dirty_log_image(tmp_path):
    """An image whose log holds work not written back (a kernel shutdown),
    or None where the kernel cannot mount XFS."""
    from fixtures import images
    if not images.loop_available():
        return None
    img = tmp_path / "dirty.img"
    assert run("mkfs", "-q", "--size", "512m", img).returncode == 0
    images.shut_down_dirty(img)
    return img


def test_documented_statuses_per_command_family(image, tmp_path):
    """Walk exit-status.md's table: each status is provoked at least once
    in each family of commands it applies to (reading, writing, mkfs, undo;
    check and repair with the statuses the page gives them), so the page and
    the code cannot drift apart.  130 (Ctrl-C) and 70 (a bug) are not
    provoked here."""
    sit = _situations(tmp_path, image)
    dirty = _dirty_log_image(tmp_path)
    copy, undo = tmp_path / "u.img", tmp_path / "u.undo"
    shutil.copy(image, copy)
    assert run("repair", "--rebuild", "finobt", "--undo-file", undo, copy).returncode == 0
    changed = tmp_path / "changed.img"
    shutil.copy(copy, changed)
    assert run("mkdir", changed, "/changed").returncode == 0
    not_undo = tmp_path / "not.undo"
    not_undo.write_bytes(b"hello")
    locked = tmp_path / "locked.img"
    shutil.copy(image, locked)
    fresh = tmp_path / "fresh.img"
    shutil.copy(image, fresh)
    v4 = tmp_path / "v4.img"
    subprocess.run(["truncate", "-s", "300m", str(v4)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-m", "crc=0", str(v4)], check=True,
                   capture_output=True)
    corrupt_fs = tmp_path / "badcount.img"
    shutil.copy(image, corrupt_fs)
    subprocess.run(["xfs_db", "-x", "-f", "-c", "agf 0", "-c", "write -d freeblks 5",
                    str(corrupt_fs)], check=True, capture_output=True)
    general = {
        "read": {
            0: [["ls", image, "/"], ["inode", image, "/f"]],
            1: [["ls", image, "/nope"], ["stat", image, "/nope"]],
            2: [["inode", image, "99999999"], ["agf", image, "99"], ["ls", "--bogus", image],
                ["btree", "dump", "--ag", "7", "--tree", "bnobt", image]],
            3: [["info", sit["missing image"]]],
            4: [["info", sit["not XFS"]]],
            5: [["ls", sit["unsupported"], "/"]],
            6: [["ls", sit["corrupt"], "/"]],
        },
        "write": {
            0: [["mkdir", fresh, "/new"]],
            1: [["rm", image, "/nope"]],
            2: [["mkdir", image], ["put", image, tmp_path / "nothere", "/x"]],
            3: [["mkdir", sit["missing image"], "/x"]],
            4: [["mkdir", sit["not XFS"], "/x"]],
            5: [["mkdir", sit["unsupported"], "/x"]],
            6: [["mkdir", sit["corrupt"], "/x"]],
            7: [["mkdir", locked, "/x"], ["mkdir", corrupt_fs, "/x"]],
        },
        "mkfs": {
            0: [["mkfs", "-q", "--size", "64m", tmp_path / "m.img"]],
            1: [["mkfs", "-q", image]],
            2: [["mkfs", "-q", "-b", "size=3000", "--size", "64m", tmp_path / "n.img"],
                ["mkfs", "-q", "--size", "1m", tmp_path / "n.img"]],
            7: [["mkfs", "-q", "-f", locked]],
        },
        "undo": {
            2: [["undo", copy, tmp_path / "missing.undo"], ["undo", copy, not_undo]],
            3: [["undo", sit["missing image"], undo]],
            7: [["undo", changed, undo], ["undo", locked, undo]],
            0: [["undo", copy, undo]],          # last: it puts copy back
        },
    }
    own = {
        # xfs_repair's statuses (exit-status.md): 2 needs a dirty log
        "check": {0: [["check", image]], 1: [["check", corrupt_fs]],
                  2: [["check", dirty]] if dirty else [], 4: [["check", sit["missing image"]]]},
        "repair": {0: [["repair", "-n", image]], 1: [["repair", "-n", corrupt_fs]],
                   2: [["repair", "--rebuild", "nosuchtree", image]],
                   4: [["repair", sit["missing image"]]],
                   5: [["repair", v4]], 7: [["repair", locked]]},
    }
    documented = _documented_statuses()
    assert documented >= {0, 1, 2, 3, 4, 5, 6, 7}
    # every general status is provoked in the families that read an image
    for fam in ("read", "write"):
        assert set(general[fam]) | {7 if fam == "read" else 0} >= documented - {70, 130, 143}, fam
    with open(locked, "rb+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)              # as another fstool holds it
        wrong = []
        for fam, table in {**general, **own}.items():
            for status, cases in table.items():
                for args in cases:
                    r = run(*args)
                    if r.returncode != status:
                        wrong.append((fam, status, r.returncode, [str(a) for a in args],
                                      r.stderr.strip()))
                    if status:
                        assert "Traceback" not in r.stderr, r.stderr
                        assert (r.stderr + r.stdout).strip(), args
    assert not wrong, "\n".join(map(str, wrong))
    if dirty is None:
        pytest.skip("check's status 2 (a dirty log) needs a kernel loop mount of XFS; the "
                    "rest passed")
