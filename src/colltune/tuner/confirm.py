"""Compare the library default with a rules file in fresh, alternating launches (A B B A ...).

One launch measures every configuration under one scheduling state; on an oversubscribed or
shared machine the next launch can rank them differently. A decision is kept only if it also
wins here, over the launch pairs, in every timing mode the kernel measured (one call after a
barrier, and calls back to back as an application makes them; docs/methodology.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from colltune.backends import Installation
from colltune.backends.registry import of
from colltune.collectives import Collective
from colltune.core.records import Verdict
from colltune.core.stats import mann_whitney_less, median, paired_t_less
from colltune.errors import MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.slots import Placement

ARMS = ("default", "tuned")


@dataclass
class ABSamples:
    """Per size, per arm, one list of samples per launch; `modes` holds the same per timing
    mode (empty where only one figure per launch exists, as OSU's)."""

    rounds: int
    samples: dict[str, dict[int, list[list[float]]]] = field(
        default_factory=lambda: {a: {} for a in ARMS})
    modes: dict[str, dict[str, dict[int, list[list[float]]]]] = field(default_factory=dict)


def ab_runs(mpi: Installation, coll: Collective, placement: Placement, rules: Path,
            sizes: list[int], rounds: int, reps: Repetitions, timeout: float = 60.0,
            arms: dict[str, dict[str, str]] | None = None) -> ABSamples:
    """`rounds` launch pairs; the order alternates (A B, B A, ...) so linear drift cancels.
    `arms` are the two launch environments (a session's: coll/han's choices, MPICH's
    tuning file); by default the library's choice against the rules file `rules`."""
    be = of(mpi)
    arms = arms or be.rules_arms(rules)
    exe = build_kernel(mpi)
    out = ABSamples(rounds)
    for rnd in range(rounds):
        for arm in (ARMS if rnd % 2 == 0 else ARMS[::-1]):
            # a rung of a ladder is confirmed as it was measured: its groups in one job
            plan = KernelPlan(coll.name, [KernelConfig(0, {}, placement.group)],
                              [(0, s) for s in sizes],
                              dataclasses.replace(reps, seed=reps.seed + rnd))
            cmd, env = be.launch(mpi, placement.launched, coll.name, 0, arms[arm])
            res = run_kernel(cmd, exe, plan, env, point_timeout=timeout)
            if res.status != "ok":
                raise MPIError(f"confirmation launch ({arm}) of {coll.name} failed: "
                                    f"{res.status} {res.message}",
                                    "rerun; measurements so far are stored")
            for r in res.results:
                if r.status != "ok":
                    raise MPIError(f"{coll.name} at {r.size} B gave a {r.status} result "
                                        f"under the {arm} settings", "report this MPI bug")
                out.samples[arm].setdefault(r.size, []).append(r.samples)
                obj = r.objective
                for mode, objs in r.series.items():
                    out.modes.setdefault(mode, {a: {} for a in ARMS})[arm].setdefault(
                        r.size, []).append(objs[obj])
    return out


def _judge_arms(per_round_d: list[list[float]], per_round_t: list[list[float]], alpha: float,
                min_gain: float) -> tuple[str, float, float, float, int]:
    """(verdict, tuned/default ratio, p faster, p slower, launch pairs won)."""
    x = [math.log(median(t) / median(d)) for t, d in zip(per_round_t, per_round_d)]
    ratio = math.exp(sum(x) / len(x))  # tuned / default, geometric mean over launches
    pf = paired_t_less(x)
    ps = paired_t_less([-v for v in x])
    if pf < alpha and ratio <= 1 - min_gain:
        verdict = "faster"
    elif ps < alpha and ratio >= 1 / (1 - min_gain):
        verdict = "slower"
    else:
        verdict = "same"
    return verdict, ratio, pf, ps, sum(v < 0 for v in x)


def combine(verdicts: list[str]) -> str:
    """Faster only if faster in every mode; slower if slower in any."""
    if "slower" in verdicts:
        return "slower"
    return "faster" if verdicts and all(v == "faster" for v in verdicts) else "same"


def judge(ab: ABSamples, alpha: float = 0.05, min_gain: float = 0.03) -> dict[int, Verdict]:
    """One observation per launch pair: the log ratio of the two launches' medians.

    Samples inside one launch share its scheduling state, so they are not independent
    evidence; launches are. faster: a one-sided paired t-test over the launch pairs at
    `alpha` and a geometric-mean gain of at least `min_gain`; slower: the mirror image.
    Where the launches timed several modes, each is judged so, and the verdict is faster
    only if every mode says faster, slower if any says slower."""
    out = {}
    for size, per_round_d in ab.samples["default"].items():
        per_round_t = ab.samples["tuned"][size]
        verdict, ratio, pf, ps, won = _judge_arms(per_round_d, per_round_t, alpha, min_gain)
        modes: dict[str, dict[str, object]] = {}
        for mode, arms in ab.modes.items():
            mv, mr, mpf, mps, _ = _judge_arms(arms["default"][size], arms["tuned"][size],
                                              alpha, min_gain)
            modes[mode] = {"verdict": mv, "launch_speedup": 1.0 / mr, "p_faster": mpf,
                           "p_slower": mps}
        if modes:
            verdict = combine([str(m["verdict"]) for m in modes.values()])
        d_all = [v for r in per_round_d for v in r]
        t_all = [v for r in per_round_t for v in r]
        out[size] = Verdict(size, median(d_all), median(t_all), pf, ps, won, ab.rounds, verdict,
                            1.0 / ratio, modes)
    return out


def judge_pooled(ab: ABSamples, alpha: float = 0.01, min_gain: float = 0.03
                 ) -> dict[int, Verdict]:
    """The first statistic used here, kept only for bench/aa_check.py, which shows why it was
    replaced: pooling every sample treats them as independent, and they are not."""
    out = {}
    need = math.ceil(0.75 * ab.rounds)
    for size, per_round_d in ab.samples["default"].items():
        per_round_t = ab.samples["tuned"][size]
        d = [x for r in per_round_d for x in r]
        t = [x for r in per_round_t for x in r]
        md, mt = median(d), median(t)
        won = sum(median(a) < median(b) for a, b in zip(per_round_t, per_round_d))
        pf, ps = mann_whitney_less(t, d), mann_whitney_less(d, t)
        if pf < alpha and mt <= md * (1 - min_gain) and won >= need:
            verdict = "faster"
        elif ps < alpha and md <= mt * (1 - min_gain):
            verdict = "slower"
        else:
            verdict = "same"
        out[size] = Verdict(size, md, mt, pf, ps, won, ab.rounds, verdict, md / mt)
    return out
