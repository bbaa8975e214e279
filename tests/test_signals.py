"""SIGINT and SIGTERM end every command with 130 and 143 (never a status
that means success), and a writer they reach leaves the image consistent:
the transaction under way committed or aborted whole, the log clean (its
last checkpoint and unmount record written), a repair written whole.

The signals are sent to the running process: from outside (a populate
waiting for more of a tar archive from a FIFO) and from inside at a chosen
write (the fault hook, ``FSTOOL_FAULT_SIGNAL``), so that one lands in the
middle of a checkpoint or of a repair's writes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fixtures import images

REPO = Path(__file__).resolve().parent.parent
needs_xfsprogs = pytest.mark.skipif(not images.xfsprogs_available(),
                                    reason="xfsprogs (xfs_repair, xfs_db) not installed")
STATUS = {"INT": 130, "TERM": 143}


def _signals_default() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults.  A
    command started with a signal ignored keeps ignoring it (as under
    nohup, or a shell's background job without job control), and so would
    every fstool these tests start from a test run launched that way."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def fstool(*args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=300,
                          preexec_fn=_signals_default, **kw)


def xfs_repair_n(img: Path) -> int:
    return subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True).returncode


def listing(img: Path) -> list:
    r = fstool("ls", "-R", img)
    assert r.returncode == 0, r.stderr
    return sorted(r.stdout.split())


def source_tree(root: Path, dirs: int = 20, files: int = 60) -> Path:
    for d in range(dirs):
        sub = root / f"d{d}"
        sub.mkdir(parents=True)
        for f in range(files):
            (sub / f"f{f}").write_bytes(bytes([d, f]) * (700 + 300 * f))
    return root


def writes_made(tmp_path: Path, *args) -> int:
    """How many writes ``fstool *args`` makes (run to the end)."""
    log = tmp_path / "writes.log"
    r = fstool(*args, env={"FSTOOL_WRITE_LOG": str(log)})
    assert r.returncode in (0, 1), r.stderr
    n = len(log.read_text().splitlines())
    log.unlink()
    return n


def interrupted(r: subprocess.CompletedProcess, sig: str) -> None:
    assert r.returncode == STATUS[sig], (r.returncode, r.stdout, r.stderr)
    assert r.stderr.strip().splitlines()[-1] == "fstool: error: interrupted", r.stderr
    assert "Traceback" not in r.stderr


@needs_xfsprogs
@pytest.mark.parametrize("sig", STATUS)
def test_populate_signalled_at_its_writes(tmp_path, sig):
    """A signal at the first write, inside a checkpoint and at the last:
    the status says interrupted, the image is clean (log included) and
    holds what the committed batches added, each whole."""
    src = source_tree(tmp_path / "src")
    img = tmp_path / "p.img"
    base = tmp_path / "base.img"
    assert fstool("mkfs", "-q", base, "--size", "64m").returncode == 0
    subprocess.run(["cp", "--sparse=always", base, img], check=True)
    total = writes_made(tmp_path, "populate", img, src)
    assert total > 20
    full = listing(img)
    for n in sorted({1, total // 3, total // 2, total - 1}):
        subprocess.run(["cp", "--sparse=always", base, img], check=True)
        r = fstool("populate", img, src,
                   env={"FSTOOL_FAULT_AFTER_WRITES": str(n), "FSTOOL_FAULT_SIGNAL": sig})
        interrupted(r, sig)
        c = fstool("check", img)
        assert c.returncode == 0, f"signal at write {n}: {c.stdout}{c.stderr}"
        assert xfs_repair_n(img) == 0, f"signal at write {n}"
        got = listing(img)
        assert set(got) <= set(full), f"signal at write {n}"
        # a directory is there with all its files or none (one batch each)
        for d in {p.split("/")[1] for p in got if p.count("/") > 1}:
            assert sum(p.startswith(f"/{d}/") for p in got) == 60, (n, d)


@pytest.mark.parametrize("sig", STATUS)
def test_populate_waiting_for_its_source(tmp_path, sig):
    """populate reading a tar archive from a FIFO, signalled from outside
    while it waits for more: 130/143, the image clean, the member it had
    either there whole or not at all."""
    img = tmp_path / "p.img"
    assert fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    fifo = tmp_path / "in.tar"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "fstool", "populate", str(img), str(fifo)],
                         preexec_fn=_signals_default,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        with open(fifo, "wb") as f:       # opens once populate has opened it
            member = tarfile.TarInfo("a")
            member.size = 3
            # one member, and no end of archive: populate waits for more
            f.write(member.tobuf() + b"abc".ljust(tarfile.BLOCKSIZE, b"\0"))
            f.flush()
            p.send_signal(getattr(signal, "SIG" + sig))
            out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    interrupted(subprocess.CompletedProcess(p.args, p.returncode, out, err), sig)
    assert fstool("check", img).returncode == 0
    assert listing(img) in ([], ["/a"])


@needs_xfsprogs
@pytest.mark.parametrize("sig", STATUS)
def test_repair_signalled_while_it_writes(tmp_path, sig):
    """A signal at any of repair's writes waits for the repair to be
    written whole: the status says interrupted (never 1, "repaired"), and
    the image is repaired, clean for xfs_repair -n, every file there."""
    src = source_tree(tmp_path / "src", dirs=8, files=30)
    base = tmp_path / "base.img"
    assert fstool("mkfs", "-q", base, "--size", "64m").returncode == 0
    assert fstool("populate", base, src).returncode == 0
    want = listing(base)
    subprocess.run(["xfs_db", "-x", "-c", "agf 0", "-c", "addr bnoroot",
                    "-c", "write -d recs[1].blockcount 7", str(base)],
                   check=True, capture_output=True)
    assert xfs_repair_n(base) == 1
    img = tmp_path / "r.img"
    subprocess.run(["cp", "--sparse=always", base, img], check=True)
    total = writes_made(tmp_path, "repair", img)
    assert total > 2
    for n in sorted({1, total // 2, total}):
        subprocess.run(["cp", "--sparse=always", base, img], check=True)
        r = fstool("repair", img,
                   env={"FSTOOL_FAULT_AFTER_WRITES": str(n), "FSTOOL_FAULT_SIGNAL": sig})
        interrupted(r, sig)
        c = fstool("check", img)
        assert c.returncode == 0, f"signal at write {n}: {c.stdout}{c.stderr}"
        assert xfs_repair_n(img) == 0, f"signal at write {n}"
        assert listing(img) == want


def test_sigint_ignored_stays_ignored(tmp_path):
    """A signal the shell had fstool ignore (``nohup``, a background job)
    is left ignored: the command runs to the end."""
    img = tmp_path / "i.img"
    assert fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    code = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "os.environ['FSTOOL_FAULT_AFTER_WRITES'] = '1'; "
            "os.environ['FSTOOL_FAULT_SIGNAL'] = 'INT'; "
            "sys.argv = ['fstool', 'mkdir', sys.argv[1], '/d']; "
            "from fstool.cli.main import main; main()")
    r = subprocess.run([sys.executable, "-c", code, str(img)], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert listing(img) == ["/d"]
