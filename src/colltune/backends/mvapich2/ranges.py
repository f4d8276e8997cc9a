"""How per-size decisions become MVAPICH2 range tables (`MV2_*_TUNING` strings).

MVAPICH2 has no "library's choice" entry in a range table: a range where its default was
kept names the algorithm the default ran, as MVAPICH2's own counters reported it while the
default was measured. Where they cannot name it (or a range string cannot hold it), the
neighbouring size's algorithm is written there only if it was measured at that size as a
tie with the default and fresh launch pairs do not find it slower; otherwise the collective
is left to MVAPICH2 whole, unless --trade-off gives the default up there for the fastest
nameable algorithm, its measured cost noted. It has no communicator-size dimension either:
one np is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from colltune.backends.mvapich2.install import FIRST_RANGE, VARIABLE, MV2Catalog
from colltune.core.config import DEFAULT
from colltune.core.ranges import boundaries
from colltune.core.records import Decision, Verdict
from colltune.core.stats import mann_whitney_less
from colltune.rules.mvapich2 import SINGLE_ONLY, Profile, Range

if TYPE_CHECKING:
    from colltune.store import Measurement

Counters = dict[tuple[str, int], dict[str, int]]  # (config key, size) -> counter growth
Ties = Callable[[int, int], str | None]  # (size, algorithm) -> how it tied the default, or None
# size -> the algorithm (MVAPICH2 number) measured fastest there among those a range string
# can name, and what it costs against the default; for --trade-off
Trades = Callable[[int], tuple[int, str] | None]
# a range value standing for what FIRST_RANGE names: the default's own small-message path
FIRST = -1


def ties_in(ms: list[Measurement], min_gain: float, alpha: float) -> Ties:
    """Whether an algorithm (its best-measured variant) was measured at a size as a tie
    with the default: not slower by more than `min_gain`, nor significantly slower."""
    at: dict[tuple[int, int], list[Measurement]] = {}
    for m in ms:
        if m.status == "ok" and m.median:
            at.setdefault((m.size, m.config.algorithm), []).append(m)

    def tie(size: int, alg: int) -> str | None:
        dflt = [m for m in at.get((size, 0), []) if m.config == DEFAULT]
        if not dflt or not dflt[0].median:
            return None
        d = dflt[0]
        for m in sorted(at.get((size, alg), []), key=lambda m: m.median or 0.0):
            ratio = (m.median or 0.0) / (d.median or 1.0)
            if ratio <= 1 + min_gain and mann_whitney_less(d.samples, m.samples) >= alpha:
                return f"{ratio:.2f}x the default's time"
        return None
    return tie


def trades_in(ms: list[Measurement], catalog: MV2Catalog, coll: str,
              counters: Counters | None = None) -> Trades:
    """The fastest nameable algorithm measured at each size, and its cost there: what
    --trade-off writes where the default cannot be named. Where MVAPICH2's counters say the
    forced algorithm ran as another (reduce-scatter+gather falls back to binomial when the
    count is below the number of ranks), the one that ran is written: it is what was
    measured."""
    best: dict[int, Measurement] = {}
    dflt: dict[int, float] = {}
    for m in ms:
        if m.status != "ok" or not m.median:
            continue
        if m.config == DEFAULT:
            dflt[m.size] = m.median
        elif m.config.algorithm in catalog.value.get(coll, {}) and (
                m.size not in best or m.median < (best[m.size].median or 0.0)):
            best[m.size] = m

    def trade(size: int) -> tuple[int, str] | None:
        m = best.get(size)
        if m is None or size not in dflt:
            return None
        alg, cost = m.config.algorithm, (m.median or 0.0) / dflt[size]
        value, how = catalog.value[coll][alg], catalog.algorithms[coll][alg]
        ran = catalog.ran_value(coll, (counters or {}).get((m.config.key, size), {}))
        names = {catalog.value[coll][a]: n for a, n in catalog.algorithms[coll].items()}
        if ran is not None and ran != value and ran in names:
            value, how = ran, f"{names[ran]} (forced as {how}: MVAPICH2 ran {names[ran]} there)"
        return (value, f"{how}, measured there at {cost:.2f}x the default's time (in the "
                "sweep)")
    return trade


def confirmed_ties(sweep: Ties, fresh: Callable[[int, int], Verdict | None]) -> Ties:
    """A tie of the sweep that fresh launch pairs (`fresh`: their stored verdict for an
    algorithm at a size) did not find slower than the default. Not yet put to them (or
    --confirm-rounds 0), it stands marked, as an unconfirmed decision does."""

    def tie(size: int, alg: int) -> str | None:
        how = sweep(size, alg)
        if how is None:
            return None
        v = fresh(size, alg)
        if v is None:
            return how + " (not confirmed in fresh launches)"
        if v.verdict == "slower":
            return None
        return (f"{how}, and {1 / v.launch_speedup:.2f}x over {v.rounds} fresh launch pairs "
                f"({v.verdict})")
    return tie


def ranges(coll: str, catalog: MV2Catalog, ds: list[Decision], counters: Counters,  # noqa: C901 (one branch per case MVAPICH2's range strings distinguish)
           tie: Ties | None = None, trade: Trades | None = None
           ) -> tuple[list[Range], list[str]]:
    """One comm size's decisions as a range table, and notes on what had to be filled in.
    Empty when the library's choice was kept at every size (nothing to set), or when a
    size where it was kept would get an algorithm not measured there as a tie with it;
    with `trade` (--trade-off) that size gets the fastest nameable algorithm measured
    there instead, and a note of its cost."""
    sized = sorted((d for d in ds if d.size >= 0), key=lambda d: d.size)
    if not sized or all(d.chosen == DEFAULT for d in sized):
        return [], []
    notes: list[str] = []
    values: list[int | None] = []
    first = FIRST_RANGE.get(coll)
    for d in sized:
        if d.chosen != DEFAULT:
            values.append(catalog.value[coll][d.chosen.algorithm])
            continue
        counted = counters.get((DEFAULT.key, d.size), {})  # what the default ran there
        v = catalog.ran_value(coll, counted)
        if v is None and first and counted.get(first[0]) and all(w == FIRST for w in values):
            values.append(FIRST)  # the default's small-message path, nameable up to here
            continue
        if v is None:
            what = catalog.unnameable(coll, counted)
            notes.append(f"{coll} {d.size} B: MVAPICH2's default ran {what}" if what else
                         f"{coll} {d.size} B: MVAPICH2's counters did not say what its "
                         "default ran")
        values.append(v)
    # what a range string cannot hold (2.3.7 runs knomial for it) counts as unknown
    single = SINGLE_ONLY.get(VARIABLE[coll], set())
    if len(set(values)) > 1:
        for i, v in enumerate(values):
            if v in single:
                notes.append(f"{coll} {sized[i].size} B: MVAPICH2's default ran algorithm {v}, "
                             "which a range string cannot name")
                values[i] = None
    # unknowns take the nearest known neighbour (there is one: some size was tuned), where
    # that algorithm was measured there as a tie with the default
    by_value = {v: a for a, v in catalog.value[coll].items()}
    for i, v in enumerate(values):
        if v is None:
            near = sorted((abs(j - i), w) for j, w in enumerate(values)
                          if w is not None and w != FIRST)
            values[i] = near[0][1]
            size, alg = sized[i].size, by_value.get(near[0][1], -1)
            how = tie(size, alg) if tie else None
            traded = trade(size) if how is None and trade else None
            if traded is not None:
                values[i] = traded[0]
                notes.append(f"{coll} {size} B: MVAPICH2's default given up (--trade-off): "
                             f"algorithm {traded[0]}, {traded[1]}")
                continue
            if how is None:
                return [], notes + [
                    f"{coll} left to MVAPICH2: at {size} B, where its default was kept, a "
                    f"range string would say algorithm {near[0][1]}, which was not measured "
                    "there as a tie with the default (--trade-off writes the fastest "
                    "algorithm measured there and notes its cost)"]
            notes.append(f"{coll} {size} B: algorithm {near[0][1]} measured there at {how}")
    starts = boundaries([d.size for d in sized])
    merged: list[tuple[int, int]] = []
    for start, v in zip(starts, values, strict=True):
        if not merged or merged[-1][1] != v:
            merged.append((start, v))  # type: ignore[arg-type]
    out = [Range(v, lo, merged[i + 1][0] - 1 if i + 1 < len(merged) else None)
           for i, (lo, v) in enumerate(merged)]
    if out and out[0].algorithm == FIRST and first:
        notes.append(f"{coll} up to {out[0].hi} B: MVAPICH2's default kept (its shared-memory "
                     f"path), as {', '.join(f'{k}={v}' for k, v in first[2].items())} with "
                     "the first range")
    return out, notes


def apply(p: Profile, coll: str, table: list[Range]) -> None:
    """Set one collective's table in a profile, with what its first range needs when it
    stands for the default's small-message path (FIRST)."""
    first = FIRST_RANGE.get(coll)
    if table and table[0].algorithm == FIRST and first:
        table = [Range(first[1], table[0].lo, table[0].hi)] + table[1:]
        p.settings.update(first[2])
    p.set_ranges(VARIABLE[coll], table)


