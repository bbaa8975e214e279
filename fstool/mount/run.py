"""Mounting: open the image, mount through libfuse3, serve until unmounted,
then write everything back and mark the log clean.

Two request loops serve the same operations (:class:`~fstool.mount.ops.MountOps`):
the C loop of ``fstool_native.fuseloop`` (the default where it is built)
and pyfuse3 under trio (the fallback).

``serve`` runs in the process that holds the mount.  ``mount`` either calls
it in the foreground or forks a daemon and returns once the mount is live
(the daemon reports success, or the error that stopped it, through a pipe).
While mounted, a checkpoint is written every ``CHECKPOINT_SECONDS`` (and
by the journal itself when its pending changes grow large); SIGTERM, SIGINT
and SIGHUP unmount cleanly.
"""
from __future__ import annotations

import fcntl
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from ..errors import FsToolError, errno_of
from ..io.lock import FSTOOL_FUSE_TYPE, mount_device, mount_table
from .ops import MountOps
from .volume import Volume

CHECKPOINT_SECONDS = 5.0

# the kernel's read-ahead of the mount's files (KiB): FUSE starts at 128
# KiB, which the server may only lower at INIT, so a sequential reader's
# READ requests come 128 KiB at a time; once INIT is answered, the mount's
# own read-ahead (its bdi's read_ahead_kb, root only) is raised to 512 KiB,
# 4x fewer requests for a streaming read.  Not 1 MiB (the most one READ
# carries, libfuse's max_pages 256): a 1 MiB answer and its header do not
# fit the largest pipe (/proc/sys/fs/pipe-max-size, 1 MiB), and libfuse
# then copies the data instead of splicing it, which measured 3x the
# server's CPU per MB (docs/performance.md)
READ_AHEAD_KB = 512


LOOPS = ("native", "pyfuse3")


def native_loop():
    """The C request loop (fstool_native.fuseloop), or None where it was
    not built (no libfuse3 development files or no compiler)."""
    try:
        from fstool_native import fuseloop  # lazy: optional extension
    except ImportError:
        return None
    return fuseloop


def pick_loop(loop: str | None = None) -> str:
    """The request loop to serve with: ``loop`` when given, else the native
    one where it is built, else pyfuse3."""
    if loop is not None:
        return loop
    return "native" if native_loop() is not None else "pyfuse3"


def fuse_available(loop: str | None = None) -> str | None:
    """None when FUSE mounts can work here (with ``loop``, or the one
    ``pick_loop`` chooses), else why not."""
    loop = pick_loop(loop)
    if loop == "native":
        if native_loop() is None:
            return ("the native FUSE loop is not built (libfuse3 development files "
                    "were missing at build time); use --fuse-loop pyfuse3")
    else:
        try:
            import pyfuse3  # noqa: F401  # lazy: optional dependency
            import trio  # noqa: F401  # lazy: optional dependency
        except ImportError as e:
            return f"pyfuse3 is not installed ({e}); pip install pyfuse3"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if os.geteuid() != 0 and not shutil.which("fusermount3"):
        return "fusermount3 is not installed (Debian package fuse3)"
    return None


OWN_OPTIONS = ("rw", "writeback_cache", "nonempty", "discard")   # fstool's, not passed to libfuse
SUBTYPE = "fstool"              # mount(8) and df show the type as fuse.fstool
UMOUNT_TIMEOUT = 60.0


def _fsname(image) -> str:
    """The image's path as the mount's source (what mount(8), df and
    /proc/mounts show), commas and backslashes escaped for libfuse."""
    return "fsname=" + os.fspath(image).replace("\\", "\\\\").replace(",", "\\,")


def fuse_options(readonly: bool, extra, euid: int | None = None, image=None) -> list:
    """The options given to libfuse.  The kernel checks permissions
    (``default_permissions``) unless root mounts without ``allow_other``:
    then FUSE lets in only processes whose user and group ids are all 0,
    for which those checks pass (but execute, which the kernel checks in
    any case, and access(2), which fstool answers: Volume.access), and
    leaving them off spares the kernel's GETATTR of a directory after
    every change in it.  ``-o default_permissions`` asks for them anyway.
    The source is the image's path (``fsname``), the type ``fuse.fstool``
    (``subtype``), unless ``-o fsname=``/``-o subtype=`` say otherwise."""
    opts = set()
    if not any(o.startswith("fsname=") for o in extra):
        opts.add(_fsname(image) if image is not None else "fsname=fstool")
    if not any(o.startswith("subtype=") for o in extra):
        opts.add(f"subtype={SUBTYPE}")
    if (os.geteuid() if euid is None else euid) != 0 or "allow_other" in extra:
        opts.add("default_permissions")
    if readonly:
        opts.add("ro")
    opts.update(o for o in extra if o not in OWN_OPTIONS)
    return sorted(opts)


