"""fstool repair and fstool undo against the oracles: kernel-written images
damaged with xfs_db, repaired, then judged by xfs_repair -n, fstool check
and a kernel mount showing every file as it was."""
from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import images
from fixtures.repair_images import copy_image, kernel_churn_image
from fstool.format import constants as C

REPO = Path(__file__).resolve().parent.parent
needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")


def fstool(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})})


def xfs_repair_n(img: Path) -> int:
    return subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True).returncode


def xfs_db(img: Path, *cmds, expert=False) -> str:
    args = ["xfs_db"] + (["-x"] if expert else ["-r"])
    for c in cmds:
        args += ["-c", c]
    return subprocess.run(args + [str(img)], capture_output=True, text=True, check=True).stdout


def finobt_records(img: Path, agcount: int = 4) -> list:
    """Every finobt record of every AG, as xfs_db's btdump prints them."""
    out = []
    for ag in range(agcount):
        dump = xfs_db(img, f"agi {ag}", "addr free_root", "btdump")
        out.append([ln.split(":", 1)[1].strip() for ln in dump.splitlines()
                    if ln[:1].isdigit() and ":[" in ln and ln.count(",") == 4])
    return out


def digest(img: Path) -> str:
    """SHA-256 of an image's contents: every non-zero 4 KiB block with its
    offset (holes and written zeros alike; only data regions are read)."""
    import hashlib
    from fstool.io.sparse import data_ranges_of
    h = hashlib.sha256()
    zero = bytes(4096)
    with open(img, "rb") as f:
        for start, length in data_ranges_of(f.fileno()) or [(0, img.stat().st_size)]:
            f.seek(start)
            data = f.read(length)
            for o in range(0, len(data), 4096):
                blk = data[o:o + 4096]
                if blk != zero[:len(blk)]:
                    h.update((start + o).to_bytes(8, "little"))
                    h.update(blk)
    return h.hexdigest()


def kernel_tree(img: Path) -> list:
    """The tree as the kernel shows it: every path, type, size and content
    digest (a symbolic link's target; "unreadable" where the kernel refuses
    to read it)."""
    import hashlib
    import stat
    out = []
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        for root, dirs, files in os.walk(mnt):
            dirs.sort()
            for name in sorted(dirs + files):
                p = Path(root) / name
                st = p.lstat()
                h = ""
                try:
                    if stat.S_ISREG(st.st_mode):
                        h = hashlib.sha256(p.read_bytes()).hexdigest()
                    elif stat.S_ISLNK(st.st_mode):
                        h = os.readlink(p)
                except OSError:
                    h = "unreadable"
                out.append((str(p.relative_to(mnt)), st.st_mode, st.st_size, st.st_nlink, h))
    return out


@pytest.fixture(scope="module")
def churn():
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    img = kernel_churn_image()
    return {"img": img, "tree": kernel_tree(img)}


@needs_loop
def test_rebuild_finobt_equals_kernels(churn, tmp_path):
    """--rebuild finobt on a clean kernel-written image whose finobt has
    holes (every third file deleted): the same records, record for record."""
    img = copy_image(churn["img"], tmp_path / "a.img")
    before = finobt_records(img)
    assert sum(len(r) for r in before) > 20
    r = fstool("repair", "--rebuild", "finobt", img)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "finobt" in r.stdout
    assert finobt_records(img) == before
    # the trees were rewritten into other blocks, yet the image is clean
    assert xfs_db(img, "agi 1", "print free_root") != xfs_db(churn["img"], "agi 1",
                                                             "print free_root")
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0


