"""`tune verify`: does a rules file help, size by size, against the library default?

Fresh launches, default and rules alternating (A B, B A, ...) so drift cancels, judged by
the tuner's own launch-level statistics; first, the library's own evidence shows whether
the file is applied at all (Open MPI's traffic: a file Open MPI dropped is "not applied",
not "no speed-up"). The file's family (its backend) reads it and says what it holds."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.backends import registry
from colltune.backends.files import Arms, VerifyTarget
from colltune.collectives import Collective, get_collective
from colltune.core.config import DEFAULT, Config
from colltune.core.records import json_ready
from colltune.core.space import sizes_for
from colltune.core.stats import STALL_TEXT, median, median_ci
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.kernel.launch import Repetitions
from colltune.launchers import Launch
from colltune.tuner import sequential
from colltune.tuner.confirm import ab_runs, as_batch, for_means
from colltune.tuner.sequential import Batch, Design, SizeResult
from colltune.verification.second import second
from colltune.verification.step import KEY, describe, step_ab_runs, step_sizes


@dataclass
class SizeCheck:
    size: int  # per-rank bytes, as everywhere in colltune (OSU's size too)
    lookup_size: int  # what the file's rules compare (its family's Backend.rule_size)
    rule: str  # what the file says at this size
    verdict: str  # faster | same | slower | inconclusive | default (not changed: not tested)
    default_median: float
    tuned_median: float
    default_ci: tuple[float, float]
    tuned_ci: tuple[float, float]
    ratio: float  # tuned / default, geometric mean over launch pairs (< 1: faster)
    p_faster: float
    p_slower: float
    rounds: int  # launch pairs this size used
    note: str = ""
    # per timing mode: ratio, ratio_ci, p_faster, p_slower, mde, verdict
    modes: dict[str, dict[str, object]] = field(default_factory=dict)
    boundary: bool = False  # the last size below, or the first above, where a rule changes
    ratio_ci: tuple[float, float] = (0.0, math.inf)  # at the last look's level
    mde: float = math.inf  # smallest slowdown this run could find with 80% power
    what: str = ""  # what was timed, where not one size: the step's sizes
    statistic: str = "median"  # what summed up a launch: "mean" where an arm stalled
    # stalled calls: default's, of how many, the file's, of how many (sequential.SizeResult)
    stalls: tuple[int, int, int, int] | None = None


@dataclass
class CollectiveCheck:
    collective: str
    np: int
    applied: str  # applied | not applied | default everywhere | unproven
    applied_detail: str
    kernel: list[SizeCheck] = field(default_factory=list)
    # the second benchmark's checks (`second` names it: OSU or IMB; the field keeps its
    # name in `tune verify --json`)
    osu: list[SizeCheck] = field(default_factory=list)
    second: str = ""
    step: list[SizeCheck] = field(default_factory=list)  # --step: the application step

    @staticmethod
    def _geomean(checks: list[SizeCheck]) -> float | None:
        checks = [c for c in checks if c.verdict != "default"]
        if not checks:
            return None
        return math.exp(-sum(math.log(c.ratio) for c in checks) / len(checks))

    @property
    def speedup(self) -> float | None:
        """Geometric mean of default/tuned over sizes (> 1: the rules help)."""
        return self._geomean(self.kernel)

    @property
    def osu_speedup(self) -> float | None:
        return self._geomean(self.osu)

    @property
    def regressions(self) -> list[SizeCheck]:
        return [c for c in self.kernel + self.osu + self.step if c.verdict == "slower"]

    @property
    def undecided(self) -> list[SizeCheck]:
        return [c for c in self.kernel + self.osu + self.step
                if c.verdict == "inconclusive"]

    @property
    def tested(self) -> list[SizeCheck]:
        return [c for c in self.kernel if c.verdict != "default"]


@dataclass
class VerifyReport:
    mpi: Installation
    rules_path: Path
    checks: list[CollectiveCheck]
    design: Design = field(default_factory=Design)
    aa: bool = False  # a calibration: both arms ran the library's default

    @property
    def failed(self) -> bool:
        """Gate for a rollout: a significant regression, or a file the library ignores."""
        return any(c.regressions or c.applied == "not applied" for c in self.checks)

    @property
    def inconclusive(self) -> bool:
        """Some size was neither shown slower nor shown within the threshold in budget."""
        return any(c.undecided for c in self.checks)


POWERS = [1 << k for k in range(2, 21)]  # 4 B to 1 MiB per rank: the range a file covers


PROBES_PER_OCTAVE = 64  # a rule range narrower than 1/64 of an octave may go unseen


def boundary_sizes(rule_at: Callable[[Collective, int, int], Config | None], coll: Collective,
                   np: int) -> set[int]:
    """Per-rank sizes on both sides of every place where the file's rule changes between
    4 B and 1 MiB: the last size below and the first at or above, where a guessed boundary
    is wrong first. Found on the file's own lookup, whatever its family: probed 64 times
    per octave (a range between two powers of two is seen too), then bisected."""
    if not coll.size_dependent:
        return set()
    g = coll.granularity
    probes = sizes_for(coll, np, sorted(
        {int(2 ** (k + i / PROBES_PER_OCTAVE)) for k in range(2, 20)
         for i in range(PROBES_PER_OCTAVE)} | {1 << 20}))
    out: set[int] = set()
    for a, b in zip(probes, probes[1:], strict=False):
        here = rule_at(coll, np, a)
        if here == rule_at(coll, np, b):
            continue
        lo, hi = a, b  # rule(lo) is here's, rule(hi) is not
        while hi - lo > g:
            mid = lo + max(g, (hi - lo) // (2 * g) * g)
            if rule_at(coll, np, mid) == here:
                lo = mid
            else:
                hi = mid
        out |= {lo, hi}
    return out


def default_sizes(target: VerifyTarget, coll: Collective, np: int) -> tuple[list[int], set[int]]:
    """Every power of two from 4 B to 1 MiB, from one element for a reduction (1 and 2 B
    of chars: what the file's first rule answers for, as the tune's default sizes), and
    every rule boundary's two sides."""
    edges = boundary_sizes(target.rule_at, coll, np)
    return sizes_for(coll, np, sorted(set(POWERS) | set(sizes_for(coll, np)) | edges)), edges


