"""Where one measured size's decision ends and the next one's begins."""

from __future__ import annotations

import math


def boundaries(lookups: list[int], library: list[bool] | None = None) -> list[int]:
    """Start of each size's rule: 0, then the geometric midpoint between neighbours.

    With `library` (per size: the library's own choice was kept), the sizes between a kept
    default and a chosen configuration stay the library's: the chosen configuration's rule
    starts at, or ends just after, the size where it was measured winning. Between two
    measured sizes nothing says which side wins, and the library's own choice is the one
    a file does not have to answer for (a verify edge at 3760 B ran a rule that started
    at the midpoint 3759 B, 1.96x slower: the default changed algorithm above it)."""
    out = [0]
    for i, (a, b) in enumerate(zip(lookups, lookups[1:], strict=False), start=1):
        start = math.isqrt(a * b) + 1 if a else 1
        if library is not None and library[i - 1] and not library[i]:
            start = b
        elif library is not None and not library[i - 1] and library[i]:
            start = a + 1
        out.append(max(out[-1] + 1, start))
    return out
