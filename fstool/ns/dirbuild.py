"""Directory encoder: a directory's whole entry list in the form the kernel
would leave after inserting those entries in order into an empty directory.

The growth is simulated the kernel's way: shortform while it fits the inode,
then one block (entries, hash-sorted leaf and tail in one directory block),
then leaf form (data blocks plus one LEAF1 block with the bests array) and
node form (data blocks, LEAFN blocks under a da-btree whose root is the
first block of the leaf space, and free-index blocks; while one LEAFN block
holds every leaf entry it is that root itself, as the kernel's leaf-to-node
conversion leaves it).  New entries go into
the first data block with room (first fit, as xfs_dir2_leaf_addname and the
node free-index search do); block 0 regains the space of its leaf and tail
when the directory leaves block form.  Leaf entries are sorted by name hash,
equal hashes with the newest first, as the kernel's insertion leaves them.

Node-form leaves are filled completely rather than split half-full as a
sequence of kernel insertions would leave them: the format allows both.
The last leaf and the last node of each level start early enough that
every rightmost node has a first hash below its last (dablock.pack).
"""
from __future__ import annotations

from .._backend import parsers, writers
from ..errors import InvalidArgument, NameTooLongError
from ..format import constants as C
from ..format.structs import DIR3_BLK_HDR
from ..fs import dirblock as B
from ..fs.dirform import NAME_MAX
from .dablock import da_block, da_finisher, identity_finisher, pack
from .dabtree import node_levels
from ..io import verify as V
from .forkplan import ForkPlan, PlannedBlock

HDR = B.HDR                           # v5 data, leaf, node and free headers
assert HDR == B.LEAF_HDR == B.FREE_HDR
DATA_FIRST = HDR + 2 * B.MIN_ENTSIZE  # after "." and ".." (with ftype)
LEAF_ENT = B.LEAF_ENT
_BLKNO, _UUID = DIR3_BLK_HDR.offset("blkno"), DIR3_BLK_HDR.offset("uuid")


def check_name(name: bytes) -> None:
    """A directory entry name: 1 to 255 bytes, no "/" or NUL, not "." or ".."."""
    if not name or name in (b".", b"..") or b"/" in name or b"\0" in name:
        raise InvalidArgument(f"invalid file name {name[:64]!r}")
    if len(name) > NAME_MAX:
        raise NameTooLongError(f"file name {name[:40]!r}... is {len(name)} bytes; XFS allows "
                              f"at most {NAME_MAX}")


def check_names(names: list) -> None:
    """check_name for every name of a list: screened first on the names
    joined with NULs, so a long list of good names costs a few passes in C."""
    if not names:
        return
    blob = b"\0".join(names)
    if b"/" in blob or blob.count(b"\0") != len(names) - 1 or b"\0\0" in blob or \
            not names[0] or not names[-1] or b"." in names or b".." in names or \
            max(map(len, names)) > NAME_MAX:
        for name in names:
            check_name(name)


