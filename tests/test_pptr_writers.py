"""Writers keep parent pointers (issue 29, items 4 and 6): on an image made
by ``fstool mkfs -n parent=1``, populate (a directory, a tar archive, a
protofile; into a fresh image and an existing one), resize, admin (label, UUID), the edits (mkdir,
put, cp, ln, ln -s, mv with every flag, rm, setattr) and the mount (the
POSIX scenario, against the kernel's results; a session that dies,
recovered by fstool log replay and by the kernel) leave every inode with
the parent pointers of the entries naming it.  Each image is proved three
ways: xfs_repair 6.10.1 -n finds nothing, fstool check finds nothing, and
the kernel's parent pointers of every inode (xfs_io 6.10.1 ``parent`` on a
read-only kernel mount, fixtures.pptr.kernel_parents) equal what fstool
reads from the image.

Small trees, a few seconds a case (the mount's, some ten)."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

import fstool as fsmod
from fixtures import dirty, killpoints, modern, pptr
from fixtures.fusemount import FuseMounted, fuse_skip_reason, run_ops
from fixtures.images import Mounted
from fstool.format import constants as C
from fstool.format import parent as P
from fstool.format.structs import SB
from fstool.fs import attr as FA
from fstool.ns.attrops import AttrFork
from fstool.ns.writer import Writer
from fstool.ops import edit as E


def fstool(*args):
    r = subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                       capture_output=True, text=True)
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r


@pytest.fixture(autouse=True)
def _needs_oracles():
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")


def mkfs(img, size="256m"):
    fstool("mkfs", "-q", "-n", "parent=1", "--size", size, img)
    return img


def small_image(tmp_path, name: str):
    """A 256 MiB parent-pointer image holding d/f, hard-linked as g."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"f")
    os.link(src / "d" / "f", src / "g")
    img = tmp_path / name
    fstool("mkfs", "-q", "-n", "parent=1", "--size", "256m", "--populate", src, img)
    return img


