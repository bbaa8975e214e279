"""``fstool disk``: the partition table of a whole-disk image."""
import json

import click

from ..errors import NotXfsError
from ..io.device import Device
from ..io.partition import human_size, read_table
from .console import warn
from .options import json_opt


@click.command("disk")
@click.argument("image", type=click.Path())
@json_opt
def cmd(image, as_json):
    """List the partition table (GPT or MBR) of IMAGE like `sfdisk -l`,
    marking the partitions that hold XFS: each is IMAGE@N to every other
    command.  A damaged or missing GPT backup header, partitions past the
    end of the image and broken chains of logical partitions are reported
    as warnings.

    Exit status: 0 listed (or IMAGE is a plain XFS image, said so), 4 no
    partition table and no XFS filesystem.
    """
    dev = Device(image, whole=True)          # refuses what is no image (a directory...)
    try:
        if dev.start or dev.partition is not None:
            raise click.UsageError(f"{image}: names a partition; give the disk image itself")
        head = dev.pread(0, min(dev.size, 8192))
        table = read_table(dev.fd, dev.size, head)
    finally:
        dev.close()
    if table is None:
        if head[:4] != b"XFSB":
            raise NotXfsError("superblock", f"{image}: no partition table (GPT or MBR) and no "
                              "XFS filesystem", agno=0, block=0)
        if as_json:
            click.echo(json.dumps({"image": image, "table": None, "xfs": True}))
        else:
            click.echo(f"{image}: no partition table: the whole file is an XFS filesystem")
        return
    for note in table.notes:
        warn(f"{image}: {note}")
    sec = table.sector
    if as_json:
        click.echo(json.dumps({
            "image": image, "table": table.kind, "sector_size": sec, "id": table.disk_id,
            "size": table.disk_size, "notes": table.notes,
            "partitions": [dict(p._asdict(), name_in_fstool=f"{image}@{p.number}")
                           for p in table.partitions]}))
        return
    click.echo(f"Disk {image}: {human_size(table.disk_size)}, {table.disk_size} bytes, "
               f"{table.disk_size // sec} sectors")
    click.echo(f"Sector size: {sec} bytes")
    click.echo(f"Disklabel type: {table.kind}")
    click.echo(f"Disk identifier: {table.disk_id}")
    if table.kind == "gpt":
        click.echo(f"First usable sector: {table.first_usable}, last: {table.last_usable}")
    click.echo()
    head = ["Device", "Start", "End", "Sectors", "Size", "Type", "Name" if table.kind == "gpt"
            else "Boot", "Filesystem"]
    rows = []
    for p in table.partitions:
        first = p.start // sec
        fs = "" if p.kind == "extended" else \
            (f"XFS {p.fs_label!r}" if p.fs_label else "XFS") if p.xfs else "-"
        rows.append([f"{image}@{p.number}", str(first), str(first + p.size // sec - 1),
                     str(p.size // sec), human_size(p.size), p.type_name,
                     p.name if table.kind == "gpt" else "*" if p.bootable else "", fs])
    right = {1, 2, 3, 4}
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    for r in [head] + rows:
        click.echo(" ".join(c.rjust(w) if i in right else c.ljust(w)
                            for i, (c, w) in enumerate(zip(r, widths))).rstrip())
