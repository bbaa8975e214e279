"""fstool mkfs: mkfs.xfs-compatible option spellings over ops.mkfs."""
import uuid as uuidlib

import click

from ..ops import info, mkfs as M
from ..ops.mkfs_config import SECTIONS, load
from .options import emit_json, image_arg_no_log
from .populate import (clamp_time, make_owner_map, run_populate, summary, summary_record,
                       timestamp_ns)

_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(text: str, what: str, blocksize: int = 4096, sectsize: int = 512) -> int:
    """A size as mkfs.xfs takes it: bytes, or a number with s (sectors),
    b (blocks), k, m, g, t or p (binary multiples)."""
    t = text.strip().lower()
    mult = 1
    if t and t[-1] in _SUFFIX:
        mult, t = _SUFFIX[t[-1]], t[:-1]
    elif t.endswith("s"):
        mult, t = sectsize, t[:-1]
    elif t.endswith("b"):
        mult, t = blocksize, t[:-1]
    try:
        value = int(t, 0)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size (use bytes or k/m/g/t/p, "
                                 "s for sectors, b for blocks)", param_hint=what) from None
    if value < 0:
        raise click.BadParameter(f"{text!r} is negative", param_hint=what)
    return value * mult


# the suboptions fstool mkfs knows, by flag (the configuration file
# sections are the same groups: see ops.mkfs_config.SECTIONS)
ALLOWED = {
    "-b": {"size"},
    "-d": {"agcount", "agsize", "size", "file", "name"},
    "-i": {"size", "sparse", "maxpct", "nrext64", "attr", "projid32bit", "exchange"},
    "-l": {"size", "internal", "version", "lazy-count"},
    "-m": {"crc", "finobt", "reflink", "uuid", "rmapbt", "bigtime", "inobtcount",
           "autofsck"},
    "-n": {"size", "version", "ftype", "parent"},
    "-r": set(),
    "-s": {"size"},
}


def _subopts(values, flag: str, allowed: set) -> dict:
    out = {}
    for value in values:
        for item in value.split(","):
            if not item:
                continue
            key, sep, val = item.partition("=")
            if key not in allowed:
                raise click.BadParameter(f"unknown suboption {key!r} (known: "
                                         f"{', '.join(sorted(allowed))})", param_hint=flag)
            if not sep:
                raise click.BadParameter(f"suboption {key!r} needs a value", param_hint=flag)
            out[key] = val
    return out


def _config_opts(cfg) -> dict:
    """flag -> {key: value} of a configuration file, refusing what fstool
    mkfs does not know with the file's name."""
    out = {}
    for section, items in cfg.sections.items():
        flag = SECTIONS[section]
        for key in items:
            if flag == "-r":
                raise click.UsageError(f"{cfg.where}: [realtime] {key}: realtime sections "
                                       "are not supported")
            if key not in ALLOWED[flag] or (flag == "-d" and key in ("file", "name")):
                raise click.UsageError(f"{cfg.where}: [{section}] {key}: not an option fstool "
                                       f"mkfs supports (known: "
                                       f"{', '.join(sorted(ALLOWED[flag] - {'file', 'name'}))})")
        out[flag] = dict(items)
    return out


def _autofsck(v: str) -> str:
    """The autofsck property's word, as mkfs.xfs reads it: 0 or none, 1 or
    repair, check, optimize."""
    word = {"0": "none", "1": "repair"}.get(v, v)
    if word not in ("none", "check", "optimize", "repair"):
        raise click.BadParameter(f"autofsck={v}: use none, check, optimize, repair, 0 or 1",
                                 param_hint="-m")
    return word


def _bool(v: str, flag: str, key: str) -> bool:
    if v not in ("0", "1"):
        raise click.BadParameter(f"{key}={v}: use 0 or 1", param_hint=flag)
    return v == "1"


@click.command("mkfs")
@image_arg_no_log
@click.option("--size", help="Size of the filesystem (e.g. 512m, 16g, 1t).")
@click.option("-b", "b_opts", multiple=True, metavar="size=N", help="Block size.")
@click.option("-d", "d_opts", multiple=True, metavar="agcount=N,agsize=N,size=N",
              help="Data section: AG count or size, filesystem size.")
@click.option("-i", "i_opts", multiple=True,
              metavar="size=N,sparse=0|1,maxpct=N,nrext64=0|1,exchange=0|1",
              help="Inode size, sparse inode chunks, max inode space %, 64-bit extent counts, "
                   "exchange-range.")
