"""fstool check: the click command (cli/check_run.py does the work; cli/
quick.py runs a plain command line without click)."""
import click

from .check_run import run
from .console import format_opt
from .options import image_arg, json_opt


@click.command("check")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Check AGs in this many parallel processes.")
@json_opt
@format_opt
@image_arg
def cmd(jobs, as_json, fmt, image):
    """Check IMAGE like xfs_repair -n: every btree invariant, free space and
    inode accounting, every block owned exactly once, inodes, directories,
    link counts, reachability, superblock counters and a clean log.

    Exit status: 0 clean, 1 corruption found, 2 dirty log (replay it first),
    4 the check could not run.  Findings come from one problem table
    (docs/check-problems.md); --json prints one object per finding per line.
    """
    run(jobs, as_json, fmt, image)
