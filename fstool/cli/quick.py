"""Command lines run without click: ``fstool path``, ``fstool mdrestore``
and ``fstool check``, whose work takes little more time than loading click
does.

What each of these commands accepts is not written here: it is read from
the click command itself by ``python3 -m fstool.cli.quick``, which writes
cli/quickspec.py (every parameter: its option names or its place, its type,
whether it is a flag, what the command gets when it is not given), and
tests/test_startup.py fails when that file is not what the click commands
give today.  A command line is run here only when every word of it is
understood the way click understands it: an option or a type the spec
does not describe, ``--help``, ``--``, a word given twice, a value click
would refuse (a DUMP that is no file, an INO that is no number) — anything
else is left to click (:func:`command` returns None), which parses it and
says what is wrong with it, as for every command.  Both ways call the same
function with the same arguments (RUNNERS, and the click commands'
callbacks), and that function's parameters must be the click command's."""
from __future__ import annotations

import gc
import os
import stat
import sys

from . import exits
from .quickspec import SPECS
from .units import human_bytes


def command(args: list):
    """A function that runs the command line ``args`` (what follows
    ``fstool``) without click, or None when click is to run it."""
    if not args or args[0] not in SPECS:
        return None
    kw = parse(SPECS[args[0]], args[1:])
    return None if kw is None else RUNNERS[args[0]](**kw)


def parse(spec, args: list) -> dict | None:
    """The values the click command with parameters ``spec`` (cli/
    quickspec.py) would give its callback for ``args``; None when click
    is to read them."""
    by_opt = {o: p for p in spec if p[1] for o in p[1]}
    given: dict = {}
    words: list = []
    rest = iter(args)
    for a in rest:
        if not a or a == "-":
            return None
        if not a.startswith("-"):
            words.append(a)
            continue
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        p = by_opt.get(name)
        if p is None or p[0] in given:
            return None
        if p[4] == ("flag",):
            if eq:
                return None
            given[p[0]] = True
            continue
        if not eq:
            value = next(rest, None)
            if value is None or value.startswith("-") or not value:
                return None
        given[p[0]] = value
    places = [p for p in spec if not p[1]]
    fixed = [p for p in places if p[2] == 1]
    spread = [p for p in places if p[2] == -1]
    if len(fixed) + len(spread) != len(places) or len(spread) > 1 or len(words) < len(fixed) \
            or len(words) > len(fixed) and not spread:
        return None
    if spread:
        # as click deals them out: those before the open-ended argument from
        # the front, those after it from the back, the open one the middle
        at = places.index(spread[0])
        tail = len(places) - at - 1
        mid = words[at:len(words) - tail]
        words = words[:at] + [mid] + words[len(words) - tail:]
    given.update((p[0], w) for p, w in zip(places, words))
    kw = {}
    for name, _opts, nargs, required, kind, default in spec:
        if name not in given:
            if required:
                return None
            kw[name] = default
            continue
        value = given[name]
        if nargs == -1:
            value = tuple(_convert(kind, v) for v in value)
            if None in value:
                return None
        else:
            value = _convert(kind, value)
            if value is None:
                return None
        kw[name] = value
    return kw


def _convert(kind: tuple, value):
    """``value`` (a word of the command line) as click's type ``kind``
    gives it, or None where click would refuse it (or the type is one
    this parser does not know)."""
    if kind[0] == "flag":
        return value
    if kind[0] == "str":
        return value
    if kind[0] in ("int", "intrange"):
        try:
            n = int(value)
        except ValueError:
            return None
        if kind[0] == "intrange" and (kind[1] is not None and n < kind[1] or
                                      kind[2] is not None and n > kind[2]):
            return None
        return n
    if kind[0] == "path":
        exists, file_okay, dir_okay, readable, writable, executable = kind[1:]
        try:
            st = os.stat(value)
        except OSError:
            return None if exists else value
        if not file_okay and stat.S_ISREG(st.st_mode) or \
                not dir_okay and stat.S_ISDIR(st.st_mode) or \
                readable and not os.access(value, os.R_OK) or \
                writable and not os.access(value, os.W_OK) or \
                executable and not os.access(value, os.X_OK):
            return None
        return value
    return None


def _path(every, as_json, image, inos, replay_in_memory, partition, offset, logdev):
    if bool(inos) == bool(every):
        return None                     # click says which is wrong
    from ..errors import InvalidArgument  # lazy: start-up (only when it runs)
    from .plain import image_name  # lazy: start-up, as above
    try:
        image = image_name(image, partition, offset, logdev)
    except InvalidArgument:
        return None                     # click says it, as a usage error

    def run() -> None:
        _no_collector()
        from .path_run import run  # lazy: start-up, as above
        run(every, as_json, image, inos, replay_in_memory)
    return run


def _check(jobs, as_json, fmt, image, partition, offset, logdev):
    from ..errors import InvalidArgument  # lazy: start-up (only when it runs)
    from .plain import image_name  # lazy: start-up, as above
    try:
        image = image_name(image, partition, offset, logdev)
    except InvalidArgument:
        return None                     # click says it, as a usage error

    def run() -> None:
        from .check_run import run  # lazy: start-up, as above
        run(jobs, as_json, fmt, image)
    return run


