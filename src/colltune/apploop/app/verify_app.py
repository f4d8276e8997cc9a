"""`tune verify --app`: does the application itself run faster with the rules? It runs
alternately without and with them (A B, then B A, ...: linear drift cancels), the profiler
on both arms, the rules passed as the user would (the backend's launch settings for a file
of its family, through the launcher's own option). One application run is one sample;
runs of identical settings differ by up to 2.5x on this machine, so only pairs count, and
they are judged as the kernel's verify judges launch pairs (tuner/sequential.py): looks
after a first batch, more pairs while undecided within a budget, "same" only when the
interval lies inside the threshold, "not slower" when it lies below the threshold's
slowdown (the same bound for the question a gate asks), otherwise "inconclusive" with the
smallest slowdown the pairs could have seen.

A shared node (a login node, a partition of shared nodes) changes load under the pairs. A
run's foreign load is the CPU time the machine spent outside this command while it ran
(/proc/stat against the command's own children), in cores; a pair whose two runs saw
foreign load differing by more than half a core, or whose ratio lies far beyond the other
pairs' (a robust z-score over 5), is disturbed: it is run again while the budget allows,
and a verdict other than "same" that still rests on a disturbed pair is "inconclusive:
the machine was loaded"."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.apploop.profiling.profile import profiled_run
from colltune.backends import registry
from colltune.core.stats import median
from colltune.errors import ColltuneError, NotApplied
from colltune.tuner import sequential
from colltune.tuner.sequential import Batch, Cell, Design

ARMS = ("default", "tuned")
# what is compared: the application's own wall time (slowest rank, MPI_Init to
# MPI_Finalize), the time in blocking collectives (mean rank), the whole command (launch too)
MEASURES = {"wall": ("wall_s", "max"), "collectives": ("collective_s", "mean"),
            "command": ("run_s", None)}
PRIMARY = "wall"  # significantly slower here fails the verify


LOAD_CHANGE = 0.5  # cores of foreign load between a pair's two runs: disturbed
OUTLIER_Z = 5.0  # a pair's log ratio this many robust deviations from the median: disturbed


@dataclass(frozen=True)
class AppRequest:
    """What one `tune verify --app` compares and how long it may take."""

    cmd: list[str]
    rules: Path
    design: Design = Design(first=5)  # first: pairs before the first look
    backend_name: str | None = None
    prefix: str | None = None
    timeout: float | None = None  # seconds per run
    time_budget: float | None = None  # seconds; then undecided measures are inconclusive
    aa: bool = False  # both arms the library's default: what this node's noise lets it see
    # the first arm runs this file instead of the library's default (--baseline): two files
    # judged against each other (tune app --arrival both: replayed against together)
    baseline: Path | None = None


@dataclass
class MeasureVerdict:
    name: str
    default: list[float]  # per pair, seconds
    tuned: list[float]
    ratio: float  # tuned / default: geometric mean over pairs
    p_value: float | None  # of the direction the ratio leans
    verdict: str  # faster | same | slower | inconclusive
    interval: tuple[float, float] = (0.0, math.inf)  # of the ratio, at the last look
    could_see: float = math.inf  # smallest slowdown (ratio) found with 80% power
    reason: str = ""  # why inconclusive, where the machine says


@dataclass
class AppVerdict:
    command: list[str]
    rules: Path
    pairs: int
    design: Design
    aa: bool = False
    baseline: Path | None = None
    measures: dict[str, MeasureVerdict] = field(default_factory=dict)
    disturbed: int = 0  # pairs run again, or kept and named, because the load changed
    foreign_cores: list[float] = field(default_factory=list)  # per run, in order

    @property
    def failed(self) -> bool:
        return self.measures[PRIMARY].verdict == "slower"

    @property
    def inconclusive(self) -> bool:
        return self.measures[PRIMARY].verdict == "inconclusive"


def _figure(profile: dict[str, object], measure: str) -> float:
    key, stat = MEASURES[measure]
    v = profile[key]
    return float(v[stat] if stat else v)  # type: ignore[index, arg-type]


def _cpu() -> tuple[float, float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process's finished
    children, monotonic seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = 0.0
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / tick
    except (OSError, ValueError, IndexError):
        pass  # not Linux: no load is seen, nothing is called disturbed for it
    t = os.times()
    return busy, t.children_user + t.children_system, time.monotonic()


def foreign_load(before: tuple[float, float, float], after: tuple[float, float, float]
                 ) -> float:
    """Cores the machine spent on other work between two `_cpu()` readings."""
    wall = max(after[2] - before[2], 1e-9)
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall


def disturbed(logs: list[float], loads: list[tuple[float, float]]) -> list[bool]:
    """Which pairs a load change or an outlying ratio makes unusable (see the module)."""
    bad = [abs(a - b) > LOAD_CHANGE for a, b in loads]
    if len(logs) >= 4:
        mid = median(logs)
        mad = 1.4826 * median([abs(x - mid) for x in logs])
        if mad > 0:
            bad = [b or abs(x - mid) / mad > OUTLIER_Z for b, x in zip(bad, logs, strict=True)]
    return bad


def applied(arm: str, wanted: dict[str, str], prof: dict[str, object]) -> str:
    """Whether a run applied what its arm set, by the library's own read-back (MPI_T) in
    every rank: a command line that overrides it (mpirun --mca ...) would make both arms
    the same and every verdict "same", so that is a NotApplied error, not a pass."""
    if not wanted:
        return "what the library applied is not provable for this MPI family"
    got: dict[str, list[str | None]] = prof.get("settings") or {}  # type: ignore[assignment]
    for name, value in wanted.items():
        seen = got.get(name, [None])
        if seen == [None] and arm == "default":
            return f"unproven: the library has no control variable {name}"
        if seen != [value]:  # in the tuned arm, a variable the library lacks applies nothing
            what = (f"has no control variable {name} (the component is not in use)"
                    if seen == [None] else
                    f"read back {name} = {', '.join(map(str, seen))}, colltune set {value}")
            raise NotApplied(
                f"the {arm} runs did not apply what colltune set: the library {what}; the "
                "command line overrides it, so both arms would run the same",
                f"remove {name} from the command (mpirun --mca, -x, -genv): tune verify "
                "--app sets it in each arm")
    return "applied (" + ", ".join(f"{k} = {v}" for k, v in wanted.items()) + ", read back)"


class _Pairs:
    """Runs pairs of the application for the sequential judgement, re-running disturbed
    ones while the re-run budget (a quarter of the pair budget) lasts."""

    def __init__(self, req: AppRequest, arms: dict[str, dict[str, str]],
                 run: Callable[[dict[str, str]], dict[str, object]],
                 readback: Callable[[dict[str, str]], dict[str, str]],
                 say: Callable[[str], None]) -> None:
        self.req, self.arms, self.run, self.say = req, arms, run, say
        self.readback = readback
        self.kept: list[dict[str, dict[str, object]]] = []  # pair -> arm -> profile
        self.loads: list[tuple[float, float]] = []
        self.reruns = max(1, req.design.max_pairs // 4)
        self.disturbed = 0
        self.all_loads: list[float] = []

    def _pair(self, i: int) -> tuple[dict[str, dict[str, object]], tuple[float, float]]:
        got: dict[str, dict[str, object]] = {}
        load: dict[str, float] = {}
        for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
            before = _cpu()
            got[arm] = self.run(self.arms[arm])
            load[arm] = foreign_load(before, _cpu())
            self.all_loads.append(load[arm])
        return got, (load["default"], load["tuned"])

    def __call__(self, _sizes: list[int], first: int, n: int) -> Batch:
        new: list[int] = []
        i = first
        while len(new) < n:
            got, load = self._pair(i)
            if i == 0:
                for arm in ARMS:
                    wanted = {} if self.req.aa else self.readback(self.arms[arm])
                    self.say(f"{arm} run: " + applied(arm, wanted, got[arm]))
            self.kept.append(got)
            self.loads.append(load)
            new.append(len(self.kept) - 1)
            i += 1
            self.say(f"pair {len(self.kept)} (foreign load {load[0]:.2f}/{load[1]:.2f} cores): "
                     + ", ".join(f"{arm} wall {_figure(got[arm], 'wall'):.4f} s"
                                 for arm in ARMS))
            bad = disturbed(self._logs(), self.loads)
            for j in [j for j in new if bad[j]]:
                if self.reruns == 0:
                    break
                self.reruns -= 1
                self.disturbed += 1
                self.say(f"pair {j + 1} disturbed (the machine's load changed, or its ratio "
                         "lies far beyond the others): run again")
                self.kept[j], self.loads[j] = self._pair(i)
                i += 1
                self.say(f"pair {j + 1} again (foreign load {self.loads[j][0]:.2f}/"
                         f"{self.loads[j][1]:.2f} cores)")
        # only this batch's pairs: the earlier ones were judged at earlier looks
        return {0: {m: {a: [[_figure(self.kept[j][a], m)] for j in new] for a in ARMS}
                    for m in MEASURES}}

    def _logs(self) -> list[float]:
        return [math.log(_figure(p["tuned"], PRIMARY) / _figure(p["default"], PRIMARY))
                for p in self.kept]


def verify_app(req: AppRequest, note: Callable[[str], None] | None = None) -> AppVerdict:
    d = req.design
    if d.first < 2:
        raise ColltuneError(f"--pairs {d.first}: a paired test needs at least 2 pairs",
                            "use --pairs 5 or more")
    if d.max_pairs < d.first:
        raise ColltuneError(f"--max-rounds {d.max_pairs} is fewer than --pairs {d.first}",
                            "raise --max-rounds")
    if not req.rules.is_file():
        raise ColltuneError(f"no rules file {req.rules}",
                            "pass the file tune app (or tune) wrote")
    backend = registry.named(req.backend_name) if req.backend_name else \
        registry.for_file(req.rules)
    apps = backend.with_apps()
    mpi = apps.find(req.prefix)
    arms = backend.with_files().rules_arms(req.rules.resolve())
    if req.baseline is not None:  # the first arm: the other file, as the library reads it
        if not req.baseline.is_file():
            raise ColltuneError(f"no rules file {req.baseline}", "pass --baseline the file "
                                "to judge --rules against (tune app --arrival both wrote "
                                "rules.together.conf beside rules.conf)")
        if registry.for_file(req.baseline).name != backend.name:
            raise ColltuneError(f"{req.baseline} is not a {backend.name} file, as "
                                f"{req.rules} is", "judge two files of one family")
        arms = {"default": backend.with_files().rules_arms(req.baseline.resolve())["tuned"],
                "tuned": arms["tuned"]}
    if req.aa:  # both arms the first one: every difference is this node's noise
        arms = {"default": arms["default"], "tuned": arms["default"]}
    say = note or (lambda _s: None)
    pairs = _Pairs(req, arms, lambda env: profiled_run(req.cmd, backend, mpi, env=env,
                                                       timeout=req.timeout, capture=True),
                   apps.readback, say)
    deadline = time.monotonic() + req.time_budget if req.time_budget else None
    res = sequential.run(pairs, [0], d, deadline=deadline, note=say)[0]
    out = AppVerdict(req.cmd, req.rules, res.pairs, d, req.aa, req.baseline,
                     disturbed=pairs.disturbed, foreign_cores=pairs.all_loads)
    bad = disturbed(pairs._logs(), pairs.loads)
    for m, cell in res.cells.items():
        out.measures[m] = _verdict(m, cell, pairs, any(bad))
    return out


def _verdict(m: str, cell: Cell, pairs: _Pairs, loaded: bool) -> MeasureVerdict:
    """One measure's verdict; a difference that rests on a disturbed pair is not claimed."""
    default = [_figure(p["default"], m) for p in pairs.kept]
    tuned = [_figure(p["tuned"], m) for p in pairs.kept]
    verdict, reason = cell.verdict, ""
    if loaded and verdict in ("faster", "slower"):
        verdict, reason = "inconclusive", "the machine was loaded"
    elif verdict == "inconclusive":
        wanted = 1 + pairs.req.design.threshold
        # the gate's own rule, so the two cannot drift apart; a loaded machine's interval
        # is not trusted even below the threshold
        if sequential.not_slower([cell], pairs.req.design) and not loaded:
            verdict = "not slower"
        else:
            reason = "the machine was loaded" if loaded else \
                f"it could see a slowdown of {cell.mde:.2f}x or more, not {wanted:.2f}x"
    p = cell.p_slower if cell.ratio >= 1 else cell.p_faster
    return MeasureVerdict(m, default, tuned, cell.ratio, p, verdict, (cell.lo, cell.hi),
                          cell.mde, reason)


def as_json(v: AppVerdict) -> dict[str, object]:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {"command": v.command, "rules": str(v.rules), "pairs": v.pairs,
            "baseline": str(v.baseline) if v.baseline else None,
            "failed": v.failed, "inconclusive": v.inconclusive, "primary": PRIMARY,
            "aa": v.aa, "alpha": v.design.alpha, "beta": v.design.beta,
            "threshold": v.design.threshold, "max_pairs": v.design.max_pairs,
            "disturbed_pairs": v.disturbed, "foreign_cores": v.foreign_cores,
            "measures": {m: {"default_s": x.default, "tuned_s": x.tuned, "ratio": x.ratio,
                             "p_value": x.p_value, "verdict": x.verdict,
                             "interval": [num(x.interval[0]), num(x.interval[1])],
                             "could_see": num(x.could_see), "reason": x.reason}
                         for m, x in v.measures.items()}}