class _Builder:
    def __init__(self, entries, ino, parent, uuid, blocksize, dirblksize, has_ftype):
        self.entries = entries
        self.ino = ino
        self.parent = parent
        self.uuid = uuid
        self.bs = blocksize
        self.dbs = dirblksize
        self.ftype = has_ftype
        self.fsbs = dirblksize // blocksize
        self.leaf_lblk = C.XFS_DIR2_LEAF_OFFSET // blocksize
        self.free_lblk = C.XFS_DIR2_FREE_OFFSET // blocksize

    # -- placement simulation --------------------------------------------------
    def place(self):
        """Assign every entry a byte address in the data space (data block
        times dirblksize plus offset); returns the form ("block", "leaf" or
        "node"), the addresses and per-block used byte counts."""
        return writers.dir_place(self.entries, self.dbs, self.ftype, HDR, DATA_FIRST)

    # -- encoding ------------------------------------------------------------------
    def data_blocks(self, where, used: list) -> bytearray:
        """Every data block, one after another: the entries at their
        addresses, "." and ".." at the start of block 0."""
        space = bytearray(len(used) * self.dbs)
        writers.fill_dir_entries(space, self.entries, where, self.dbs, self.ftype)
        writers.fill_dir_entries(space, self.dot_entries(), [HDR, HDR + 16], self.dbs,
                                 self.ftype)
        return space

    def data_block(self, space: bytearray, b: int, magic: int, used_end: int,
                   limit: int) -> bytearray:
        """Block ``b`` of ``space`` with its header; unused space from
        used_end to limit."""
        buf = space[b * self.dbs:(b + 1) * self.dbs]
        free = limit - used_end
        if free >= 8:
            B.put_unused(buf, used_end, free)
            B.put_bf(buf, ((used_end, free), (0, 0), (0, 0)))
        B.set_data_magic(buf, magic)
        return buf

    def finisher(self, buf: bytearray, da: bool):
        """finish(daddr) for a data/free block (XD?3 header) or a da3 block."""
        if da:
            return da_finisher(buf, self.ino, self.uuid)
        return identity_finisher(buf, self.ino, self.uuid, _BLKNO, _UUID)

    def dot_entries(self):
        return [(b".", self.ino, C.XFS_DIR3_FT_DIR), (b"..", self.parent, C.XFS_DIR3_FT_DIR)]

    def build(self) -> ForkPlan:
        form, where, used = self.place()
        ents = self.entries
        dbs = self.dbs
        hash_name = parsers.da_hashname
        space = self.data_blocks(where, used)
        # leaf entries: hash, address (byte offset in the data space / 8);
        # equal hashes newest first.  Sorted as one integer each: hash, then
        # the insertion number counted down
        top = len(ents) + 1
        keys = [(hash_name(b".") << 32) | top, (hash_name(b"..") << 32) | (top - 1)]
        keys += [(hash_name(e[0]) << 32) | (top - 2 - k) for k, e in enumerate(ents)]
        keys.sort()
        addrs = [HDR >> 3, (HDR + 16) >> 3] + [a >> 3 for a in where]
        leaf = [(key >> 32, addrs[top - (key & 0xFFFFFFFF)]) for key in keys]
        out = []
        size = len(used) * dbs
        if form == "block":
            count = len(leaf)
            leaf_start = dbs - B.BLOCK_TAIL - LEAF_ENT * count
            buf = self.data_block(space, 0, C.XFS_DIR3_BLOCK_MAGIC, used[0], leaf_start)
            B.put_leaf_words(buf, leaf_start, [v for pair in leaf for v in pair])
            B.put_block_tail(buf, count, 0)
            out.append(PlannedBlock(0, self.fsbs, self.finisher(buf, False),
                                    V.DIR3_DATA_ANY))
            return ForkPlan(None, out, dbs)
        bests = []
        for b in range(len(used)):
            buf = self.data_block(space, b, C.XFS_DIR3_DATA_MAGIC, used[b], dbs)
            bests.append(dbs - used[b] if dbs - used[b] >= 8 else 0)
            out.append(PlannedBlock(b * self.fsbs, self.fsbs, self.finisher(buf, False),
                                    V.DIR3_DATA_ANY))
        if form == "leaf":
            buf = da_block(dbs, C.XFS_DIR3_LEAF1_MAGIC, count=len(leaf),
                           pairs=leaf)
            B.put_leaf_bests(buf, bests)
            out.append(PlannedBlock(self.leaf_lblk, self.fsbs, self.finisher(buf, True),
                                    V.DA3_NODE_OR_LEAF))
            return ForkPlan(None, out, size)
        out.extend(self.node_blocks(leaf))
        out.extend(self.free_blocks(bests))
        return ForkPlan(None, out, size)

    def node_blocks(self, leaf) -> list:
        dbs, fsbs = self.dbs, self.fsbs
        bounds = pack([h for h, _a in leaf], dbs - HDR, LEAF_ENT)
        if len(bounds) == 1:
            # the kernel's leaf-to-node conversion leaves the one LEAFN block
            # at the leaf offset as the da-btree's root; a node level appears
            # only when that leaf splits (xfs_repair 6.1 rejects a node with
            # a single child)
            buf = da_block(dbs, C.XFS_DIR3_LEAFN_MAGIC, count=len(leaf), pairs=leaf)
            return [PlannedBlock(self.leaf_lblk, fsbs, self.finisher(buf, True),
                                 V.DA3_NODE_OR_LEAF)]
        chunks = [leaf[a:b] for a, b in bounds]
        # root at the first leaf-space block, leaves after it, then any
        # intermediate node levels
        next_lblk = [self.leaf_lblk + fsbs]

        def take():
            v = next_lblk[0]
            next_lblk[0] += fsbs
            return v
        leaf_lblks = [take() for _ in chunks]
        out = []
        for k, (lblk, ch) in enumerate(zip(leaf_lblks, chunks)):
            buf = da_block(dbs, C.XFS_DIR3_LEAFN_MAGIC, count=len(ch),
                           forw=leaf_lblks[k + 1] if k + 1 < len(chunks) else 0,
                           back=leaf_lblks[k - 1] if k else 0,
                           pairs=ch)
            out.append(PlannedBlock(lblk, fsbs, self.finisher(buf, True),
                                    V.DA3_NODE_OR_LEAF))
        # node levels: (max hash, lblk) per child
        out.extend(node_levels([(ch[-1][0], lblk) for lblk, ch in zip(leaf_lblks, chunks)],
                               root=self.leaf_lblk, take=take, size=dbs,
                               magic=C.XFS_DA3_NODE_MAGIC,
                               block=lambda lblk, buf: PlannedBlock(
                                   lblk, fsbs, self.finisher(buf, True), V.DA3_NODE_OR_LEAF)))
        return out

    def free_blocks(self, bests) -> list:
        dbs, fsbs = self.dbs, self.fsbs
        per = (dbs - HDR) // 2
        out = []
        for k in range(0, len(bests), per):
            part = bests[k:k + per]
            buf = bytearray(dbs)
            B.init_header(buf, C.XFS_DIR3_FREE_MAGIC, 0, bytes(16), 0)
            B.put_free_hdr(buf, k, len(part), len(part))
            B.put_free_bests(buf, part)
            lblk = self.free_lblk + (k // per) * fsbs
            out.append(PlannedBlock(lblk, fsbs, self.finisher(buf, False), V.DIR3_FREE))
        return out


def encode_dir(entries, *, ino: int, parent: int, uuid: bytes, blocksize: int,
               dirblksize: int, has_ftype: bool, inline_space: int) -> ForkPlan:
    """The fork a directory holding ``entries`` [(name, ino, ftype)] (without
    "." and "..", in insertion order) would have; see the module docstring."""
    check_names([e[0] for e in entries])
    if not has_ftype:
        raise InvalidArgument("directories without ftype are not supported for writing")
    # shortform while it fits the inode (encoded natively; None: it does not)
    sf = writers.sf_dir_fork(entries, parent, has_ftype, inline_space, DATA_FIRST)
    if sf is not None:
        return ForkPlan(sf, [], len(sf))
    return _Builder(entries, ino, parent, uuid, blocksize, dirblksize, has_ftype).build()
