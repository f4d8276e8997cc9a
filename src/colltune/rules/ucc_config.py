"""UCC's configuration file (UCC_CONFIG_FILE), read as UCC 1.8 reads it: the settings
before any section, then sections whose settings apply to the teams their keys match."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from colltune.rules.ucc_tune import TEAM_MAX, UccTuneError, number

# UCC's configuration file (UCC_CONFIG_FILE; by default ucc.conf in $HOME, then in the
# installation's share/): NAME=VALUE lines that apply to every team, then sections
# `[key=value ...]` whose lines apply to a team only where every key matches it (UCC 1.8:
# src/utils/ucc_parser.c): vendor, model, team_size, ppn, sock, nnodes (a number or a-b).
# Where two sections match a team, which one UCC takes is not said (it walks a hash table);
# where the job's environment sets a string too, the environment's wins (seen here, UCC 1.8
# in Open MPI 5.0.10: tests/test_ucc_live.py)
SECTION_RANGES = ("team_size", "ppn", "sock", "nnodes")
SECTION_NAMES = ("vendor", "model")
_HEADER = re.compile(r"\[(.*)\]")


# the first line of a configuration file colltune writes (one without a section: UCC's
# own choice kept for every team)
CONFIG_HEADER = "UCC configuration file written by colltune"


def claims_config(text: str) -> bool:
    """Whether `text` looks like a UCC configuration file: colltune's, or a section header
    and UCC_ settings (its reader says what is wrong with it)."""
    if text.startswith(f"# {CONFIG_HEADER}"):
        return True
    # [ \t], not \s: \s would run over the newlines after every line start (a file of
    # blank lines read in quadratic time: tests/test_linear_readers.py)
    return bool(re.search(r"^[ \t]*\[[^\]\n]*\][ \t]*$", text, re.M)) and bool(
        re.search(r"^[ \t]*UCC_[A-Z0-9_]+=", text, re.M))
_SETTING = re.compile(r"(UCC_[A-Z0-9_]+)=(.*)")


@dataclass
class Section:
    """A section of a configuration file (`line` 0: the lines before any section)."""

    line: int
    header: str
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    settings: list[tuple[int, str, str]] = field(default_factory=list)

    def teams(self) -> tuple[int, int]:
        return self.ranges.get("team_size", (1, TEAM_MAX))

    def meets(self, other: Section) -> bool:
        """Whether a team could match both sections."""
        return all(self.names[k] == other.names[k] for k in SECTION_NAMES
                   if k in self.names and k in other.names) and all(
            a[0] <= b[1] and b[0] <= a[1] for k in SECTION_RANGES
            if (a := self.ranges.get(k)) and (b := other.ranges.get(k)))


def _section(no: int, header: str) -> Section:
    sec = Section(no, header)
    for part in header.split():
        key, _, value = part.partition("=")
        if key in SECTION_NAMES and value:
            sec.names[key] = value.lower()
        elif key in SECTION_RANGES and (m := re.fullmatch(r"(\d+)(?:-(\d+))?", value)):
            lo, hi = number(m.group(1)), number(m.group(2) or m.group(1))
            sec.ranges[key] = (lo, hi)
        else:
            raise UccTuneError(f"[{header}]", f"{part!r} is no vendor, model or "
                               f"{', '.join(SECTION_RANGES)} with a number or a range a-b "
                               "(UCC ignores such a section)")
    return sec


def config_sections(text: str) -> list[Section] | None:
    """The sections of a UCC configuration file, values unquoted as env_lines does; None:
    not one (no section, or a line that is no comment, UCC_ setting or section)."""
    out = [Section(0, "")]
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if m := _HEADER.fullmatch(line):
            out.append(_section(no, m.group(1)))
        elif m := _SETTING.fullmatch(line):
            value = m.group(2)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            out[-1].settings.append((no, m.group(1), value))
        else:
            return None
    return out if len(out) > 1 else None
