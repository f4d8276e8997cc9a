"""`tune online`: tune inside the application's own run. The application runs once with
kernel/online/collonline.c preloaded, which tries the family's candidate configurations on a share
of each call group's calls and times them as the application made them; its evidence is
stored (a store key of its own: `~online=<digest of the program>`, apploop/online/known's
origin_of: the command, its working directory and the files it names; or of --series)
and the file is decided
from it with tune's own statistics and written by the family's writer (tune --from-db)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
import subprocess
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from colltune import jobdir, private
from colltune.apploop.online.candidates import COLLECTIVES, Candidate, candidates, ids_of
from colltune.apploop.online.evidence import (
    OnlineGroup,
    agreed,
    evidence,
    layer_seconds,
    libraries,
    merged,
    schedules,
)
from colltune.apploop.online.known import (
    SLOWER,
    final_lines,
    online_key,
    origin_of,
    prior_lines,
    skip_lines,
)
from colltune.apploop.online.model import model_lines, world_size
from colltune.apploop.online.request import OnlineRequest
from colltune.apploop.online.summary import OnlineResult
from colltune.apploop.profiling.profile import inject, launch_timed
from colltune.backends import registry
from colltune.backends.base import Backend
from colltune.collectives import get_collective, tunable_size
from colltune.core.catalog import Catalog
from colltune.core.records import PointResult
from colltune.core.toolchain import Installation, library_problem
from colltune.errors import ColltuneError, MPIError, TimedOut
from colltune.kernel.build import build_kernel
from colltune.options import TuneOptions
from colltune.outfile import check_destination, write_atomic
from colltune.slots import place
from colltune.store import Context, Store
from colltune.tuner.measure import Reporter
from colltune.tuner.run import tune

LAYER = "collonline"


def _known(req: OnlineRequest, mpi: Installation, catalog: Catalog, cands: list[Candidate],
           rep: Reporter, key: str | None = None) -> list[str]:
    """The candidate lines, a `skip` line for each candidate the store (--db) already
    measured clearly slower at a communicator size and size bucket (apploop/online/known),
    and one for each segment size the store's cost model ranks below its algorithm's best
    there (apploop/online/model). `key`: the run's store key, where the caller has it
    (digesting the program reads its files)."""
    ids = ids_of(cands)
    key = key or online_key(mpi.key, req.cmd, series=req.series)
    skips = skip_lines(req.db, mpi.key, ids, own=key)
    if skips:
        rep.note(f"{len(skips)} candidate(s) not explored where the store already measured "
                 f"them over {SLOWER}x slower than the fastest, or wrong ({req.db})")
    before = prior_lines(req.db, key, ids)
    if before:
        runs = max(n for n in before.values())
        rep.note(f"the halving taken up where {runs} earlier run(s) of this command left it: "
                 f"{len(before)} candidate group(s) start with their calls ({req.db})")
    finals = final_lines(req.db, key, ids, req.samples)
    if finals:
        rep.note(f"{len(finals)} group(s) give their finalist {req.samples} more calls: it "
                 "looks faster than the library's choice, not yet confirmed")
    if req.model:
        world = world_size(req.cmd)
        if world is None:
            rep.note("the launch does not say how many ranks it starts (-np N, srun -n N): "
                     "the cost model prunes nothing")
        else:
            skips += model_lines(req.db, mpi, catalog, ids, world, rep.note)
    return [c.line() for c in cands] + skips + list(before) + finals


def plan_text(req: OnlineRequest, switch: str, candidates: list[str], vars_api: str = ""
              ) -> str:
    return "\n".join([f"share {req.share}", f"min_calls {req.min_calls}",
                      f"batch {req.batch}", f"samples {req.samples}", f"first {req.first}",
                      f"drop {SLOWER}", f"flush {req.flush}", f"switch {switch}",
                      *([f"vars {vars_api}"] if vars_api else []), *candidates]) + "\n"


def _store(groups: list[OnlineGroup], mpi: Installation, backend: Backend[Any], db: Path,
           origin: str, launch: str) -> int:
    """The explored groups' calls as measurements: one point per configuration and size,
    under the run's own key, in the layout its communicator's ranks ran in; how many
    groups. A later run of the same command pools its calls into the same points, so runs
    too short to decide alone add up (a point an earlier run found wrong stays invalid;
    one found wrong now becomes so); `launch` labels this run's calls in them."""
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
                # which launch each run of calls came from: the decision ranks each
                # launch on its own (core/stats.stratified_compare), and the next run
                # takes up the halving from each launch's own ratios
                # (online_known.prior_lines)
                strata = [*(before.launches() if before else []), (launch, len(xs))]
                points.append((ctx, g.config(k), PointResult(
                    0, g.size, "ok", len(pooled), ordered[len(pooled) // 2], min=ordered[0],
                    max=ordered[-1], mean=sum(pooled) / len(pooled), samples=pooled,
                    strata=strata)))
            # only online runs of this command store under its key: replacing their
            # points with the pooled ones loses nothing
            store.replace_source(points, "online")
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
    req.checked()
    if req.evidence is not None:  # before the run, as --out is
        private.output_dir(req.evidence, "--evidence")
    mpi = apps.find(req.prefix)
    template = TuneOptions(collectives=list(COLLECTIVES), nps=[2], backend=backend.name,
                           mpi=req.prefix, out=None, db=req.db)
    session = backend.open(template, list(COLLECTIVES), rep.note)
    lib = build_kernel(mpi, name=LAYER)
    origin = origin_of(req.cmd, series=req.series)
    # this run's label in the points its calls pool into (their strata)
    launch = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S-") + secrets.token_hex(3)
    # made 0700 in the job directory, which every node sees (docs/cluster.md): the layer
    # writes only there, and no one else can put a file in it
    with jobdir.temporary(prefix="colltune-online-") as tmp:
        plan = Path(tmp) / "plan"
        cands = candidates(backend, session.catalog)
        plan.write_text(plan_text(req, apps.online,
                                  _known(req, mpi, session.catalog, cands, rep,
                                         f"{mpi.key}~{origin}"),
                                  apps.online_vars))
        preload = ":".join(p for p in (str(lib), os.environ.get("LD_PRELOAD", "")) if p)
        env = {**backend.mpit_env(), "LD_PRELOAD": preload,
               "COLLTUNE_ONLINE_PLAN": str(plan), "COLLTUNE_ONLINE_DIR": tmp}
        res, wall, failed = _launch(inject(req.cmd, backend, env), req.timeout)
        _copy_evidence(Path(tmp), req.evidence)
        _ran_on(Path(tmp), mpi)  # before anything of the run is stored
        lines = schedules(Path(tmp), ended=not failed)
        spent = layer_seconds(Path(tmp))
        groups = merged(evidence(Path(tmp), ids_of(cands)))
    if failed:  # what the ranks had agreed on before it stopped is kept; no file
        kept = _store(groups, mpi, backend, req.db, origin, launch)
        raise MPIError(failed + (f"; the calls of {kept} explored group(s), agreed before "
                                 f"it stopped, are stored in {req.db}" if kept else "")
                       + "; no file written", "run it without tune online first")
    assert res is not None
    if not lines:  # (no group: the application freed every communicator it called on)
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
    _store(groups, mpi, backend, req.db, origin, launch)
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


def _ran_on(folder: Path, mpi: Installation) -> None:
    """Refuse a run where a process that is not one of the job's ranks claimed a rank's
    place (foreign.PID, kernel/online/collonline.c's claim_rank), or whose ranks did not
    all run `mpi` (their library's words, the file
    defining MPI_Init, every MPI-named object they loaded: library.RANK), as tune profile
    and every kernel launch refuse theirs: the calls would be stored, and the file
    written, as another library's. A rank that wrote a schedule but no library record is
    refused too (it cannot be shown to have run `mpi`)."""
    foreign = sorted(f.name for f in folder.glob("foreign.*"))
    if foreign:
        raise MPIError(f"{len(foreign)} process(es) that are not the job's ranks loaded "
                       "the layer as one of them (a program a rank started before its "
                       "MPI_Init?): nothing stored, no file written",
                       "see the application's stderr: the layer named each")
    ran = libraries(folder)
    ranks = {int(f.name.split(".", 1)[1]) for f in folder.glob("schedule.*")
             if f.name.split(".", 1)[1].isdigit()}
    for rank in sorted(ranks - set(ran)):
        raise MPIError(f"rank {rank} wrote no record of the library it ran: nothing stored, "
                       "no file written", "see the application's stderr for the layer's "
                       "reason")
    for rank, (words, file, objects) in sorted(ran.items()):
        problem = library_problem(mpi, words, file, objects)
        if problem is not None:
            raise MPIError(f"the application's rank {rank} {problem}: nothing stored, no "
                           "file written", f"launch it with {mpi.describe()}'s own launcher "
                           "and libraries, or name the MPI it runs with --mpi")


def _copy_evidence(folder: Path, dest: Path | None) -> None:
    """Each rank's schedule and rank 0's times, as written, into --evidence DIR."""
    if dest is None:
        return
    private.output_dir(dest, "--evidence")  # again: the run took a while
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
        # (a group whose halving earlier runs ended may run no candidate now: decided
        # from the store's calls all the same)
        if not g.explored or (len(g.times) < 2 and not g.prior):
            continue
        if get_collective(g.collective).has_sizes and not tunable_size(g.size):
            # calls of 0 B (an empty allreduce): no rules file has a range for them, and
            # one such group must not keep the rest of the file from being written
            rep.note(f"{g.collective} of {g.size} B on {g.comm_size} ranks: left out of the "
                     "file (rules start at 1 B; the library keeps its own choice there)")
            continue
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


