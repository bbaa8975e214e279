"""fstool check: clean images check clean, damaged ones are found as
xfs_repair -n finds them, and nothing crashes or hangs."""
import json
import random
import shutil
import subprocess
import sys
import time

import pytest

from fixtures import corpus, images

pytestmark = pytest.mark.skipif(shutil.which("xfs_repair") is None,
                                reason="xfsprogs (xfs_db, xfs_repair) not installed")

def check(img, *args, timeout=120):
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "fstool", "check", *args, str(img)],
                         capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in res.stderr, res.stderr
    return res, time.monotonic() - t0


def repair_n(img):
    return subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True,
                          timeout=300).returncode


def test_clean_images_check_clean(kernel_img, fragmented_img, proto_img, tmp_path):
    made = tmp_path / "fstool.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(made), "--size", "1g"],
                   check=True)
    theirs = tmp_path / "mkfs.img"
    subprocess.run(["truncate", "-s", "1g", str(theirs)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(theirs)], check=True)
    for img in (kernel_img, fragmented_img, proto_img, made, theirs):
        res, _ = check(img)
        assert res.returncode == 0, (img, res.stdout)
        assert res.stdout.strip() == "no problems found"


def test_json_findings(tmp_path):
    img = tmp_path / "f.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", "512m"],
                   check=True)
    subprocess.run(["xfs_db", "-x", "-f", "-c", "agf 1", "-c", "write -d freeblks 5",
                    str(img)], check=True, capture_output=True)
    res, _ = check(img, "--json")
    assert res.returncode == 1
    found = [json.loads(line) for line in res.stdout.splitlines()]
    assert {"code": "AGF_FREEBLKS", "agno": 1, "field": "agf_freeblks", "found": 5,
            "severity": "error"}.items() <= found[0].items()
    assert found[0]["expected"] > 5


def _sample(geometry: str, seed: int, n: int) -> list:
    """``n`` cases of the generated corpus, leaving out xfs_db's 'random'
    verb (it seeds itself from the clock: not reproducible)."""
    return [c for c in corpus.cases(geometry, seed, 4 * n)
            if c.get("verb") != "random"][:n]


@pytest.mark.parametrize("geometry, n", [("std", 14), ("small", 8), ("rmap", 8),
                                         ("big", 4), ("sect4k", 4), ("modern", 6),
                                         ("modern1k", 6)])
def test_corpus_sample_agrees_with_xfs_repair(geometry, n, tmp_path):
    """A fixed, seeded sample of the corpus generated over the format
    (fixtures/corpus.py; bench/corpus_agreement.py runs 1,000+): fstool
    check's verdict equals xfs_repair -n's on every case, nothing crashes.
    The modern geometries are made and labelled by xfsprogs 6.10.1; on the
    older ones, labelled by 6.1, check may instead agree with 6.10.1 where
    that is the stricter (corpus.today_label)."""
    if not images.loop_available():
        pytest.skip("the corpus base images need root and a kernel loop mount of XFS")
    from fixtures import corpus_base
    if corpus_base.unavailable(geometry):
        pytest.skip(corpus_base.unavailable(geometry))
    disagree = []
    made = 0
    for i, case in enumerate(_sample(geometry, 7, n)):
        img = tmp_path / f"c{i}.img"
        if not corpus.make_case(img, case):
            continue
        made += 1
        res, took = check(img, "--json")
        assert took < 60, (corpus.describe(case), took)
        assert res.returncode in (0, 1, 2), (corpus.describe(case), res.stderr)
        assert "CHECK_ABORTED" not in res.stdout, (corpus.describe(case), res.stdout)
        _assert_located([json.loads(line) for line in res.stdout.splitlines()])
        _assert_distinct([json.loads(line) for line in res.stdout.splitlines()])
        label = corpus.label(img, geometry=geometry)
        if (label != 0) != (res.returncode != 0):
            # 6.10.1 is stricter than 6.1 in places (an attr block's CRC):
            # check may agree with today's xfs_repair instead
            label = corpus.today_label(img, geometry)
        if label is None or (label != 0) != (res.returncode != 0):
            disagree.append((corpus.describe(case), label, res.returncode, res.stdout[:300]))
        img.unlink()
    assert made >= n * 3 // 4
    assert not disagree


