"""Images mkfs.xfs populated from a protofile read back as the source tree
(needs only xfsprogs, so it runs where no loop mount is possible)."""
import hashlib


import fstool
from fixtures.tree import tree_manifest

SPECIAL = {
    "/dev": ("dir", 0o755, None),
    "/dev/fifo": ("fifo", 0o640, None),
    "/dev/null": ("chardev", 0o666, [1, 3]),
    "/dev/sda1": ("blockdev", 0o660, [8, 1]),
    "/dev/big-minor": ("chardev", 0o600, [259, 70000]),
}


def test_proto_image_matches_source(proto_img):
    src = proto_img.with_suffix(".tree")
    truth = {r["path"]: r for r in tree_manifest(src)}
    with fstool.open_image(proto_img) as fs:
        seen = set()
        for path, node in fs.walk("/"):
            seen.add(path)
            if path in SPECIAL:
                kind, mode, rdev = SPECIAL[path]
                assert (node.type_name, node.perm, node.rdev and list(node.rdev)) == \
                    (kind, mode, rdev), path
                if path == "/dev/sda1":
                    assert (node.uid, node.gid) == (6, 7)
                continue
            t = truth[path]
            assert node.type_name == t["type"], path
            assert (node.uid, node.gid) == (0, 0)
            if t["type"] == "symlink":
                assert fs.readlink(node).decode() == t["target"]
                continue
            if path != "/":
                assert node.perm == t["mode"], path
            if t["type"] == "file":
                assert node.size == t["size"]
                assert hashlib.sha256(fs.read(node)).hexdigest() == t["sha256"], path
        assert seen == set(truth) | set(SPECIAL)


def test_proto_image_directory_forms(proto_img):
    from fstool.fs import dir as xdir
    with fstool.open_image(proto_img) as fs:
        forms = [xdir.form(fs.lookup(f"/d{n}")) for n in (2, 50, 500, 3000)]
    assert forms == ["shortform", "block", "leaf", "node"]


def test_proto_image_ls_long(proto_img):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "fstool", "ls", "-l", str(proto_img), "/dev"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert any(line.startswith("brw-rw----") and "8, 1" in line and line.endswith("sda1")
               for line in out), out
    assert any(line.startswith("prw-r-----") and line.endswith("fifo") for line in out), out
    assert any(line.startswith("crw-rw-rw-") and "1, 3" in line for line in out), out
