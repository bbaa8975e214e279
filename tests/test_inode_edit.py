"""fstool.fs.icore.InodeEdit, the in-place editor of a written inode: each
field lands where DINODE puts it, times and extent counts follow the
inode's own bigtime and NREXT64 flags, and the CRC is made current."""
import pytest

from fstool._backend import parsers
from fstool.format import constants as C
from fstool.format.structs import DINODE
from fstool.fs.icore import InodeEdit, InodeEncoder, InodeSpec, count_fields, encode_ts

UUID = bytes(range(16))


@pytest.mark.parametrize("bigtime,nrext64", [(False, False), (True, False), (True, True)])
def test_edit_changes_exactly_its_fields(bigtime, nrext64):
    enc = InodeEncoder(512, UUID, bigtime=bigtime, nrext64=nrext64)
    raw = enc.encode(133, InodeSpec(mode=0o40755, nlink=2, size=6, nextents=0,
                                    fmt=C.XFS_DINODE_FMT_LOCAL, data=b"\1\0\0\0\0\x80",
                                    mtime_ns=5, changecount=(1 << 64) - 1))
    before = DINODE.unpack(raw)
    ed = InodeEdit(raw)
    fork = bytes(range(1, 17))
    ed.set_data_fork(C.XFS_DINODE_FMT_EXTENTS, fork, 512 - C.XFS_DINODE_CORE_SIZE, 1)
    ed.set("di_size", 4096)
    ed.add("di_nlink", -1)
    ed.add("di_nblocks", 0)
    ed.set_time("di_mtime", 1_700_000_000_123_456_789)
    ed.changed(2)
    out = ed.sealed()
    after = DINODE.unpack(out)
    data_count = count_fields(before["di_flags2"])[0]
    assert data_count == ("di_big_nextents" if nrext64 else "di_nextents")
    want = dict(before, di_format=C.XFS_DINODE_FMT_EXTENTS, di_size=4096, di_nlink=1,
                di_mtime=encode_ts(1_700_000_000_123_456_789, bigtime), di_changecount=1,
                di_crc=after["di_crc"])
    want[data_count] = 1
    assert after == want
    assert out[C.XFS_DINODE_CORE_SIZE:] == fork + bytes(512 - C.XFS_DINODE_CORE_SIZE - 16)
    assert parsers.xfs_cksum_ok(out, C.XFS_DINODE_CRC_OFF)