def _size_checks(results: dict[int, SizeResult], label: Callable[[int], str], lookup:
                 Callable[[int], int], edges: set[int]) -> list[SizeCheck]:
    out = []
    for size in sorted(results):
        r = results[size]
        main = r.main
        d = [x for ln in r.default for x in ln]
        t = [x for ln in r.tuned for x in ln]
        out.append(SizeCheck(
            size, lookup(size), label(size), r.verdict, median(d), median(t), median_ci(d),
            median_ci(t), main.ratio, main.p_faster, main.p_slower, r.pairs,
            modes={m: {"ratio": c.ratio, "ratio_ci": [c.lo, c.hi], "p_faster": c.p_faster,
                       "p_slower": c.p_slower, "mde": c.mde, "verdict": c.verdict}
                   for m, c in r.cells.items()} if list(r.cells) != ["samples"] else {},
            boundary=size in edges, ratio_ci=(main.lo, main.hi),
            mde=max(c.mde for c in r.cells.values()), statistic=r.statistic,
            stalls=r.stalled, note=_stall_note(r.stalled) if r.statistic == "mean" else ""))
    return out


def _stall_note(stalled: tuple[int, int, int, int] | None) -> str:
    if stalled is None:
        return ""
    kd, nd, kt, nt = stalled
    return (f"judged by each launch's mean: by the look that turned to it, the default "
            f"stalled in {kd} of {nd} calls, the file's choice in {kt} of {nt} (a call "
            f"{STALL_TEXT}, the faster arm's median the typical; an application pays every "
            "stall)")


def _untested(sizes: list[int], label: Callable[[int], str], lookup: Callable[[int], int],
              edges: set[int]) -> list[SizeCheck]:
    """Sizes where the file leaves the library's own choice: an A/A comparison, not
    measured, so they do not dilute the family of tests that look for regressions."""
    return [SizeCheck(s, lookup(s), label(s), "default", math.nan, math.nan,
                      (math.nan, math.nan), (math.nan, math.nan), 1.0, 1.0, 1.0, 0,
                      boundary=s in edges) for s in sizes]


# ---------------------------------------------------------------------------


