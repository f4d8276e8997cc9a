"""`tune online`: tune inside the application's own run. The application runs once with
kernel/collonline.c preloaded, which tries the family's candidate configurations on a share
of each call group's calls and times them as the application made them; its evidence is
stored (a store key of its own: `~online=<digest of the command>`) and the file is decided
from it with tune's own statistics and written by the family's writer (tune --from-db)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy
from scipy import stats

from colltune import jobdir
from colltune.apploop.online_known import SLOWER, skip_lines
from colltune.apploop.profile import inject, launch_timed
from colltune.backends import registry
from colltune.backends.base import Backend
from colltune.collectives import get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, MPIError, TimedOut, parse_json, read_text
from colltune.kernel.build import build_kernel
from colltune.options import TuneOptions
from colltune.outfile import check_destination, write_atomic
from colltune.slots import place
from colltune.store import Context, Store
from colltune.tuner.measure import Reporter
from colltune.tuner.run import tune

LAYER = "collonline"
MAX_CANDIDATES = 39  # kernel/online.h's MAXC, less the library's own choice
# what the layer wraps (kernel/collonline.c's NAMES): every other call passes untouched
COLLECTIVES = ("allreduce", "bcast", "reduce", "allgather", "alltoall", "barrier")


@dataclass
class OnlineRequest:
    """One `tune online` run: the application's command, the output and the store, the
    family and installation, and the layer's exploration rules."""

    cmd: list[str]
    out: Path
    db: Path
    backend: str = "openmpi"
    prefix: str | None = None
    share: float = 0.1  # at most this fraction of a group's calls explore
    min_calls: int = 64  # a group with fewer calls is never explored
    batch: int = 32  # calls between two reductions of the times
    # successive halving: every candidate gets `first` calls, the faster half twice as
    # many, and so on until one is left with `samples` (kernel/collonline.c, next_round)
    samples: int = 32
    # 8, not 4: on the imbalance program the true winner's first 4 calls were 1.5x the
    # library's median in 1 run of 7, and it was dropped (docs/benchmarks.md, tune online)
    first: int = 8
    timeout: float | None = None
    evidence: Path | None = None  # a directory the layer's own files are copied into
    flush: float = 1.0  # the layer writes what it learned so far every this many seconds


@dataclass
class OnlineGroup:
    """One call group of the run, as the layer reported it."""

    collective: str
    comm_size: int
    size: int  # the per-rank block of its first call
    calls: int
    explored: bool
    kept: int  # the configuration the run kept for its last calls (0: the library's)
    times: dict[int, list[float]]  # configuration id -> the slowest rank's time per call
    dropped: list[int]
    decision: Decision | None = None
    pruned: list[int] = field(default_factory=list)  # not explored: the store knew them slower
    wrong: list[int] = field(default_factory=list)  # answered unlike the library's choice
    halved: list[int] = field(default_factory=list)  # out at a round's end: the slower half
    # (nodes, ranks on the fullest node) of its communicator, as the layer counted hosts
    layout: tuple[int, int] = (1, 1)
    # the plan's id of each configuration -> what it runs (0: the library's own choice)
    configs: dict[int, Config] = field(default_factory=dict)

    def config(self, ident: int) -> Config:
        """What the plan's `ident` runs."""
        return self.configs.get(ident) or (Config(ident) if ident else DEFAULT)

    def ident(self, cfg: Config) -> int | None:
        """The plan's id of `cfg` in this group (None: not one of its configurations)."""
        return next((k for k in self.times if self.config(k) == cfg), None)


@dataclass
class OnlineResult:
    cmd: list[str]
    out: Path
    wall_s: float
    groups: list[OnlineGroup] = field(default_factory=list)
    agreed: bool = True  # every rank ran the same configuration for the same call
    stdout: str = ""
    notes: list[str] = field(default_factory=list)
    layer_s: float = 0.0  # the most a rank spent in the layer's own work (layer_seconds)


# segment sizes tried beside each segmenting algorithm's run without segments (what it
# runs with the library's own parameters when forced): small, middle and large; each only
# on calls larger than itself (one segment would be the unsegmented run again)
SEGMENTS = (1024, 8192, 65536)
VARIANT_IDS = 1000  # a variant's plan id: this plus its place among its collective's