def profile(decisions: dict[str, dict[int, list[Decision]]], catalog: MV2Catalog,
            counters: dict[str, Counters], np: int, comments: list[str],
            ties: dict[str, Ties] | None = None, trades: dict[str, Trades] | None = None
            ) -> tuple[Profile, list[str]]:
    """The profile for communicator size `np`, and notes for the user."""
    p = Profile(comments=list(comments))
    notes: list[str] = []
    for coll in sorted(decisions):
        ds = decisions[coll].get(np)
        if ds is None:
            continue
        table, why = ranges(coll, catalog, ds, counters.get(coll, {}),
                            (ties or {}).get(coll), (trades or {}).get(coll))
        notes += why
        if table:
            apply(p, coll, table)
        lost = [d for d in ds if d.unexpressed]
        if not table and lost:  # say why the profile sets nothing for it, and what would
            notes.append(f"{coll}: nothing set; {len(lost)} win(s) found in the sweep "
                         f"(at {', '.join(f'{d.size} B' for d in lost)}) cannot be expressed: "
                         f"{lost[0].unexpressed}")
    return p, notes


def tentative(table: list[Range], coll: str) -> dict[str, str]:
    """The environment of one collective's profile (the confirmation's "tuned" arm)."""
    p = Profile()
    if table:
        apply(p, coll, table)
    return dict(p.settings)
