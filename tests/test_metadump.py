"""fstool metadump / mdrestore against xfs_metadump and xfs_mdrestore (6.1
for v1 dumps, 6.10.1 for v2): with -o fstool's dump is byte for byte
xfs_metadump's; fstool's obfuscated dump restored by xfs_mdrestore is
judged by xfs_repair -n as the original is and is clean for fstool check;
fstool mdrestore of xfs_metadump's dumps is xfs_mdrestore's image; no name
of the source tree (five bytes or more: xfs_metadump leaves shorter ones)
is left in an obfuscated dump, and every name keeps its length and hash;
bad dumps get a one-line error and the exit status of fstool/errors.py.

The source image is the kernel-written fixture (fixtures.images); each
test runs a dump or two of it (a second or two each)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import fstool_native
from fixtures import images, modern
from fixtures.oracles import fstool
from fstool._backend import parsers
from fstool.cli import exits
from fstool.fs.filesystem import Filesystem
from fstool.io.dumpfile import DumpFile
from fstool.ops import metadump as metadump_ops

needs_kernel_image = pytest.mark.skipif(
    not images.loop_available() and not (images.cache_dir() / "kernel-v6-small-default.img")
    .exists(), reason="the kernel-written fixture image needs root, xfsprogs and loop mounts")


def _tools(version: int) -> tuple[str, str]:
    """(xfs_metadump, xfs_mdrestore) writing/reading dump ``version``: 6.1
    from PATH for v1, 6.10.1 for v2."""
    if version == 1:
        md, mr = shutil.which("xfs_metadump"), shutil.which("xfs_mdrestore")
        if not md or not mr:
            pytest.skip("needs xfs_metadump and xfs_mdrestore (xfsprogs 6.1)")
        return md, mr
    if not modern.available():
        pytest.skip(modern.WHY)
    return modern.tool("xfs_metadump"), modern.tool("xfs_mdrestore")


def _xfs_metadump(version: int, image, out, *opts) -> None:
    md, _ = _tools(version)
    env = dict(os.environ)
    # the xfs_metadump script runs the xfs_db found on PATH: its own
    env["PATH"] = f"{os.path.dirname(md)}:{env['PATH']}"
    args = [md, "-f", *opts] + (["-v", "2"] if version == 2 else [])
    subprocess.run(args + [str(image), str(out)], check=True, capture_output=True, env=env)


def _xfs_mdrestore(version: int, dump, image) -> None:
    _, mr = _tools(version)
    subprocess.run([mr, str(dump), str(image)], check=True, capture_output=True)


def _same_bytes(a, b) -> bool:
    """Whether two (sparse) files read the same, every byte: the ranges
    either holds data are compared, the holes of both read as zeros."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    size = os.path.getsize(a)
    fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDONLY)
    try:
        for start, end in images.data_ranges(fa, size) + images.data_ranges(fb, size):
            pos = start
            while pos < end:
                n = min(end - pos, 1 << 22)
                if os.pread(fa, n, pos) != os.pread(fb, n, pos):
                    return False
                pos += n
        return True
    finally:
        os.close(fa)
        os.close(fb)


@pytest.fixture(scope="module")
def source():
    return images.kernel_image("small")


@needs_kernel_image
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("opts", [("-o",), ("-o", "-a")])
def test_unobfuscated_dump_is_xfs_metadumps(source, tmp_path, version, opts):
    """Without obfuscation (which is random) the dump is xfs_metadump's byte
    for byte: the same blocks in the same order, unused parts zeroed the same
    way (or kept with -a), the clean log replaced by the same cleared log."""
    ours, theirs = tmp_path / "ours.md", tmp_path / "theirs.md"
    _xfs_metadump(version, source, theirs, *opts)
    fstool("metadump", "-v", version, *opts, source, ours)
    assert _same_bytes(ours, theirs)


@needs_kernel_image
@pytest.mark.parametrize("version", [1, 2])
def test_mdrestore_equals_xfs_mdrestore(source, tmp_path, version):
    """fstool mdrestore of xfs_metadump's dump makes xfs_mdrestore's image,
    every byte (metadata where the dump has it, holes elsewhere; the
    primary superblock rewritten as xfs_mdrestore rewrites it)."""
    dump = tmp_path / "x.md"
    _xfs_metadump(version, source, dump, "-o")
    theirs, ours = tmp_path / "theirs.img", tmp_path / "ours.img"
    _xfs_mdrestore(version, dump, theirs)
    fstool("mdrestore", dump, ours)
    assert _same_bytes(ours, theirs)


