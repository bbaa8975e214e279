"""Parent pointers read and checked, against the kernel that wrote them and
xfs_repair 6.10.1 (fixtures/pptr.py).

The suite's run is a fixed sample (about a minute and a half): the reading
and check tests run on the default geometry (the clean check on every
geometry), and repair takes one damage of each kind (pointer content,
generation, attr fork dropped, directory entry) and one of the corpus's
regression cases, each on a geometry drawn with a fixed seed.
``FSTOOL_PPTR_FULL=1`` runs everything on every geometry: every damage and
every corpus case (some four minutes more)."""
import hashlib
import json
import os
import random
import re
import subprocess
import sys

import pytest

import fstool as fsmod
from fixtures import corpus_pptr, dirty, modern, pptr
from fixtures.images import Mounted, data_ranges
from fstool.cli import main as climain
from fstool.cli import path_run as clipath
from fstool.errors import UnsupportedError
from fstool.fs import dir as xdir
from fstool.ns.writer import Writer
from fstool.ops.names import shown_name

GEOMETRIES = [(), ("-m", "rmapbt=0")]
FULL = os.environ.get("FSTOOL_PPTR_FULL", "") not in ("", "0")


def _geo_id(geo):
    return "".join(geo) or "default"


def sampled(groups, seed):
    """Every (geometry, case) of ``groups`` (lists of cases of one kind)
    with FSTOOL_PPTR_FULL=1; otherwise one case of each kind, on a
    geometry, both drawn with ``seed``."""
    if FULL:
        return [(g, c) for group in groups for c in group for g in GEOMETRIES]
    rng = random.Random(seed)
    return [(rng.choice(GEOMETRIES), rng.choice(group)) for group in groups]


def fstool(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, env=env)


def _image(geo):
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    return pptr.pptr_image(geo)


@pytest.fixture(scope="module", params=GEOMETRIES if FULL else GEOMETRIES[:1], ids=_geo_id)
def pimg(request):
    return _image(request.param)


def copy(img, tmp_path, name="p.img"):
    return dirty.copy(img, tmp_path / name)


def db(img, *cmds, write=False):
    return modern.db(img, *cmds, write=write)


# -- the image holds what the test is about ------------------------------------------------

def test_parent_pointers_in_every_attr_fork_form(pimg):
    """Parent pointers in shortform, leaf and node forks (beside remote
    values); every directory form; names of 255 bytes."""
    with fsmod.open_image(pimg) as fs:
        ino = {p: fs.lstat(p).st_ino for p in ("/pptr/forms/sf", "/pptr/forms/leaf",
                                               "/pptr/forms/node", "/pptr/forms/remote",
                                               "/pptr/hub/origin")}
        assert len(fs.parents("/pptr/hub/origin")) == 1 + 40 + 400
        assert max(len(p.name) for p in fs.parents("/pptr/hub/origin")) == 255
        forms = {d: fs.inode(fs.lstat(f"/dirs/{d}").st_ino) for d in ("d2", "d50", "d500")}
        assert [xdir.form(n) for n in forms.values()] == ["shortform", "block", "leaf"]
    assert re.search(r"core\.aformat = 1", db(pimg, f"inode {ino['/pptr/forms/sf']}", "print"))
    for name in ("/pptr/forms/leaf", "/pptr/forms/remote"):
        out = db(pimg, f"inode {ino[name]}", "ablock 0", "print")
        assert "hdr.info.hdr.magic = 0x3bee" in out, name
    for name in ("/pptr/forms/node", "/pptr/hub/origin"):
        out = db(pimg, f"inode {ino[name]}", "ablock 0", "print")
        assert "hdr.info.hdr.magic = 0x3ebe" in out, name      # da-btree node


# -- reading ---------------------------------------------------------------------------------

def test_path_all_equals_find(pimg):
    """fstool path --all gives every path of every inode, as find -inum on
    the kernel's mount lists them."""
    want = pptr.load_paths(pimg)
    r = fstool("path", "--all", "--json", pimg)
    assert r.returncode == 0, r.stderr
    got = {}
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        assert rec["broken"] == []
        got[rec["ino"]] = sorted(rec["paths"])
    assert got == want
    assert sum(len(v) for v in want.values()) > 11000


def _lines(text: str) -> dict:
    """{inode: sorted paths} of "INO PATH" lines, which must come in inode order."""
    got: dict = {}
    inos = []
    for line in text.splitlines():
        ino, path = line.split(" ", 1)
        inos.append(int(ino))
        got.setdefault(int(ino), []).append(path)
    assert inos == sorted(inos)
    return {k: sorted(v) for k, v in got.items()}


