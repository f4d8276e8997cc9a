"""Measure the points of a plan with the kernel, store each result as it arrives, survive hangs."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from colltune import jobdir
from colltune.backends.base import Backend
from colltune.backends.registry import of
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import PointResult
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import (
    KernelConfig,
    KernelPlan,
    LaunchOutcome,
    Repetitions,
    parse_result,
    run_kernel,
)
from colltune.options import MeasureSettings
from colltune.slots import Placement
from colltune.store import Context, Store
from colltune.tuner.bands import pack


class Reporter:
    """Progress callbacks; the CLI draws a progress bar, the API stays silent."""

    def begin(self, total: int, what: str) -> None: ...
    def advance(self, desc: str) -> None: ...
    def note(self, text: str) -> None: ...
    def end(self) -> None: ...
    # each repetition's entry spread a point replayed (an arrival pattern: tune app shows
    # the replay's accuracy against the profiled spread)
    def replayed(self, spreads: list[float]) -> None: ...


def check_placed(p: Placement, start: dict) -> None:
    """Refuse a launch that placed its ranks otherwise than the exact layout asked for
    (--nodes x --ppn = --np, --layouts, or a hostfile's slots filled host by host), before
    it measures: every measurement is recorded with that layout.
    `start`: the kernel's start event, with the nodes and most ranks a node it found."""
    asked = (p.nodes, p.ppn)
    got = (int(start.get("nodes") or 0), int(start.get("ppn") or 0))
    exact = p.nodes * p.ppn == p.np  # else the launcher may fill fewer nodes, as asked
    if (p.launch.nodes or p.launch.ppn or p.hostfile) and exact and got[0] and got != asked:
        raise ColltuneError(
            f"asked for {p.np} ranks as {asked[0]} node(s) x {asked[1]}, the launcher placed "
            f"them as {got[0]} node(s) x {got[1]} (ranks sharing memory counted as a node)",
            "give the launcher the nodes and slots for that layout (a hostfile with enough "
            "slots, or a Slurm allocation of those nodes), or pass its mapping options "
            "with --launcher-args")


def arrival_key(rows: tuple[tuple[float, ...], ...]) -> str:
    """What an installation key gains where the kernel replays an arrival pattern (`rows`,
    Repetitions.arrival): a point timed with the ranks entering as an application's did is
    another measurement than one timed with them entering together, kept apart in the
    store as coll/han's choices are ("+han"), one key per pattern as the kernel reads it."""
    if not rows:
        return ""
    text = "\n".join(Repetitions(arrival=rows).arrival_lines())
    return "~arrival=" + hashlib.sha256(text.encode()).hexdigest()[:12]


def point_key(reps: Repetitions | None) -> str:
    """What an installation key gains for points taken as `reps` says: under a replayed
    arrival pattern, or from an application's own calls (`origin`, tune online)."""
    if reps is None:
        return ""
    return arrival_key(reps.arrival) + (f"~{reps.origin}" if reps.origin else "")


def context_for(mpi: Installation, coll: Collective, placement: Placement,
                reps: Repetitions | None = None) -> Context:
    return Context(mpi.key + point_key(reps) + coll.datatype_key, mpi.name, mpi.version,
                   str(mpi.prefix),
                   socket.gethostname(), placement.np, placement.ppn, placement.nodes,
                   coll.name, of(mpi).name)


Lane = tuple[Placement, list[tuple[Config, int]]]  # a communicator size and its points
Slot = tuple[int, Config]  # (lane, configuration): one kernel configuration id
Band = dict[int, tuple[Slot, int]]  # size measured -> the point it stands for (bands.pack)
Group = tuple[str, list[tuple[Slot, int]], Band | None]  # a launch: how, its points, band


def shares_default_launch(be: Backend[Any], sweep: str) -> bool:
    """Whether the default needs no launches of its own to pool: MPI_T switches every
    configuration inside its launch, or times repeat exactly (a simulation)."""
    return be.traits.exact or sweep == "mpit"


@dataclass(frozen=True)
class Lab:
    """Where and how points are measured: the installation and its catalog, the store each
    result goes to as it arrives, the kernel's settings, the sweep (mpit: every
    configuration switched through MPI_T in one launch; relaunch; bands), and progress."""

    mpi: Installation
    catalog: Catalog
    store: Store
    settings: MeasureSettings
    sweep: str = "mpit"
    rep: Reporter = field(default_factory=Reporter)


@dataclass
class _Job:
    """One measuring job's fixed parts: the lanes it launches, the kernel, each slot's
    kernel configuration id, and the configurations set at launch (via_env)."""

    coll: Collective
    lanes: list[Lane]
    exe: Path
    cid_of: dict[Slot, int]
    via_env: set[Config]


def measure(lab: Lab, coll: Collective, placement: Placement,
            points: list[tuple[Config, int]], extend: bool = False
            ) -> list[tuple[Config, PointResult]]:
    """Measure every (config, size) not yet in the store; returns the failures seen.
    With `extend`, every point is measured and its new repetitions are added to what the
    store holds (the searches that come back to a point)."""
    return [(c, r) for _, c, r in measure_lanes(lab, coll, [(placement, points)], extend)]


def measure_lanes(lab: Lab, coll: Collective, lanes: list[Lane], extend: bool = False
                  ) -> list[tuple[Placement, Config, PointResult]]:
    """`measure` for several communicator sizes of one launch (a ladder: every lane's
    placement is launched as the same job) in as few launches as one would need."""
    mpi, store, rep = lab.mpi, lab.store, lab.rep
    launched = {id(p.launched) for p, _ in lanes}
    assert len(launched) == 1, "lanes of one launch only"
    ctxs = [context_for(mpi, coll, p, lab.settings) for p, _ in lanes]
    todo: list[tuple[Slot, int]] = []
    for i, (_, points) in enumerate(lanes):
        done = set() if extend else store.done(ctxs[i])
        todo += [((i, c), s) for c, s in points if (c.key, s) not in done]
    failures: list[tuple[Placement, Config, PointResult]] = []
    if not todo:
        return failures
    slots = sorted({sl for sl, _ in todo})
    be = of(mpi)
    # where the session does not sweep through MPI_T (SMPI has no MPI_T variables, MVAPICH2
    # reads its own once, in MPI_Init), every configuration is its own launch
    job = _Job(coll, lanes, build_kernel(mpi, on_rebuild=rep.note),
               {sl: i for i, sl in enumerate(slots)},
               set() if lab.sweep == "mpit" else {c for _, c in slots})
    todo_set = set(todo)

    def record(sl: Slot, r: PointResult, how: str = "", again: int = 0) -> None:
        lane, cfg = sl
        if again:  # the default's further launches pool into its point: "relaunch x3"
            store.extend(ctxs[lane], cfg, r, f"relaunch x{again}", retag=True)
        else:
            (store.extend if extend else store.add)(
                ctxs[lane], cfg, r, how or ("relaunch" if cfg in job.via_env else "mpit"))
        todo_set.discard((sl, r.size))
        if r.status != "ok":
            failures.append((lanes[lane][0], cfg, r))
        rep.advance(f"{coll.name} {cfg.label(lab.catalog, coll.name)} {r.size} B: {r.status}")

    # the library's own choice keeps a launch of its own: no file may touch the reference
    banded = {c for c in job.via_env if c != DEFAULT} if (
        lab.sweep == "bands" and be.bands is not None and len(lanes) == 1 and coll.has_sizes
    ) else set()
    # the reference's further launches: only in a first measurement of its points
    repeats = 1 if extend or shares_default_launch(be, lab.sweep) else \
        lab.settings.default_launches
    extra = sum(1 for (_, c), _ in todo if c == DEFAULT and c in job.via_env - banded)
    rep.begin(len(todo) + extra * max(0, repeats - 1),
              f"{coll.name} np={','.join(str(p.np) for p, _ in lanes)}")
    told = _Told()
    while todo_set:
        runs = _spread([(g, 0) for g in _groups(sorted(todo_set), job, banded) if g[1]],
                       repeats)
        repeats = 1  # a pass after a failure measures what is left, once
        if not _pass(lab, job, runs, todo_set, record, ctxs[0], told):
            raise MPIError(f"no progress measuring {coll.name} at np="
                           f"{','.join(str(p.np) for p, _ in lanes)}",
                           "run with a larger --timeout, or report the kernel output")
    rep.end()
    return failures


@dataclass
class _Told:
    """What one measurement said once: the timer, a rebuilt kernel."""

    timer: bool = False
    rebuilt: bool = False


def _groups(batch: list[tuple[Slot, int]], job: _Job, banded: set[Config]) -> list[Group]:
    """One launch for everything MPI_T can switch, as few as the sizes allow for what a
    file selects by size, one per configuration for the rest."""
    groups: list[Group] = [("mpit", [p for p in batch if p[0][1] not in job.via_env], None)]
    groups += [("bands", list(b.values()), b) for b in pack(
        [p for p in batch if p[0][1] in banded], job.coll.granularity)]
    groups += [("relaunch", [p for p in batch if p[0][1] == c], None)
               for c in sorted(job.via_env - banded)]
    return groups


def _pass(lab: Lab, job: _Job, runs: list[tuple[Group, int]],
          todo_set: set[tuple[Slot, int]], record: Callable[..., None], ctx: Context,
          told: _Told) -> bool:
    """One pass of launches over what is left; whether it got anywhere."""
    progressed = False
    for (how, group, band), again in runs:
        outcome, got = _launch(lab, job, group, how,
                               functools.partial(record, again=again), band)
        if outcome.timer and not told.timer:
            _timer(lab.store, ctx, outcome.timer, lab.rep)
            told.timer = True
        if outcome.launcher_retries:
            lab.rep.note(f"warning: the launch failed or hung {outcome.launcher_retries} "
                         "time(s) before the kernel started; relaunched")
        if outcome.status == "nopmi":  # no launch like this one will do better
            cause, fix = outcome.message.split(", so ", 1)
            raise MPIError(f"{cause}: {fix.split(': ', 1)[0]}", fix.split(": ", 1)[1])
        if outcome.status == "mismatch":  # killed before it measured anything
            _rebuild(lab, job, outcome, told)
            return True
        progressed = progressed or got > 0
        if outcome.status != "ok":
            _blame(outcome, group, job.cid_of, how,
                   group if again else sorted(todo_set),
                   functools.partial(record, how="", again=again),
                   smaller_survive=of(lab.mpi).traits.exact)
            progressed = True
            if how != "relaunch":
                break  # relaunch with what is left
    return progressed


def _rebuild(lab: Lab, job: _Job, outcome: LaunchOutcome, told: _Told) -> None:
    """The kernel ran on another MPI's libraries: rebuild it once, then give up. A kernel
    that reports the right version from a file outside the prefix was given it by the
    environment: no rebuild changes that."""
    if lab.mpi.runs_on(str(outcome.library)):
        raise MPIError(outcome.message, "`module unload` the other MPI, or remove its "
                       "directory from LD_LIBRARY_PATH and LD_PRELOAD")
    if told.rebuilt:
        raise MPIError(
            f"{outcome.message} (rebuilt once, it still does)",
            "check LD_LIBRARY_PATH and LD_PRELOAD: `module unload` the other MPI")
    lab.rep.note(f"warning: {outcome.message}; rebuilding it")
    job.exe = build_kernel(lab.mpi, force=True)
    told.rebuilt = True


def _spread(runs: list[tuple[Group, int]], repeats: int) -> list[tuple[Group, int]]:
    """The default's own launch (a launch per configuration) repeated `repeats` times,
    evenly over the other launches (first, ..., last): what every configuration is
    compared with then pools launches from the whole sweep. The number is its count."""
    mine = [r for r in runs if r[0][0] == "relaunch" and {c for (_, c), _ in r[0][1]}
            == {DEFAULT}]
    if repeats < 2 or not mine:
        return runs
    others = [r for r in runs if r is not mine[0]]
    at = [int(i * len(others) / (repeats - 1) + 0.5) for i in range(repeats)]
    out: list[tuple[Group, int]] = []
    for i in range(len(others) + 1):
        out += [(mine[0][0], 0 if j == 0 else j + 1) for j, a in enumerate(at) if a == i]
        out += others[i:i + 1]
    return out


COARSE_TIMER = 1e-7  # a step of MPI_Wtime this long or longer is worth telling


def _timer(store: Store, ctx: Context, timer: tuple[float, float], rep: Reporter) -> None:
    """Record what MPI_Wtime resolves; say so where it is coarse (MVAPICH2 2.3.7: 2^-22 s)."""
    wtick, step = timer
    if not store.readonly:
        store.add_timer(ctx.mpi_key, ctx.host, wtick, step)
    if step >= COARSE_TIMER:
        rep.note(f"note: MPI_Wtime resolves {step * 1e6:.3g} us here (MPI_Wtick says "
                 f"{wtick * 1e6:.3g} us): calls shorter than {100 * step * 1e6:.3g} us are "
                 "timed in batches of consecutive calls")


def _blame(outcome: LaunchOutcome, group: list[tuple[Slot, int]], cid_of: dict[Slot, int],
           sweep: str, remaining: list[tuple[Slot, int]],
           record: Callable[[Slot, PointResult], None], smaller_survive: bool = False
           ) -> None:
    """Record the point a dead launch was measuring as timed out or crashed, and exclude
    the rest of its configuration (a configuration that hung once costs no more time).
    With `smaller_survive` (a simulation that ran out of time: the cost grows with the
    size) only the larger sizes are excluded; the smaller ones go to a new launch."""
    by_cid = {v: k for k, v in cid_of.items()}
    stuck_slot = by_cid.get(outcome.stuck_cid) if outcome.stuck_cid is not None else None
    if stuck_slot is None and sweep == "relaunch":
        stuck_slot = group[0][0]
    if stuck_slot is None:
        raise MPIError(
            f"the MPI job failed before measuring anything ({outcome.status}): {outcome.message}",
            "check that this MPI runs a hello-world with the same --np; see the error above")
    mine = [s for c, s in remaining if c == stuck_slot]
    stuck_size = outcome.stuck[1] if outcome.stuck and outcome.stuck[1] in mine else mine[0]
    for s in mine:
        if smaller_survive and s < stuck_size:
            continue
        if s == stuck_size:
            r = PointResult(cid_of[stuck_slot], s, outcome.status, message=outcome.message)
        else:
            r = PointResult(cid_of[stuck_slot], s, "skipped",
                            message=f"configuration {outcome.status} at {stuck_size} B; excluded")
        record(stuck_slot, r)


def _launch(lab: Lab, job: _Job, group: list[tuple[Slot, int]], sweep: str,
            record: Callable[[Slot, PointResult, str], None], band: Band | None = None
            ) -> tuple[LaunchOutcome, int]:
    mpi, catalog, coll, lanes, cid_of, via_env, settings = (
        lab.mpi, lab.catalog, job.coll, job.lanes, job.cid_of, job.via_env, lab.settings)
    slots = sorted({sl for sl, _ in group})
    be = of(mpi)
    # the band's file: a directory of its own, made fresh and removed after the launch
    folder = jobdir.temporary(prefix="colltune-bands-") if band else None
    if sweep == "mpit":
        env_extra = be.mpit_env()
        kcfgs = [KernelConfig(cid_of[sl], be.mpit_vars(catalog, coll, sl[1]),
                              lanes[sl[0]][0].group, baseline=sl[1] == DEFAULT,
                              select=be.selects.name(catalog, coll, sl[1])
                              if be.selects is not None else "")
                 for sl in slots]
    else:
        assert band is not None or len({c for _, c in slots}) == 1
        env_extra = (be.bands.env(coll, lanes[0][0].np,
                                   {m: p[0][1] for m, p in band.items()}, Path(folder.name))
                     if band is not None and folder is not None and be.bands is not None
                     else be.forcing_env(catalog, coll, slots[0][1]))
        kcfgs = [KernelConfig(cid_of[sl], {}, lanes[sl[0]][0].group) for sl in slots]
    points = ([(cid_of[sl], m) for m, (sl, _) in sorted(band.items())] if band is not None
              else [(cid_of[sl], s) for sl, s in group])
    plan = KernelPlan(coll.name, kcfgs, points, settings,
                      dup_always=sweep == "mpit" or not be.traits.on_world,
                      ordered=be.traits.exact,
                      pvars=be.traits.pvar_prefix, datatype=coll.datatype)
    slot_by_cid = {cid_of[sl]: sl for sl in slots}
    count = 0
    launched = lanes[0][0].launched

    def on_event(ev: dict) -> None:
        nonlocal count
        if ev["event"] == "start":
            check_placed(launched, ev)
        elif ev["event"] == "result":
            r = parse_result(ev)
            if r.arrival_spread:
                lab.rep.replayed(r.arrival_spread)
            if band is None:
                record(slot_by_cid[r.cid], r, "")
            else:  # stored at the size it stands for, the size measured in its sweep tag
                sl, size = band[r.size]
                record(sl, replace(r, size=size), f"bands:{r.size}")
            count += 1
        elif ev["event"] == "rejected":
            sl = slot_by_cid[int(ev["cid"])]
            if "not settable through MPI_T" in str(ev.get("message")):
                via_env.add(sl[1])  # set it at launch instead
                count += 1
                return
            for other, s in group:
                if other == sl:
                    record(sl, PointResult(cid_of[sl], s, "rejected",
                                           message=str(ev["message"])), "")
                    count += 1

    cmd, env = be.launch(mpi, launched, coll.name, slots[0][1].algorithm, env_extra)
    with folder or contextlib.nullcontext():
        outcome = run_kernel(cmd, job.exe, plan, env, point_timeout=settings.timeout,
                             starting=max(120.0, settings.timeout), on_event=on_event,
                             runs_on=mpi)
    if band is not None and outcome.stuck and outcome.stuck[1] in band:
        outcome = replace(outcome, stuck=(outcome.stuck[0], band[outcome.stuck[1]][1]))
    return outcome, count
