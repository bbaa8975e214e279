"""``fstool repair``: mend what check finds."""
import click

from .options import image_arg, json_opt
import json
import sys
from ..errors import BadValue, FsToolError, ImageBusy, UnsupportedError
from ..ops.repair import repair
from ..ops.names import json_exact

EXIT_CANNOT = 4


@click.command("repair")
@click.option("-n", "--no-modify", "dry_run", is_flag=True,
              help="Write nothing; say what would be changed.")
@click.option("--rebuild", "rebuild", default="",
              help="Rebuild these AG trees in every AG even on a clean image "
                   "(comma-separated: finobt, inobt, bnobt, cntbt, agfl, refcountbt, all; "
                   "an AG's trees are rebuilt together).")
@click.option("--add-finobt", is_flag=True,
              help="Add the free inode btree to an image made without one (-m finobt=0).")
@click.option("--undo-file", type=click.Path(dir_okay=False),
              help="Save every block before it is overwritten; 'fstool undo IMAGE FILE' "
                   "puts them back.")
@click.option("--extend-truncated", is_flag=True,
              help="An image file shorter than the filesystem its superblock describes is "
                   "first extended with zeros to that size (what was cut off is lost), then "
                   "repaired; without this repair stops on such an image.")
@click.option("--partial", is_flag=True,
              help="When problems remain that repair cannot mend, write what it can "
                   "repair all the same (exit 4); without this nothing is written then.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Check AGs in this many parallel processes.")
@json_opt
@image_arg
def cmd(dry_run, rebuild, add_finobt, undo_file, extend_truncated, partial, jobs, as_json,
        image):
    """Check IMAGE and repair what check finds, in xfs_repair's order: the
    primary superblock (from the secondaries), inodes (fields fixed, bad
    ones cleared or their attr forks dropped), directories, link counts and
    files no directory reaches (to lost+found), AGF and AGI headers, the AG
    free space and inode btrees and free lists, AG and superblock counters,
    secondary superblocks (docs/check-problems.md says what each finding
    gets).

    Exit status: 0 the image was clean (and anything --rebuild or
    --add-finobt asked for is done), 1 problems were repaired (with -n:
    would be), 2 bad arguments, 4 repair could not run (dirty log, damage
    it cannot work around) or problems remain that it cannot repair (then
    nothing is written, unless --partial: what it can repair is), 5 the
    image uses a format or feature fstool does not support (nothing is
    written), 7 the image is busy (mounted, attached to a loop device, held
    by another fstool, under any of its names).
    """


    trees = tuple(t.strip() for t in rebuild.split(",") if t.strip())
    try:
        result = repair(image, dry_run=dry_run, rebuild=trees, add_finobt=add_finobt,
                        undo_file=undo_file, jobs=jobs, extend_truncated=extend_truncated,
                        partial=partial)
    except FsToolError as e:
        # a busy image, or one fstool does not handle: the status every
        # command gives it
        if not isinstance(e, (BadValue, ImageBusy, UnsupportedError)):
            e.exit_status = EXIT_CANNOT
        raise
    status = result.exit_code
    if as_json:
        click.echo(json.dumps(json_exact({
            "status": status, "dry_run": dry_run, "written": result.written,
            "findings": [f.as_dict() for f in result.findings],
            # each action names its finding (one action per finding)
            "actions": [{**_finding_where(f), "action": a, "text": t}
                        for f, a, t in result.actions],
            "changes": result.changes,
            # nothing written (problems remain it cannot mend): what
            # --partial would change
            "refused": result.refused, "withheld": result.withheld,
            "not_repaired": [dict(f.as_dict(), reason=r) for f, r in result.unrepaired],
            **({} if result.zeroed is None else {"zeroed_files": result.zeroed}),
        })))
        _say_refused(result, image)
        sys.exit(status)
    verb = "would change" if dry_run else "changed"
    if not result.findings:
        click.echo("no problems found")
    else:
        click.echo(f"{len(result.findings)} problem{'s' if len(result.findings) != 1 else ''} "
                   "found")
    if result.changes:
        click.echo(f"{verb}:")
        for c in result.changes:
            click.echo(f"  {c}")
    elif result.findings and not result.unrepaired:
        click.echo("nothing to change (warnings only)")
    if result.withheld:
        click.echo("would change with --partial:")
        for c in result.withheld:
            click.echo(f"  {c}")
    for f, reason in result.unrepaired:
        where = f" (AG {f.agno})" if f.agno is not None else ""
        click.echo(f"not repaired: {f.code}{where}: {f.message}: {reason}")
    _say_refused(result, image)
    sys.exit(status)


def _say_refused(result, image) -> None:
    """One line on stderr when nothing was written because problems remain
    that repair cannot mend."""
    if not result.refused:
        return
    codes = sorted({f.code for f, _r in result.unrepaired})
    n = len(result.unrepaired)
    nothing = "nothing would be written" if result.dry_run else "nothing was written"
    rest = " (--partial repairs the rest)" if result.withheld else ""
    click.echo(f"fstool: {image}: {n} problem{'s' if n != 1 else ''} repair cannot mend "
               f"({', '.join(codes)}): {nothing}{rest}", err=True)


def _finding_where(f) -> dict:
    """What names a finding in an action: its code, message and location."""
    d = f.as_dict()
    return {k: d[k] for k in ("code", "message", "structure", "agno", "block", "ino", "fork",
                              "offset", "field", "index") if k in d}
