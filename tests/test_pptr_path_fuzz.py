"""Parent pointers fuzzed field by field, read by ``fstool path``.

On a copy of the kernel-written parent-pointer image (fixtures/pptr.py)
every field of a file's shortform attr fork (the header's totsize, count
and pad; each entry's namelen, valuelen, flags, name bytes and value: the
parent's inode number and generation) and of a leaf-form fork's block
(header count, usedbytes, firstused, holes; each entry's hashval, nameidx
and flags; each local name's valuelen, namelen, name and value) is set to
boundary and random values, the CRC made right again.  ``path --all``
reads that inode through the native ``parsers.PathTable`` (a whole inode
chunk at a time), ``path INO`` through the Python attr reader
(``fs.attr``): both must give the inode the same paths, the same broken
pointers and the same error, never a traceback or a hang.  A few of the
cases also go through the command line, both backends.

By default every field with its value's neighbours and one other value
drawn with a fixed seed (about 170 cases); FSTOOL_EVERY_FIELD=1 runs every field with every
value (about 670 cases, half a minute)."""
from __future__ import annotations

import os
import random
import struct
import subprocess
import sys

import pytest

import fstool as fsmod
import fstool_native
from fixtures import pptr
from fstool.errors import FsToolError
from fstool.ops.names import shown_name
from fstool.ops.parents import AllPaths, one_inode

EVERY = os.environ.get("FSTOOL_EVERY_FIELD") == "1"
CLI_SAMPLE = 3
parsers = fstool_native.load()

# shortform attr fork: header (totsize be16, count, pad), entries (namelen,
# valuelen, flags, name, value)
_SF_HDR = 4
# attr3 leaf block: the CRC at 12 in the da3 block header; the leaf header
# (count, usedbytes, firstused, holes) at 56; entries (hashval, nameidx,
# flags) from 80, 8 bytes each; a local name: valuelen be16, namelen, name, value
_LEAF_CRC = 12
_LEAF_ENTRIES = 80


# name bytes that paths show differently: '/', a newline, a backslash, a
# byte that is not UTF-8 alone, a control character
_NAME_BYTES = (0x2F, 0x0A, 0x5C, 0x80, 0x1B)


def _values(width: int, orig: int, rng, extra=()) -> list:
    """Values for a ``width``-byte field holding ``orig``: its neighbours
    (first), the boundaries, two random ones and ``extra``; never ``orig``."""
    top = (1 << (8 * width)) - 1
    out: list = []
    for v in [(orig - 1) & top, (orig + 1) & top, 0, 1, top, top - 1, top >> 1,
              rng.randrange(top + 1), rng.randrange(top + 1), *extra]:
        if v != orig and v not in out:
            out.append(v)
    return out


def _extra(name: str, inos: tuple) -> tuple:
    """The values with a meaning for a field called ``name``: name bytes
    shown escaped; for a parent's inode number, ``inos`` (the inode
    itself, the root, a regular file, another directory)."""
    if ".name[" in name:
        return _NAME_BYTES
    if name.endswith("p_ino"):
        return inos
    return ()


class Target:
    """One region of the image (an inode or an attr block) that the cases
    change, with its CRC field, and the inode whose paths are asked for."""

    def __init__(self, img, ino, off, size, crc_off):
        self.img, self.ino, self.off, self.size, self.crc_off = img, ino, off, size, crc_off
        with open(img, "rb") as f:
            f.seek(off)
            self.orig = f.read(size)

    def write(self, raw: bytes) -> None:
        buf = bytearray(raw)
        buf[self.crc_off:self.crc_off + 4] = struct.pack(
            "<I", parsers.xfs_cksum(bytes(buf), self.crc_off))
        with open(self.img, "r+b") as f:
            f.seek(self.off)
            f.write(buf)

    def restore(self) -> None:
        with open(self.img, "r+b") as f:
            f.seek(self.off)
            f.write(self.orig)


def _sf_fields(fork: bytes, rng, inos=()) -> list:
    """(name, offset in the fork, width, values) of every field of a
    shortform attr fork."""
    out = [("totsize", 0, 2), ("count", 2, 1), ("pad", 3, 1)]
    pos = _SF_HDR
    for e in range(fork[2]):
        namelen, valuelen = fork[pos], fork[pos + 1]
        out += [(f"[{e}].namelen", pos, 1), (f"[{e}].valuelen", pos + 1, 1),
                (f"[{e}].flags", pos + 2, 1)]
        out += [(f"[{e}].name[{i}]", pos + 3 + i, 1) for i in range(namelen)]
        v = pos + 3 + namelen
        if valuelen == 12:
            out += [(f"[{e}].p_ino", v, 8), (f"[{e}].p_gen", v + 8, 4)]
        pos = v + valuelen
    return [(name, at, w, _values(w, int.from_bytes(fork[at:at + w], "big"), rng,
                                  _extra(name, inos))) for name, at, w in out]


