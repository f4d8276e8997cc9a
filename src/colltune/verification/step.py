"""The gate's application step (`tune verify --step SIZES`): one collective called at each
of SIZES in turn, step after step, free-running (kernel/bench/collstep.c), default and rules
alternating in fresh launches like the kernel's pairs. What a call costs can depend on the
call before it, so the step of several sizes can differ from each size alone
(docs/methodology.md, "Verify", item 9)."""

from __future__ import annotations

import json
import math

from colltune.backends import registry
from colltune.backends.files import Arms
from colltune.collectives import Collective
from colltune.core.space import sizes_for
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.kernel.build import build_kernel
from colltune.slots import Placement
from colltune.tuner.confirm import ARMS, ABSamples
from colltune.verification.second import run_program

STRETCH_SECONDS = 0.05  # per stretch; a launch times 5 of them after its lead
STRETCHES = 5  # collstep.c's STRETCHES
LEAD_CALLS = 1000  # collstep.c's: untimed calls first, in whole steps (or 2 s of them)
MAX_SIZES = 64  # collstep.c's MAX_SIZES
WRONG = 3  # collstep's exit code for a wrong answer (it says so first)
KEY = 0  # the one cell a step is judged in (the sequential procedure's "size")


def step_sizes(coll: Collective, np: int, sizes: list[int]) -> list[int]:
    """The step's per-rank sizes as the kernel calls them (a reduction's rounded up to
    whole doubles); refused where a size would not fit or there are too many."""
    got = sizes_for(coll, np, sizes)
    if len(got) > MAX_SIZES:
        raise ColltuneError(f"--step names {len(got)} sizes; a step holds at most "
                            f"{MAX_SIZES}", "name the sizes one time step calls")
    big = [s for s in sizes if not sizes_for(coll, np, [s])]
    if big:
        raise ColltuneError(f"--step size {big[0]} B is too large for {coll.name} at "
                            f"{np} ranks", "name smaller sizes")
    return got
    if len(got) > MAX_SIZES:
        raise ColltuneError(f"--step names {len(got)} sizes; a step holds at most "
                            f"{MAX_SIZES}", "name the sizes one time step calls")
    want = sizes_for(coll, np, [max(sizes)])
    if not want:
        raise ColltuneError(f"--step size {max(sizes)} B is too large for {coll.name} "
                            f"at {np} ranks", "name smaller sizes")
    return got


def parse_stretches(text: str) -> list[float]:
    """Seconds per step of each stretch collstep printed; ColltuneError if it did not
    finish, or a step's output was wrong."""
    steps: list[float] = []
    last = ""
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(ev, dict):
            continue
        last = str(ev.get("event", ""))
        if last == "stretch":
            t = ev.get("step")
            if not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
                raise ColltuneError(f"collstep printed a step time of {t!r}",
                                    "run it by hand under mpirun to see why")
            steps.append(float(t))
    if last == "wrong":
        raise ColltuneError("the library returned a wrong result in the step",
                            "the file may run an algorithm that is broken for these sizes")
    if last != "done" or len(steps) != STRETCHES:
        raise ColltuneError(f"collstep stopped before it finished (it timed {len(steps)} of "
                            f"{STRETCHES} stretches)",
                            "run it by hand under mpirun to see why")
    return steps


def step_ab_runs(mpi: Installation, placement: Placement, arms: Arms, coll: str,
                 sizes: list[int], rounds: int, first_round: int = 0,
                 seconds: float = STRETCH_SECONDS) -> ABSamples:
    """`rounds` launch pairs of the step (the arms' order alternating with the round): per
    launch, each stretch's slowest-rank time per step, under KEY."""
    be = registry.of(mpi)
    exe = build_kernel(mpi, name="collstep")
    cmd = [*be.launch(mpi, placement, "", 0, None)[0], str(exe), coll, repr(seconds),
           *map(str, sizes)]
    out = ABSamples(rounds)
    for rnd in range(first_round, first_round + rounds):
        for arm in (ARMS if rnd % 2 == 0 else ARMS[::-1]):
            text = run_program(cmd, be.launch(mpi, placement, "", 0, arms[arm])[1], exe,
                               allow=(0, WRONG))
            out.samples[arm].setdefault(KEY, []).append(parse_stretches(text))
    return out


def profile_steps(doc: dict[str, object], np: int) -> dict[str, list[int]]:
    """Per collective, the sizes an application's profile (`tune profile`, loaded and
    checked by apploop.profiling.profile.load) shows it calling on communicators of `np` ranks: its
    step. Where there are more than a step holds, those with the largest share of time."""
    entries = doc.get("entries")
    by: dict[str, list[tuple[float, int]]] = {}
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and e.get("comm_size") == np:
            share = e.get("share")
            by.setdefault(str(e["collective"]), []).append(
                (float(share) if isinstance(share, int | float) else 0.0, int(e["size"])))
    return {c: sorted({s for _, s in sorted(v, reverse=True)[:MAX_SIZES]})
            for c, v in by.items()}


def describe(sizes: list[int]) -> str:
    return "one step of " + ", ".join(f"{s} B" for s in sizes)
