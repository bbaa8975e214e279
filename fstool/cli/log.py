"""``fstool log``: print, replay and zero the XFS log."""
import click

from .options import image_arg, json_opt
import functools
from ..errors import CorruptionError, ImageTruncatedError, UnsupportedError
from ..ops.logops import open_filesystem
from ..ops.logops import info
import json
from .console import warn
from ..ops.logops import print_records, print_transactions
from ..log.items import summary
from ..ops.logops import replay
from ..format.log import lsn_str
from ..ops.logops import zero


@click.group("log")
def cmd():
    """Read, print and replay the internal log (journal) of an image.

    Exit status: 0 done; 4 the log cannot be read or replayed (damaged in a
    way recovery cannot go past, or holding work fstool cannot finish: the
    message names the record and the item, and nothing is written); 7 the
    image is busy; otherwise as every command (docs/commands/exit-status.md).
    """


EXIT_LOG_CANNOT = 4


def log_statuses(fn):
    """A damaged log, or one holding work fstool cannot finish, ends a log
    command with status 4 ("could not run", as check and repair say it)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (CorruptionError, ImageTruncatedError, UnsupportedError) as e:
            if not getattr(e, "while_opening", False):
                e.exit_status = EXIT_LOG_CANNOT
            raise
    return run


def _open(image):
    """The image, opened as every command opens it: an image fstool cannot
    open at all keeps the common statuses (4 not XFS, 5 unsupported, 6
    corrupt superblock)."""
    return open_filesystem(image)


@cmd.command("info")
@log_statuses
@json_opt
@image_arg
def info_cmd(as_json, image):
    """Log geometry, head and tail (block and cycle), state and the size of
    the part not yet replayed."""
    with _open(image) as fs:
        d = info(fs)
    if as_json:
        click.echo(json.dumps(d))
        return
    rows = [("log start (daddr)", d["start_daddr"]),
            ("log size", f"{d['sectors']} sectors ({d['bytes']} bytes)"),
            ("sector size", d["sector_size"]),
            ("stripe unit", d["stripe_unit"] or "none"),
            ("state", d["state"]),
            ("head", f"block {d['head_block']} cycle {d['head_cycle']}"),
            ("tail", f"block {d['tail_block']}"),
            ("unreplayed", f"{d['unreplayed_sectors']} sectors ({d['unreplayed_bytes']} "
                           "bytes)")]
    if d["torn_write_at"] is not None:
        rows.append(("torn write", f"at block {d['torn_write_at']} (head trimmed)"))
    for k, v in rows:
        click.echo(f"{k:<18} {v}")
    for w in d["warnings"]:
        warn(w)


@cmd.command("print")
@log_statuses
@click.option("--transactions", "-t", is_flag=True,
              help="Group ops into committed transactions (checkpoints), like "
                   "xfs_logprint -t.")
@json_opt
@image_arg
def print_cmd(transactions, as_json, image):
    """Every record from tail to head: LSN, length, number of ops, CRC, each
    op header and the log item it starts.  With --transactions, every
    committed checkpoint with its decoded items and a one-line summary."""

    out = click.get_text_stream("stdout")
    with _open(image) as fs:
        st = fs.log.info()
        if not as_json:
            out.write(f"log {st['state']}: tail block {st['tail_block']}, head block "
                      f"{st['head_block']}\n")
        if transactions:
            rows, text, noun = print_transactions(fs), _transaction_text, \
                "committed transactions"
        else:
            rows, text, noun = print_records(fs), _record_text, "records"
        n = 0
        for row in rows:
            n += 1
            out.write(json.dumps(row, default=_jsonable) + "\n" if as_json else text(row))
        if not as_json:
            out.write(f"{n} {noun}\n")


def _transaction_text(t: dict) -> str:
    """A checkpoint's summary line, then one line per item."""
    kinds = {}
    for it in t["items"]:
        kinds[it["type"]] = kinds.get(it["type"], 0) + 1
    what = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    lines = [f"checkpoint tid 0x{t['tid']:08x} lsn {t['lsn']} commit {t['commit_lsn']}: "
             f"{t['num_items']} items ({what})"]
    for it in t["items"]:
        lines += [f"    {line}" for line in summary(it).split("\n")]
    return "\n".join(lines) + "\n"


