"""What a small transaction takes part in: a create joins the AG header it
changes (the AGI) and not the free space headers it leaves alone; the
fast layout pack equals the field-by-field one."""
from __future__ import annotations

import os

from fixtures.fusemount import fstool_image
from fstool.format.structs import AGF, AGI, SB


def test_layout_pack_fast_and_field_by_field_agree():
    raw = bytes(range(251)) * 3
    for layout in (AGF, AGI, SB):
        d = layout.unpack(raw)
        assert layout.pack(d) == raw[:layout.size]
        # a field left out (or None) is zero, as before
        name = layout.fields[3][0]
        short = dict(d)
        del short[name]
        off, size = layout.offset(name), layout.struct.size
        packed = layout.pack(short)
        assert len(packed) == size
        assert packed == layout.pack({**d, name: None})
        assert packed[:off] == raw[:off]
        assert layout.unpack(packed)[name] in (0, b"\0" * len(d[name])
                                               if isinstance(d[name], bytes) else 0)


def test_create_joins_only_the_headers_it_changes(tmp_path):
    from fstool.mount.volume import Volume
    from fstool.trans import trans as T
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    seen = []
    orig = T.Transaction.commit

    def commit(tx):
        orig(tx)            # its precommit packs (and joins) the headers
        seen.append({b.bt.name for b in tx.joined.values()})

    try:
        d = v.mkdir(v.rootino, b"d", 0o755).ino
        for i in range(3):       # the first create may decode the AG afresh
            fh, _a = v.create(d, b"warm%d" % i, 0o100644, os.O_WRONLY)
            v.release(fh)
        T.Transaction.commit = commit
        for i in range(20):
            fh, _a = v.create(d, b"f%d" % i, 0o100644, os.O_WRONLY)
            v.release(fh)
    finally:
        T.Transaction.commit = orig
        v.close()
    creates = [s for s in seen if "inode cluster" in s]
    assert len(creates) == 20
    assert all("agi" in s for s in creates)
    # a free list or free space change is rare; most creates leave both alone
    untouched = [s for s in creates if "agf" not in s and "agfl" not in s]
    assert len(untouched) >= 15, creates
