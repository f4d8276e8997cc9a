"""`tune app PROFILE`: tune exactly what an application's profile (tune profile) holds:
each (collective, communicator size) it called, at the sizes it called, the entries that
cost the application most first and with the most measuring time, and nothing it did not
call (sizes above the largest it called are left to the library).

Budget: an entry group with at least FULL_SHARE of the application's wall time is measured
with the full --point-time; a smaller one with proportionally less, down to a fifth; a group
under --min-share is not measured at all (said so). Each group is one `tune` run with the
usual statistics and confirmation, all merged into one --out (a section per communicator
size)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from colltune.apploop.profile import load
from colltune.collectives import COLLECTIVES, get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT
from colltune.core.records import Decision
from colltune.errors import ColltuneError
from colltune.options import TuneOptions
from colltune.tuner.measure import Reporter
from colltune.tuner.run import tune

FULL_SHARE = 0.05  # a group this costly (of the wall time) gets the full --point-time
LEAST_TIME = 0.2  # the smallest fraction of --point-time a measured group gets


@dataclass
class Group:
    """One (collective, communicator size) of the profile: what `tune` is run for."""

    collective: str
    comm_size: int
    entries: list[dict]  # type: ignore[type-arg]  # the profile's, one per size bucket
    time_s: float  # mean rank's time in these calls
    share: float  # of the mean rank's wall time
    status: str = "planned"  # measured | below --min-share | not run: why

    @property
    def sizes(self) -> list[int]:
        return sorted({int(e["size"]) for e in self.entries})


@dataclass
class EntryResult:
    collective: str
    comm_size: int
    size: int
    calls: int
    time_s: float
    share: float
    chosen: str  # what the file runs there ("" when the group was not measured)
    verdict: str
    speedup: float  # default / chosen, measured; 1.0 where the default is kept
    saving_s: float  # expected saving of the mean rank: time * (1 - 1 / speedup)


@dataclass
class AppResult:
    profile: Path
    groups: list[Group]
    entries: list[EntryResult] = field(default_factory=list)
    untuned: list[str] = field(default_factory=list)  # collectives colltune does not tune
    wall_s: float = 0.0
    timing: str = ""
    objective: str = ""


def plan(profile: dict, min_share: float) -> tuple[list[Group], list[str], float]:  # type: ignore[type-arg]
    """The groups to tune, costliest first; what the profile holds that colltune does not
    tune; the mean rank's wall time."""
    wall = float(profile["wall_s"]["mean"])  # type: ignore[index]
    by: dict[tuple[str, int], list[dict]] = {}  # type: ignore[type-arg]
    untuned: list[str] = []
    for e in profile["entries"]:  # type: ignore[attr-defined]
        if e["collective"] not in COLLECTIVES:
            untuned.append(f"{e['collective']} ({e['comm_size']} ranks, {e['size']} B)")
            continue
        by.setdefault((e["collective"], int(e["comm_size"])), []).append(e)
    groups = []
    for (name, n), es in by.items():
        t = sum(float(e["time_s"]["mean"]) * int(e["ranks"]) for e in es) / int(profile["ranks"])
        g = Group(name, n, es, t, t / wall if wall > 0 else 0.0)
        if g.share < min_share:
            g.status = f"below --min-share ({100 * g.share:.3f}% of the run)"
        groups.append(g)
    groups.sort(key=lambda g: (-g.time_s, g.collective, g.comm_size))
    return groups, untuned, wall


def _decision_at(ds: list[Decision], size: int, granularity: int) -> Decision | None:
    want = max(granularity, -(-size // granularity) * granularity)  # as the kernel measures
    if not ds:
        return None
    if any(d.size < 0 for d in ds):  # one decision for every size
        return next(d for d in ds if d.size < 0)
    return next((d for d in ds if d.size == want), None)


def tune_app(profile_path: Path, template: TuneOptions, min_share: float = 0.001,
             reporter: Reporter | None = None) -> AppResult:
    """Tune every group of the profile with `template`'s settings, one --out."""
    rep = reporter or Reporter()
    profile = load(profile_path)
    groups, untuned, wall = plan(profile, min_share)
    res = AppResult(profile_path, groups, untuned=untuned, wall_s=wall,
                    timing=template.settings.timing, objective=template.settings.objective)
    catalog: Catalog | None = None
    for g in groups:
        coll = get_collective(g.collective)
        ds: list[Decision] = []
        if g.status == "planned":
            scale = min(1.0, max(LEAST_TIME, g.share / FULL_SHARE))
            opts = dataclasses.replace(
                template, collectives=[g.collective], nps=[g.comm_size],
                sizes=g.sizes if coll.has_sizes else None, beyond="library",
                summary_json=None,
                settings=dataclasses.replace(template.settings,
                                             point_time=template.settings.point_time * scale))
            rep.note(f"{g.collective} at {g.comm_size} ranks: {100 * g.share:.2f}% of the run, "
                     f"sizes {', '.join(map(str, g.sizes))}; {scale:.0%} of --point-time")
            try:
                out = tune(opts, rep)
            except ColltuneError as err:
                g.status = f"not run: {err.message}"
                rep.note(f"{g.collective} at {g.comm_size} ranks not tuned: {err.message}")
            else:
                g.status = "measured"
                ds = out.decisions.get(g.collective, {}).get(g.comm_size, [])
                catalog = out.catalog
        for e in sorted(g.entries, key=lambda e: int(e["size"])):
            d = _decision_at(ds, int(e["size"]), coll.granularity)
            # "tuned?": in the file, not confirmed in fresh launches (--confirm-rounds 0)
            tuned = d is not None and d.verdict.startswith("tuned") and d.chosen != DEFAULT
            speedup = (d.speedup or 1.0) if d is not None and tuned else 1.0
            t = float(e["time_s"]["mean"])
            res.entries.append(EntryResult(
                g.collective, g.comm_size, int(e["size"]), int(e["calls"]), t,
                float(e["share"]),
                d.chosen.label(catalog, g.collective) if d is not None and catalog else "",
                d.verdict if d is not None else g.status, speedup,
                t * (1 - 1 / speedup) if speedup > 0 else 0.0))
    return res


def as_json(res: AppResult) -> dict[str, object]:
    return {
        "profile": str(res.profile), "wall_s": res.wall_s,
        "timing": res.timing, "objective": res.objective,
        "groups": [{"collective": g.collective, "comm_size": g.comm_size, "sizes": g.sizes,
                    "time_s": g.time_s, "share": g.share, "status": g.status}
                   for g in res.groups],
        "entries": [dataclasses.asdict(e) for e in res.entries],
        "expected_saving_s": sum(e.saving_s for e in res.entries),
        "not_tuned_by_colltune": res.untuned,
    }
