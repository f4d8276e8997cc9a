"""`tune app PROFILE`: tune exactly what an application's profile (tune profile) holds:
each (collective, communicator size) it called, at the sizes it called, the entries that
cost the application most first and with the most measuring time, and nothing it did not
call (sizes above the largest it called are left to the library).

Budget: an entry group with at least FULL_SHARE of the application's wall time is measured
with the full --point-time; a smaller one with proportionally less, down to a fifth; a group
under --min-share is not measured at all (said so). Each group is one `tune` run with the
usual statistics and confirmation, all merged into one --out (a section per communicator
size).

Which groups, and where each runs (the layout its calls ran in): groups.py.

How: a group is measured with the kernel replaying its profiled arrival pattern as
--arrival says (apploop/profiling/replay.py); `both` also measures it with the ranks entering
together, writes that file beside --out, and the summary says where the choices differ."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from colltune.apploop.app.groups import (
    FULL_SHARE,
    LEAST_TIME,
    Group,
    Layout,
    check_mpi,
    place_groups,
    plan,
)
from colltune.apploop.online.for_app import SLOWER, excluded_for, online_key
from colltune.apploop.profiling.profile import load
from colltune.apploop.profiling.replay import MODES, Rows, choose
from colltune.collectives import get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT
from colltune.core.plan import Excluded
from colltune.core.records import Decision
from colltune.core.space import sizes_for
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.options import TuneOptions
from colltune.outfile import beside
from colltune.store import default_db_path
from colltune.tuner.measure import Reporter
from colltune.tuner.run import tune


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
    # --arrival both: what the file tuned with the ranks entering together runs there
    together: str | None = None


@dataclass
class AppResult:
    profile: Path
    groups: list[Group]
    entries: list[EntryResult] = field(default_factory=list)
    untuned: list[str] = field(default_factory=list)  # collectives colltune does not tune
    wall_s: float = 0.0
    timing: str = ""
    objective: str = ""
    layout: str | None = None  # the layout the user named (--layouts), else the profile's


def _decision_at(ds: list[Decision], size: int, granularity: int) -> Decision | None:
    want = max(granularity, -(-size // granularity) * granularity)  # as the kernel measures
    if not ds:
        return None
    if any(d.size < 0 for d in ds):  # one decision for every size
        return next(d for d in ds if d.size < 0)
    return next((d for d in ds if d.size == want), None)


class _Replays(Reporter):
    """The user's reporter, and the entry spreads the kernel replayed (the replay's
    accuracy, shown against the profiled spread)."""

    def __init__(self, rep: Reporter) -> None:
        self.rep = rep
        self.spreads: list[float] = []

    def begin(self, total: int, what: str) -> None:
        self.rep.begin(total, what)

    def advance(self, desc: str) -> None:
        self.rep.advance(desc)

    def note(self, text: str) -> None:
        self.rep.note(text)

    def end(self) -> None:
        self.rep.end()

    def replayed(self, spreads: list[float]) -> None:
        self.spreads.extend(spreads)


def _tune_group(g: Group, template: TuneOptions, rep: Reporter, rows: Rows,
                out: Path | None, known: Excluded = frozenset()
                ) -> tuple[list[Decision], Catalog]:
    """One `tune` of group `g` (its layout, its sizes, its share of --point-time), with
    the ranks entering as `rows` replays (empty: together), leaving out the `known`
    points, merged into `out`."""
    coll = get_collective(g.collective).summing(g.datatype)
    scale = min(1.0, max(LEAST_TIME, g.share / FULL_SHARE))
    launch = template.launch or Launch()
    if g.layout is not None:  # asked exactly: the kernel checks where ranks ran
        launch = dataclasses.replace(launch, nodes=g.layout[0], ppn=g.layout[1])
    opts = dataclasses.replace(
        template, collectives=[g.collective], nps=[g.comm_size], launch=launch,
        sizes=g.sizes if coll.has_sizes else None, beyond="library", summary_json=None,
        out=out, excluded=known, settings=dataclasses.replace(
            template.settings, point_time=template.settings.point_time * scale, arrival=rows,
            datatype=g.datatype if coll.reduction else template.settings.datatype))
    where = f" as {g.layout[0]}x{g.layout[1]}" if g.layout else ""
    how = "replaying its arrival pattern" if rows else "ranks entering together"
    how += f", summing {g.datatype}" if coll.reduction else ""
    if g.summed_note:
        rep.note(f"note: {g.summed_note}")
    rep.note(f"{g.collective} at {g.comm_size} ranks{where}, {how}: {100 * g.share:.2f}% of "
             f"the run, sizes {', '.join(map(str, g.sizes))}; {scale:.0%} of --point-time")
    res = tune(opts, rep)
    held = res.summary.get("allocation")
    g.allocation = held if isinstance(held, dict) else None
    return res.decisions.get(g.collective, {}).get(g.comm_size, []), res.catalog


def tune_app_layouts(profile_path: Path, template: TuneOptions, layouts: list[Layout],
                     min_share: float = 0.001, reporter: Reporter | None = None,
                     arrival: str = "auto") -> list[AppResult]:
    """--layouts: the whole profile tuned in each layout the user names (of the profile's
    ranks), in turn; a format that says the layout gathers them in --out, another gets a
    file per layout beside it (rules.2x2.conf), as tune --layouts writes them."""
    ranks = int(load(profile_path)["ranks"])  # type: ignore[call-overload]
    wrong = [f"{n}x{p}" for n, p in layouts if n * p != ranks]
    if wrong:
        raise ColltuneError(f"--layouts {', '.join(wrong)}: the profile's job had {ranks} "
                            "ranks", f"name layouts of {ranks} ranks, e.g. 2x{ranks // 2}"
                            if ranks % 2 == 0 else f"name layouts of {ranks} ranks")
    rep = reporter or Reporter()
    profile = load(profile_path)
    for lay in layouts:  # every layout refused or accepted before the first is launched
        groups, _, _ = plan(profile, min_share)
        place_groups(groups, profile, template, False, rep.note, named=lay)
    out = []
    for lay in layouts:
        rep.note(f"layout {lay[0]}x{lay[1]}: every group in its part of it")
        out.append(tune_app(profile_path, dataclasses.replace(template, layout=f"{lay[0]}x"
                                                              f"{lay[1]}"),
                            min_share, rep, arrival=arrival, named=lay))
    return out


def tune_app(profile_path: Path, template: TuneOptions, min_share: float = 0.001,
             reporter: Reporter | None = None, any_layout: bool = False,
             arrival: str = "auto", named: Layout | None = None) -> AppResult:
    """Tune every group of the profile with `template`'s settings, one --out, each group
    in the layout the profile says it ran in (or its part of the layout `named`),
    replayed as --arrival `arrival` says."""
    if arrival not in MODES:
        raise ColltuneError(f"unknown --arrival '{arrival}'", "use --arrival " + ", ".join(MODES))
    rep = _Replays(reporter or Reporter())
    profile = load(profile_path)
    groups, untuned, wall = plan(profile, min_share)
    inst = check_mpi(profile, template)
    place_groups(groups, profile, template, any_layout, rep.note, named=named)
    cmd = profile.get("command")  # checked by the profile's schema: a list of text
    cwd = profile.get("cwd")  # type: ignore[union-attr]
    key = online_key(inst.key, [str(x) for x in cmd] if isinstance(cmd, list) else [],
                     cwd if isinstance(cwd, str) else None)
    said: set[str] = set()
    for g in groups:
        if g.status != "planned":
            continue
        g.replay, why = choose(g.entries, profile, arrival)
        if why:
            if why not in said:
                rep.note(why)
            said.add(why)
    res = AppResult(profile_path, groups, untuned=untuned, wall_s=wall,
                    timing=template.settings.timing, objective=template.settings.objective,
                    layout=f"{named[0]}x{named[1]}" if named else None)
    catalog: Catalog | None = None
    for g in groups:
        ds: list[Decision] = []
        together: list[Decision] | None = None
        if g.status == "planned":
            known = _known_online(g, key, template, rep)
            try:
                if arrival == "both" and g.replay.rows:  # the same group, ranks entering together
                    sync_out = beside(template.out, "together") if template.out else None
                    together, catalog = _tune_group(g, template, rep, (), sync_out, known)
                rep.spreads = []
                ds, catalog = _tune_group(g, template, rep, g.replay.rows, template.out,
                                          known)
            except ColltuneError as err:
                g.status = f"not run: {err.message}"
                rep.note(f"{g.collective} at {g.comm_size} ranks not tuned: {err.message}")
            else:
                g.status = "measured"
                g.replayed_spread_s = list(rep.spreads) if g.replay.rows else []
        res.entries += _entries(g, ds, together, catalog)
    return res


def _known_online(g: Group, key: str, template: TuneOptions, rep: Reporter) -> Excluded:
    """What the application's own calls under tune online (store key `key`) already
    found wrong or clearly slower at group `g`'s sizes: left out of its measuring, said."""
    coll = get_collective(g.collective)
    sizes = sizes_for(coll, g.comm_size, g.sizes if coll.has_sizes else None)
    known = excluded_for(template.db or default_db_path(), key, g.collective, g.comm_size,
                         g.layout, sizes)
    g.known_online = len(known)
    if known:
        rep.note(f"{g.collective} at {g.comm_size} ranks: {len(known)} (configuration, size) "
                 "point(s) not measured: this application's own calls under tune online "
                 f"found them wrong or over {SLOWER}x slower than the library's choice")
    return known


