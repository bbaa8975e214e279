"""One image, every name: each writer and log command refuses (exit 7) an
image that a live fstool or the kernel holds, whatever name reaches it, and
leaves it unchanged byte for byte.

The matrix is every writer and log command x every alias of the held image
(its path, a hard link, a symlink, a bind mount of its directory, a /proc
link to a descriptor of it, a loop device over it) x every holder (an fstool
mount read-write, another fstool writer holding the image through a loop
device, the kernel's loop mount).  One small image serves every case and
each holder is set up once; the commands run in this process through the
program's entry point (mount, which daemonises, as a program)."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fixtures import images
from fixtures.fusemount import FuseMounted, env, fuse_skip_reason, is_mounted

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("losetup") is None,
    reason="needs root and losetup (loop devices and bind mounts name the image)")

REFUSED = 7
# what a refusal names: the holder, as the guards see it
HOLDS = ("another fstool", "mounted at", "attached to", "in use")


def _sha(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _main(args) -> tuple[int, str]:
    """``fstool ARGS`` in this process: (exit status, standard error)."""
    from fstool.cli.main import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main([str(a) for a in args])
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
    return status, err.getvalue()


def _mount_cmd(image, mnt) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "fstool", "mount", str(image), str(mnt)],
                       capture_output=True, text=True, env=env(), timeout=60)
    if r.returncode == 0 or is_mounted(mnt):            # the guard failed: let it go
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    return r.returncode, r.stderr


@contextlib.contextmanager
def _loop(image, *opts):
    dev = subprocess.run(["losetup", "-f", "--show", *opts, str(image)], capture_output=True,
                         text=True, check=True).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


class World:
    """The image, the names it goes by, and what the commands need."""

    def __init__(self, root: Path):
        self.root = root
        store = root / "store"
        store.mkdir()
        self.img = store / "Z.img"
        host = root / "host"
        (host / "src").mkdir(parents=True)
        (host / "src" / "file").write_bytes(b"populate me")
        (host / "put.txt").write_bytes(b"put me")
        (host / "junk.undo").write_bytes(b"not an undo file")
        self.host = host
        self.mnt = root / "mnt2"
        self.mnt.mkdir()
        for args in (("mkfs", "-q", self.img, "--size", "32m"), ("mkdir", self.img, "/d"),
                     ("put", self.img, host / "put.txt", "/f")):
            status, err = _main(args)
            assert status == 0, err
        os.link(self.img, root / "hard.img")
        os.symlink(self.img, root / "sym.img")
        self.bind = root / "bind"
        self.bind.mkdir()
        subprocess.run(["mount", "--bind", str(store), str(self.bind)], check=True)
        self.fd = os.open(self.img, os.O_RDONLY)
        self.aliases = {"path": self.img, "hard link": root / "hard.img",
                        "symlink": root / "sym.img", "bind mount": self.bind / "Z.img",
                        "/proc fd link": f"/proc/{os.getpid()}/fd/{self.fd}"}

    def close(self):
        os.close(self.fd)
        subprocess.run(["umount", str(self.bind)], capture_output=True)

    def commands(self, image) -> dict:
        h = self.host
        cmds = {
            "mkfs -f": ["mkfs", "-q", "-f", image],
            "populate": ["populate", image, h / "src"],
            "mkdir": ["mkdir", image, "/new"],
            "put": ["put", image, h / "put.txt", "/put"],
            "rm": ["rm", image, "/f"],
            "ln": ["ln", image, "/f", "/hard"],
            "mv": ["mv", image, "/d", "/moved"],
            "setattr": ["setattr", "--mode", "600", image, "/f"],
            "repair": ["repair", image],
            "undo": ["undo", image, h / "junk.undo"],
            "log zero": ["log", "zero", "--force", image],
            "log replay": ["log", "replay", image],
        }
        if fuse_skip_reason() is None:
            cmds["mount"] = None
        return cmds

    def not_refused(self, names: dict) -> list:
        """Run every command through every name in ``names``; what was not
        refused with exit 7 and one line naming the holder, or changed the
        image."""
        before = _sha(self.img)
        bad = []
        for alias, image in names.items():
            for cmd, args in self.commands(image).items():
                status, err = _mount_cmd(image, self.mnt) if args is None else _main(args)
                after = _sha(self.img)
                lines = err.strip().splitlines()
                if status != REFUSED or len(lines) != 1 or \
                        not any(w in lines[0] for w in HOLDS) or after != before:
                    bad.append(f"{cmd} through the {alias} ({image}): exit {status}, "
                               f"{'changed' if after != before else 'unchanged'}: "
                               f"{err.strip()[:300]}")
                    before = after
        return bad


def _assert_none(bad: list) -> None:
    assert not bad, f"{len(bad)} cases not refused:\n" + "\n".join(bad)


@pytest.fixture(scope="module")
def world():
    root = Path(tempfile.mkdtemp(prefix="fstool-guard-"))
    w = World(root)
    try:
        yield w
    finally:
        w.close()
        shutil.rmtree(root, ignore_errors=True)


def test_an_fstool_mount_is_held_under_every_name(world):
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    with FuseMounted(world.img) as mnt:
        # a mount that has written: the change checkpointed (fsync) before
        # the image is compared byte for byte
        fd = os.open(mnt / "written", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"through the mount")
        os.fsync(fd)
        os.close(fd)
        bad = world.not_refused(world.aliases)
        # a loop device attached for the case (while no other name is under
        # test: an attached loop device refuses every path by itself)
        with _loop(world.img) as dev:
            bad += world.not_refused({"loop device": dev})
    _assert_none(bad)


HOLD = ("import sys\n"
        "from fstool.ns.writer import Writer\n"
        "w = Writer(sys.argv[1])\n"
        "print('holding', flush=True)\n"
        "sys.stdin.read()\n"
        "w.close()\n")


def test_an_fstool_writer_through_a_loop_device_is_held_under_every_name(world):
    with _loop(world.img) as held:
        p = subprocess.Popen([sys.executable, "-c", HOLD, held], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env())
        try:
            assert p.stdout.readline().strip() == "holding", p.stderr.read()
            # the names of the file are refused as attached to the holder's
            # loop device; its own device and another one over the file, as
            # busy and as attached
            bad = world.not_refused(world.aliases)
            with _loop(world.img) as dev:
                bad += world.not_refused({"holder's loop device": held, "loop device": dev})
        finally:
            p.stdin.close()
            p.wait(60)
    _assert_none(bad)
    assert p.returncode == 0, p.stderr.read()


def test_the_kernel_mount_is_held_under_every_name(world):
    if not images.loop_available():
        pytest.skip("needs a kernel loop mount of XFS")
    # mounted read-only, so that the kernel itself writes nothing while the
    # image is compared byte for byte; the guards see a mount either way
    with images.Mounted(world.img, readonly=True):
        kernel = subprocess.run(["losetup", "-j", str(world.img), "-O", "NAME", "-n"],
                                capture_output=True, text=True, check=True).stdout.split()
        assert len(kernel) == 1
        bad = world.not_refused(world.aliases)
        with _loop(world.img) as dev:
            bad += world.not_refused({"kernel's loop device": kernel[0], "loop device": dev})
    _assert_none(bad)