def proved(img) -> dict:
    """The three proofs of the module docstring; returns the parent
    pointers {ino: [(p_ino, p_gen, name)]}."""
    r = modern.repair_n(img)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    r = subprocess.run([sys.executable, "-m", "fstool", "check", str(img)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    theirs = pptr.kernel_parents(img)
    with fsmod.open_image(img) as fs:
        root = fs.sb.rootino
        ours = {ino: sorted((p.ino, p.gen, p.name) for p in fs.parents(ino)) for ino in theirs}
    assert ours == theirs
    # every inode but the root is named, so has a pointer
    assert all(v for ino, v in theirs.items() if ino != root)
    return theirs


def host_tree(top):
    """Every kind of entry, parent pointers in every attr fork form: a file
    with 30 hard links in two directories (a leaf attr fork), a name of 255
    bytes, user xattrs beside the pointer, a directory of 300 entries (a
    leaf directory), a run of small files."""
    os.makedirs(top / "a" / "b" / "c")
    (top / "a" / "f").write_bytes(b"data" * 1000)
    os.setxattr(top / "a" / "f", "user.color", b"blue")
    (top / "big").mkdir()
    for i in range(300):
        (top / "big" / f"entry-{i:04d}").write_bytes(b"x" * (i % 7))
    os.link(top / "a" / "f", top / "big" / "also-f")
    (top / "links").mkdir()
    for i in range(29):
        os.link(top / "a" / "f", top / "links" / f"link-with-a-longer-name-{i:02d}")
    # a file of a run of plain files, linked from elsewhere
    os.link(top / "big" / "entry-0005", top / "a" / "plain-link")
    (top / "a" / ("L" * 255)).write_bytes(b"long")
    os.symlink("b/c", top / "a" / "sym")
    os.mkfifo(top / "a" / "fifo")
    return top


def test_mkfs_populate_from_a_directory(tmp_path):
    src = host_tree(tmp_path / "src")
    img = tmp_path / "p.img"
    fstool("mkfs", "-q", "-n", "parent=1", "--size", "256m", "--populate", src, img)
    got = proved(img)
    with fsmod.open_image(img) as fs:
        f = fs.lstat("/a/f").st_ino
        big = fs.lstat("/big").st_ino
        assert len(got[f]) == 31 and (big, 0, b"also-f") in got[f]
        a = fs.lstat("/a").st_ino
        assert got[fs.lstat("/big/entry-0005").st_ino] == sorted(
            [(a, 0, b"plain-link"), (big, 0, b"entry-0005")])
        assert dict(fs.xattrs("/a/f"))["user.color"] == b"blue"
        assert fs.paths(f) and "/a/f" in fs.paths(f)


def test_populate_from_tar_and_protofile(tmp_path):
    src = host_tree(tmp_path / "src")
    tar = tmp_path / "t.tar"
    with tarfile.open(tar, "w") as t:
        t.add(src, arcname=".")
    img = mkfs(tmp_path / "p.img")
    fstool("populate", img, tar, "--dest", "/fromtar")
    (tmp_path / "data").write_bytes(b"some data")
    (tmp_path / "empty").touch()
    lines = ["/dev/null", "0 0", "d--755 0 0", "pd d--755 0 0"]
    for i in range(40):
        lines.append(f"  f{i:02d} ---644 0 0 {tmp_path / 'empty'}")
        if i == 20:
            # a name given again replaces the first
            lines.append(f"  f10 ---600 0 0 {tmp_path / 'data'}")
    lines += ["  sub d--750 0 0", f"    inner ---644 0 0 {tmp_path / 'data'}", "    $",
              "  lnk l--777 0 0 f01", "  $", "$"]
    proto = tmp_path / "proto"
    proto.write_text("\n".join(lines) + "\n")
    fstool("populate", img, proto)
    got = proved(img)
    with fsmod.open_image(img) as fs:
        assert len(got[fs.lstat("/fromtar/a/f").st_ino]) == 31
        pd = fs.lstat("/pd").st_ino
        assert got[fs.lstat("/pd/f10").st_ino] == [(pd, 0, b"f10")]


def test_edits_keep_parent_pointers(tmp_path):
    """Every edit command, each kind of name change once: create, link,
    unlink of one of several links and of a last one, rename in a
    directory, across directories, over an existing name, of a directory,
    RENAME_EXCHANGE of a file and a directory, rmdir, xattrs set beside the
    pointers."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "keep").write_bytes(b"k")
    img = mkfs(tmp_path / "p.img")
    fstool("populate", img, src)
    host = tmp_path / "host"
    host.write_bytes(b"h" * 10000)
    # the edits' own functions, without the check each command runs first
    # (the proof below checks once)
    E.mkdir(img, "/d1", check=False)
    E.mkdir(img, "/d2/sub/deeper", parents=True, check=False)
    E.put(img, host, "/d1/f", check=False)
    E.cp(img, "/d1/f", "/d2/copy", check=False)
    E.ln(img, "/d1/f", "/d2/f-link", check=False)
    E.ln(img, "/d1/f", "/d2/sub/f-link2", check=False)
    E.ln(img, "../d1/f", "/d2/sym", symbolic=True, check=False)
    E.mv(img, "/d1/f", "/d1/f-renamed", check=False)            # same directory
    E.mv(img, "/d2/sym", "/d1/sym", check=False)                # across
    E.mv(img, "/d2/copy", "/d2/sub/f-link2", check=False)       # over a link
    E.mv(img, "/d2/sub/deeper", "/d1/deeper", check=False)      # a directory
    E.mv(img, "/d1/sym", "/d2/sub", exchange=True, check=False)  # a file and a directory
    E.rm(img, ["/d2/f-link"], check=False)                      # one of two links
    E.mkdir(img, "/gone/below", parents=True, check=False)
    E.rm(img, ["/gone"], recursive=True, check=False)
    # and one command line, its check first
    fstool("setattr", img, "/d1/f-renamed", "--set-xattr", "user.note=kept")
    got = proved(img)
    with fsmod.open_image(img) as fs:
        d1, d2 = fs.lstat("/d1").st_ino, fs.lstat("/d2").st_ino
        f = fs.lstat("/d1/f-renamed").st_ino
        assert got[f] == [(d1, 0, b"f-renamed")]
        assert got[fs.lstat("/d1/sym").st_ino] == [(d1, 0, b"sym")]     # the directory
        assert got[fs.lstat("/d2/sub").st_ino] == [(d2, 0, b"sub")]     # the symlink
        assert fs.lstat("/d2/sub").st_mode & 0o170000 == 0o120000
        assert got[fs.lstat("/d1/deeper").st_ino] == [(d1, 0, b"deeper")]
        assert dict(fs.xattrs("/d1/f-renamed"))["user.note"] == b"kept"
        assert fs.paths(f) == ["/d1/f-renamed"]


def test_edits_on_a_kernel_written_image(tmp_path):
    """Edits of files whose parent pointers the kernel put in shortform,
    leaf and node attr forks beside user xattrs with remote values (a file
    with 441 links among them): links added, removed and renamed there, and
    xattrs set beside them."""
    img = dirty.copy(pptr.pptr_image(), tmp_path / "k.img")
    with fsmod.open_image(img) as fs:
        hub_dir = fs.lstat("/pptr/hub").st_ino
        hub = fs.lstat("/pptr/hub/origin").st_ino
        before = len(fs.parents(hub))
        other = next(p for p in fs.parents(hub) if p.ino != hub_dir)
        gone = fs.paths(other.ino)[0] + "/" + other.name.decode()
    E.ln(img, "/pptr/hub/origin", "/pptr/one-more", check=False)
    E.mv(img, "/pptr/hub/origin", "/pptr/hub-origin", check=False)
    E.rm(img, [gone], check=False)
    E.ln(img, "/pptr/forms/node", "/pptr/forms/node-2", check=False)
    E.mv(img, "/pptr/forms/leaf", "/pptr/forms/remote", check=False)
    E.setattr(img, "/pptr/forms/sf", set_xattrs={"user.extra": b"v" * 100}, check=False)
    got = proved(img)
    with fsmod.open_image(img) as fs:
        pptr_dir = fs.lstat("/pptr").st_ino
        assert len(got[hub]) == before
        assert (pptr_dir, fs.inode(pptr_dir).gen, b"hub-origin") in got[hub]
        assert (pptr_dir, fs.inode(pptr_dir).gen, b"one-more") in got[hub]
        assert (hub_dir, fs.inode(hub_dir).gen, b"origin") not in got[hub]
        assert tuple(other) not in got[hub]


def test_mount_posix_scenario_keeps_parent_pointers(tmp_path):
    """The POSIX scenario (fixtures/posix_ops.py: creates, links, unlinks of
    open files, renames with every flag, rmdir, xattrs) through an fstool
    mount of a parent-pointer image gives what it gives in a kernel mount of
    one mkfs.xfs 6.10.1 made, and leaves the image proved."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    ref = tmp_path / "kernel.img"
    modern.mkfs(ref, "-n", "parent=1", size="512m")
    with Mounted(ref) as mnt:
        theirs = run_ops(mnt, "main")
    img = mkfs(tmp_path / "p.img", "512m")
    m = FuseMounted(img)
    with m as mnt:
        ours = run_ops(mnt, "main")
    assert m.returncode == 0, m.stderr
    assert ours == theirs
    got = proved(img)
    assert sum(map(len, got.values())) > 100


def test_a_mount_that_dies_recovers_as_the_kernel_recovers(tmp_path):
    """A mount session on a parent-pointer image that made, linked, renamed
    and unlinked an open file, synced and died: fstool log replay (which
    frees the open unlinked file, a writer's work) and the kernel's
    recovery at mount leave the same parent pointers, both proved."""
    img = mkfs(tmp_path / "p.img")
    code = ("import os, sys\n"
            "from fstool.mount.volume import Volume\n"
            "v = Volume(sys.argv[1])\n"
            "d = v.mkdir(v.rootino, b'd', 0o755).ino\n"
            "fh, a = v.create(d, b'f', 0o644)\n"
            "v.link(a.ino, v.rootino, b'g')\n"
            "v.create(d, b'open-unlinked', 0o644)\n"
            "v.unlink(d, b'open-unlinked')\n"
            "v.rename(d, b'f', v.rootino, b'moved')\n"
            "v.sync()\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(img)], check=True)
    kernel = dirty.copy(img, tmp_path / "k.img")
    r = subprocess.run([sys.executable, "-m", "fstool", "log", "replay", str(img)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "1 unlinked inodes" in r.stdout, r.stdout + r.stderr
    with Mounted(kernel, nouuid=True):
        pass
    ours = proved(img)
    assert ours == pptr.kernel_parents(kernel)
    with fsmod.open_image(img) as fs:
        f = fs.lstat("/moved").st_ino
        assert ours[f] == [(fs.sb.rootino, 0, b"g"), (fs.sb.rootino, 0, b"moved")]


def test_resize_keeps_parent_pointers(tmp_path):
    """Growing a parent-pointer filesystem, and shrinking it to its minimum
    (the log and file data moved first), change none of its pointers."""
    img = small_image(tmp_path, "p.img")
    before = pptr.kernel_parents(img)
    fstool("resize", img, "--size", "600m")
    assert proved(img) == before
    with fsmod.open_image(img) as fs:
        assert fs.sb.agcount > 4
    # data past the minimum: written after a filler of two AGs, removed
    (tmp_path / "filler").write_bytes(os.urandom(140 << 20))
    E.put(img, tmp_path / "filler", "/filler", check=False)
    (tmp_path / "data").write_bytes(os.urandom(1 << 20))
    E.put(img, tmp_path / "data", "/d/data", check=False)
    E.ln(img, "/d/data", "/data-link", check=False)
    E.rm(img, ["/filler"], check=False)
    before = pptr.kernel_parents(img)
    out = fstool("resize", img, "-M").stdout
    assert "log moved" in out and "data extent(s) moved" in out and "shrunk" in out, out
    assert proved(img) == before


def test_admin_label_and_uuid_on_a_parent_pointer_image(tmp_path):
    """A new label and UUID (and the UUID restored) leave every pointer as
    it was: the label and UUID name no inode, and a pointer's value holds
    no UUID."""
    img = small_image(tmp_path, "a.img")
    before = pptr.kernel_parents(img)
    fstool("admin", "-L", "pp", "-U", "generate", img)
    assert proved(img) == before
    out = fstool("admin", "-l", img).stdout
    assert out.strip() == 'label = "pp"'
    fstool("admin", "-U", "restore", img)
    assert proved(img) == before


    """A file named ``same`` in five directories (five parent pointers of one
    name, told apart by their value) beside 150 user xattrs (a node-form
    attr fork changed in place): xattrs set and removed one at a time keep
    every pointer, links added and removed change only their own pointer
    (each hashed with the parent hash, found by name and value), and the
    xattrs removed again take the fork back to shortform with its
    pointers."""
    img = mkfs(tmp_path / "p.img")
    dirs = [f"/d{k}" for k in range(6)]
    for d in dirs:
        E.mkdir(img, d, check=False)
    (tmp_path / "f").write_bytes(b"f")
    E.put(img, tmp_path / "f", "/d0/f", check=False)
    many = {f"user.attribute-{i:03d}": b"v" * 40 for i in range(150)}
    E.setattr(img, "/d0/f", set_xattrs=many, check=False)
    for d in dirs[1:4]:
        E.ln(img, "/d0/f", f"{d}/same", check=False)
    with fsmod.open_image(img) as fs:
        ino = fs.lstat("/d0/f").st_ino
        node = fs.inode(ino)
        assert node.aformat != 1, "the attr fork should be in blocks"
        gen = {d: fs.inode(fs.lstat(d).st_ino).gen for d in dirs}
        dino = {d: fs.lstat(d).st_ino for d in dirs}
    # more links of the same name and xattr changes, all in place
    E.ln(img, "/d0/f", "/d4/same", check=False)
    E.setattr(img, "/d4/same", set_xattrs={"user.attribute-000": b"w" * 40,
                                           "user.new": b"n"},
              remove_xattrs=["user.attribute-001"], check=False)
    E.rm(img, ["/d2/same"], check=False)
    E.mv(img, "/d3/same", "/d5/same", check=False)
    got = proved(img)
    want = sorted([(dino["/d0"], gen["/d0"], b"f")] +
                  [(dino[d], gen[d], b"same") for d in ("/d1", "/d4", "/d5")])
    assert got[ino] == want
    with fsmod.open_image(img) as fs:
        x = fs.xattrs(ino)
        assert x["user.attribute-000"] == b"w" * 40 and x["user.new"] == b"n"
        assert "user.attribute-001" not in x and len(x) == 150
        node = fs.inode(ino)
        for p_ino, p_gen, name in want:
            rec = P.pack_rec(p_ino, p_gen)
            assert FA.lookup(node, C.XFS_ATTR_PARENT, name, rec) == rec
        assert FA.lookup(node, C.XFS_ATTR_PARENT, b"same",
                         P.pack_rec(dino["/d2"], gen["/d2"])) is None
        # a pointer of another generation of /d1 (the same hash) is another one
        stale = P.pack_rec(dino["/d1"], gen["/d1"] + 1)
        assert FA.lookup(node, C.XFS_ATTR_PARENT, b"same", stale) is None
    with Writer(img, keeps_parents=True) as w:
        with w.transaction():
            assert not AttrFork(w, ino).remove(C.XFS_ATTR_PARENT, b"same", value=stale)
    assert proved(img)[ino] == want
    # every xattr gone: the pointers go back to a shortform fork
    E.setattr(img, "/d0/f", remove_xattrs=list(x), check=False)
    assert proved(img)[ino] == want
    with fsmod.open_image(img) as fs:
        assert fs.inode(ino).aformat == 1 and fs.xattrs(ino) == {}


def _secondaries_behind(img) -> list:
    """The AGs whose superblock's incompat features differ from the
    primary's."""
    with fsmod.open_image(img) as fs:
        sb = fs.sb
        want = sb.fields["sb_features_incompat"]
        out = []
        for agno in range(1, sb.agcount):
            raw = fs.dev.pread(agno * sb.agblocks * sb.blocksize, sb.sectsize)
            if SB.unpack(raw[:SB.size])["sb_features_incompat"] != want:
                out.append(agno)
    return out


def test_admin_killed_after_any_write_keeps_parent_pointers(tmp_path):
    """fstool admin -L and -U (a new UUID, then -U restore) on a
    parent-pointer image, killed with SIGKILL after its Nth write: the
    kernel mounts it (its log recovery runs), every inode has the parent
    pointers it had, and the command run again finishes the change.
    xfs_repair 6.10.1 -n finds the image clean, but in the window
    docs/commands/admin.md describes: killed between the superblocks of a
    change that sets or clears META_UUID, the secondaries not yet written
    differ from the primary in that feature bit (xfs_admin has the same
    window); then xfs_repair -n names exactly those secondaries, as fstool
    check does, and the run that finishes the change leaves it clean.  The
    first, a middle and the last write of each command, and a write inside
    the window, by default; FSTOOL_EVERY_WRITE=1 kills after every write
    (fixtures/killpoints.py)."""
    img = small_image(tmp_path, "a.img")
    before = pptr.kernel_parents(img)
    done = tmp_path / "done.img"
    subprocess.run(["cp", "--sparse=always", str(img), str(done)], check=True)
    new = "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"
    for args in (["-L", "pp", "-U", new], ["-U", "restore"]):
        start = tmp_path / "start.img"
        subprocess.run(["cp", "--sparse=always", str(done), str(start)], check=True)
        counted = tmp_path / "writes.log"
        counted.unlink(missing_ok=True)
        r = subprocess.run([sys.executable, "-m", "fstool", "admin", *args, str(done)],
                           capture_output=True, text=True,
                           env={**os.environ, "FSTOOL_WRITE_LOG": str(counted)})
        assert r.returncode == 0, r.stderr
        total = len(counted.read_text().splitlines())
        assert total >= 4, total            # the superblocks and the log at least
        # the window: killed after the primary superblock's write (the last
        # at offset 0) and before the last secondary's
        offsets = [int(l.split()[0]) for l in counted.read_text().splitlines()]
        primary = len(offsets) - offsets[::-1].index(0)
        with fsmod.open_image(start) as fs:
            last_sb = (fs.sb.agcount - 1) * fs.sb.agblocks * fs.sb.blocksize
        window = range(primary, primary + offsets[primary:].index(last_sb) + 1)
        pts = killpoints.points(total, seed=f"admin-pptr-{args[-1]}")
        if not killpoints.EVERY:
            pts = sorted({pts[0], pts[len(pts) // 2], primary + 1, pts[-1]})
        for n in pts:
            work = tmp_path / "w.img"
            subprocess.run(["cp", "--sparse=always", str(start), str(work)], check=True)
            r = subprocess.run([sys.executable, "-m", "fstool", "admin", *args, str(work)],
                               capture_output=True, text=True,
                               env={**os.environ, "FSTOOL_FAULT_AFTER_WRITES": str(n)})
            assert r.returncode == -9, (args, n, r.returncode, r.stderr)
            with Mounted(work, nouuid=True):        # the kernel replays the log
                pass
            rep = modern.repair_n(work)
            behind = _secondaries_behind(work)
            if n in window:
                assert behind, (args, n)
                said = rep.stdout + rep.stderr
                named = {l.split(" AG ")[1].split()[0] for l in said.splitlines()
                         if "would fix incompat feature mismatch in AG" in l}
                assert rep.returncode == 1 and named == {str(a) for a in behind}, \
                    (args, n, behind, said[-3000:])
                ck = subprocess.run([sys.executable, "-m", "fstool", "check", "--json",
                                     str(work)], capture_output=True, text=True)
                found = [json.loads(l) for l in ck.stdout.splitlines()]
                assert ck.returncode == 1 and [
                    (f["code"], f["agno"], f["field"]) for f in found] == [
                    ("SB_SECONDARY", a, "sb_features_incompat") for a in behind], \
                    (args, n, ck.stdout)
            else:
                assert not behind, (args, n, behind)
                assert rep.returncode == 0, (args, n, (rep.stdout + rep.stderr)[-3000:])
            with fsmod.open_image(work) as fs:
                got = {ino: sorted((p.ino, p.gen, p.name) for p in fs.parents(ino))
                       for ino in before}
            assert got == before, (args, n)
            fstool("admin", *args, work)            # a second run finishes it
            assert fstool("admin", "-l", "-u", work).stdout == \
                fstool("admin", "-l", "-u", done).stdout
            if behind:
                rep = modern.repair_n(work)
                assert rep.returncode == 0, (args, n, (rep.stdout + rep.stderr)[-3000:])
    assert proved(done) == before