@dataclass(frozen=True)
class Candidate:
    """One line of the layer's plan: what it sets and the id the layer reports it by."""

    collective: str
    ident: int  # the algorithm's number for its library-parameter run; VARIANT_IDS + n
    config: Config
    writes: dict[str, int]
    below: int = 0  # its segment size: never tried on calls of this many bytes or fewer

    def line(self) -> str:
        return (f"cand {self.collective} {self.ident} {len(self.writes)} "
                + " ".join(f"{k} {int(v)}" for k, v in self.writes.items())
                + (f" below {self.below}" if self.below else ""))


def _variants(catalog: Catalog, name: str, alg: int) -> list[tuple[Config, int]]:
    """Algorithm `alg` with the library's own parameters, then with each of SEGMENTS for a
    segment-like parameter it takes (its segment size beside it)."""
    takes = catalog.param_values(name, alg, 4, {})
    segs = [p.name for p in catalog.declared() if p.below_message and p.name in takes]
    return [(Config(alg), 0)] + [(Config.of(alg, {p: v}), v) for p in segs for v in SEGMENTS]


def _candidates(backend: Backend[Any], catalog: Catalog) -> list[Candidate]:
    """Every algorithm the catalog lists for a wrapped collective, with the control
    variables that force it, and its segment-size variants."""
    out = []
    for name in COLLECTIVES:
        coll = get_collective(name)
        n = 0
        for alg in sorted(a for a in catalog.algorithms.get(name, {}) if a > 0):
            for cfg, below in _variants(catalog, name, alg):
                writes = backend.mpit_vars(catalog, coll, cfg)
                if not writes or len(writes) > 6:
                    continue
                for var in writes:
                    if not var.replace("_", "").isalnum():
                        raise ColltuneError(f"a control variable named {var!r} cannot go "
                                            "into the layer's plan", "report this")
                ident = alg if not cfg.params else VARIANT_IDS + n
                n += bool(cfg.params)
                out.append(Candidate(name, ident, cfg, writes, below))
    return _fit(out)


def _fit(cands: list[Candidate]) -> list[Candidate]:
    """At most the layer's MAXC - 1 candidates per collective (kernel/online.h): the
    library-parameter runs first, then the variants in order."""
    kept: dict[str, int] = defaultdict(int)
    out = []
    for c in sorted(cands, key=lambda c: (c.collective, bool(c.config.params))):
        if kept[c.collective] < MAX_CANDIDATES:
            kept[c.collective] += 1
            out.append(c)
    return out


def ids_of(cands: list[Candidate]) -> dict[str, dict[int, Config]]:
    """Per collective, the plan's id -> the configuration it runs (0: the library's)."""
    out: dict[str, dict[int, Config]] = defaultdict(lambda: {0: DEFAULT})
    for c in cands:
        out[c.collective][c.ident] = c.config
    return dict(out)


def _known(req: OnlineRequest, mpi_key: str, cands: list[Candidate], rep: Reporter
           ) -> list[str]:
    """The candidate lines, and a `skip` line for each candidate the store (--db) already
    measured clearly slower at a communicator size and size bucket (apploop/online_known)."""
    skips = skip_lines(req.db, mpi_key, ids_of(cands))
    if skips:
        rep.note(f"{len(skips)} candidate(s) not explored where the store already measured "
                 f"them over {SLOWER}x slower than the fastest ({req.db})")
    return [c.line() for c in cands] + skips


def plan_text(req: OnlineRequest, switch: str, candidates: list[str]) -> str:
    return "\n".join([f"share {req.share}", f"min_calls {req.min_calls}",
                      f"batch {req.batch}", f"samples {req.samples}", f"first {req.first}",
                      f"drop {SLOWER}",
                      f"flush {req.flush}", f"switch {switch}", *candidates]) + "\n"


def origin_of(cmd: list[str]) -> str:
    """The store key's tag of an application's run: its command, digested (the launcher's
    own options included: another layout is another run)."""
    return "online=" + hashlib.sha256("\0".join(cmd).encode()).hexdigest()[:12]


