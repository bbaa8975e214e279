"""Trees every Debian machine has (manual sections, /usr/include, /etc, a
Python package directory, part of /usr/share/doc), populated into fresh
images: clean for xfs_repair -n (6.1 and 6.10.1) and fstool check, the
kernel's view (a read-only loop mount) and `fstool get` of the image equal
to the source (names, types, sizes, modes, owners, times, symlink targets,
hard links, contents by hash, xattrs); and the same tree copied by the
kernel (`cp -a` into a fresh mkfs.xfs image) clean for fstool check.  Real
names and sizes make directories and files of shapes no generated tree
has (/usr/share/man/man2 is a single-LEAFN directory, for one)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures import images
from fixtures.oracles import fstool, repair_clean
from fixtures.tree import assert_same_tree, tree_manifest, xattr_values

pytestmark = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")

DOC = Path("/usr/share/doc")
DOC_PART = 150                  # package directories of /usr/share/doc taken


def _python_tree() -> Path | None:
    for pattern in ("/usr/lib/python3/dist-packages", "/usr/lib/python3.*/site-packages",
                    "/usr/lib/python3.*/email"):
        found = sorted(p for p in glob.glob(pattern) if os.path.isdir(p))
        if found:
            return Path(found[-1])
    return None


TREES = {
    "man2": Path("/usr/share/man/man2"),
    "man3": Path("/usr/share/man/man3"),
    "man5": Path("/usr/share/man/man5"),
    "man7": Path("/usr/share/man/man7"),
    "man8": Path("/usr/share/man/man8"),
    "include": Path("/usr/include"),
    "etc": Path("/etc"),
    "python": _python_tree(),
    "doc": DOC,
}


def _size(src: Path) -> str:
    """An image size with room for the tree (and its inodes) three times over."""
    total = sum(e.stat(follow_symlinks=False).st_size
                for root, _d, files in os.walk(src) for e in os.scandir(root))
    return f"{max(512, 3 * total // (1 << 20) + 128)}m"


def _doc_part(tmp: Path) -> tuple[Path, list[str]]:
    """Every n-th package directory of /usr/share/doc, DOC_PART of them, as
    a pax archive (nanosecond times, xattrs): (archive, directory names)."""
    pkgs = sorted(e.name for e in os.scandir(DOC) if e.is_dir(follow_symlinks=False))
    step = max(1, len(pkgs) // DOC_PART)
    part = pkgs[::step][:DOC_PART]
    tar = tmp / "doc.tar"
    subprocess.run(["tar", "--format=pax", "--xattrs", "--xattrs-include=*", "-cf", str(tar),
                    "-C", str(DOC), *part], check=True)
    return tar, part


def kernel_copy_checked(src: Path, parts, tmp: Path, size: str) -> None:
    """``cp -a`` of ``src`` (its ``parts`` only, if given) into a fresh
    mkfs.xfs image: fstool check finds it clean."""
    img = tmp / "kernel.img"
    subprocess.run(["truncate", "-s", size, str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(img)], check=True, capture_output=True)
    with images.Mounted(img, nouuid=True) as mnt:
        what = [str(src / p) for p in parts] if parts else [f"{src}/."]
        subprocess.run(["cp", "-a", *what, str(mnt)], check=True)
    r = fstool("check", img, check=False)
    assert r.returncode == 0, r.stdout[-3000:]


@pytest.mark.parametrize("name", list(TREES))
def test_real_tree(tmp_path, name):
    src = TREES[name]
    if src is None or not src.is_dir():
        pytest.skip(f"no {src or 'Python package directory'} on this machine")
    parts = None
    if name == "doc":
        source, parts = _doc_part(tmp_path)
        size = "1g"
    else:
        source, size = src, _size(src)
    # the source as it is now, taken once
    want = {p: (tree_manifest(src / p), xattr_values(src / p)) for p in parts} if parts \
        else {"": (tree_manifest(src), xattr_values(src))}
    img = tmp_path / "fstool.img"
    fstool("mkfs", img, "--size", size, "-q")
    fstool("populate", img, source)
    repair_clean(img)
    r = fstool("check", img, check=False)
    assert r.returncode == 0, r.stdout[-3000:]
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        for p, w in want.items():
            # (directory sizes follow each filesystem's own layout)
            assert_same_tree(src / p, mnt, p, dir_sizes=False, want=w)
    out = tmp_path / "got"
    out.mkdir()
    fstool("get", img, "/", out, "--force")
    for p, w in want.items():
        assert_same_tree(src / p, out, p, dir_sizes=False, want=w)
    shutil.rmtree(out)
    kernel_copy_checked(src, parts, tmp_path, size)
