"""The XFS log read (``fstool.open_image(p).log``); recovery is :mod:`fstool.recovery`.

Layout of this package (the on-disk definitions are in
:mod:`fstool.format.log`):

* :mod:`.device`     log geometry and sector reads
* :mod:`.head`       the kernel's head/tail search
* :mod:`.records`    records from tail to head, CRC pass, ops
* :mod:`.reassemble` transactions reassembled from ops
* :mod:`.items`      log items decoded into plain dicts
  (records are written by :mod:`fstool.trans.logwriter`)

:class:`Log` is the read-only view the Python API hands out.
"""
from __future__ import annotations


from .head import find_state
from .records import walk


class Log:
    """The log of an open image, read-only.

    ``state`` is where the head and tail are (as the kernel would find
    them); ``records()`` and ``transactions()`` walk the unreplayed part.
    """

    def __init__(self, fs):
        self.fs = fs
        self.device, self.state = find_state(fs)

    @property
    def dirty(self) -> bool:
        return self.state.dirty

    def info(self) -> dict:
        st = self.state
        ld = self.device
        used = (st.head - st.tail) % ld.bbsize if st.dirty else 0
        return {
            "start_daddr": ld.start_daddr, "sectors": ld.bbsize,
            "bytes": ld.bbsize * 512, "sector_size": ld.sectsize,
            "stripe_unit": ld.sunit,
            "state": "never written" if st.never_written else
                     ("clean" if not st.dirty else "dirty"),
            "head_block": st.head, "head_cycle": st.cycle,
            "tail_block": st.tail, "head_lsn": st.head_lsn, "tail_lsn": st.tail_lsn,
            "unreplayed_sectors": used, "unreplayed_bytes": used * 512,
            "torn_write_at": st.torn_at, "warnings": list(st.warnings),
        }

    def records(self, *, check_crc: bool = False):
        """Records from the tail to the head (``Record`` objects with
        ``ops``); with ``check_crc`` a bad CRC raises."""
        st = self.state
        if not st.dirty:
            return iter(())
        return walk(self.device, st.head, st.tail, check_crc=check_crc)

    def transactions(self):
        """Committed transactions in commit order, each with decoded items:
        ``(Transaction, [item dict, ...])``."""
        from .items import decode  # lazy: start-up of commands that never decode items
        from .reassemble import Reassembler  # lazy: likewise
        re = Reassembler()
        for rec in self.records():
            for t in re.feed(rec):
                yield t, [decode(i) for i in t.items if i.regions]

    def as_dict(self) -> dict:
        return self.info()


def state_dict(state) -> dict:
    return state._asdict()