def serve(image, mountpoint, *, readonly=False, options=(), ready=None,
          checkpoint_seconds: float = CHECKPOINT_SECONDS, loop: str | None = None) -> None:
    """Mount ``image`` at ``mountpoint`` and serve it until it is unmounted;
    ``ready()`` is called once the mount is live.  ``loop``: "native" (the
    C request loop, the default where it is built) or "pyfuse3"."""
    loop = pick_loop(loop)
    vol = Volume(image, readonly=readonly, discard="discard" in options)
    try:
        # the image first (its errors are the ones to report), then where
        check_mountpoint(mountpoint, options)
        ops = MountOps(vol, writeback_cache="writeback_cache" in options)
        serve_with = _serve_native if loop == "native" else _serve_pyfuse3
        serve_with(ops, os.path.abspath(mountpoint),
                   fuse_options(readonly, options, image=resolved(image)),
                   ready, checkpoint_seconds if vol.w is not None else 0)
    finally:
        vol.close()


def _serving(ready) -> None:
    # the long-lived caches stay out of the cyclic collector's way
    gc.freeze()
    gc.set_threshold(50000, 20, 100)
    if ready is not None:
        ready()


def _serve_native(ops, mountpoint: str, opts: list, ready, every: float) -> None:
    """The C loop: two threads read requests and answer them one at a time;
    this one keeps the checkpoint timer and the signals."""

    from fstool_native.fuseloop import Session  # lazy: optional extension
    try:
        session = Session(ops, opts)
    except RuntimeError as e:
        raise FsToolError(f"{mountpoint}: cannot mount: {e}") from None
    stop = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    before = {}
    # as /proc/self/mountinfo names it; taken before the mount (once
    # mounted, resolving it would ask the mount itself)
    real = os.path.realpath(mountpoint)
    try:
        try:
            session.mount(mountpoint)
        except RuntimeError as e:
            raise FsToolError(f"{mountpoint}: cannot mount: {e}") from None
        for sig in stop:
            before[sig] = signal.signal(sig, lambda _sig, _frame: session.exit())
        _serving(ready)
        session.run(every, ops.checkpoint, on_init=lambda: set_read_ahead(real))
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        session.close()


def set_read_ahead(mountpoint: str, kb: int = READ_AHEAD_KB) -> bool:
    """The kernel's read-ahead of the files of the FUSE mount at
    ``mountpoint`` (a resolved path) raised to ``kb`` KiB (left alone where it is already
    that large or larger, or where it cannot be changed: not root); True
    when changed."""
    dev = mount_device(mountpoint)
    if dev is None:
        return False
    path = f"/sys/class/bdi/{dev}/read_ahead_kb"
    try:
        with open(path, "r+") as f:
            if int(f.read().strip() or 0) >= kb:
                return False
            f.seek(0)
            f.write(str(kb))
    except (OSError, ValueError):
        return False
    return True


def _serve_pyfuse3(ops, mountpoint: str, opts: list, ready, every: float) -> None:
    """pyfuse3 under trio, one task: the fallback where the C loop is not built."""
    import pyfuse3  # lazy: optional dependency
    import trio  # lazy: optional dependency

    try:
        from .fuseops import FuseOps  # lazy: it imports pyfuse3, an optional dependency
        pyfuse3.init(FuseOps(ops), mountpoint, set(opts))
    except RuntimeError as e:
        raise FsToolError(f"{mountpoint}: cannot mount: {e}") from None
    state = {"terminated": False}
    try:
        _serving(ready)
        trio.run(_main, ops, state, every)
    finally:
        pyfuse3.close(unmount=state["terminated"])


async def _main(ops, state, every: float) -> None:
    pass

    import pyfuse3  # lazy: optional dependency
    import trio  # lazy: optional dependency

    async def timer():
        while True:
            await trio.sleep(every)
            ops.checkpoint()

    async def signals():
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as it:
            async for _sig in it:
                state["terminated"] = True
                pyfuse3.terminate()
                return

    async with trio.open_nursery() as nursery:
        if every:
            nursery.start_soon(timer)
        nursery.start_soon(signals)
        await pyfuse3.main(min_tasks=1, max_tasks=1)
        nursery.cancel_scope.cancel()


def resolved(path) -> str:
    """``path`` as another process can open it from another directory:
    the daemon changes to / and /proc/self is the daemon there, so a
    relative path, /proc/self/cwd/..., /proc/self/fd/N or /dev/fd/N is
    resolved here, in the caller, to the file's own path (kept as given,
    made absolute, when that path does not lead to the same file: a file
    deleted since it was opened)."""
    full = os.path.abspath(path)
    real = os.path.realpath(full)
    try:
        if real != full and os.path.samefile(full, real):
            return real
    except OSError:
        pass
    return full