def test_random_byte_flips_never_crash(kernel_img, tmp_path):
    """Bytes flipped anywhere in the metadata area: one clear result, no
    traceback, bounded time."""
    rng = random.Random(3)
    img = tmp_path / "flip.img"
    for trial in range(12):
        subprocess.run(["cp", "--sparse=always", str(kernel_img), str(img)], check=True)
        with open(img, "r+b") as f:
            for _ in range(20):
                ag = rng.randrange(4)
                off = ag * (256 << 20) + rng.randrange(0, 64 << 12)
                f.seek(off)
                f.write(bytes([rng.randrange(256)]))
        res, took = check(img, timeout=120)
        assert res.returncode in (0, 1, 2, 4), res.stderr
        assert took < 60


def test_dirty_log_exit_2(tmp_path):
    if not images.loop_available():
        pytest.skip("needs root and a kernel loop mount of XFS")
    img = tmp_path / "dirty.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", "512m"],
                   check=True)
    with images.Mounted(img) as mnt:
        (mnt / "a").mkdir()
        for i in range(50):
            (mnt / "a" / f"f{i}").write_text(str(i))
        subprocess.run(["sync"], check=True)
        (mnt / "a" / "late").write_text("x")
        subprocess.run(["xfs_io", "-x", "-c", "shutdown -f", str(mnt)], check=True)
    res, _ = check(img)
    assert res.returncode == 2
    assert "LOG_DIRTY" in res.stdout and "log is dirty" in res.stderr
    # after the kernel replays it, the image is clean again
    with images.Mounted(img):
        pass
    res, _ = check(img)
    assert res.returncode == 0, res.stdout


def test_problem_table_doc_is_current():
    from pathlib import Path

    from fstool.ops.problemdoc import markdown
    doc = Path(__file__).resolve().parent.parent / "docs" / "check-problems.md"
    assert doc.read_text() == markdown()


def test_operational_errors(tmp_path):
    res, _ = check(tmp_path / "missing.img")
    assert res.returncode == 4 and res.stderr.startswith("fstool: error:")


def test_jobs_give_the_same_findings(kernel_img, tmp_path):
    img = tmp_path / "j.img"
    subprocess.run(["cp", "--sparse=always", str(kernel_img), str(img)], check=True)
    for cmds in (["agi 2", "write -d freecount 3"], ["agf 1", "write -d longest 7"]):
        subprocess.run(["xfs_db", "-x", "-f", *sum((["-c", c] for c in cmds), []), str(img)],
                       check=True, capture_output=True)
    one, _ = check(img, "--json")
    three, _ = check(img, "--json", "--jobs", "3")
    assert one.returncode == three.returncode == 1
    assert sorted(one.stdout.splitlines()) == sorted(three.stdout.splitlines())
    codes = {json.loads(line)["code"] for line in one.stdout.splitlines()}
    assert codes == {"AGI_COUNT", "AGF_LONGEST"}


def _db_value(img, cmds, field):
    args = ["xfs_db", "-r", "-f"] + [a for c in cmds for a in ("-c", c)]
    out = subprocess.run(args + ["-c", f"print {field}", str(img)], capture_output=True,
                         text=True, check=True).stdout
    return out.split("=", 1)[1].split()[0]


LEAF = "dblock 8388608"         # the leaf block of a leaf-form directory


