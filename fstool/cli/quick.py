"""Command lines run without click: a plain ``fstool mdrestore DUMP IMAGE``
(with ``-l/--log-image LOG`` or not), whose restore takes less time than
loading click does.  Any other command line — another command, an option
more, ``--help``, ``--json``, a DUMP that is no file, an IMAGE that is a
directory — is left to click (:func:`command` returns None), which parses
it, and says what is wrong with it, as for every command."""
from __future__ import annotations

import os


def command(args: list):
    """A function that runs the command line ``args`` (what follows
    ``fstool``) without click, or None when click is to run it."""
    if not args or args[0] != "mdrestore":
        return None
    paths, log = [], None
    rest = iter(args[1:])
    for a in rest:
        if a in ("-l", "--log-image"):
            log = next(rest, None)
            if log is None:
                return None
        elif a.startswith("--log-image="):
            log = a.partition("=")[2]
        elif a.startswith("-") or not a:
            return None
        else:
            paths.append(a)
    # what click's Path(exists=True, dir_okay=False) and Path(dir_okay=False)
    # accept, and no more
    if len(paths) != 2 or not os.path.isfile(paths[0]) or os.path.isdir(paths[1]) or \
            log is not None and (not log or os.path.isdir(log)):
        return None
    dump, image = paths

    def run() -> None:
        from ..ops.mdrestore import mdrestore  # lazy: start-up (only when it runs)
        print(restored_line(mdrestore(dump, image, log_image=log), image))
    return run


def restored_line(r: dict, image) -> str:
    """What ``fstool mdrestore`` says when done (``r``: mdrestore's report)."""
    return (f"{image}: restored from a v{r['version']} metadump, "
            f"{human_bytes(r['sectors'] * 512)} of metadata in "
            f"{human_bytes(r['image_bytes'])}")


def human_bytes(n: int) -> str:
    """``n`` bytes as people read them: 512 B, 4.0 KiB, 1.5 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
