"""Turn per-size decisions on MVAPICH2 into its environment profile (`MV2_*_TUNING` ranges).

MVAPICH2 has no "library's choice" entry in a range table: a range where its default was
kept names the algorithm the default ran, as MVAPICH2's own counters reported it while the
default was measured. It has no communicator-size dimension either: one np is written."""

from __future__ import annotations

from colltune.backends.mvapich2 import VARIABLE, MV2Catalog
from colltune.core.config import DEFAULT
from colltune.core.records import Decision
from colltune.rules.mvapich2 import SINGLE_ONLY, Profile, Range
from colltune.tuner.decide import boundaries

Counters = dict[tuple[str, int], dict[str, int]]  # (config key, size) -> counter growth


def default_ran(coll: str, catalog: MV2Catalog, counters: Counters, size: int) -> int | None:
    """The MVAPICH2 number of what the library's own choice ran at `size`."""
    return catalog.ran_value(coll, counters.get((DEFAULT.key, size), {}))


def ranges(coll: str, catalog: MV2Catalog, ds: list[Decision], counters: Counters
           ) -> tuple[list[Range], list[str]]:
    """One comm size's decisions as a range table, and notes on what had to be filled in.
    Empty when the library's choice was kept at every size (nothing to set)."""
    sized = sorted((d for d in ds if d.size >= 0), key=lambda d: d.size)
    if not sized or all(d.chosen == DEFAULT for d in sized):
        return [], []
    notes: list[str] = []
    values: list[int | None] = []
    for d in sized:
        if d.chosen != DEFAULT:
            values.append(catalog.value[coll][d.chosen.algorithm])
            continue
        v = default_ran(coll, catalog, counters, d.size)
        if v is None:
            notes.append(f"{coll} {d.size} B: MVAPICH2's counters did not say what its default "
                         "ran; the neighbouring size's algorithm is written there")
        values.append(v)
    # what a range string cannot hold (2.3.7 runs knomial for it) counts as unknown
    single = SINGLE_ONLY.get(VARIABLE[coll], set())
    if len(set(values)) > 1:
        for i, v in enumerate(values):
            if v in single:
                notes.append(f"{coll} {sized[i].size} B: MVAPICH2's default ran algorithm {v}, "
                             "which a range string cannot name; the neighbouring size's "
                             "algorithm is written there")
                values[i] = None
    # unknowns take the nearest known neighbour (there is one: some size was tuned)
    for i, v in enumerate(values):
        if v is None:
            near = sorted((abs(j - i), w) for j, w in enumerate(values) if w is not None)
            values[i] = near[0][1]
    starts = boundaries([d.size for d in sized])
    merged: list[tuple[int, int]] = []
    for start, v in zip(starts, values, strict=True):
        if not merged or merged[-1][1] != v:
            merged.append((start, v))  # type: ignore[arg-type]
    out = [Range(v, lo, merged[i + 1][0] - 1 if i + 1 < len(merged) else None)
           for i, (lo, v) in enumerate(merged)]
    return out, notes


def profile(decisions: dict[str, dict[int, list[Decision]]], catalog: MV2Catalog,
            counters: dict[str, Counters], np: int, comments: list[str]
            ) -> tuple[Profile, list[str]]:
    """The profile for communicator size `np`, and notes for the user."""
    p = Profile(comments=list(comments))
    notes: list[str] = []
    for coll in sorted(decisions):
        ds = decisions[coll].get(np)
        if ds is None:
            continue
        table, why = ranges(coll, catalog, ds, counters.get(coll, {}))
        notes += why
        if table:
            p.set_ranges(VARIABLE[coll], table)
    return p, notes


def tentative(coll: str, catalog: MV2Catalog, ds: list[Decision], counters: Counters
              ) -> dict[str, str]:
    """The environment of one collective's profile (the confirmation's "tuned" arm)."""
    table, _ = ranges(coll, catalog, ds, counters)
    p = Profile()
    if table:
        p.set_ranges(VARIABLE[coll], table)
    return dict(p.settings)
