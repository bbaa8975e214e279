"""btree dump, freesp, frag and agstats agree with xfs_db on kernel-written
images, including btrees of more than one level."""
import json
import re
import subprocess
import sys

import pytest

TREES = {"bnobt": ("agf", "bnoroot"), "cntbt": ("agf", "cntroot"), "inobt": ("agi", "root"),
         "finobt": ("agi", "free_root"), "refcountbt": ("agf", "refcntroot")}


@pytest.fixture(scope="module")
def fstool_img(tmp_path_factory):
    """An image fstool mkfs wrote (every tree a single empty or small root)."""
    img = tmp_path_factory.mktemp("stats") / "fstool.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", "1g",
                    "-d", "agcount=5"], check=True)
    return img


@pytest.fixture(params=["kernel", "fragmented", "fstool"])
def image(request, kernel_img, fragmented_img, fstool_img):
    return {"kernel": kernel_img, "fragmented": fragmented_img,
            "fstool": fstool_img}[request.param]


def xfs_db(img, *cmds):
    args = ["xfs_db", "-r", "-f"]
    for c in cmds:
        args += ["-c", c]
    return subprocess.run(args + [str(img)], capture_output=True, text=True,
                          check=True).stdout


def fstool(*args):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, check=True).stdout


def btdump_records(text):
    """Leaf records of an xfs_db btdump, in order, as tuples of ints."""
    recs = []
    in_recs = False
    for line in text.splitlines():
        if line.startswith("recs["):
            in_recs = True
            continue
        if line.startswith(("keys[", "ptrs[")) or " level " in line:
            in_recs = False
            continue
        m = re.match(r"^\d+:\[([\dxa-f,]+)\]", line.strip())
        if in_recs and m:   # big masks print in hex
            recs.append(tuple(int(v, 0) for v in m.group(1).split(",")))
    return recs


def test_ag_btree_records_equal_btdump(image):
    agcount = int(xfs_db(image, "sb 0", "print agcount").split("=")[1])
    for agno in range(agcount):
        for tree, (hdr, field) in TREES.items():
            ours = json.loads(fstool("btree", "dump", "--json", image, "--ag", agno,
                                     "--tree", tree))
            leaves = [tuple(r.values()) for b in ours["levels"][-1] for r in b["recs"]]
            theirs = btdump_records(xfs_db(image, f"{hdr} {agno}", f"addr {field}", "btdump"))
            assert leaves == theirs, (tree, agno)
            # siblings chain the leaves left to right
            row = ours["levels"][-1]
            for left, right in zip(row, row[1:]):
                assert left["rightsib"] == right["block"] and right["leftsib"] == left["block"]


def test_multilevel_trees_exist(fragmented_img):
    for tree in ("bnobt", "cntbt", "inobt", "finobt"):
        s = json.loads(fstool("btree", "dump", "--summary", "--json", fragmented_img,
                              "--ag", 0, "--tree", tree))
        assert s["height"] >= 2 and s["per_level"][0]["blocks"] == 1, tree
        assert s["blocks"] == sum(p["blocks"] for p in s["per_level"])


def test_bmbt_dump_equals_btdump(kernel_img):
    ino = json.loads(fstool("stat", "--json", kernel_img, "/files/sparse"))["ino"]
    ours = json.loads(fstool("btree", "dump", "--json", kernel_img, "--inode", ino))
    leaves = [tuple(r.values()) for b in ours["levels"][-1] for r in b["recs"]]
    assert leaves == btdump_records(xfs_db(kernel_img, f"inode {ino}", "btdump"))
    assert len(leaves) > 1000


def test_freesp_text_equals_xfs_db(image):
    assert fstool("freesp", image).strip() == xfs_db(image, "freesp -s").strip()
    assert fstool("freesp", "--ag", 1, image).strip() == \
        xfs_db(image, "freesp -s -a 1").strip()


def test_frag_equals_xfs_db(image):
    ours = fstool("frag", "--top", 0, image).strip().splitlines()
    assert ours == xfs_db(image, "frag").strip().splitlines()


def test_agstats_equal_headers(image):
    s = json.loads(fstool("agstats", "--json", image))
    for row in s["ags"]:
        agno = row["agno"]
        agf = xfs_db(image, f"agf {agno}", "print freeblks longest flcount length bnolevel "
                     "cntlevel")
        agi = xfs_db(image, f"agi {agno}", "print count freecount level free_level")
        f = {k: int(v) for k, v in re.findall(r"(\w+) = (\d+)", agf + agi)}
        assert row["free_blocks"] == f["freeblks"]
        assert row["longest_free"] == f["longest"]
        assert row["agfl_count"] == f["flcount"]
        assert row["size"] == f["length"]
        assert row["inodes"] == f["count"] and row["free_inodes"] == f["freecount"]
        assert row["btrees"]["bnobt"]["height"] == f["bnolevel"]
        assert row["btrees"]["inobt"]["height"] == f["level"]
        assert row["btrees"]["finobt"]["height"] == f["free_level"]
        # free extents counted through the bnobt agree with freesp's count
        fs = xfs_db(image, f"freesp -s -a {agno}")
        total = int(re.search(r"total free extents (\d+)", fs).group(1))
        assert row["free_extents"] + row["agfl_count"] == total
