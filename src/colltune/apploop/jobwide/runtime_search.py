"""`tune runtime`: search job-wide runtime parameters (binding, eager limits, collective
components: each family's `runtime_knobs`) for an objective, with launch-level statistics
only. A screening covers the space (every combination when it fits the budget, else a
Bayesian search over the choices) in rounds that each start and end with a launch of the
library's defaults, so every candidate is judged against defaults launched beside it; the
best is then put to alternating fresh launch pairs against the defaults and judged by the
sequential test that confirms algorithm choices. Every launch reads back, in every rank,
what the library applied (its control variables, the CPUs each rank may run on): a
setting the library did not apply stops the run instead of being measured."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.apploop.jobwide.objective import Figures, Objective
from colltune.apploop.profiling.profile import profiled_run, warmups
from colltune.backends.base import Backend
from colltune.core.runtime import Knob, Setting, Space, changed, label
from colltune.core.toolchain import Installation
from colltune.errors import MPIError, NotApplied
from colltune.tuner import sequential

CUTOFF = 5.0  # a screening launch this many times the defaults' longest is stopped


@dataclass
class Request:
    backend: Backend  # type: ignore[type-arg]
    mpi: Installation
    space: Space
    objective: Objective
    rounds: int = 2  # screening rounds: every candidate this many launches
    budget: int = 48  # screening launches of candidates at most (grid when it fits)
    pairs: int = 12  # fresh launch pairs at most for the confirmation
    rules: Path | None = None  # an algorithm rules file every launch reads (both arms)
    timeout: float | None = None  # per launch
    seed: int = 1
    note: Callable[[str], None] = lambda _s: None
    named: set[str] = field(default_factory=set)  # knobs whose values the user gave


@dataclass
class Outcome:
    space: Space
    strategy: str  # grid | bayes
    screened: list[tuple[Setting, float]]  # candidate, score (geometric mean vs default)
    best: Setting
    verdict: str  # faster | same | slower | inconclusive | none (the default was best)
    ratio: float | None  # best / default over the confirmation's pairs (< 1: faster)
    interval: tuple[float, float] | None
    pairs: int
    effects: dict[str, dict[str, float]]  # knob -> value -> geometric mean score
    applied: dict[str, dict[str, str]] = field(default_factory=dict)  # knob -> value -> seen
    launches: int = 0
    warmup: list[str] = field(default_factory=list)  # calls that changed level (defaults)
    left_out: list[str] = field(default_factory=list)  # values the library did not apply
    alone: dict[str, dict[str, float]] = field(default_factory=dict)  # knob -> value -> x

    @property
    def chosen(self) -> Setting:
        """What is written: the best setting if it confirmed faster, else the defaults."""
        return self.best if self.verdict == "faster" else self.space.default()


class Runner:
    """Launches the objective with one setting and checks the library applied it."""

    def __init__(self, req: Request) -> None:
        self.req = req
        self.knobs: dict[str, Knob] = {k.name: k for k in req.space.knobs}
        self.base = req.mpi.tool_env()
        self.rank_env = req.backend.with_files().rules_arms(req.rules)["tuned"] if req.rules else {}
        self.applied: dict[str, dict[str, str]] = {}
        self.launches = 0
        self.default_run_s: list[float] = []  # whole launches of the defaults
        self.warmup: list[str] | None = None
        self.library = ""  # the library's own version string, as the last launch's ranks read it

    def __call__(self, setting: Setting, timeout: float | None = None) -> Figures:
        """One launch of the objective with `setting` (`timeout`: instead of --timeout)."""
        r = self.req
        # no knob (a library compared at its defaults): the library's own environment
        environ = ({**r.backend.with_runtime().environ(r.mpi, self.knobs, setting, self.base),
                    **r.backend.with_runtime().log_env(list(self.knobs.values()))}
                   if self.knobs else self.base)
        cvars = [k.name for k in self.knobs.values() if k.has_cvar]
        prof = profiled_run(r.objective.cmd, r.backend, r.mpi,
                            env={**self.rank_env, **r.objective.env},
                            timeout=timeout or r.timeout, capture=True,
                            launcher_environ=environ,
                            cvars=cvars)
        self.launches += 1
        # every rank's library was checked against r.mpi by the profiler
        self.library = str(prof["mpi"]["library"])  # type: ignore[index]
        if setting == r.space.default():
            self.default_run_s.append(float(prof["run_s"]))  # type: ignore[arg-type]
        self.prove(setting, prof)
        if self.warmup is None:  # the first launch (the defaults): first calls apart
            self.warmup = warmups(prof)
        return r.objective.figures(prof)

    def screen(self, setting: Setting) -> Figures | None:
        """A candidate in the screening, stopped once it has run CUTOFF times as long as
        the slowest launch of the defaults so far (None: stopped; it cannot be chosen).
        Seen: not yielding at 4 ranks on 2 cores ran LAMMPS melt 35-45x slower."""
        limit = CUTOFF * max(self.default_run_s) + 10.0
        if self.req.timeout is not None:
            limit = min(limit, self.req.timeout)
        try:
            return self(setting, limit)
        except MPIError as e:
            if "longer than --timeout" not in e.message:
                raise
            self.req.note(f"{label(changed(setting, self.req.space))}: stopped after "
                          f"{limit:.0f} s ({CUTOFF:g}x the defaults' longest launch)")
            self.launches += 1
            return None

    def prove(self, setting: Setting, prof: dict[str, object]) -> None:
        seen = applied(self.req.backend, self.req.mpi, self.knobs, setting, prof)
        for name, what in seen.items():
            self.applied.setdefault(name, {}).setdefault(setting[name], what)


def applied(backend: Backend, mpi: Installation, knobs: dict[str, Knob],  # type: ignore[type-arg]
            setting: Setting, prof: dict[str, object]) -> dict[str, str]:
    """What every rank of a launch read back for each knob; NotApplied when the library did
    not apply a value (a command line, a module or the site's file overrode it)."""
    got: dict[str, list[str | None]] = prof.get("settings") or {}  # type: ignore[assignment]
    cpus: list[int] = prof.get("cpus_per_rank") or []  # type: ignore[assignment]
    seen = {}
    for name, value in setting.items():
        k = knobs[name]
        if value == k.default:  # left to the library: what it chose is recorded, not judged
            vals = got.get(name, [None])
            seen[name] = ("the library's own choice" + ("" if vals == [None] else
                          f": {', '.join(map(str, vals))} read back"))
        elif k.has_cvar:
            want = backend.with_runtime().readback(mpi, k, value)
            vals = got.get(name, [None])
            if len(vals) != 1 or vals[0] not in want:
                what = ("has no control variable " + name if vals == [None] else
                        f"read back {name} = {', '.join(map(str, vals))}")
                raise NotApplied(
                    f"a launch set {name}={value} but the library {what}",
                    f"remove {name} from the command, the environment and the site's "
                    "parameter files: tune runtime sets it in each launch")
            seen[name] = f"{vals[0]} (read back in every rank)"
            if k.proof == "component":  # set is not in charge: the library's own log says
                ok, said = backend.with_runtime().logged(k, value, str(prof.get("stderr") or ""))
                if not ok:
                    raise NotApplied(f"{name}={value} read back, but {said}",
                                     "the library does not use this component here")
                seen[name] += f"; {said}"
        elif k.proof == "affinity":
            fits = backend.with_runtime().cpus(k, value)
            if fits is not None and not all(fits(c) for c in cpus):
                raise NotApplied(
                    f"a launch set {name}={value} but its ranks may run on "
                    f"{', '.join(map(str, cpus))} CPU(s) each",
                    "remove the binding options from the command: tune runtime sets it")
            seen[name] = (f"ranks bound to {'/'.join(map(str, cpus))} CPU(s)"
                          + ("" if fits is not None else " (not checked for this value)"))
        else:
            seen[name] = "not provable for this parameter"
    return seen


def prove_file(backend: Backend, mpi: Installation, path: Path, cmd: list[str],  # type: ignore[type-arg]
               timeout: float | None) -> list[tuple[str, str, str]]:
    """Run `cmd` once in the environment as it is (a site's installed files, a loaded
    module) and read back every value `path` holds: (name, value, what was seen);
    NotApplied when one did not apply."""
    import os

    from colltune.apploop.jobwide.objective import application
    from colltune.errors import ColltuneError

    got = backend.with_runtime().read(path)
    if got is None:
        raise ColltuneError(f"{path} is not a file tune runtime wrote",
                            "pass the --out file of tune runtime")
    setting, _rules = got
    knobs = file_knobs(backend, mpi, setting)
    cmd = application(cmd).cmd
    prof = profiled_run(cmd, backend, mpi, timeout=timeout, capture=True,
                        launcher_environ={**mpi.tool_env(), **os.environ,
                                          **backend.with_runtime().log_env(list(knobs.values()))},
                        cvars=[n for n, k in knobs.items() if k.has_cvar])
    seen = applied(backend, mpi, knobs, setting, prof)  # type: ignore[arg-type]
    return [(n, setting[n], seen[n]) for n in setting]


def file_knobs(backend: Backend, mpi: Installation, setting: Setting  # type: ignore[type-arg]
               ) -> dict[str, Knob]:
    """The knobs of a file's setting: the catalog's, the library's own, else a bare one
    (read back only if it has a control variable)."""
    if not setting:
        return {}
    catalog = {k.name: k for k in backend.with_runtime().knobs(mpi)}
    return {n: catalog.get(n) or backend.with_runtime().vouch(mpi, n)
            or Knob(n, "choice", "env", (v,), v) for n, v in setting.items()}


def verdict_line(res: Outcome) -> str:
    if res.verdict == "none":
        return "verdict: the library's defaults screened best; nothing changed"
    lo, hi = res.interval or (math.nan, math.nan)
    how = {"faster": "faster than", "slower": "slower than", "same": "the same as"}.get(
        res.verdict, "not shown different from")
    return (f"verdict: {label(changed(res.best, res.space))} is {how} the defaults "
            f"({res.verdict}): {res.ratio:.3f}x their time over {res.pairs} fresh launch "
            f"pairs (interval {lo:.3f}-{hi:.3f}); written: "
            + label(changed(res.chosen, res.space)))


def as_json(res: Outcome, what: str) -> dict[str, object]:
    return {"objective": what, "strategy": res.strategy, "launches": res.launches,
            "best": res.best, "chosen": changed(res.chosen, res.space),
            "verdict": res.verdict, "ratio": res.ratio,
            "interval": list(res.interval) if res.interval else None, "pairs": res.pairs,
            "screened": [{"setting": s, "score": v} for s, v in res.screened],
            "effects": res.effects, "applied": res.applied, "warmup": res.warmup,
            "left_out": res.left_out, "alone": res.alone,
            "space": {k.name: list(res.space.values[k.name]) for k in res.space.knobs}}


def _geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def _ratio(fig: Figures, defaults: list[Figures]) -> float:
    """A launch against the defaults launched beside it: geometric mean over cells of the
    ratio to the defaults' geometric mean in that cell."""
    return _geo([fig[c] / _geo([d[c] for d in defaults if c in d]) for c in fig
                 if any(c in d for d in defaults)])


def screen_grid(req: Request, run: Runner) -> list[tuple[Setting, float]]:
    """Every candidate once a round, with launches of the defaults at random places among
    them (one per four candidates, at least two): a launch's place in a round (the first
    after a pause runs slower here) then biases no one; each candidate is scored against
    the defaults of its own round."""
    default = req.space.default()
    cands = [s for s in req.space.grid() if s != default]
    rng = random.Random(req.seed)
    scores: dict[int, list[float]] = {i: [] for i in range(len(cands))}
    for r in range(req.rounds):
        order = list(range(len(cands))) + [-1] * max(2, len(cands) // 4)
        rng.shuffle(order)
        figs = [(i, run(default) if i < 0 else run.screen(cands[i])) for i in order]
        defaults = [f for i, f in figs if i < 0 and f is not None]
        for i, f in figs:
            if i >= 0:
                scores[i].append(CUTOFF if f is None else _ratio(f, defaults))
        req.note(f"screening round {r + 1}/{req.rounds}: {len(cands)} candidates, "
                 f"best so far {min(_geo(v) for v in scores.values()):.3f}x the defaults")
    return [(default, 1.0)] + [(cands[i], _geo(v)) for i, v in scores.items()]


def screen_bayes(req: Request, run: Runner) -> list[tuple[Setting, float]]:
    """skopt's ask/tell over the knobs as categories (log ratio to the latest defaults),
    a defaults launch every fourth candidate."""
    from skopt import Optimizer
    from skopt.space import Categorical

    names = [k.name for k in req.space.knobs]
    opt = Optimizer([Categorical(list(req.space.values[n]), name=n) for n in names],
                    base_estimator="ET", n_initial_points=min(10, max(2, req.budget // 3)),
                    random_state=req.seed)
    default = req.space.default()
    defaults = [run(default)]
    seen: dict[tuple[str, ...], list[float]] = {}
    for i in range(req.budget):
        point = opt.ask()
        key = tuple(str(v) for v in point)
        fig = run.screen(dict(zip(names, key, strict=True)))
        score = CUTOFF if fig is None else _ratio(fig, defaults[-2:])
        seen.setdefault(key, []).append(score)
        opt.tell(point, math.log(score))
        if (i + 1) % 4 == 0:
            defaults.append(run(default))
            req.note(f"bayes: {i + 1}/{req.budget} candidates, best so far "
                     f"{min(_geo(v) for v in seen.values()):.3f}x the defaults")
    return [(default, 1.0)] + [(dict(zip(names, k, strict=True)), _geo(v))
                               for k, v in seen.items()]


def effects(space: Space, screened: list[tuple[Setting, float]]) -> dict[str, dict[str, float]]:
    """Per knob and value, the median score of the candidates with that value: which
    parameters mattered here (a flat row did not). A median, because one catastrophic
    value of another knob (not yielding when oversubscribed: 35-45x) would drag the mean
    of every value it was tried with; after a Bayesian search the candidates are not
    balanced, so a row there is a hint, not a marginal effect."""
    from colltune.core.stats import median

    return {k.name: {v: median([s for c, s in screened if c[k.name] == v])
                     for v in space.values[k.name]
                     if any(c[k.name] == v for c, _ in screened)}
            for k in space.knobs}


def confirm(req: Request, run: Runner, best: Setting
            ) -> tuple[str, float | None, tuple[float, float] | None, int]:
    """The best setting against the defaults in alternating fresh launch pairs, judged by
    the sequential test of algorithm confirmation (every cell must be faster)."""
    default = req.space.default()
    cells: list[int] = []

    def measure(sizes: list[int], first: int, rounds: int) -> sequential.Batch:
        batch: sequential.Batch = {}
        for i in range(rounds):
            arms = ("default", "tuned") if (first + i) % 2 == 0 else ("tuned", "default")
            figs = {a: run(default if a == "default" else best) for a in arms}
            for c in sizes:
                cell = batch.setdefault(c, {"time": {"default": [], "tuned": []}})["time"]
                for a in arms:
                    cell[a].append([figs[a][c]])
        return batch

    probe = run(default)  # the cells this objective reports
    cells = sorted(probe)
    design = sequential.Design(first=min(4, req.pairs), max_pairs=max(req.pairs, 2))
    res = sequential.run(measure, cells, design, need_faster=True, note=req.note)
    verdicts = [r.verdict for r in res.values()]
    verdict = ("slower" if "slower" in verdicts else
               "faster" if all(v == "faster" for v in verdicts) else
               "inconclusive" if "inconclusive" in verdicts else "same")
    mains = [r.main for r in res.values()]
    ratio = _geo([m.ratio for m in mains])
    lo, hi = min(m.lo for m in mains), max(m.hi for m in mains)
    return verdict, ratio, (lo, hi), max(r.pairs for r in res.values())


def applicable(req: Request, run: Runner, first: Figures
               ) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Each value of a knob the user did not give values for, launched once on its own:
    a value the library does not apply in this launch (Open MPI 5 ignores its default
    binding policy when mpirun oversubscribes) is left out with a note, not searched (a
    value the user named that does not apply stops the run when launched). Returns what
    was left out, and each value's time alone against the defaults launched before and
    after the probes (one launch each: a hint of what matters, not a verdict)."""
    dropped: list[str] = []
    figs: dict[str, dict[str, Figures]] = {}
    default = req.space.default()
    for k in req.space.knobs:
        if k.name in req.named:
            continue
        kept = []
        for v in req.space.values[k.name]:
            if v != k.default:
                try:
                    fig = run.screen({**default, k.name: v})
                    if fig is None:
                        raise MPIError(f"over {CUTOFF:g}x the defaults' time, stopped")
                    figs.setdefault(k.name, {})[v] = fig
                except (NotApplied, MPIError) as e:  # not applied, or refused at launch
                    dropped.append(f"{k.name}={v} left out: {e.message}")
                    req.note(dropped[-1])
                    continue
            kept.append(v)
        req.space.values[k.name] = tuple(kept)
    if not figs:
        return dropped, {}
    defaults = [first, run(default)]
    return dropped, {n: {v: _ratio(f, defaults) for v, f in vs.items()}
                     for n, vs in figs.items()}


def search(req: Request) -> Outcome:
    run = Runner(req)
    first = run(req.space.default())  # proves the defaults arm before anything is compared
    left_out, alone = applicable(req, run, first)
    grid = req.space.size() - 1 <= req.budget // max(1, req.rounds)
    screened = screen_grid(req, run) if grid else screen_bayes(req, run)
    best, score = min(screened, key=lambda cs: cs[1])
    out = Outcome(req.space, "grid" if grid else "bayes", screened, best, "none", None,
                  None, 0, effects(req.space, screened), left_out=left_out, alone=alone)
    if not changed(best, req.space):
        req.note("the library's defaults screened best: nothing to confirm")
    else:
        req.note(f"confirming {label(changed(best, req.space))} ({score:.3f}x in the "
                 "screening) in fresh launch pairs against the defaults")
        out.verdict, out.ratio, out.interval, out.pairs = confirm(req, run, best)
    out.applied, out.launches, out.warmup = run.applied, run.launches, run.warmup or []
    for line in out.warmup:
        req.note(f"warning: {line}")
    return out
