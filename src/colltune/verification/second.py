"""The gate's second, independent measurement (`tune verify --with osu|imb`): OSU
Micro-Benchmarks or Intel MPI Benchmarks run as they are, the arms alternating like the
kernel's launch pairs, their averages per size and launch read back as samples."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from colltune import jobdir
from colltune.backends import registry
from colltune.backends.files import Arms
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, FormatError
from colltune.osu.imb_output import IMB_NAMES, ImbError, table
from colltune.osu.imb_output import parse as parse_imb
from colltune.osu.osu_output import parse as parse_osu
from colltune.slots import Placement
from colltune.tuner.confirm import ABSamples

# untimed calls of a launch before its first judged size: Intel MPI 2021.18 runs the first
# 300-550 calls of a launch (of any size) of bcast, reduce, gather, allgather and alltoall
# 2-10x slower than the rest (bench/first_calls.py), so a judge that timed calls 20-220
# (OSU's first size) or IMB's first 200 judged the launch's start, not the file. OSU's
# skip is per size: up to 1 MiB at 4 ranks on 2 cores, osu_reduce took 28 s, not 5.7
LEAD_CALLS = 1000

OSU_PROGRAMS = {"allgather": "osu_allgather", "allreduce": "osu_allreduce",
                "alltoall": "osu_alltoall", "barrier": "osu_barrier", "bcast": "osu_bcast",
                "gather": "osu_gather", "reduce": "osu_reduce", "scatter": "osu_scatter",
                "reduce_scatter": "osu_reduce_scatter", "allgatherv": "osu_allgatherv",
                "alltoallv": "osu_alltoallv", "gatherv": "osu_gatherv",
                "scatterv": "osu_scatterv"}


def find_osu(coll: str, osu_dir: Path | None) -> Path | None:
    prog = OSU_PROGRAMS.get(coll)
    if prog is None:
        return None
    if osu_dir is not None:
        hits = sorted(osu_dir.rglob(prog))
        return next((h for h in hits if h.is_file() and os.access(h, os.X_OK)), None)
    found = shutil.which(prog)
    return Path(found) if found else None


def osu_ab_runs(mpi: Installation, exe: Path, placement: Placement, arms: Arms,
                sizes: list[int], rounds: int, first_round: int = 0,
                iterations: int = 200) -> ABSamples:
    """OSU's average latency per size and launch, arms alternating like the kernel's; OSU
    cannot repeat a size, so each size skips LEAD_CALLS calls (its own warm-up) first."""
    out = ABSamples(rounds)
    be = registry.of(mpi)
    lo, hi = (min(sizes), max(sizes)) if sizes else (0, 0)
    cmd = [*be.launch(mpi, placement, "", 0, None)[0],
           str(exe), "-f", "-i", str(iterations), "-x", str(LEAD_CALLS)]
    if exe.name != "osu_barrier":
        cmd += ["-m", f"{max(1, lo)}:{hi}"]
    for rnd in range(first_round, first_round + rounds):
        for arm in (("default", "tuned") if rnd % 2 == 0 else ("tuned", "default")):
            text = run_program(cmd, be.launch(mpi, placement, "", 0, arms[arm])[1], exe)
            try:
                run = parse_osu(text, exe.name)
            except FormatError as e:
                raise ColltuneError(f"cannot read {exe.name}'s output: {e}",
                                    "check that this is an OSU collective benchmark") from None
            for row in run.rows:
                if row.size in sizes or exe.name == "osu_barrier":
                    size = 0 if exe.name == "osu_barrier" else row.size
                    out.samples[arm].setdefault(size, []).append([row.avg_us * 1e-6])
    return out




def find_imb(mpi: Installation) -> Path | None:
    """IMB-MPI1 as the installation ships it (Intel MPI's bin/), else on PATH; never a
    path read from a file."""
    own = mpi.prefix / "bin" / "IMB-MPI1"
    if own.is_file() and os.access(own, os.X_OK):
        return own
    found = shutil.which("IMB-MPI1")
    return Path(found) if found else None


def imb_ab_runs(mpi: Installation, exe: Path, placement: Placement, arms: Arms, coll: str,  # noqa: PLR0913 (a batch like ab_runs, by keyword)
                sizes: list[int], rounds: int, first_round: int = 0,
                iterations: int = 200) -> ABSamples:
    """IMB's t_avg (the mean over ranks, as OSU's) per size and launch, at exactly `sizes`
    (-msglen) after the smallest repeated unjudged for LEAD_CALLS calls, arms
    alternating like the kernel's."""
    out = ABSamples(rounds)
    be = registry.of(mpi)
    name = IMB_NAMES[coll]
    lens = imb_lengths(sizes, iterations)
    lead = len(lens) - len(sizes)
    with jobdir.temporary(prefix="colltune-imb-") as tmp:
        path = Path(tmp) / "msglen"
        path.write_text("".join(f"{s}\n" for s in lens))
        cmd = [*be.launch(mpi, placement, "", 0, None)[0], str(exe), name, "-npmin",
               str(placement.np), "-iter", str(iterations), "-iter_policy", "off"]
        if coll != "barrier":
            cmd += ["-msglen", str(path)]
        for rnd in range(first_round, first_round + rounds):
            for arm in (("default", "tuned") if rnd % 2 == 0 else ("tuned", "default")):
                text = run_program(cmd, be.launch(mpi, placement, "", 0, arms[arm])[1], exe)
                try:
                    t = table(parse_imb(text), name, placement.np)
                except ImbError as e:
                    raise ColltuneError(f"cannot read {exe.name}'s output: {e}",
                                        "check that this is IMB-MPI1") from None
                if t is None:
                    raise ColltuneError(f"{exe.name} printed no {name} table for "
                                        f"{placement.np} processes",
                                        "run it by hand under mpirun to see why")
                got = ({0: t.rows[0]["t_avg[usec]"]} if coll == "barrier"
                       else t.avg_us(lead))
                for size, us in got.items():
                    if size in sizes or coll == "barrier":
                        out.samples[arm].setdefault(size, []).append([us * 1e-6])
    return out


