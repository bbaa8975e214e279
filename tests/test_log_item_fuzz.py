"""Fuzz of the log item decoders and of the commands that read log items.

Two layers, each a seeded sample by default (``FSTOOL_LOG_FUZZ=N`` draws N
mutations per item instead, for a long run):

- the decoders (fstool.log.items.decode, summary, intent_what): every item
  of the kernel-written fixture logs that is not a plain buffer or inode
  item (ATTRI/ATTRD, XMI, BUI, ICREATE), a sample of the buffer and inode
  items, and an item of every intent and done type built from its layout
  (EFI/EFD, RUI/RUD, CUI/CUD, BUI/BUD, XMI/XMD, every ATTRI op including
  the parent-pointer ones), each mutated (bits flipped, 32-bit fields set
  to edge values, regions cut, lengthened, dropped or repeated, the type
  code swapped for another's): each decodes to a dict whose summary is a
  string, or is refused with ItemError, never another exception;
- end to end: in a copy of the kernel-written parent-pointer log
  (fixtures/logs/pptr-intents), the op holding an intent's format or one of
  the regions after it is damaged and its record's CRC stamped afresh (so
  the damage reaches the item decoders and recovery rather than the CRC
  check): ``fstool log print`` (both views) and ``fstool log replay`` give a
  result or a one-line error with a non-zero status, never a traceback, and
  a replay that refuses leaves the image byte for byte as it was.
"""
from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import fstool
from fixtures import log_fixtures as LF
from fixtures import pptr_log
from fstool.format import constants as C
from fstool.format import log as L
from fstool.log.items import ItemError, decode, intent_what, summary
from fstool.log.reassemble import Item, Reassembler

REPO = Path(__file__).resolve().parent.parent
TRIES = int(os.environ.get("FSTOOL_LOG_FUZZ", "0") or 0)
HAVE_PPTR = (LF.HERE / f"{pptr_log.NAME}.img.zst").exists()

INTENTS = (L.XFS_LI_EFI, L.XFS_LI_EFD, L.XFS_LI_RUI, L.XFS_LI_RUD, L.XFS_LI_CUI,
           L.XFS_LI_CUD, L.XFS_LI_BUI, L.XFS_LI_BUD, L.XFS_LI_ATTRI, L.XFS_LI_ATTRD,
           L.XFS_LI_XMI, L.XFS_LI_XMD, L.XFS_LI_EFI_RT, L.XFS_LI_EFD_RT, L.XFS_LI_RUI_RT,
           L.XFS_LI_RUD_RT, L.XFS_LI_CUI_RT, L.XFS_LI_CUD_RT)
TYPES = INTENTS + (L.XFS_LI_BUF, L.XFS_LI_INODE, L.XFS_LI_ICREATE, L.XFS_LI_DQUOT,
                   L.XFS_LI_QUOTAOFF, L.XFS_LI_IUNLINK, 0, 0xFFFF)


def _head(code: int, nregions: int, count: int, ident: int) -> bytes:
    return struct.pack("<HHIQ", code, nregions, count, ident)


