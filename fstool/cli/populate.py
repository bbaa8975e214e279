"""fstool populate: add a host directory, tar archive or protofile to an image."""
import click

from .console import bytes_opt
from .options import emit_json, image_arg, json_opt
from ..ops import sources
import os
import sys
import time
from ..ops.populate import populate
from ..ops.names import shown_name
from .console import warn
from ..ops.sources import open_source
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from .console import size_text


def owner_options(f):
    f = click.option("--owner-map", "owner_map", metavar="UID:GID=UID:GID,...",
                     help="Map source owners to image owners, e.g. 1000:1000=0:0.")(f)
    f = click.option("--squash-owner", is_flag=True,
                     help="Make everything owned by root (0:0), as an image built as "
                          "non-root usually wants.")(f)
    return f


def make_owner_map(owner_map, squash):
    if squash and owner_map:
        raise click.UsageError("--squash-owner and --owner-map exclude each other")
    if squash:
        return sources.squash_owner
    if owner_map:
        try:
            return sources.parse_owner_map(owner_map)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--owner-map") from None
    return None


def timestamp_ns(timestamp):
    if timestamp is not None:
        return timestamp * 1_000_000_000
    sde = os.environ.get("SOURCE_DATE_EPOCH")
    if sde:
        try:
            return int(sde) * 1_000_000_000
        except ValueError:
            raise click.BadParameter(f"SOURCE_DATE_EPOCH={sde!r} is not an integer") from None
    return None


def clamp_time(clamp: bool, ts):
    """The time --clamp-mtime clamps to: the build time, which must be given."""
    if not clamp:
        return None
    if ts is None:
        raise click.UsageError("--clamp-mtime needs a time: set SOURCE_DATE_EPOCH or give "
                               "--timestamp")
    return ts


def run_populate(image, source, dest, owner_map, keep_going, ts, quiet, clamp_ns=None,
                 fresh=False, check=True, reflink=False):
    """Populate with a progress bar on a terminal; returns the stats.  With
    ``clamp_ns`` the source is opened here, its modification times clamped."""


    def report(msg):
        warn(shown_name(msg))

    if clamp_ns is not None:
        source_skips: list = []

        def source_report(msg):
            source_skips.append(msg)
            report(msg)
        src = open_source(source, owner_map=owner_map, keep_going=keep_going,
                          report=source_report, clamp_ns=clamp_ns)
        st = run_populate(image, src, dest, None, keep_going, ts, quiet, fresh=fresh,
                          check=check, reflink=reflink)
        st.skipped[:0] = source_skips
        return st

    if quiet or not sys.stderr.isatty():
        return populate(image, source, dest, owner_map=owner_map, keep_going=keep_going,
                        timestamp_ns=ts, report=report, fresh=fresh, check=check,
                        reflink=reflink)
    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("populating", total=None)
        t0 = time.monotonic()
        last = [0.0]

        def progress(st):
            now = time.monotonic()
            if now - last[0] < 0.1:
                return
            last[0] = now
            rate = st.entries / max(now - t0, 1e-6)
            bar.update(task, description=f"{st.entries:,} entries, "
                                         f"{st.bytes / 1048576:,.1f} MiB, {rate:,.0f}/s")
        return populate(image, source, dest, owner_map=owner_map, keep_going=keep_going,
                        timestamp_ns=ts, report=report, progress=progress, fresh=fresh,
                        check=check, reflink=reflink)


def summary_record(st) -> dict:
    """The populate statistics as the --json object."""
    return {"files": st.files, "dirs": st.dirs, "symlinks": st.symlinks,
            "special": st.special, "hardlinks": st.hardlinks, "bytes": st.bytes,
            "entries": st.entries, "shared_files": st.shared_files,
            "shared_bytes": st.shared_bytes, "skipped": list(st.skipped)}


def summary(st, raw: bool = False) -> str:
    """The summary line: sizes in KiB/MiB/GiB, or bytes with ``raw``."""

    def size(n):
        return f"{n} bytes" if raw else size_text(n)
    s = (f"added {st.files} files ({size(st.bytes)}), {st.dirs} directories, "
         f"{st.symlinks} symlinks, {st.special} special files, {st.hardlinks} hard links")
    if st.shared_files:
        s += (f"; {st.shared_files} files ({size(st.shared_bytes)}) share an earlier file's "
              "blocks")
    if st.skipped:
        s += f"; skipped {len(st.skipped)}"
    return s


@click.command("populate")
@image_arg
@click.argument("source", type=click.Path(exists=True))
@click.option("--dest", default="/", show_default=True,
              help="Directory inside the image to add SOURCE's contents to (created if "
                   "missing).")
@owner_options
@click.option("--keep-going", is_flag=True,
              help="Skip unreadable or invalid source entries (each is reported) instead of "
                   "stopping at the first.")
@click.option("--timestamp", type=int,
              help="Seconds since the epoch for change/creation times (default: "
                   "$SOURCE_DATE_EPOCH, else now).")
@click.option("--clamp-mtime", "clamp", is_flag=True,
              help="Modification times later than the build time ($SOURCE_DATE_EPOCH or "
                   "--timestamp) become the build time, as tar --clamp-mtime does.")
@click.option("--reflink", is_flag=True,
              help="Files of equal content share their blocks (the filesystem needs the "
                   "reflink feature), as cp --reflink copies would.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option("--no-check", is_flag=True,
              help="Write even when fstool check finds problems in the image (by default "
                   "the image is checked first and refused then).")
@json_opt
@bytes_opt
def cmd(image, source, dest, owner_map, squash_owner, keep_going, timestamp, clamp, reflink,
        quiet, as_json, no_check, raw):
    """Add SOURCE to the XFS image IMAGE without mounting it or needing root.

    SOURCE is a host directory, a tar archive (plain, gzip, bzip2, xz or
    zstd) or an mkfs.xfs protofile.  Names, types, modes, owners,
    timestamps to the nanosecond, symlinks, hard links, device nodes, sparse
    files and xattrs are kept.  Existing files of the same name are
    replaced; existing directories are merged.  Every change is journaled
    and committed in batches of a few thousand entries: a crash or an error
    keeps the batches committed before it (each file whole) and nothing of
    the one in progress.  The image is checked first and refused if fstool
    check finds problems in it.
    """
    omap = make_owner_map(owner_map, squash_owner)
    ts = timestamp_ns(timestamp)
    st = run_populate(image, source, dest, omap, keep_going, ts, quiet or as_json,
                      clamp_time(clamp, ts), check=not no_check, reflink=reflink)
    if as_json:
        emit_json(summary_record(st), True)
    elif not quiet:
        click.echo(summary(st, raw))
