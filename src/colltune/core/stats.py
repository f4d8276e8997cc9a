"""Statistics every decision uses: medians, their confidence intervals, and the tests
(from scipy.stats; only the order-statistic CI of the median, which the C kernel computes
the same way, is written here)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType


def _scipy() -> ModuleType:
    """scipy.stats, imported on first use: it costs half a second, and most commands
    (help, check, explain, export) never test anything."""
    from scipy import stats

    return stats


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no samples")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def median_ci(xs: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics (same rule as the kernel)."""
    s = sorted(xs)
    n = len(s)
    half = z * math.sqrt(n) / 2
    lo = max(0, int(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return s[lo], s[hi]


def mann_whitney_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided p-value that samples `a` tend to be smaller than samples `b` (scipy's
    Mann-Whitney U: exact for small samples without ties, else the normal approximation
    with tie and continuity corrections)."""
    if len(a) == 0 or len(b) == 0:
        return 1.0
    if len(set(a) | set(b)) == 1:  # every sample equal: no evidence either way
        return 1.0
    return float(_scipy().mannwhitneyu(a, b, alternative="less").pvalue)


@dataclass(frozen=True)
class Comparison:
    """Evidence that a candidate beats a baseline."""

    candidate_median: float
    baseline_median: float
    p_value: float
    significant: bool

    @property
    def speedup(self) -> float:
        return self.baseline_median / self.candidate_median if self.candidate_median else 0.0


def compare(candidate: Sequence[float], baseline: Sequence[float], alpha: float = 0.01,
            min_gain: float = 0.03) -> Comparison:
    """Candidate is significantly faster when the rank test says so at level `alpha` AND
    its median is at least `min_gain` below the baseline's (tiny wins are not worth a rule)."""
    cm, bm = median(candidate), median(baseline)
    p = mann_whitney_less(candidate, baseline)
    return Comparison(cm, bm, p, p < alpha and cm <= bm * (1 - min_gain))


def _weight(a: Sequence[float], b: Sequence[float]) -> float:
    """A launch's weight in the stratified test: sqrt(m n / (m + n + 1)) (van Elteren's)."""
    return math.sqrt(len(a) * len(b) / (len(a) + len(b) + 1))


def stratified_ratio(candidate: Mapping[str, Sequence[float]],
                     baseline: Mapping[str, Sequence[float]]) -> float | None:
    """The candidate's median over the baseline's, launch by launch (each stratum: its
    label -> its samples), combined as a geometric mean weighted as the stratified test
    weighs each launch (squared); None: no launch measured both."""
    num = den = 0.0
    for k, a in candidate.items():
        b = baseline.get(k)
        if not a or not b or median(a) <= 0 or median(b) <= 0:
            continue
        w2 = _weight(a, b) ** 2
        num += w2 * math.log(median(a) / median(b))
        den += w2
    return math.exp(num / den) if den else None


def stratified_compare(candidate: Mapping[str, Sequence[float]],
                       baseline: Mapping[str, Sequence[float]], alpha: float = 0.01,
                       min_gain: float = 0.03) -> Comparison:
    """`compare` for samples pooled from several launches (each a stratum: its label ->
    its samples): a launch that ran slower or faster than another must not pass for a
    difference between the arms, so each launch is ranked on its own and the launches'
    one-sided Mann-Whitney tests are combined by Stouffer's method with weights
    sqrt(m n / (m + n + 1)), which makes it van Elteren's stratified rank test (scipy for
    both). The effect is `stratified_ratio`; the medians given are the baseline's over the
    launches that measured both arms, and that times the ratio. A launch that measured
    only one arm says nothing and is left out."""
    shared = [k for k in candidate if candidate[k] and baseline.get(k)]
    ratio = stratified_ratio(candidate, baseline)
    if not shared or ratio is None:
        return Comparison(median([x for v in candidate.values() for x in v] or [0.0]),
                          median([x for v in baseline.values() for x in v] or [0.0]),
                          1.0, False)
    ps, ws = [], []
    for k in shared:
        a, b = candidate[k], baseline[k]
        # a launch whose samples are all one value: no evidence either way (0.5, not 1.0,
        # which would count as evidence the candidate is slower)
        ps.append(0.5 if len(set(a) | set(b)) == 1 else mann_whitney_less(a, b))
        ws.append(_weight(a, b))
    if len(shared) == 1:
        p = ps[0]
    else:
        eps = 1e-15  # a p of exactly 0 or 1 is an infinite z: kept finite
        p = float(_scipy().combine_pvalues([min(max(x, eps), 1 - eps) for x in ps],
                                           method="stouffer", weights=ws).pvalue)
    bm = median([x for k in shared for x in baseline[k]])
    return Comparison(bm * ratio, bm, p, p < alpha and ratio <= 1 - min_gain)


def welch_t_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided p-value that mean(a) < mean(b), unequal variances (Welch; scipy). For a
    handful of independent runs per arm, such as imported benchmark files; 1.0 below 2
    each; without spread in either arm the means decide."""
    if len(a) < 2 or len(b) < 2:
        return 1.0
    if len(set(a)) == 1 and len(set(b)) == 1:
        return 0.0 if a[0] < b[0] else 1.0
    return float(_scipy().ttest_ind(a, b, equal_var=False, alternative="less").pvalue)


# a call stalled where it took this many times the size's typical call (the fastest
# configuration's median) and STALL_FLOOR seconds more: a retransmission timeout on
# Ethernet (Linux waits 200 ms at least, where a call takes tens), a congested switch port.
# The floor keeps out what a healthy node's scheduler does: a rank that waits for a time
# slice (4 ms a tick) makes a call of 80 us take 4 ms, 50 times its typical, not 20 ms more
STALL = 4.0
STALL_FLOOR = 0.02
# ... or this much more, whatever the call: most of Linux's minimum retransmission timeout
# (200 ms), for calls too long for STALL times them to see one (all-to-all of 1 MiB on
# Gigabit ports, 2026-12-06: 72 ms typical, the default's stalled calls 225-250 ms, 3.1-3.5
# times: none counted, the stage that looks again never ran, and pairwise's 1.4-1.8x by
# OSU was missed); a healthy node's scheduler does not hold a call 150 ms
STALL_EXTRA = 0.15
# one arm stalls more often than another when Fisher's one-sided test says so at this
# level: 30 calls with a third stalled against none is p 1e-5; a passing burst in a few
# calls is not (tuner/decide.py, tuner/sequential.py)
STALL_ALPHA = 0.01


def stalls(xs: Sequence[float], typical: float) -> int:
    """How many of the samples stalled (over STALL times `typical` and STALL_FLOOR more,
    or STALL_EXTRA more)."""
    bar = min(max(STALL * typical, typical + STALL_FLOOR), typical + STALL_EXTRA)
    return sum(x > bar for x in xs)


# how a stall is said beside a verdict
STALL_TEXT = f"over {STALL:g}x the typical call or {STALL_EXTRA * 1000:.0f} ms more"


def fisher_more(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided p-value that the first group's rate (k1 of n1) is above the second's
    (k2 of n2): Fisher's exact test (scipy)."""
    if n1 == 0 or n2 == 0:
        return 1.0
    table = [[k1, n1 - k1], [k2, n2 - k2]]
    return float(_scipy().fisher_exact(table, alternative="greater").pvalue)


def compare_means(candidate: Sequence[float], baseline: Sequence[float], alpha: float,
                  min_gain: float) -> Comparison:
    """Candidate is faster by its mean (what an application pays over many calls, stalls
    and all): Welch's one-sided test at `alpha`, and the mean at least `min_gain` below.
    The medians given are the means (the figure compared)."""
    cm, bm = sum(candidate) / len(candidate), sum(baseline) / len(baseline)
    p = welch_t_less(candidate, baseline)
    return Comparison(cm, bm, p, p < alpha and cm <= bm * (1 - min_gain))


def bootstrap_median_ci(xs: Sequence[float], level: float = 0.95, resamples: int = 2000,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the median (scipy; seeded, so a report can be
    reproduced)."""
    if not xs:
        raise ValueError("no samples")
    if len(set(xs)) == 1:  # one value (or one sample): nothing to resample
        return xs[0], xs[0]
    import numpy as np  # here, not at import: every CLI start would pay for it

    ci = _scipy().bootstrap((np.asarray(xs, float),), np.median, confidence_level=level,
                         n_resamples=resamples, method="percentile",
                         random_state=np.random.default_rng(seed)).confidence_interval
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class ChangePoint:
    """Calls 1..`after` of a sequence run differently from the rest."""

    after: int
    before_median: float
    after_median: float
    p_value: float  # Mann-Whitney, Bonferroni-adjusted over the split points tried

    @property
    def ratio(self) -> float:
        return self.after_median / self.before_median if self.before_median > 0 else math.inf


def change_point(xs: Sequence[float], alpha: float = 1e-3, min_ratio: float = 1.25,
                 edge: int = 3) -> ChangePoint | None:
    """Where a sequence of call times changes level (a library that switches algorithm
    after N calls): among the splits where a two-sided Mann-Whitney test separates the
    calls before from those after best (p within 10x of the best), the least absolute
    deviation of log times from each side's median; reported when the test there is
    significant after Bonferroni over the splits tried and the medians differ by
    `min_ratio`. At least `edge` calls on each side: one slow first call (connections
    being set up) is ordinary warm-up, not a change of behaviour."""
    n = len(xs)
    if n < 2 * edge + 2 or min(xs) <= 0:
        return None
    logs = [math.log(x) for x in xs]

    def cost(part: list[float]) -> float:  # absolute deviations: a few spikes weigh little
        m = median(part)
        return sum(abs(v - m) for v in part)

    def pvalue(j: int) -> float:
        return float(_scipy().mannwhitneyu(xs[:j], xs[j:], alternative="two-sided").pvalue)

    splits = range(edge, n - edge + 1)
    # the rank test finds the change whatever a few first calls cost (their own level
    # would win a least-deviation split), but its p-value favours balanced splits and a
    # later level of its own (calls slowed by a loaded machine) moves its best split far
    # from the step: the exact point is the least deviation among the splits it separates
    # about as well (p within 10x of its best)
    ps = {j: pvalue(j) for j in splits}
    best = min(ps.values())
    k = min((j for j in splits if ps[j] <= 10 * best),
            key=lambda j: cost(logs[:j]) + cost(logs[j:]))
    p = min(1.0, ps[k] * len(splits))
    before, after = median(xs[:k]), median(xs[k:])
    ratio = after / before if before > 0 else math.inf
    if p >= alpha or (1 / min_ratio < ratio < min_ratio):
        return None
    return ChangePoint(k, before, after, p)