def _built_items() -> list:
    """One item of every intent and done type, from the layouts."""
    ext64 = b"".join(L.EXTENT_64.pack({"ext_start": 1000 + i, "ext_len": 8, "ext_pad": 0})
                     for i in range(2))
    maps = b"".join(L.MAP_EXTENT.pack({"me_owner": 131, "me_startblock": 4000 + i,
                                       "me_startoff": 16 * i, "me_len": 4, "me_flags": i})
                    for i in range(2))
    phys = b"".join(L.PHYS_EXTENT.pack({"pe_startblock": 5000 + i, "pe_len": 2,
                                        "pe_flags": 1 + i}) for i in range(2))
    out = [Item([_head(L.XFS_LI_EFI, 1, 2, 7) + ext64], 1),
           Item([_head(L.XFS_LI_EFD, 1, 2, 7) + ext64], 1),
           Item([_head(L.XFS_LI_RUI, 1, 2, 8) + maps], 1),
           Item([_head(L.XFS_LI_RUD, 1, 0, 8)], 1),
           Item([_head(L.XFS_LI_CUI, 1, 2, 9) + phys], 1),
           Item([_head(L.XFS_LI_CUD, 1, 0, 9)], 1),
           Item([_head(L.XFS_LI_BUI, 1, 1, 10) + maps[:L.MAP_EXTENT.size]], 1),
           Item([_head(L.XFS_LI_BUD, 1, 0, 10)], 1),
           Item([_head(L.XFS_LI_XMD, 1, 0, 11)], 1),
           Item([_head(L.XFS_LI_ATTRD, 1, 0, 12)], 1),
           Item([L.XMI_LOG_FORMAT.pack({
               "xmi_type": L.XFS_LI_XMI, "xmi_size": 1, "xmi_id": 11, "xmi_inode1": 131,
               "xmi_inode2": 132, "xmi_igen1": 1, "xmi_igen2": 2, "xmi_startoff1": 0,
               "xmi_startoff2": 4, "xmi_blockcount": 9, "xmi_flags": 3, "xmi_isize1": 4096,
               "xmi_isize2": -1})], 1)]
    parent = struct.pack(">QI", 128, 7)
    for op in range(1, 7):
        pptr = op >= L.XFS_ATTRI_OP_FLAGS_PPTR_SET
        fmt = L.ATTRI_LOG_FORMAT.pack({
            "alfi_type": L.XFS_LI_ATTRI, "alfi_size": 0, "alfi_igen": 3, "alfi_id": 12,
            "alfi_ino": 133, "alfi_op_flags": op, "alfi_name_len": 6,
            "alfi_value_len": len(parent) if pptr else 10,
            "alfi_attr_filter": C.XFS_ATTR_PARENT if pptr else 0})
        f = L.attri_format(fmt)
        regions = [fmt]
        for key, fill in (("name_len", b"n"), ("new_name_len", b"m"), ("value_len", b"v"),
                          ("new_value_len", b"w")):
            if f[key]:
                data = parent if pptr and key.endswith("value_len") else fill * f[key]
                regions.append(data + bytes(-len(data) % 4))
        fmt = bytearray(fmt)
        struct.pack_into("<H", fmt, 2, len(regions))
        regions[0] = bytes(fmt)
        out.append(Item(regions, len(regions)))
    return out


def _fixture_items(path: Path) -> list:
    """The items of the fixture log at ``path`` worth fuzzing: every one
    that is not a buffer or inode item, and a sample of those."""
    keep, common = [], []
    with fstool.open_image(path, replay_in_memory=False) as fs:
        re = Reassembler()
        for rec in fs.log.records():
            for t in re.feed(rec):
                for it in t.items:
                    if not it.regions:
                        continue
                    (common if it.type in (L.XFS_LI_BUF, L.XFS_LI_INODE) else keep).append(it)
    rng = random.Random(5)
    return keep + rng.sample(common, min(len(common), 12))


def _mutations(item: Item, rng: random.Random, n: int):
    """``n`` damaged copies of ``item``."""
    for _ in range(n):
        regions = [bytearray(r) for r in item.regions]
        total = item.total
        for _step in range(rng.randint(1, 3)):
            how = rng.randrange(8)
            i = rng.randrange(len(regions)) if regions else 0
            if how == 0 and regions and regions[i]:
                b = rng.randrange(len(regions[i]) * 8)
                regions[i][b // 8] ^= 1 << (b % 8)
            elif how == 1 and regions and len(regions[i]) >= 4:
                off = rng.randrange(len(regions[i]) // 4) * 4
                regions[i][off:off + 4] = struct.pack(
                    "<I", rng.choice([0, 1, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF,
                                      rng.getrandbits(32)]))
            elif how == 2 and regions:
                del regions[i][rng.randrange(len(regions[i]) + 1):]
            elif how == 3 and regions:
                regions[i] += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40)))
            elif how == 4 and len(regions) > 1:
                del regions[i]
            elif how == 5 and regions:
                regions.insert(i, bytearray(regions[i]))
            elif how == 6 and regions and len(regions[0]) >= 2:
                regions[0][0:2] = struct.pack("<H", rng.choice(TYPES))
            else:
                total = rng.choice([0, 1, len(regions), len(regions) + 1, 0xFFFF])
        yield Item([bytes(r) for r in regions], total)


def test_built_items_decode():
    """The built items are sound before they are damaged (else the fuzz
    below would only ever see refusals)."""
    for item in _built_items():
        d = decode(item)
        assert d["type_code"] == item.type and isinstance(summary(d), str)