@pytest.mark.parametrize("where, field, code", [
    (["path /files/size_0"], "core.nlinkv2", "NLINK"),
    # a leaf hash taken from the next entry: order kept, entry wrong
    (["path /dirs/d500", LEAF], "lents[3].hashval", "DIR_LEAF"),
    # the same in a leafn block of a node-form directory
    (["path /dirs/d10000", "dblock 8388636"], "lents[5].hashval", "DIR_LEAF"),
    # a leaf entry pointing at another (real) entry of the directory
    (["path /dirs/d500", LEAF], "lents[7].address", "DIR_LEAF"),
])
def test_namespace_findings(kernel_img, tmp_path, where, field, code):
    """Link counts and leaf indexes damaged with checksums recomputed:
    fstool check names the problem, and xfs_repair -n agrees it is one."""
    img = tmp_path / "ns.img"
    subprocess.run(["cp", "--sparse=always", str(kernel_img), str(img)], check=True)
    if field == "core.nlinkv2":
        value = "5"
    else:                       # the field of the next leaf entry
        nxt = field.replace("[3]", "[4]").replace("[5]", "[6]").replace("[7]", "[8]")
        value = _db_value(img, where, nxt)
        assert value != _db_value(img, where, field)
    args = ["xfs_db", "-x", "-f"] + [a for c in where for a in ("-c", c)]
    subprocess.run(args + ["-c", f"write {field} {value}", str(img)], check=True,
                   capture_output=True)
    res, _ = check(img, "--json")
    assert res.returncode == 1, res.stdout
    codes = {json.loads(line)["code"] for line in res.stdout.splitlines()}
    assert code in codes, res.stdout
    assert repair_n(img) == 1


def test_progress_reports_every_phase(kernel_img):
    """The progress callback hears of every phase in order and of the inode
    chunks up to the last; the CLI draws it on a terminal without harm."""
    import fstool
    from fstool.ops.check import Checker, check as run_check
    calls = []
    with fstool.open_image(kernel_img) as fs:
        c = run_check(fs, lambda *a: calls.append(a))
        assert c.exit_code == 0
        chunks = sum(len(v) for v in c.chunks.values())
    phases = [p for p, done, total in calls if total is None]
    assert phases == [p.name for p in Checker.PHASES]
    inodes = [(done, total) for p, done, total in calls if p == "inodes" and total]
    assert inodes and inodes[-1] == (chunks, chunks)
    pty = pytest.importorskip("pty")
    import os
    out = bytearray()

    def read(fd):
        data = os.read(fd, 4096)
        out.extend(data)
        return data
    status = pty.spawn([sys.executable, "-m", "fstool", "check", str(kernel_img)], read)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"no problems found" in out and b"Traceback" not in out


def test_inobt_record_outside_its_ag(kernel_img, tmp_path):
    """An inobt record moved past the end of its AG is reported, and does not
    make the inodes of other AGs look unused."""
    import fstool
    img = tmp_path / "far.img"
    subprocess.run(["cp", "--sparse=always", str(kernel_img), str(img)], check=True)
    with fstool.open_image(img) as fs:
        beyond = fs.ag_length(0) << fs.sb.inopblog
        agino_log = fs.sb.agino_log
    subprocess.run(["xfs_db", "-x", "-f", "-c", "agi 0", "-c", "addr root", "-c",
                    f"write recs[3].startino {beyond + 128}", str(img)], check=True,
                   capture_output=True)
    res, _ = check(img, "--json")
    assert res.returncode == 1
    found = [json.loads(line) for line in res.stdout.splitlines()]
    assert any(f["code"] == "INOBT_RECORD" and f.get("field") == "ir_startino"
               for f in found), res.stdout
    strays = [f for f in found if f["code"] == "DIR_ENTRY_TARGET" and
              f["found"] >> agino_log != 0]
    assert not strays, strays[:3]
    assert repair_n(img) == 1


def _assert_distinct(found):
    """One finding per fact: no two findings of one run are equal."""
    keys = [json.dumps(f, sort_keys=True) for f in found]
    assert len(keys) == len(set(keys)), [k for k in keys if keys.count(k) > 1]


def _assert_located(found):
    """Every finding names its structure from the one list, and the AG of
    an AG structure."""
    from fstool.ops.problems import STRUCTURES
    for f in found:
        assert f.get("structure") in STRUCTURES, f
        if f["structure"] in ("agf", "agi", "agfl", "bnobt", "cntbt", "inobt", "finobt",
                              "refcountbt", "rmapbt"):
            assert f.get("agno") is not None, f
        # an exception the check caught is a crash it survived, never a finding
        assert f["code"] != "CHECK_ABORTED", f


def _corpus_inodes():
    from fixtures import corpus_base
    return corpus_base.load_inodes(corpus_base.base_image("std"))


