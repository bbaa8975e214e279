"""What fstool reads equals what the kernel shows for the same image."""
import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest

import fstool
from fixtures import images
from fixtures.tree import tree_manifest, xattr_values


def fstool_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, env=env)


def without(records, *keys):
    return [{k: v for k, v in r.items() if k not in keys} for r in records]


def _raw_names(rec: dict) -> dict:
    """A --json record with every name that is not UTF-8 put back from its
    ``KEY_b64`` bytes (as the kernel manifest holds it: surrogateescape)."""
    for key in [k for k in rec if k.endswith("_b64")]:
        raw = base64.b64decode(rec.pop(key))
        rec[key[:-4]] = raw.decode("utf-8", "surrogateescape")
    return rec


@pytest.mark.parametrize("backend", ["native", "pure-python"])
def test_ls_json_equals_kernel(kernel_img, backend):
    env = dict(os.environ)
    if backend == "pure-python":
        env["FSTOOL_PURE_PYTHON"] = "1"
    ver = fstool_cli("--version", env=env)
    if backend not in ver.stdout:
        pytest.skip(f"{backend} backend not available: {ver.stdout.strip()}")
    res = fstool_cli("ls", "-R", "--json", kernel_img, "/", env=env)
    assert res.returncode == 0, res.stderr
    ours = sorted((_raw_names(json.loads(line)) for line in res.stdout.splitlines()),
                  key=lambda r: r["path"])
    truth = [r for r in images.load_manifest(kernel_img) if r["path"] != "/"]
    assert len(ours) == len(truth)
    assert without(ours) == without(truth, "sha256")


def test_file_contents_equal_kernel(kernel_img):
    truth = {r["path"]: r for r in images.load_manifest(kernel_img)}
    with fstool.open_image(kernel_img) as fs:
        checked = 0
        for path, node in fs.walk("/"):
            if node.is_reg:
                assert hashlib.sha256(fs.read(node)).hexdigest() == truth[path]["sha256"], path
                checked += 1
        assert checked == sum(1 for r in truth.values() if r["type"] == "file")


def test_streaming_and_positional_reads(kernel_img):
    with fstool.open_image(kernel_img) as fs:
        whole = fs.read("/files/sparse")
        stream = fs.open("/files/sparse")
        parts = []
        while True:
            chunk = stream.read(12345)
            if not chunk:
                break
            parts.append(chunk)
        assert b"".join(parts) == whole
        for off, size in ((0, 1), (4095, 2), (4096, 8192), (len(whole) - 3, 100), (10**9, 5)):
            assert fs.read("/files/sparse", off, size) == whole[off:off + size]
        # holes read as zeros: block 1 of the sparse file was never written
        assert whole[4096:8192] == bytes(4096)
        # the preallocated (unwritten) range reads as zeros
        pre = fs.read("/files/prealloc")
        assert pre[4 * 4096:20 * 4096] == bytes(16 * 4096)


def test_xattr_values_equal_kernel(kernel_img):
    truth = images.load_xattrs(kernel_img)
    with fstool.open_image(kernel_img) as fs:
        seen = {}
        for path, node in fs.walk("/"):
            x = fs.xattrs(node)
            if x:
                seen[path] = x
    assert seen == truth


def test_every_form_is_present(kernel_img):
    """The fixture really exercises each on-disk form the reader supports."""
    from fstool.fs import dir as xdir
    from fstool.format import constants as C
    with fstool.open_image(kernel_img) as fs:
        forms = {p: xdir.form(fs.lookup(p)) for p in
                 ("/dirs/d2", "/dirs/d50", "/dirs/d500", "/dirs/d10000")}
        assert forms == {"/dirs/d2": "shortform", "/dirs/d50": "block",
                         "/dirs/d500": "leaf", "/dirs/d10000": "node"}
        assert fs.lookup("/dirs/d10000").format == C.XFS_DINODE_FMT_BTREE
        assert fs.lookup("/files/sparse").format == C.XFS_DINODE_FMT_BTREE
        assert any(e[3] for e in fs.lookup("/files/prealloc").extents())
        assert fs.lookup("/symlinks/short").format == C.XFS_DINODE_FMT_LOCAL
        assert fs.lookup("/symlinks/long").format == C.XFS_DINODE_FMT_EXTENTS
        assert fs.lookup("/xattrs/small").aformat == C.XFS_DINODE_FMT_LOCAL
        node = fs.lookup("/xattrs/node")
        block0 = fs.read_meta(*_attr_block0(fs, node))
        assert int.from_bytes(block0[8:10], "big") == C.XFS_DA3_NODE_MAGIC
        leaf = fs.lookup("/xattrs/leaf")
        block0 = fs.read_meta(*_attr_block0(fs, leaf))
        assert int.from_bytes(block0[8:10], "big") == C.XFS_ATTR3_LEAF_MAGIC


def _attr_block0(fs, node):
    from fstool.io import verify as V
    daddr, _pieces = node.read_fork_blocks(0, 1, attr=True)
    return daddr, fs.sb.blocksize, V.ATTR3_NODE_OR_LEAF


def test_hashed_lookup_of_every_name(kernel_img):
    truth = images.load_manifest(kernel_img)
    with fstool.open_image(kernel_img) as fs:
        for rec in truth:
            assert fs.lookup(rec["path"]).ino == rec["ino"], rec["path"]
        for d in ("/dirs/d2", "/dirs/d50", "/dirs/d500", "/dirs/d10000"):
            with pytest.raises(FileNotFoundError):
                fs.lookup(d + "/entry-999999")


def test_symlinks_followed_inside_the_image(kernel_img):
    with fstool.open_image(kernel_img) as fs:
        assert fs.readlink("/symlinks/short") == b"../files/size_1"
        assert fs.lookup("/symlinks/short", follow=True).ino == fs.lookup("/files/size_1").ino
        res = subprocess.run([sys.executable, "-m", "fstool", "cat", str(kernel_img),
                              "/symlinks/short"], capture_output=True)
        assert res.returncode == 0 and res.stdout == fs.read("/files/size_1")


def test_get_round_trip(kernel_img, scratch_xfs):
    dest = scratch_xfs / "out"
    res = fstool_cli("get", kernel_img, "/", dest)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    truth = images.load_manifest(kernel_img)
    got = tree_manifest(dest)
    # inode numbers differ; directory sizes depend on how the host laid them out
    ignore = ("ino",)
    t = without(truth, *ignore)
    g = without(got, *ignore)
    for r in t + g:
        if r["type"] == "dir":
            r.pop("size")
    assert g == t
    assert xattr_values(dest) == images.load_xattrs(kernel_img)
    # hardlinks came out as hardlinks, holes as holes
    assert os.stat(dest / "links/a/shared").st_ino == os.stat(dest / "links/c/and-again").st_ino
    fd = os.open(dest / "files/sparse", os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 4096      # block 1 was never written
    finally:
        os.close(fd)


def test_ls_human_output_is_one_line_per_name(kernel_img):
    truth = [r for r in images.load_manifest(kernel_img) if r["path"].startswith("/names/")]
    res = fstool_cli("ls", "-l", kernel_img, "/names")
    lines = res.stdout.splitlines()
    assert len(lines) == len(truth)
    assert any(line.endswith("new\\nline") for line in lines)
    assert any(line.endswith("latin1-\\xe9") for line in lines)


def test_no_arguments_shows_help():
    res = fstool_cli()
    assert res.returncode == 0 and res.stdout.startswith("Usage: fstool")