def _repair_lines(img, version: int) -> tuple[int, list]:
    tool = shutil.which("xfs_repair") if version == 1 else modern.tool("xfs_repair")
    r = subprocess.run([tool, "-n", "-f", str(img)], capture_output=True, text=True)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines()
             if ln and not ln.startswith(("Phase", "        - ", "Cannot get host",
                                          "Repair may fail", "the image and the host"))]
    return r.returncode, lines


@needs_kernel_image
@pytest.mark.parametrize("version", [1, 2])
def test_obfuscated_dump_restores_to_an_image_judged_as_the_original(source, tmp_path,
                                                                      version):
    dump, img = tmp_path / "o.md", tmp_path / "o.img"
    fstool("metadump", "-v", version, source, dump)
    _xfs_mdrestore(version, dump, img)
    assert _repair_lines(img, version) == _repair_lines(source, version)
    r = fstool("check", img, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def _xattr_names(fs, node) -> list:
    return [n.encode("utf-8", "surrogateescape").split(b".", 1)[1]
            for n in fs.xattr_names(node)]


def _names(fs) -> tuple[dict, dict]:
    """{(directory inode, child inode): name} of a whole tree and {inode:
    [xattr names]}, found by inode numbers (so that an obfuscated tree lines
    up with its original)."""
    dirents, xattrs = {}, {}
    todo = [fs.sb.rootino]
    seen = set()
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        node = fs.inode(d)
        xattrs[d] = _xattr_names(fs, node)
        for e in fs.listdir(node):
            if e.name in (b".", b".."):
                continue
            dirents[(d, e.ino)] = e.name
            child = fs.inode(e.ino)
            if child.is_dir:
                todo.append(e.ino)
            else:
                xattrs[e.ino] = _xattr_names(fs, child)
    return dirents, xattrs


def _shape(names) -> list:
    return sorted((len(n), parsers.da_hashname(n)) for n in names)


@needs_kernel_image
def test_obfuscated_names_keep_length_and_hash_and_none_is_left(source, tmp_path):
    dump, img = tmp_path / "o.md", tmp_path / "o.img"
    fstool("metadump", "-v", "2", source, dump)
    fstool("mdrestore", dump, img)
    with Filesystem(str(source)) as a, Filesystem(str(img)) as b:
        (before, xbefore), (after, xafter) = _names(a), _names(b)
    assert before and set(before) == set(after) and set(xbefore) == set(xafter)
    changed = 0
    for key, name in before.items():
        new = after[key]
        assert len(new) == len(name), (key, name, new)
        assert parsers.da_hashname(new) == parsers.da_hashname(name), (key, name, new)
        if len(name) >= 5 and name != b"lost+found":
            assert new != name, (key, name)
            changed += 1
    assert changed > 100
    # xattr names: the same lengths and hashes in each inode, none left
    xattr_count = 0
    for ino, names in xbefore.items():
        assert _shape(xafter[ino]) == _shape(names), ino
        assert not {n for n in names if len(n) >= 5} & set(xafter[ino]), ino
        xattr_count += len(names)
    assert xattr_count > 10
    # no name (and no xattr name) of five bytes or more anywhere in the dump:
    # grep -F (Aho-Corasick) for the names a line holds, find() for the rest
    every = set(before.values()) | {n for ns in xbefore.values() for n in ns}
    wanted = {n for n in every if len(n) >= 5 and n != b"lost+found"}
    plain = sorted(n for n in wanted if b"\n" not in n)
    pats = tmp_path / "names"
    pats.write_bytes(b"\n".join(plain) + b"\n")
    grep_env = dict(os.environ, LC_ALL="C")       # bytes, not UTF-8: much faster
    r = subprocess.run(["grep", "-a", "-o", "-F", "-f", str(pats), str(dump)],
                       capture_output=True, env=grep_env)
    assert r.returncode in (0, 1), r.stderr
    left = set(r.stdout.splitlines()) & wanted
    blob = dump.read_bytes()
    left |= {n for n in wanted if b"\n" in n and n in blob}
    assert not left, sorted(left)[:20]
    # and grep finds them in the source's own -o dump (the check can fail)
    plain_dump = tmp_path / "plain.md"
    fstool("metadump", "-v", "2", "-o", "--no-log", source, plain_dump)
    r = subprocess.run(["grep", "-a", "-o", "-F", "-f", str(pats), str(plain_dump)],
                       capture_output=True, env=grep_env)
    assert len(set(r.stdout.splitlines()) & wanted) > 100
    # xattr values are gone too (as xfs_metadump fills them with 'v'): the
    # 50 longest
    values = images.load_xattrs(source)
    long_values = sorted({v for d in values.values() for v in d.values()
                          if len(v) >= 8 and v.strip(b"v")}, key=len)[-50:]
    assert long_values and not [v for v in long_values if v in blob]


@needs_kernel_image
def test_no_log_leaves_the_log_out(source, tmp_path):
    with_log, without = tmp_path / "a.md", tmp_path / "b.md"
    fstool("metadump", "-v", "2", "-o", source, with_log)
    fstool("metadump", "-v", "2", "-o", "--no-log", source, without)
    with Filesystem(str(source)) as fs:
        log_bytes = fs.sb.logblocks * fs.sb.blocksize
    assert with_log.stat().st_size - without.stat().st_size == log_bytes + 12


@pytest.mark.parametrize("make, status", [
    (lambda p: p.write_bytes(b"NOPE" + bytes(1020)), exits.EXIT_NOT_XFS),
    (lambda p: p.write_bytes(b""), exits.EXIT_NOT_XFS),
    (lambda p: p.write_bytes(b"XFSM\x00\x05\x09\x01" + bytes(504) + bytes(1000)),
     exits.EXIT_CORRUPT),
    (lambda p: p.write_bytes(b"XMD2" + bytes([0, 0, 0, 2]) + bytes(16) + bytes(8) +
                             (8).to_bytes(4, "big") + bytes(100)), exits.EXIT_CORRUPT),
], ids=["wrong-magic", "empty", "v1-truncated", "v2-truncated"])
def test_bad_dumps_get_one_line_and_their_exit_status(tmp_path, make, status):
    dump = tmp_path / "bad.md"
    make(dump)
    r = fstool("mdrestore", dump, tmp_path / "out.img", check=False)
    assert r.returncode == status, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_check_of_a_dump_agrees_with_check_of_the_restored_image(tmp_path):
    """Reader commands open a dump in place: fstool check of the dump
    reports what it reports of the image mdrestore makes (and of the
    damaged original), and a writer refuses the dump."""
    if shutil.which("mkfs.xfs") is None or shutil.which("xfs_db") is None:
        pytest.skip("needs mkfs.xfs and xfs_db (xfsprogs)")
    img = tmp_path / "d.img"
    with open(img, "wb") as f:
        f.truncate(300 << 20)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(img)], check=True)
    fstool("mkdir", img, "/a-directory")
    fstool("mkdir", img, "/a-directory/below")
    subprocess.run(["xfs_db", "-x", "-c", "inode 128", "-c", "write core.nlinkv2 9",
                    str(img)], check=True, capture_output=True)
    dump, restored = tmp_path / "d.md", tmp_path / "r.img"
    fstool("metadump", "-v", "2", img, dump)
    fstool("mdrestore", dump, restored)
    runs = [fstool("check", "--json", p, check=False) for p in (img, dump, restored)]
    assert [r.returncode for r in runs] == [1, 1, 1]
    assert runs[1].stdout == runs[2].stdout == runs[0].stdout
    assert '"NLINK"' in runs[1].stdout
    # xfs_metadump's dump (v1, 6.1) reads in place the same way
    if shutil.which("xfs_metadump"):
        xdump = tmp_path / "x.md"
        _xfs_metadump(1, img, xdump)
        r = fstool("check", "--json", xdump, check=False)
        assert (r.returncode, r.stdout) == (1, runs[0].stdout)
    assert fstool("ls", dump, "/").stdout.split() == fstool("ls", restored, "/").stdout.split()
    r = fstool("mkdir", "--no-check", dump, "/x", check=False)
    assert r.returncode != 0 and "metadump" in r.stderr