def imb_lengths(sizes: list[int], iterations: int) -> list[int]:
    """IMB's -msglen lines: the smallest size (the start counts calls of any size, so the
    cheapest), repeated until it covers LEAD_CALLS calls (IMB reports a row for each,
    unjudged), then every size once."""
    if not sizes:
        return [0]
    return [min(sizes)] * -(-LEAD_CALLS // max(1, iterations)) + sizes


def run_program(cmd: list[str], env: dict[str, str], exe: Path,
                allow: tuple[int, ...] = (0,)) -> str:
    """What a benchmark's launch printed; ColltuneError where it hung or exited with a
    code not in `allow` (its own way of saying what went wrong is read by the caller)."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env,
                             check=False)
    except subprocess.TimeoutExpired:
        raise ColltuneError(f"{exe.name} did not finish in 600 s",
                            "run it by hand under mpirun to see why") from None
    if res.returncode not in allow:
        raise ColltuneError(f"{exe.name} failed (exit {res.returncode}): "
                            f"{res.stderr.strip()[-300:]}",
                            "run it by hand under mpirun to see why")
    return res.stdout


@dataclass(frozen=True)
class Second:
    """A second benchmark for one collective: its name in reports and its launch pairs."""

    name: str  # OSU | IMB
    exe: Path
    runs: Callable[[list[int], int, int], ABSamples]  # (sizes, first round, rounds)


def second(which: str, mpi: Installation, placement: Placement, arms: Arms, coll: str,
           osu_dir: Path | None) -> Second | None:
    """`--with osu|imb` for one collective (None: the benchmark is not found)."""
    if which == "imb":
        imb = find_imb(mpi) if coll in IMB_NAMES else None
        if imb is None:
            return None

        def imb_runs(szs: list[int], first: int, n: int) -> ABSamples:
            assert imb is not None
            return imb_ab_runs(mpi, imb, placement, arms, coll, szs, n, first)
        return Second("IMB", imb, imb_runs)
    osu = find_osu(coll, osu_dir)
    if osu is None:
        return None

    def osu_runs(szs: list[int], first: int, n: int) -> ABSamples:
        assert osu is not None
        return osu_ab_runs(mpi, osu, placement, arms, szs, n, first)
    return Second("OSU", osu, osu_runs)
