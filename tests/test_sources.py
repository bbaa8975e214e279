"""populate's sources: a host directory, tar archives of every compression
and an mkfs.xfs protofile yield the same entries; hostile input is refused
(or skipped and reported with keep_going)."""
from __future__ import annotations

import io
import os
import tarfile

import pytest

from fstool.errors import InvalidArgument, NameTooLongError
from fstool.ops.sources import open_source, parse_owner_map, squash_owner


def tree(root):
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f").write_bytes(b"hello")
    (root / "d" / "e" / "g").write_bytes(os.urandom(5000))
    (root / "name with space\nand newline").write_bytes(b"")
    os.symlink("d/f", root / "link")
    os.link(root / "d" / "f", root / "hard")
    os.mkfifo(root / "fifo")
    os.utime(root / "d" / "f", ns=(5, -123456789))
    return root


def summary(src):
    out = {}
    with src:
        for e in src:
            data = None
            if e.kind == "file":
                with e.open() as f:
                    data = f.read()
            out[e.path] = (e.kind, e.mode, data, e.target if e.kind != "hardlink" else
                           str(e.target), e.mtime_ns if e.kind != "dir" else None)
    return out


@pytest.mark.parametrize("comp", ["", "gz", "bz2", "xz", "zst"])
def test_tar_matches_directory(tmp_path, comp):
    src = tree(tmp_path / "src")
    want = summary(open_source(src))
    arc = tmp_path / f"a.tar{'.' + comp if comp else ''}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in sorted(want):
            if e:
                t.add(src / e, arcname=e, recursive=False)
    raw = buf.getvalue()
    if comp == "gz":
        import gzip
        raw = gzip.compress(raw)
    elif comp == "bz2":
        import bz2
        raw = bz2.compress(raw)
    elif comp == "xz":
        import lzma
        raw = lzma.compress(raw)
    elif comp == "zst":
        zstandard = pytest.importorskip("zstandard")
        raw = zstandard.ZstdCompressor().compress(raw)
    arc.write_bytes(raw)
    got = summary(open_source(arc))
    want.pop("")
    for path, (kind, mode, data, target, mtime) in want.items():
        g = got[path]
        if "hardlink" in (kind, g[0]):
            continue        # which member of a link group comes first may differ
        assert (g[0], g[1], g[2]) == (kind, mode, data), path
        if kind == "symlink":
            assert g[3] == target
        if kind == "file" and path == "d/f":
            # pax keeps nanoseconds, negative times included
            assert g[4] == mtime == -123456789
    assert got["hard"][0] == "hardlink" or got["d/f"][0] == "hardlink"


def test_protofile(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "data").write_bytes(b"abc")
    proto = tmp_path / "proto"
    proto.write_text("/dev/null\n0 0\nd--755 0 0\n"
                     "bin d--755 1 2\n  tool -u-755 0 0 host/data\n  $\n"
                     "lnk l--777 0 0 bin/tool\n"
                     "null c--666 0 0 1 3\n$\n")
    out = summary(open_source(proto))
    assert out["bin/tool"][:3] == ("file", 0o4755, b"abc")
    assert out["lnk"][0] == "symlink" and out["lnk"][3] == b"bin/tool"
    assert out["null"][0] == "chardev"


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/../../x", "n" * 256])
def test_hostile_tar_members(tmp_path, name):
    arc = tmp_path / "bad.tar"
    with tarfile.open(arc, "w") as t:
        ok = tarfile.TarInfo("fine")
        t.addfile(ok, io.BytesIO(b""))
        bad = tarfile.TarInfo(name)
        bad.size = 1
        t.addfile(bad, io.BytesIO(b"x"))
    # a name too long for XFS is ENAMETOOLONG, as a filesystem says it
    want = NameTooLongError if len(name) > 255 else InvalidArgument
    with pytest.raises(want) as exc:
        list(open_source(arc))
    assert exc.value.errno == want.errno
    reports = []
    with open_source(arc, keep_going=True, report=reports.append) as src:
        paths = [e.path for e in src]
    assert paths == ["fine"] and len(reports) == 1


def test_owner_maps(tmp_path):
    m = parse_owner_map("1000:1000=0:0,7=8")
    assert m(1000, 1000) == (0, 0)
    assert m(7, 9) == (8, 9)
    assert m(5, 5) == (5, 5)
    assert squash_owner(12, 34) == (0, 0)
    with pytest.raises(ValueError):
        parse_owner_map("1000")
    for bad in ("0:0=4294967296:0", "-1=0", "5=6:-2"):      # outside 32 bits
        with pytest.raises(ValueError, match="4294967295"):
            parse_owner_map(bad)
    src = tree(tmp_path / "s")
    with open_source(src, owner_map=lambda u, g: (u + 1, g + 2)) as s:
        e = next(iter(s))
    st = os.lstat(src)
    assert (e.uid, e.gid) == (st.st_uid + 1, st.st_gid + 2)


