"""Which groups of an application's profile `tune app` measures, and where: each
(collective, communicator size) it called, costliest first, with the share of the
application's wall time that sets its measuring time; the layout each group's calls ran
in, checked against what this job can run before anything is launched; and what a batch
script running `tune app` asks Slurm for.

Where: each group is measured in the layout its calls ran in, as the profile says (the
job's nodes x ranks per node for world-sized communicators, the layout most of a smaller
communicator's instances had), through tune's own launch options; a job that would run it
in another layout is refused before anything is launched, unless --any-layout."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from colltune.apploop.profiling.profile import lacks, load
from colltune.apploop.profiling.replay import Replay
from colltune.backends import registry
from colltune.collectives import COLLECTIVES, DATATYPES, get_collective
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.launchers import Launch, slurm_allocation
from colltune.options import TuneOptions
from colltune.slots import hostfile_hosts_slots, place

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
    layout: tuple[int, int] | None = None  # (nodes, ranks per node) its calls ran in
    # the arrival pattern its calls are replayed with (apploop/profiling/replay.py), and the entry
    # spreads the kernel gave replaying it
    replay: Replay = Replay()
    replayed_spread_s: list[float] = field(default_factory=list)
    # (configuration, size) pairs not measured: the application's own calls under tune
    # online found them wrong or clearly slower (apploop/online/for_app.py)
    known_online: int = 0
    # what its tune held of the allocation (core/account.py's summary; None: not tuned)
    allocation: dict[str, object] | None = None
    # what its reduction's calls summed (the costliest where they differ), as its tune sums
    # it; `summed_note` says what the tune could not sum as the calls did
    datatype: str = "double"
    summed_note: str = ""

    @property
    def sizes(self) -> list[int]:
        return sorted({int(e["size"]) for e in self.entries})


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
        if int(e["size"]) <= 0 and COLLECTIVES[e["collective"]].size_dependent:
            # calls that move no data (GROMACS broadcasts empty buffers) leave no choice
            # to make, and a tune of 0 B is refused: the group is tuned without them
            untuned.append(f"{e['collective']} ({e['comm_size']} ranks, 0 B: no data)")
            continue
        by.setdefault((e["collective"], int(e["comm_size"])), []).append(e)
    groups = []
    for (name, n), es in by.items():
        t = sum(float(e["time_s"]["mean"]) * int(e["ranks"]) for e in es) / int(profile["ranks"])
        dt, why = summed(name, n, es)
        g = Group(name, n, es, t, t / wall if wall > 0 else 0.0, datatype=dt, summed_note=why)
        if g.share < min_share:
            g.status = f"below --min-share ({100 * g.share:.3f}% of the run)"
        groups.append(g)
    groups.sort(key=lambda g: (-g.time_s, g.collective, g.comm_size))
    return groups, untuned, wall


def summed(name: str, n: int, entries: list[dict]) -> tuple[str, str]:  # type: ignore[type-arg]
    """What a group's tune sums: the datatype its costliest calls summed (a profile says it
    per reduction entry; one made before it did, or a collective that sums nothing: double),
    and what it could not time as the calls were made (another datatype at other sizes, a
    type the kernel does not sum, calls of several types in one entry)."""
    cost: dict[str, float] = {}
    for e in entries:
        if e.get("datatype"):
            d = str(e["datatype"])
            cost[d] = cost.get(d, 0.0) + float(e["time_s"]["mean"]) * int(e["ranks"])
    if not cost:
        return "double", ""
    top = max(cost, key=lambda d: (cost[d], d))
    chosen = top if top in DATATYPES else "double"
    if len(cost) == 1 and top == chosen:
        return chosen, ""
    what = {"other": "a type the kernel does not sum (complex, derived)",
            "mixed": "several types at one size"}
    parts = ", ".join(what.get(d, d) for d in sorted(cost, key=lambda d: -cost[d]))
    return chosen, (f"{name} at {n} ranks sums {parts}: tuned summing {chosen} (the "
                    "costliest calls' type, double where the kernel cannot sum it)")


Layout = tuple[int, int]  # nodes, ranks per node


def _named(lay: Layout) -> str:
    return f"{lay[0]}x{lay[1]} ({lay[0]} node(s) x {lay[1]} ranks)"


def group_layout(g: Group, profile: dict) -> Layout | None:  # type: ignore[type-arg]
    """The layout a group's calls ran in: the job's for a communicator of every rank, else
    the one most of the communicator's sampled instances had; None where the profile does
    not say (an older profile, or no call of it sampled on every member)."""
    job = profile.get("layout")
    if not isinstance(job, dict):
        return None
    if g.comm_size == int(profile["ranks"]):  # type: ignore[call-overload]
        return int(job["nodes"]), int(job["ppn"])
    seen: Counter[str] = Counter()
    for e in g.entries:
        for name, count in ((e.get("arrival") or {}).get("layouts") or {}).items():
            seen[name] += int(count)
    if seen:
        nodes, ppn = seen.most_common(1)[0][0].split("x")
        return int(nodes), int(ppn)
    return (1, g.comm_size) if int(job["nodes"]) == 1 else None


def job_layout(np: int, want: Layout, template: TuneOptions,
               env: Mapping[str, str]) -> Layout:
    """The layout this job would run `np` ranks in when asked for `want`: `want` where the
    nodes are there (a Slurm allocation, a hostfile, the user's --launcher-args), else what
    the user's options or this machine give."""
    launch = template.launch or Launch()
    if launch.nodes or launch.ppn:  # the user said where: that is what runs
        p = place(np, template.hostfile, env, launch)
        return p.nodes, p.ppn
    alloc = slurm_allocation(env)
    if alloc is not None:
        nodes = alloc.nodes
    elif template.hostfile:
        nodes = sum(1 for _, slots in hostfile_hosts_slots(template.hostfile)
                    if slots >= want[1])
    elif launch.args:
        return want  # the user's own mapping: the kernel checks where the ranks ran
    else:
        nodes = 1
    if want[0] <= nodes:
        return want
    p = place(np, template.hostfile, env, launch)
    return p.nodes, p.ppn


def check_mpi(profile: dict, template: TuneOptions) -> Installation:  # type: ignore[type-arg]
    """Refuse to tune another MPI than the one the application ran on (its ranks' own
    library version string, recorded in the profile), naming both; the installation
    tuned. The profile's prefix is data: compared, never run."""
    fam: dict[str, str] = profile["mpi"]
    backend = registry.named(template.backend)
    inst = backend.with_apps().find(template.mpi)
    lib = fam.get("library") or ""
    same = (fam.get("backend", backend.name) == backend.name
            and (inst.runs_on(lib) if lib else inst.version == fam["version"]))
    if not same:
        raise ColltuneError(f"the profile was recorded on {fam['name']} {fam['version']}; "
                            f"this job would tune {inst.describe()}",
                            "pass --mpi with the prefix of the MPI the application ran on "
                            "(and --backend)")
    return inst


def within(comm_size: int, job: Layout) -> Layout:
    """The layout of a communicator of `comm_size` consecutive ranks of a job laid out as
    `job` (ranks filling a node before the next, as launchers place them by default)."""
    return -(-comm_size // job[1]), min(comm_size, job[1])


def place_groups(groups: list[Group], profile: dict, template: TuneOptions,  # type: ignore[type-arg]
                 any_layout: bool, note: Callable[[str], None],
                 env: Mapping[str, str] | None = None, named: Layout | None = None) -> None:
    """Each planned group's layout, checked against what this job can run before anything
    is launched: another layout is refused (naming both), or with `any_layout` said once.
    `named`: a layout the user named (--layouts) instead of the profile's, each group in
    its consecutive ranks' part of it."""
    env = os.environ if env is None else env
    if named is not None:
        for g in groups:
            if g.status != "planned":
                continue
            g.layout = within(g.comm_size, named)
            got = job_layout(g.comm_size, g.layout, template, env)
            if got != g.layout:
                raise ColltuneError(
                    f"--layouts {named[0]}x{named[1]}: {g.collective} at {g.comm_size} ranks "
                    f"would run as {_named(got)}, not {_named(g.layout)}",
                    "run tune app where that layout can run (a hostfile or Slurm allocation "
                    "with those nodes)")
        return
    missing = lacks(profile)
    if missing:
        note(f"note: the profile (version {profile['version']}) does not say "
             + " or ".join(missing) + ": tuned in this job's layout, ranks entering "
             "together (tune profile with this colltune records both)")
    for g in groups:
        if g.status != "planned":
            continue
        g.layout = group_layout(g, profile)
        if g.layout is None:
            continue
        got = job_layout(g.comm_size, g.layout, template, env)
        if got == g.layout:
            continue
        what = (f"the profile ran {g.collective} at {g.comm_size} ranks as "
                f"{_named(g.layout)}; this job would run it as {_named(got)}")
        if not any_layout:
            raise ColltuneError(what, "run tune app where the application ran (--hostfile, "
                                "a Slurm allocation of those nodes, --nodes/--ppn), or "
                                "pass --any-layout to tune in this one anyway")
        note(f"warning: {what} (--any-layout): its best choice may differ there")
        g.layout = None


@dataclass
class ScriptPlan:
    """What a batch script running `tune app` asks Slurm for: the profile's layout, and
    what its groups' plans measure (for the time limit)."""

    np: int
    nodes: int
    ppn: int
    points: int
    point_time: float  # the mean over points: each group measures at its share
    launches: int


def script_plan(profile_path: Path, template: TuneOptions, min_share: float = 0.001
                ) -> ScriptPlan:
    """The allocation and plan of a batch job that runs `tune app` on this profile."""
    from colltune.core.plan import Plan

    profile = load(profile_path)
    job = profile.get("layout")
    if not isinstance(job, dict):
        raise ColltuneError(f"{profile_path} does not say where its ranks ran (profile "
                            f"version {profile['version']}): the script's allocation "
                            "cannot be sized", "profile the application with this colltune")
    groups, _, _ = plan(profile, min_share)
    planned = [g for g in groups if g.status == "planned"]
    family = registry.named(template.backend)
    cat = family.plan_catalog(sorted({g.collective for g in planned}))
    if cat is None:
        raise ColltuneError(f"--slurm-script sizes the job from the plan, and {family.name}"
                            "'s algorithms are known only from the installation",
                            "run tune app --mpi PREFIX inside your own batch job")
    points, budget = 0, 0.0
    for g in planned:
        coll = get_collective(g.collective).summing(g.datatype)
        n = Plan(cat, cat.grid(template.params, template.segsizes),
                 g.sizes if coll.has_sizes else None).count([coll], [g.comm_size])
        points += n
        budget += n * template.settings.point_time * min(1.0, max(LEAST_TIME,
                                                                  g.share / FULL_SHARE))
    return ScriptPlan(int(profile["ranks"]), int(job["nodes"]), int(job["ppn"]),  # type: ignore[call-overload]
                      points, budget / max(points, 1), len(planned))
