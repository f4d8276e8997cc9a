"""tune online's summary: the run's result, what exploring cost it (the candidates' calls
by their medians, with an interval; the layer's own work; with --pairs, the wall time
against the application's own runs), what the file saves, as JSON."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy
from scipy import stats

from colltune.apploop.online.evidence import OnlineGroup
from colltune.core.config import DEFAULT
from colltune.outfile import write_atomic


@dataclass
class MeasuredCost:
    """The wall times of the application's runs without the layer and under it, in
    pairs (each default run right before its online run: a drift of the machine between
    launches moves both)."""

    default_s: list[float] = field(default_factory=list)
    online_s: list[float] = field(default_factory=list)

    def ratio(self) -> float:
        """Online over default, the geometric mean of the pairs' ratios."""
        logs = self._logs()
        return math.exp(statistics.fmean(logs)) if logs else math.nan

    def interval(self) -> tuple[float, float] | None:
        """The ratio's 95% interval (Student's t over the pairs' log ratios; scipy); None
        with fewer than two pairs, where nothing bounds it."""
        logs = self._logs()
        if len(logs) < 2:
            return None
        spread = statistics.stdev(logs) / math.sqrt(len(logs))
        if spread == 0:
            return (self.ratio(), self.ratio())
        lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=statistics.fmean(logs),
                                  scale=spread)
        return (math.exp(lo), math.exp(hi))

    def as_json(self) -> dict[str, object]:
        iv = self.interval()
        return {"pairs": len(self.online_s), "default_s": self.default_s,
                "online_s": self.online_s, "ratio": self.ratio(),
                "interval": None if iv is None else list(iv)}

    def _logs(self) -> list[float]:
        return [math.log(o / d) for d, o in zip(self.default_s, self.online_s, strict=True)
                if d > 0 and o > 0]


@dataclass
class OnlineResult:
    cmd: list[str]
    out: Path
    wall_s: float
    groups: list[OnlineGroup] = field(default_factory=list)
    agreed: bool = True  # every rank ran the same configuration for the same call
    stdout: str = ""
    notes: list[str] = field(default_factory=list)
    layer_s: float = 0.0  # the most a rank spent in the layer's own work (layer_seconds)
    measured: MeasuredCost | None = None  # --pairs: the wall time against default runs


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def exploration_cost(g: OnlineGroup) -> float:
    """What the candidates' calls cost the run against the library's choice, by the calls'
    own medians (s; negative: exploring saved time): an estimate from the calls, the
    measured cost is the runs' wall time (bench/online_bench.py)."""
    if 0 not in g.times:
        return 0.0
    base = _median(g.times[0])
    return sum(len(xs) * (_median(xs) - base) for k, xs in g.times.items() if k)


def exploration_interval(groups: list[OnlineGroup], seed: int = 0) -> tuple[float, float]:
    """A 95% interval of the candidates' cost over all groups (exploration_cost summed),
    by resampling each configuration's calls (scipy's bootstrap, percentile); a candidate
    with one call is that call (there is nothing to resample)."""
    gs = [g for g in groups if len(g.times.get(0, ())) >= 2 and len(g.times) > 1]
    parts = [(g, k) for g in gs for k in g.times if k == 0 or len(g.times[k]) >= 2]
    if not gs:
        return (0.0, 0.0)

    def cost(*xs: Any, axis: int = -1) -> Any:  # every resample at once, along `axis`
        med = {(id(g), k): numpy.median(x, axis=axis)
               for (g, k), x in zip(parts, xs, strict=True)}
        return sum(len(ys) * (med.get((id(g), k), float(numpy.median(ys)))
                              - med[(id(g), 0)])
                   for g in gs for k, ys in g.times.items() if k)

    res = stats.bootstrap(tuple(numpy.asarray(g.times[k]) for g, k in parts), cost,
                          vectorized=True, paired=False, n_resamples=999,
                          method="percentile", random_state=seed)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def expected_saving(g: OnlineGroup) -> float:
    """What the file's choice saves a run with as many calls, by the medians (s)."""
    d = g.decision
    k = None if d is None or d.chosen == DEFAULT else g.ident(d.chosen)
    if k is None or 0 not in g.times:
        return 0.0
    return g.calls * (_median(g.times[0]) - _median(g.times[k]))


def as_json(res: OnlineResult) -> dict[str, object]:
    return {"command": res.cmd, "out": str(res.out), "wall_s": res.wall_s,
            "agreed": res.agreed, "notes": res.notes, "layer_s": res.layer_s,
            "exploration_cost_s": sum(exploration_cost(g) for g in res.groups),
            "exploration_cost_interval_s": list(exploration_interval(res.groups)),
            "expected_saving_s": sum(expected_saving(g) for g in res.groups),
            "measured_cost": None if res.measured is None else res.measured.as_json(),
            "groups": [
                {"collective": g.collective, "comm_size": g.comm_size, "size": g.size,
                 "calls": g.calls, "explored": g.explored, "kept_in_run": g.kept,
                 "medians_s": {str(k): sorted(v)[len(v) // 2] for k, v in g.times.items()},
                 "calls_per_config": {str(k): len(v) for k, v in g.times.items()},
                 # the plan's ids above -> what each ran (a segment size beside its algorithm)
                 "configs": {str(k): g.config(k).key for k in g.times},
                 "dropped": g.dropped, "pruned": g.pruned, "wrong": g.wrong,
                 "halved": g.halved,
                 # calls earlier runs of the command gave a candidate: halving took up there
                 "prior_calls": {str(k): n for k, n in sorted(g.prior.items())},
                 "decision": None if g.decision is None else {
                     "algorithm": g.decision.chosen.algorithm,
                     "config": g.decision.chosen.key, "reason": g.decision.reason}}
                for g in res.groups]}


def write_summary(res: OnlineResult, path: Path) -> None:
    """--summary-json: whole or absent, never through a link or onto a device (the CLI
    checked the path before the run, as --out's); `-` is standard output."""
    write_atomic(path, json.dumps(as_json(res), indent=1) + "\n")
