"""Pieces of the mount's create path that exist for speed: each must give
what the slower way gives.

- the free inodes of a new chunk written a cluster at a time
  (``writers.fill_free_inodes``, both backends) are the encoder's free
  inodes;
- names found missing by the kernel's lookups stay known missing while
  only creates of other names end (several processes' lookups and creates
  interleave), so such a create looks its name up no second time, and a
  name made or changed in between is looked up again;
- a directory block read again by the transaction that joined it is that
  buffer, and read anew once the directory's block map changed;
- a new empty file's inode (its parent pointer in shortform included) is
  encoded on its own (``InodeAllocator.put_simple_inode``) into the bytes the
  bulk writer gives, and the create's answer comes from it, not from the
  inode decoded again; the parent pointer's generation is the parent's."""
from __future__ import annotations

import errno
import os
import shutil

import pytest

import fstool_native
from fixtures.fusemount import fstool_image, repair_clean
from fstool.alloc.inodes import InodeAllocator
from fstool.format import constants as C
from fstool.fs.filesystem import Filesystem
from fstool.fs.icore import InodeEncoder
from fstool.mount.volume import Volume
from fstool.ns import namespace as NS
from fstool.trans.trans import Transaction


@pytest.mark.parametrize("pure", [False, True])
def test_fill_free_inodes_equals_the_encoder(pure):
    writers = fstool_native.load(pure=pure, name="writers")
    parsers = fstool_native.load(pure=pure)
    enc = InodeEncoder(512, bytes(range(16)), bigtime=True, nrext64=False)
    base = 8192
    junk = bytes((i * 7 + 3) & 0xFF for i in range(32 * 512))
    buf = bytearray(junk)
    slots = (0, 1, 5, 30, 31)
    mask = sum(1 << i for i in slots)
    n = writers.fill_free_inodes(buf, enc.free(0), base, mask, C.XFS_DINODE_CRC_OFF,
                                 parsers.xfs_cksum)
    assert n == len(slots)
    for i in range(32):
        got = bytes(buf[i * 512:(i + 1) * 512])
        assert got == (enc.free(base + i) if i in slots else junk[i * 512:(i + 1) * 512])
    with pytest.raises(ValueError):
        writers.fill_free_inodes(buf, enc.free(0), base, 1 << 32, C.XFS_DINODE_CRC_OFF,
                                 parsers.xfs_cksum)


def _volume(tmp_path):
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    v.group = 32
    return img, v, v.mkdir(v.rootino, b"d", 0o755).ino


def _count_lookups(monkeypatch) -> list:
    calls = []
    real = NS.Namespace.lookup_child

    def counted(self, parent, name):
        calls.append(name)
        return real(self, parent, name)
    monkeypatch.setattr(NS.Namespace, "lookup_child", counted)
    return calls


def _create(v, d, name):
    later = []
    fh, a = v.create(d, name, 0o100644, os.O_WRONLY, later=later)
    for fn in later:
        fn()
    v.release(fh)
    return a.ino


def test_interleaved_creates_look_their_names_up_once(tmp_path, monkeypatch):
    img, v, d = _volume(tmp_path)
    calls = _count_lookups(monkeypatch)
    for round_ in range(3):
        names = [b"p%d-%d" % (p, round_) for p in range(4)]
        for n in names:
            assert v.find(d, n) is None
        for n in names:
            _create(v, d, n)
    # one lookup per name: the kernel's (before, the creates of the first
    # three names of each round looked their names up again)
    assert sorted(calls) == sorted(b"p%d-%d" % (p, r) for p in range(4) for r in range(3))
    for r in range(3):
        for p in range(4):
            assert v.find(d, b"p%d-%d" % (p, r)) is not None
    v.close()
    repair_clean(img)


def test_a_name_made_meanwhile_is_looked_up_again(tmp_path):
    img, v, d = _volume(tmp_path)
    assert v.find(d, b"a") is None
    assert v.find(d, b"b") is None
    _create(v, d, b"a")
    # "a" is made: a second create of it finds it (EEXIST), though the
    # kernel's lookup found it missing
    with pytest.raises(OSError) as e:
        _create(v, d, b"a")
    assert e.value.errno == errno.EEXIST
    # "b" made under another way (a hard link) after its lookup
    assert v.find(d, b"c") is None
    v.link(v.find(d, b"a").ino, d, b"c")
    with pytest.raises(OSError) as e:
        _create(v, d, b"c")
    assert e.value.errno == errno.EEXIST
    _create(v, d, b"b")
    v.close()
    repair_clean(img)