def check_mountpoint(mountpoint, options=()) -> None:
    """Refuse a mountpoint something is mounted on (a second mount would
    stack over it), or a directory that is not empty unless ``-o
    nonempty`` (its files would be hidden while the image is served)."""
    path = os.path.abspath(mountpoint)
    if os.path.ismount(path):
        raise FsToolError(f"{mountpoint}: something is already mounted there; unmount it "
                          "first (fstool umount MOUNTPOINT)")
    if "nonempty" not in options:
        try:
            entries = os.listdir(path)
        except OSError as e:
            raise FsToolError(f"{mountpoint}: cannot use it as a mountpoint: "
                              f"{e.strerror}") from None
        if entries:
            raise FsToolError(f"{mountpoint}: the directory is not empty (its files would be "
                              "hidden while the image is mounted); add -o nonempty to mount "
                              "there anyway")


def mount(image, mountpoint, *, readonly=False, foreground=False, options=(),
          status_of=lambda exc: 1, loop: str | None = None, announce=None) -> None:
    """``fstool mount``: serve in the foreground (``announce()`` called once
    the mount is live), or start a daemon and return once the mount is live
    (raising the daemon's error otherwise, with the exit status
    ``status_of`` gives it)."""
    if foreground:
        serve(image, mountpoint, readonly=readonly, options=options, loop=loop,
              ready=announce)
        return
    image, mountpoint = resolved(image), resolved(mountpoint)
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.close(w)
        with os.fdopen(r, "rb") as f:
            report = f.read()
        if not report:
            os.waitpid(pid, 0)
            raise FsToolError("the mount process ended before the mount was live")
        msg = json.loads(report)
        if msg.get("status"):
            os.waitpid(pid, 0)
            raise MountFailed(msg["message"], msg["status"], msg.get("errno"))
        return
    # the daemon
    os.close(r)
    os.setsid()

    def ready():
        os.write(w, json.dumps({"status": 0}).encode())
        os.close(w)
        # errors of the running mount go to FSTOOL_MOUNT_LOG when set
        null = os.open(os.devnull, os.O_RDWR)
        logpath = os.environ.get("FSTOOL_MOUNT_LOG")
        err = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) \
            if logpath else null
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null)
        if err != null:
            os.close(err)

    status = 0
    try:
        os.chdir("/")
        serve(image, mountpoint, readonly=readonly,
              options=options, ready=ready, loop=loop)
    except BaseException as e:       # noqa: BLE001 - reported to the waiting parent
        status = status_of(e) or 1
        try:
            os.write(w, json.dumps({"status": status, "message": str(e),
                                    "errno": errno_of(e)}).encode())
        except OSError:
            pass
    os._exit(status)


def unmount(mountpoint, timeout: float = UMOUNT_TIMEOUT) -> str:
    """``fstool umount``: unmount an fstool mount and wait until its server
    has written the image back and let it go (the server holds the image's
    lock until its last checkpoint and the log's unmount record are on
    disk); the image's path.  ``fusermount3 -u`` alone returns before."""

    mp = os.path.realpath(mountpoint)
    found = [(t, src) for m, t, src, _o in mount_table() if m == mp]
    if not found:
        raise FsToolError(f"{mountpoint}: nothing is mounted there")
    fstype, image = found[-1]
    if fstype != FSTOOL_FUSE_TYPE:
        raise FsToolError(f"{mountpoint}: not an fstool mount (type {fstype}); use umount")
    try:
        fd = os.open(image, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        fd = -1                 # -o fsname= named something else: nothing to wait on
    try:
        cmd = ["fusermount3", "-u", mp] if shutil.which("fusermount3") or os.geteuid() \
            else ["umount", mp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            why = (r.stderr.strip().splitlines() or [f"{cmd[0]} failed"])[-1]
            raise FsToolError(f"{mountpoint}: cannot unmount: {why}")
        if fd < 0:
            return image
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return image
            except BlockingIOError:
                pass
            if time.monotonic() > deadline:
                raise FsToolError(f"{mountpoint}: unmounted, but the server has not finished "
                                  f"writing {image} after {timeout:g} s (it is still "
                                  "running; wait for it before using the image)")
            time.sleep(0.005)
    finally:
        if fd >= 0:
            os.close(fd)


class MountFailed(FsToolError):
    """The daemon's error, with its exit status."""

    def __init__(self, message: str, status: int, errno_: int | None):
        super().__init__(message)
        self.exit_status = status
        if errno_:
            self.errno = errno_
