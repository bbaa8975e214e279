"""Node-form directories: leafn blocks under a da-btree whose root is the
first block of the leaf space (fstool.fs.dabtree walks it), data blocks and
the free index (:mod:`.free`).
"""
from __future__ import annotations

from ...errors import CorruptionError
from ...format import constants as C
from ...format import problem_codes as K
from ...io import verify as V
from .. import dabtree
from . import data, leaf


def lookup(node, hashval: int, name: bytes) -> int | None:
    """Inode number of ``name`` (of hash ``hashval``) in node-form
    directory ``node``, or None: down the da-btree to the leafn block of
    its hash, on to the next while equal hashes go on."""
    def read(fsb):
        return data.read_block(node, fsb, V.DA3_NODE_OR_LEAF)
    path = dabtree.descend(read, leaf.leaf_fsb(node.fs.sb.blocklog), hashval,
                           what="directory node block", ino=node.ino)
    while True:
        fsb, buf, _i = path[-1]
        magic = dabtree.magic(buf)
        if magic != C.XFS_DIR3_LEAFN_MAGIC:
            raise CorruptionError("directory leaf block", f"magic 0x{magic:x} where a leafn "
                                  "block is expected", ino=node.ino, block=fsb, field="magic")
        count = dabtree.count(buf)
        ino, more = leaf.scan(node, buf, leaf.LEAF_HDR, count, hashval, name, False)
        if ino is not None or not more or not dabtree.next_leaf(read, path):
            return ino


def leafn_faults(buf, greatest: int) -> tuple[list, int | None]:
    """A leafn block in the chain after blocks whose greatest hash is
    ``greatest``: ([(code, detail, field, more)], its own greatest hash or
    None when it has no entries).  Its first live hash must not be below
    ``greatest`` (a stale first slot is not compared)."""
    count = leaf.leaf_count(buf)
    if not count:
        return [], None
    ents = leaf.leaf_words(buf, leaf.LEAF_HDR, count)
    faults = []
    if ents[1] and ents[0] < greatest:
        faults.append((K.DIR_LEAF, f"starts at hash 0x{ents[0]:08x}, below the greatest "
                       f"before it (0x{greatest:08x})", "hashval", {}))
    return faults, ents[-2]
