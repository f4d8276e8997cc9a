"""Open MPI's MCA parameter file (openmpi-mca-params.conf syntax: `name = value` lines and
`#` comments), as tune runtime writes it and reads it back. Open MPI 5 moved binding into
PRRTE, which reads its own file: those values travel as `#prte: name = value` lines, a
comment to Open MPI, installed by tune export into prte-mca-params.conf."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from colltune.rules.safe import SAFE_NAME, SAFE_VALUE, check_name, check_value, comment

HEAD = "# Open MPI runtime parameters written by colltune"
# the value is stripped after the match: `(.*?)\s*$` backtracks over every run of blanks
# inside a value (quadratic: 20,000 blanks took 3 s)
_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$")
_PRTE = re.compile(r"^#\s*prte:\s*(.*)$")


class McaParamsError(ValueError):
    """A parameter file Open MPI would misread, or colltune would not install."""


@dataclass
class McaParams:
    params: dict[str, str] = field(default_factory=dict)  # Open MPI's own (OMPI_MCA_)
    prte: dict[str, str] = field(default_factory=dict)  # PRRTE's (PRTE_MCA_, Open MPI 5)
    comments: list[str] = field(default_factory=list)


def render(p: McaParams, where: str = "an MCA parameter file") -> str:
    lines = [HEAD] + [f"# {comment(c)}" for c in p.comments]
    lines += [f"{check_name(k, where)} = {check_value(k, v, where)}" for k, v in p.params.items()]
    lines += [f"#prte: {check_name(k, where)} = {check_value(k, v, where)}"
              for k, v in p.prte.items()]
    return "\n".join(lines) + "\n"


def claims(text: str) -> bool:
    return text.startswith(HEAD)


def parse(text: str) -> McaParams:
    """Every setting of the file; a line Open MPI would not read as `name = value`, or a
    value colltune would not write, is a McaParamsError naming the line."""
    out = McaParams()
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        prte = _PRTE.match(line)
        if line.startswith("#") and not prte:
            if no > 1:
                out.comments.append(line[1:].strip())
            continue
        m = _LINE.match(prte.group(1) if prte else line)
        if not m:
            raise McaParamsError(f"line {no}: not `name = value`: {line[:80]!r}")
        name, value = m[1], m[2].strip()
        if not SAFE_NAME.fullmatch(name) or not SAFE_VALUE.fullmatch(value):
            raise McaParamsError(f"line {no}: {name[:60]} = {value[:60]!r} holds characters "
                                 "colltune does not install")
        target = out.prte if prte else out.params
        if name in target:
            raise McaParamsError(f"line {no}: {name} set twice (Open MPI keeps the last)")
        target[name] = value
    return out
