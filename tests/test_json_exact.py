"""--json keeps names byte-exact: a name that is not UTF-8 is given as the
escaped text ls shows and, beside it, its bytes in base64 (``*_b64``); the
output is valid UTF-8 JSON with no lone surrogate a reader would turn into
U+FFFD.  And ``repair --extend-truncated`` names the files whose data the
cut took (they read as zeros)."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import images

REPO = Path(__file__).resolve().parent.parent
RAW = b"caf\xe9-\xff\\x"          # latin-1, a byte no UTF-8 has, a backslash


def fstool(*args) -> subprocess.CompletedProcess:
    """Run fstool with bytes arguments, output as bytes."""
    return subprocess.run([sys.executable.encode(), b"-m", b"fstool",
                           *(a if isinstance(a, bytes) else str(a).encode() for a in args)],
                          capture_output=True, cwd=REPO, timeout=300)


def records(out: bytes) -> list:
    text = out.decode("utf-8")              # strict: valid UTF-8
    assert "\\udc" not in text              # no lone surrogate escaped
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def exact(rec: dict, key: str) -> bytes:
    """The bytes a record names under ``key``: ``key_b64`` when there is one."""
    if f"{key}_b64" in rec:
        return base64.b64decode(rec[f"{key}_b64"])
    return rec[key].encode("utf-8")


def test_names_not_utf8_are_byte_exact(tmp_path):
    img = tmp_path / "n.img"
    host = tmp_path / "h"
    host.write_bytes(b"data")
    assert fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    r = fstool("put", "--json", img, host, b"/" + RAW)
    assert r.returncode == 0, r.stderr
    (put,) = records(r.stdout)
    assert exact(put, "path") == b"/" + RAW
    assert put["path"] == "/caf\\xe9-\\xff\\\\x"           # the escaped text ls shows
    assert fstool("put", img, host, "/plain-é").returncode == 0
    assert fstool("ln", "-s", img, b"/" + RAW, b"/link").returncode == 0
    r = fstool("ls", "--json", img)
    assert r.returncode == 0, r.stderr
    listed = {exact(rec, "path") for rec in records(r.stdout)}
    assert listed == {b"/" + RAW, "/plain-é".encode(), b"/link"}, listed
    plain = [rec for rec in records(r.stdout) if rec["path"] == "/plain-é"]
    assert plain and "path_b64" not in plain[0]     # UTF-8 names as they are
    r = fstool("stat", "--json", img, b"/link")
    (st,) = records(r.stdout)
    assert exact(st, "target") == b"/" + RAW
    r = fstool("ls", "-l", img)
    assert b"caf\\xe9-\\xff\\\\x" in r.stdout
    # an error naming such a path: the same escape, on standard error
    r = fstool("stat", "--json", img, b"/" + RAW + b"-missing")
    (err,) = records(r.stderr)
    assert err["exit_status"] == r.returncode != 0
    assert "error_b64" in err and RAW + b"-missing" in base64.b64decode(err["error_b64"])


@pytest.mark.skipif(not images.xfsprogs_available(), reason="xfsprogs not installed")
def test_extend_truncated_names_the_files_that_lost_data(tmp_path):
    """Cut a quarter off an image: repair --extend-truncated lists exactly
    the files whose contents now differ (their data lay past the cut)."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(24):
        (src / f"f{i:02d}").write_bytes(hashlib.sha256(bytes([i])).digest() * 65536)   # 2 MiB each: into the last AG
    img = tmp_path / "t.img"
    assert fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    assert fstool("populate", img, src).returncode == 0
    whole = {p.name: p.read_bytes() for p in src.iterdir()}
    size = os.path.getsize(img)
    cut = size * 3 // 4
    os.truncate(img, cut)
    r = fstool("repair", "--json", "--extend-truncated", img)
    assert r.returncode == 1, r.stdout + r.stderr
    (rep,) = records(r.stdout)
    zeroed = {exact({"p": p}, "p") for p in rep["zeroed_files"]}
    assert subprocess.run(["xfs_repair", "-n", "-f", str(img)],
                          capture_output=True).returncode == 0
    changed = set()
    for name, data in whole.items():
        got = fstool("cat", img, f"/{name}")
        if got.returncode or got.stdout != data:
            changed.add(f"/{name}".encode())
    assert changed, "the cut took no file's data: the test proves nothing"
    assert zeroed == changed, (sorted(zeroed), sorted(changed))
    assert any(f"data lost (it reads as zeros) in {len(changed)} file(s)" in c
               for c in rep["changes"]), rep["changes"]
