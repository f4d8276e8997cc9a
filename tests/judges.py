"""The first statistics colltune judged launch pairs with, kept for the tests that compare
them with the sequential procedure (tuner/sequential.py, which tune and verify use) and for
bench/aa_check.py, which shows why the pooled one was replaced. Nothing in colltune calls
them: they left src/ in issue 63, with the statistics only they and bench/ use
(paired_t_less, student_t_cdf, holm)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

from colltune.core.records import Verdict
from colltune.core.stats import mann_whitney_less, median
from colltune.tuner.confirm import ABSamples


def student_t_cdf(t: float, df: float) -> float:
    return float(stats.t.cdf(t, df))


def paired_t_less(x: Sequence[float]) -> float:
    """One-sided p-value that the mean of `x` is below 0 (one-sample t-test, n-1 degrees
    of freedom; scipy). Without spread the sign decides: scipy has no answer there."""
    n = len(x)
    if n < 2:
        return 1.0
    mean = sum(x) / n
    if all(v == x[0] for v in x):
        return 0.0 if mean < 0 else 1.0
    return float(stats.ttest_1samp(x, 0.0, alternative="less").pvalue)


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down: which hypotheses to reject with family-wise error <= alpha.
    A rollout gate looks at many sizes at once; one test per size at alpha would raise a
    false alarm on most runs."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    out = [False] * len(pvalues)
    m = len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (m - rank):
            break
        out[i] = True
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
