"""``fstool path`` without click: what the command does once its command
line is read (by click, cli/path.py, or without it, cli/quick.py)."""
import sys

from ..errors import FsToolError
from ..ops.names import shown_name
from ..ops.parents import AllPaths, one_inode
from . import exits
from .exits import finish
from .plain import echo, open_fs


def run(every: bool, as_json: bool, image: str, inos, replay_in_memory: bool) -> None:
    """Print the paths of ``inos`` (or of every inode, ``every``) of
    ``image``; exit status 1 (sys.exit) when an inode cannot be read or a
    parent pointer leads nowhere."""
    status = 0
    out = sys.stdout
    with open_fs(image, replay_in_memory) as fs:
        if every and not as_json:
            walker = AllPaths(fs)
            try:
                _text, broken = walker.render(_utf8_writer(out))
                out.flush()
            except BrokenPipeError:
                finish(0)               # the reader went away (path --all | head)
            for ino, b in broken:
                status = 1
                _say_broken(ino, b)
            status |= _report_unread(walker)
            _end(status)
            return
        if every:
            walker = AllPaths(fs)
            todo = iter(walker)
        else:
            walker = one_inode(fs, inos[0])
            todo = _each_readable(walker, inos)
        prefix = every or len(inos) > 1
        if as_json:
            import json  # lazy: start-up (only for --json)
        seen_broken = 0
        lines = []
        for ino, found in todo:
            broken = walker.broken[seen_broken:]
            seen_broken = len(walker.broken)
            if broken:
                status = 1
            if as_json:
                lines.append(json.dumps({
                    "ino": ino,
                    "paths": [p.decode("utf-8", "surrogateescape") for p in found],
                    "broken": [{"parent": b.parent.ino, "gen": b.parent.gen,
                                "name": b.parent.name.decode("utf-8", "surrogateescape"),
                                "why": b.why} for b in broken]}))
            else:
                head = f"{ino} " if prefix else ""
                lines.extend(head + shown_name(p) for p in found)
                for b in broken:
                    _say_broken(ino, b)
            if len(lines) >= 4096:
                out.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            out.write("\n".join(lines) + "\n")
        status |= _report_unread(walker)
    _end(status)


def _end(status: int) -> None:
    """The command is done: exit with ``status`` (nothing when 0, called
    from Python); run as the program, at once, without the interpreter's
    teardown freeing the table of every inode one object at a time."""
    if exits.AS_PROGRAM:
        finish(status)
    if status:
        sys.exit(status)


def _each_readable(walker, inos):
    """(ino, its paths) of each of ``inos`` in turn; one that cannot be
    read is put in the walker's ``unread`` (reported at the end, as
    --all reports them) and left out."""
    walker.unread = []
    for ino in inos:
        try:
            found = walker.paths(ino)
        except FsToolError as e:
            walker.unread.append((ino, str(e)))
            continue
        yield ino, found


def _say_broken(ino: int, b) -> None:
    """The stderr line for a parent pointer of ``ino`` that leads nowhere."""
    echo(f"fstool: inode {ino}: parent pointer {b.parent.ino}/{shown_name(b.parent.name)}: "
         f"{b.why}", err=True)


def _report_unread(walker) -> int:
    """Say which inodes could not be read; 1 when some could not."""
    unread = getattr(walker, "unread", ())
    for ino, why in unread:
        echo(f"fstool: inode {ino}: {why}" if ino is not None else f"fstool: {why}", err=True)
    return 1 if unread else 0


def _utf8_writer(out):
    """A function that writes UTF-8 text (bytes of whole lines) to the text
    stream ``out``: its binary buffer when it writes UTF-8, else the text
    decoded."""
    raw = getattr(out, "buffer", None)
    if raw is not None and (getattr(out, "encoding", "") or "").lower().replace("-", "") \
            in ("utf8", "utf_8"):
        out.flush()
        return raw.write
    return lambda text: out.write(str(text, "utf-8"))
