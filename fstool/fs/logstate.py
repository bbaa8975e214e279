"""Whether the internal log is clean, as the kernel decides at mount.

A thin front for the writers and ``check``: the head and tail are found by
:mod:`fstool.log.head` (the kernel's algorithm: cycle search, torn writes,
CRCs, wrapped logs, unmount record at the head).
"""
from __future__ import annotations

from ..errors import CorruptionError
from ..log.head import find_state


def log_is_clean(fs) -> tuple[bool, str]:
    """(clean, why): clean when the log was never written or its newest
    record is an unmount record at the head."""
    try:
        _ld, st = find_state(fs)
    except CorruptionError as e:
        return False, f"the log cannot be read: {e}"
    if st.never_written:
        return True, "never written"
    if not st.dirty:
        return True, "unmounted"
    return False, (f"{(st.head - st.tail) % _ld.bbsize} sectors between tail {st.tail} "
                   f"and head {st.head} are not replayed")
