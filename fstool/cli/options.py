"""Argument types shared by commands."""
import json

import click

import fstool

from ..errors import FsToolError
from ..recovery.memory import replay_in_memory as replay
from .console import warn

image_arg = click.argument("image", type=click.Path())
json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


replay_opt = click.option(
    "--replay-in-memory", "replay_in_memory", is_flag=True,
    help="Show the image as it would be after replaying a dirty log, "
         "without changing it.")


def open_fs(image, replay_in_memory: bool = False):
    """Open IMAGE for a reading command.  A dirty log is never silent: it
    is replayed in memory when asked, else a warning says that what follows
    is the image before replay."""
    fs = fstool.open_image(image)
    try:
        _dirty_log_notice(fs, image, replay_in_memory)
    except BaseException:
        fs.close()
        raise
    return fs


def _dirty_log_notice(fs, image, replay_in_memory: bool) -> None:
    try:
        dirty = fs.log.dirty
    except FsToolError as e:
        warn(f"{image}: the log cannot be read ({e}); what follows is the image as it "
             "is on disk")
        return
    if not dirty:
        return
    if replay_in_memory:
        replay(fs)
        return
    warn(f"{image}: the log is dirty; what follows is the image BEFORE replay (run "
         f"'fstool log replay {image}', or add --replay-in-memory)")


def emit_json(obj, as_json: bool) -> None:
    """Print ``obj`` as one line of JSON when ``as_json`` (else nothing)."""
    if as_json:
        click.echo(json.dumps(obj, ensure_ascii=False))