def _leaf_fields(block: bytes, rng, inos=()) -> list:
    """(name, offset in the block, width, values) of the leaf header, the
    entries and the local names of the parent pointers in an attr leaf."""
    out = [("hdr.count", 56, 2), ("hdr.usedbytes", 58, 2), ("hdr.firstused", 60, 2),
           ("hdr.holes", 62, 1)]
    count = struct.unpack_from(">H", block, 56)[0]
    for e in range(count):
        ent = _LEAF_ENTRIES + 8 * e
        nameidx, flags = struct.unpack_from(">HB", block, ent + 4)
        if not flags & 0x08 or not flags & 0x01:         # parent pointers, local values
            continue
        out += [(f"[{e}].hashval", ent, 4), (f"[{e}].nameidx", ent + 4, 2),
                (f"[{e}].flags", ent + 6, 1)]
        namelen = block[nameidx + 2]
        out += [(f"[{e}].valuelen", nameidx, 2), (f"[{e}].namelen", nameidx + 2, 1)]
        out += [(f"[{e}].name[{i}]", nameidx + 3 + i, 1) for i in (0, namelen - 1) if namelen]
        v = nameidx + 3 + namelen
        out += [(f"[{e}].p_ino", v, 8), (f"[{e}].p_gen", v + 8, 4)]
    return [(name, at, w, _values(w, int.from_bytes(block[at:at + w], "big"), rng,
                                  _extra(name, inos))) for name, at, w in out]


def _from_all(img, ino) -> tuple:
    """(paths as shown, broken pointers, errors) of ``ino`` as path --all
    finds them (every inode chunk read by the native table)."""
    with fsmod.open_image(img) as fs:
        w = AllPaths(fs)
        text, broken = w.render()
    head = f"{ino} ".encode()
    paths = sorted(line[len(head):].decode("utf-8") for line in text.split(b"\n")
                   if line.startswith(head))
    bad = sorted((b.parent.ino, b.parent.gen, b.parent.name, b.why)
                 for top, b in broken if top == ino)
    return paths, bad, [why for i, why in w.unread if i == ino]


def _from_one(img, ino) -> tuple:
    """The same, as path INO finds them (the inode read by fs.attr)."""
    with fsmod.open_image(img) as fs:
        w = one_inode(fs, ino)
        try:
            found = w.paths(ino)
        except FsToolError as e:
            return [], [], [str(e)]
        bad = sorted((b.parent.ino, b.parent.gen, b.parent.name, b.why) for b in w.broken)
    return sorted(shown_name(p) for p in found), bad, []


def _cases(fields, rng) -> list:
    """Every field with every one of its values (FSTOOL_EVERY_FIELD=1), or
    every field with its value's neighbours and one other."""
    if EVERY:
        return [(name, at, w, v) for name, at, w, values in fields for v in values]
    # each field's neighbours of its value and one value more
    return [(name, at, w, v) for name, at, w, values in fields
            for v in {*values[:2], rng.choice(values[2:])}]


@pytest.fixture(scope="module")
def fuzz_img(tmp_path_factory):
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    img = tmp_path_factory.mktemp("pptrfuzz") / "p.img"
    subprocess.run(["cp", "--sparse=always", str(pptr.pptr_image()), str(img)], check=True)
    return img


def _sf_target(img) -> tuple:
    with fsmod.open_image(img) as fs:
        ino = fs.lstat("/pptr/forms/sf").st_ino
        node = fs.inode(ino)
        agno, agbno, idx = fs.ino_location(ino)
        off = ((agno * fs.sb.agblocks + agbno) << fs.sb.blocklog) + idx * fs.sb.inodesize
        size = fs.sb.inodesize
        fork_at = size - len(node.fork_bytes(attr=True))
        assert node.aformat == 1
    return Target(img, ino, off, size, 100), fork_at


def _leaf_target(img) -> Target:
    with fsmod.open_image(img) as fs:
        ino = fs.lstat("/pptr/forms/leaf").st_ino
        node = fs.inode(ino)
        daddr, _pieces = node.read_fork_blocks(0, 1, attr=True)
        size = fs.sb.blocksize
    return Target(img, ino, daddr << 9, size, _LEAF_CRC)


