"""populate's read-ahead of a host source (ops.populate.read_ahead): the
entries come unchanged and in order, the files among the next few are
opened ahead with the kernel asked to read their start, never more than the
limit at once, and every file opened ahead is closed, used or not."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fstool.ops import populate as P
from fstool.ops.sources import EmptyFiles, Entry


class _File:
    """A stand-in for an opened host file that knows what is open."""
    open_now: set = set()

    def __init__(self, name):
        self.name = name
        self.closed = False
        _File.open_now.add(name)
        r, w = os.pipe()              # a real descriptor for fileno()
        os.close(w)
        self.fd = r

    def fileno(self):
        return self.fd

    def close(self):
        if not self.closed:
            self.closed = True
            os.close(self.fd)
            _File.open_now.discard(self.name)


def _entries(n, size=10_000, fail=()):
    opened = []

    def opener(name):
        def op():
            if name in fail:
                raise PermissionError(13, "Permission denied")
            f = _File(name)
            opened.append(f)
            return f
        return op
    out = []
    for k in range(n):
        e = Entry(f"d/f{k}", "file", 0o644, size=size)
        e.open = opener(e.path)
        out.append(e)
        if k % 10 == 0:
            out.append(Entry(f"d/sub{k}", "dir", 0o755))
            out.append(EmptyFiles("d", []))
    return out, opened


def test_read_ahead_keeps_order_and_bounds_open_files(monkeypatch):
    asked = []
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, off, n, advice: asked.append((off, n, advice)))
    _File.open_now = set()
    ents, opened = _entries(100, size=3 << 20, fail={"d/f7"})
    most = 0
    got = []
    for e in P.read_ahead(iter(list(ents)), files=8, nbytes=1 << 40, head=1 << 20):
        most = max(most, len(_File.open_now))
        got.append(e)
        if getattr(e, "kind", None) == "file" and e.path != "d/f7":
            f = e.open()                # the file opened ahead, handed over
            assert f.name == e.path and not f.closed
            if e.path == "d/f3":
                f.close()               # used and closed by the consumer
    assert got == ents
    assert most <= 9                    # the limit, and the one being used
    assert not _File.open_now           # all closed, used or not
    assert len(opened) == 99            # the failing one is left for its turn
    with pytest.raises(PermissionError):
        next(e for e in ents if e.path == "d/f7").open()     # ... which reports the error in order
    assert asked and all(a == (0, 1 << 20, os.POSIX_FADV_WILLNEED) for a in asked)
    assert len(asked) == 99


def test_read_ahead_bounds_bytes_and_closes_when_abandoned(monkeypatch):
    monkeypatch.setattr(os, "posix_fadvise", lambda *a: None)
    _File.open_now = set()
    ents, _opened = _entries(50, size=1 << 20)
    walk = P.read_ahead(iter(ents), files=1000, nbytes=4 << 20, head=2 << 20)
    next(walk)
    assert 0 < len(_File.open_now) <= 5    # 4 MiB asked for at most, plus one
    walk.close()
    assert not _File.open_now


def test_populate_reads_a_directory_ahead(tmp_path):
    """A populate of a host directory asks the kernel to read ahead every
    file with data, as its run is taken: small ones a window at a time as
    they are read (by the native reader; the pure backend asks through
    os.posix_fadvise, so the calls can be seen), the start of larger ones
    as they are opened; the image holds them whole."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    sizes = [k * 1000 + 1 for k in range(30)] + [70_000 + k * 300_000 for k in range(8)]
    for k, n in enumerate(sizes):
        (src / "a" / f"f{k:02d}").write_bytes(bytes([k]) * n)
    (src / "empty").write_bytes(b"")
    img = tmp_path / "img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", "64m"],
                   check=True)
    code = (
        "import os, sys\n"
        "from fstool.ops import populate as P\n"
        "calls = []\n"
        "real = os.posix_fadvise\n"
        "def rec(fd, off, n, adv):\n"
        "    # the source's files (not the image, which the check before\n"
        "    # populate reads ahead too)\n"
        "    if os.readlink(f'/proc/self/fd/{fd}') != os.path.realpath(sys.argv[1]):\n"
        "        calls.append(n)\n"
        "    return real(fd, off, n, adv)\n"
        "os.posix_fadvise = rec\n"
        "P.populate(sys.argv[1], sys.argv[2])\n"
        "print(sorted(calls))\n")
    r = subprocess.run([sys.executable, "-c", code, str(img), str(src)], capture_output=True,
                       text=True, check=True, env={**os.environ, "FSTOOL_PURE_PYTHON": "1"})
    assert r.stdout.strip() == str(sorted(min(n, 2 << 20) for n in sizes))
    import fstool
    with fstool.open_image(str(img)) as fs:
        for k, n in enumerate(sizes):
            assert fs.lookup(f"/a/f{k:02d}").read(0, 4 << 20) == bytes([k]) * n
