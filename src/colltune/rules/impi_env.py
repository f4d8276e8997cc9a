"""Intel MPI's environment profiles: `export I_MPI_TUNING=file.json` (the tuning file), or
the same rules as `I_MPI_ADJUST_<OP>="<id>:<l>-<m>@<p>-<q>;..."` for users who prefer
variables. Never both in one profile: the variables override the file, and with a binary
tuning file any I_MPI_ADJUST_* crashes Intel MPI 2021.18 at start-up (observed).

Observed rules of the variables: rules ascend, only each range's upper bound counts, the
first rule whose bound is at or above the size wins, the last one also covers larger sizes,
one `@p-q` range holds one message-size rule (a second overwrote the first), and a malformed
value (a comma for a semicolon) is ignored silently, so this writer is the only way in."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from colltune.rules.impi_tuning import ImpiFormatError, Rules, Tuning, refuse_library
from colltune.rules.safe import ALLOWED, SAFE_VALUE, comment
from colltune.rules.shell_lines import setting_lines

TUNING_VAR = "I_MPI_TUNING"
BIN_VARS = ("I_MPI_TUNING_BIN", "I_MPI_TUNING_BIN_DUMP")
_ADJUST = re.compile(r"^I_MPI_ADJUST_([A-Z_]+)$")
_LINE = re.compile(r"^export (I_MPI_\w+)=(.*)$")
_RULE = re.compile(r"^(\d{1,18}):(\d{1,18})-(\d{1,18})(?:@(\d{1,18})-(\d{1,18}))?$")
TOP = 2**31 - 1  # the largest bound a rule needs: every message size an int count holds


@dataclass
class ImpiProfile:
    comments: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)

    def adjusts(self) -> dict[str, str]:
        return {k: v for k, v in self.settings.items() if _ADJUST.match(k)}


def adjust_value(per_np: dict[int | None, Rules]) -> str:
    """One collective's rules as an I_MPI_ADJUST value, `<id>:<l>-<m>;...`. Only a tuning
    of one comm-size key fits: a `@p-q` process range holds one message-size rule (Intel
    MPI 2021.18: a second rule of the same range overwrote the first), so the rules are
    written for every process count, as that key serves every smaller job in the file."""
    if len(per_np) != 1:
        raise ImpiFormatError("I_MPI_ADJUST_* holds one message-size rule per process "
                              f"range; {len(per_np)} comm sizes need the tuning file")
    (rules,) = per_np.values()
    return ";".join(f"{preset}:{low}-{TOP if high is None else high}"
                    for low, high, preset in rules.ranges())


def from_tuning(t: Tuning) -> dict[str, str]:
    refuse_library(t, "I_MPI_ADJUST_*")
    return {f"I_MPI_ADJUST_{coll.upper()}": adjust_value(per_np) for coll, per_np in
            sorted(t.items())}


def to_tuning(adjusts: dict[str, str]) -> Tuning:
    """The rules a profile's I_MPI_ADJUST_* variables hold, as the tuning file would hold
    them for every comm size (the catch-all key): what Intel MPI runs at each size. Rules
    with process ranges are refused: colltune writes none (a file from elsewhere)."""
    check(adjusts)
    t: Tuning = {}
    for k, v in adjusts.items():
        m = _ADJUST.match(k)
        assert m is not None  # check() let only I_MPI_ADJUST_* through
        limits: list[tuple[int | None, int]] = []
        for rule in v.split(";"):
            r = _RULE.match(rule)
            assert r is not None
            if r.group(4) is not None:
                raise ImpiFormatError(f"{k}: '{rule}' names processes {r.group(4)}-"
                                      f"{r.group(5)}: colltune reads rules for every process "
                                      "count only")
            high = int(r.group(3))
            limits.append((None if high >= TOP else high, int(r.group(1))))
        t[m.group(1).lower()] = {None: Rules(limits)}
    return t


def render(p: ImpiProfile) -> str:
    check(p.settings)
    lines = [f"# {comment(c)}" for c in p.comments]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in p.settings.items()]
    return "\n".join(lines) + "\n"


def check(settings: dict[str, str]) -> None:
    """Refuse what Intel MPI would not read as meant: a tuning file mixed with I_MPI_ADJUST_*
    variables, and a rule list the library would ignore silently."""
    tuning = [k for k in settings if k == TUNING_VAR or k in BIN_VARS]
    adjusts = [k for k in settings if _ADJUST.match(k)]
    if tuning and adjusts:
        raise ImpiFormatError(f"{', '.join(tuning)} with {', '.join(adjusts)}: one profile "
                          "selects through a tuning file or through variables, never both "
                          "(the variables override the file; with a binary file Intel MPI "
                          "crashes at start-up)")
    for k in adjusts:
        last: tuple[int, int] | None = None
        ranges: set[tuple[str | None, str | None]] = set()
        for rule in settings[k].split(";"):
            m = _RULE.match(rule)
            if not m:
                raise ImpiFormatError(f"{k}: '{rule}' is not <id>:<l>-<m>[@<p>-<q>] (Intel "
                                      "MPI ignores a malformed value without a word)")
            procs = (m.group(4), m.group(5))
            if procs[0] is not None and procs in ranges:
                raise ImpiFormatError(f"{k}: two rules for processes {procs[0]}-{procs[1]}: "
                                      "Intel MPI keeps only the last one")
            ranges.add(procs)
            key = (int(m.group(4) or 0), int(m.group(3)))
            if last is not None and key <= last:
                raise ImpiFormatError(f"{k}: rules must ascend (the first whose bound is at "
                                      "or above the size wins)")
            last = key


def parse(text: str) -> ImpiProfile:
    p = ImpiProfile()
    for n, line in setting_lines(text, p.comments):
        m = _LINE.match(line)
        if not m:
            raise ImpiFormatError(f"line {n}: not `export I_MPI_...=value`: {line!r}")
        try:
            words = shlex.split(m.group(2))
        except ValueError as e:
            raise ImpiFormatError(f"line {n}: {e}: {line!r}") from None
        if len(words) != 1 or not SAFE_VALUE.fullmatch(words[0].replace(";", ",")):
            raise ImpiFormatError(f"line {n}: {m.group(1)} takes one value of {ALLOWED} and ; "
                              "(profiles run in every user's session)")
        if m.group(1) not in (TUNING_VAR, *BIN_VARS) and not _ADJUST.match(m.group(1)):
            raise ImpiFormatError(f"line {n}: {m.group(1)} is not a setting colltune reads")
        p.settings[m.group(1)] = words[0]
    check(p.settings)
    return p
