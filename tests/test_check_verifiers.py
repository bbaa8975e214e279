"""fstool check against xfs_repair -n on the kernel verifiers' finer rules:
kernel-written images damaged with xfs_db, both tools' verdicts compared."""
from __future__ import annotations

import pytest

from fixtures import images
from fixtures.repair_images import copy_image, kernel_churn_image
from test_repair import fstool, xfs_db, xfs_repair_n

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")

# (name, xfs_db commands, corrupt?)
CASES = [
    # xfs_dir2_data_freefind_verify: a bestfree slot naming a free region
    # with another length, or overlapping it
    ("bestfree-length", ["path /d3", "dblock 0", "write -d dhdr.bestfree[0].length 0x2acc"],
     True),
    ("bestfree-offset-into-entry", ["path /d3", "dblock 0", "write -d dhdr.bestfree[0].offset 0x48"],
     True),
    # superblock LSNs are not among the metadata LSNs xfs_repair looks at
    ("primary-sb-lsn", ["sb 0", "write -d lsn 0x0000100000000010"], False),
]


@needs_loop
@pytest.mark.parametrize("name,cmds,corrupt", CASES, ids=[c[0] for c in CASES])
def test_verdict_matches_xfs_repair(tmp_path, name, cmds, corrupt):
    img = copy_image(kernel_churn_image(), tmp_path / "v.img")
    xfs_db(img, *cmds, expert=True)
    assert xfs_repair_n(img) == (1 if corrupt else 0)
    assert fstool("check", img).returncode == (1 if corrupt else 0)