def _prefixed(note: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda s: note(prefix + s)


def _changes(rule: Config | None) -> bool:
    return rule is not None and rule != DEFAULT


def plan(target: VerifyTarget, names: list[str], np: int, sizes: list[int] | None,  # noqa: PLR0913 (what the gate asked, as it asked it)
         aa: bool = False, datatype: str = "double"
         ) -> list[tuple[Collective, list[int], set[int], list[int]]]:
    """Per collective: the sizes to show, the boundary sides among them, and the sizes to
    measure (where the file changes the library's choice; every size in an A/A run). Read
    from the file through its family's `rule_at`, whatever the family."""
    plans = []
    for name in names:
        coll = get_collective(name).summing(datatype)
        if sizes is None:  # where the risk is: every power of two and both sides of a boundary
            szs, edges = default_sizes(target, coll, np)
        else:
            szs, edges = sizes_for(coll, np, sizes), set()
        tested = szs if aa or target.whole else [
            s for s in szs if _changes(target.rule_at(coll, np, s))]
        plans.append((coll, szs, edges, tested))
    return plans


@dataclass
class VerifyRequest:
    """What `tune verify` was asked: the file, where it runs, and how it is judged."""

    rules_path: Path
    np: int
    mpi_prefix: str | None = None
    collectives: list[str] | None = None  # None: every collective the file tunes
    sizes: list[int] | None = None  # None: where the risk is (powers of two, boundaries)
    rounds: int = 5  # launch pairs first; more where undecided (`design`)
    reps: Repetitions | None = None
    with_: str | None = None  # "osu" or "imb": a second benchmark judged alike
    osu_dir: Path | None = None
    hostfile: str | None = None
    design: Design | None = None
    time_budget: float | None = None
    aa: bool = False  # a calibration of this machine: both arms run the default
    # also one application step of these sizes, judged as one cell; per collective where
    # it maps collectives to sizes (an application's profile)
    step: list[int] | dict[str, list[int]] | None = None
    launch: Launch | None = None
    datatype: str = "double"  # what reductions sum (--datatype: as the file was tuned)


@dataclass
class Gate:
    """One verification as its stages share it: the request, what the file's family read
    of it, the two arms, and how every cell is judged."""

    req: VerifyRequest
    target: VerifyTarget
    arms: Arms
    reps: Repetitions
    design: Design
    deadline: float | None
    note: Callable[[str], None]
    rule_size: Callable[[Collective, int, int], int]

    def label(self, c: Collective, size: int) -> str:
        if self.req.aa:
            return "A/A: the default in both arms"
        rule = self.target.rule_at(c, self.req.np, size)
        return "no rule" if rule is None else rule.label(self.target.catalog, c.name)


def verify(req: VerifyRequest, note: Callable[[str], None] = lambda s: None
           ) -> VerifyReport:
    """The gate. Sizes where the file changes the library's choice are measured in
    `rounds` launch pairs, then undecided ones in more (sequential; `design` says how many
    and at what error rates) until each is faster, same, slower, or out of budget
    (inconclusive)."""
    gate = open_gate(req, note)
    plans = plan(gate.target, _names(req, gate.target), req.np, req.sizes, req.aa,
                 req.datatype)
    steps = {c.name: (req.step.get(c.name, []) if isinstance(req.step, dict)
                      else req.step or []) for c, *_ in plans}
    # one family for the whole run: every size tested, in every timing mode, by either source
    modes = (2 if gate.reps.timing == "both" else 1) + 1  # and the loop, in every launch
    cells = sum(len(t) for *_, t in plans) * (modes + (1 if req.with_ else 0)) + \
        sum(1 for v in steps.values() if v)
    gate.design = dataclasses.replace(gate.design, family=max(1, cells))
    checks = [check_collective(gate, coll, szs, edges, tested, steps[coll.name])
              for coll, szs, edges, tested in plans]
    return VerifyReport(gate.target.mpi, req.rules_path, checks, gate.design, req.aa)


def open_gate(req: VerifyRequest, note: Callable[[str], None]) -> Gate:
    """Refuse a design that cannot run; the file's family reads it (its arms, its rules)."""
    if req.rounds < 2:
        raise ColltuneError("--rounds must be at least 2", "e.g. --rounds 4")
    design = dataclasses.replace(req.design or Design(), first=req.rounds)
    if design.max_pairs < req.rounds:
        raise ColltuneError(f"--max-rounds ({design.max_pairs}) is below --rounds "
                            f"({req.rounds})",
                            "--max-rounds bounds the launch pairs a size may use")
    family = registry.for_file(req.rules_path)
    target = family.with_files().verify_target(req.rules_path, req.np, req.mpi_prefix,
                                               req.hostfile, req.launch)
    for n in target.notes:
        note(n)
    arms = {"default": target.arms["default"],
            "tuned": target.arms["default" if req.aa else "tuned"]}
    reps = req.reps or Repetitions(min_reps=15, point_time=0.15, timing="both",
                                   min_ticks=100)
    deadline = None if req.time_budget is None else time.monotonic() + req.time_budget
    return Gate(req, target, arms, reps, design, deadline, note, family.rule_size)


def _names(req: VerifyRequest, target: VerifyTarget) -> list[str]:
    """The collectives to verify: those asked for, each one the file tunes."""
    names = target.collectives
    if req.collectives:
        unknown = [c for c in req.collectives if get_collective(c).name not in names]
        if unknown:
            raise ColltuneError(f"{req.rules_path} has no rules for {', '.join(unknown)}",
                                f"it covers: {', '.join(names) or 'nothing'}")
        names = [get_collective(c).name for c in req.collectives]
    if not names:
        raise ColltuneError(f"{req.rules_path} has no rules for any collective",
                            "write one with tune <collective> --out FILE")
    return names


def check_collective(gate: Gate, coll: Collective, szs: list[int], edges: set[int],
                     tested: list[int], step: list[int]) -> CollectiveCheck:
    """One collective: the library's proof that it applies the file, the application step
    if asked, then launch pairs at the sizes the file changes (and the second benchmark)."""
    req, target, note, name, np = gate.req, gate.target, gate.note, coll.name, gate.req.np
    mpi = target.mpi

    def label(size: int) -> str:
        return gate.label(coll, size)

    def lookup(size: int) -> int:
        return gate.rule_size(coll, size, np)

    note(f"{name}: checking that {mpi.name} applies the file")
    try:
        applied, detail = target.applied(coll, np, szs)
    except ColltuneError as e:
        applied, detail = "unproven", f"no traffic check: {e.message}"
    check = CollectiveCheck(name, np, applied, detail)
    if step:
        check.step = _judge_step(gate, coll, step)
    elif req.step is not None:
        note(f"{name}: the profile shows no {name} calls on {np} ranks: no step judged")
    untested = _untested([s for s in szs if s not in tested], label, lookup, edges)
    if not tested:
        note(f"{name}: the file leaves every size to {mpi.name}'s own choice: "
             "nothing to measure")
        check.kernel = untested
        return check
    note(f"{name}: {req.rounds} default/rules launch pairs over the {len(tested)} size(s) "
         f"the file changes, more where undecided (up to {gate.design.max_pairs})")

    # where one arm stalls (a congested link's retransmission timeouts) a launch's median
    # hides what an application pays: such sizes are judged by launch means, and later
    # launches with them take the calls a mean needs, as confirmation's do
    stalling = sequential.WhereStalls()

    def kernel(szs_: list[int], first: int, n: int) -> Batch:
        reps = for_means(gate.reps) if stalling.found & set(szs_) else gate.reps
        return as_batch(ab_runs(mpi, coll, target.placement, req.rules_path, szs_, n,
                                reps, arms=gate.arms, first_round=first))

    res = sequential.run(kernel, tested, gate.design, deadline=gate.deadline,
                         note=_prefixed(note, f"{name}: "), means=stalling)
    check.kernel = sorted(_size_checks(res, label, lookup, edges) + untested,
                          key=lambda r: r.size)
    if req.with_:
        _second_benchmark(gate, check, coll, tested, label, lookup, edges)
    return check


def _second_benchmark(gate: Gate, check: CollectiveCheck, coll: Collective,
                      tested: list[int], label: Callable[[int], str],
                      lookup: Callable[[int], int], edges: set[int]) -> None:
    """OSU's or IMB's own benchmark of the collective, judged like the kernel's sizes."""
    req, target, name = gate.req, gate.target, coll.name
    assert req.with_ is not None
    other = second(req.with_, target.mpi, target.placement, gate.arms, name, req.osu_dir)
    if other is None:
        gate.note(f"warning: no {req.with_.upper()} benchmark for {name} found; kernel only")
        return
    gate.note(f"{name}: {other.name} launch pairs ({other.exe})")

    def run2(szs_: list[int], first: int, n: int) -> Batch:
        return as_batch(other.runs(szs_, first, n))

    ores = sequential.run(run2, tested, gate.design, deadline=gate.deadline,
                          note=_prefixed(gate.note, f"{name} ({other.name}): "))
    check.osu = _size_checks(ores, label, lookup, edges)
    check.second = other.name


def _judge_step(gate: Gate, coll: Collective, sizes: list[int]) -> list[SizeCheck]:
    """The application step of `sizes`, judged in launch pairs like a size (one cell)."""
    mpi, placement, arms, np = (gate.target.mpi, gate.target.placement, gate.arms,
                                gate.req.np)
    design, deadline, note = gate.design, gate.deadline, gate.note
    szs = step_sizes(coll, np, sizes)
    what = describe(szs)
    note(f"{coll.name}: {design.first} default/rules launch pairs of {what}, more while "
         f"undecided (up to {design.max_pairs})")

    def runs(_: list[int], first: int, n: int) -> Batch:
        return as_batch(step_ab_runs(mpi, placement, arms, coll.name, szs, n, first))

    res = sequential.run(runs, [KEY], design, deadline=deadline,
                         note=_prefixed(note, f"{coll.name} (step): "))
    return [dataclasses.replace(c, what=what)
            for c in _size_checks(res, lambda s: what, lambda s: 0, set())]


def report_json(rep: VerifyReport) -> str:
    import json
    from dataclasses import asdict

    doc = {"mpi": {"name": rep.mpi.name, "version": rep.mpi.version,
                   "prefix": str(rep.mpi.prefix)},
           "rules": str(rep.rules_path), "failed": rep.failed,
           "inconclusive": rep.inconclusive, "aa": rep.aa,
           "design": asdict(rep.design),
           "collectives": [{**asdict(c), "speedup": c.speedup, "osu_speedup": c.osu_speedup}
                           for c in rep.checks]}
    return json.dumps(json_ready(doc), indent=2, allow_nan=False) + "\n"