# (name, xfs_db commands on the corpus base image (inode numbers looked up by
# name), a code fstool must report, whether it is an error).  Each is a
# class of damage fstool check once missed or misjudged; xfs_repair -n's
# verdict must be the same.
ISSUE_CASES = [
    ("AGFL slot holding a file's block",
     ["agfl 1", "write -d bno[{agfl_second}] {file_one_block}"], "SPACE_OVERLAP", True),
    ("AGFL slot repeated", ["agfl 1", "write -d bno[{agfl_second}] {agfl_first_block}"],
     "AGFL_DUPLICATE", False),
    ("unlinked bucket at agino 0", ["agi 1", "write -d unlinked[0] 0"], "AGI_UNLINKED", True),
    ("unlinked bucket at a random agino", ["agi 1", "write -d unlinked[5] 12345"],
     "AGI_UNLINKED", True),
    ("unlinked bucket at a linked inode", ["agi 1", "write -d unlinked[28] 3484"],
     "AGI_UNLINKED", True),
    ("next_unlinked of an inode on no list",
     ["inode {file_one}", "write -d next_unlinked 3485"], "INODE_UNLINKED", True),
    ("extent size flag on a directory", ["inode {dirs}", "write -d core.extsz 1"],
     "INODE_FLAGS", True),
    ("extent size hint on a symlink", ["inode {symlink_inline}", "write -d core.extsize 16"],
     "INODE_EXTSIZE", True),
    ("extent size flag on a device", ["inode {special_chr}", "write -d core.extsz 1"],
     "INODE_FLAGS", True),
    ("nosymlinks on a file", ["inode {file_one}", "write -d core.nosymlinks 1"],
     "INODE_FLAGS", True),
    # clearing bigtime reads the 64-bit time as seconds and nanoseconds,
    # which only sometimes gives nanoseconds past a second (the fixture's
    # times are the time it was built): the nanoseconds are set so
    ("bigtime cleared on an inode", ["inode {file_one}", "write -d v3.bigtime 0",
                                     "write -d core.atime.nsec 1500000000"],
     "INODE_TIMESTAMP", True),
    ("root directory of an impossible size", ["inode 128", "write -d core.size 1099511627776"],
     "INODE_SIZE", True),
    ("'/' in a shortform name", ["inode {dirs}", 'write -d u3.sfdir3.list[2].name "le/f"'],
     "DIR_NAME", True),
    ("duplicate shortform name", ["inode {dirs}", 'write -d u3.sfdir3.list[3].name "leaf"'],
     "DIR_NAME", True),
    ("shortform offsets out of order", ["inode {dirs}", "write -d u3.sfdir3.list[2].offset 0x60"],
     "DIR_CORRUPT", True),
    ("block directory '.' naming another inode",
     ["inode {dir_block}", "dblock 0", "write -d bu[0].inumber 131"], "DIR_DOT", True),
    ("directory da-btree 'before' pointer",
     ["inode {dir_node}", "dblock 8388608", "write -d nbtree[0].before 8388614"],
     "DIR_NODE", True),
    ("attr da-btree 'before' pointer",
     ["inode {xattr_node}", "ablock 0", "write -d btree[1].before 5"], "XATTR_NODE", True),
    ("bmbt right sibling", ["inode {file_bmbt2}", "addr u3.bmbt.ptrs[1]", "addr ptrs[1]",
                            "write -d rightsib 12"], "BMBT_SIBLING", True),
    ("bmbt left sibling", ["inode {file_bmbt2}", "addr u3.bmbt.ptrs[1]", "addr ptrs[2]",
                           "write -d leftsib 0"], "BMBT_SIBLING", True),
    ("bmbt node key", ["inode {file_bmbt2}", "addr u3.bmbt.ptrs[1]",
                       "write -d keys[2].startoff 3"], "BMBT_KEY", True),
    ("bmbt records out of order", ["inode {file_bmbt2}", "addr u3.bmbt.ptrs[1]",
                                   "addr ptrs[1]", "write -d recs[3].startoff 1"],
     "INODE_EXTENT", True),
    ("AGF version", ["agf 1", "write -d versionnum 2"], "AGF_HEADER", True),
    ("secondary superblock feature bits", ["sb 1", "write -d features_incompat 0xa"],
     "SB_SECONDARY", True),
    ("attr leaf firstused", ["inode {xattr_leaf}", "ablock 0", "write -d hdr.firstused 100"],
     "XATTR", True),
    ("attr leaf free map", ["inode {xattr_leaf}", "ablock 0", "write -d hdr.freemap[0].base 6"],
     "XATTR", True),
    ("secondary superblock sector sizes without the feature",
     ["sb 3", "write -d logsectsize 2017"], "SB_SECONDARY", True),
    ("symlink whose core fails its CRC", ["inode {symlink_inline}", "write -c core.gen 5"],
     "INODE_CORRUPT", True),
    ("inobt record misaligned at its chunk's last inode",
     ["agi 2", "addr root", "addr ptrs[1]", "write -d recs[63].startino 15361"],
     "INOBT_RECORD", True),
    ("group quota inode not in use", ["sb 0", "write -d gquotino 12345"], "SB_QUOTINO",
     True),
    # the remote value verifier adds offset and length in 32 bits
    ("remote value offset wrapping 32 bits",
     ["inode {xattr_remote}", "ablock 1", "write -d hdr.offset 0xffffffff"], None, False),
    # agblklog is 14: the AG number is bits 14-45 of a block number, and bits
    # above it are dropped by the kernel and xfs_repair alike
    ("extent block number above the AG number bits",
     ["inode {file_bmbt2}", "addr u3.bmbt.ptrs[1]", "addr ptrs[1]",
      f"write -d recs[1].startblock {17912 + (1 << 46)}"], None, False),
    # extents past the data fork di_forkoff leaves but inside the inode:
    # xfs_repair reads them there, the kernel's verifier refuses the inode
    ("extents past the attr fork offset", ["inode {file_extents}", "write -d core.forkoff 1"],
     "INODE_VERIFY", False),
    ("extents past the end of the inode", ["inode {file_extents}", "write -d core.nextents 22"],
     "INODE_NEXTENTS", True),
    ("extent block number in an AG past the last",
     ["inode {file_bmbt2}", "addr u3.bmbt.ptrs[1]", "addr ptrs[1]",
      f"write -d recs[1].startblock {17912 + (1 << 45)}"], "INODE_EXTENT", True),
]


