"""Structure prints and `info` agree with xfsprogs on images mkfs.xfs made
with a range of geometries."""
import json
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("mkfs.xfs") is None,
                                reason="xfsprogs (mkfs.xfs, xfs_db) not installed")

GEOMETRIES = {
    "default": [],
    "bsize1k": ["-b", "size=1024"],
    "dirblk64k": ["-n", "size=65536"],
    "isize2k": ["-i", "size=2048"],
    "nofinobt_noreflink": ["-m", "finobt=0,reflink=0"],
    "nosparse": ["-i", "sparse=0"],
    "agcount7": ["-d", "agcount=7"],
    "nrext64": ["-i", "nrext64=1"],
}
UUID = "11111111-2222-4333-8444-555555555555"


@pytest.fixture(scope="module", params=sorted(GEOMETRIES))
def image(request, tmp_path_factory):
    img = tmp_path_factory.mktemp(request.param) / "img"
    subprocess.run(["truncate", "-s", "1G", str(img)], check=True)
    res = subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}",
                          *GEOMETRIES[request.param], str(img)], capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"mkfs.xfs refuses {GEOMETRIES[request.param]}: {res.stderr.strip()}")
    return img, GEOMETRIES[request.param]


def fstool_json(*args):
    res = subprocess.run([sys.executable, "-m", "fstool", *map(str, args), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def xfs_db_print(img, *cmds):
    args = ["xfs_db", "-r", "-f"]
    for c in cmds:
        args += ["-c", c]
    out = subprocess.run(args + [str(img)], capture_output=True, text=True, check=True).stdout
    fields = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+) = (.*)$", line)
        if not m:
            continue
        name, value = m.groups()
        value = value.split(" (")[0].strip()
        if value == "":
            continue                  # a field this geometry does not use
        if re.fullmatch(r"0x[0-9a-f]+", value):
            fields[name] = int(value, 16)
        elif re.fullmatch(r"0[0-7]+", value):    # modes print in octal
            fields[name] = int(value, 8)
        elif re.fullmatch(r"-?\d+", value):
            fields[name] = int(value)
        elif value == "null":
            fields[name] = "null"
        else:
            fields[name] = value
    return fields


def compare(ours: dict, theirs: dict, nulls: int, min_common: int):
    common = 0
    for name, value in theirs.items():
        if name not in ours or name == "fname":   # xfs_db prints the label octal-escaped
            continue
        mine = ours[name]
        if value == "null":
            assert mine == nulls, name
        elif isinstance(mine, str) and isinstance(value, str):
            assert mine.strip('"') == value.strip('"'), name
        else:
            assert mine == value, (name, mine, value)
        common += 1
    assert common >= min_common, f"only {common} fields in common"


def test_superblocks(image):
    img, _ = image
    agcount = xfs_db_print(img, "sb 0", "print agcount")["agcount"]
    for agno in sorted({0, 1, agcount - 1}):
        compare(fstool_json("sb", img, agno), xfs_db_print(img, f"sb {agno}", "print"),
                nulls=0xFFFFFFFFFFFFFFFF, min_common=50)


def test_ag_headers(image):
    img, _ = image
    agcount = xfs_db_print(img, "sb 0", "print agcount")["agcount"]
    for agno in range(agcount):
        compare(fstool_json("agf", img, agno), xfs_db_print(img, f"agf {agno}", "print"),
                nulls=0xFFFFFFFF, min_common=18)
        compare(fstool_json("agi", img, agno), xfs_db_print(img, f"agi {agno}", "print"),
                nulls=0xFFFFFFFF, min_common=15)
        agfl = fstool_json("agfl", img, agno)
        theirs = xfs_db_print(img, f"agfl {agno}", "print")
        assert agfl["magicnum"] == theirs["magicnum"]
        assert agfl["seqno"] == agno
        # xfs_db prints the live slots as bno[first-last] = first:val ... ;
        # compare the set of blocks
        raw = subprocess.run(["xfs_db", "-r", "-f", "-c", f"agfl {agno}", "-c", "print bno",
                              str(img)], capture_output=True, text=True).stdout
        theirs_bno = [int(v.split(":")[1]) for v in raw.split("=", 1)[-1].split()
                      if ":" in v and not v.endswith(":null")]
        assert sorted(agfl["bno"]) == sorted(theirs_bno)
        assert len(agfl["bno"]) == xfs_db_print(img, f"agf {agno}", "print flcount")["flcount"]


def test_root_inode(image):
    img, _ = image
    rootino = xfs_db_print(img, "sb 0", "print rootino")["rootino"]
    ours = fstool_json("inode", img, rootino)
    theirs = xfs_db_print(img, f"inode {rootino}", "print")
    for name in ("magic", "mode", "version", "format", "uid", "gid", "size", "nblocks",
                 "forkoff", "gen"):
        assert ours[name] == theirs[f"core.{name}"], name
    assert ours["nlink"] == theirs["core.nlinkv2"]
    assert ours["ino"] == theirs["v3.inumber"]
    assert ours["flags2"] == theirs["v3.flags2"]


def test_info_matches_mkfs_n(image):
    img, args = image
    mkfs = subprocess.run(["mkfs.xfs", "-N", "-f", "-m", f"uuid={UUID}", *args, str(img)],
                          capture_output=True, text=True, check=True).stdout
    ours = subprocess.run([sys.executable, "-m", "fstool", "info", str(img)],
                          capture_output=True, text=True, check=True).stdout
    want = [line for line in mkfs.splitlines() if "=" in line]
    got = ours.splitlines()[:len(want)]
    assert got == want