@pytest.mark.parametrize("source", ["built", "fixtures"])
def test_damaged_items_decode_or_are_refused(source, tmp_path):
    if source == "built":
        items = _built_items()
    else:
        names = [n for n in (pptr_log.NAME, "dirty-rmapbt")
                 if (LF.HERE / f"{n}.img.zst").exists()]
        if not names:
            pytest.skip("fixtures/logs/*.img.zst not built")
        items = [it for n in names
                 for it in _fixture_items(LF.unpack(n, tmp_path / f"{n}.img"))]
    assert items
    rng = random.Random(f"decode-{source}")
    per = TRIES or 40
    refused = decoded = 0
    for item in items:
        for bad in _mutations(item, rng, per):
            try:
                d = decode(bad)
            except ItemError:
                refused += 1
                continue
            decoded += 1
            assert isinstance(summary(d), str)
            if d["type_code"] in INTENTS:
                assert isinstance(intent_what(d), str)
    # the mutations reach both outcomes (else they test nothing)
    assert refused and decoded


# -- end to end ------------------------------------------------------------------------------
def run(*args):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def _intent_ops(img: Path) -> list:
    """(record block, header blocks, h_len, op offset in the body, op
    length) of every op whose region is an intent's format or one of the
    two regions after it (ATTRI names and values)."""
    with fstool.open_image(img, replay_in_memory=False) as fs:
        start = fs.log.device.start_daddr
        recs = [(r.blk, r.hblks, r.header["h_len"]) for r in fs.log.records()]
    out = []
    with open(img, "rb") as f:
        for blk, hblks, h_len in recs:
            f.seek((start + blk) * 512)
            raw = bytearray(f.read((hblks + L.record_blocks(h_len)) * 512))
            hdr, body = raw[:hblks * 512], raw[hblks * 512:]
            L.unstamp_cycles(hdr, body, h_len)
            n = L.REC_HEADER.unpack(hdr)["h_num_logops"]
            dp, after = 0, 0
            while dp + 12 <= h_len and n:
                oplen = struct.unpack_from(">I", body, dp + 4)[0]
                d = dp + 12
                if d + oplen > h_len:
                    break
                code = struct.unpack_from("<H", body, d)[0] if oplen >= 2 else 0
                if code in INTENTS:
                    after = 3
                if after and oplen:
                    out.append((blk, hblks, h_len, d, oplen))
                    after -= 1
                dp = d + oplen
                n -= 1
    return start, out


def _damage(img: Path, start: int, op, rng: random.Random) -> None:
    blk, hblks, h_len, off, oplen = op
    with open(img, "r+b") as f:
        f.seek((start + blk) * 512)
        raw = bytearray(f.read((hblks + L.record_blocks(h_len)) * 512))
        hdr, body = raw[:hblks * 512], raw[hblks * 512:]
        cyc = L.REC_HEADER.unpack(hdr)["h_cycle"]
        L.unstamp_cycles(hdr, body, h_len)
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.5:
                b = rng.randrange(oplen * 8)
                body[off + b // 8] ^= 1 << (b % 8)
            elif oplen >= 4:
                at = off + rng.randrange(oplen // 4) * 4
                body[at:at + 4] = struct.pack(
                    "<I", rng.choice([0, 1, 0xFFFFFFFF, rng.getrandbits(32)]))
        L.stamp_cycles(hdr, body, cyc)
        L.set_rec_crc(hdr, body, h_len)
        f.seek((start + blk) * 512)
        f.write(hdr + body)


@pytest.mark.skipif(not HAVE_PPTR, reason="fixtures/logs/pptr-intents not built")
def test_damaged_intent_in_a_kernel_log(tmp_path):
    base = LF.unpack(pptr_log.NAME, tmp_path / "base.img")
    start, ops = _intent_ops(base)
    assert ops, "the fixture's log has no intent ops"
    rng = random.Random("intent-ops")
    cases = TRIES or 3
    outcomes = set()
    for case in range(cases):
        img = tmp_path / f"case{case}.img"
        subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
        _damage(img, start, rng.choice(ops), rng)
        ref = tmp_path / "ref.img"
        subprocess.run(["cp", "--sparse=always", str(img), str(ref)], check=True)
        for view in ([], ["-t"]):
            r = run("log", "print", *view, img)
            assert "Traceback" not in r.stderr, r.stderr
            assert r.returncode == 0 or r.stderr.strip().count("\n") == 0, r.stderr
        r = run("log", "replay", img)
        assert "Traceback" not in r.stderr, r.stderr
        outcomes.add(r.returncode)
        if r.returncode:
            assert r.stderr.strip().count("\n") == 0, r.stderr
            assert subprocess.run(["cmp", "-s", str(ref), str(img)]).returncode == 0, \
                f"case {case}: a refused replay wrote"
        img.unlink()
    assert outcomes <= {0, 4}, outcomes