def _agfl_slots(img) -> dict:
    """The second in-use slot of AG 1's free list and the block the first
    holds: where the kernel left the list's active range differs from one
    build of the corpus base to the next."""
    def db(*cmds):
        args = ["xfs_db", "-r"] + [a for c in cmds for a in ("-c", c)]
        return subprocess.run(args + [str(img)], capture_output=True, text=True).stdout
    agf = db("agf 1", "print flfirst fllast flcount")
    first, count = int(corpus._val(agf, "flfirst")), int(corpus._val(agf, "flcount"))
    assert count >= 2, agf
    slots = int(db("agfl 1", "print bno").split("bno[0-")[1].split("]")[0]) + 1
    block = corpus._val(db("agfl 1", f"print bno[{first}]"), f"bno[{first}]")
    return {"agfl_second": (first + 1) % slots, "agfl_first_block": block}


@pytest.mark.parametrize("name, cmds, code, is_error", ISSUE_CASES,
                         ids=[c[0] for c in ISSUE_CASES])
def test_damage_classes(name, cmds, code, is_error, tmp_path):
    """Each class of damage is found, named in the problem table with the
    severity xfs_repair -n's verdict calls for."""
    if not images.loop_available():
        pytest.skip("the corpus base images need root and a kernel loop mount of XFS")
    from fixtures import corpus_base
    base = corpus_base.base_image("std")
    inodes = _corpus_inodes()
    img = tmp_path / "d.img"
    subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
    if "{file_one_block}" in " ".join(cmds):
        out = subprocess.run(["xfs_db", "-r", "-c", f"inode {inodes['file_one']}", "-c",
                              "bmap", str(img)], capture_output=True, text=True).stdout
        inodes["file_one_block"] = out.split("(")[1].split("/")[1].split(")")[0]
    if "{agfl_second}" in " ".join(cmds):
        inodes.update(_agfl_slots(img))
    args = ["xfs_db", "-x", "-f"] + [a for c in cmds for a in ("-c", c.format(**inodes))]
    subprocess.run(args + [str(img)], check=True, capture_output=True)
    res, _ = check(img, "--json")
    found = [json.loads(line) for line in res.stdout.splitlines()]
    _assert_located(found)
    _assert_distinct(found)
    if code is None:
        assert not found, res.stdout[:2000]
    else:
        assert any(f["code"] == code for f in found), res.stdout[:2000]
    assert res.returncode == (1 if is_error else 0), res.stdout[:2000]
    assert (repair_n(img) != 0) == is_error


