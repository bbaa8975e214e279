"""Unit checks of write-core pieces that the oracle tests reach only
indirectly."""
import pytest

from fstool.format import constants as C
from fstool.fs.icore import InodeEncoder, InodeSpec
from fstool.alloc.inodes import present_mask

UUID = bytes(range(16))


@pytest.mark.parametrize("times", [(0, 0, 0, 0), (-5 * 10**17, 10**18, 1, 2**62),
                                   (-(2**31) * 10**9, 0, 0, 0)])
def test_inode_template_equals_full_encoding(times):
    enc = InodeEncoder(512, UUID, bigtime=True, nrext64=False)
    a, m, c, cr = times
    for ino in (128, 4242, 2**40 + 7):
        fast = enc.simple(ino, C.S_IFREG | 0o640, 12, 34, a, m, c, cr)
        full = enc.encode(ino, InodeSpec(mode=C.S_IFREG | 0o640, uid=12, gid=34, atime_ns=a,
                                         mtime_ns=m, ctime_ns=c, crtime_ns=cr))
        assert fast == full


def test_present_mask():
    assert present_mask(0) == (1 << 64) - 1
    # holemask bit 0 hides inodes 0-3; bits 8-15 hide inodes 32-63
    assert present_mask(0xFF01) == ((1 << 32) - 1) & ~0xF
