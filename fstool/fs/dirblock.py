"""The layout accessors of every directory form in one namespace, for the
writers (fstool.ns.dirdata, fstool.ns.dirops), which work across forms.
Each accessor lives, with its form's decode and verifier, in that form's
module of fstool.fs.dirform; this module only gathers them.
"""
from __future__ import annotations

from .dirform.block import BLOCK_TAIL, block_leaf_start, block_tail, put_block_tail
from .dirform.data import (BF, ENTRY, FREETAG, HDR, MIN_ENTSIZE, TAG, data_end, data_magic,
                           entry_at, entry_ftype, entry_head, entry_name, entsize, free_len,
                           get_bf, init_header, put_bf, put_entry, put_unused,
                           set_data_magic, set_entry_ino, tag_at)
from .dirform.free import (FREE_HDR, free_bests, free_hdr, put_free_bests, put_free_counts,
                           put_free_hdr)
from .dirform.leaf import (LEAF_ENT, LEAF_HDR, LEAF_TAIL, bestcount, leaf_bests,
                           leaf_bests_start, leaf_count, leaf_count_stale, leaf_entry,
                           leaf_words, put_bestcount, put_last_best, put_leaf_bests,
                           put_leaf_count_stale, put_leaf_entry, put_leaf_words)
from .dirform.sf import (SF_ENTRY, SF_HDR, SF_MIN, sf_encode, sf_entry, sf_entsize, sf_header,
                         sf_parent, sf_parse, sf_size)

__all__ = ["BLOCK_TAIL", "block_leaf_start", "block_tail", "put_block_tail",
           "BF", "ENTRY", "FREETAG", "HDR", "MIN_ENTSIZE", "TAG", "data_end", "data_magic",
           "entry_at", "entry_ftype", "entry_head", "entry_name", "entsize", "free_len",
           "get_bf", "init_header", "put_bf", "put_entry", "put_unused", "set_data_magic",
           "set_entry_ino", "tag_at",
           "FREE_HDR", "free_bests", "free_hdr", "put_free_bests", "put_free_counts",
           "put_free_hdr",
           "LEAF_ENT", "LEAF_HDR", "LEAF_TAIL", "bestcount", "leaf_bests", "leaf_bests_start",
           "leaf_count", "leaf_count_stale", "leaf_entry", "leaf_words", "put_bestcount",
           "put_last_best", "put_leaf_bests", "put_leaf_count_stale", "put_leaf_entry",
           "put_leaf_words",
           "SF_ENTRY", "SF_HDR", "SF_MIN", "sf_encode", "sf_entry", "sf_entsize", "sf_header",
           "sf_parent", "sf_parse", "sf_size"]
