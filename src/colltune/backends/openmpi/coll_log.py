"""Open MPI's own log of the collective components a communicator selected
(`coll_base_verbose`): whether a component's priority put it in MPI_COMM_WORLD's stack, or
why it disqualified itself (coll/han: "comm has only local processes" on one node)."""

from __future__ import annotations

import re

from colltune.core.runtime import Knob

# a level at which coll/base logs each communicator's selection and each component's reason
LOG_ENV = {"OMPI_MCA_coll_base_verbose": "10"}
COMPONENT = re.compile(r"coll_(\w+)_priority")
_TAG = re.compile(r"^\[([^\]]+)\] ")
_NEW = re.compile(r"coll:base:comm_select: new communicator: (\S+)")
_SELECT = re.compile(r"coll:base:comm_select: selecting\s+(\w+), priority\s+-?\d+, "
                     r"(Enabled|Disabled)")
_QUIT = re.compile(r"coll:(\w+):\w+ \(\d+/MPI_COMM_WORLD\): (.*disqualifying myself.*)")


def world(log: str) -> tuple[dict[str, set[str]], dict[str, str]]:
    """Per component, the states its selection on MPI_COMM_WORLD logged over the ranks
    (Enabled, Disabled), and the reason each component gave for disqualifying itself."""
    current: dict[str, str] = {}  # a process's tag -> the communicator it is selecting for
    states: dict[str, set[str]] = {}
    why: dict[str, str] = {}
    for line in log.splitlines():
        tag = _TAG.match(line)
        if tag is None:
            continue
        body = line[tag.end():]
        if (m := _NEW.match(body)):
            current[tag.group(1)] = m.group(1)
        elif current.get(tag.group(1)) == "MPI_COMM_WORLD":
            if (m := _SELECT.match(body)):
                states.setdefault(m.group(1), set()).add(m.group(2))
            elif (m := _QUIT.match(body)):
                why[m.group(1)] = m.group(2)[:120]
    return states, why


def logged(knob: Knob, value: str, log: str) -> tuple[bool, str]:
    """Whether MPI_COMM_WORLD's selection, in every rank, has the component of a
    `coll_X_priority` knob enabled (a priority above 0) or not (0), as its log says."""
    m = COMPONENT.fullmatch(knob.name)
    if m is None:
        return False, f"{knob.name} names no collective component"
    comp = m.group(1)
    states, why = world(log)
    if not states:
        return False, ("Open MPI logged no selection for MPI_COMM_WORLD (is "
                       "coll_base_verbose set lower on the command line?)")
    got = states.get(comp, set())
    if int(value) <= 0:
        if got <= {"Disabled"}:
            return True, f"coll/{comp} out of MPI_COMM_WORLD's stack (Open MPI's log)"
        return False, f"coll/{comp} still enabled on MPI_COMM_WORLD (Open MPI's log)"
    if got == {"Enabled"}:
        return True, f"coll/{comp} in MPI_COMM_WORLD's stack (Open MPI's log)"
    reason = why.get(comp, "it was not enabled in every rank")
    return False, f"coll/{comp} is not in MPI_COMM_WORLD's stack: {reason} (Open MPI's log)"