def _mdrestore(log_image, as_json, dump, image):
    return lambda: restore(log_image, as_json, dump, image)


def restore(log_image, as_json, dump, image) -> None:
    """``fstool mdrestore``, its command line read."""
    _no_collector()
    from ..ops.mdrestore import mdrestore  # lazy: start-up (only when it runs)
    r = mdrestore(dump, image, log_image=log_image)
    if as_json:
        from .plain import emit_json  # lazy: start-up (plain loads the image guards)
        emit_json(r, True)
    else:
        print(restored_line(r, image), flush=True)
    if exits.AS_PROGRAM:
        exits.finish(0)             # no interpreter teardown: the restore is written


def _no_collector() -> None:
    """No cyclic garbage collection for the rest of the process: these
    commands make no reference cycles worth collecting, and the collector
    would otherwise run over and over while the modules they load are
    being made (several per cent of a whole run of mdrestore)."""
    gc.disable()


# command name -> a function of the click command's parameters (by the names
# its callback takes) returning what runs it, or None for click to run it
RUNNERS = {"path": _path, "mdrestore": _mdrestore, "check": _check}


def restored_line(r: dict, image) -> str:
    """What ``fstool mdrestore`` says when done (``r``: mdrestore's report)."""
    return (f"{image}: restored from a v{r['version']} metadump, "
            f"{human_bytes(r['sectors'] * 512)} of metadata in "
            f"{human_bytes(r['image_bytes'])}")


# -- the spec, read from the click commands -------------------------------------------

def _kind(p, cmd) -> tuple:
    """A parameter's type as the spec writes it (``("click",)``: one this
    parser leaves to click whenever it is given)."""
    import click  # lazy: only the generator reads the click commands
    t = p.type
    if getattr(p, "is_flag", False):
        # a plain on-flag: told by what click makes of it given (True), not
        # by its flag_value, which click versions spell differently (True,
        # or a sentinel standing for it since 8.3)
        ok = not p.secondary_opts and isinstance(t, click.types.BoolParamType) and \
            click_params(cmd, [p.opts[0]], resilient_parsing=True)[p.name] is True
        return ("flag",) if ok else ("click",)
    if t is click.STRING:
        return ("str",)
    if t is click.INT:
        return ("int",)
    if isinstance(t, click.IntRange) and not (t.min_open or t.max_open or t.clamp):
        return ("intrange", t.min, t.max)
    if isinstance(t, click.Path) and not (t.resolve_path or t.allow_dash) and \
            t.type is None:
        return ("path", t.exists, t.file_okay, t.dir_okay, t.readable, t.writable,
                t.executable)
    return ("click",)


def spec_of(cmd) -> tuple:
    """The spec of the click command ``cmd``: (name, option names (none for
    an argument), nargs, required, type, value when not given) of each of
    its parameters, in click's order."""
    import click  # lazy: only the generator reads the click commands
    absent = click_params(cmd, [], resilient_parsing=True)
    out = []
    for p in cmd.params:
        if p.envvar or p.callback or not p.expose_value or p.is_eager or \
                isinstance(p, click.Option) and (p.multiple or p.count or p.prompt):
            raise ValueError(f"{cmd.name}: {p.name} cannot be read without click")
        opts = tuple(p.opts) if isinstance(p, click.Option) else ()
        if p.nargs not in (1, -1) or opts and p.nargs != 1:
            raise ValueError(f"{cmd.name}: {p.name} takes {p.nargs} values")
        out.append((p.name, opts, p.nargs, bool(p.required), _kind(p, cmd), absent[p.name]))
    return tuple(out)


def click_params(cmd, args: list, **kw) -> dict:
    """What click gives the callback of ``cmd`` for ``args``, parsed under
    the ``fstool`` group as a command line is (its context settings: -h,
    --help; a context of the command's own would leave click's cached
    help option short of -h)."""
    from .group import cli  # lazy: only the generator and the tests parse with click
    parent = cli.make_context("fstool", [cmd.name], resilient_parsing=True)
    with parent:
        return cmd.make_context(cmd.name, list(args), parent=parent, **kw).params


def generated() -> str:
    """cli/quickspec.py as the click commands give it today."""
    import importlib  # lazy: only the generator reads the click commands
    from .commands import COMMANDS  # lazy: as above
    lines = ['"""What cli/quick.py knows of the commands it runs without click: every',
             "parameter of each (name, option names, nargs, required, type, value when not",
             "given).  Written by `python3 -m fstool.cli.quick` from the click commands;",
             'do not edit."""', "", "SPECS = {"]
    for name in RUNNERS:
        module, attr, _help = COMMANDS[name]
        cmd = getattr(importlib.import_module(f"fstool.cli.{module}"), attr)
        lines.append(f"    {name!r}: (")
        for p in spec_of(cmd):
            lines.append(f"        ({p[0]!r}, {p[1]!r}, {p[2]!r}, {p[3]!r},")
            lines.append(f"         {p[4]!r}, {p[5]!r}),")
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


SPEC_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quickspec.py")

if __name__ == "__main__":
    with open(SPEC_FILE, "w") as f:
        f.write(generated())
    sys.exit(0)