def _schedules(folder: Path, ended: bool = True) -> dict[int, list[str]]:
    """Each rank's schedule lines (schedule.RANK; its head line names the rank's host and
    the world's size, which says how many there must be). `ended`: the run reached
    MPI_Finalize, so every rank of the job must have written its final one (a missing or
    partial one: the layer said why on its stderr, or a rank never finalized)."""
    lines: dict[int, list[str]] = {}
    world, partial = 0, []
    for f in folder.glob("schedule.*"):
        if not f.name.split(".", 1)[1].isdigit():  # a .tmp a killed rank left
            continue
        rank = int(f.name.split(".", 1)[1])
        body = read_text(f).splitlines()
        head = _head(body[0] if body else "")
        if head is not None:
            world = max(world, head[0])
            body = body[1:]
            if head[2]:
                partial.append(rank)
        lines[rank] = body
    missing = sorted(set(range(world)) - set(lines))
    if ended and missing:
        raise MPIError(f"rank(s) {', '.join(map(str, missing[:8]))} of {world} wrote no "
                       "schedule: nothing written", "see the application's stderr for the "
                       "layer's reason (a job directory other nodes do not see?)")
    if ended and partial:
        raise MPIError(f"rank(s) {', '.join(map(str, partial[:8]))} ended without "
                       "MPI_Finalize: their schedules are partial; nothing written",
                       "tune online needs an application that finalizes MPI")
    return lines


def _head(line: str) -> tuple[int, float, bool] | None:
    """A schedule's head line, `host H world N overhead S [partial]`: the world's size, the
    seconds the rank spent in the layer's own work, and whether the run was still going
    (None: not a head line)."""
    w = line.split()
    if len(w) not in (6, 7) or w[0] != "host" or w[2] != "world" or w[4] != "overhead" \
            or w[6:] not in ([], ["partial"]):
        return None
    try:
        world, spent = int(w[3]), float(w[5])
    except ValueError:
        return None
    return (world, spent, bool(w[6:])) if world > 0 and 0 <= spent < 1e7 else None


def layer_seconds(folder: Path) -> float:
    """The most any rank spent in the layer's own work (its schedule's head line): what
    the layer cost the run beyond its candidates' calls, the slowest rank holding the
    others up at the next collective."""
    spent = [h[1] for f in folder.glob("schedule.*") if f.name.split(".", 1)[1].isdigit()
             for h in [_head(read_text(f).split("\n", 1)[0])] if h is not None]
    return max(spent, default=0.0)


def agreed(lines: dict[int, list[str]]) -> bool:
    """Whether every member of each communicator ran the same configurations in the same
    order for each of its groups (the digest of the sequence and the counts per
    configuration): each line names its communicator (its rank 0's world rank and count),
    and a communicator of N ranks must be reported by N ranks, all alike."""
    by_comm: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for rank, ls in lines.items():
        for ln in ls:
            by_comm[ln.split()[0]][rank].append(ln)
    for ranks in by_comm.values():
        size = int(next(iter(ranks.values()))[0].split()[1])
        if len(ranks) != size or len({tuple(sorted(v)) for v in ranks.values()}) > 1:
            return False
    return True


def _evidence(folder: Path, ids: dict[str, dict[int, Config]] | None = None
              ) -> list[OnlineGroup]:
    """Every communicator's groups, from its rank 0's evidence; `ids`: the plan's ids per
    collective (None: each id is an algorithm's number with the library's parameters)."""
    groups = []
    for f in sorted(folder.glob("evidence.*")):
        if not f.name.split(".", 1)[1].isdigit():  # a .tmp a killed rank left
            continue
        for line in read_text(f).splitlines():
            try:
                groups.append(_group(parse_json(line), ids))
            except (KeyError, TypeError, ValueError) as err:  # ValueError: JSON cut short
                raise MPIError(f"{f.name}: unreadable evidence ({err})", "run again") from None
    return groups


def _group(e: Any, ids: dict[str, dict[int, Config]] | None) -> OnlineGroup:
    """One line of evidence, checked as data; a configuration never tried there (its
    segment holds the whole call) is left out."""
    if e["collective"] not in COLLECTIVES:
        raise ValueError(f"collective {str(e['collective'])[:40]!r}")
    np, nodes, ppn = int(e["comm_size"]), int(e["nodes"]), int(e["ppn"])
    if not (1 <= nodes <= np and 1 <= ppn <= np and nodes * ppn >= np):
        raise ValueError(f"{nodes} node(s) x {ppn} for {np} ranks")
    known = (ids or {}).get(e["collective"], {0: DEFAULT})
    cs = [c for c in e["configs"] if c.get("unfit") is not True]
    configs = {}
    for c in cs:
        k = int(c["id"])
        if ids is not None and k not in known:
            raise ValueError(f"configuration {k} is not in the plan")
        configs[k] = known.get(k, Config(k) if k else DEFAULT)

    def having(flag: str) -> list[int]:
        return [int(c["id"]) for c in cs if c.get(flag) is True]

    return OnlineGroup(
        e["collective"], np, int(e["bytes"]), int(e["calls"]), bool(e["explored"]),
        int(e["kept"]), {int(c["id"]): [float(t) for t in c["times_s"]] for c in cs
                         if c["times_s"]},
        having("dropped"), None, having("pruned"), having("wrong"), having("halved"),
        (nodes, ppn), configs)


