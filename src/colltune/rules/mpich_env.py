"""MPICH environment profile: writer and reader.

A shell fragment (`source` it, or let a module file set the same variables) that turns the
device collectives off for the tuned collectives, so MPICH's MPIR selection decides there,
and points at the tuning file.
A collective whose tuned choice is one algorithm at every size and comm size also gets its
`MPIR_CVAR_<COLL>_INTRA_ALGORITHM`, and the radix or chunk size tuned for it: then the
profile alone says it, and MPICH checks that algorithm's conditions on each call (falling
back to its own choice where they fail). A forced algorithm reads those variables, not the
tuning file's leaf."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from colltune.rules.mpich_names import JSON_VAR, KNOBS, PARAMS, algorithm_var, device_var
from colltune.rules.safe import ALLOWED, SAFE_VALUE, comment
from colltune.rules.shell_lines import setting_lines


class EnvProfileError(ValueError):
    pass


# the variables of the searched leaf parameters (radix, chunk size) -> their collective
KNOB_VARS = {var: cont.split("_")[1].lower() for cont, ps in PARAMS.items() for key, var in ps
             if key in KNOBS}


@dataclass
class EnvProfile:
    collectives: list[str] = field(default_factory=list)  # tuned: device path off
    tuning_file: Path | None = None
    algorithms: dict[str, str] = field(default_factory=dict)  # collective -> name
    comments: list[str] = field(default_factory=list)
    knobs: dict[str, str] = field(default_factory=dict)  # KNOB_VARS variable -> value

    def variables(self) -> dict[str, str]:
        out = {device_var(c): "0" for c in sorted(self.collectives)}
        if self.tuning_file is not None:
            out[JSON_VAR] = str(self.tuning_file)
        for coll, name in sorted(self.algorithms.items()):
            out[algorithm_var(coll)] = name
        out.update(sorted(self.knobs.items()))
        return out


def render(p: EnvProfile) -> str:
    lines = [f"# {comment(c)}" for c in p.comments]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in p.variables().items()]
    return "\n".join(lines) + "\n"


_LINE = re.compile(r"^export (MPIR_CVAR_\w+)=(.*)$")
_ALG = re.compile(r"^MPIR_CVAR_(\w+)_INTRA_ALGORITHM$")
_DEV = re.compile(r"^MPIR_CVAR_(\w+)_DEVICE_COLLECTIVE$")


def parse(text: str) -> EnvProfile:
    p = EnvProfile()
    seen: dict[str, str] = {}
    for n, line in setting_lines(text, p.comments):
        m = _LINE.match(line)
        if not m:
            raise EnvProfileError(f"line {n}: not `export MPIR_CVAR_...=value`: {line!r}")
        try:
            words = shlex.split(m.group(2))
        except ValueError as e:  # an unclosed quote
            raise EnvProfileError(f"line {n}: {e}: {line!r}") from None
        if len(words) != 1:
            raise EnvProfileError(f"line {n}: one value expected: {line!r}")
        if not SAFE_VALUE.fullmatch(words[0]):
            raise EnvProfileError(f"line {n}: {m.group(1)}={words[0]!r} has characters no "
                                  f"MPICH variable takes (allowed: {ALLOWED}); exported "
                                  "profiles and modules run in every user's session")
        seen[m.group(1)] = words[0]
    for k, v in seen.items():
        if k == JSON_VAR:
            p.tuning_file = Path(v)
        elif (a := _ALG.match(k)):
            p.algorithms[a.group(1).lower()] = v
        elif (d := _DEV.match(k)) and v == "0":
            p.collectives.append(d.group(1).lower())
        elif k in KNOB_VARS and v.isdigit():
            p.knobs[k] = v
        else:
            raise EnvProfileError(f"unexpected setting {k}={v}")
    for k in p.knobs:
        if KNOB_VARS[k] not in p.algorithms:
            raise EnvProfileError(f"{k} without {algorithm_var(KNOB_VARS[k])}: only a forced "
                                  "algorithm reads it")
    off = set(p.collectives)
    for c in p.algorithms:
        if c not in off:
            raise EnvProfileError(f"{algorithm_var(c)} without {device_var(c)}=0: the device "
                                  "collective would route around it")
    return p
