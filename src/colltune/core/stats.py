"""Statistics every decision uses: medians, their confidence intervals, and the tests
(from scipy.stats; only the order-statistic CI of the median, which the C kernel computes
the same way, is written here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def welch_t_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided p-value that mean(a) < mean(b), unequal variances (Welch; scipy). For a
    handful of independent runs per arm, such as imported benchmark files; 1.0 below 2
    each; without spread in either arm the means decide."""
    if len(a) < 2 or len(b) < 2:
        return 1.0
    if len(set(a)) == 1 and len(set(b)) == 1:
        return 0.0 if a[0] < b[0] else 1.0
    return float(_scipy().ttest_ind(a, b, equal_var=False, alternative="less").pvalue)


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