def _entries(g: Group, ds: list[Decision], together: list[Decision] | None,
             catalog: Catalog | None) -> list[EntryResult]:
    """A group's entries: what the file runs at each size the application called, its
    measured speed-up and expected saving (and what the file tuned together runs)."""
    coll = get_collective(g.collective).summing(g.datatype)
    out = []
    for e in sorted(g.entries, key=lambda e: int(e["size"])):
        d = _decision_at(ds, int(e["size"]), coll.granularity)
        # "tuned?": in the file, not confirmed in fresh launches (--confirm-rounds 0)
        tuned = d is not None and d.verdict.startswith("tuned") and d.chosen != DEFAULT
        speedup = (d.speedup or 1.0) if d is not None and tuned else 1.0
        t = float(e["time_s"]["mean"])
        other = (_decision_at(together, int(e["size"]), coll.granularity)
                 if together is not None else None)
        out.append(EntryResult(
            g.collective, g.comm_size, int(e["size"]), int(e["calls"]), t, float(e["share"]),
            d.chosen.label(catalog, g.collective) if d is not None and catalog else "",
            d.verdict if d is not None else g.status, speedup,
            t * (1 - 1 / speedup) if speedup > 0 else 0.0,
            (other.chosen.label(catalog, g.collective) if other is not None and catalog
             else "-") if together is not None else None))
    return out


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def held_in_all(res: AppResult) -> float:
    """Node-seconds the groups' tunes held of the allocation, together."""
    return round(sum(float(str(g.allocation["node_seconds"])) for g in res.groups
                     if g.allocation), 3)


def as_json(res: AppResult) -> dict[str, object]:
    return {
        "profile": str(res.profile), "wall_s": res.wall_s, "layout": res.layout,
        "timing": res.timing, "objective": res.objective,
        "groups": [{"collective": g.collective, "comm_size": g.comm_size, "sizes": g.sizes,
                    "time_s": g.time_s, "share": g.share, "status": g.status,
                    "layout": f"{g.layout[0]}x{g.layout[1]}" if g.layout else None,
                    "arrival": g.replay.how,
                    "profiled_spread_s": g.replay.profiled_spread_s or None,
                    "replayed_spread_s": _mean(g.replayed_spread_s),
                    "known_from_online": g.known_online,
                    "allocation": g.allocation,
                    "datatype": g.datatype if get_collective(g.collective).reduction
                    else None}
                   for g in res.groups],
        "node_seconds": held_in_all(res),
        "entries": [dataclasses.asdict(e) for e in res.entries],
        "expected_saving_s": sum(e.saving_s for e in res.entries),
        "not_tuned_by_colltune": res.untuned,
    }
