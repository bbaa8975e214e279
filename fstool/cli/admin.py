"""``fstool admin``: the label and UUID, as xfs_admin -L / -U / -l / -u."""
import json

import click

from ..ops import admin as A
from .options import image_arg, json_opt


@click.command("admin")
@click.option("-L", "label", metavar="LABEL",
              help="Set the label (at most 12 bytes; '--' clears it).")
@click.option("-U", "uuid", metavar="UUID|generate|restore|nil",
              help="Set the UUID: a given one, a new random one, back to the one the "
                   "metadata is stamped with (restore), or nil.")
@click.option("-l", "show_label", is_flag=True, help="Print the label.")
@click.option("-u", "show_uuid", is_flag=True, help="Print the UUID.")
@json_opt
@image_arg
def cmd(label, uuid, show_label, show_uuid, as_json, image):
    """Set or print the label and UUID of IMAGE as xfs_admin does.  The
    label is written in every superblock, in a journaled transaction.  A
    new UUID on a v5 filesystem keeps the metadata's stamped UUID in
    sb_meta_uuid (incompat META_UUID, as the kernel and xfs_admin do; -U
    restore returns to it and clears the feature) and marks the clean log
    with the new UUID (an unmount record at its head); a killed run leaves
    an image that mounts, and running it again finishes it.  Refused on a dirty log, a mounted image
    or one marked as needing repair.
    """
    if label is None and uuid is None and not show_label and not show_uuid:
        show_label = show_uuid = True          # nothing asked: both shown
    changes = []
    if label is not None:
        changes += A.set_label(image, A.parse_label(label))
    if uuid is not None:
        changes += A.set_uuid(image, uuid)
    now = A.show(image)
    if as_json:
        click.echo(json.dumps(dict(now, image=image, changes=changes)))
        return
    for c in changes:
        click.echo(c)
    if show_label:
        click.echo(f'label = "{now["label"]}"')
    if show_uuid:
        click.echo(f"UUID = {now['uuid']}")
