"""Access to an image file or block device, and a bounded buffer cache.

Every byte fstool reads from or writes to an image goes through a
:class:`Device`: ``pread`` and ``pwrite`` at byte offsets, ``fsync``, and
hole punching.  Nothing reads or writes a whole image at once.

The fault hook for crash tests lives here, where writes reach the image:
with ``FSTOOL_FAULT_AFTER_WRITES=N`` in the environment the process kills
itself with SIGKILL right after its Nth write has reached the image (no
cleanup, no flush, no exit handlers), as a power cut or ``kill -9`` at that
moment would.  Each ``pwrite`` call counts as one write; the writers issue
one call per block or per contiguous run of new blocks, in the order that
makes every prefix recoverable.  With ``FSTOOL_FAULT_ERRNO=NAME`` (EIO,
ENOSPC...) as well, the Nth write instead fails with that error once its
bytes have reached the image (a write that fails part way), and the
process goes on.

The write log beside it, for tests that judge where a command writes: with
``FSTOOL_WRITE_LOG=FILE`` every write that reaches an image (each one the
fault hook counts, hole punches included) appends a line ``OFFSET LENGTH
PATH`` to FILE before it is counted.
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import struct
import sys
import threading
from collections import OrderedDict, deque

from ..errors import (FsToolError, ImageBusy, ImageError, ImageNotFoundError,
                      ImageTruncatedError, ReadOnlyError)
from .dumpfile import MAGICS, DumpFile, DumpImage
from .partition import notify, split, window_of

_FAULT_ENV = "FSTOOL_FAULT_AFTER_WRITES"
_WRITE_LOG_ENV = "FSTOOL_WRITE_LOG"
# the signal the fault hook sends (a name: TERM, INT...; KILL unless set)
_FAULT_SIGNAL_ENV = "FSTOOL_FAULT_SIGNAL"
# the error the fault hook raises instead (a name: EIO, ENOSPC...)
_FAULT_ERRNO_ENV = "FSTOOL_FAULT_ERRNO"


class _WriteCounter:
    """Counts writes across every Device of the process for the fault hook
    (and logs them where FSTOOL_WRITE_LOG asks)."""

    def __init__(self):
        self.count = 0
        raw = os.environ.get(_FAULT_ENV)
        try:
            self.limit = int(raw) if raw else 0
        except ValueError:
            self.limit = 0
        self.log = os.environ.get(_WRITE_LOG_ENV) or None
        name = os.environ.get(_FAULT_SIGNAL_ENV, "KILL").upper()
        self.signal = getattr(signal, "SIG" + name.removeprefix("SIG"), signal.SIGKILL)
        code = getattr(errno, os.environ.get(_FAULT_ERRNO_ENV, "").upper(), None)
        self.errno = code if isinstance(code, int) else 0

    def hit(self, path: str, offset: int, length: int) -> None:
        if self.log is not None:
            fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{offset} {length} {path}\n".encode())
            finally:
                os.close(fd)
        self.count += 1
        if self.limit and self.count >= self.limit:
            if self.errno:
                self.limit = 0          # one write fails, once
                raise OSError(self.errno, os.strerror(self.errno) + " (FSTOOL_FAULT_ERRNO)")
            if self.signal != signal.SIGKILL:
                self.limit = 0          # a signal the process survives: sent once
            os.kill(os.getpid(), self.signal)


_writes = _WriteCounter()

# _IOW(0x94, 13, struct file_clone_range): share a range of another file's blocks
_FICLONERANGE = 0x4020940D
# copy_file_range refusals that reading and writing get round: the host
# cannot (any source) ...
_NO_COPY_RANGE_HOST = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP}
# ... or not for this source
_NO_COPY_RANGE = _NO_COPY_RANGE_HOST | {errno.EINVAL, errno.EBADF, errno.EPERM,
                                        errno.ETXTBSY}


# start writing back what has been written once this much has piled up
# (Device.kick_writeback): the flush before a checkpoint then waits for
# little, and the device works while the next files are read
WRITEBACK_BYTES = 32 << 20
# the data of small files written one after another into adjacent blocks is
# gathered into writes of up to this many bytes (Device.pwrite_data)
GATHER_BYTES = 1 << 20
# writes for the thread behind (Device.write_behind) are handed over this
# many bytes at a time
BEHIND_BYTES = 4 << 20


class SourceReadError(OSError):
    """Reading the source of a copy failed (raised as its cause)."""


def _read_source(fd: int, n: int, off: int) -> bytes:
    try:
        return os.pread(fd, n, off)
    except OSError as e:
        raise SourceReadError(e.errno, e.strerror) from e


_NOT_IMAGES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"))


def refuse_not_an_image(path: str, st: os.stat_result) -> None:
    """Raise ImageError unless ``st`` describes a regular file or a block
    device: the only things an image can be (a FIFO, a socket or a
    character device would be read as a stream, or block)."""
    if stat.S_ISREG(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return
    what = next((name for test, name in _NOT_IMAGES if test(st.st_mode)), "not a regular file")
    raise ImageError(f"{path}: is {what}, not an image (give an image file or a block device)")


def writes_so_far() -> int:
    """Writes this process has made to images (what the fault hook counts)."""
    return _writes.count


class Device:
    """An image file or block device, read with pread() and, when opened
    ``writable``, written with pwrite().  A writable block device is opened
    exclusively (O_EXCL), so the kernel refuses it while it is mounted."""

    def __init__(self, path, writable: bool = False, whole: bool = False):
        self.path = os.fspath(path)
        self.writable = writable
        # the byte window of the file the image is (io/partition.py): a
        # partition of a disk image, or the whole file (start 0)
        self.start = 0
        self.partition = None
        self.note = None
        # a metadump read in place (io/dumpfile.py): reads come from it
        self.dump = None
        # O_NONBLOCK: should the path turn out to name a FIFO after all (it
        # changed since the stat), the open does not wait for a writer
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC | os.O_NOCTTY | \
            os.O_NONBLOCK
        file, sel = self.path, None
        try:
            try:
                st = os.stat(file)
            except FileNotFoundError:
                file, sel = split(self.path)
                if sel is None:
                    raise
                st = os.stat(file)
        except FileNotFoundError:
            raise ImageNotFoundError(f"{self.path}: no such file") from None
        except OSError as e:
            raise ImageError(f"{self.path}: cannot open: {e.strerror}") from None
        self.file = file
        refuse_not_an_image(self.path, st)
        self.is_blockdev = stat.S_ISBLK(st.st_mode)
        # an undo recorder (io/undo.py): told of every write before it is made
        self.write_hook = None
        if writable and self.is_blockdev:
            flags |= os.O_EXCL
        try:
            self.fd = os.open(file, flags)
        except FileNotFoundError:
            raise ImageNotFoundError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise ImageError(f"{self.path}: is a directory, not an image") from None
        except OSError as e:
            if e.errno == errno.EBUSY:
                raise ImageBusy(f"{self.path}: the device is in use (mounted, or open "
                                "for writing by another fstool or program)") from None
            raise ImageError(f"{self.path}: cannot open{' for writing' if writable else ''}: "
                             f"{e.strerror}") from None
        try:
            st = os.fstat(self.fd)
            refuse_not_an_image(self.path, st)
            fcntl.fcntl(self.fd, fcntl.F_SETFL,
                        fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(self.fd)
            raise
        self.st_dev, self.st_ino, self.st_rdev = st.st_dev, st.st_ino, st.st_rdev
        # how copy_from may copy: untried (None), refused (False)
        self._clone_ok = None
        self._clone_unit = 0
        self._cfr_ok = hasattr(os, "copy_file_range")
        # bytes written by pwrite, pwrite_data and copy_from (not those
        # shared with a source file by copy_from)
        self.written = 0
        # data gathered for one write (pwrite_data): its offset and bytes
        self._gather_off = 0
        self._gather = bytearray()
        # the thread making file data writes behind the caller (write_behind),
        # and the writes for it not handed over yet, (offset, data) each
        self._behind = None
        # whether one of those writes failed, kept after close
        self._behind_failed = False
        self._batch: list = []
        self._batch_bytes = 0
        # bytes written since writeback was last started; None: never start it
        self._unstarted = 0 if writable and not self.is_blockdev else None
        self._starter = None
        if self.is_blockdev:
            self.size = os.lseek(self.fd, 0, os.SEEK_END)
        else:
            self.size = st.st_size
        try:
            self._open_window(sel, whole)
        except BaseException:
            self.close()
            raise

    def _open_window(self, sel, whole: bool) -> None:
        """Narrow the device to the partition ``sel`` names, or to the one
        XFS partition of a disk image named without one (unless
        ``whole``); a metadump is refused for writing."""
        try:
            head = os.pread(self.fd, 8192, 0) if self.size >= 1024 else b""
        except OSError:
            head = b""              # left to the reads that follow to report
        if head[:4] == b"XFSB" and sel is None:
            return
        if head[:4] in MAGICS and sel is None:
            if self.writable:
                raise ImageError(f"{self.path}: is a metadump, not an image: restore it "
                                 "first (fstool mdrestore DUMP IMAGE)")
            self.dump = DumpImage(DumpFile(self.path, fd=self.fd))
            self.size = self.dump.size
            return
        if whole and sel is None:
            return
        w = window_of(self.path if sel is None else self.file, self.fd, self.size, sel, head)
        if w.start or w.length:
            self.start, self.size, self.partition, self.note = w.start, w.length, \
                w.partition, w.note
            if w.note:
                notify(w.note)

    @property
    def fixed_size(self) -> bool:
        """Whether the image's size is not the file's to change: a block
        device, or a window of a file (a partition of a disk image)."""
        return self.is_blockdev or bool(self.start) or self.partition is not None

    # -- reading ----------------------------------------------------------------
    def pread(self, offset: int, length: int) -> bytes:
        if self._gather or self._behind is not None:
            self._settle()
        if offset < 0 or offset + length > self.size:
            raise ImageTruncatedError(
                f"{self.path}: read of {length} bytes at offset {offset} lies beyond "
                f"the end of the image ({self.size} bytes): the image is truncated")
        if self.dump is not None:
            return self.dump.pread(offset, length)
        try:
            data = os.pread(self.fd, length, offset + self.start)
        except OSError as e:
            raise ImageError(f"{self.path}: read error at offset {offset}: {e.strerror}") from None
        if len(data) != length:
            raise ImageTruncatedError(f"{self.path}: short read at offset {offset}: "
                                      "image truncated")
        return data

    def will_need(self, offset: int, length: int) -> None:
        """Ask the kernel to start reading ``length`` bytes at ``offset``
        into its page cache (posix_fadvise WILLNEED) without waiting, so
        that the reads of them that follow find them there or wait less; a
        hint only: nothing where it cannot be given (a metadump, a range
        outside the image, a host without the call)."""
        if self.dump is not None or offset < 0 or length <= 0 or offset + length > self.size:
            return
        try:
            os.posix_fadvise(self.fd, offset + self.start, length, os.POSIX_FADV_WILLNEED)
        except (OSError, AttributeError):
            pass

    def preadinto(self, view, offset: int) -> None:
        """Fill the writable buffer ``view`` from ``offset``, exactly."""
        if self._gather or self._behind is not None:
            self._settle()
        length = len(view)
        if offset < 0 or offset + length > self.size:
            raise ImageTruncatedError(
                f"{self.path}: read of {length} bytes at offset {offset} lies beyond "
                f"the end of the image ({self.size} bytes): the image is truncated")
        if self.dump is not None:
            view[:] = self.dump.pread(offset, length)
            return
        done = 0
        try:
            while done < length:
                n = os.preadv(self.fd, [view[done:]], offset + done + self.start)
                if n <= 0:
                    raise ImageTruncatedError(f"{self.path}: short read at offset "
                                              f"{offset + done}: image truncated")
                done += n
        except OSError as e:
            raise ImageError(f"{self.path}: read error at offset {offset}: {e.strerror}") \
                from None

    # -- writing ----------------------------------------------------------------
    def _check_write(self, offset: int, length: int) -> None:
        if not self.writable:
            raise ReadOnlyError(f"{self.path}: opened read-only")
        if offset < 0 or offset + length > self.size:
            raise ImageError(f"{self.path}: write of {length} bytes at offset {offset} "
                             f"lies beyond the end of the image ({self.size} bytes)")

    def pwrite(self, offset: int, data) -> None:
        """Write all of ``data`` at ``offset`` (one write for the fault hook)."""
        if self._gather or self._behind is not None:
            self._settle()
        self._pwrite(offset, data)

    def write_behind(self) -> bool:
        """From now on, file data (:meth:`pwrite_data`, :meth:`copy_behind`)
        is written by a thread of the device's own, behind the caller, in
        the order given; any other operation of the device waits for those
        writes first (an error of theirs raised there, and the writes given
        after it not made), as it writes the gathered data first.  The
        bytes counted as written (``written``, writeback) are counted when
        given, so they do not depend on the thread's timing.  Buffers given
        to pwrite_data must not change afterwards.  Not with an undo
        recorder, the fault hook or the write log (their writes must be
        counted in order); False then, and nothing changes."""
        if self._behind is None:
            if not self.writable or self.write_hook is not None or self.dump is not None or \
                    _writes.limit or _writes.log:
                return False
            self._behind = _Behind()
            if self._unstarted is not None and self._starter is None:
                # started by the thread behind as it writes (_wrote_behind)
                self._starter = _WritebackStarter(self.fd)
        return True

    def _settle(self) -> None:
        """Before any other operation: the gathered data written, and the
        writes made behind finished (the first error of theirs raised)."""
        if self._gather:
            self.flush_gathered()
        if self._behind is not None:
            self._hand_over()
            self._behind.wait()

    @property
    def data_write_failed(self) -> bool:
        """Whether a write made behind failed (every later operation of the
        device raises its error: see :meth:`write_behind`); still true
        after :meth:`close`."""
        return self._behind_failed or \
            self._behind is not None and self._behind.error is not None

    def can_copy_behind(self, src_fd: int) -> bool:
        """Whether a copy from ``src_fd`` may be given to :meth:`copy_behind`:
        write-behind is on, and the copy cannot share the source's blocks
        (the blocks shared are not counted as written, and whether the host
        shares them is known only once asked)."""
        if self._behind is None:
            return False
        if self.is_blockdev or self._clone_ok is False:
            return True
        try:
            return os.fstat(src_fd).st_dev != self.st_dev
        except OSError:
            return False

    def copy_behind(self, task, src_fd: int, args: tuple, nbytes: int,
                    own: bool = False) -> None:
        """``task(raw, fd, *args)`` run by the write-behind thread, ``fd`` a
        duplicate of ``src_fd`` (closed after it), ``raw`` an object with the
        copy_from, pwrite_data and zero_range of this device made at once,
        none of them sharing blocks (see :meth:`can_copy_behind`); ``nbytes``
        are counted as written now.  With ``own``, ``fd`` is ``src_fd``
        itself, handed over (the thread closes it; the caller must not) once
        this returns: no duplicate made and closed here, each a system call
        that lets the interpreter go and waits to have it back."""
        self._check_write(0, 0)
        if self._gather:
            self.flush_gathered()
        self._hand_over()
        b = self._behind
        b.raise_error()
        b.submit(self._copy_then_count, (task, nbytes, _RawData(self),
                                         src_fd if own else os.dup(src_fd)) +
                 tuple(args), close_arg=3)
        self.written += nbytes

    def _copy_then_count(self, task, nbytes: int, *args) -> None:
        task(*args)
        self._wrote_behind(nbytes)

    def _count(self, n: int) -> None:
        """``n`` bytes written by this thread."""
        self.written += n
        if self._unstarted is not None:
            self._wrote(n)

    def pwrite_data(self, offset: int, data, zeros: int = 0) -> None:
        """Write ``data`` followed by ``zeros`` zero bytes at ``offset``, as
        file data into blocks nothing in the image refers to yet (a
        transaction has just allocated them): such writes that follow one
        another on the device are gathered into one of up to GATHER_BYTES,
        made when the next write does not follow on, before any other
        read, write or flush of the device, and at close.  The order of the
        writes that reach the image is unchanged but for the delay, which
        is safe because those blocks are free space until a checkpoint
        commits, and the flush before its commit record writes them first."""
        n = len(data) + zeros
        g = self._gather
        if g and (offset != self._gather_off + len(g) or len(g) + n > GATHER_BYTES):
            self.flush_gathered()
            g = self._gather
        if n >= GATHER_BYTES:
            data = bytes(data) + bytes(zeros) if zeros else data
            if self._behind is not None:
                self._later(offset, data)
            else:
                self._pwrite(offset, data)
            return
        self._check_write(offset, n)
        if not g:
            self._gather_off = offset
        g += data
        if zeros:
            g += bytes(zeros)

    def flush_gathered(self) -> None:
        """Make the write :meth:`pwrite_data` is gathering now."""
        g = self._gather
        if g:
            self._gather = bytearray()
            if self._behind is not None:
                self._later(self._gather_off, g)
            else:
                self._pwrite(self._gather_off, g)

    def _later(self, offset: int, data) -> None:
        """A write of file data for the thread behind: handed over with the
        next ones, BEHIND_BYTES at a time (each hand-over wakes the thread)."""
        n = len(data)
        self._check_write(offset, n)
        self._behind.raise_error()
        self._batch.append((offset, data))
        self._batch_bytes += n
        self.written += n
        if self._batch_bytes >= BEHIND_BYTES:
            self._hand_over()

    def _hand_over(self) -> None:
        """The writes for the thread behind gathered so far handed to it."""
        if self._batch:
            batch, self._batch, self._batch_bytes = self._batch, [], 0
            self._behind.submit(self._write_batch, (batch,))

    def _write_batch(self, writes: list) -> None:
        for offset, data in writes:
            self._write_all(offset, data)
            self._wrote_behind(len(data))

    def _wrote_behind(self, n: int) -> None:
        """The thread behind wrote ``n`` bytes: writeback started as
        :meth:`_wrote` starts it once they are written (not when given: the
        host would then write back pages being written)."""
        if self._unstarted is not None:
            self._unstarted += n
            if self._unstarted >= WRITEBACK_BYTES and self._starter is not None:
                self._unstarted = 0
                if not self._starter.ask():
                    self._unstarted = None

    def _pwrite(self, offset: int, data) -> None:
        n = len(data)
        self._check_write(offset, n)
        if self.write_hook is not None:
            self.write_hook.before_write(offset, n)
        self._write_all(offset, data)
        _writes.hit(self.path, offset, n)
        self._count(n)

    def _write_all(self, offset: int, data) -> None:
        n = len(data)
        view = memoryview(data)
        done = 0
        try:
            while done < n:
                k = os.pwrite(self.fd, view[done:], offset + done + self.start)
                if k <= 0:
                    raise OSError(errno.EIO, "short write")
                done += k
        except OSError as e:
            raise ImageError(f"{self.path}: write failed at offset {offset}: "
                             f"{e.strerror}") from None

    def pwritev(self, offset: int, buffers: list) -> None:
        """Write ``buffers`` one after the other from ``offset`` (a run of
        adjacent blocks) in as few system calls as the kernel allows: one
        write for the fault hook, like :meth:`pwrite`."""
        n = sum(len(b) for b in buffers)
        self._check_write(offset, n)
        if self.write_hook is not None:
            self.write_hook.before_write(offset, n)
        views = [memoryview(b) for b in buffers]
        done = 0
        i = 0
        try:
            while i < len(views):
                k = os.pwritev(self.fd, views[i:i + _IOV_MAX], offset + done + self.start)
                if k <= 0:
                    raise OSError(errno.EIO, "short write")
                done += k
                while i < len(views) and k >= len(views[i]):
                    k -= len(views[i])
                    i += 1
                if k:
                    views[i] = views[i][k:]
        except OSError as e:
            raise ImageError(f"{self.path}: write failed at offset {offset + done}: "
                             f"{e.strerror}") from None
        _writes.hit(self.path, offset, n)
        self.written += n

    def start_writeback(self, offset: int, length: int) -> None:
        """Ask the host to start writing [offset, offset+length) to stable
        storage now, without waiting (Linux ``sync_file_range`` with
        ``SYNC_FILE_RANGE_WRITE``), so that a later :meth:`fsync` has less
        to wait for.  A hint: it guarantees nothing and does nothing where
        the call is missing; only :meth:`fsync` makes data durable."""
        if not self.writable or length <= 0:
            return
        fn = _sync_file_range_fn()
        if fn is not None:
            fn(self.fd, offset + self.start, length, 2)      # SYNC_FILE_RANGE_WRITE; errors ignored

    def copy_from(self, src_fd: int, src_off: int, offset: int, length: int) -> int:
        """Copy ``length`` bytes of the open file ``src_fd`` from ``src_off``
        into the image at ``offset`` without bringing them into Python:
        shared blocks (``FICLONERANGE``) where the source lies on the image's
        own filesystem, that filesystem can share blocks and the range is
        whole blocks of it; else ``copy_file_range``; else, where the host
        refuses that too (across filesystems on old kernels, special files),
        read and write.  Returns the bytes copied, fewer when the source ends
        first.  One write for the fault hook, like :meth:`pwrite`."""
        if self._gather or self._behind is not None:
            self._settle()
        self._check_write(offset, length)
        if src_fd == self.fd:
            src_off += self.start          # a copy inside the image's own window
        done = 0
        shared = False
        try:
            if length and self._clone_ok is not False and \
                    self._clone(src_fd, src_off, offset + self.start, length):
                done = length
                shared = True
        except OSError as e:
            raise ImageError(f"{self.path}: copy into the image failed at offset "
                             f"{offset}: {e.strerror}") from None
        done = self._copy_range(src_fd, src_off, offset, done, length)
        _writes.hit(self.path, offset, done)
        if not shared:
            self.written += done
            if self._unstarted is not None:
                self._wrote(done)
        return done

    def _copy_range(self, src_fd: int, src_off: int, offset: int, done: int,
                    length: int) -> int:
        """copy_from's copy of bytes ``done`` to ``length`` (sharing no
        blocks): copy_file_range, else read and write; the bytes copied."""
        try:
            while done < length and self._cfr_ok:
                try:
                    k = os.copy_file_range(src_fd, self.fd, length - done, src_off + done,
                                           offset + done + self.start)
                except OSError as e:
                    if e.errno not in _NO_COPY_RANGE:
                        raise
                    if e.errno in _NO_COPY_RANGE_HOST:
                        self._cfr_ok = False
                    break
                if k <= 0:
                    # the source ends here, or is a file whose size says
                    # nothing (procfs): let read() tell
                    break
                done += k
            while done < length:
                data = _read_source(src_fd, min(length - done, 1 << 20), src_off + done)
                if not data:
                    break
                view = memoryview(data)
                pos = 0
                while pos < len(view):
                    k = os.pwrite(self.fd, view[pos:], offset + done + pos + self.start)
                    if k <= 0:
                        raise OSError(errno.EIO, "short write")
                    pos += k
                done += len(data)
        except OSError as e:
            if isinstance(e, SourceReadError):
                raise e.__cause__ from None
            raise ImageError(f"{self.path}: copy into the image failed at offset "
                             f"{offset + done}: {e.strerror}") from None
        return done

    def wrote_elsewhere(self, n: int) -> None:
        """``n`` bytes written to the image's descriptor by another writer
        of this process (the mount's native request loop), counted as
        :meth:`pwrite` counts its own (writeback started as it starts it)."""
        self.written += n
        if self._unstarted is not None:
            self._wrote(n)

    @property
    def write_counter(self):
        """For such a writer: a function(offset in the file, length) to call
        after each write it makes, which the fault hook and the write log
        count as a :meth:`pwrite`; None when neither is on."""
        if not (_writes.limit or _writes.log):
            return None
        return lambda offset, n: _writes.hit(self.path, offset - self.start, n)

    def _wrote(self, n: int) -> None:
        self._unstarted += n
        if self._unstarted >= WRITEBACK_BYTES:
            self.kick_writeback()

    def kick_writeback(self) -> None:
        """Have the image's dirty pages written back without waiting for
        them: a thread of the device's own starts writeback over the whole
        file (sync_file_range(SYNC_FILE_RANGE_WRITE)) and waits for it and
        the host's records of the file (fdatasync).  Nothing about
        durability changes: pages already written may reach the disk at any
        moment anyway, and only :meth:`fsync` promises they have (a write
        error the thread saw is raised by the next :meth:`fsync`); but the
        flush before a checkpoint then finds little left to write, and the
        device writes while fstool goes on reading the source.  Called
        every WRITEBACK_BYTES of data."""
        if self._unstarted is None:
            return
        if self._gather:
            self.flush_gathered()
        self._unstarted = 0
        if self._starter is None:
            self._starter = _WritebackStarter(self.fd)
        if not self._starter.ask():
            self._unstarted = None           # the host cannot: stop trying

    def _clone(self, src_fd: int, src_off: int, offset: int, length: int) -> bool:
        """Share the source's blocks (FICLONERANGE) when it can; a refusal
        other than alignment turns the attempt off for this device."""
        if self._clone_ok is None:
            self._clone_ok = False
            if self.is_blockdev:
                return False
            try:
                self._clone_unit = os.fstatvfs(self.fd).f_bsize
            except OSError:
                return False
            self._clone_ok = True
        unit = self._clone_unit
        if (src_off | offset | length) & (unit - 1) or os.fstat(src_fd).st_dev != self.st_dev:
            return False
        try:
            fcntl.ioctl(self.fd, _FICLONERANGE, struct.pack("=qQQQ", src_fd, src_off, length,
                                                           offset))
        except OSError:
            self._clone_ok = False
            return False
        return True

    def fsync(self) -> None:
        """Everything written so far is on stable storage once this returns
        (the data of the image; its size never changes while written)."""
        if not self.writable:
            return
        if self._gather or self._behind is not None:
            self._settle()
        if self.write_hook is not None:
            self.write_hook.before_fsync()
        try:
            os.fdatasync(self.fd)
        except OSError as e:
            raise ImageError(f"{self.path}: fsync failed: {e.strerror}") from None
        if self._starter is not None and self._starter.error is not None:
            e, self._starter.error = self._starter.error, None
            raise ImageError(f"{self.path}: writing back failed: {e.strerror}")

    def punch(self, offset: int, length: int) -> bool:
        """Punch [offset, offset+length) out of a regular image file, so
        that it reads as zeros; False (nothing done) on a block device or
        where the host filesystem cannot punch holes."""
        if self._gather or self._behind is not None:
            self._settle()
        self._check_write(offset, length)
        if length <= 0 or self.is_blockdev:
            return False
        if self.write_hook is not None:
            self.write_hook.before_write(offset, length)
        try:
            punch_hole(self.fd, offset + self.start, length)
        except OSError:
            return False
        _writes.hit(self.path, offset, length)
        return True

    def zero_range(self, offset: int, length: int, punch: bool = True) -> None:
        """Make [offset, offset+length) read as zeros: a punched hole in a
        regular file (unless ``punch`` is off), written zeros on a block
        device.  One write for the fault hook."""
        if self._gather or self._behind is not None:
            self._settle()
        self._check_write(offset, length)
        if length <= 0:
            return
        if self.write_hook is not None:
            self.write_hook.before_write(offset, length)
        self._zero(offset, length, punch)
        _writes.hit(self.path, offset, length)

    def _zero(self, offset: int, length: int, punch: bool) -> None:
        if punch and not self.is_blockdev:
            try:
                punch_hole(self.fd, offset + self.start, length)
                return
            except OSError:
                pass
        chunk = bytes(min(length, 1 << 20))
        end = offset + length
        pos = offset
        try:
            while pos < end:
                n = min(len(chunk), end - pos)
                os.pwrite(self.fd, chunk[:n], pos + self.start)
                pos += n
        except OSError as e:
            raise ImageError(f"{self.path}: write failed at offset {pos}: {e.strerror}") \
                from None

    def resize(self, size: int) -> None:
        """Grow (or shrink) an image file; the new part is a hole."""
        if not self.writable or self.is_blockdev:
            raise ReadOnlyError(f"{self.path}: cannot resize")
        if self.start or self.partition is not None:
            raise ImageError(f"{self.path}: a partition of a disk image cannot be resized")
        if self._gather or self._behind is not None:
            self._settle()
        try:
            os.ftruncate(self.fd, size)
        except OSError as e:
            raise ImageError(f"{self.path}: cannot resize to {size} bytes: {e.strerror}") \
                from None
        self.size = size

    def close(self) -> None:
        if self.fd >= 0:
            try:
                if self._behind is not None:
                    # the last writes made; an error of theirs was raised
                    # already, or is of writes no commit took (the run was
                    # abandoned): dropped
                    try:
                        self.flush_gathered()
                        self._hand_over()
                    except FsToolError:
                        pass
                    finally:
                        self._behind_failed = self.data_write_failed
                        self._behind.stop()
                        self._behind = None
                self.flush_gathered()
            finally:
                if self._starter is not None:
                    self._starter.stop()
                    self._starter = None
                os.close(self.fd)
            self.fd = -1


class _RawData:
    """What :func:`fstool.ns.files.copy_blocks` asks of a device, made at
    once and counted by no one: for the thread behind (Device.copy_behind),
    whose caller counted the bytes."""
    __slots__ = ("dev",)

    def __init__(self, dev: Device):
        self.dev = dev

    def copy_from(self, src_fd: int, src_off: int, offset: int, length: int) -> int:
        dev = self.dev
        dev._check_write(offset, length)
        return dev._copy_range(src_fd, src_off, offset, 0, length)

    def pwrite_data(self, offset: int, data, zeros: int = 0) -> None:
        data = bytes(data) + bytes(zeros) if zeros else data
        self.dev._check_write(offset, len(data))
        self.dev._write_all(offset, data)

    def zero_range(self, offset: int, length: int) -> None:
        self.dev._check_write(offset, length)
        if length > 0:
            self.dev._zero(offset, length, True)


class _Behind:
    """A thread making a device's file data writes behind its caller, one
    after another in the order given.  After a write fails, the ones given
    after it are not made (as the caller would not have made them); the
    error is raised to the caller by :meth:`wait` or the next
    :meth:`raise_error`."""

    def __init__(self):
        self._cond = threading.Condition()
        self._tasks: deque = deque()
        self.pending = 0
        self.error = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="fstool-data", daemon=True)
        self._thread.start()

    def submit(self, fn, args: tuple, close_arg: int = -1) -> None:
        """Run ``fn(*args)``; ``args[close_arg]``, a descriptor, is closed
        after it (made or not)."""
        with self._cond:
            self._tasks.append((fn, args, close_arg))
            self.pending += 1
            self._cond.notify()

    def raise_error(self) -> None:
        """Raise the error a write met, and again at every later call: data
        the caller took as given was not written, so nothing after it (a
        checkpoint that maps it, the fsync that would make it durable) may
        succeed.  The writes given before it is raised and not made yet
        are dropped."""
        if self.error is None:
            return
        with self._cond:
            e = self.error
            while self._tasks:
                _fn, args, close_arg = self._tasks.popleft()
                if close_arg >= 0:
                    os.close(args[close_arg])
                self.pending -= 1
            if not self.pending:
                self._cond.notify_all()
        raise e

    def wait(self) -> None:
        """Until every write given is made (or given up after an error)."""
        if self.pending:
            with self._cond:
                while self.pending:
                    self._cond.wait()
        self.raise_error()

    def stop(self) -> None:
        """Wait for the writes given, then end the thread (errors dropped,
        with the writes given after them)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()
        self.error = None

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._tasks and not self._stopping:
                    cond.wait()
                if not self._tasks:
                    return
                fn, args, close_arg = self._tasks.popleft()
                failed = self.error is not None
            err = None
            try:
                if not failed:
                    fn(*args)
            except Exception as e:          # handed to the caller
                err = e
            finally:
                if close_arg >= 0:
                    os.close(args[close_arg])
            with cond:
                if err is not None and self.error is None:
                    self.error = err
                self.pending -= 1
                if not self.pending:
                    cond.notify_all()


# at most this many buffers per pwritev call (the kernel's UIO_MAXIOV)
_IOV_MAX = 1024
_SFR: list = []


def _sync_file_range_fn():
    """libc's sync_file_range as a ctypes function, or None off Linux."""
    if not _SFR:
        import ctypes  # lazy: start-up; only writers flush, read-only commands never
        fn = None
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _SFR.append(fn)
    return _SFR[0]


class _WritebackStarter:
    """A thread that writes back one open file each time it is asked (asks
    made while it is busy count once): it starts writeback of every dirty
    page, then waits for them and for the host's records of the file to be
    on stable storage (fdatasync), so that the asker never waits for the
    device's queue and the flush before a checkpoint has little left to do.
    Flushing early changes nothing about what is durable when: only the
    checkpoint's own flush is relied on."""

    def __init__(self, fd: int):
        self.fd = fd
        self.ok = True
        self.error = None
        self._asked = self._stopping = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="fstool-writeback",
                                        daemon=True)
        self._thread.start()

    def ask(self) -> bool:
        """Start writeback soon; False once the host has refused it."""
        with self._cond:
            if self.ok:
                self._asked = True
                self._cond.notify()
            return self.ok

    def stop(self) -> None:
        """Wait for a writeback being started, then end the thread (before
        the file is closed)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._asked and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                self._asked = False
            if not _sync_file_range(self.fd):
                with self._cond:
                    self.ok = False
                return
            # and wait for it here, the host's own records of the file (its
            # block map: shared blocks) with it, so that the flush before
            # the next checkpoint finds little left to wait for
            try:
                os.fdatasync(self.fd)
            except OSError as e:
                # the host reports a write error to one flush only: kept for
                # the next flush the device is asked for (Device.fsync)
                with self._cond:
                    self.error = self.error or e


def _sync_file_range(fd: int) -> bool:
    """sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE): start writeback of
    every dirty page of the file, waiting for none.  False where the host
    has no such call."""
    fn = _sync_file_range_fn()
    if fn is None:
        return False
    if fn(fd, 0, 0, 2):                 # SYNC_FILE_RANGE_WRITE
        import ctypes  # lazy: loaded already by _sync_file_range_fn
        return ctypes.get_errno() not in (errno.ENOSYS, errno.EINVAL, errno.ESPIPE,
                                          errno.EOPNOTSUPP)
    return True


_FALLOCATE: list = []
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


def _fallocate_fn():
    """libc's fallocate(2) as a ctypes function (looked up once)."""
    if not _FALLOCATE:
        import ctypes  # lazy: start-up; only hole punching and preallocation use it
        fn = ctypes.CDLL(None, use_errno=True).fallocate
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        fn.restype = ctypes.c_int
        _FALLOCATE.append((fn, ctypes.get_errno))
    return _FALLOCATE[0]


def punch_hole(fd: int, off: int, length: int) -> None:
    """fallocate(PUNCH_HOLE | KEEP_SIZE): raises OSError where unsupported."""
    fn, get_errno = _fallocate_fn()
    if fn(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, length):
        err = get_errno()
        raise OSError(err, os.strerror(err))


class BufferCache:
    """LRU cache of verified metadata buffers, bounded in bytes."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._lru: OrderedDict = OrderedDict()

    def get(self, key):
        buf = self._lru.get(key)
        if buf is not None:
            self._lru.move_to_end(key)
        return buf

    def put(self, key, buf) -> None:
        old = self._lru.pop(key, None)
        if old is not None:
            self.bytes -= len(old)
        self._lru[key] = buf
        self.bytes += len(buf)
        while self.bytes > self.max_bytes and self._lru:
            _, evicted = self._lru.popitem(last=False)
            self.bytes -= len(evicted)

    def discard(self, key) -> None:
        old = self._lru.pop(key, None)
        if old is not None:
            self.bytes -= len(old)

    def clear(self) -> None:
        self._lru.clear()
        self.bytes = 0
