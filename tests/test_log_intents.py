"""The log items parent pointers and exchange-range bring (ATTRI/ATTRD,
XMI/XMD): decoded and printed as xfs_logprint 6.10.1 does, on a log the
kernel wrote (fixtures/pptr_log.py: fixtures/logs/pptr-intents.*).  Their
replay: tests/test_log_recover_intents.py."""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import log_fixtures as LF
from fixtures import modern, pptr_log
from fstool.format import constants as C
from fstool.format import log as L
from fstool.format.structs import PARENT_REC
from fstool.log.items import decode, summary
from fstool.log.reassemble import Item

REPO = Path(__file__).resolve().parent.parent
HAVE = (LF.HERE / f"{pptr_log.NAME}.img.zst").exists()
needs_fixture = pytest.mark.skipif(not HAVE, reason="fixtures/logs/pptr-intents not built")


def run(*args):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return LF.unpack(pptr_log.NAME, tmp_path_factory.mktemp("pptr") / "pptr.img")


def _expected() -> dict:
    return json.loads((LF.HERE / f"{pptr_log.NAME}.json").read_text())["logprint"]


def _fstool_counts(img) -> dict:
    r = run("log", "print", "-t", "--json", img)
    assert r.returncode == 0, r.stderr
    trans = collections.Counter(it["type"] for ln in r.stdout.splitlines()
                                for it in json.loads(ln)["items"])
    r = run("log", "print", "--json", img)
    assert r.returncode == 0, r.stderr
    recs = collections.Counter(o["item"]["type"] for ln in r.stdout.splitlines()
                               for o in json.loads(ln)["ops"]
                               if "item" in o and o["item"]["type"] != "TRANS")
    return {"transactions": dict(trans), "records": dict(recs)}


def _pptr_replace_item() -> Item:
    fmt = L.ATTRI_REPLACE_LOG_FORMAT.pack({
        "alfi_type": L.XFS_LI_ATTRI, "alfi_size": 5, "alfi_igen": 9, "alfi_id": 0x77,
        "alfi_ino": 0x84, "alfi_op_flags": L.XFS_ATTRI_OP_FLAGS_PPTR_REPLACE,
        "alfi_old_name_len": 3, "alfi_new_name_len": 6, "alfi_value_len": 12,
        "alfi_attr_filter": C.XFS_ATTR_PARENT})
    old = PARENT_REC.pack({"p_ino": 131, "p_gen": 5})
    new = PARENT_REC.pack({"p_ino": 200, "p_gen": 6})
    # names are logged padded to 4 bytes, as the kernel's log vectors are
    return Item([fmt, b"old\0", b"newnam\0\0", old, new], 5)


def test_pptr_replace_regions():
    """A PPTR_REPLACE intent reads its name-length union as old/new lengths
    and carries old name, new name, old value, new value, in that order."""
    d = decode(_pptr_replace_item())
    assert (d["op"], d["name"], d["new_name"]) == ("pptr_replace", "old", "newnam")
    assert (d["name_len"], d["new_name_len"], d["value_len"], d["new_value_len"]) == \
        (3, 6, 12, 12)
    assert d["pptr"] == [
        {"tag": "OLDNAME", "p_ino": 131, "p_gen": 5, "name": "old"},
        {"tag": "NEWNAME", "p_ino": 200, "p_gen": 6, "name": "newnam"}]
    assert summary(d).split("\n") == [
        "ATTRI:  #regs: 5\tf: 0x6, ino: 0x84, igen: 0x9, attr_filter: 0x8, name_len: 3, "
        "new_name_len: 6, value_len: 12, new_value_len: 12  id: 0x77",
        "ATTRI:  name len:3", "old", "ATTRI:  newname len:6", "newnam",
        "ATTRI:  value len:12", "00000000 0000 0000 0000 0083 0000 0005 ",
        "ATTRI:  newvalue len:12", "00000000 0000 0000 0000 00c8 0000 0006 ",
        "PPTR: OLDNAME attr_namelen 3 attr_valuelen 12",
        "PPTR: OLDNAME parent_ino 131 parent_gen 5 name 'old'",
        "PPTR: NEWNAME attr_namelen 6 attr_valuelen 12",
        "PPTR: NEWNAME parent_ino 200 parent_gen 6 name 'newnam'"]


def test_short_parent_value_is_reported_corrupt():
    it = _pptr_replace_item()
    d = decode(Item(list(it.regions[:3]) + [b"\0" * 4, b"\0" * 12], 5))
    assert d["pptr"][0] == {"tag": "OLDNAME", "corrupt": True}
    assert "PPTR: OLDNAME CORRUPT" in summary(d).split("\n")


@needs_fixture
def test_counts_match_xfs_logprint(image):
    """Every item type, in the transaction view and in the per-record view,
    counted as xfs_logprint 6.10.1 counted it in the kernel-written log
    (its record dump prints inode-create ops without a #regs line)."""
    exp = _expected()
    got = _fstool_counts(image)
    for k in ("ATTRI", "ATTRD", "XMI"):
        assert exp["transactions"].get(k), f"the fixture's log has no {k}"
    assert got["transactions"] == exp["transactions"]
    got["records"].pop("ICREATE", None)
    assert got["records"] == exp["records"]


