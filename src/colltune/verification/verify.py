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
from colltune.core.stats import median, median_ci
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.kernel.launch import Repetitions
from colltune.launchers import Launch
from colltune.slots import Placement
from colltune.tuner import sequential
from colltune.tuner.confirm import ab_runs, as_batch
from colltune.tuner.sequential import Batch, Design, SizeResult
from colltune.verification.second import Second, second
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
    """Every power of two from 4 B to 1 MiB, and every rule boundary's two sides."""
    edges = boundary_sizes(target.rule_at, coll, np)
    return sizes_for(coll, np, sorted(set(POWERS) | edges)), edges


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
            mde=max(c.mde for c in r.cells.values())))
    return out


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


def plan(target: VerifyTarget, names: list[str], np: int, sizes: list[int] | None,
         aa: bool = False) -> list[tuple[Collective, list[int], set[int], list[int]]]:
    """Per collective: the sizes to show, the boundary sides among them, and the sizes to
    measure (where the file changes the library's choice; every size in an A/A run). Read
    from the file through its family's `rule_at`, whatever the family."""
    plans = []
    for name in names:
        coll = get_collective(name)
        if sizes is None:  # where the risk is: every power of two and both sides of a boundary
            szs, edges = default_sizes(target, coll, np)
        else:
            szs, edges = sizes_for(coll, np, sizes), set()
        tested = szs if aa or target.whole else [
            s for s in szs if _changes(target.rule_at(coll, np, s))]
        plans.append((coll, szs, edges, tested))
    return plans


def verify(rules_path: Path, np: int, mpi_prefix: str | None = None,
           collectives: list[str] | None = None, sizes: list[int] | None = None,
           rounds: int = 5, reps: Repetitions | None = None, with_: str | None = None,
           osu_dir: Path | None = None, hostfile: str | None = None,
           note: Callable[[str], None] = lambda s: None, design: Design | None = None,
           time_budget: float | None = None, aa: bool = False,
           step: list[int] | dict[str, list[int]] | None = None,
           launch: Launch | None = None) -> VerifyReport:
    """The gate. Sizes where the file changes the library's choice are measured in
    `rounds` launch pairs, then undecided ones in more (sequential; `design` says how many
    and at what error rates) until each is faster, same, slower, or out of budget
    (inconclusive). `aa`: a calibration of this machine, both arms run the default.
    `step`: also one application step of these sizes (step.py), judged as one cell; per
    collective where it maps collectives to sizes (an application's profile)."""
    if rounds < 2:
        raise ColltuneError("--rounds must be at least 2", "e.g. --rounds 4")
    design = dataclasses.replace(design or Design(), first=rounds)
    if design.max_pairs < rounds:
        raise ColltuneError(f"--max-rounds ({design.max_pairs}) is below --rounds ({rounds})",
                            "--max-rounds bounds the launch pairs a size may use")
    family = registry.for_file(rules_path)
    target = family.with_files().verify_target(rules_path, np, mpi_prefix, hostfile, launch)
    rule_size = family.rule_size
    mpi, catalog, placement = target.mpi, target.catalog, target.placement
    arms = {"default": target.arms["default"],
            "tuned": target.arms["default" if aa else "tuned"]}
    names = target.collectives
    if collectives:
        unknown = [c for c in collectives if get_collective(c).name not in names]
        if unknown:
            raise ColltuneError(f"{rules_path} has no rules for {', '.join(unknown)}",
                                f"it covers: {', '.join(names) or 'nothing'}")
        names = [get_collective(c).name for c in collectives]
    if not names:
        raise ColltuneError(f"{rules_path} has no rules for any collective",
                            "write one with tune <collective> --out FILE")
    reps = reps or Repetitions(min_reps=15, point_time=0.15, timing="both", min_ticks=100)
    deadline = None if time_budget is None else time.monotonic() + time_budget

    plans = plan(target, names, np, sizes, aa)
    # one family for the whole run: every size tested, in every timing mode, by either source
    modes = (2 if reps.timing == "both" else 1) + 1  # and the loop, in every fresh launch
    steps = {c.name: (step.get(c.name, []) if isinstance(step, dict) else step or [])
             for c, *_ in plans}
    cells = sum(len(t) for *_, t in plans) * (modes + (1 if with_ else 0)) + \
        sum(1 for v in steps.values() if v)
    design = dataclasses.replace(design, family=max(1, cells))

    checks = []
    for coll, szs, edges, tested in plans:
        name = coll.name

        def label(size: int, c: Collective = coll) -> str:
            if aa:
                return "A/A: the default in both arms"
            rule = target.rule_at(c, np, size)
            return "no rule" if rule is None else rule.label(catalog, c.name)

        def lookup(size: int, c: Collective = coll) -> int:
            return rule_size(c, size, np)

        note(f"{name}: checking that {mpi.name} applies the file")
        try:
            applied, detail = target.applied(coll, np, szs)
        except ColltuneError as e:
            applied, detail = "unproven", f"no traffic check: {e.message}"
        check = CollectiveCheck(name, np, applied, detail)
        if steps[name]:
            check.step = _judge_step(mpi, placement, arms, coll, np, steps[name], design,
                                     deadline, note)
        elif step is not None:
            note(f"{name}: the profile shows no {name} calls on {np} ranks: no step judged")
        untested = _untested([s for s in szs if s not in tested], label, lookup, edges)
        if not tested:
            note(f"{name}: the file leaves every size to {mpi.name}'s own choice: "
                 "nothing to measure")
            check.kernel = untested
            checks.append(check)
            continue
        note(f"{name}: {rounds} default/rules launch pairs over the {len(tested)} size(s) the "
             f"file changes, more where undecided (up to {design.max_pairs})")

        def kernel(szs_: list[int], first: int, n: int, c: Collective = coll) -> Batch:
            return as_batch(ab_runs(mpi, c, placement, rules_path, szs_, n, reps,
                                    arms=arms, first_round=first))

        res = sequential.run(kernel, tested, design, deadline=deadline,
                             note=_prefixed(note, f"{name}: "))
        check.kernel = sorted(_size_checks(res, label, lookup, edges) + untested,
                              key=lambda r: r.size)
        if with_:
            other = second(with_, mpi, placement, arms, name, osu_dir)
            if other is None:
                note(f"warning: no {with_.upper()} benchmark for {name} found; kernel only")
            else:
                note(f"{name}: {other.name} launch pairs ({other.exe})")

                def run2(szs_: list[int], first: int, n: int, o: Second = other) -> Batch:
                    return as_batch(o.runs(szs_, first, n))

                ores = sequential.run(run2, tested, design, deadline=deadline,
                                      note=_prefixed(note, f"{name} ({other.name}): "))
                check.osu = _size_checks(ores, label, lookup, edges)
                check.second = other.name
        checks.append(check)
    return VerifyReport(mpi, rules_path, checks, design, aa)


def _judge_step(mpi: Installation, placement: Placement, arms: Arms, coll: Collective,
                np: int, sizes: list[int], design: Design, deadline: float | None,
                note: Callable[[str], None]) -> list[SizeCheck]:
    """The application step of `sizes`, judged in launch pairs like a size (one cell)."""
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