def test_a_directory_block_is_read_once_per_transaction(tmp_path, monkeypatch):
    img, v, d = _volume(tmp_path)
    reads = []
    real = Transaction.read_buf

    def counted(self, daddr, length, bt, **where):
        reads.append(daddr)
        return real(self, daddr, length, bt, **where)
    monkeypatch.setattr(Transaction, "read_buf", counted)
    # past shortform: a block directory, then leaf, each name looked up
    # before its create as the kernel does; a group of 32 creates is one
    # transaction
    for i in range(400):
        name = b"file-%04d-%s" % (i, b"y" * 30)
        assert v.find(d, name) is None
        _create(v, d, name)
    v.sync()
    groups = 400 // 32 + 1
    # without the memo every lookup and every insert read its blocks again
    # (more than 800 reads); with it, about the blocks of each group
    assert len(reads) < 12 * groups, len(reads)
    names = {e[0] for e in v.entries(d)}
    assert len(names) == 402
    v.close()
    repair_clean(img)


def test_shortform_appends_write_what_the_general_insert_writes(tmp_path, monkeypatch):
    """Names added to shortform directories (with holes left by removals,
    up to and past the conversion to a block) leave the image the general
    re-encoding insert leaves."""
    from fstool.ns.dirops import Dir
    base = fstool_image(tmp_path, "256m")
    images = {}
    appended = []
    real = Dir._sf_append

    def counted(self, name, ino, ftype):
        done = real(self, name, ino, ftype)
        appended.append(done)
        return done
    for way in ("append", "general"):
        img = tmp_path / f"{way}.img"
        shutil.copyfile(base, img)
        if way == "append":
            monkeypatch.setattr(Dir, "_sf_append", counted)
        else:
            monkeypatch.setattr(Dir, "_sf_append", lambda self, name, ino, ftype: False)
        v = Volume(img, timestamp_ns=1_700_000_000_000_000_000)
        v.group = 32
        dirs = [v.mkdir(v.rootino, b"d%d" % k, 0o755).ino for k in range(3)]
        for i in range(60):
            d = dirs[i % 3]
            name = b"n%d-" % i + b"z" * (i % 23)
            assert v.find(d, name) is None
            _create(v, d, name)
            if i % 7 == 3:
                v.unlink(d, name)
        v.close()
        images[way] = img.read_bytes()
        repair_clean(img)
    assert appended.count(True) > 20 and False in appended
    assert images["append"] == images["general"]


@pytest.mark.parametrize("mkfs", [(), ("-n", "parent=1")], ids=["plain", "parent"])
def test_a_new_file_is_answered_from_the_inode_it_wrote(tmp_path, monkeypatch, mkfs):
    base = fstool_image(tmp_path, "256m", *mkfs)
    images = {}
    for way in ("alone", "bulk"):
        img = tmp_path / f"{way}.img"
        shutil.copyfile(base, img)
        if way == "bulk":
            monkeypatch.setattr(
                InodeAllocator, "put_simple_inode",
                lambda self, ino, item, ifmt, ctime_ns, attr=None: self.put_simple_inodes(
                    [ino], [item], ifmt, ctime_ns, None, None if attr is None else [attr]))
        v = Volume(img, timestamp_ns=1_700_000_000_000_000_000)
        v.group = 32
        dirs = [v.mkdir(v.rootino, b"d%d" % k, 0o755).ino for k in range(2)]
        v.sync()
        decoded = []
        real = Volume._fresh_attr

        def counted(self, ino):
            a = real(self, ino)
            if a is None:           # the caller decodes the inode again
                decoded.append(ino)
            return a
        monkeypatch.setattr(Volume, "_fresh_attr", counted)
        made = []
        # past the chunks mkfs and mkdir made: new chunks taken by the
        # groups of creates themselves (their inodes written a cluster at a
        # time by the bulk writer)
        for i in range(200):
            d = dirs[i % 2]
            name = b"f%d-" % i + b"q" * (i % 40)
            assert v.find(d, name) is None
            made.append((d, name, _create(v, d, name)))
        monkeypatch.setattr(Volume, "_fresh_attr", real)
        if way == "alone":
            assert not decoded
        v.close()
        images[way] = img.read_bytes()
        repair_clean(img)
        if mkfs:
            # each file's parent pointer names its directory, with the
            # directory's generation
            with Filesystem(img) as fs:
                for d, name, ino in made:
                    assert [tuple(p) for p in fs.parents(ino)] == \
                        [(d, fs.inode(d).gen, name)]
    assert images["alone"] == images["bulk"]


# -- one directory entry inserted natively (writers.dir_block_add, dir_put_entry,
#    dir_use_free, dir_freescan: dirops' insert, dirdata's use_free and freescan) --------------
_WRITERS = [fstool_native.load(pure=p, name="writers") for p in (False, True)]
_BOTH = pytest.mark.skipif(not fstool_native.is_native(_WRITERS[0]),
                           reason="the native modules are not built: nothing to compare")