def _extents(path) -> list:
    """(daddr, sectors, log device, bytes) of every extent of a dump."""
    d = DumpFile(path)
    try:
        return [(daddr, n, log, d._read(off, n * 512)) for daddr, n, off, log in d.index()]
    finally:
        d.close()


def _small_tree(root, dirs: int = 3, files: int = 150):
    for d in range(dirs):
        (root / f"dir-{d}").mkdir(parents=True)
        for i in range(files):
            (root / f"dir-{d}" / f"file-{i:04d}").write_bytes(b"x" * (i % 7))
        (root / f"dir-{d}" / "a-symlink").symlink_to(f"../dir-{(d + 1) % dirs}/file-0001")
    return root


def _populated(tmp_path):
    if shutil.which("mkfs.xfs") is None or not modern.available():
        pytest.skip("needs mkfs.xfs and " + modern.WHY)
    src = _small_tree(tmp_path / "tree")
    img = tmp_path / "a.img"
    with open(img, "wb") as f:
        f.truncate(300 << 20)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(img)], check=True)
    fstool("populate", img, src)
    return img


@pytest.mark.parametrize("seed", [1, 12])
def test_a_damaged_image_dumps_like_xfs_metadump(tmp_path, seed):
    """Bits flipped in metadata (xfs_db blocktrash; seeds 1 and 12 give an
    inode whose fork offset makes its data fork longer than the literal
    area): the dump still comes out (what makes no sense is skipped, never
    a traceback), is xfs_metadump's byte for byte with -o, and the image
    restored from it is damaged in xfs_repair's eyes as the one restored
    from xfs_metadump's is."""
    img = _populated(tmp_path)
    subprocess.run(["xfs_db", "-x", "-c", "blockget", "-c", f"blocktrash -s {seed} -n 40 -3",
                    str(img)], check=True, capture_output=True)
    ours, theirs = tmp_path / "ours.md", tmp_path / "theirs.md"
    r = fstool("metadump", "-v", "2", "-o", img, ours, check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    _xfs_metadump(2, img, theirs, "-o")
    a, b = _extents(ours), _extents(theirs)
    assert [e[:3] for e in a] == [e[:3] for e in b]
    assert [e[0] for e in a if e[3] not in {x[3] for x in b}] == []
    judged = []
    for dump in (ours, theirs):
        out = dump.with_suffix(".img")
        _xfs_mdrestore(2, dump, out)
        judged.append(modern.repair_n(out).returncode)
    assert judged[0] == judged[1] == modern.repair_n(img).returncode


def test_a_data_fork_past_the_literal_area_is_zeroed_over_the_next_inode(tmp_path):
    """An inode whose fork offset (60: 480 bytes) makes its data fork longer
    than the literal area (336 bytes in a 512-byte inode): xfs_metadump
    zeroes the fork past its extents for that length, over the start of the
    next inode of the cluster, and so does fstool's dump; the next inode's
    other bytes are kept (and with -a nothing is zeroed)."""
    img = _populated(tmp_path)
    with Filesystem(str(img)) as fs:
        inos = sorted(e.ino for e in fs.listdir(fs.lookup("/dir-0"))
                      if e.name.startswith(b"file-"))
        isize = fs.sb.inodesize
        # two inodes in a row in one cluster, the first a one-extent file
        ino = next(i for i in inos if i + 1 in inos and (i + 1) % 32)
    modern.db(img, f"inode {ino}", "write core.forkoff 60", write=True)
    ours, theirs = tmp_path / "ours.md", tmp_path / "theirs.md"
    fstool("metadump", "-v", "2", "-o", img, ours)
    _xfs_metadump(2, img, theirs, "-o")
    assert _extents(ours) == _extents(theirs)
    restored = tmp_path / "r.img"
    fstool("mdrestore", ours, restored)
    with Filesystem(str(img)) as fs:
        daddr, off = _inode_place(fs, ino + 1)
    with open(img, "rb") as f:
        f.seek(daddr * 512 + off)
        before = f.read(isize)
    with open(restored, "rb") as f:
        f.seek(daddr * 512 + off)
        after = f.read(isize)
    reach = 176 + 480 - isize        # the fork's bytes past its own inode
    assert before[:2] == b"IN" and after[:reach] == bytes(reach)
    assert after[reach:] == before[reach:]


def _inode_place(fs, ino: int) -> tuple[int, int]:
    """(daddr of the inode's block, byte offset in it)."""
    sb = fs.sb
    agno, agino = ino >> sb.agino_log, ino & ((1 << sb.agino_log) - 1)
    agbno, slot = agino >> sb.inopblog, agino & ((1 << sb.inopblog) - 1)
    return (agno * sb.agblocks + agbno) * (sb.blocksize // 512), slot * sb.inodesize


# -- the native inode, directory and name work and its pure-Python twin ---------------
PURE = fstool_native.load(pure=True)
NATIVE = fstool_native.load()


@pytest.mark.parametrize("obfuscate", [False, True])
def test_native_and_pure_python_dumps_are_the_same_bytes(tmp_path, monkeypatch, obfuscate):
    """The inode clusters, directory blocks and names done by the compiled
    module and by its pure-Python source give the same dump (with the same
    random seed when names are obfuscated); the pure one is also
    xfs_metadump's with -o."""
    if not fstool_native.is_native(NATIVE):
        pytest.skip("the native module is not built")
    img = _populated(tmp_path)
    dumps = []
    for name, mod in (("native", NATIVE), ("pure", PURE)):
        monkeypatch.setattr(metadump_ops, "parsers", mod)
        out = tmp_path / f"{name}.md"
        metadump_ops.metadump(img, out, version=2, obfuscate=obfuscate, seed=7)
        dumps.append(out.read_bytes())
    assert dumps[0] == dumps[1]
    if not obfuscate:
        theirs = tmp_path / "theirs.md"
        _xfs_metadump(2, img, theirs, "-o")
        assert dumps[1] == theirs.read_bytes()


@pytest.mark.parametrize("mod", [NATIVE, PURE], ids=["native", "pure"])
def test_solved_names_keep_the_hash_and_avoid_bad_bytes(mod):
    """metadump_name: the prefix kept, five bytes solved for the hash, never
    a NUL or a '/'; with ascii-ci folding never a capital among the solved
    bytes (None, for another prefix, where one would be needed)."""
    import random  # lazy: only this test draws names
    rng = random.Random(3)
    nones = 0
    for i in range(3000):
        n = 5 + i % 20
        orig = bytes(rng.randrange(1, 256) for _ in range(n)).replace(b"/", b"x")
        prefix = rng.randbytes(n - 5).translate(metadump_ops._TO_ALPHABET)
        new = mod.metadump_name(prefix, mod.da_hashname(orig), False)
        assert new[:n - 5] == prefix and len(new) == n
        assert mod.da_hashname(new) == mod.da_hashname(orig)
        assert b"\0" not in new and b"/" not in new
        ci = mod.metadump_name(prefix, mod.da_hashname_ci(orig), True)
        if ci is None:
            nones += 1
            continue
        assert mod.da_hashname_ci(ci) == mod.da_hashname_ci(orig)
        assert not any(0x41 <= c <= 0x5A for c in ci[n - 5:])
    assert 0 < nones < 3000
    assert mod.da_hashname_ci(b"ReadMe.TXT") == mod.da_hashname(b"readme.txt")
    assert mod.da_hashname_ci(b"\xc0\xde") == mod.da_hashname(b"\xe0\xfe")


def _ci_image(tmp_path):
    """An ascii-ci image (mkfs.xfs 6.10.1 -n version=ci) filled from a
    protofile: mixed-case names, in shortform, block and leaf directories."""
    if not modern.available():
        pytest.skip(modern.WHY)
    lines = ["/dev/null", "0 0", "d--755 0 0"]
    for d, count in (("Small-Dir", 4), ("Block-Directory", 40), ("Leaf-Directory-Here", 150)):
        lines.append(f"{d} d--755 0 0")
        for i in range(count):
            lines.append(f"{'File' if i % 2 else 'NAME'}-{i:04d}-MixedCase.Txt ---644 0 0 /dev/null")
        lines.append("$")
    lines.append("$")
    proto = tmp_path / "proto"
    proto.write_text("\n".join(lines) + "\n")
    return modern.mkfs(tmp_path / "ci.img", "-n", "version=ci", "-p", str(proto),
                       size="300m")


def test_ascii_ci_names_are_obfuscated_keeping_the_folded_hash(tmp_path):
    """On an ascii-ci filesystem directory names hash with capitals folded:
    the obfuscated names keep that hash (and their length), so the image
    restored by xfs_mdrestore is clean for xfs_repair -n as the original
    is, and no original name is left."""
    img = _ci_image(tmp_path)
    assert modern.repair_n(img).returncode == 0
    dump, restored = tmp_path / "ci.md", tmp_path / "r.img"
    fstool("metadump", "-v", "2", img, dump)
    _xfs_mdrestore(2, dump, restored)
    r = modern.repair_n(restored)
    assert r.returncode == 0, r.stdout + r.stderr
    with Filesystem(str(img)) as a, Filesystem(str(restored)) as b:
        (before, _x), (after, _y) = _names(a), _names(b)
    assert set(before) == set(after) and len(before) > 190
    for key, name in before.items():
        new = after[key]
        assert len(new) == len(name)
        assert parsers.da_hashname_ci(new) == parsers.da_hashname_ci(name), (name, new)
        if len(name) >= 5:
            assert new.lower() != name.lower(), name
    blob = dump.read_bytes()
    assert not [n for n in before.values() if len(n) >= 5 and n in blob]


# -- mdrestore's native writer of v2 dumps and the extent-by-extent loop --------------
@pytest.mark.parametrize("window", [4096 + 700, 64 << 10])
def test_v2_restore_natively_equals_the_extent_loop(tmp_path, monkeypatch, window):
    """A v2 dump restored by ``parsers.md2_restore`` (compiled, and its
    pure-Python source) is the image the extent-by-extent loop (v1's, which
    reads v2 dumps as well) makes, with windows so small that extents run
    past them and the log is larger than one; a dump with an extent of an
    unknown device, a log extent without -l or a truncated extent gets the
    loop's error."""
    from fstool.ops import mdrestore as mdr
    mkfs = shutil.which("mkfs.xfs")
    if mkfs is None:
        pytest.skip("needs mkfs.xfs")
    img = tmp_path / "a.img"
    with open(img, "wb") as f:
        f.truncate(300 << 20)
    subprocess.run([mkfs, "-q", "-f", str(img)], check=True)
    dump = tmp_path / "a.md"
    fstool("metadump", "-v", "2", "-o", img, dump)
    monkeypatch.setattr(mdr, "WINDOW", window)

    def restore(path, how):
        monkeypatch.setattr(mdr, "_restore_v2", how)
        out = tmp_path / f"{path.name}.{getattr(how, '__name__', 'x')}.img"
        try:
            r = mdr.mdrestore(path, out)
        except Exception as e:          # noqa: BLE001 - the error is what is compared
            return type(e).__name__, str(e)
        return r, out

    native = mdr._restore_v2
    ways = [native, mdr._restore]
    if fstool_native.is_native(NATIVE):
        def pure(d, fd, lfd, primary):
            monkeypatch.setattr(mdr, "parsers", PURE)
            try:
                return native(d, fd, lfd, primary)
            finally:
                monkeypatch.setattr(mdr, "parsers", NATIVE)
        ways.append(pure)
    raw = dump.read_bytes()
    head = 24
    # extents: header (12 bytes) and data; the last one is appended to
    bad_device = raw + (3 << 54 | 8).to_bytes(8, "big") + (1).to_bytes(4, "big") + bytes(512)
    log_extent = raw + (1 << 54).to_bytes(8, "big") + (1).to_bytes(4, "big") + bytes(512)
    truncated = raw + (8).to_bytes(8, "big") + (4).to_bytes(4, "big") + bytes(700)
    assert raw[:4] == b"XMD2" and len(raw) > head
    for name, data in (("good", raw), ("device", bad_device), ("log", log_extent),
                       ("short", truncated)):
        p = tmp_path / f"{name}.md"
        p.write_bytes(data)
        got = [restore(p, how) for how in ways]
        if name == "good":
            assert got[0][0]["sectors"] > 0
            assert all(g[0] == got[0][0] and _same_bytes(g[1], got[0][1]) for g in got[1:])
            continue
        assert all(g == got[0] for g in got[1:]), (name, got)
        assert isinstance(got[0][0], str), (name, got[0][0])