def test_not_a_source(tmp_path):
    p = tmp_path / "junk"
    p.write_bytes(b"\x00\x01junk")
    from fstool.errors import FsToolError
    with pytest.raises(FsToolError, match="neither"):
        open_source(p)


def _walk_events(items, keep_going, fail_at=None):
    """A fake walk of ``items`` that meets a bad entry before ``fail_at``:
    its events as walk_ahead reproduces them (items, reports, the error)."""
    from fstool.errors import FsToolError
    state = {"produced": 0, "closed": False}

    def walk_of(bad):
        try:
            for k in items:
                if k == fail_at:
                    bad(FsToolError(f"bad {k}"))
                    continue
                state["produced"] += 1
                yield k
        finally:
            state["closed"] = True
    return walk_of, state


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_walk_ahead_keeps_order_reports_and_errors(chunk):
    """The walking thread hands over every item in order; a bad entry is
    reported (keep_going) or raised exactly where the walk met it."""
    from fstool.errors import FsToolError
    from fstool.ops.sources import walk_ahead
    items = list(range(500))
    events = []
    walk_of, state = _walk_events(items, True, fail_at=250)
    for k in walk_ahead(walk_of, True, lambda m: events.append(m), limit=8,
                        chunk_items=chunk):
        events.append(k)
    assert events == items[:250] + ["bad 250"] + items[251:]
    assert state["closed"]

    got = []
    walk_of, state = _walk_events(items, False, fail_at=100)
    with pytest.raises(FsToolError, match="bad 100"):
        for k in walk_ahead(walk_of, False, lambda m: got.append(m), limit=8,
                            chunk_items=chunk):
            got.append(k)
    assert got == items[:100]


def test_walk_ahead_bounded_and_stops_with_consumer():
    """At most ``limit`` items (and a few chunks on their way) wait for
    the consumer; a consumer that stops early stops and closes the walk."""
    import threading
    from fstool.ops.sources import walk_ahead
    walk_of, state = _walk_events(range(100_000), True)
    taken = 0
    most = 0
    gen = walk_ahead(walk_of, True, print, limit=16, chunk_items=4)
    for _k in gen:
        taken += 1
        most = max(most, state["produced"] - taken)
        if taken == 2000:
            break
    gen.close()
    # queued: under the limit when a chunk was added, that chunk; one chunk
    # in the consumer's hands, one being filled by the walk
    assert most <= 16 + 3 * 4
    assert state["closed"] and state["produced"] < 100_000
    assert not any(t.name == "fstool-walk" for t in threading.enumerate())


def test_dir_walk_ahead_same_entries(tmp_path):
    """A host directory walked on its own thread gives the same entries,
    runs and reports (a symlink target XFS cannot hold, with keep_going), in
    the same order, as walked in the consumer's."""
    from fstool.ops.sources import EmptyFiles
    src = tmp_path / "src"
    src.mkdir()
    for d in ("a", "b", "a/c"):
        (src / d).mkdir()
        for i in range(5):
            (src / d / f"f{i}").write_bytes(b"x" * i)
        os.symlink(f"target-{d}", src / d / "sym")
        os.mkfifo(src / d / "fifo")
    os.link(src / "a" / "f1", src / "b" / "hard")
    os.symlink("t" * 2000, src / "a" / "too-long")

    def walk(ahead):
        out = []
        with open_source(str(src), keep_going=True,
                         report=lambda m: out.append(("report", m))) as s:
            for e in s.entries(runs=True, ahead=ahead):
                if isinstance(e, EmptyFiles):
                    out.append(("run", e.path, tuple(e.items)))
                else:
                    out.append((e.path, e.kind, e.mode, e.size, e.target, e.xattrs,
                                e.mtime_ns))
        return out
    plain, ahead = walk(False), walk(True)
    assert plain == ahead
    kinds = {x[1] for x in plain if x[0] not in ("run", "report")}
    assert {"dir", "symlink", "fifo", "hardlink"} <= kinds
    assert any(x[0] == "run" for x in plain)
    assert [x[1] for x in plain if x[0] == "report"] == \
        [x[1] for x in ahead if x[0] == "report"] and \
        any("too-long" in x[1] for x in plain if x[0] == "report")
