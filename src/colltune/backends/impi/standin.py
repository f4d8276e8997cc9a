"""Which preset an Intel MPI tuning file names where the default is kept: the one seen
running the default's functions, else the sweep's fastest, each put to fresh launches and
passed over when found slower or not shown within a bound of it (a file has no entry for the
library's own choice)."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from itertools import zip_longest
from typing import TYPE_CHECKING

from colltune.backends.impi.proof import Fingerprint, describe
from colltune.core.config import DEFAULT, Config
from colltune.core.ranges import boundaries
from colltune.core.records import Decision, Verdict
from colltune.rules.impi_tuning import Rules, rules_from

if TYPE_CHECKING:
    from colltune.store import Context, Measurement, Store

# preset -> size -> fingerprint (0: the library's own choice, nothing set)
Prints = dict[int, dict[int, Fingerprint | None]]
# stand-ins tried per size before the collective is left to the library: each costs fresh
# launch pairs; a symbol twin is not always the default's equal (shared-memory presets
# differ in parameters the symbols do not show: preset 13 ran the default's functions at
# 128 B-1 KiB at 4 ranks and was 1.2-1.9x slower there)
TRIES = 3


def same_as(prints: Prints, preset: int, size: int) -> int | None:
    """The lowest preset other than `preset` seen running the same functions at `size` (None:
    none, or nothing seen)."""
    fp = prints.get(preset, {}).get(size)
    if fp is None:
        return None
    return next((p for p in sorted(prints) if p and p != preset
                 and prints[p].get(size) == fp), None)


def ranked(ms: list[Measurement]) -> dict[int, list[int]]:
    """Per size, the presets measured there, fastest median in the sweep first."""
    by: dict[int, list[tuple[float, int]]] = {}
    for m in ms:
        if m.config.algorithm and m.status == "ok" and m.median is not None:
            by.setdefault(m.size, []).append((m.median, m.config.algorithm))
    return {s: list(dict.fromkeys(p for _, p in sorted(v))) for s, v in by.items()}


def swept(fast: dict[int, list[int]]) -> list[int]:
    """The sizes every measured preset ran at (the sweep's; a boundary's ran two)."""
    full = max((len(v) for v in fast.values()), default=0)
    return sorted(s for s, v in fast.items() if len(v) == full)


def wanted(prints: Prints, fast: dict[int, list[int]], full: list[int], size: int
           ) -> set[int]:
    """The presets worth a probe at a size the sweep (`full`: its sizes) did not run whole:
    those measured there, and those that could stand in for the default at the swept sizes
    either side (every preset would cost a launch each, about 25 s a round for bcast at 4
    ranks)."""
    out = set(fast.get(size, []))
    for n in _around(full, size):
        twin = same_as(prints, 0, n)
        out |= ({twin} if twin else set()) | set(fast[n][:TRIES])
    return out


def candidates(prints: Prints, fast: dict[int, list[int]], sizes: list[int]
               ) -> dict[int, list[int]]:
    """Per size, the stand-ins to try in order: the symbol twin of the default, then the
    sweep's fastest (`fast`: ranked; every size: a choice fresh launches refute is kept too;
    a size off the sweep borrows its swept neighbours')."""
    full = swept(fast)
    out: dict[int, list[int]] = {}
    for size in sizes:
        twin = same_as(prints, 0, size)
        sides = [] if size in full else _around(full, size)
        # off the sweep: the default's twins either side first (naming one moves a range's
        # end, as the file does there anyway), then the fastest either side
        near = [t for s in sides if (t := same_as(prints, 0, s))] + [
            p for pair in zip_longest(*(fast[s] for s in sides))
            for p in pair if p is not None] + fast.get(size, [])
        tries = list(dict.fromkeys(([twin] if twin else []) + near))[:TRIES]
        if tries:
            out[size] = tries
    return out


def _around(swept: list[int], size: int) -> list[int]:
    """The swept sizes either side of `size` (a size measured while locating a boundary ran
    only the two configurations around it: its neighbours' fastest are its candidates)."""
    i = bisect_left(swept, size)
    return swept[max(i - 1, 0):i + 1]


def rules(coll: str, ds: list[Decision], prints: Prints,
          fill: Callable[[int], int | None] | None = None,
          unfilled: Callable[[int], str | None] | None = None) -> tuple[Rules | None, str]:
    """One comm size's decisions as rules (None: not expressible, and why). A kept default
    names the preset seen running what the default ran at that size, or what `fill` (a
    session's stand-in, checked by fresh launch pairs) names there; `unfilled` says why a
    size has none, where the session knows."""
    sized = sorted((d for d in ds if d.size >= 0), key=lambda d: d.size)
    points: list[tuple[int, int]] = []
    starts = boundaries([d.size for d in sized], [d.chosen == DEFAULT for d in sized])
    for start, d in zip(starts, sized, strict=True):
        if d.chosen.algorithm:
            points.append((start, d.chosen.algorithm))
            continue
        twin = fill(d.size) if fill else same_as(prints, 0, d.size)
        if not twin:
            what = describe(prints.get(0, {}).get(d.size), coll)
            why = (unfilled(d.size) if unfilled else None) or (
                "none runs its functions and none was measured there")
            return None, (f"at {d.size} B no preset stands in for the default ({what}): "
                          f"{why}; a tuning file has no entry for the library's choice")
        points.append((start, twin))
    return rules_from(points), ""