# (name, inode (by name), attr block or None for the shortform fork, entry,
# flags written): attribute entry flags xfs_repair 6.10 refuses and 6.1 let
# pass (the kernel's shortform verifier refuses the inode too)
ATTR_FLAGS = [
    ("leaf entry with an unknown flag", "xattr_leaf", 0, 0, 0x11),
    ("leaf entry in two namespaces", "xattr_leaf", 0, 0, 0x07),
    ("leaf entry that is a parent pointer", "xattr_leaf", 0, 0, 0x09),
    ("remote entry that is a parent pointer", "xattr_remote", 0, 0, 0x08),
    ("shortform entry with the local flag", "xattr_local", None, 0, 0x01),
    ("shortform entry in two namespaces", "xattr_local", None, 1, 0x06),
    ("shortform entry that is a parent pointer", "xattr_local", None, 0, 0x08),
    # trusted made secure: one namespace, sound
    ("shortform entry moved to another namespace", "xattr_local", None, 1, 0x04),
]


@pytest.mark.parametrize("name, inode, ablock, entry, flags", ATTR_FLAGS,
                         ids=[c[0] for c in ATTR_FLAGS])
def test_attr_entry_flags_as_xfs_repair_6_10_judges(name, inode, ablock, entry, flags,
                                                   tmp_path):
    """An attribute entry's flags (CRC recomputed) as xfs_repair 6.10.1
    judges them: bits no entry has, two namespaces, a parent pointer on a
    filesystem without them are XATTR errors (check used to look at the
    incomplete flag only, as xfs_repair 6.1 did)."""
    if not images.loop_available():
        pytest.skip("the corpus base images need root and a kernel loop mount of XFS")
    from fixtures import corpus_base, modern
    if not modern.available():
        pytest.skip(modern.WHY)
    base = corpus_base.base_image("std")
    ino = _corpus_inodes()[inode]
    img = tmp_path / "a.img"
    subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
    sel = [f"inode {ino}"] + ([f"ablock {ablock}"] if ablock is not None else [])
    where = int(modern.db(img, *sel, "stack").split("byte offset ")[1].split(",")[0])
    if ablock is not None:      # the leaf's entry table follows its 80-byte header
        where += 80 + 8 * entry + 6
    else:                       # the shortform fork: a 4-byte header, then the entries
        core = modern.db(img, *sel, "print core.forkoff a.sfattr")
        where += 176 + 8 * int(core.split("core.forkoff = ")[1].split()[0]) + 4
        for i in range(entry):
            lens = [int(core.split(f"list[{i}].{f} = ")[1].split()[0])
                    for f in ("namelen", "valuelen")]
            where += 3 + sum(lens)
        where += 2
    with open(img, "r+b") as f:
        f.seek(where)
        f.write(bytes([flags]))
    modern.db(img, *sel, "crc -r", write=True)
    corrupt = modern.repair_n(img).returncode != 0
    res, _ = check(img, "--json")
    found = [json.loads(line) for line in res.stdout.splitlines()]
    _assert_located(found)
    assert corrupt == (name != "shortform entry moved to another namespace")
    assert res.returncode == (1 if corrupt else 0), res.stdout[:2000]
    assert ({f["code"] for f in found} == {"XATTR"}) == corrupt, res.stdout[:2000]