@needs_fixture
@pytest.mark.skipif(not modern.available(), reason="xfsprogs 6.10.1 not built")
def test_fixture_counts_are_logprints(image):
    """The committed counts are what xfs_logprint 6.10.1 finds now."""
    assert pptr_log.logprint_items(image) == _expected()


@needs_fixture
def test_record_view_reads_attri_regions(image):
    """In the per-record view the name and value ops after an ATTRI are its
    regions, not items of their own; the transaction view decodes the
    parent pointer they carry."""
    r = run("log", "print", "--json", image)
    ops = [o for ln in r.stdout.splitlines() for o in json.loads(ln)["ops"]]
    at = [i for i, o in enumerate(ops) if o.get("item", {}).get("type") == "ATTRI"]
    assert at
    for i in at:
        roles = L.attri_region_roles(ops[i]["item"])
        assert roles
        follow = [ops[i + 1 + k].get("region_of") for k in range(len(roles))]
        assert follow == [{"type": "ATTRI", "region": role} for role in roles]
    r = run("log", "print", "-t", "--json", image)
    items = [it for ln in r.stdout.splitlines() for it in json.loads(ln)["items"]
             if it["type"] == "ATTRI"]
    assert items and all(it["pptr"][0]["name"] == it["name"] for it in items)
    assert all(it["name"].startswith("link_with_a_long_name_") for it in items)
    text = run("log", "print", "-t", image).stdout
    assert "    PPTR: NAME parent_ino " in text
    rec = run("log", "print", image).stdout
    assert "  ATTRI:  name len:" in rec and "  ATTRI:  value len:12\n" in rec


# -- the items' text against xfs_logprint 6.10.1's -----------------------------------------

_START = re.compile(r"(ATTRI|ATTRD|XMI|XMD):  #regs:")
_OP = re.compile(r"op \d+: tid 0x[0-9a-f]+ len \d+ \S+ .*?  (.*)$")


def _blocks(lines) -> dict:
    """{type: sorted [item text]}: each ATTRI, ATTRD, XMI and XMD item's
    lines (leading blanks dropped, blank lines left out): its #regs line,
    an ATTRI's regions (their "len:" lines and contents) and parent
    pointers, an XMI's extent line."""
    out: dict = {}
    cur = None
    content = False
    for ln in (ln.lstrip() for ln in lines):
        if not ln:
            continue
        m = _START.match(ln)
        if m:
            cur = [ln]
            out.setdefault(m.group(1), []).append(cur)
            content = False
        elif cur is None:
            continue
        elif content or re.match(r"ATTRI:  (name|newname|value|newvalue) len:\d+$", ln) or \
                re.match(r"[0-9a-f]{8} ", ln) or ln.startswith(("PPTR: ", "(ino1: ")):
            content = ln.startswith("ATTRI:  ") and " len:" in ln
            cur.append(ln)
        else:
            cur = None
    return {k: sorted("\n".join(b) for b in v) for k, v in out.items()}


def _logprint(img, *args) -> list:
    r = subprocess.run([modern.tool("xfs_logprint"), *args, str(img)], capture_output=True,
                       text=True, errors="surrogateescape")
    assert r.returncode == 0, r.stderr
    # the record dump's op headers sit between an ATTRI's regions
    return [ln for ln in r.stdout.splitlines() if not ln.startswith("Oper (")]


def _fstool_text(img, *args) -> list:
    r = run("log", "print", *args, img)
    assert r.returncode == 0, r.stderr
    lines = []
    for ln in r.stdout.splitlines():
        m = _OP.match(ln.strip())
        lines.append(m.group(1) if m else ln)
    return lines


@pytest.mark.skipif(not modern.available(), reason="xfsprogs 6.10.1 not built")
@pytest.mark.parametrize("name", [pptr_log.NAME, "pptr-attri-set", "pptr-attri-remove",
                                  "pptr-attri-replace", "pptr-xmi"])
def test_intent_items_print_as_xfs_logprint(name, tmp_path):
    """On each kernel-dirty parent-pointer log, every ATTRI, ATTRD, XMI and
    XMD item, in the per-record view and in the transaction view (-t), is
    printed as xfs_logprint 6.10.1 prints it, line for line (the ATTRI's
    format fields, its name and value regions, text or hex dump, its
    parent pointers; the XMI's extent) and there are as many of each."""
    if not (LF.HERE / f"{name}.img.zst").exists():
        pytest.skip(f"fixtures/logs/{name} not built")
    img = LF.unpack(name, tmp_path / "log.img")
    for args in ((), ("-t",)):
        want = _blocks(_logprint(img, *args))
        got = _blocks(_fstool_text(img, *args))
        assert want.get("ATTRI") or want.get("XMI"), (name, args)
        assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in want.items()}
        assert got == want, (name, args)
