"""A kernel built against another MPI than the one launching it is detected and rebuilt,
and never measures: the cached binary check and the launch-time check both hold."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI, launch_env
from colltune.kernel.build import build_kernel, kernel_library, kernel_path, library_matches
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from conftest import get_mpi
from helpers import collbench_pids, mpirun_args, ranks_left, tune_cli

pytestmark = pytest.mark.mpi


@pytest.fixture
def pair() -> tuple[OpenMPI, OpenMPI]:
    return get_mpi("ompi41"), get_mpi("ompi50")


def _plant_foreign_kernel(target: OpenMPI, foreign: OpenMPI) -> Path:
    """Put `foreign`'s kernel where `target`'s cached kernel belongs."""
    src = build_kernel(foreign)
    dst = kernel_path(target)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    assert library_matches(foreign, kernel_library(dst, target.tool_env()))
    assert not library_matches(target, kernel_library(dst, target.tool_env()))
    return dst


@pytest.mark.parametrize("direction", ["4.1-kernel-under-5.0", "5.0-kernel-under-4.1"])
def test_tuner_rebuilds_a_kernel_built_for_another_mpi(pair: tuple[OpenMPI, OpenMPI],
                                                      direction: str, tmp_path: Path) -> None:
    ompi41, ompi50 = pair
    target, foreign = (ompi50, ompi41) if direction.startswith("4.1") else (ompi41, ompi50)
    planted = _plant_foreign_kernel(target, foreign)
    db = tmp_path / "db.sqlite"
    r = tune_cli("reduce", "--boundaries", "midpoint",
                 "--np", "2", "--mpi", str(target.prefix), "--db", str(db),
                 "--sizes", "8,4K", "--confirm-rounds", "0", "--point-time", "0.02",
                 "--min-reps", "3", "--quiet", "--out", str(tmp_path / "rules.conf"))
    assert r.returncode == 0, r.stderr
    assert "rebuilding" in r.stderr and foreign.version in r.stderr
    # the binary now in the cache loads the launching MPI's library
    assert library_matches(target, kernel_library(planted, target.tool_env()))
    with sqlite3.connect(db) as c:
        statuses = {s for (s,) in c.execute("SELECT status FROM measurements")}
    assert statuses == {"ok"}


def test_launch_check_kills_a_foreign_kernel_before_it_measures(
        pair: tuple[OpenMPI, OpenMPI]) -> None:
    """Second line of defence, for a binary that passes the cache check but loads another
    library under mpirun: the kernel's own report stops the launch before any point. The
    5.0 wheel's kernel has a RUNPATH to the wheel, so under 4.1's mpirun it loads 5.0."""
    ompi41, ompi50 = pair
    foreign = build_kernel(ompi50)
    before = set(collbench_pids())
    plan = KernelPlan("reduce", [KernelConfig(0)], [(0, 8), (0, 4096)],
                      Repetitions(warmup=1, min_reps=3, max_reps=5))
    out = run_kernel(mpirun_args(ompi41, 2, False), foreign, plan, launch_env(),
                     point_timeout=60, runs_on=ompi41)
    assert out.status == "mismatch", (out.status, out.library, out.results)
    assert ompi50.version in (out.library or "")
    # both are named: what the ranks loaded (the wheel's file) and what should have run
    assert f"'{out.library}'" in out.message and ompi41.describe() in out.message
    assert Path(out.library_file).resolve().is_relative_to(ompi50.prefix.resolve())
    assert out.results == []
    assert ranks_left(before) == set()
