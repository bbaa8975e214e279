"""The fsspec filesystem (protocol xfs) shows a kernel-written image as
fsspec's own LocalFileSystem shows the same image loop-mounted."""
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec", reason="fsspec not installed (the fsspec extra)")

from fixtures import images  # noqa: E402
from fstool.fsspec import XfsFileSystem  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
KEYS = ("size", "type", "islink", "mode", "uid", "gid", "mtime", "ino", "nlink", "created")


@pytest.fixture(scope="module")
def both(kernel_img):
    with images.Mounted(kernel_img, readonly=True, nouuid=True) as mnt:
        yield XfsFileSystem(image=kernel_img), fsspec.filesystem("file"), str(mnt)


def _rel(local_name, mnt):
    return os.path.relpath(local_name, mnt).replace(os.sep, "/")


def _same(ours, theirs, mnt):
    assert ours["name"] == _rel(theirs["name"], mnt)
    for k in KEYS:
        assert ours[k] == theirs[k], (ours["name"], k)
    if theirs["islink"]:
        assert ours["destination"] == theirs["destination"]


def test_info_and_ls_with_detail(both):
    xfs, local, mnt = both
    for d in ("", "files", "symlinks", "links/a", "special", "dirs/d50", "names", "xattrs"):
        theirs = sorted(local.ls(os.path.join(mnt, d), detail=True), key=lambda i: i["name"])
        ours = sorted(xfs.ls(d, detail=True), key=lambda i: i["name"])
        assert len(ours) == len(theirs), d
        for o, t in zip(ours, theirs):
            _same(o, t, mnt)
        assert sorted(xfs.ls(d, detail=False)) == sorted(_rel(t["name"], mnt) for t in theirs)
    for p in ("files/size_4097", "symlinks/short", "dirs", "special/fifo"):
        _same(xfs.info(p), local.info(os.path.join(mnt, p)), mnt)
        assert xfs.info("/" + p)["name"] == p            # a leading slash is accepted
        assert xfs.info(f"xfs://{p}")["name"] == p
    for p in ("no/such/file", "symlinks/dangling"):
        with pytest.raises(FileNotFoundError):
            local.info(os.path.join(mnt, p))
        with pytest.raises(FileNotFoundError):
            xfs.info(p)
    assert xfs.isdir("files") and xfs.isfile("files/size_1") and not xfs.exists("nope")


def test_cat_file_and_open(both):
    xfs, local, mnt = both
    for p in ("files/size_0", "files/size_4097", "files/sparse", "files/prealloc",
              "files/fragmented", "symlinks/short"):
        want = local.cat_file(os.path.join(mnt, p))
        assert xfs.cat_file(p) == want, p
        for start, end in ((0, 1), (100, 5000), (-10, None), (None, -5), (4096, 1 << 30),
                           (len(want) + 5, None)):
            try:
                theirs = local.cat_file(os.path.join(mnt, p), start, end)
            except ValueError:              # fsspec's local reader refuses this range
                continue
            assert xfs.cat_file(p, start, end) == theirs, (p, start, end)
        with xfs.open(p, "rb") as f:
            assert f.read() == want
            f.seek(len(want) // 2)
            assert f.read(100) == want[len(want) // 2:len(want) // 2 + 100]
    with fsspec.open("xfs://files/size_4097", image=xfs.image) if "xfs" in \
            fsspec.available_protocols() else xfs.open("files/size_4097") as f:
        assert f.read() == local.cat_file(os.path.join(mnt, "files/size_4097"))
    with xfs.open("files/size_4097", "r", encoding="latin-1") as f:
        assert f.read(3) == local.cat_file(os.path.join(mnt, "files/size_4097"))[:3].decode(
            "latin-1")
    with pytest.raises(OSError):
        xfs.open("files/size_1", "wb")
    with pytest.raises(OSError):
        xfs.rm("files/size_1")


def test_walk_and_find(both):
    xfs, local, mnt = both
    theirs = sorted(_rel(p, mnt) for p in local.find(mnt))
    assert sorted(xfs.find("")) == theirs
    assert sorted(xfs.find("dirs", maxdepth=1)) == \
        sorted(_rel(p, mnt) for p in local.find(os.path.join(mnt, "dirs"), maxdepth=1))
    walked = {root: (sorted(dirs), sorted(files)) for root, dirs, files in xfs.walk("")}
    want = {_rel(root, mnt) if root != mnt else "": (sorted(dirs), sorted(files))
            for root, dirs, files in local.walk(mnt)}
    assert walked == want
    found = xfs.find("", withdirs=True, detail=True)
    assert found["dirs/d500"]["type"] == "directory"
    assert xfs.du("files") == local.du(os.path.join(mnt, "files"))
    assert sorted(xfs.glob("files/size_*")) == \
        sorted(_rel(p, mnt) for p in local.glob(os.path.join(mnt, "files/size_*")))


def test_entry_point_registers_the_protocol(tmp_path, proto_img):
    """fsspec finds the class through the entry point pyproject.toml
    declares (a distribution declaring just that, beside this tree)."""
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]["fsspec.specs"]
    assert eps == {"xfs": "fstool.fsspec:XfsFileSystem"}
    dist = tmp_path / "fstool_xfs_entry-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fstool-xfs-entry\n"
                                   "Version: 0\n")
    (dist / "entry_points.txt").write_text(
        "[fsspec.specs]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    src = proto_img.with_suffix(".tree")
    name = sorted(str(p.relative_to(src)) for p in src.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.stat().st_size)[0]
    code = ("import fsspec, sys\n"
            f"with fsspec.open('xfs://{name}', image=sys.argv[1]) as f:\n"
            "    sys.stdout.buffer.write(f.read())\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    r = subprocess.run([sys.executable, "-c", code, str(proto_img)], capture_output=True,
                       env=env)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == (src / name).read_bytes()


def test_a_csv_inside_an_image_reads_as_data(tmp_path):
    """What data tools do: open a CSV inside an image through fsspec, as text
    (and with pandas, where it is installed)."""
    import csv
    src = tmp_path / "src" / "data"
    src.mkdir(parents=True)
    rows = [["id", "name", "value"]] + [[str(i), f"n{i}", f"{i * 0.5}"] for i in range(2000)]
    with open(src / "table.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    img = tmp_path / "d.img"
    r = subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", "--size", "64m", img,
                        "--populate", tmp_path / "src"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    xfs = XfsFileSystem(image=img)
    with xfs.open("data/table.csv", "rt", newline="") as f:
        assert list(csv.reader(f)) == rows
    with fsspec.core.OpenFile(xfs, "data/table.csv", mode="rt", newline="") as f:
        assert list(csv.reader(f))[-1] == rows[-1]
    try:
        import pandas
    except ImportError:
        return
    df = pandas.read_csv(xfs.open("data/table.csv"))
    assert len(df) == 2000 and df["value"].sum() == sum(i * 0.5 for i in range(2000))