def _block(dbs: int = 4096) -> bytearray:
    """A fresh single-block directory holding '.' and '..', as
    Dir._sf_to_block leaves an empty one."""
    from fstool.fs import dirblock as B
    from fstool.ns import dirdata as D
    buf = bytearray(dbs)
    B.init_header(buf, C.XFS_DIR3_BLOCK_MAGIC, 0, bytes(16), 128)
    off = D.HDR + D.put_entry(buf, D.HDR, 128, b".", C.XFS_DIR3_FT_DIR)
    end = off + D.put_entry(buf, off, 128, b"..", C.XFS_DIR3_FT_DIR)
    B.put_block_tail(buf, 2, 0)
    blp = B.block_leaf_start(buf, 2)
    leaf = sorted([(parsers_hash(b"."), D.HDR >> 3), (parsers_hash(b".."), off >> 3)])
    for i, (h, a) in enumerate(leaf):
        B.put_leaf_entry(buf, blp, i, h, a)
    D.put_unused(buf, end, blp - end)
    _WRITERS[1].dir_freescan(buf)
    return buf


def parsers_hash(name: bytes) -> int:
    return fstool_native.load(pure=True).da_hashname(name)


def _names(rng, n: int) -> list:
    return [bytes(rng.choice(b"abcdefghij0123456789._-") for _ in range(rng.randint(1, 40)))
            + b"%d" % i for i in range(n)]


def _sound(buf, names) -> None:
    """Every name in the block once, the leaf array sorted by hash and
    pointing at them, the bestfree table as xfs_repair wants it."""
    from fstool.fs import dirblock as B
    from fstool.ns import dirdata as D
    from fstool.fs.dirform.data import bestfree_verify
    count, stale = B.block_tail(buf)
    blp = B.block_leaf_start(buf, count)
    ents = fstool_native.load(pure=True).dir2_data_entries(buf, D.HDR, blp, True)
    assert sorted(e[2] for e in ents) == sorted([b".", b".."] + names)
    by_off = {e[0]: e[2] for e in ents}
    leaf = [B.leaf_entry(buf, blp, i) for i in range(count)]
    assert [h for h, _a in leaf] == sorted(h for h, _a in leaf)
    assert sorted(by_off[a << 3] for _h, a in leaf if a) == sorted(by_off.values())
    assert all(h == parsers_hash(by_off[a << 3]) for h, a in leaf if a)
    frees = [(n, off) for off, n, free in D.regions(buf) if free]
    assert bestfree_verify(buf, frees)[1]


@_BOTH
def test_block_insert_native_equals_pure_until_the_block_is_full():
    """dir_block_add, compiled and pure, give the same bytes after every
    insert, and a sound block (checked without either), until the block
    has no room (False: the block unchanged, the caller converts it)."""
    import random
    rng = random.Random(38)
    bufs = [_block(), _block()]
    names = _names(rng, 400)
    done = []
    for k, name in enumerate(names):
        got = [w.dir_block_add(b, name, 1000 + k, C.XFS_DIR3_FT_REG_FILE, parsers_hash(name))
               for w, b in zip(_WRITERS, bufs)]
        assert got[0] == got[1]
        assert bufs[0] == bufs[1]
        if not got[0]:
            break
        done.append(name)
    assert 50 < len(done) < 400
    _sound(bufs[0], done)
    before = bytes(bufs[0])
    assert not _WRITERS[0].dir_block_add(bufs[0], b"x" * 200, 1, 1, parsers_hash(b"x" * 200))
    assert bytes(bufs[0]) == before


