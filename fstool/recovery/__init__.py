"""Log recovery, as a kernel mount does it: passes 1 and 2 of replay
(:mod:`.recover`), what follows replay through the write side (:mod:`.finish`:
unfinished intents, unlinked inodes, CoW staging extents, counters) and
replay into memory for reading commands (:mod:`.memory`).  The log itself is
read by :mod:`fstool.log`.
"""
