"""`tune compare`: several MPI libraries, each at its defaults or with a file colltune
wrote for it (runtime parameters, algorithm rules), on one objective. Every round launches
each arm once, in a fresh random order; every launch is proven to have run on its library
(the library's own version string, read in every rank) with its file's values applied
(read back as `tune runtime` does). Each arm is judged against the first one (the site's
current choice) by the fixed-sample version of the confirmation's test: per cell, the log
ratios of the rounds, Bonferroni over every arm and cell, "same" only inside +-10%."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.apploop.jobwide.objective import Figures, Objective
from colltune.apploop.jobwide.runtime_search import Request, Runner, file_knobs
from colltune.backends.base import Backend
from colltune.core.runtime import Setting, Space, label
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, MPIError
from colltune.tuner import sequential


@dataclass
class Arm:
    """One library, at its defaults or with one of colltune's files for it."""

    name: str  # as the user gave it: BACKEND[:PREFIX][=FILE]
    backend: Backend  # type: ignore[type-arg]
    mpi: Installation
    file: Path | None = None
    setting: Setting = field(default_factory=dict)  # runtime values the file sets
    rules: Path | None = None  # the algorithm rules the file is or loads


@dataclass
class Verdict:
    """An arm against the first arm over the rounds."""

    arm: str
    library: str  # the library's own version string, first line, as its ranks read it
    median: dict[int, float]  # per cell, seconds
    ratio: float  # geometric mean over cells of the arm's time / the first arm's
    lo: float
    hi: float
    verdict: str  # faster | slower | same | inconclusive | baseline (slower if a cell is)
    mde: float  # the smallest slowdown this comparison sees with 80% power
    applied: dict[str, dict[str, str]] = field(default_factory=dict)
    cells: dict[int, sequential.Cell] = field(default_factory=dict)  # per size: its own

    def tally(self) -> str:
        """How many cells went which way, where they differ ("" with one cell)."""
        if len(self.cells) < 2:
            return ""
        n = {w: sum(c.verdict == w for c in self.cells.values())
             for w in ("faster", "slower", "same")}
        return ", ".join(f"{w} at {k}" for w, k in n.items() if k) + f" of {len(self.cells)}"


def arm(spec: str, backends: Callable[[str], Backend]) -> Arm:  # type: ignore[type-arg]
    """`BACKEND[:PREFIX][=FILE]`: FILE is a `tune runtime --out` file of that family, or a
    rules file its library reads (refused when it is neither)."""
    lib, eq, file = spec.partition("=")
    fam, _, prefix = lib.partition(":")
    if not fam or (eq and not file):
        raise ColltuneError(f"--lib {spec[:80]!r}: not BACKEND[:PREFIX][=FILE]",
                            "e.g. --lib openmpi:/usr --lib mpich:/opt/mpich=params.sh")
    be = backends(fam)
    a = Arm(spec, be, be.with_apps().find(prefix or None))
    if not file:
        return a
    a.file = Path(file)
    if not a.file.is_file():
        raise ColltuneError(f"--lib {spec[:80]!r}: {file} is not a file",
                            "give a file tune runtime or tune wrote for this library")
    got = be.runtime.read(a.file) if be.runtime is not None else None
    if got is not None:
        a.setting, a.rules = got
    else:
        be.with_files().rules_arms(a.file)  # refuses a family without rules files
        a.rules = a.file
    return a


def _space(a: Arm) -> Space:
    knobs = file_knobs(a.backend, a.mpi, a.setting)
    return Space(list(knobs.values()),
                 {n: (k.default, a.setting[n]) for n, k in knobs.items()})


