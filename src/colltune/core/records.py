"""What a measurement, a fresh-launch comparison and a decision produce: the records the
kernel, the store, the tuner and the writers pass between them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config


@dataclass
class PointResult:
    cid: int
    size: int
    status: str  # ok | invalid | rejected | timeout | crashed | skipped
    n: int = 0
    median: float | None = None
    ci_lo: float | None = None
    ci_hi: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    samples: list[float] = field(default_factory=list)
    message: str = ""
    pvars: dict[str, int] = field(default_factory=dict)  # counters that grew (rank 0)
    # every timing mode's series by objective: {"isolated": {"completion": [...], ...}, ...};
    # `samples` is the objective's series of the first mode measured
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    objective: str = "completion"
    batch: int = 1  # calls per timed stretch in isolated mode (a call under 100 timer steps)
    loop: int = 0  # calls per free-running stretch of the "loop" series (0: none measured)
    start: int = 0  # calls timed from the first on in the "start" series (0: none measured)
    spent: float = 0.0  # the point's whole time in the kernel (simulated under SMPI)
    # under an arrival pattern (Repetitions.arrival): each repetition's replayed spread,
    # the latest entry after the barrier minus the earliest (s)
    arrival_spread: list[float] = field(default_factory=list)
    # samples pooled from several launches (tune online's runs of one command): each
    # launch's label and how many of `samples`, in order ([]: one launch)
    strata: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    size: int
    default_median: float
    tuned_median: float
    p_faster: float
    p_slower: float
    rounds_won: int
    rounds: int
    verdict: str  # faster | same | slower
    launch_speedup: float  # default / tuned, geometric mean over launch pairs: what is judged
    # per timing mode: {"verdict": ..., "launch_speedup": ..., "p_faster": ..., "p_slower": ...}
    # and per mode where the sizes sharing the choice were judged together (pooled_mode)
    modes: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        """Ratio of the pooled medians (descriptive; the verdict uses launch_speedup)."""
        return self.default_median / self.tuned_median if self.tuned_median else 0.0

    @property
    def pooled(self) -> bool:
        """Whether the sizes sharing its choice were judged with it (tuner/sequential.pooled)."""
        return any(POOLED in m for m in self.modes)


POOLED = " with "  # "isolated with 5 sizes": a mode's verdict over a rule's sizes together


def pooled_mode(mode: str, sizes: int) -> str:
    """The key of a mode's verdict over the `sizes` sizes of one rule judged together."""
    return f"{mode}{POOLED}{sizes} sizes"


@dataclass
class Decision:
    """What to run at one measured size, and the evidence for it."""

    size: int  # per-rank block in bytes (-1: one decision for every size)
    lookup_size: int  # what the family's rules compare (Backend.rule_size)
    chosen: Config
    best: Config | None
    best_median: float | None
    default_median: float | None
    p_value: float | None
    significant: bool
    n_best: int = 0
    n_default: int = 0
    reason: str = ""
    # fresh-launch evidence (tuner.confirm); None: not confirmed (yet)
    confirmations: list[Verdict] = field(default_factory=list)
    # 95% bootstrap CIs of the two medians (seconds), the rest of the evidence
    best_ci: tuple[float, float] | None = None
    default_ci: tuple[float, float] | None = None
    predicted: bool = False  # from a cost model, not measured at this communicator size
    simulated: bool = False  # deterministic simulated time (SMPI): no test, no fresh launches
    warning: str = ""  # a speed-up too large to trust, and its likely cause (tuner.artifacts)
    # why the family's file cannot carry the choice (nothing was compared; default kept)
    unexpressed: str = ""
    # what the choice was judged by: "median" (a typical call), or "mean" where the default
    # stalls significantly more often than the choice (every stall is paid: tuner/decide.py);
    # fresh launch pairs judge it by the same statistic
    statistic: str = "median"
    # the default stalled here in the sweep and another configuration less often: fresh
    # launch pairs get twice the budget (their launches are one stall from another level)
    default_stalls: bool = False

    @property
    def speedup(self) -> float | None:
        if self.best_median and self.default_median and self.chosen != DEFAULT:
            return self.default_median / self.best_median
        return 1.0 if self.default_median else None

    @property
    def verdict(self) -> str:
        """One word for tables, true to its numbers: tuned (confirmed faster in fresh
        launches), slower (fresh launches showed the candidate slower: default kept), not
        significant (fresh launches could not tell them apart at this noise: default kept),
        kept (no significant win in the sweep: nothing tried in fresh launches), default
        (the default was fastest), tuned? (not confirmed), unexpressed (the output cannot
        carry the win)."""
        if self.predicted:
            return "predicted"
        if self.chosen != DEFAULT:
            return "tuned" if self.confirmations or self.simulated else "tuned?"
        if self.unexpressed:
            return "unexpressed"
        if self.confirmations:
            slower = any(v.verdict == "slower" or any(m.get("verdict") == "slower"
                                                      for m in v.modes.values())
                         for v in self.confirmations)
            return "slower" if slower else "not significant"
        return "default" if self.best in (None, DEFAULT) else "kept"

    def as_json(self, catalog: Catalog, coll: str) -> dict[str, object]:
        def cfg(c: Config) -> dict[str, object]:
            # every parameter the catalog declares, by name (0: the library's value)
            return {"algorithm": c.algorithm,
                    **{p.name: c.get(p.name) for p in catalog.declared()},
                    "params": dict(c.params), "key": c.key,
                    "name": catalog.algorithm_name(coll, c.algorithm)}

        d = asdict(self)
        d["chosen"] = cfg(self.chosen)
        d["best"] = cfg(self.best) if self.best else None
        d["speedup"] = self.speedup
        d["verdict"] = self.verdict
        d["confirmations"] = [{**asdict(v), "speedup": v.speedup} for v in self.confirmations]
        return d


def json_ready(x: object) -> object:
    """`x` with every NaN or infinity as null: JSON has neither (a cell of one launch pair
    has no interval), and colltune's own readers refuse them."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    return x