@_BOTH
def test_block_insert_refuses_stale_entries_and_fills_holes_as_the_pure_twin():
    """A block with holes (entries removed, their leaf slots stale): the
    common insert refuses it, unchanged; entries put into the holes by
    dir_put_entry (every shape of use_free: the whole region, its front,
    its middle, its back) keep both backends equal and the block sound."""
    import random
    from fstool.fs import dirblock as B
    from fstool.ns import dirdata as D
    rng = random.Random(7)
    buf = _block()
    names = _names(rng, 60)
    for k, name in enumerate(names):
        assert _WRITERS[1].dir_block_add(buf, name, 1000 + k, 1, parsers_hash(name))
    count, _stale = B.block_tail(buf)
    blp = B.block_leaf_start(buf, count)
    # remove every third entry: its space freed, its leaf slot stale
    gone = set()
    for i in range(count):
        h, a = B.leaf_entry(buf, blp, i)
        if a and i % 3 == 0:
            off = a << 3
            _ino, name, _ft, size = D.entry_at(buf, off)
            if name in (b".", b".."):
                continue
            D.make_free(buf, off, size)
            B.put_leaf_entry(buf, blp, i, h, 0)
            gone.add(name)
    B.put_block_tail(buf, count, sum(1 for i in range(count)
                                     if B.leaf_entry(buf, blp, i)[1] == 0))
    for w in _WRITERS:
        b = bytearray(buf)
        assert not w.dir_block_add(b, b"new", 1, 1, parsers_hash(b"new"))
        assert b == buf
    bufs = [bytearray(buf), bytearray(buf)]
    holes = [(off, n) for off, n, free in D.regions(buf) if free]
    for j, (off, n) in enumerate(holes):
        for w, b in zip(_WRITERS, bufs):
            if j % 4 == 0 and n >= 24:          # the region's front
                w.dir_put_entry(b, off, 5000 + j, b"y" * (n - 24 + 1), 1)
                continue
            if j % 4 == 1 and n >= 32:          # its middle
                at, size = off + 8, 16
            elif j % 4 == 2 and n >= 24:        # its back
                at, size = off + n - 16, 16
            elif 13 <= n <= 255 + 12:           # all of it
                at, size = off, n
            else:
                continue
            scan = w.dir_use_free(b, off, at, size)
            D.put_entry(b, at, 6000 + j, b"z" * (size - 12), 1)
            if scan:
                w.dir_freescan(b)
        assert bufs[0] == bufs[1]
    count, stale = B.block_tail(bufs[0])
    frees = [(n, off) for off, n, free in D.regions(bufs[0]) if free]
    assert sum(n for n, _o in frees) < sum(n for _o, n in holes)
    from fstool.fs.dirform.data import bestfree_verify
    assert bestfree_verify(bufs[0], frees)[1]
    for w in _WRITERS:
        with pytest.raises(ValueError):
            w.dir_use_free(bytearray(buf), D.HDR, D.HDR, 8)     # '.' is no unused region


def _round_robin(img, dirs: int, files: int, monkeypatch, cached: bool) -> tuple:
    """Inode numbers of ``files`` creates round robin over ``dirs`` new
    directories (group commit of 256, a chunk filling every 64 creates),
    some files removed between rounds, and the finobt lookups they made;
    ``cached`` False: every search looks the finobt up."""
    from fstool.fs import btree_write as BW
    looked = []
    with monkeypatch.context() as m:
        for name in ("lookup_le", "lookup_ge"):
            real = getattr(BW.ShortBtree, name)
            m.setattr(BW.ShortBtree, name,
                      lambda self, key, _r=real: looked.append(key) or _r(self, key))
        if not cached:
            m.setattr(InodeAllocator, "_gap", lambda self, agno, fino, pagino: None)
        else:
            real_gap = InodeAllocator._gap

            def checked(self, agno, fino, pagino):
                # every answer from a stretch is what the lookups give now
                got = real_gap(self, agno, fino, pagino)
                mark = len(looked)
                if got is not None:
                    lo = fino.lookup_le((pagino,))
                    assert got[0] == lo
                    if got[1] is not None or lo is None or lo[0] + 64 <= pagino:
                        assert got[1] == fino.lookup_ge((pagino + 1,))
                    del looked[mark:]
                return got
            m.setattr(InodeAllocator, "_gap", checked)
        v = Volume(img, timestamp_ns=1_700_000_000 * 10 ** 9)
        v.group = 256
        try:
            ds = [v.mkdir(v.rootino, b"d%d" % k, 0o755).ino for k in range(dirs)]
            v.sync()
            got = []
            for r in range(3):
                for i in range(files):
                    got.append(_create(v, ds[i % dirs], b"f%d-%d" % (r, i)))
                v.sync()
                # frees (they reach the finobt at their commit)
                for i in range(0, files, 7):
                    v.unlink(ds[i % dirs], b"f%d-%d" % (r, i))
                v.sync()
        finally:
            v.close()
    return got, len(looked)


def test_finobt_searches_of_a_transaction_are_reused_while_its_keys_hold(tmp_path,
                                                                        monkeypatch):
    """Creates over many directories whose nearest free chunk fills ask the
    finobt the same question, one search each: a stretch a search found
    without records answers the next (InodeAllocator._gap) while the
    finobt's keys are unchanged.  The inodes taken are those of a search
    each time (new chunks and frees in between), with far fewer lookups;
    the image is repair-clean."""
    img = fstool_image(tmp_path, "256m")
    twin = str(tmp_path / "twin.img")
    shutil.copyfile(img, twin)
    got, n = _round_robin(img, 40, 600, monkeypatch, cached=True)
    want, n_all = _round_robin(twin, 40, 600, monkeypatch, cached=False)
    assert got == want
    assert n * 2 < n_all
    assert open(img, "rb").read() == open(twin, "rb").read()
    repair_clean(img)