def run(arms: list[Arm], objective: Callable[[Arm], Objective], rounds: int,
        timeout: float | None, note: Callable[[str], None] = lambda _s: None,
        seed: int = 1) -> list[Verdict]:
    """`rounds` rounds (after one unjudged round that proves every arm runs and warms
    the caches), each arm once a round in a shuffled order."""
    if len(arms) < 2:
        raise ColltuneError("tune compare needs two arms at least",
                            "e.g. --lib openmpi:/usr --lib mpich:/opt/mpich")
    if rounds < 3:
        raise ColltuneError("--rounds must be 3 or more", "a t interval needs 3 pairs")
    runners = []
    for a in arms:
        obj = objective(a)
        space = _space(a)
        knobs = {k.name: k for k in space.knobs}
        if a.backend.runtime is not None:  # what colltune's kernel sets, searched here
            obj.cmd = a.backend.runtime.own(obj.cmd, knobs)
            a.backend.runtime.refuse(a.mpi, space.knobs, obj.cmd)
        runners.append(Runner(Request(a.backend, a.mpi, space, obj, rules=a.rules,
                                      timeout=timeout)))

    def launch(i: int) -> Figures:
        try:
            return runners[i]({**runners[i].req.space.default(), **arms[i].setting})
        except (MPIError, ColltuneError) as e:
            e.message = f"{arms[i].name}: {e.message}"
            raise

    rng = random.Random(seed)
    order = list(range(len(arms)))
    for i in order:
        launch(i)
    note(f"every arm ran once ({len(arms)} launches); {rounds} judged rounds follow")
    figs: list[list[Figures]] = [[] for _ in arms]
    for r in range(rounds):
        rng.shuffle(order)
        for i in order:
            figs[i].append(launch(i))
        note(f"round {r + 1}/{rounds}")
    cells = sorted(set.intersection(*(set(f) for fs in figs for f in fs)))
    design = sequential.Design(max_pairs=rounds, family=(len(arms) - 1) * len(cells))
    out = []
    for i, a in enumerate(arms):
        med = {c: sorted(f[c] for f in figs[i])[len(figs[i]) // 2] for c in cells}
        if i == 0:
            v = Verdict(a.name, _first(runners[i].library), med, 1.0, 1.0, 1.0, "baseline",
                        math.nan)
        else:
            judged = [sequential.look([math.log(x[c] / b[c]) for x, b in
                                       zip(figs[i], figs[0], strict=True)], 0, design)
                      for c in cells]
            for j in judged:  # one look, the whole budget: nothing is left to decide later
                if j.verdict == "undecided":
                    j.verdict = "inconclusive"
            v = Verdict(a.name, _first(runners[i].library), med,
                        math.exp(sum(math.log(j.ratio) for j in judged) / len(judged)),
                        min(j.lo for j in judged), max(j.hi for j in judged),
                        sequential.combine(judged),
                        max(j.mde for j in judged), cells=dict(zip(cells, judged, strict=True)))
        v.applied = runners[i].applied
        out.append(v)
    return out


def _first(library: str) -> str:
    words = library.strip().splitlines()[0].split() if library.strip() else ["unknown"]
    return " ".join(words)[:60]


def summary(verdicts: list[Verdict]) -> str:
    """Which arm serves the objective best, as far as the verdicts reach."""
    base = verdicts[0]
    wins = sorted((v for v in verdicts[1:] if v.verdict == "faster"), key=lambda v: v.ratio)
    if wins:
        return (f"best: {wins[0].arm} ({wins[0].ratio:.3f}x the time of {base.arm}); arms "
                "other than the first were not judged against each other")
    if all(v.verdict in ("same", "slower") for v in verdicts[1:]):
        return f"best: {base.arm}: no other arm was faster (each same or slower)"
    return (f"no arm was shown faster than {base.arm}; inconclusive where the interval "
            "spans both a gain and a loss of 10%: add --rounds")


def as_json(verdicts: list[Verdict], what: str, rounds: int) -> dict[str, object]:
    return {"objective": what, "rounds": rounds, "summary": summary(verdicts),
            "arms": [{"arm": v.arm, "library": v.library,
                      "median_s": {str(c): t for c, t in v.median.items()},
                      "ratio": v.ratio, "interval": [v.lo, v.hi], "verdict": v.verdict,
                      "mde": None if math.isnan(v.mde) else v.mde,
                      "applied": v.applied,
                      "cells": {str(c): {"ratio": j.ratio, "interval": [j.lo, j.hi],
                                         "verdict": j.verdict}
                                for c, j in v.cells.items()}} for v in verdicts]}


def describe(a: Arm) -> str:
    return (f"{a.mpi.describe()}" + (f" with {a.file.name}" if a.file else " (defaults)")
            + (f": {label(a.setting)}" if a.setting else ""))
