"""Least-squares lines t = a + b*m with their fit quality, a robust slope, and the two-piece
fit that finds a protocol switch (eager to rendezvous) in point-to-point times."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Line:
    a: float  # intercept (seconds)
    b: float  # slope (seconds per byte)
    lo: int  # the sizes the line was fitted on
    hi: int

    def __call__(self, m: float) -> float:
        return self.a + self.b * m


@dataclass(frozen=True)
class Quality:
    r2: float  # on the times themselves
    median_rel: float  # median |predicted - measured| / measured
    worst_rel: float
    points: int


def fit_line(m: npt.ArrayLike, t: npt.ArrayLike) -> Line:
    """Minimises relative squared error (times span orders of magnitude, and an absolute
    fit would ignore the small sizes that carry the latency), with a >= 0 and b >= 0."""
    x, y = np.asarray(m, float), np.asarray(t, float)
    w = 1.0 / np.maximum(y, 1e-12)
    a_mat = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(a_mat, y * w, rcond=None)
    if a < 0:  # latency cannot be negative: the line through the origin
        a, b = 0.0, float(np.sum(w * w * x * y) / max(np.sum(w * w * x * x), 1e-300))
    if b < 0:  # nor the cost of a byte: a constant
        a, b = float(np.sum(w * w * y) / np.sum(w * w)), 0.0
    return Line(float(a), float(max(b, 0.0)), int(min(x)), int(max(x)))


def theil_sen(m: npt.ArrayLike, t: npt.ArrayLike) -> Line:
    """Median of pairwise slopes (scipy's Theil-Sen): one descheduled train on a loaded
    machine cannot move it. Slope and intercept are kept non-negative; the intercept is
    the median of y - b*x (scipy's "joint" method), taken again after clamping the slope."""
    from scipy.stats import theilslopes

    x, y = np.asarray(m, float), np.asarray(t, float)
    b = max(float(theilslopes(y, x).slope), 0.0) if len(set(x.tolist())) > 1 else 0.0
    a = max(float(np.median(y - b * x)), 0.0)
    return Line(a, b, int(min(x)), int(max(x)))


def quality(pred: npt.ArrayLike, t: npt.ArrayLike) -> Quality:
    p, y = np.asarray(pred, float), np.asarray(t, float)
    ss_res = float(np.sum((y - p) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    rel = np.abs(p - y) / np.maximum(y, 1e-12)
    return Quality(1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0, float(np.median(rel)),
                   float(np.max(rel)), len(y))


def _rel_sse(line: Line, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum(((line.a + line.b * x - y) / np.maximum(y, 1e-12)) ** 2))


def fit_pieces(m: npt.ArrayLike, t: npt.ArrayLike, min_points: int = 3,
               min_gain: float = 0.5) -> list[Line]:
    """One line, or two when a split between consecutive sizes cuts the relative squared
    error by more than `min_gain` (a protocol switch shows up as a jump in the intercept).
    Each piece keeps at least `min_points` sizes."""
    order = np.argsort(np.asarray(m, float))
    x, y = np.asarray(m, float)[order], np.asarray(t, float)[order]
    one = fit_line(x, y)
    best_err, best = _rel_sse(one, x, y), [one]
    limit = best_err * (1.0 - min_gain)
    for k in range(min_points, len(x) - min_points + 1):
        left, right = fit_line(x[:k], y[:k]), fit_line(x[k:], y[k:])
        err = _rel_sse(left, x[:k], y[:k]) + _rel_sse(right, x[k:], y[k:])
        if err < limit and err < best_err:
            best_err, best = err, [left, right]
    return best


def piece_for(pieces: Sequence[Line], m: float) -> Line:
    """The piece that covers size m: the first whose fitted range reaches m, else the last."""
    for p in pieces[:-1]:
        if m <= p.hi:
            return p
    return pieces[-1]
