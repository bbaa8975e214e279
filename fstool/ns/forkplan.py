"""What an encoder wants an inode fork to hold, before blocks are placed.

Directory, xattr and symlink encoders work in two steps so that they never
need to know about space allocation:

1. ``encode_*(...)`` returns a :class:`ForkPlan`: either inline bytes for a
   local-format fork, or a list of :class:`PlannedBlock` at logical fork
   offsets (fs-block units), each spanning ``nblocks`` contiguous blocks;
2. the caller allocates physical blocks for every planned block and calls
   ``finish(daddr)`` to get the final buffer, whose self-address (blkno),
   owner and uuid are then filled in; the journal's write verifier gives it
   its LSN and CRC when it is written.
"""
from __future__ import annotations

from typing import Callable, NamedTuple


class PlannedBlock(NamedTuple):
    lblk: int                          # logical block within the fork (fs blocks)
    nblocks: int                       # contiguous fs blocks the buffer spans
    finish: Callable[[int], bytes]     # daddr of the first block -> whole buffer
    bt: object = None                  # its buffer type (fstool.io.verify.BufType)


class ForkPlan(NamedTuple):
    local: bytes | None                # inline fork bytes (FMT_LOCAL), or None
    blocks: list                       # list[PlannedBlock] when not local
    size: int = 0                      # di_size the inode must record (dirs, symlinks)

    @property
    def nblocks(self) -> int:
        return sum(b.nblocks for b in self.blocks)
