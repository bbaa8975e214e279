"""mkfs.xfs configuration files (``-c options=FILE``) and the profiles
fstool ships.

A configuration file is mkfs.xfs's INI text: ``[section]`` lines naming one
of the option groups (block, data, inode, log, metadata, naming, realtime,
sector: the sections of -b -d -i -l -m -n -r -s) and ``key=value`` lines
under them; blank lines and lines starting with ``#`` or ``;`` are comments;
section and key names are matched without regard to case.

The profiles are the files xfsprogs ships (lts_4.19.conf ... lts_6.6.conf),
kept here as data of our own with the same keys and values, and are found
by name (``lts_6.1`` or ``lts_6.1.conf``).  A profile also says whose
choices fstool follows for what is not a feature: the profiles of kernels up
to 6.1 are made as mkfs.xfs 6.1 made its images, lts_6.6 as mkfs.xfs 6.10.1
makes them.
"""
from __future__ import annotations

import dataclasses
import os
from importlib import resources

from ..errors import FsToolError

SECTIONS = {"block": "-b", "data": "-d", "inode": "-i", "log": "-l", "metadata": "-m",
            "naming": "-n", "realtime": "-r", "sector": "-s"}
PROFILES = ("lts_4.19", "lts_5.4", "lts_5.10", "lts_5.15", "lts_6.1", "lts_6.6")
# the mkfs.xfs release whose choices each profile follows
PROFILE_RELEASE = {"lts_4.19": "6.1", "lts_5.4": "6.1", "lts_5.10": "6.1",
                   "lts_5.15": "6.1", "lts_6.1": "6.1", "lts_6.6": "6.10"}


class ConfigError(FsToolError):
    pass


@dataclasses.dataclass
class Config:
    where: str                         # the path, or "profile NAME"
    sections: dict                     # section -> {key: value}
    release: str | None = None         # set by the shipped profiles


def parse(text: str, where: str) -> dict:
    """{section: {key: value}} of one configuration file's text."""
    sections: dict = {}
    current, cur_name = None, ""
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConfigError(f"{where}: line {lineno}: unrecognised input {raw.strip()!r}")
            name = line[1:-1].strip().lower()
            if name not in SECTIONS:
                raise ConfigError(f"{where}: line {lineno}: unknown section [{name}] (known: "
                                  f"{', '.join(SECTIONS)})")
            current, cur_name = sections.setdefault(name, {}), name
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"{where}: line {lineno}: unrecognised input {raw.strip()!r}")
        if current is None:
            raise ConfigError(f"{where}: line {lineno}: {key.strip()} is outside any section")
        key = key.strip().lower()
        if key in current:
            raise ConfigError(f"{where}: line {lineno}: {key} is given twice in [{cur_name}]")
        current[key] = value.strip()
    return sections


def _profile_name(name: str) -> str | None:
    base = name[:-5] if name.endswith(".conf") else name
    return base if base in PROFILES else None


def load(name: str) -> Config:
    """A configuration file by path, or a shipped profile by name."""
    if os.path.exists(name):
        if os.path.isdir(name):
            raise ConfigError(f"{name}: is a directory, not a configuration file")
        try:
            with open(name, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{name}: cannot read the configuration file: {e}") from None
        return Config(name, parse(text, name))
    profile = _profile_name(name)
    if profile is None:
        raise ConfigError(f"{name}: no such configuration file, nor a profile fstool ships "
                          f"(profiles: {', '.join(PROFILES)})")
    text = resources.files(__package__).joinpath("mkfs_profiles", f"{profile}.conf") \
        .read_text(encoding="utf-8")
    return Config(f"profile {profile}", parse(text, f"profile {profile}"),
                  PROFILE_RELEASE[profile])