def test_parent_pointers_check_clean(tmp_path):
    """A filesystem with parent pointers (mkfs.xfs 6.10.1 -n parent=1) the
    kernel wrote hard links into: its attribute entries with the parent
    flag, shortform and in a leaf, hash with the parent's inode number
    mixed in; check finds nothing, as xfs_repair 6.10.1 -n (it used to call
    every such hash wrong)."""
    if not images.loop_available():
        pytest.skip("needs root and a kernel loop mount of XFS")
    from fixtures import modern
    if not modern.available():
        pytest.skip(modern.WHY)
    img = modern.mkfs(tmp_path / "p.img", "-n", "parent=1", "-m", f"uuid={images.UUID}")
    try:
        with images.Mounted(img, nouuid=True) as mnt:
            (mnt / "d").mkdir()
            (mnt / "one").write_bytes(b"x")
            for i in range(40):
                (mnt / "d" / f"link-{i:02d}").hardlink_to(mnt / "one")
    except subprocess.CalledProcessError as e:
        pytest.skip(f"the kernel does not mount parent pointers: {e}")
    assert modern.repair_n(img).returncode == 0
    aformat = modern.db(img, "path /one", "print core.aformat")
    assert "= 2 (extents)" in aformat, "the hard links' parent pointers fill an attr leaf"
    res, _ = check(img)
    assert res.returncode == 0 and res.stdout.strip() == "no problems found", res.stdout


def test_key_findings_name_the_block_holding_the_key(tmp_path):
    """A wrong node key is reported at the node holding it, with the key's
    index (0-based; xfs_db counts from 1), so a repair can rewrite it."""
    if not images.loop_available():
        pytest.skip("the corpus base images need root and a kernel loop mount of XFS")
    from fixtures import corpus_base
    base = corpus_base.base_image("std")
    bmbt_ino = _corpus_inodes()["file_bmbt2"]
    img = tmp_path / "k.img"
    for cmds, code, agno, node_cmds in (
            (["agf 1", "addr bnoroot", "write -d keys[3].startblock 9999"], "BTREE_KEY", 1,
             ["agf 1", "print bnoroot"]),
            ([f"inode {bmbt_ino}", "addr u3.bmbt.ptrs[1]", "write -d keys[3].startoff 3"],
             "BMBT_KEY", None, [f"inode {bmbt_ino}", "print u3.bmbt.ptrs[1]"])):
        subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
        subprocess.run(["xfs_db", "-x", "-f"] + [a for c in cmds for a in ("-c", c)] +
                       [str(img)], check=True, capture_output=True)
        out = subprocess.run(["xfs_db", "-r"] + [a for c in node_cmds for a in ("-c", c)] +
                             [str(img)], capture_output=True, text=True, check=True).stdout
        node = int(out.split("=")[-1])
        res, _ = check(img, "--json")
        found = [json.loads(line) for line in res.stdout.splitlines()]
        keys = [f for f in found if f["code"] == code and f.get("index") == 2]
        assert keys, res.stdout
        if agno is None:       # a file block number
            import fstool
            with fstool.open_image(img) as fs:
                agno, node = node >> fs.sb.agblklog, node & ((1 << fs.sb.agblklog) - 1)
        assert all(f["block"] == node and f["agno"] == agno and f["field"] == "keys"
                   for f in keys), (node, keys)


def test_unused_superblock_bytes(tmp_path):
    """Bytes past a secondary superblock's last field, checksum restamped."""
    if not images.loop_available():
        pytest.skip("the corpus base images need root and a kernel loop mount of XFS")
    from fixtures import corpus_base
    base = corpus_base.base_image("std")
    img = tmp_path / "u.img"
    subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
    import fstool
    with fstool.open_image(img) as fs:
        off = fs.agb_to_daddr(1, 0) * 512
    with open(img, "r+b") as f:
        f.seek(off + 400)
        f.write(b"\x01")
    subprocess.run(["xfs_db", "-x", "-f", "-c", "sb 1", "-c", "crc -r", str(img)], check=True,
                   capture_output=True)
    res, _ = check(img, "--json")
    found = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.returncode == 1
    assert any(f["code"] == "SB_SECONDARY" and f["field"] == "unused" and f["agno"] == 1
               for f in found)
    assert repair_n(img) == 1