def repair_clean_and_idempotent(img: Path, *args) -> None:
    """fstool repair mends ``img`` (exit 1): xfs_repair -n and fstool check
    find nothing after it, and a second repair finds nothing and changes
    not a byte."""
    r = fstool("repair", *args, img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    repaired = digest(img)
    r = fstool("repair", img)
    assert r.returncode == 0 and "no problems found" in r.stdout, r.stdout
    assert digest(img) == repaired


# (name, xfs_db commands): one damage each
DAMAGE = [
    ("finobt-record", ["agi 1", "addr free_root", "write -d recs[2].free 0"]),
    ("finobt-block", ["agi 3", "addr free_root", "write -d magic 0"]),
    ("inobt-record", ["agi 0", "addr root", "write -d recs[3].freecount 5"]),
    ("inobt-block", ["agi 1", "addr root", "write -d magic 0"]),
    ("bnobt-record", ["agf 0", "addr bnoroot", "write -d recs[1].blockcount 7"]),
    ("bnobt-block", ["agf 3", "addr bnoroot", "write -d magic 0"]),
    ("cntbt-record", ["agf 2", "addr cntroot", "write -d recs[1].startblock 900"]),
    ("agfl-count", ["agf 0", "write -d flcount 7"]),
    ("agf-counters", ["agf 1", "write -d freeblks 10", "write -d longest 3"]),
    ("agi-counters", ["agi 2", "write -d freecount 3"]),
    ("sb-counters", ["sb 0", "write -d icount 99", "write -d fdblocks 12"]),
    ("secondary-sb", ["sb 2", "write -d unit 8"]),
]


@needs_loop
@pytest.mark.parametrize("name,cmds", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_repair_damage(churn, tmp_path, name, cmds):
    img = copy_image(churn["img"], tmp_path / "d.img")
    xfs_db(img, *cmds, expert=True)
    assert xfs_repair_n(img) == 1, "the damage is not damage"
    assert fstool("check", img).returncode == 1
    # -n changes no byte and says it would repair
    damaged = digest(img)
    r = fstool("repair", "-n", img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "would change" in r.stdout
    assert digest(img) == damaged
    repair_clean_and_idempotent(img)
    # every file as the kernel wrote it
    assert kernel_tree(img) == churn["tree"]


# the corpus base image has files sharing blocks (reflink): its refcount btree
REFC_DAMAGE = [
    ("refcount-record", ["agf 1", "addr refcntroot", "addr ptrs[2]",
                         "write -d recs[5].refcount 5"]),
    ("refcount-block", ["agf 1", "addr refcntroot", "addr ptrs[1]", "write -d magic 0"]),
    ("refcount-agf", ["agf 1", "write -d refcntblocks 9"]),
]


@pytest.fixture(scope="module")
def reflinked():
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    from fixtures import corpus_base
    img = corpus_base.base_image("std")
    return {"img": img, "tree": kernel_tree(img)}


def refcount_records(img: Path) -> list:
    dump = xfs_db(img, "agf 1", "addr refcntroot", "btdump")
    return [ln.split(":", 1)[1].strip() for ln in dump.splitlines()
            if ln[:1].isdigit() and ln.count(",") == 3]


@needs_loop
def test_reflink_flag_cleared_with_a_bad_crc(reflinked, tmp_path):
    """A file that shares blocks loses its reflink flag and its inode's CRC
    goes bad with it (xfs_db write -c): check reports the flag as well as
    the CRC (the inode judged as its CRC's rewrite leaves it, as xfs_repair
    judges it), and repair sets the flag rather than only rewriting the
    CRC, which left an image check and xfs_repair call damaged."""
    import fstool as fsmod
    img = copy_image(reflinked["img"], tmp_path / "f.img")
    with fsmod.open_image(img) as fs:
        node = fs.lookup("/files/refdst")      # corpus_base: clones of refsrc's blocks
        ino = node.ino
        assert node.flags2 & C.XFS_DIFLAG2_REFLINK
    xfs_db(img, f"inode {ino}", "write -c v3.reflink 0", expert=True)
    assert xfs_repair_n(img) == 1
    found = fstool("check", img).stdout
    assert "CRC mismatch" in found and "lacks the reflink flag" in found, found
    r = fstool("repair", img)
    assert r.returncode == 1 and "reflink flag set" in r.stdout, r.stdout + r.stderr
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    assert kernel_tree(img) == reflinked["tree"]


@needs_loop
@pytest.mark.parametrize("name,cmds", REFC_DAMAGE, ids=[d[0] for d in REFC_DAMAGE])
def test_repair_refcountbt(reflinked, tmp_path, name, cmds):
    want = refcount_records(reflinked["img"])
    assert len(want) > 500
    img = copy_image(reflinked["img"], tmp_path / "r.img")
    xfs_db(img, *cmds, expert=True)
    assert xfs_repair_n(img) == 1
    r = fstool("repair", img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "refcountbt" in r.stdout
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    assert refcount_records(img) == want
    assert kernel_tree(img) == reflinked["tree"]


@needs_loop
def test_add_finobt(tmp_path):
    img = copy_image(kernel_churn_image(mkfs_args=("-m", "finobt=0")), tmp_path / "f.img")
    assert "features_ro_compat = 0x4" in xfs_db(img, "sb 0", "print features_ro_compat")
    r = fstool("repair", "--add-finobt", img)
    assert r.returncode == 0, r.stdout + r.stderr
    assert xfs_db(img, "sb 0", "print features_ro_compat").strip().endswith("0x5")
    for ag in (1, 2, 3):        # the secondaries carry the feature too
        assert xfs_db(img, f"sb {ag}", "print features_ro_compat").strip().endswith("0x5")
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    free_before = sum(int(x.split(",")[3]) for ag in finobt_records(img) for x in ag)
    assert free_before > 100
    # the kernel mounts it and allocates through the new trees
    with images.Mounted(img) as mnt:
        for i in range(150):
            (mnt / "d1" / f"new{i}").write_bytes(b"x")
    free_after = sum(int(x.split(",")[3]) for ag in finobt_records(img) for x in ag)
    assert free_after == free_before - 150
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    r = fstool("repair", "--add-finobt", img)
    assert r.returncode == 4 and "already has" in r.stderr


@needs_loop
def test_undo_gives_back_the_damaged_image(churn, tmp_path):
    img = copy_image(churn["img"], tmp_path / "u.img")
    xfs_db(img, "agi 1", "addr free_root", "write -d recs[2].free 0", expert=True)
    xfs_db(img, "sb 0", "write -d ifree 7", expert=True)
    damaged = digest(img)
    undo = tmp_path / "u.undo"
    r = fstool("repair", "--undo-file", undo, img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert digest(img) != damaged and xfs_repair_n(img) == 0
    r = fstool("undo", img, undo)
    assert r.returncode == 0, r.stderr
    assert digest(img) == damaged
    # applied once: the image is not what the undo file expects any more
    r = fstool("undo", img, undo)
    assert r.returncode == 7 and "changed since" in r.stderr      # refused
    # an image changed after the repair is refused, and left alone
    img2 = copy_image(churn["img"], tmp_path / "u2.img")
    xfs_db(img2, "sb 0", "write -d ifree 7", expert=True)
    assert fstool("repair", "--undo-file", undo, img2).returncode == 1
    with images.Mounted(img2) as mnt:
        (mnt / "after").write_bytes(b"y")
    changed = digest(img2)
    r = fstool("undo", img2, undo)
    assert r.returncode == 7 and "changed since" in r.stderr
    assert digest(img2) == changed


@needs_loop
def test_refuses_mounted_and_locked(churn, tmp_path):
    img = copy_image(churn["img"], tmp_path / "r.img")
    with images.Mounted(img, nouuid=True):
        # busy: 7, as every command says it (4 is for what repair cannot do)
        r = fstool("repair", img)
        assert r.returncode == 7 and "mounted" in r.stderr, r.stderr
    with open(img, "rb+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        r = fstool("repair", img)
        assert r.returncode == 7 and "another fstool" in r.stderr, r.stderr
        r = fstool("repair", "-n", img)
        assert r.returncode == 7
    # (a dirty log: see the killed repairs below)


def finding_keys(img: Path) -> tuple:
    """(check's exit status, its findings as sorted (code, structure, AG,
    inode, block, field)): what the damage is, whatever the messages say
    (they name the log's head, which a killed repair may have moved)."""
    import json
    r = fstool("check", "--json", img)
    keys = set()
    for ln in r.stdout.splitlines():
        if ln.strip():
            f = json.loads(ln)
            keys.add((f["code"], f.get("structure"), f.get("agno"), f.get("ino"),
                      f.get("block"), f.get("field")))
    return r.returncode, sorted(keys, key=repr)


def judge_killed_repairs(base: Path, tmp_path: Path, *, between=None, kernel=True,
                         tree=None) -> list:
    """Kill ``fstool repair base`` (on copies) at a handful of writes
    (fixtures.repair_kill: the first, middle and last, each side of every
    commit); once the log is replayed (``fstool log replay``; a kill after
    a commit leaves it dirty, and repair then refuses) each killed image
    must be untouched (check finds what it found before, xfs_repair -n
    still complains; with ``kernel`` the first dirty log is replayed by a
    kernel mount too, to the same findings) or repaired (xfs_repair -n and check clean, the files
    the kernel shows those of the repair run to the end: nothing lost).
    ``between`` is (name, test of the finding keys) of the one state allowed
    between them (the primary superblock restored and the rest not yet; the
    rest repaired and the log not yet formatted anew): xfs_repair -n still
    complains there, and a second repair finishes the work.  Returns the
    outcomes in kill order, which never go back, and how many kills left a
    dirty log."""
    from fixtures.repair_kill import count_writes, kill_points, repair_killed_at
    tree = tree or kernel_tree
    rc, before = finding_keys(base)
    assert rc == 1, "the damage is not damage"
    done = copy_image(base, tmp_path / "done.img")
    count = count_writes(done)
    assert count["exit"] == 1 and count["commits"], count
    assert xfs_repair_n(done) == 0 and finding_keys(done) == (0, [])
    want = tree(done)
    order = ["untouched"] + ([between[0]] if between else []) + ["repaired"]
    img = tmp_path / "k.img"
    outcomes = []
    dirty = 0
    for n in kill_points(count):
        copy_image(base, img)
        r = repair_killed_at(img, n)
        assert r.returncode == -9, f"write {n}: {r.returncode} {r.stderr}"
        rc, keys = finding_keys(img)
        if rc == 2:
            dirty += 1
            if dirty == 1:
                r = fstool("repair", img)
                assert r.returncode == 4 and "fstool log replay" in r.stderr, r.stderr
            if dirty == 1 and kernel:
                # the kernel replays it to the same state
                kern = copy_image(img, tmp_path / "kernel.img")
                with images.Mounted(kern, nouuid=True):
                    pass
            rp = fstool("log", "replay", img)
            assert rp.returncode == 0, rp.stderr
            rc, keys = finding_keys(img)
            if dirty == 1 and kernel:
                assert finding_keys(kern) == (rc, keys), f"killed after write {n}"
        if keys == before:
            outcomes.append("untouched")
            assert xfs_repair_n(img) == 1, f"killed after write {n}"
        elif between and between[1](keys):
            outcomes.append(between[0])
            assert xfs_repair_n(img) == 1, f"killed after write {n}"
            r = fstool("repair", img)
            assert r.returncode == 1 and xfs_repair_n(img) == 0, r.stdout + r.stderr
            assert finding_keys(img) == (0, []) and tree(img) == want
        else:
            assert rc == 0 and xfs_repair_n(img) == 0, \
                f"killed after write {n} of {count}: neither state: {keys[:12]}"
            assert tree(img) == want, f"killed after write {n}: files differ"
            outcomes.append("repaired")
    assert outcomes[-1] == "repaired", outcomes
    assert outcomes == sorted(outcomes, key=order.index), outcomes
    return outcomes, dirty


@needs_loop
def test_killed_repair_leaves_image_untouched_or_repaired(churn, tmp_path):
    """AG btrees rebuilt: killed at any of the chosen writes, the image is
    as damaged as before or repaired, every file there."""
    base = copy_image(churn["img"], tmp_path / "base.img")
    xfs_db(base, "agi 1", "addr free_root", "write -d recs[2].free 0", expert=True)
    xfs_db(base, "agf 0", "addr bnoroot", "write -d recs[1].blockcount 7", expert=True)
    outcomes, dirty = judge_killed_repairs(base, tmp_path)
    # early kills leave it untouched, late ones repaired
    assert outcomes[0] == "untouched", outcomes
    assert dirty, "no kill left a dirty log"
    assert kernel_tree(tmp_path / "done.img") == churn["tree"]


def test_bad_arguments_and_missing_image(tmp_path):
    r = fstool("repair", "--rebuild", "nosuchtree", tmp_path / "none.img")
    assert r.returncode == 2 and "Traceback" not in r.stderr       # a bad argument
    r = fstool("repair", tmp_path / "none.img")
    assert r.returncode == 4 and "no such file" in r.stderr
    junk = tmp_path / "junk.img"
    junk.write_bytes(b"\x00" * 65536)
    r = fstool("repair", junk)
    assert r.returncode == 4 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    r = fstool("undo", junk, tmp_path / "none.undo")
    assert r.returncode == 2 and "Traceback" not in r.stderr       # no undo file


# -- the namespace phase: directories of every form, link counts, lost+found --------
@pytest.fixture(scope="module")
def dirforms():
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    from fixtures.repair_images import kernel_dirs_image
    img, inos = kernel_dirs_image()
    # an inode free in an allocated chunk (of /sf/sub's)
    base = inos["/sf/sub"]
    out = xfs_db(img, *[c for i in range(1, 64) for c in (f"inode {base + i}",
                                                         "print core.mode")])
    modes = [ln.split("=")[1].strip() for ln in out.splitlines() if "core.mode" in ln]
    free = base + 1 + modes.index("0")
    return {"img": img, "inos": inos, "free": free}


def _sf(t, path, index, value):
    return [f"inode {t[path]}", f"write u3.sfdir3.list[{index}].inumber.i4 {value}"]


# (name, xfs_db commands from (inodes, free inode), findings check must report)
NS_DAMAGE = [
    ("nlink", lambda t, free: [f"inode {t['/blk/f003']}", "write core.nlinkv2 7"],
     {"NLINK"}),
    ("shortform-entry-free", lambda t, free: _sf(t, "/sf", 1, free),
     {"DIR_ENTRY_TARGET", "DISCONNECTED"}),
    ("block-ftype-and-dotdot", lambda t, free: [
        f"inode {t['/blk']}", "dblock 0", "write bu[4].filetype 5",
        f"write bu[1].inumber {t['/leaf']}"], {"DIR_FTYPE", "DIR_DOTDOT"}),
    ("leaf-bytes-flipped", lambda t, free: [
        f"inode {t['/leaf']}", "dblock 1", "write -d du[4].namelen 0"],
     {"DIR_CORRUPT", "DIR_LEAF", "DISCONNECTED"}),
    ("node-entry-free-and-btree", lambda t, free: [
        f"inode {t['/node']}", "dblock 2", f"write du[3].inumber {free}",
        "dblock 8388608", "write -d nbtree[0].hashval 5"],
     {"DIR_ENTRY_TARGET", "DIR_NODE", "DISCONNECTED"}),
    ("subtree-disconnected", lambda t, free: _sf(t, "/", 4, free),
     {"DIR_ENTRY_TARGET", "DISCONNECTED", "NLINK"}),
    ("multiple-parents", lambda t, free: _sf(t, "/sf", 3, t["/tree/a"]),
     {"DIR_MULTIPLE_PARENTS", "DISCONNECTED"}),
]


def mounted_files(img: Path) -> dict:
    from fixtures.repair_images import tree_files
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        return tree_files(mnt)


@needs_loop
@pytest.mark.parametrize("name,cmds,codes", NS_DAMAGE, ids=[d[0] for d in NS_DAMAGE])
def test_repair_namespace(dirforms, tmp_path, name, cmds, codes):
    """Directory damage of every form: after repair xfs_repair -n and check
    are clean, the kernel mounts it, every file xfs_repair's own repair
    keeps is there; -n changes nothing, a second repair nothing more, and
    undo gives the damaged image back."""
    from fixtures.repair_images import files_missing
    img = copy_image(dirforms["img"], tmp_path / "n.img")
    xfs_db(img, *cmds(dirforms["inos"], dirforms["free"]), expert=True)
    theirs = copy_image(img, tmp_path / "x.img")
    assert xfs_repair_n(img) == 1, "the damage is not damage"
    r = fstool("check", "--json", img)
    assert r.returncode == 1
    import json
    found = {json.loads(ln)["code"] for ln in r.stdout.splitlines() if ln.strip()}
    assert codes <= found, found
    damaged = digest(img)
    r = fstool("repair", "-n", img)
    assert r.returncode == 1 and "would change" in r.stdout, r.stdout + r.stderr
    assert digest(img) == damaged
    undo = tmp_path / "n.undo"
    repair_clean_and_idempotent(img, "--undo-file", undo)
    subprocess.run(["xfs_repair", "-f", str(theirs)], capture_output=True)
    ref = mounted_files(theirs)
    mine = mounted_files(img)
    assert files_missing(mine, ref) == []
    assert len(mine) >= len(ref) > 1800
    r = fstool("undo", img, undo)
    assert r.returncode == 0, r.stderr
    assert digest(img) == damaged


def test_files_missing_judges_against_the_original_too():
    """The corpus judge: a file counts as lost when fstool's result holds
    it neither as xfs_repair's does nor, given the undamaged image's tree,
    as it was there (xfs_repair may drop data fstool keeps)."""
    from fixtures.repair_images import files_missing
    f = 0o100644
    ref = {"a": (f, 1, "zero", 5), "b": (f, 1, "x", 6), "c": (f, 1, "x", 7)}
    mine = {"a": (f, 1, "orig", 5), "b": (f, 1, "x", 6), "c": (f, 1, "y", 7)}
    orig = {"a": (f, 1, "orig", 5), "b": (f, 1, "x", 6), "c": (f, 1, "x", 7)}
    assert files_missing(mine, ref) == ["a", "c"]
    assert files_missing(mine, ref, orig) == ["c"]
    assert files_missing({"b": mine["b"]}, ref, orig) == ["a", "c"]


def test_directory_salvage_keeps_what_parses():
    """The lenient readers: a data block's entries up to the first malformed
    one (whatever its magic), past an entry with no name whose tag is where
    it should be (xfs_repair clears it and reads on), a shortform fork's
    entries up to its size."""
    from fstool.ns import dirbuild as DB
    from fstool.fs.dirform import data, sf
    data_salvage, sf_salvage = data.salvage, sf.salvage
    ents = [(f"f{i:03d}".encode(), 1000 + i, 1) for i in range(40)]
    plan = DB.encode_dir(ents, ino=99, parent=98, uuid=bytes(16), blocksize=4096,
                         dirblksize=4096, has_ftype=True, inline_space=336)
    assert plan.local is None and len(plan.blocks) == 1
    buf = bytearray(plan.blocks[0].finish(0))
    assert data_salvage(buf, True, True) == [(b".", 99, 2), (b"..", 98, 2)] + ents
    bad = bytearray(buf)
    bad[bad.index(b"f007") - 1] = 0                 # entry 7's name length
    assert data_salvage(bad, True, True)[2:] == ents[:7] + ents[8:]
    bad[bad.index(b"f007") - 1] = 60                # its tag is no longer where it goes
    assert data_salvage(bad, True, True)[2:] == ents[:7]
    bad = bytearray(buf)
    bad[bad.index(b"f012") + 5:bad.index(b"f012") + 7] = b"\x00\x01"    # its tag
    assert data_salvage(bad, True, True)[2:] == ents[:12]
    bad = bytearray(buf)
    bad[0] ^= 0xFF                                  # a wrong magic: xfs_repair keeps them
    assert data_salvage(bad, True, True)[2:] == ents
    small = DB.encode_dir(ents[:5], ino=99, parent=98, uuid=bytes(16), blocksize=4096,
                          dirblksize=4096, has_ftype=True, inline_space=336)
    assert small.local is not None
    assert sf_salvage(small.local, small.size, True) == (98, ents[:5])
    assert sf_salvage(small.local, small.size - 1, True) == (98, ents[:4])


def test_namespace_plan_hands_its_blocks_to_the_ag_rebuild():
    """The AG rebuild sees a rebuilt directory's old blocks given up (only
    those of that directory) and its new ones taken."""
    from fstool.ops.check.base import DATA, file_owner
    from fstool.ops.repair.namespace import NamespacePlan
    ns = NamespacePlan()
    d = file_owner(500, DATA)
    other = file_owner(501, DATA)
    ns.released[1] = {d: {10, 11, 13}}
    ns.reserved[1] = [(40, 2, d)]
    claims = [(10, 5, d), (12, 1, other), (30, 3, -5)]
    assert sorted(ns.claims_for(1, claims)) == [(12, 1, d), (12, 1, other), (14, 1, d),
                                                (30, 3, -5), (40, 2, d)]
    assert ns.claims_for(0, claims) is claims
    recs = {64: (64, 0, 64, 64, (1 << 64) - 1)}
    ns.used_inodes[1] = {70}
    ns.records_for(1, recs, 64)
    assert recs[64][3] == 63 and not recs[64][4] >> 6 & 1


@needs_loop
def test_lost_and_found_is_reused(dirforms, tmp_path):
    """A second repair moves what it finds disconnected into the lost+found
    the first one made."""
    img = copy_image(dirforms["img"], tmp_path / "l.img")
    t, free = dirforms["inos"], dirforms["free"]
    xfs_db(img, *_sf(t, "/", 4, free), expert=True)          # /tree
    repair_clean_and_idempotent(img)
    a = int(xfs_db(img, f"inode {t['/sf']}", "print u3.sfdir3.list[0].inumber.i4")
            .split("=")[1])
    xfs_db(img, *_sf(t, "/sf", 0, free), expert=True)        # /sf/a
    repair_clean_and_idempotent(img)
    files = mounted_files(img)
    assert sorted(p for p in files if p.count("/") == 1 and p.startswith("lost+found/")) \
        == sorted([f"lost+found/{t['/tree']}", f"lost+found/{a}"])
    assert f"lost+found/{t['/tree']}/a/b/deep2" in files
    assert "tree" not in files and "sf/a" not in files


@needs_loop
def test_entries_to_inodes_the_inobt_hides_are_kept(dirforms, tmp_path):
    """An inobt record made all holes hides inodes in use: check calls the
    entries naming them bad, but the inodes on disk are in use.  Repair
    derives the record again from the inodes on disk, so every entry stays
    and the inodes are in use (it used to leave the namespace as it was and
    stop, exit 4)."""
    img = copy_image(dirforms["img"], tmp_path / "h.img")
    blk = dirforms["inos"]["/blk"]
    sb = xfs_db(img, "sb 0", "print agblklog inopblog")
    log = sum(int(ln.split("=")[1]) for ln in sb.splitlines())
    agno, agino = blk >> log, blk & ((1 << log) - 1)
    recs = xfs_db(img, f"agi {agno}", "addr root", "print recs")
    index = next(ln.split(":")[0] for ln in recs.splitlines()
                 if ln.split(":")[-1].startswith(f"[{agino},"))
    xfs_db(img, f"agi {agno}", "addr root", f"write -d recs[{index}].holemask 0xffff",
           expert=True)
    before = xfs_db(img, f"inode {dirforms['inos']['/']}", "print u3.sfdir3.list")
    r = fstool("repair", img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"AG {agno}: inobt record at agino {agino} derived from the inodes on disk " \
        "(holemask 0xffff -> 0x0" in r.stdout, r.stdout
    assert xfs_repair_n(img) == 0
    assert findings(img) == []
    assert xfs_db(img, f"inode {dirforms['inos']['/']}", "print u3.sfdir3.list") == before
    assert xfs_db(img, f"inode {blk}", "print core.nlinkv2").strip().endswith("= 2")

# -- the inode phase ---------------------------------------------------------------------
# Damage to inodes of the corpus base image (fixtures/corpus_base.py: every kind of
# file, fork and attr fork), several inodes per image, one damage each.

def findings(img: Path) -> list:
    import json
    out = fstool("check", "--json", img).stdout
    return [json.loads(ln) for ln in out.splitlines() if ln.strip()]


def detach(img: Path, dirino: int, victim: int) -> None:
    """Take ``victim``'s entry out of the shortform directory ``dirino`` (its
    entry is swapped with the last one, which is then cut off): the inode is
    in use but no directory names it, so that clearing it leaves nothing
    dangling (directory entries to cleared inodes are the namespace phase's)."""
    import re
    out = xfs_db(img, f"inode {dirino}", "print core.size u3")
    size = int(re.search(r"core.size = (\d+)", out).group(1))
    count = int(re.search(r"hdr.count = (\d+)", out).group(1))
    ent: dict = {}
    for m in re.finditer(r"list\[(\d+)\]\.(\w+)(?:\.i4)? = (.*)", out):
        ent.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    k = next(i for i, e in ent.items() if int(e["inumber"]) == victim)
    last = count - 1
    cmds = [f"inode {dirino}"]
    if k != last:
        cmds += [f"write -d u3.sfdir3.list[{k}].inumber.i4 {ent[last]['inumber']}",
                 f"write -d u3.sfdir3.list[{k}].filetype {ent[last]['filetype']}",
                 f"write -d u3.sfdir3.list[{last}].inumber.i4 {victim}"]
    cmds += [f"write -d core.size {size - int(ent[last]['namelen']) - 8}",
             f"write -d u3.sfdir3.hdr.count {last}"]
    xfs_db(img, *cmds, expert=True)


def files_of(tree) -> dict:
    """path -> (mode, size, contents) of a kernel_tree (link counts aside: a
    cleared inode's hard links are counted by the namespace phase; so are
    directory sizes: a directory from which xfs_repair dropped an entry
    fstool keeps is smaller)."""
    import stat
    return {p: (m, None if stat.S_ISDIR(m) else s, h) for p, m, s, _n, h in tree
            if p != "lost+found" and not p.startswith("lost+found/")}


def judge_inode_repair(img: Path, tmp_path: Path, their_exit: int = 0,
                       base: Path | None = None) -> str:
    """The issue's proof for one damaged image: -n changes no byte; the
    repair leaves xfs_repair -n and check clean, the kernel mounts it and
    every file xfs_repair's own repair keeps is there; a second run changes
    nothing; undo gives the damaged image back byte for byte.  Returns the
    repair's output.  ``their_exit``: xfs_repair's own exit status on the
    image (1 where one of its writes fails its own verifier).  With ``base``
    (the image before the damage), a file kept as ``base`` holds it counts
    as kept where xfs_repair's differs (xfs_repair kept damaged data)."""
    theirs = copy_image(img, tmp_path / "theirs.img")
    r = subprocess.run(["xfs_repair", "-f", str(theirs)], capture_output=True, text=True)
    assert r.returncode == their_exit, r.stdout[-2000:] + r.stderr[-2000:]
    damaged = digest(img)
    r = fstool("repair", "-n", img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert digest(img) == damaged
    undo = tmp_path / "i.undo"
    r = fstool("repair", "--undo-file", undo, img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert xfs_repair_n(img) == 0, subprocess.run(
        ["xfs_repair", "-n", "-f", str(img)], capture_output=True, text=True).stdout
    assert findings(img) == []
    ours = files_of(kernel_tree(img))
    ref = files_of(kernel_tree(theirs))
    # a file the kernel cannot read in xfs_repair's result counts as kept
    # when fstool's has it with the same type and size
    orig = files_of(kernel_tree(base)) if base is not None else {}
    lost = {p: v for p, v in ref.items() if ours.get(p) != v and
            not (v[2] == "unreadable" and p in ours and ours[p][:2] == v[:2]) and
            not (p in orig and ours.get(p) == orig[p])}
    assert not lost, lost
    repaired = digest(img)
    again = fstool("repair", img)
    assert again.returncode == 0 and "no problems found" in again.stdout, again.stdout
    assert digest(img) == repaired
    u = fstool("undo", img, undo)
    assert u.returncode == 0, u.stderr
    assert digest(img) == damaged
    return r.stdout


# (inode, xfs_db commands, the finding's code): fixed in place
INODE_FIXES = [
    (135005, ["write -d core.nblocks 99"], "INODE_NBLOCKS"),
    (135008, ["write -d core.nextents 5"], "INODE_NEXTENTS"),
    (135004, ["write -d core.nosymlinks 1"], "INODE_FLAGS"),
    (135, ["write -d v3.dax 1"], "INODE_FLAGS"),
    (135003, ["write -d core.extsize 16"], "INODE_EXTSIZE"),
    (135011, ["write -d v3.cowextsize 5"], "INODE_EXTSIZE"),
    (135006, ["write -d v3.bigtime 0", "write -d core.mtime.nsec 1500000000"],
     "INODE_TIMESTAMP"),
    (138, ["write -c core.uid 5"], "INODE_CORRUPT"),
    (139, ["write -d core.magic 0x1234"], "INODE_CORRUPT"),
    (140, ["write -d core.onlink 3"], "INODE_CORRUPT"),
    (141, ["write -d next_unlinked 77"], "INODE_UNLINKED"),
    (129, ["write -d core.aformat 1"], "INODE_FORMAT"),
    (135009, ["write -d u3.bmbt.keys[1].startoff 5"], "BMBT_KEY"),
    (135009, ["addr u3.bmbt.ptrs[1]", "write -d keys[2].startoff 501"], "BMBT_KEY"),
]


@pytest.fixture(scope="module")
def corpus_std():
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    from fixtures import corpus_base
    return corpus_base.base_image("std")


def damage(img: Path, cases) -> None:
    """Damage each inode of ``cases`` ((inode, xfs_db commands, code)) and
    make sure it is damage: xfs_repair -n complains, check finds the code."""
    for ino, cmds, _code in cases:
        xfs_db(img, f"inode {ino}", *cmds, expert=True)
    assert xfs_repair_n(img) == 1
    found = {(f["code"], f.get("ino")) for f in findings(img)}
    for ino, _cmds, code in cases:
        assert (code, ino) in found, (code, ino)


@needs_loop
def test_inode_fields_fixed_in_place(corpus_std, tmp_path):
    img = copy_image(corpus_std, tmp_path / "f.img")
    damage(img, INODE_FIXES)
    out = judge_inode_repair(img, tmp_path)
    for ino, _cmds, _code in INODE_FIXES:
        assert f"inode {ino}: fixed" in out, out
    # fixed, not cleared: every damaged inode is still in use with its blocks
    for ino in (135005, 135008, 135009):
        assert "core.nblocks = 0" not in xfs_db(img, f"inode {ino}", "print core.nblocks")


# (directory, inode, xfs_db commands, code): xfs_repair clears the inode
INODE_CLEARS = [
    (135002, 135014, ["write -d u3.bmbt.level 9"], "BMBT_ROOT"),       # reflinked, bmbt
    (134, 136, ["write -d core.size 3000"], "SYMLINK"),
    (131200, 131201, ["write -d core.format 1"], "INODE_FORMAT"),
    (142, 148, ["write -d core.size -- -2"], "INODE_SIZE"),
    (135002, 135012, ["write -d core.forkoff 200"], "INODE_FORKOFF"),
    (135002, 135005, ["write -d u3.bmx[0].startblock 999999999"], "INODE_EXTENT"),
    (135002, 135008, ["addr u3.bmbt.ptrs[1]", "write -d magic 0"], "BMBT_BLOCK"),
    # an extent into an inode chunk of AG 1 (xfs_repair: "claims metadata block")
    (135002, 135004, [f"write -d u3.bmx[0].startblock {(1 << 14) + 41}"], "SPACE_OVERLAP"),
]


@needs_loop
def test_inodes_cleared_and_their_blocks_freed(corpus_std, tmp_path):
    img = copy_image(corpus_std, tmp_path / "c.img")
    for dirino, ino, _cmds, _code in INODE_CLEARS:
        detach(img, dirino, ino)
    damage(img, [(ino, cmds, code) for _d, ino, cmds, code in INODE_CLEARS])
    free_before = int(xfs_db(img, "sb 0", "print fdblocks").split("=")[1])
    # the plan the namespace phase consumes names exactly these inodes
    from fstool.fs.filesystem import Filesystem
    from fstool.ops.repair.checker import repair_checker
    from fstool.ops.repair.inodes import plan_inodes
    with Filesystem(img) as fs:
        c = repair_checker(fs)
        c.run()
        assert plan_inodes(c).cleared == {ino for _d, ino, _c, _k in INODE_CLEARS}
    out = judge_inode_repair(img, tmp_path)
    for _d, ino, _cmds, _code in INODE_CLEARS:
        assert f"inode {ino}: cleared" in out
    # cleared as xfs_repair clears: free, no blocks, the rest of the core v5
    fstool("repair", img)
    core = xfs_db(img, "inode 135014", "print core.mode core.nblocks core.format v3.inumber")
    assert "core.mode = 0" in core and "core.nblocks = 0" in core and "135014" in core
    # the blocks the cleared inodes owned alone are free space: as many as
    # xfs_repair's own repair frees
    free_after = int(xfs_db(img, "sb 0", "print fdblocks").split("=")[1])
    assert free_after > free_before
    assert free_after == int(xfs_db(tmp_path / "theirs.img", "sb 0",
                                    "print fdblocks").split("=")[1])


def test_repair_hooks_hand_back_their_state_across_jobs(kernel_img, tmp_path):
    """The check repair runs keeps, through the hooks registered on its
    context, the inobt records it reported and its verdict on the inodes it
    looked at; run per AG in worker processes (--jobs), each worker's are
    merged back as the check's own tables are."""
    from fstool.fs.filesystem import Filesystem
    from fstool.ops.repair.checker import repair_checker
    img = copy_image(kernel_img, tmp_path / "j.img")
    start = int(xfs_db(img, "agi 2", "addr root", "print recs[1].startino").split("=")[1])
    xfs_db(img, "agi 2", "addr root", "write -d recs[1].freecount 5", expert=True)
    got = []
    with Filesystem(img) as fs:
        for jobs in (1, 3):
            c = repair_checker(fs)
            c.run(jobs)
            got.append((sorted(f.code for f in c.findings), c.hooks.suspect, c.hooks.verdicts))
    assert got[0] == got[1]
    assert "INOBT_RECORD" in got[0][0] and got[0][1] == {2: [start]}
    # verdicts from inodes of more than one AG (so from more than one worker)
    assert len({ino >> fs.sb.agino_log for ino in got[0][2]}) > 1


# attr forks xfs_repair drops (or, for a block only the kernel refuses, restamps)
ATTR_DAMAGE = [
    (144, ["ablock 0", "write -d hdr.count 999"], "XATTR"),
    (147, ["write -d a.bmbt.level 9"], "BMBT_ROOT"),
    (143, ["write -d a.sfattr.hdr.totsize 2"], "XATTR"),
    (145, ["ablock 4", "write -c hdr.info.owner 999"], "XATTR_VERIFY"),
    # a data fork in btree format: its root's pointers move with the fork
    # (xfs_repair leaves them where they were, finds the data fork bad and
    # clears the file: fstool keeps it)
    (135009, ["write -d core.aformat 7"], "INODE_FORMAT"),
]


@needs_loop
def test_attr_blocks_with_a_bad_crc(corpus_std, tmp_path):
    """Attr blocks whose only fault is their CRC (a leaf block 0; a
    da-btree root and a leaf of its chain) and a leaf whose free map is
    wrong under a stale CRC: xfs_repair 6.10.1 -n reports each ("bad
    checksum for block N in attribute fork"; 6.1 let them pass), and so
    does check (XATTR_CRC, an error; it used to be the warning
    XATTR_VERIFY).  Repair rewrites the CRC of the sound blocks, whose
    attributes stay, as xfs_repair does, and drops the broken one's attr
    fork: xfs_repair 6.1 and 6.10.1 -n clean after."""
    from fixtures import modern
    if not modern.available():
        pytest.skip(modern.WHY)
    img = copy_image(corpus_std, tmp_path / "c.img")
    bad_crc = "write -c hdr.info.crc 0x12345678"
    xfs_db(img, "inode 144", "ablock 0", bad_crc, "inode 145", "ablock 0", bad_crc,
           "inode 145", "ablock 2", bad_crc,
           "inode 146", "ablock 0", "write -c hdr.freemap[0].base 6", expert=True)
    assert modern.repair_n(img).returncode == 1
    found = {(f["code"], f["ino"], f["offset"]) for f in findings(img)}
    assert found == {("XATTR_CRC", 144, 0), ("XATTR_CRC", 145, 0), ("XATTR_CRC", 145, 2),
                     ("XATTR_CRC", 146, 0)}, found
    # (xfs_repair's own repair stops: it rewrites the broken leaf with its
    # CRC recomputed and its write verifier refuses the block)
    out = judge_inode_repair(img, tmp_path, their_exit=1)
    assert "inode 144: fixed: identity and CRC of attr blocks 0" in out, out
    assert "inode 145: fixed: identity and CRC of attr blocks 0, 2" in out, out
    assert "inode 146: fixed: attr fork dropped" in out, out
    assert fstool("repair", img).returncode == 1      # (the judge ends with undo)
    assert modern.repair_problems(img) == []
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        assert len(os.listxattr(mnt / "xattrs" / "leaf")) == 25
        assert len(os.listxattr(mnt / "xattrs" / "node")) == 600
        assert os.listxattr(mnt / "xattrs" / "remote") == []


@needs_loop
def test_attr_forks_dropped_or_restamped(corpus_std, tmp_path):
    img = copy_image(corpus_std, tmp_path / "a.img")
    damage(img, ATTR_DAMAGE)
    out = judge_inode_repair(img, tmp_path)
    fstool("repair", img)
    assert "inode 144: fixed: attr fork dropped" in out
    assert "inode 147: fixed: attr fork dropped" in out
    assert "inode 145: fixed: identity and CRC of attr blocks 4" in out
    assert "inode 135009: fixed: attr fork dropped" in out
    for ino in (143, 144, 147, 135009):
        core = xfs_db(img, f"inode {ino}", "print core.forkoff core.naextents")
        assert "core.forkoff = 0" in core and "core.naextents = 0" in core
    # the restamped attr fork keeps its attributes: the kernel lists them
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        assert len(os.listxattr(mnt / "xattrs" / "node")) > 10


@needs_loop
def test_free_inodes_unlinked_lists_quota_inodes_attr_nodes(corpus_std, tmp_path):
    img = copy_image(corpus_std, tmp_path / "u.img")
    damage(img, [(145, ["ablock 0", "write -d btree[2].hashval 5"], "XATTR_NODE_HASH")])
    xfs_db(img, "inode 273342", "write -d core.nblocks 5", expert=True)     # free inode
    xfs_db(img, "agi 2", "write -d unlinked[1] 11073", expert=True)        # a free inode
    xfs_db(img, "agi 0", "write -d unlinked[9] 137", expert=True)          # a linked one
    xfs_db(img, "sb 0", "write -d uquotino 5000", expert=True)
    assert xfs_repair_n(img) == 1
    codes = [(f["code"], f.get("agno")) for f in findings(img)]
    for want in (("INODE_FREE", 2), ("AGI_UNLINKED", 2), ("AGI_UNLINKED", 0),
                 ("SB_QUOTINO", 0)):
        assert want in codes, codes
    out = judge_inode_repair(img, tmp_path)
    assert "inode 273342: free inode re-initialised" in out
    # a node entry's hash corrected in place, as xfs_repair does: the
    # attributes stay
    assert "inode 145: fixed: hashes of attr node entries" in out
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        assert len(os.listxattr(mnt / "xattrs" / "node")) > 10
    fstool("repair", img)
    assert xfs_db(img, "agi 0", "print unlinked").split("=")[1].strip() == ""
    assert xfs_db(img, "sb 0", "print uquotino").split("=")[1].strip() == "null"


@needs_loop
def test_cleared_inode_entry_removed_by_namespace_phase(churn, tmp_path):
    """The two phases together: the inode phase clears a file whose fork
    format is invalid, the namespace phase drops the entry naming it, in
    one repair; everything else stays as the kernel wrote it."""
    img = copy_image(churn["img"], tmp_path / "c.img")
    name = fstool("ls", img, "/d3").stdout.split()[0]
    st = fstool("stat", img, f"/d3/{name}").stdout
    ino = int(st.split("Inode:")[1].split()[0])
    xfs_db(img, f"inode {ino}", "write core.format 7", expert=True)
    assert xfs_repair_n(img) == 1
    r = fstool("repair", img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"inode {ino}: cleared" in r.stdout
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    def files(tree):        # a rebuilt directory may be smaller: sizes of files only
        return [t if not stat.S_ISDIR(t[1]) else t[:2] + t[3:] for t in tree]
    assert files(kernel_tree(img)) == files([t for t in churn["tree"]
                                             if t[0] != f"d3/{name}"])


@needs_loop
def test_bmbt_block_with_only_a_bad_crc_is_rewritten(tmp_path):
    """A bmbt block whose only fault is its CRC: xfs_repair rewrites the CRC
    and keeps the file; so does fstool (it used to clear the file)."""
    from fixtures import corpus
    case = {"geometry": "std", "seed": 1, "n": 195, "target": "bmbt u3 file_bmbt2 first",
            "select": ["inode 135009", "addr u3.bmbt.ptrs[1]"], "kind": "fuzz",
            "field": "crc", "verb": "lastbit", "crc": "-c"}
    img = tmp_path / "b.img"
    assert corpus.make_case(img, case)
    ref = copy_image(img, tmp_path / "ref.img")
    assert xfs_repair_n(img) == 1
    subprocess.run(["xfs_repair", str(ref)], capture_output=True, check=True)
    r = fstool("repair", img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "inode 135009: fixed: CRC of bmbt blocks" in r.stdout
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    # the file is kept, mapped as xfs_repair's repair keeps it
    cmds = ["inode 135009", "print core.mode core.size core.nextents"]
    assert xfs_db(img, *cmds) == xfs_db(ref, *cmds)
    assert "core.mode = 0\n" not in xfs_db(img, *cmds)


# -- killed repairs of every phase (judge_killed_repairs above) --------------------------

@needs_loop
def test_killed_inode_repair(corpus_std, tmp_path):
    """The inode phase: fields fixed in place, inodes cleared and their
    blocks freed; killed at any chosen write, untouched or repaired."""
    base = copy_image(corpus_std, tmp_path / "base.img")
    clears = [c for c in INODE_CLEARS if c[3] in ("BMBT_ROOT", "SYMLINK")]
    for dirino, ino, _cmds, _code in clears:
        detach(base, dirino, ino)
    damage(base, [c for c in INODE_FIXES if c[2] in ("INODE_NBLOCKS", "INODE_FLAGS")] +
           [(ino, cmds, code) for _d, ino, cmds, code in clears])
    outcomes, _dirty = judge_killed_repairs(base, tmp_path)
    assert outcomes[0] == "untouched", outcomes
    out = fstool("repair", "-n", base).stdout
    assert "inode 135014: cleared" in out and "inode 135005: fixed" in out


@needs_loop
def test_killed_namespace_repair(dirforms, tmp_path):
    """The namespace phase: entries removed, a subtree moved to lost+found,
    link counts set; killed at any chosen write, untouched or repaired."""
    t, free = dirforms["inos"], dirforms["free"]
    base = copy_image(dirforms["img"], tmp_path / "base.img")
    for name, cmds, _codes in NS_DAMAGE:
        if name in ("nlink", "leaf-bytes-flipped", "subtree-disconnected"):
            xfs_db(base, *cmds(t, free), expert=True)
    outcomes, _dirty = judge_killed_repairs(base, tmp_path)
    assert outcomes[0] == "untouched", outcomes
    files = mounted_files(tmp_path / "done.img")
    assert f"lost+found/{t['/tree']}/a/b/deep2" in files


@needs_loop
def test_killed_primary_superblock_restore(churn, tmp_path):
    """The primary superblock is restored from a secondary (one sector,
    written and flushed) before the transaction: killed between, the
    primary is restored and the rest as it was (a second repair finishes);
    killed later, untouched by the rest or repaired."""
    base = copy_image(churn["img"], tmp_path / "base.img")
    xfs_db(base, "sb 0", "write -d agblocks 77", expert=True)
    # what the restore alone leaves: the secondary's counters, which the
    # transaction sums again
    alone = copy_image(base, tmp_path / "alone.img")
    from fstool.io.device import Device
    from fstool.ops.repair import primary
    dev = Device(alone, writable=True)
    try:
        primary.restore(dev, primary.find(dev, primary.trouble(dev)))
    finally:
        dev.close()
    rc, keys = finding_keys(alone)
    assert rc == 1 and keys, keys
    outcomes, _dirty = judge_killed_repairs(base, tmp_path,
                                            between=("primary", lambda k: k == keys))
    assert outcomes[0] == "primary", outcomes
    assert kernel_tree(tmp_path / "done.img") == churn["tree"]


@needs_loop
def test_killed_repair_with_log_reformat(churn, tmp_path):
    """Metadata stamped past the log's head (LSN_AHEAD) besides btree
    damage: the rebuild is committed through the log, then the log is
    formatted anew past the highest LSN.  Killed before the commit, the
    image is untouched; between the commit and the end of the format, all
    is repaired but the log's cycle (the format zeroes block 0 first: a log
    of zeroes, never a mixture; the superblock, stamped by the commit, is
    then ahead of it too), and a second repair formats it."""
    base = copy_image(churn["img"], tmp_path / "base.img")
    xfs_db(base, "agf 1", "write -d lsn 0x0000100000000010", expert=True)
    xfs_db(base, "agf 0", "addr bnoroot", "write -d recs[1].blockcount 7", expert=True)
    # (the kernel does not replay a log onto metadata stamped ahead of it:
    # "Structure needs cleaning"; fstool log replay does)
    outcomes, _dirty = judge_killed_repairs(
        base, tmp_path, between=("log", lambda k: {c[0] for c in k} in
                                 ({"LSN_AHEAD"}, {"LSN_AHEAD", "SB_LSN_AHEAD"})),
        kernel=False)
    assert outcomes[0] == "untouched" and "log" in outcomes, outcomes
    assert kernel_tree(tmp_path / "done.img") == churn["tree"]