def _run(target, at, width, value) -> tuple:
    raw = bytearray(target.orig)
    raw[at:at + width] = value.to_bytes(width, "big")
    target.write(bytes(raw))
    try:
        return _from_all(target.img, target.ino), _from_one(target.img, target.ino)
    finally:
        target.restore()


@pytest.mark.parametrize("form", ["shortform", "leaf"])
def test_path_all_and_path_ino_agree_on_fuzzed_parent_pointers(fuzz_img, form):
    """Every fuzzed field: the native table (path --all) and the Python
    reader (path INO) give the inode the same paths, broken pointers and
    error; the untouched image gives its paths and no error."""
    rng = random.Random(f"pptr-path-{form}")
    with fsmod.open_image(fuzz_img) as fs:
        inos = (fs.sb.rootino, fs.lstat("/pptr/forms/sf").st_ino,
                fs.lstat("/pptr/forms/leaf").st_ino, fs.lstat("/pptr/other").st_ino)
    if form == "shortform":
        target, fork_at = _sf_target(fuzz_img)
        fields = [(n, fork_at + at, w, v)
                  for n, at, w, v in _sf_fields(target.orig[fork_at:], rng, inos)]
    else:
        target = _leaf_target(fuzz_img)
        fields = _leaf_fields(target.orig, rng, inos)
    base = _from_all(fuzz_img, target.ino)
    assert base == _from_one(fuzz_img, target.ino) and base[0] and not base[1] and not base[2]
    differ = changed = 0
    for name, at, width, value in _cases(fields, rng):
        got_all, got_one = _run(target, at, width, value)
        assert got_all == got_one, (form, name, value)
        changed += got_all != base
        differ += 1
    assert differ and changed           # the cases reached the reader


def test_fuzzed_parent_pointers_through_the_command_line(fuzz_img):
    """A few shortform cases through the command line: path --all and
    path INO print the same paths for the inode and the same one-line
    messages, with no traceback; the pure backend's path --all (the first
    case) prints what the native one prints."""
    target, fork_at = _sf_target(fuzz_img)
    rng = random.Random("pptr-path-cli")
    fork = target.orig[fork_at:]
    namelen = fork[_SF_HDR]
    # a pointer's value cut short, a name with a newline and a byte that is
    # not UTF-8, a parent that is no directory, a count past the entries
    cases = [(fork_at + _SF_HDR + 1, 1, 11), (fork_at + _SF_HDR + 3, 1, 0x0A),
             (fork_at + _SF_HDR + 3 + namelen - 1, 1, 0xFF),
             (fork_at + _SF_HDR + 3 + namelen, 8, target.ino), (fork_at + 2, 1, 9)]
    errors = 0
    pure_done = False
    for at, width, value in [cases[0]] + rng.sample(cases[1:], CLI_SAMPLE - 1) \
            if not EVERY else cases:
        raw = bytearray(target.orig)
        raw[at:at + width] = value.to_bytes(width, "big")
        target.write(bytes(raw))
        try:
            runs = [subprocess.run([sys.executable, "-m", "fstool", "path", *args],
                                   capture_output=True, text=True, timeout=120, env=env)
                    for args, env in ((["--all", str(fuzz_img)], None),
                                      ([str(fuzz_img), str(target.ino)], None),
                                      (["--all", str(fuzz_img)],
                                       dict(os.environ, FSTOOL_PURE_PYTHON="1")))
                    if env is None or not pure_done or EVERY]
        finally:
            target.restore()
        for r in runs:
            assert "Traceback" not in r.stderr, r.stderr
            assert r.returncode == (1 if r.stderr else 0), (r.returncode, r.stderr)
        if len(runs) == 3:              # the pure backend (slow) once
            assert runs[0].stdout == runs[2].stdout and runs[0].stderr == runs[2].stderr
            pure_done = True
        mine = sorted(line.split(" ", 1)[1] for line in runs[0].stdout.splitlines()
                      if line.split(" ", 1)[0] == str(target.ino))
        assert mine == sorted(runs[1].stdout.splitlines()), value
        # the same one-line messages about the inode, in both
        errs_all = sorted(line for line in runs[0].stderr.splitlines()
                          if line.startswith(f"fstool: inode {target.ino}:"))
        assert errs_all == sorted(runs[1].stderr.splitlines()), value
        assert runs[0].stderr.splitlines() == errs_all
        errors += bool(errs_all)
    assert errors                       # some cases were errors
