"""`tune verify --step`: the application step (kernel/bench/collstep.c) calls each of its sizes as
often as it says, seen by colltune's PMPI profiler in the ranks; its output is read
strictly; its sizes are the kernel's. The step's verdict on a known-slow file:
tests/test_verify_live.py::test_known_slow_file_is_a_regression."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from colltune.apploop.profiling.profile import load
from colltune.backends.openmpi.install import OpenMPI
from colltune.collectives import get_collective
from colltune.errors import ColltuneError
from colltune.kernel.build import build_kernel
from colltune.verification.step import (
    LEAD_CALLS,
    STRETCHES,
    parse_stretches,
    profile_steps,
    step_sizes,
)
from helpers import tune_cli

ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@pytest.mark.mpi
def test_the_step_calls_every_size_as_often_as_it_says(ompi41: OpenMPI, tmp_path: Path) -> None:
    """Run alone, collstep prints its steps per stretch; under `tune profile` (PMPI wrappers
    in every rank) each size is called the lead's steps, five stretches of those steps and
    one checked call more, the same number of times at each size."""
    exe = build_kernel(ompi41, name="collstep")
    launch = [str(ompi41.prefix / "bin" / "mpirun"), "--oversubscribe", "-np", "4"]
    run = subprocess.run([*launch, str(exe), "reduce", "0.01", "8", "65536"],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**ompi41.tool_env(), **ROOT})
    assert run.returncode == 0, run.stderr
    assert len(parse_stretches(run.stdout)) == STRETCHES
    prof = tmp_path / "p.json"
    r = tune_cli("profile", "-o", str(prof), "--mpi", str(ompi41.prefix), "--", *launch,
                 str(exe), "reduce", "0.01", "8", "65536", env=ROOT)
    assert r.returncode == 0, r.stderr
    calls = {e["size"]: e["calls"] for e in json.loads(prof.read_text())["entries"]
             if e["collective"] == "reduce"}
    assert set(calls) == {8, 65536}, calls
    lead = -(-LEAD_CALLS // 2)
    assert calls[8] == calls[65536] and (calls[8] - lead - 1) % STRETCHES == 0, calls
    assert calls[8] > lead + 1 + STRETCHES, calls  # every stretch ran steps
    # what `tune verify --step-from` reads from such a profile: the sizes at 4 ranks
    assert profile_steps(load(prof), 4) == {"reduce": [8, 65536]}
    assert profile_steps(load(prof), 2) == {}


def test_what_collstep_prints_is_read_strictly() -> None:
    line = '{"event":"stretch","k":%d,"steps":9,"step":%s,"mean":1e-05}'
    ok = "\n".join(line % (k, "2e-05") for k in range(STRETCHES)) + '\n{"event":"done"}\n'
    assert parse_stretches("noise from the launcher\n" + ok) == [2e-05] * STRETCHES
    with pytest.raises(ColltuneError, match="wrong result"):
        parse_stretches(ok.replace('"done"', '"wrong"'))
    with pytest.raises(ColltuneError, match="timed 4 of 5"):
        parse_stretches(ok.split("\n", 1)[1])
    with pytest.raises(ColltuneError, match="stopped before it finished"):
        parse_stretches(ok.replace('{"event":"done"}', ""))  # it never finished
    for bad in ("NaN", "-1", "0", '"fast"'):
        with pytest.raises(ColltuneError, match="step time"):
            parse_stretches(ok.replace("2e-05", bad, 1))


def test_the_steps_sizes_are_the_kernels() -> None:
    reduce, bcast = get_collective("reduce"), get_collective("bcast")
    assert step_sizes(reduce, 4, [7, 8, 65536]) == [8, 65536]  # whole doubles
    assert step_sizes(bcast, 4, [1, 1 << 20]) == [1, 1 << 20]
    with pytest.raises(ColltuneError, match="too large"):
        step_sizes(get_collective("alltoall"), 4, [8, 1 << 30])
    with pytest.raises(ColltuneError, match="at most 64"):
        step_sizes(bcast, 4, list(range(1, 66)))