@click.option("-l", "l_opts", multiple=True, metavar="size=N", help="Internal log size.")
@click.option("-m", "m_opts", multiple=True,
              metavar="crc=1,finobt=0|1,rmapbt=0|1,reflink=0|1,bigtime=0|1,inobtcount=0|1,"
                      "autofsck=none,uuid=U",
              help="Metadata features.")
@click.option("-n", "n_opts", multiple=True, metavar="size=N,parent=0|1",
              help="Directory block size, parent pointers (which turn on exchange-range "
                   "unless -i exchange=0).")
@click.option("-c", "c_opts", multiple=True, metavar="options=FILE|PROFILE",
              help="Read options from a mkfs.xfs configuration file, or a profile by name "
                   "(lts_4.19, lts_5.4, lts_5.10, lts_5.15, lts_6.1, lts_6.6); "
                   "command-line options override it.")
@click.option("-s", "s_opts", multiple=True, metavar="size=N", help="Sector size.")
@click.option("-L", "label", default="", help="Filesystem label (at most 12 bytes).")
@click.option("--uuid", "uuid_opt", help="Filesystem uuid (same as -m uuid=).")
@click.option("--timestamp", type=int,
              help="Seconds since the epoch for inode times (default: $SOURCE_DATE_EPOCH, "
                   "else now).")
@click.option("-N", "--dry-run", "dry_run", is_flag=True,
              help="Print the geometry and write nothing.")
@click.option("-f", "--force", is_flag=True, help="Overwrite an existing filesystem.")
@click.option("-K", "--no-discard", "keep", is_flag=True,
              help="Leave the old contents of an existing image file where the new "
                   "filesystem does not write (mkfs.xfs -K). By default they are punched "
                   "out first, so nothing of them stays in free space and the same build "
                   "gives the same bytes over any old file.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option("--populate", "populate_src", type=click.Path(exists=True),
              help="Then add this directory, tar archive or protofile (see 'fstool populate').")
@click.option("--squash-owner", is_flag=True,
              help="With --populate: make everything owned by root (0:0).")
@click.option("--owner-map", "owner_map", metavar="UID:GID=UID:GID,...",
              help="With --populate: map source owners to image owners.")
@click.option("--clamp-mtime", "clamp", is_flag=True,
              help="With --populate: modification times later than the build time "
                   "($SOURCE_DATE_EPOCH or --timestamp) become the build time.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the geometry (and what --populate added) as one JSON object.")
@click.option("--bytes", "raw", is_flag=True,
              help="What --populate added in bytes instead of KiB/MiB/GiB (-b is the block "
                   "size here, as in mkfs.xfs).")