# a stand-in for the kept default must be shown at most this much slower than the default
# (the upper end of its 95% interval over fresh launch pairs, in every timing mode): "not
# found slower" let a preset up to 1.9x slower at 95% stand in (reduce 1 KiB, 4 ranks),
# and the loop of an application-style benchmark then read it 0.41x the default's speed
STAND_IN_BOUND = 1.5


def slowdown_bound(v: Verdict) -> float:
    """The most a configuration may be slower than the default by fresh launch pairs (95%,
    the worst timing mode); infinite where a mode has no interval."""
    his = [c.get("ratio_ci", [None, None])[1] for c in v.modes.values()]  # type: ignore[index]
    return max((float(h) if h is not None else math.inf for h in his), default=math.inf)


def bound_note(coll: str, np: int, fills: list[tuple[int, int, float | None]]) -> str | None:
    """What the file's stand-ins promise: per kept size, the preset and the most fresh
    launch pairs let it be slower than the default (None: not judged)."""
    if not fills:
        return None
    said = ", ".join(f"{p} at {s} B ({'not judged' if b is None else f'{b:.2f}x'})"
                     for s, p, b in fills)
    return (f"{coll} np={np}: where the default was kept the file names a stand-in (a file "
            "has no entry for the library's choice), at most this much slower than the "
            f"default by fresh launch pairs (95%, worst timing mode): {said}")


class StandIns:
    """A session's stand-ins for one collective at one comm size: what was seen running
    (`prints`), the candidates per size, and the stored fresh-launch verdicts on them."""

    def __init__(self, coll: str, np: int) -> None:
        self.coll, self.np = coll, np
        self.prints: Prints = {}
        self.candidates: dict[int, list[int]] = {}
        self.ctx: Context | None = None
        self.store: Store | None = None

    def judged(self, size: int, preset: int) -> Verdict | None:
        """A preset's stored fresh-launch verdict against the default at a size."""
        if self.ctx is None or self.store is None:
            return None
        return self.store.confirmation(self.ctx, size, Config(preset).key)

    def tried(self, size: int) -> list[int]:
        """The stand-ins for the default at a size, before fresh launches judge them (a size
        decided after the sweep, --beyond library, was probed only: its twin, if any)."""
        return self.candidates.get(size) or [
            t for t in [same_as(self.prints, 0, size)] if t is not None]

    def fill(self, size: int) -> int | None:
        """The preset that stands in for the default at a kept size: the first of its
        candidates (the one seen running its functions, then the sweep's fastest) that fresh
        launch pairs showed at most STAND_IN_BOUND slower than the default there (95%, every
        mode), else the first not judged yet. A twin by the symbols is tested too."""
        def verdict(preset: int) -> str | None:
            if (v := self.judged(size, preset)) is None:
                return None
            return "slower" if v.verdict == "slower" or slowdown_bound(v) > STAND_IN_BOUND \
                else v.verdict
        seen = {p: verdict(p) for p in self.tried(size)}
        return next((p for p, v in seen.items() if v not in (None, "slower")),
                    next((p for p, v in seen.items() if v is None), None))

    def unfilled(self, size: int) -> str | None:
        """Why a size has no stand-in (asked where `fill` gave none: all refuted)."""
        ps = self.tried(size)
        return None if not ps else (
            f"its stand-in{'s' if len(ps) > 1 else ''}, preset "
            f"{', '.join(str(p) for p in ps)}, {'were' if len(ps) > 1 else 'was'} slower "
            f"than the default in fresh launches, or not shown within {STAND_IN_BOUND}x of "
            "it")

    def kept(self, ds: list[Decision]) -> list[tuple[int, int]]:
        """(size, stand-in) where the default is kept, if the file names the collective."""
        if not any(d.chosen.algorithm for d in ds):
            return []
        return [(d.size, p) for d in sorted(ds, key=lambda d: d.size)
                if d.chosen == DEFAULT and d.size >= 0 and (p := self.fill(d.size)) is not None]

    def note(self, ds: list[Decision]) -> str | None:
        """The file's note on its stand-ins: the most fresh launches let each be slower."""
        return bound_note(self.coll, self.np, [
            (s, p, None if (v := self.judged(s, p)) is None else slowdown_bound(v))
            for s, p in self.kept(ds)])
