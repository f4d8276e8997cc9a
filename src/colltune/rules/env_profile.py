"""A runtime-parameter profile for families set through environment variables (MPICH,
MVAPICH2): `export NAME=VALUE` lines a user sources or a module sets, as tune runtime
writes it and reads it back. Names and values are from the safe character set only, so
the same line means the same in bash, Tcl and Lua."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from colltune.rules.safe import SAFE_VALUE, check_name, check_value, comment

HEAD = "# {family} runtime parameters written by colltune"  # the family's name
_LINE = re.compile(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(\S*)$")


class EnvProfileError(ValueError):
    """A profile line colltune did not write, or a value it would not install."""


@dataclass
class EnvProfile:
    variables: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)


def render(p: EnvProfile, family: str, where: str = "a profile") -> str:
    lines = [HEAD.format(family=comment(family))] + [f"# {comment(c)}" for c in p.comments]
    lines += [f"export {check_name(k, where)}={check_value(k, v, where)}"
              for k, v in p.variables.items()]
    return "\n".join(lines) + "\n"


def claims(text: str, family: str) -> bool:
    return text.startswith(HEAD.format(family=family) + "\n")


def parse(text: str) -> EnvProfile:
    out = EnvProfile()
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if no > 1:
                out.comments.append(line[1:].strip())
            continue
        m = _LINE.match(line)
        if not m or not SAFE_VALUE.fullmatch(m.group(2)):
            raise EnvProfileError(f"line {no}: not `export NAME=VALUE` with a plain value: "
                                  f"{line[:80]!r}")
        if m.group(1) in out.variables:
            raise EnvProfileError(f"line {no}: {m.group(1)} set twice")
        out.variables[m.group(1)] = m.group(2)
    return out
