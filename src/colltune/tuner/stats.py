"""Statistics every decision uses: medians, their confidence intervals, and a rank test."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def mann_whitney_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided p-value that samples `a` tend to be smaller than samples `b`.

    Normal approximation of the Mann-Whitney U statistic with tie correction and
    continuity correction; adequate from about 5 samples per side."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    ranks = [0.0] * len(pooled)
    tie_term = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[k] = avg
        t = j - i + 1
        tie_term += t ** 3 - t
        i = j + 1
    r1 = sum(r for r, (_, g) in zip(ranks, pooled, strict=False) if g == 0)
    u1 = r1 - n1 * (n1 + 1) / 2  # large when a is large
    n = n1 + n2
    mu = n1 * n2 / 2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (mu - u1 - 0.5) / math.sqrt(var)  # positive when a is smaller
    return _norm_sf(z)


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