def merged(groups: list[OnlineGroup]) -> list[OnlineGroup]:
    """One group per (collective, communicator size and layout, size): the calls of
    several communicators of one size and layout (pw.x's halves) are one point each in the
    store."""
    out: dict[tuple[str, int, tuple[int, int], int], OnlineGroup] = {}
    for g in groups:
        key = (g.collective, g.comm_size, g.layout, g.size)
        if key not in out:
            out[key] = dataclasses.replace(g, times={k: list(v) for k, v in g.times.items()},
                                           dropped=list(g.dropped), pruned=list(g.pruned),
                                           wrong=list(g.wrong), halved=list(g.halved),
                                           configs=dict(g.configs))
            continue
        m = out[key]
        m.calls += g.calls
        m.explored = m.explored or g.explored
        m.dropped = sorted(set(m.dropped) | set(g.dropped))
        m.pruned = sorted(set(m.pruned) & set(g.pruned))
        m.wrong = sorted(set(m.wrong) | set(g.wrong))
        m.halved = sorted(set(m.halved) | set(g.halved))
        m.configs.update(g.configs)
        for k, xs in g.times.items():
            m.times.setdefault(k, []).extend(xs)
    return list(out.values())


def _store(groups: list[OnlineGroup], mpi: Installation, backend: Backend[Any], db: Path,
           origin: str) -> int:
    """The explored groups' calls as measurements: one point per configuration and size,
    under the run's own key, in the layout its communicator's ranks ran in; how many
    groups. A later run of the same command pools its calls into the same points, so runs
    too short to decide alone add up (a point an earlier run found wrong stays invalid;
    one found wrong now becomes so)."""
    explored = [g for g in groups if g.explored and g.times]
    if not explored:
        return 0
    store = Store(db)
    try:
        for g in explored:
            nodes, ppn = g.layout
            ctx = Context(f"{mpi.key}~{origin}", mpi.name, mpi.version, str(mpi.prefix),
                          socket.gethostname(), g.comm_size, ppn, nodes, g.collective,
                          backend.name)
            earlier = {(m.config, m.size): m for m in store.measurements(ctx)}
            points = [(ctx, g.config(k), PointResult(  # as the kernel stores a wrong answer
                0, g.size, "invalid", message="answered differently from the library's "
                "choice (tune online's check)")) for k in g.wrong]
            for k, xs in g.times.items():
                before = earlier.get((g.config(k), g.size))
                if k in g.wrong or (before is not None and before.status != "ok"):
                    continue
                pooled = [*(before.samples if before else []), *xs]
                ordered = sorted(pooled)
                points.append((ctx, g.config(k), PointResult(
                    0, g.size, "ok", len(pooled), ordered[len(pooled) // 2], min=ordered[0],
                    max=ordered[-1], mean=sum(pooled) / len(pooled), samples=pooled)))
            # only online runs of this command store under its key: replacing their
            # points with the pooled ones loses nothing
            store.replace_imported(points, "online")
    finally:
        store.close()
    return len(explored)


class _Once(Reporter):
    """The reporter a run hands on, each note said once (every group's tune says which
    installation it tunes)."""

    def __init__(self, rep: Reporter) -> None:
        self.rep, self.said = rep, set[str]()

    def begin(self, total: int, what: str) -> None:
        self.rep.begin(total, what)

    def advance(self, desc: str) -> None:
        self.rep.advance(desc)

    def note(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            self.rep.note(text)

    def end(self) -> None:
        self.rep.end()


def run(req: OnlineRequest, reporter: Reporter | None = None) -> OnlineResult:
    """Run the application once with the layer, store what its calls said, and write the
    file the confirmed groups decide."""
    rep = _Once(reporter or Reporter())
    backend = registry.named(req.backend)
    apps = backend.with_apps()
    if not apps.online:
        raise ColltuneError(f"tune online cannot run {backend.name}: {apps.not_online}",
                            "profile the application (tune profile) and use tune app")
    if not 0 < req.share <= 0.5:
        raise ColltuneError(f"--explore-share {req.share}: a share of calls between 0 and "
                            "0.5", "the default explores at most one call in ten (0.1)")
    if not 1 <= req.first <= req.samples <= 512:
        raise ColltuneError(f"--first-calls {req.first}, --samples {req.samples}: need 1 <= "
                            "first <= samples <= 512", "the defaults are 8 and 32")
    mpi = apps.find(req.prefix)
    template = TuneOptions(collectives=list(COLLECTIVES), nps=[2], backend=backend.name,
                           mpi=req.prefix, out=None, db=req.db)
    session = backend.open(template, list(COLLECTIVES), rep.note)
    lib = build_kernel(mpi, name=LAYER)
    origin = origin_of(req.cmd)
    # made 0700 in the job directory, which every node sees (docs/cluster.md): the layer
    # writes only there, and no one else can put a file in it
    with jobdir.temporary(prefix="colltune-online-") as tmp:
        plan = Path(tmp) / "plan"
        cands = _candidates(backend, session.catalog)
        plan.write_text(plan_text(req, apps.online, _known(req, mpi.key, cands, rep)))
        preload = ":".join(p for p in (str(lib), os.environ.get("LD_PRELOAD", "")) if p)
        env = {**backend.mpit_env(), "LD_PRELOAD": preload,
               "COLLTUNE_ONLINE_PLAN": str(plan), "COLLTUNE_ONLINE_DIR": tmp}
        res, wall, failed = _launch(inject(req.cmd, backend, env), req.timeout)
        _copy_evidence(Path(tmp), req.evidence)
        lines = _schedules(Path(tmp), ended=not failed)
        spent = layer_seconds(Path(tmp))
        groups = merged(_evidence(Path(tmp), ids_of(cands)))
    if failed:  # what the ranks had agreed on before it stopped is kept; no file
        kept = _store(groups, mpi, backend, req.db, origin)
        raise MPIError(failed + (f"; the calls of {kept} explored group(s), agreed before "
                                 f"it stopped, are stored in {req.db}" if kept else "")
                       + "; no file written", "run it without tune online first")
    assert res is not None
    if not lines or not groups:
        raise MPIError("the layer wrote nothing: the application's ranks did not load it "
                       "(a static program, or a launcher that drops LD_PRELOAD)",
                       "check that the application links the MPI shared library")
    out = OnlineResult(req.cmd, req.out, wall, groups, agreed(lines), res.stdout,
                       layer_s=spent)
    for line in dict.fromkeys(ln for ln in (res.stderr or "").splitlines()
                              if ln.startswith("colltune online: ")):
        out.notes.append(line[len("colltune online: "):])  # what the layer said, once
        rep.note(line)
    if not out.agreed:
        raise MPIError("the ranks ran different configurations for the same calls: the "
                       "layer's schedule disagreed; nothing written", "report this")
    _store(groups, mpi, backend, req.db, origin)
    _decide_and_write(req, out, origin, rep)
    return out


def _launch(full: list[str], timeout: float | None
            ) -> tuple[subprocess.CompletedProcess[str] | None, float, str]:
    """The application's run under the layer: its result, elapsed time, and why it failed
    ("" if it did not): an exit other than 0, or a run past `timeout`."""
    try:
        res, wall = launch_timed(full, timeout, True, None, "what it learned so far is kept")
    except TimedOut as err:
        return None, float(timeout or 0), err.message
    if res.returncode == 0:
        return res, wall, ""
    said = [ln for ln in (res.stderr or "").splitlines() if ln.startswith("colltune online:")]
    tail = said[:2] or (res.stderr or "").strip().splitlines()[-3:]  # the layer's own first
    return res, wall, (f"the application failed (exit {res.returncode}) under the online "
                       "layer" + (": " + " | ".join(tail) if tail else ""))


def _copy_evidence(folder: Path, dest: Path | None) -> None:
    """Each rank's schedule and rank 0's times, as written, into --evidence DIR."""
    if dest is None:
        return
    dest.mkdir(parents=True, exist_ok=True)
    for f in folder.glob("*.*"):
        if f.name.startswith(("schedule.", "evidence.")) and f.is_file() \
                and not f.is_symlink() and f.name.split(".", 1)[1].isdigit():
            # never through a link or onto a device someone left in DIR
            check_destination(dest / f.name, "--evidence file")
            write_atomic(dest / f.name, f.read_bytes())


def _decide_and_write(req: OnlineRequest, out: OnlineResult, origin: str,
                      rep: Reporter) -> None:
    """The explored groups decided from the store by tune's statistics (no launch: the
    application's calls are the measurements), one tune per collective, communicator size
    and layout at all its sizes, merged into --out by the family's writer."""
    todo: dict[tuple[str, int, tuple[int, int]], list[OnlineGroup]] = defaultdict(list)
    for g in out.groups:
        if g.explored and len(g.times) >= 2:
            todo[(g.collective, g.comm_size, g.layout)].append(g)
    for (name, np, (nodes, ppn)), gs in todo.items():
        coll = get_collective(name)
        launch = dataclasses.replace(place(np, None).launch, nodes=nodes, ppn=ppn) \
            if nodes > 1 else None
        opts = TuneOptions(
            collectives=[name], nps=[np], out=req.out, mpi=req.prefix, db=req.db,
            backend=req.backend, from_db=True, beyond="library",
            sizes=sorted({g.size for g in gs}) if coll.has_sizes else None, launch=launch,
            confirm_rounds=0)
        opts.settings.origin = origin
        # only what halving kept to its last round may be chosen: the candidates it left
        # behind had a few calls each, and among many the fastest few are the luckiest
        opts.min_samples = req.samples
        ds = tune(opts, rep).decisions.get(name, {}).get(np, [])
        for g in gs:
            g.decision = next((d for d in ds if d.size == g.size), ds[0] if ds else None)


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def exploration_cost(g: OnlineGroup) -> float:
    """What the candidates' calls cost the run against the library's choice, by the calls'
    own medians (s; negative: exploring saved time): an estimate from the calls, the
    measured cost is the runs' wall time (bench/online_bench.py)."""
    if 0 not in g.times:
        return 0.0
    base = _median(g.times[0])
    return sum(len(xs) * (_median(xs) - base) for k, xs in g.times.items() if k)


def exploration_interval(groups: list[OnlineGroup], seed: int = 0) -> tuple[float, float]:
    """A 95% interval of the candidates' cost over all groups (exploration_cost summed),
    by resampling each configuration's calls (scipy's bootstrap, percentile); a candidate
    with one call is that call (there is nothing to resample)."""
    gs = [g for g in groups if len(g.times.get(0, ())) >= 2 and len(g.times) > 1]
    parts = [(g, k) for g in gs for k in g.times if k == 0 or len(g.times[k]) >= 2]
    if not gs:
        return (0.0, 0.0)

    def cost(*xs: Any, axis: int = -1) -> Any:  # every resample at once, along `axis`
        med = {(id(g), k): numpy.median(x, axis=axis)
               for (g, k), x in zip(parts, xs, strict=True)}
        return sum(len(ys) * (med.get((id(g), k), float(numpy.median(ys)))
                              - med[(id(g), 0)])
                   for g in gs for k, ys in g.times.items() if k)

    res = stats.bootstrap(tuple(numpy.asarray(g.times[k]) for g, k in parts), cost,
                          vectorized=True, paired=False, n_resamples=999,
                          method="percentile", random_state=seed)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def expected_saving(g: OnlineGroup) -> float:
    """What the file's choice saves a run with as many calls, by the medians (s)."""
    d = g.decision
    k = None if d is None or d.chosen == DEFAULT else g.ident(d.chosen)
    if k is None or 0 not in g.times:
        return 0.0
    return g.calls * (_median(g.times[0]) - _median(g.times[k]))


def as_json(res: OnlineResult) -> dict[str, object]:
    return {"command": res.cmd, "out": str(res.out), "wall_s": res.wall_s,
            "agreed": res.agreed, "notes": res.notes, "layer_s": res.layer_s,
            "exploration_cost_s": sum(exploration_cost(g) for g in res.groups),
            "exploration_cost_interval_s": list(exploration_interval(res.groups)),
            "expected_saving_s": sum(expected_saving(g) for g in res.groups), "groups": [
                {"collective": g.collective, "comm_size": g.comm_size, "size": g.size,
                 "calls": g.calls, "explored": g.explored, "kept_in_run": g.kept,
                 "medians_s": {str(k): sorted(v)[len(v) // 2] for k, v in g.times.items()},
                 "calls_per_config": {str(k): len(v) for k, v in g.times.items()},
                 # the plan's ids above -> what each ran (a segment size beside its algorithm)
                 "configs": {str(k): g.config(k).key for k in g.times},
                 "dropped": g.dropped, "pruned": g.pruned, "wrong": g.wrong,
                 "halved": g.halved,
                 "decision": None if g.decision is None else {
                     "algorithm": g.decision.chosen.algorithm,
                     "config": g.decision.chosen.key, "reason": g.decision.reason}}
                for g in res.groups]}


def write_summary(res: OnlineResult, path: Path) -> None:
    path.write_text(json.dumps(as_json(res), indent=1) + "\n")
