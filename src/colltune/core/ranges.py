"""Where one measured size's decision ends and the next one's begins."""

from __future__ import annotations

import math


def boundaries(lookups: list[int]) -> list[int]:
    """Start of each size's rule: 0, then the geometric midpoint between neighbours."""
    out = [0]
    for a, b in zip(lookups, lookups[1:], strict=False):
        out.append(max(out[-1] + 1, math.isqrt(a * b) + 1 if a else 1))
    return out