def _record_text(r: dict) -> str:
    """A record's line, then one line per op (with the item it starts)."""
    lines = [f"record at block {r['block']} lsn {r['lsn']} tail {r['tail_lsn']} "
             f"len {r['length']} ops {r['num_ops']} crc {'ok' if r['crc_ok'] else 'BAD'}"]
    for i, o in enumerate(r["ops"]):
        line = f"    op {i}: tid 0x{o['tid']:08x} len {o['len']} {o['client']} {o['flags']}"
        more = []
        if "item" in o:
            it = o["item"]
            first, *more = (f"TRANS {it['num_items']} items" if it["type"] == "TRANS"
                            else it.get("error") or summary(it)).split("\n")
            line += "  " + first
        elif "logprint" in o:           # an ATTRI's region, as xfs_logprint shows it
            first, *more = o["logprint"]
            line += "  " + first
        elif "region_of" in o:
            line += f"  ({o['region_of']['type']} {o['region_of']['region']})"
        lines.append(line)
        lines += [f"        {m}" for m in more]
    return "\n".join(lines) + "\n"


def _jsonable(v):
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return str(v)


@cmd.command("replay")
@log_statuses
@click.option("-n", "--dry-run", "dry_run", is_flag=True,
              help="Print what would be replayed and written; change nothing.")
@json_opt
@image_arg
def replay_cmd(dry_run, as_json, image):
    """Replay the log as the kernel does at mount time, then leave it clean.

    Committed transactions are replayed (passes 1 and 2, with the v5 rule
    that a block newer than a transaction is not overwritten by it);
    intents left unfinished are finished as the kernel finishes them
    (extent-free, rmap, refcount and bmap intents; xattr and parent pointer
    intents redone from the names and values they logged; mapping exchanges
    resumed where they stopped); inodes left on the unlinked lists are
    freed; the superblock counters are recomputed; an unmount record marks
    the log clean.  An intent fstool cannot finish exactly (an unknown
    flag, an attr fork exchange, ...) is refused with nothing written.  An
    interrupted replay can simply be run again.
    """
    rep = replay(image, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(rep, default=_jsonable))
        return
    for w in rep.get("warnings", []):
        warn(w)
    if rep["state_before"] != "dirty":
        click.echo(f"{image}: the log is {rep['state_before']}; nothing to replay")
        return
    verb = "would replay" if dry_run else "replayed"
    items = ", ".join(f"{v} {k}" for k, v in sorted(rep["replayed_items"].items()))
    click.echo(f"{image}: {verb} {rep['transactions']} transactions from {rep['records']} "
               f"records (tail block {rep['tail']} to head block {rep['head']}): "
               f"{rep['items']} items ({items})")
    if rep["skipped_lsn"]:
        click.echo(f"  {rep['skipped_lsn']} items skipped: the block on disk is newer")
    if rep["cancelled"]:
        click.echo(f"  {rep['cancelled']} items cancelled (freed buffers)")
    if rep["quota_items_skipped"]:
        click.echo(f"  {rep['quota_items_skipped']} quota items not replayed (as a mount "
                   "without quota options does)")
    if rep["unfinished_intents"]:
        click.echo(f"  unfinished intents to finish: {len(rep['unfinished_intents'])}")
    if dry_run:
        click.echo(f"  blocks that would be written: {rep['blocks_to_write']}")
        for c in rep["checkpoints"]:
            click.echo(f"    lsn {lsn_str(c['lsn'])}: {c['items']} items")
        return
    click.echo(f"  {rep['blocks_written']} blocks written")
    fin = rep.get("finished")
    if fin:
        if fin["attr_intents"] or fin["exchange_intents"]:
            click.echo(f"  redid {fin['attr_intents']} unfinished xattr intents, resumed "
                       f"{fin['exchange_intents']} unfinished mapping exchanges")
        click.echo(f"  freed {fin['efi_extents']} extents of unfinished EFIs, "
                   f"{fin['unlinked_inodes']} unlinked inodes and {fin['cow_extents']} "
                   "leftover CoW staging extents")
    c = rep["counters"]
    click.echo(f"  counters: {c['after']['sb_icount']} inodes, {c['after']['sb_ifree']} "
               f"free, {c['after']['sb_fdblocks']} free blocks; the log is clean")


@cmd.command("zero")
@log_statuses
@click.option("-f", "--force", is_flag=True, required=False,
              help="Really throw the unreplayed changes away.")
@json_opt
@image_arg
def zero_cmd(force, as_json, image):
    """Throw the log away and leave a clean, empty one (like xfs_repair -L).

    The changes in the unreplayed part of the log are LOST: use
    'fstool log replay' unless the log cannot be replayed.  --json prints
    {"image", "cycle", "lost_sectors"}."""
    if not force:
        raise click.UsageError("zeroing the log loses its unreplayed changes; add --force")
    rep = zero(image)
    if as_json:
        click.echo(json.dumps(rep, default=_jsonable))
        return
    if rep["lost_sectors"]:
        warn(f"{image}: {rep['lost_sectors']} sectors of unreplayed log were thrown away; "
             "the changes they held are lost")
    click.echo(f"{image}: log zeroed (new cycle {rep['cycle']})")
