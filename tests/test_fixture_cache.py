"""The fixture cache builds a fixture once however many processes (pytest-xdist
workers, other runs sharing the cache) ask for it at the same time, and a
fixture under its final name is always whole."""
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from fixtures import cache


def _build_slowly(out: str, log: str, start) -> None:
    def build(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {tmp.name}\n")
        tmp.write_bytes(b"part")
        time.sleep(0.5)             # the other process asks meanwhile
        with open(tmp, "ab") as f:
            f.write(b" whole")
    start.wait()
    cache.build_once(Path(out), build)


def test_two_processes_build_a_fixture_once(tmp_path):
    out, log = tmp_path / "f.img", tmp_path / "builds"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(3)
    procs = [ctx.Process(target=_build_slowly, args=(str(out), str(log), start))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(log.read_text().splitlines()) == 1
    assert out.read_bytes() == b"part whole"
    # no temporary name is left in the cache
    assert sorted(p.name for p in tmp_path.iterdir()) == ["builds", "f.img", "f.lock"]


def test_a_failed_build_leaves_nothing_and_the_next_one_builds(tmp_path):
    out = tmp_path / "f.img"
    beside = tmp_path / "f.manifest.json"

    def fail(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("the kernel did not lay it out")
    with pytest.raises(RuntimeError):
        cache.build_once(out, fail, beside=[beside])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.lock"]

    def build(tmp: Path) -> str:
        tmp.write_bytes(b"whole")
        cache.write_atomic(beside, "{}")
        return "built"
    assert cache.build_once(out, build, beside=[beside]) == "built"
    assert out.read_bytes() == b"whole" and beside.read_text() == "{}"
    # there: not built again; a missing companion file builds it again
    assert cache.build_once(out, build, beside=[beside]) is None
    beside.unlink()
    assert cache.build_once(out, build, beside=[beside]) == "built"
