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
