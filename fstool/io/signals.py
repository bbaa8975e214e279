"""SIGINT and SIGTERM: the command stops, but never in the middle of a write.

Run as the program (``fstool.cli.main``), fstool takes both signals
(:func:`install`): outside a write, a signal raises
:class:`~fstool.errors.Interrupted` at once, which unwinds as Ctrl-C does
(transactions aborted, the writer closed: the log gets its last checkpoint
and its unmount record) and ends the process with 128 + the signal's
number (130, 143).  Inside a write (:func:`held`: a transaction committing
or aborting, a checkpoint, a writer closing, repair's whole write phase)
the signal is kept and raised where the outermost such section ends, so
the image is left as that write leaves it, never half written.  A signal
the process ignored when it started (``nohup``) stays ignored.
"""
from __future__ import annotations

import contextlib
# the C module under ``signal``: the same calls and numbers, without the enum
# module ``signal`` loads (part of every command's start-up)
import _signal as signal

from ..errors import Interrupted

STOPS = (signal.SIGINT, signal.SIGTERM)

_depth = 0               # sections held (nested)
_pending: int | None = None


def _handler(signum, _frame) -> None:
    global _pending
    if _depth:
        if _pending is None:
            _pending = signum
        return
    raise Interrupted(signum)


def install() -> None:
    """Take SIGINT and SIGTERM (those not ignored)."""
    for sig in STOPS:
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _handler)


def as_worker() -> None:
    """In a worker process (check --jobs): the signals back to their
    defaults; the parent stops its workers (SIGTERM) and handles the
    user's Ctrl-C itself."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def pending() -> int | None:
    """The signal kept while a write was under way and not raised since."""
    return _pending


def raise_pending() -> None:
    """Raise the signal kept while a write was under way, if any."""
    global _pending
    if _pending is not None and not _depth:
        sig, _pending = _pending, None
        raise Interrupted(sig)


class held(contextlib.ContextDecorator):
    """A section no signal interrupts (a context manager, or a decorator
    for a whole function): a signal that arrives inside it is raised where
    the outermost section ends (unless an exception already leaves it; then
    :func:`raise_pending` raises it later)."""

    def __enter__(self):
        global _depth
        _depth += 1
        return self

    def __exit__(self, etype, exc, tb):
        global _depth
        _depth -= 1
        if etype is None:
            raise_pending()
        return False