def _shown(paths: dict) -> dict:
    """find's paths as fstool shows names (control characters, backslashes
    and bytes that are not UTF-8 escaped)."""
    return {k: sorted(shown_name(p) for p in v) for k, v in paths.items()}


def test_path_all_text_equals_find(pimg):
    """fstool path --all's text (written natively, in one buffer): every
    path of every inode, as find -inum lists them; the pure-Python
    backend writes the same bytes."""
    r = fstool("path", "--all", pimg)
    assert r.returncode == 0, r.stderr
    assert _lines(r.stdout) == _shown(pptr.load_paths(pimg))
    pure = fstool("path", "--all", pimg, env=dict(os.environ, FSTOOL_PURE_PYTHON="1"))
    assert pure.returncode == 0 and pure.stdout == r.stdout


def test_path_all_into_a_pipe_closed_early(pimg, monkeypatch):
    """path --all | head: the reader going away while the text is written
    ends the command quietly with status 0, as other commands end."""

    def closed(_text):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(clipath, "_utf8_writer", lambda out: closed)
    with pytest.raises(SystemExit) as stop:
        climain.main(["path", "--all", str(pimg)])
    assert stop.value.code == 0
    # and through a real pipe
    p = subprocess.Popen([sys.executable, "-m", "fstool", "path", "--all", str(pimg)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0 and err == b"", err


def test_path_of_one_inode(pimg):
    want = pptr.load_paths(pimg)
    ino = max(want, key=lambda i: len(want[i]))          # the hub: 441 paths
    r = fstool("path", pimg, ino)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == want[ino]
    root = next(i for i, v in want.items() if v == ["/"])
    r = fstool("path", pimg, root, ino)
    lines = r.stdout.splitlines()
    assert lines[0] == f"{root} /" and len(lines) == 1 + len(want[ino])
    assert all(line.startswith(f"{ino} /") for line in lines[1:])


def test_api_parents_and_paths(pimg):
    with fsmod.open_image(pimg) as fs:
        links = fs.parents("/links/b/shared-too")
        want = {(fs.lstat(d).st_ino, n) for d, n in (("/links/a", b"shared"),
                                                     ("/links/b", b"shared-too"),
                                                     ("/links/c", b"and-again"))}
        assert {(p.ino, p.name) for p in links} == want
        assert all(p.gen == fs.inode(p.ino).gen for p in links)
        assert sorted(fs.paths("/links/a/shared")) == ["/links/a/shared", "/links/b/shared-too",
                                                       "/links/c/and-again"]
        # a symlink's own parent, not its target's
        assert [p.name for p in fs.parents("/symlinks/short")] == [b"short"]
        assert fs.parents("/") == []
        # user xattr listings leave the parent namespace out
        assert sorted(fs.xattr_names("/pptr/forms/leaf")) == [f"user.leaf-{i:04d}" for i in range(40)]
        assert fs.xattrs("/pptr/hub/origin") == {}


def test_stat_and_ls_show_parents(pimg):
    r = fstool("stat", "--json", pimg, "/pptr/forms/sf")
    rec = json.loads(r.stdout)
    assert sorted(p["name"] for p in rec["parents"]) == ["sf", "sf-too"]
    r = fstool("stat", pimg, "/pptr/forms/sf")
    assert sum(1 for line in r.stdout.splitlines() if line.startswith("Parent: ")) == 2
    r = fstool("ls", "--json", "--parents", pimg, "/pptr/other")
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert all(len(rec["parents"]) >= 2 for rec in recs)
    r = fstool("ls", "--json", pimg, "/pptr/other")
    assert all("parents" not in json.loads(line) for line in r.stdout.splitlines())
    r = fstool("ls", "--parents", pimg, "/")
    assert r.returncode != 0 and "--json" in r.stderr and "Traceback" not in r.stderr


def test_path_refuses_filesystems_without_parent_pointers(kernel_img):
    r = fstool("path", kernel_img, 128)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "no parent pointers" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = fstool("path", kernel_img)
    assert r.returncode != 0 and "inode number" in r.stderr


def _stale_generation(pimg, tmp_path):
    """A copy of ``pimg`` where /pptr/forms/sf's pointer from /pptr/other
    records generation 12345: (image, the file's inode, the directory's)."""
    img = copy(pimg, tmp_path)
    with fsmod.open_image(img) as fs:
        ino = fs.lstat("/pptr/forms/sf").st_ino
        other = fs.lstat("/pptr/other").st_ino
    out = db(img, f"inode {ino}", "print a", write=True)
    k = next(int(m.group(1)) for m in re.finditer(
        r"a\.sfattr\.list\[(\d+)\]\.parent_dir\.inumber = (\d+)", out)
        if int(m.group(2)) == other)
    db(img, f"inode {ino}", f"write a.sfattr.list[{k}].parent_dir.gen 12345", write=True)
    return img, ino, other


def test_path_reports_a_stale_generation(pimg, tmp_path):
    """A parent pointer whose directory has another generation leads
    nowhere: the path is left out, the pointer named, exit 1."""
    img, ino, _other = _stale_generation(pimg, tmp_path)
    r = fstool("path", img, ino)
    assert r.returncode == 1
    assert r.stdout.splitlines() == ["/pptr/forms/sf"]
    assert "generation" in r.stderr and "Traceback" not in r.stderr


def test_path_all_reports_a_stale_generation(pimg, tmp_path):
    """--all leaves the stale pointer's path out of the text and --json
    alike, names the pointer once (on stderr, or in "broken") and exits 1;
    every other path is as find lists it."""
    img, ino, other = _stale_generation(pimg, tmp_path)
    want = pptr.load_paths(pimg)
    want[ino] = ["/pptr/forms/sf"]
    r = fstool("path", "--all", img)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert _lines(r.stdout) == _shown(want)
    with fsmod.open_image(img) as fs:
        gen = fs.inode(other).gen
    assert r.stderr.splitlines() == [f"fstool: inode {ino}: parent pointer {other}/sf-too: "
                                     f"directory {other} has generation {gen}, not 12345"]
    j = fstool("path", "--all", "--json", img)
    assert j.returncode == 1
    broken = [rec for rec in map(json.loads, j.stdout.splitlines()) if rec["broken"]]
    assert broken == [{"ino": ino, "paths": ["/pptr/forms/sf"], "broken": [
        {"parent": other, "gen": 12345, "name": "sf-too",
         "why": f"directory {other} has generation {gen}, not 12345"}]}]


# -- checking ----------------------------------------------------------------------------------

@pytest.mark.parametrize("geo", GEOMETRIES, ids=_geo_id)
def test_check_is_clean_as_xfs_repair_is(geo):
    pimg = _image(geo)
    assert modern.repair_n(pimg).returncode == 0
    r = fstool("check", pimg)
    assert r.returncode == 0, r.stdout[-3000:]


def test_check_pure_backend_is_clean(pimg):
    env = dict(os.environ, FSTOOL_PURE_PYTHON="1")
    r = fstool("check", pimg, env=env)
    assert r.returncode == 0, r.stdout[-3000:]


def _codes(img):
    r = fstool("check", "--json", img)
    assert "Traceback" not in r.stderr
    return r.returncode, {json.loads(line)["code"] for line in r.stdout.splitlines()}


def _repair_says(img):
    r = modern.repair_n(img)
    return r.returncode, r.stdout + r.stderr


def _sf_entry(img, ino, name):
    out = db(img, f"inode {ino}", "print a")
    return next(int(m.group(1)) for m in re.finditer(
        r'a\.sfattr\.list\[(\d+)\]\.name = "([^"]*)"', out) if m.group(2) == name)


def _break_leaf_hash(img, ino, ablock, parent):
    """The hash of the first local entry of attr leaf ``ablock`` of inode
    ``ino`` that is (``parent``) or is not a parent pointer set to 3."""
    out = db(img, f"inode {ino}", f"ablock {ablock}", "print")
    i = next(int(m.group(1)) for m in re.finditer(
        rf"^(\d+):\[0x[0-9a-f]+,\d+,0,0,0,1,{int(parent)}\]", out, re.M))
    db(img, f"inode {ino}", f"ablock {ablock}", f"write -d entries[{i}].hashval 3", write=True)


def _damage(img, damage):
    with fsmod.open_image(img) as fs:
        ino = fs.lstat("/pptr/forms/sf").st_ino
        other = fs.lstat("/pptr/other").st_ino
        leaf = fs.lstat("/pptr/forms/leaf").st_ino
    k = _sf_entry(img, ino, "sf")
    sel = [f"inode {ino}"]
    if damage == "name":
        db(img, *sel, f'write a.sfattr.list[{k}].name "xf"', write=True)
    elif damage == "gen":
        db(img, *sel, f"write a.sfattr.list[{k}].parent_dir.gen 7", write=True)
    elif damage == "ino":
        db(img, *sel, f"write a.sfattr.list[{k}].parent_dir.inumber {other}", write=True)
    elif damage == "gen-crc":
        # the inode's CRC left wrong: xfs_repair -n cannot load it to compare
        # its pointers, repair mends the CRC and then finds the generation
        db(img, *sel, f"write -c a.sfattr.list[{k}].parent_dir.gen 7", write=True)
    elif damage == "garbage-ino":
        db(img, *sel, f"write a.sfattr.list[{k}].parent_dir.inumber 3", write=True)
    elif damage == "remove":
        # the last entry is the pointer from /pptr/other: the fork ends sooner
        out = db(img, *sel, "print a")
        count = int(re.search(r"hdr\.count = (\d+)", out).group(1))
        total = int(re.search(r"hdr\.totsize = (\d+)", out).group(1))
        assert _sf_entry(img, ino, "sf-too") == count - 1
        db(img, *sel, f"write a.sfattr.hdr.count {count - 1}",
           f"write a.sfattr.hdr.totsize {total - 3 - len('sf-too') - 12}", write=True)
    elif damage == "local-flag":
        # the local flag on a shortform parent pointer: the kernel's
        # shortform verifier refuses the fork (so does xfs_repair 6.10.1)
        off = int(db(img, *sel, "stack").split("byte offset ")[1].split(",")[0])
        forkoff = int(db(img, *sel, "print core.forkoff").split("= ")[1])
        assert k == 0           # the fork's first entry: its flags follow the 4-byte
        at = off + 176 + 8 * forkoff + 4 + 2    # header, its name and value lengths
        with open(img, "r+b") as f:
            f.seek(at)
            flags = f.read(1)[0]
            f.seek(at)
            f.write(bytes([flags | 1]))
        db(img, *sel, "crc -r", write=True)
    elif damage == "slash":
        # a parent pointer whose name holds '/': the entry is junked, the
        # pointer its entry wants added again
        db(img, *sel, f'write a.sfattr.list[{k}].name "s/"', write=True)
    elif damage == "leaf-block":
        # a user attribute's hash in the leaf block broken: the fork is
        # dropped, its parent pointers made again in shortform
        _break_leaf_hash(img, leaf, 0, parent=False)
    elif damage == "hub-leaf":
        # a parent pointer's hash broken in a leaf of a file with 441 links:
        # the fork is dropped, its pointers made again in blocks
        with fsmod.open_image(img) as fs:
            hub = fs.lstat("/pptr/hub/origin").st_ino
        _break_leaf_hash(img, hub, 1, parent=True)
    elif damage == "dirgen":
        # every pointer to /pptr/hub/dir-01 goes stale
        with fsmod.open_image(img) as fs:
            d = fs.lstat("/pptr/hub/dir-01").st_ino
        db(img, f"inode {d}", "write core.gen 12345", write=True)
    elif damage == "entry":
        # a directory entry's inode number changed: the entry names another
        # file, whose pointers and the first one's are set right (the first
        # loses a link, the other gains one)
        with fsmod.open_image(img) as fs:
            target = fs.lstat("/pptr/renames/a/renamed-01").st_ino
        out = db(img, f"inode {other}", "dblock 0", "print")
        i = next(int(m.group(1)) for m in re.finditer(r"bu\[(\d+)\]\.name = \"sf-too\"", out))
        db(img, f"inode {other}", "dblock 0", f"write -d bu[{i}].inumber {target}", write=True)


@pytest.mark.parametrize("damage,codes,said", [
    # the case: a parent pointer renamed, so no entry matches it
    ("name", {"PARENT_MISSING", "PARENT_BAD"}, ("would add missing", "would remove bad")),
    ("gen", {"PARENT_BAD"}, ("would update ino",)),
    ("ino", {"PARENT_BAD", "PARENT_MISSING"}, ("would add missing", "would remove bad")),
    ("garbage-ino", {"PARENT_GARBAGE", "PARENT_MISSING"}, ("garbage", "would add missing")),
    ("remove", {"PARENT_MISSING"}, ("would add missing",)),
    ("local-flag", {"XATTR"}, ("shortform attr verifier failure",)),
])
def test_check_finds_what_xfs_repair_finds(pimg, tmp_path, damage, codes, said):
    img = copy(pimg, tmp_path)
    _damage(img, damage)
    rc, text = _repair_says(img)
    assert rc == 1 and all(s in text for s in said), text
    rc, found = _codes(img)
    assert rc == 1
    assert codes <= found, found


def test_check_leaf_parent_pointer_hash(pimg, tmp_path):
    """A parent pointer in a leaf block hashes with its parent's inode
    number: a clean image has no hash findings (it used to), and a wrong
    hash is found as xfs_repair finds it."""
    img = copy(pimg, tmp_path)
    with fsmod.open_image(img) as fs:
        ino = fs.lstat("/pptr/forms/leaf").st_ino
    out = db(img, f"inode {ino}", "ablock 0", "print")
    i = next(int(m.group(1)) for m in re.finditer(
        r"^(\d+):\[0x[0-9a-f]+,\d+,0,0,0,1,1\]", out, re.M))       # a local parent pointer
    db(img, f"inode {ino}", "ablock 0", f"write -d entries[{i}].hashval 1", write=True)
    rc, text = _repair_says(img)
    assert rc == 1 and "bad hashvalue" in text
    rc, found = _codes(img)
    assert rc == 1 and "XATTR" in found


def test_check_parent_feature_bit(pimg, tmp_path):
    """Without the parent feature, parent-namespace attributes are damage;
    the exchange-range bit alone changes nothing."""
    img = copy(pimg, tmp_path)
    sb = db(img, "sb 0", "print features_incompat agcount")
    feat = int(re.search(r"features_incompat = (0x[0-9a-f]+)", sb).group(1), 16)
    agcount = int(re.search(r"agcount = (\d+)", sb).group(1))

    def set_all(value):
        db(img, *(c for a in range(agcount)
                  for c in (f"sb {a}", f"write features_incompat {value}")), write=True)
    set_all(feat & ~0x40)
    assert _repair_says(img)[0] == _codes(img)[0] == 0
    set_all(feat & ~0xC0)
    rc, text = _repair_says(img)
    assert rc == 1 and "parent pointer found" in text
    rc, found = _codes(img)
    assert rc == 1 and "XATTR" in found


# -- writers that do not keep parent pointers refuse them --------------------------------

def _digest(img):
    """A digest of the image's data regions (holes read as zeros: a sparse
    1 GiB image is hashed at the speed of its 80 MiB of data)."""
    h = hashlib.sha256()
    with open(img, "rb") as f:
        fd = f.fileno()
        end = os.fstat(fd).st_size
        for pos, stop in data_ranges(fd, end):
            h.update(pos.to_bytes(8, "big") + os.pread(fd, stop - pos, pos))
        h.update(end.to_bytes(8, "big"))
    return h.hexdigest()


def test_writers_without_parent_pointers_refuse_in_one_line(pimg, tmp_path):
    """A Writer not opened to keep parent pointers (library code that does
    not go through the namespace layer) refuses a parent-pointer image with
    one line naming the feature, and leaves it as it was; every command's
    writer keeps them (populate, the edits, admin, the mount, log replay
    and resize: tests/test_pptr_writers.py)."""
    img = copy(pimg, tmp_path)
    before = _digest(img)
    with pytest.raises(UnsupportedError, match="parent pointers") as e:
        Writer(img)
    assert "\n" not in str(e.value)
    assert _digest(img) == before


# -- the log ---------------------------------------------------------------------------------

def test_log_print_counts_the_items_xfs_logprint_counts(tmp_path):
    """A log the kernel left dirty with parent pointer and exchange-range
    intents: fstool log print -t sees as many items of each type as
    xfs_logprint 6.10.1 -t, and the ATTRI items name the parent pointers
    xfs_logprint prints."""
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    img = pptr.dirty_pptr_image()
    theirs = pptr.logprint_items(img)
    r = fstool("log", "print", "--transactions", "--json", img)
    assert r.returncode == 0, r.stderr
    counts, pptrs = {}, []
    for line in r.stdout.splitlines():
        for it in json.loads(line)["items"]:
            counts[it["type"]] = counts.get(it["type"], 0) + 1
            for p in it.get("pptr", ()):
                pptrs.append((p["tag"], p["p_ino"], p["p_gen"], p["name"]))
    assert theirs["counts"]["ATTRI"] >= 1
    assert {k: v for k, v in counts.items() if k in theirs["counts"]} == theirs["counts"]
    assert set(counts) <= set(theirs["counts"]) | {"TRANS"}
    assert pptrs == theirs["pptrs"]
    text = fstool("log", "print", "--transactions", img).stdout
    assert sum(1 for line in text.splitlines() if "PPTR: NAME parent_ino" in line) == \
        sum(1 for t in theirs["pptrs"] if t[0] == "NAME")
    if theirs["counts"].get("XMI"):
        assert re.search(r"XMI:  #regs: \d+\tnum_extents: 1  id: 0x[0-9a-f]+", text)
        assert re.search(r"\(ino1: 0x[0-9a-f]+, igen1: 0x[0-9a-f]+, ino2: 0x[0-9a-f]+", text)


# -- repairing -------------------------------------------------------------------------------

def _kernel_paths(img):
    """Every path the kernel shows in ``img`` (lost+found aside), with its
    file type."""
    with Mounted(img, readonly=True, nouuid=True) as mnt:
        out = set()
        for dirpath, dirnames, filenames in os.walk(mnt):
            for name in dirnames + filenames:
                rel = os.path.relpath(os.path.join(dirpath, name), mnt)
                if not rel.startswith("lost+found"):
                    out.add(rel)
        return out


def _repaired_as_xfs_repair(img, tmp_path):
    """fstool repair of ``img`` leaves what xfs_repair 6.10.1 -n and check
    call clean, every path xfs_repair 6.10.1's own repair keeps, and
    nothing to do for a second run; returns what it printed."""
    assert modern.repair_n(img).returncode == 1
    theirs = copy(img, tmp_path, "theirs.img")
    subprocess.run([modern.tool("xfs_repair"), "-f", str(theirs)], capture_output=True)
    r = fstool("repair", img)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert modern.repair_n(img).returncode == 0, modern.repair_n(img).stderr[-3000:]
    assert fstool("check", img).returncode == 0
    lost = _kernel_paths(theirs) - _kernel_paths(img)
    assert not lost, sorted(lost)[:10]
    assert fstool("repair", img).returncode == 0          # nothing left to do
    return r.stdout


# the damages repair mends, by kind: a pointer's content (rewritten), a
# generation (set right), an attr fork dropped (its pointers made again), a
# directory entry changed (the pointers of two files set right)
REPAIR_KINDS = [["name", "ino", "garbage-ino", "remove", "slash"],
                ["gen", "gen-crc", "dirgen"],
                ["local-flag", "leaf-block", "hub-leaf"],
                ["entry"]]


@pytest.mark.parametrize("geo,damage", sampled(REPAIR_KINDS, 29),
                         ids=lambda v: v if isinstance(v, str) else _geo_id(v))
def test_repair_is_clean_by_xfs_repair_and_keeps_what_it_keeps(tmp_path, geo, damage):
    """fstool repair leaves what xfs_repair 6.10.1 -n and check call clean,
    and every path xfs_repair 6.10.1's own repair keeps."""
    img = copy(_image(geo), tmp_path)
    _damage(img, damage)
    out = _repaired_as_xfs_repair(img, tmp_path)
    assert "parent pointers rewritten" in out or \
        "generation of 1 parent pointers set right" in out, out[-3000:]


# cases of the parent-pointer corpus (fixtures/corpus_pptr.py, (seed, n))
# that repair once left worse or unrepaired: a directory whose entries could
# not be read while its inode was damaged (its children's pointers were
# taken off), pointers to remove from an attr fork in blocks, an attr fork
# in blocks dropped whose 441 pointers no shortform fork holds, and an attr
# fork left mapping no block (its pointers go into a shortform one)
CORPUS_CASES = {(1, 35): "inode dir_node: byte", (1, 96): "dir_leaf dblock @0: byte",
                (1, 1): "hub ablock 0x3bee @6: fuzz -d nvlist[23].valuelen",
                (2, 37): "inode remote_file: fuzz -d v3.nrext64 zeroes"}


@pytest.mark.parametrize("seed,n", sorted(CORPUS_CASES) if FULL else
                         [random.Random(29).choice(sorted(CORPUS_CASES))])
def test_repair_corpus_cases(tmp_path, seed, n):
    if not corpus_pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    case = corpus_pptr.cases(seed, 100)[n]
    assert corpus_pptr.describe(case).startswith(CORPUS_CASES[seed, n]), \
        corpus_pptr.describe(case)
    img = tmp_path / "c.img"
    assert corpus_pptr.make_case(img, case)
    _repaired_as_xfs_repair(img, tmp_path)