def test_inobt_and_finobt_counts_are_two_findings(tmp_path):
    """A wrong agi_freecount is two facts, as xfs_repair -n reports them:
    the inobt's count and the finobt's.  Each is one finding, named by its
    tree, in check's text and --json, repair's --json (one action each) and
    a writer's refusal."""
    img = tmp_path / "f.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", "512m"],
                   check=True)
    subprocess.run(["xfs_db", "-x", "-f", "-c", "agi 0", "-c", "write -d freecount 1234",
                    str(img)], check=True, capture_output=True)
    theirs = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True,
                            text=True).stderr
    theirs = [ln for ln in theirs.splitlines() if ln.startswith("agi_freecount 1234")]
    assert len(theirs) == 2 and theirs[1].endswith(" finobt"), theirs
    res, _ = check(img, "--json")
    found = [json.loads(line) for line in res.stdout.splitlines()]
    _assert_distinct(found)
    counts = [f for f in found if f["code"] == "AGI_COUNT"]
    assert sorted(f["structure"] for f in counts) == ["finobt", "inobt"], found
    assert all(f["found"] == 1234 and f["field"] == "agi_freecount" for f in counts)
    text, _ = check(img)
    lines = [ln for ln in text.stdout.splitlines() if "AGI_COUNT" in ln]
    assert len(lines) == 2 and len(set(lines)) == 2, text.stdout
    rep = subprocess.run([sys.executable, "-m", "fstool", "repair", "-n", "--json", str(img)],
                         capture_output=True, text=True)
    out = json.loads(rep.stdout)
    _assert_distinct(out["findings"])
    _assert_distinct(out["actions"])
    assert len(out["actions"]) == len(out["findings"])
    refused = subprocess.run([sys.executable, "-m", "fstool", "mkdir", str(img), "/x"],
                             capture_output=True, text=True)
    assert refused.returncode == 7
    shown = [p.strip() for p in refused.stderr.split(";") if "AGI_COUNT" in p]
    assert len(shown) == 2 and len(set(shown)) == 2, refused.stderr


# (name, xfs_db commands on the modern1k corpus base, AG 1): rmapbt keys
# xfs_repair checks (scan_rmapbt), unlike other AG btrees' keys
RMAP_KEYS = [
    # the root's high key for its second child below that child's records
    ("high key below the child's records", ["agf 1", "addr rmaproot",
                                            "write -d keys[2].startblock_hi 0"]),
    # the corpus's case modern1k-1-132: the owner of a high key zeroed
    ("high key's owner zeroed", ["agf 1", "addr rmaproot", "write -d keys[18].owner_hi 0"]),
    ("node low keys out of order", ["agf 1", "addr rmaproot",
                                    "write -d keys[2].startblock 65000"]),
]


@pytest.mark.parametrize("name, cmds", RMAP_KEYS, ids=[c[0] for c in RMAP_KEYS])
def test_rmapbt_keys_as_xfs_repair_checks_them(name, cmds, tmp_path):
    """An rmapbt node's keys (CRC recomputed) on a three-level rmapbt: a
    child whose records or keys lie past the high key its parent holds for
    it, and low keys out of order, are BTREE_RMAP_KEY errors, as xfs_repair
    6.10.1 -n reports them (check used to read no rmapbt key); repair
    rebuilds the AG's rmapbt and both xfs_repair versions find the result
    clean."""
    if not images.loop_available():
        pytest.skip("the corpus base images need root and a kernel loop mount of XFS")
    from fixtures import corpus_base, modern, oracles
    if not modern.available():
        pytest.skip(modern.WHY)
    img = tmp_path / "k.img"
    subprocess.run(["cp", "--sparse=always", str(corpus_base.base_image("modern1k")),
                    str(img)], check=True)
    modern.db(img, *cmds, write=True)
    assert modern.repair_n(img).returncode == 1
    res, _ = check(img, "--json")
    found = [json.loads(line) for line in res.stdout.splitlines()]
    _assert_located(found)
    assert res.returncode == 1, res.stdout[:2000]
    assert any(f["code"] == "BTREE_RMAP_KEY" and f["agno"] == 1 for f in found), \
        res.stdout[:2000]
    r = oracles.fstool("repair", img, check=False)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]     # found and repaired
    oracles.repair_clean(img)
    assert check(img)[0].returncode == 0
