"""`tune verify`: does a rules file help, size by size, against the library default?

Fresh launches, default and rules alternating (A B, B A, ...) so drift cancels, judged by
the tuner's own launch-level statistics; first, the library's own evidence shows whether
the file is applied at all (Open MPI's traffic: a file Open MPI dropped is "not applied",
not "no speed-up"). The file's family (its backend) reads it and says what it holds."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.backends import Installation, registry
from colltune.backends.base import Arms, VerifyTarget
from colltune.collectives import Collective, get_collective
from colltune.core.config import Config
from colltune.core.records import Verdict
from colltune.core.stats import holm, median_ci
from colltune.errors import ColltuneError, FormatError
from colltune.kernel.launch import Repetitions
from colltune.osu_output import parse as parse_osu
from colltune.slots import Placement
from colltune.tuner.confirm import ABSamples, ab_runs, combine, judge
from colltune.tuner.space import sizes_for


@dataclass
class SizeCheck:
    size: int  # per-rank bytes, as everywhere in colltune (OSU's size too)
    lookup_size: int  # what Open MPI compares in the rules file
    rule: str  # what the file says at this size
    verdict: str  # faster | same | slower
    default_median: float
    tuned_median: float
    default_ci: tuple[float, float]
    tuned_ci: tuple[float, float]
    ratio: float  # tuned / default, geometric mean over launch pairs (< 1: faster)
    p_faster: float
    p_slower: float
    rounds: int
    note: str = ""
    # per timing mode: ratio (tuned / default), p_faster, p_slower, verdict
    modes: dict[str, dict[str, object]] = field(default_factory=dict)
    boundary: bool = False  # the last size below, or the first above, where a rule changes


@dataclass
class CollectiveCheck:
    collective: str
    np: int
    applied: str  # applied | not applied | default everywhere | unproven
    applied_detail: str
    kernel: list[SizeCheck] = field(default_factory=list)
    osu: list[SizeCheck] = field(default_factory=list)

    @staticmethod
    def _geomean(checks: list[SizeCheck]) -> float | None:
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
        return [c for c in self.kernel + self.osu if c.verdict == "slower"]


@dataclass
class VerifyReport:
    mpi: Installation
    rules_path: Path
    checks: list[CollectiveCheck]

    @property
    def failed(self) -> bool:
        """Gate for a rollout: a significant regression, or a file Open MPI ignores."""
        return any(c.regressions or c.applied == "not applied" for c in self.checks)


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


def _size_checks(verdicts: dict[int, Verdict], ab: ABSamples, target: VerifyTarget,
                 coll: Collective, np: int, catalog_label: Callable[..., str],
                 edges: set[int] | None = None) -> list[SizeCheck]:
    out = []
    for size in sorted(verdicts):
        v = verdicts[size]
        d = [x for r in ab.samples["default"][size] for x in r]
        t = [x for r in ab.samples["tuned"][size] for x in r]
        out.append(SizeCheck(size, coll.lookup_size(size, np),
                             catalog_label(target.rule_at(coll, np, size)), v.verdict,
                             v.default_median, v.tuned_median, median_ci(d), median_ci(t),
                             1.0 / v.launch_speedup, v.p_faster, v.p_slower, v.rounds,
                             modes={m: {"ratio": 1.0 / float(x["launch_speedup"]),  # type: ignore[arg-type]
                                        "p_faster": x["p_faster"], "p_slower": x["p_slower"],
                                        "verdict": x["verdict"]}
                                    for m, x in v.modes.items()},
                             boundary=size in (edges or ())))
    return out


# ---------------------------------------------------------------------------
# OSU Micro-Benchmarks as an independent second measurement
# ---------------------------------------------------------------------------

OSU_PROGRAMS = {"allgather": "osu_allgather", "allreduce": "osu_allreduce",
                "alltoall": "osu_alltoall", "barrier": "osu_barrier", "bcast": "osu_bcast",
                "gather": "osu_gather", "reduce": "osu_reduce", "scatter": "osu_scatter",
                "reduce_scatter": "osu_reduce_scatter", "allgatherv": "osu_allgatherv",
                "alltoallv": "osu_alltoallv", "gatherv": "osu_gatherv",
                "scatterv": "osu_scatterv"}


def find_osu(coll: str, osu_dir: Path | None) -> Path | None:
    prog = OSU_PROGRAMS.get(coll)
    if prog is None:
        return None
    if osu_dir is not None:
        hits = sorted(osu_dir.rglob(prog))
        return next((h for h in hits if h.is_file() and os.access(h, os.X_OK)), None)
    found = shutil.which(prog)
    return Path(found) if found else None


def osu_ab_runs(mpi: Installation, exe: Path, placement: Placement, arms: Arms,
                sizes: list[int], rounds: int, iterations: int = 200) -> ABSamples:
    """OSU's average latency per size and launch, arms alternating like the kernel's."""
    out = ABSamples(rounds)
    be = registry.of(mpi)
    lo, hi = (min(sizes), max(sizes)) if sizes else (0, 0)
    cmd = [*be.launch(mpi, placement, "", 0, None)[0],
           str(exe), "-f", "-i", str(iterations), "-x", "20"]
    if exe.name != "osu_barrier":
        cmd += ["-m", f"{max(1, lo)}:{hi}"]
    for rnd in range(rounds):
        for arm in (("default", "tuned") if rnd % 2 == 0 else ("tuned", "default")):
            try:
                env = be.launch(mpi, placement, "", 0, arms[arm])[1]
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                                     env=env, check=False)
            except subprocess.TimeoutExpired:
                raise ColltuneError(f"{exe.name} did not finish in 600 s",
                                    "run it by hand under mpirun to see why") from None
            if res.returncode != 0:
                raise ColltuneError(f"{exe.name} failed (exit {res.returncode}): "
                                    f"{res.stderr.strip()[-300:]}",
                                    "run it by hand under mpirun to see why")
            try:
                run = parse_osu(res.stdout, exe.name)
            except FormatError as e:
                raise ColltuneError(f"cannot read {exe.name}'s output: {e}",
                                    "check that this is an OSU collective benchmark") from None
            for row in run.rows:
                if row.size in sizes or exe.name == "osu_barrier":
                    size = 0 if exe.name == "osu_barrier" else row.size
                    out.samples[arm].setdefault(size, []).append([row.avg_us * 1e-6])
    return out


# ---------------------------------------------------------------------------


def verify(rules_path: Path, np: int, mpi_prefix: str | None = None,
           collectives: list[str] | None = None, sizes: list[int] | None = None,
           rounds: int = 6, reps: Repetitions | None = None, with_osu: bool = False,
           osu_dir: Path | None = None, hostfile: str | None = None,
           note: Callable[[str], None] = lambda s: None) -> VerifyReport:
    if rounds < 2:
        raise ColltuneError("--rounds must be at least 2", "e.g. --rounds 6")
    target = registry.for_file(rules_path).verify_target(rules_path, np, mpi_prefix, hostfile)
    mpi, catalog, placement = target.mpi, target.catalog, target.placement
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
    reps = reps or Repetitions(min_reps=15, point_time=0.15, timing="both")

    checks = []
    for name in names:
        coll = get_collective(name)

        def label(c: Config | None, coll_name: str = name) -> str:
            return "no rule" if c is None else c.label(catalog, coll_name)

        if sizes is None:  # where the risk is: every power of two and both sides of a boundary
            szs, edges = default_sizes(target, coll, np)
        else:
            szs, edges = sizes_for(coll, np, sizes), set()
        note(f"{name}: checking that {mpi.name} applies the file")
        try:
            applied, detail = target.applied(coll, np, szs)
        except ColltuneError as e:
            applied, detail = "unproven", f"no traffic check: {e.message}"
        check = CollectiveCheck(name, np, applied, detail)
        note(f"{name}: {rounds} default/rules launch pairs over {len(szs)} size(s)")
        ab = ab_runs(mpi, coll, placement, rules_path, szs, rounds, reps, arms=target.arms)
        check.kernel = _size_checks(judge(ab), ab, target, coll, np, label, edges)
        if with_osu:
            exe = find_osu(name, osu_dir)
            if exe is None:
                note(f"warning: no {OSU_PROGRAMS.get(name, 'OSU benchmark')} found "
                     f"({'in ' + str(osu_dir) if osu_dir else 'on PATH'}); kernel only")
            else:
                note(f"{name}: {rounds} OSU launch pairs ({exe})")
                oab = osu_ab_runs(mpi, exe, placement, target.arms, szs, rounds)
                check.osu = _size_checks(judge(oab), oab, target, coll, np, label, edges)
        checks.append(check)
    for source in ("kernel", "osu"):
        family_verdicts([r for c in checks for r in getattr(c, source)])
    # a verdict must reproduce in launches of its own: a regression gates a rollout, and an
    # all-default file must never read as faster or slower (a false alarm at one size of
    # many is otherwise likely)
    for check in checks:
        flagged = [r for r in check.kernel if r.verdict != "same"]
        if not flagged:
            continue
        coll = get_collective(check.collective)
        note(f"{check.collective}: rechecking {len(flagged)} size(s) judged faster or slower "
             f"in {rounds} new launch pairs")
        ab = ab_runs(mpi, coll, placement, rules_path, [r.size for r in flagged], rounds, reps,
                     arms=target.arms)
        again = {r.size: r for r in _size_checks(judge(ab), ab, target, coll, np,
                                                 lambda c: "")}
        family_verdicts(list(again.values()))
        for r in flagged:
            if again[r.size].verdict != r.verdict:
                r.note = (f"{r.verdict} in the first launch pairs ({r.ratio:.3f}), "
                          f"{again[r.size].verdict} in the recheck ({again[r.size].ratio:.3f})")
                r.verdict = "same"
            else:
                r.note = f"reproduced in the recheck ({again[r.size].ratio:.3f})"
    return VerifyReport(mpi, rules_path, checks)


def family_verdicts(rows: list[SizeCheck], alpha: float = 0.05, min_gain: float = 0.03
                    ) -> None:
    """Re-judge all sizes (and timing modes) of one run together (Holm), so the gate's
    false-alarm rate is alpha for the whole run, not per size. A size is faster only if
    every mode is, slower if any mode is."""
    cells: list[tuple[SizeCheck, str | None, float, float, float]] = []
    for r in rows:
        if r.modes:
            cells += [(r, m, float(x["ratio"]), float(x["p_faster"]),  # type: ignore[arg-type]
                       float(x["p_slower"])) for m, x in r.modes.items()]  # type: ignore[arg-type]
        else:
            cells.append((r, None, r.ratio, r.p_faster, r.p_slower))
    faster = holm([c[3] for c in cells], alpha)
    slower = holm([c[4] for c in cells], alpha)
    per_row: dict[int, list[str]] = {}
    for (r, mode, ratio, _, _), f, s in zip(cells, faster, slower):
        if f and ratio <= 1 - min_gain:
            verdict = "faster"
        elif s and ratio >= 1 / (1 - min_gain):
            verdict = "slower"
        else:
            verdict = "same"
        if mode is not None:
            r.modes[mode]["verdict"] = verdict
        per_row.setdefault(id(r), []).append(verdict)
    for r in rows:
        r.verdict = combine(per_row[id(r)])


def report_json(rep: VerifyReport) -> str:
    import json
    from dataclasses import asdict

    doc = {"mpi": {"name": rep.mpi.name, "version": rep.mpi.version,
                   "prefix": str(rep.mpi.prefix)},
           "rules": str(rep.rules_path), "failed": rep.failed,
           "collectives": [{**asdict(c), "speedup": c.speedup, "osu_speedup": c.osu_speedup}
                           for c in rep.checks]}
    return json.dumps(doc, indent=2) + "\n"
