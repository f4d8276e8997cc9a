"""What a tune held of its allocation, in node-hours, and where they went: every launch is
charged to the stage it ran in (core/clock.py), with its start-up and the time its largest
message sizes took, so a site knows what a tune costs before it asks for the nodes.

On real nodes the allocation is held for the tune's whole wall time, on every node its
launches used. A simulation (SMPI) holds nothing here: what real nodes would have held is
each launch's simulated time plus a launch's start-up on real nodes, which a simulation
does not have and `LaunchCost` states (measured on real launches, overridable)."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from colltune.core import clock
from colltune.errors import ColltuneError

LARGEST = 2  # the largest sizes of a collective's plan whose share is said apart


@dataclass(frozen=True)
class LaunchCost:
    """Seconds from the launcher's start to the first rank through MPI_Init on real nodes:
    `base` + `per_node` x nodes. `base` as Open MPI 4.1's mpirun took on one node here
    (docs/benchmarks.md, "What a tune holds of its allocation": 0.19-0.37 s); `per_node` an
    assumption (namespace nodes on one machine cannot show it); a site says its own
    (--launch-cost)."""

    base: float = 0.35
    per_node: float = 0.05

    def seconds(self, nodes: int) -> float:
        return self.base + self.per_node * max(nodes, 1)

    def text(self) -> str:
        return f"{self.base:g}+{self.per_node:g}/node"

    @staticmethod
    def parse(text: str) -> LaunchCost:
        """'BASE' or 'BASE+PER_NODE/node' in seconds, e.g. '2' or '1.5+0.1/node'."""
        words = text.replace(" ", "").removesuffix("/node").split("+")
        try:
            values = [float(w) for w in words]
        except ValueError:
            values = []
        if not 1 <= len(values) <= 2 or any(v < 0 or v != v or v > 3600 for v in values):
            raise ColltuneError(f"--launch-cost {text!r}: not seconds per launch",
                                "say BASE or BASE+PER_NODE/node in seconds, e.g. 1.5+0.1/node")
        return LaunchCost(values[0], values[1] if len(values) > 1 else 0.0)


@dataclass
class Launch:
    """One launch as the account sees it."""

    stage: str  # the clock's stage it ran in ("" outside any: the rest)
    collective: str
    nodes: int
    ranks: int
    wall: float  # seconds here, from the launcher's start to its end
    startup: float  # seconds here until the kernel's first line (the whole launch if none)
    elapsed: float | None  # the kernel's own clock from its first line on (simulated: SMPI)
    spent: dict[int, float] = field(default_factory=dict)  # size -> the points' time there
    points: dict[int, int] = field(default_factory=dict)  # size -> points measured there


@dataclass
class Account:
    """Every launch of a tune, then the allocation they add up to (`summary`)."""

    launches: list[Launch] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def add(self, launch: Launch) -> None:
        self.launches.append(launch)

    def summary(self, simulated: bool, cost: LaunchCost) -> dict[str, object]:
        """Node-seconds in all and by stage, with the share of start-up and of the largest
        sizes, and how they were counted."""
        nodes = max((la.nodes for la in self.launches), default=1)
        if simulated:
            held = [cost.seconds(la.nodes) + (la.elapsed or 0.0) for la in self.launches]
            total = nodes * sum(held)
            startup = nodes * sum(cost.seconds(la.nodes) for la in self.launches)
            by_stage: dict[str, float] = {}
            for la, secs in zip(self.launches, held, strict=True):
                name = la.stage or "the rest"
                by_stage[name] = by_stage.get(name, 0.0) + nodes * secs
        else:  # held from the start until now, split as the tune's clock split it
            total = nodes * (time.monotonic() - self.started)
            startup = nodes * sum(la.startup for la in self.launches)
            by_stage = {k: nodes * v for k, v in clock.so_far().items()}
            by_stage["the rest"] = max(total - sum(by_stage.values()), 0.0)
        largest = nodes * sum(t for la in self.launches for s, t in la.spent.items()
                              if s in self._largest(la.collective))
        counts: dict[str, int] = {}
        for la in self.launches:
            counts[la.stage or "the rest"] = counts.get(la.stage or "the rest", 0) + 1
        return {
            "nodes": nodes,
            "node_hours": total / 3600.0,
            "node_seconds": round(total, 3),
            "stages": {k: round(v, 3) for k, v in by_stage.items() if v > 0},
            "startup": round(startup, 3),
            "largest_sizes": round(largest, 3),
            "largest": sorted({s for la in self.launches for s in self._largest(la.collective)}),
            "launches": len(self.launches),
            "launches_by_stage": counts,
            # what a later plan prices a launch and a point with (tuner/forecast.py)
            "startup_each": round(startup / nodes / len(self.launches), 4)
            if self.launches else 0.0,
            "per_point": self._per_point(),
            "counted": ("simulated time of each launch, plus start-up on real nodes "
                        f"{cost.text()} s per launch" if simulated
                        else "the wall time on every node the launches used"),
        }

    def _per_point(self) -> dict[str, float]:
        """Seconds a sweep's point of a collective took at each size (its launches' kernel
        time there over the points measured), keyed 'collective/size'."""
        spent: dict[str, float] = {}
        count: dict[str, int] = {}
        for la in self.launches:
            if la.stage != clock.SWEEP:
                continue
            for size, t in la.spent.items():
                key = f"{la.collective}/{size}"
                spent[key] = spent.get(key, 0.0) + t
                count[key] = count.get(key, 0) + la.points.get(size, 1)
        return {k: round(spent[k] / count[k], 6) for k in sorted(spent)}

    def _largest(self, collective: str) -> set[int]:
        sizes = sorted({s for la in self.launches if la.collective == collective
                        for s in la.spent})
        return set(sizes[-LARGEST:])


_open: ContextVar[Account | None] = ContextVar("colltune_account", default=None)


@contextmanager
def charging() -> Iterator[Account]:
    """Every launch inside is charged to the account yielded."""
    acct = Account()
    token = _open.set(acct)
    try:
        yield acct
    finally:
        _open.reset(token)


def charge(launch: Launch) -> None:
    """Charge a launch to the tune being accounted (none: nothing), in the current stage."""
    acct = _open.get()
    if acct is not None:
        launch.stage = launch.stage or clock.current() or ""
        acct.add(launch)


def stored_summary(text: str) -> dict[str, object] | None:
    """A summary as a store holds it, checked field by field (a store may be another
    user's): numbers that are finite and not negative, stage names and the counting said as
    short text; None where it is not what `Account.summary` writes."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None

    def number(x: object) -> bool:
        return type(x) in (int, float) and math.isfinite(float(x)) and float(x) >= 0  # type: ignore[arg-type]

    stages = doc.get("stages")
    largest = doc.get("largest")
    if not (all(number(doc.get(k)) for k in ("nodes", "node_hours", "node_seconds",
                                             "startup", "largest_sizes", "launches"))
            and isinstance(stages, dict) and len(stages) <= 16
            and all(isinstance(k, str) and len(k) <= 40 and number(v)
                    for k, v in stages.items())
            and isinstance(largest, list) and len(largest) <= 64
            and all(type(x) is int and x >= 0 for x in largest)
            and isinstance(doc.get("counted"), str) and len(doc["counted"]) <= 200):
        return None
    by_stage = doc.get("launches_by_stage", {})
    per_point = doc.get("per_point", {})
    if not (isinstance(by_stage, dict) and len(by_stage) <= 16
            and all(isinstance(k, str) and len(k) <= 40 and type(v) is int and v >= 0
                    for k, v in by_stage.items())
            and isinstance(per_point, dict) and len(per_point) <= 256
            and all(isinstance(k, str) and re.fullmatch(r"[a-z_]{1,24}/\d{1,12}", k)
                    and number(v) for k, v in per_point.items())
            and number(doc.get("startup_each", 0.0))):
        return None
    kept = {k: doc[k] for k in ("nodes", "node_hours", "node_seconds", "stages", "startup",
                                "largest_sizes", "largest", "launches", "counted")}
    return {**kept, "launches_by_stage": by_stage, "per_point": per_point,
            "startup_each": doc.get("startup_each", 0.0)}


def hours(seconds: float) -> str:
    """'0.42 node-hours' or, under an hour, '12.3 node-minutes'."""
    return (f"{seconds / 3600:.2f} node-hours" if seconds >= 3600
            else f"{seconds / 60:.1f} node-minutes")


def describe(summary: dict[str, object]) -> str:
    """One line: the total and its split, as the CLI prints it after a tune."""
    total = float(str(summary["node_seconds"]))
    stages = summary.get("stages")
    parts = [f"{k} {100 * float(v) / total:.0f}%" for k, v in
             (stages.items() if isinstance(stages, dict) else []) if total > 0]
    share = (lambda k: f"{100 * float(str(summary[k])) / total:.0f}%") if total > 0 \
        else (lambda k: "0%")
    return (f"{hours(total)} on {summary['nodes']} node(s), {summary['launches']} launches ("
            + ", ".join(parts) + f"; start-up {share('startup')}, the largest two sizes "
            f"{share('largest_sizes')}); counted from {summary['counted']}")
