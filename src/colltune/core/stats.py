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


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t < 0 else 1.0 - tail


def paired_t_less(x: Sequence[float]) -> float:
    """One-sided p-value that the mean of `x` is below 0 (t-test, n-1 degrees of freedom)."""
    n = len(x)
    if n < 2:
        return 1.0
    mean = sum(x) / n
    var = sum((v - mean) ** 2 for v in x) / (n - 1)
    if var == 0.0:
        return 0.0 if mean < 0 else 1.0
    return student_t_cdf(mean / math.sqrt(var / n), n - 1)


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


def welch_t_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided p-value that mean(a) < mean(b), unequal variances (Welch). For a handful
    of independent runs per arm, such as imported benchmark files; 1.0 below 2 each."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return 1.0
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1) / na
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1) / nb
    if va + vb == 0.0:
        return 0.0 if ma < mb else 1.0
    df = (va + vb) ** 2 / ((va * va / (na - 1) if va else 0.0) + (vb * vb / (nb - 1) if vb
                                                                    else 0.0))
    return student_t_cdf((ma - mb) / math.sqrt(va + vb), df)


def bootstrap_median_ci(xs: Sequence[float], level: float = 0.95, resamples: int = 2000,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the median (seeded, so a report can be reproduced)."""
    import random

    if not xs:
        raise ValueError("no samples")
    rng = random.Random(seed)
    n = len(xs)
    meds = sorted(median([xs[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * (resamples - 1))]
    hi = meds[int((1 + level) / 2 * (resamples - 1))]
    return lo, hi