def cmd(image, size, b_opts, d_opts, i_opts, l_opts, m_opts, n_opts, c_opts, s_opts, label,
        uuid_opt, timestamp, dry_run, force, keep, quiet, populate_src, squash_owner,
        owner_map, clamp, as_json, raw):
    """Create an XFS v5 filesystem in IMAGE (a new sparse file, an existing
    file, or a block device), with mkfs.xfs's defaults for its size.

    Options use mkfs.xfs's spellings (-b size=4096 -d agcount=8 -m reflink=0
    ...).  Images down to 16 MiB are allowed (mkfs.xfs stops at 300 MiB); see
    docs/commands/mkfs.md for the choices made there.  With a fixed --uuid and
    SOURCE_DATE_EPOCH (or --timestamp) two runs give identical images.
    """


    c = _subopts(c_opts, "-c", {"options"})
    cfg = load(c["options"]) if "options" in c else None
    base = _config_opts(cfg) if cfg is not None else {}
    given = {flag: _subopts(vals, flag, ALLOWED[flag]) for flag, vals in (
        ("-b", b_opts), ("-d", d_opts), ("-i", i_opts), ("-l", l_opts), ("-m", m_opts),
        ("-n", n_opts), ("-s", s_opts))}
    # the command line overrides the file
    b, d, i, lg, m, n, s = ({**base.get(flag, {}), **given[flag]} for flag in
                            ("-b", "-d", "-i", "-l", "-m", "-n", "-s"))

    bs = parse_size(b["size"], "-b size") if "size" in b else 4096
    ss = parse_size(s["size"], "-s size") if "size" in s else 512
    release = cfg.release if cfg is not None and cfg.release else M.DEFAULT_RELEASE
    opts = M.Options.of_release(release, blocksize=bs, sectsize=ss, label=label)
    sizes = [v for v in (size, d.get("size")) if v]
    if len(sizes) == 2 and parse_size(sizes[0], "--size", bs, ss) != \
            parse_size(sizes[1], "-d size", bs, ss):
        raise click.UsageError("--size and -d size= disagree")
    if sizes:
        opts.size = parse_size(sizes[0], "--size", bs, ss)
    if "agcount" in d:
        opts.agcount = parse_size(d["agcount"], "-d agcount")
    if "agsize" in d:
        opts.agsize = parse_size(d["agsize"], "-d agsize", bs, ss)
    if "size" in i:
        opts.inodesize = parse_size(i["size"], "-i size")
    if "sparse" in i:
        opts.sparse = _bool(i["sparse"], "-i", "sparse")
    if "nrext64" in i:
        opts.nrext64 = _bool(i["nrext64"], "-i", "nrext64")
    if "maxpct" in i:
        opts.imaxpct = parse_size(i["maxpct"], "-i maxpct")
    if "exchange" in i:
        opts.exchange = _bool(i["exchange"], "-i", "exchange")
    if "size" in lg:
        opts.logsize = parse_size(lg["size"], "-l size", bs, ss)
    if lg.get("internal", "1") != "1":
        raise click.BadParameter("only internal logs are supported", param_hint="-l")
    if "size" in n:
        opts.dirblocksize = parse_size(n["size"], "-n size", bs, ss)
    if n.get("ftype", "1") != "1" or n.get("version", "2") != "2":
        raise click.BadParameter("v5 filesystems always use version 2 directories with "
                                 "ftype=1", param_hint="-n")
    parent = _bool(n["parent"], "-n", "parent") if "parent" in n else None
    if parent is not None:
        opts.parent = parent
    if m.get("crc", "1") != "1":
        raise click.BadParameter("fstool makes v5 (crc=1) filesystems only; v4 is "
                                 "deprecated", param_hint="-m crc")
    for feat in ("finobt", "reflink", "rmapbt", "bigtime", "inobtcount"):
        if feat in m:
            setattr(opts, feat, _bool(m[feat], "-m", feat))
    if "inobtcount" not in given["-m"] and not opts.finobt:
        opts.inobtcount = None        # a file's inobtcount=1 yields to finobt=0
    if "autofsck" in m:
        opts.autofsck = _autofsck(m["autofsck"])
        # as mkfs.xfs: checking wants reverse mappings and parent pointers,
        # and says so when told to go without
        if opts.autofsck != "none":
            for feat, what, given in (("rmapbt", "reverse mapping", "rmapbt" in m),
                                      ("parent", "parent pointers", parent is not None)):
                if not given:
                    setattr(opts, feat, True)
                elif not getattr(opts, feat) and not quiet:
                    click.echo(f"-m autofsck={opts.autofsck} is less effective without {what}")
    the_uuid = uuid_opt or m.get("uuid")
    if the_uuid:
        try:
            opts.uuid = str(uuidlib.UUID(the_uuid))
        except ValueError:
            raise click.BadParameter(f"{the_uuid!r} is not a uuid", param_hint="uuid") from None
    if len(label.encode()) > 12:
        raise click.BadParameter("a label holds at most 12 bytes", param_hint="-L")
    if timestamp is not None:
        opts.timestamp_ns = timestamp * 1_000_000_000
    if populate_src is None and (squash_owner or owner_map or clamp):
        raise click.UsageError("--squash-owner, --owner-map and --clamp-mtime need --populate")
    omap = None
    if populate_src is not None:
        omap = make_owner_map(owner_map, squash_owner)
    ts = None
    if populate_src is not None:
        ts = opts.timestamp_ns if opts.timestamp_ns is not None else timestamp_ns(None)
        clamp_ns = clamp_time(clamp, ts)
    geo = M.mkfs(image, opts, force=force, dry_run=dry_run,
                 in_progress=populate_src is not None, discard=not keep)
    record = {"image": image, "dry_run": dry_run, "geometry": info.geometry_of_plan(geo)}
    if not quiet and not as_json:
        click.echo(info.format_geometry(record["geometry"], image, counters=False))
    if populate_src is not None and not dry_run:
        st = run_populate(image, populate_src, "/", omap, False, ts, quiet or as_json,
                          clamp_ns, fresh=True)
        record["populate"] = summary_record(st)
        if not quiet and not as_json:
            click.echo(summary(st, raw))
    if as_json:
        emit_json(record, True)
