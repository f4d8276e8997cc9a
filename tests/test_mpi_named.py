"""The MPI that runs is the MPI named: another MPI's library on LD_LIBRARY_PATH (as
`module load` leaves it) never silently changes what colltune tunes (issue 75)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from colltune.backends.common import tools
from colltune.backends.openmpi.install import OpenMPI
from colltune.backends.registry import launch
from colltune.cli import _keep_env
from colltune.core.toolchain import library_problem
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import (
    KernelConfig,
    KernelPlan,
    LaunchOutcome,
    Repetitions,
    run_kernel,
)
from colltune.slots import place
from conftest import IMPI_PREFIX, MPICH_PREFIXES, get_mpi, get_mpich, missing
from helpers import tune_cli

PROGRAM = Path(__file__).parent / "data" / "profcheck.c"

pytestmark = pytest.mark.mpi


def _one_error(r: object) -> str:
    """The error line of a refused command (one line, then its hint)."""
    err = str(getattr(r, "stderr", ""))
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def _wheel_lib() -> Path:
    lib = get_mpi("ompi50").prefix / "lib"
    if not (lib / "libmpi.so.40").exists():
        missing(f"the Open MPI 5.0 wheel's library is not at {lib}")
    return lib


def test_open_mpi_5s_library_with_usr_is_refused_never_tuned_as_mpich(tmp_path: Path) -> None:
    """Reproduction 1: `--mpi /usr` (Open MPI 4.1 and MPICH 4.0 both there) with the Open MPI
    5.0 wheel's lib/ on LD_LIBRARY_PATH made ompi_info crash and colltune tune MPICH. Now:
    exit 3 naming the variable and the file; with --keep-env, the tool's crash and its
    likely cause; MPICH never named, no file written."""
    get_mpi("ompi41")
    env = {"LD_LIBRARY_PATH": str(_wheel_lib())}
    out = tmp_path / "rules.conf"
    r = tune_cli("reduce", "--mpi", "/usr", "--np", "2", "--sizes", "8", "--out", str(out),
                 env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    line = _one_error(r)
    assert "LD_LIBRARY_PATH holds " + str(_wheel_lib() / "libmpi.so.40") in line
    assert "MPICH" not in r.stdout + r.stderr and not out.exists()
    assert "--keep-env" in r.stderr
    # accepted knowingly: the prefix's own tool runs, crashes, and says so (never "not found")
    r = tune_cli("--version", "--mpi", "/usr", "--keep-env", env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    line = _one_error(r)
    assert "ompi_info is there but crashed (signal 11, SIGSEGV)" in line, line
    assert "LD_LIBRARY_PATH holds" in line and "MPICH" not in r.stdout


def test_intel_mpis_library_with_an_mpich_prefix_is_named_not_called_missing() -> None:
    """Reproduction 2: Intel MPI's lib/ on LD_LIBRARY_PATH (as its vars.sh sets it) made
    MPICH 5.0.2's mpichversion answer as Intel MPI, and colltune said no mpichversion was
    there. Now refused by the variable, and with --keep-env, what the tool answered."""
    mpich = get_mpich("mpich50")
    impi_lib = Path(IMPI_PREFIX) / "lib"
    if not (impi_lib / "libmpi.so.12").exists():
        missing(f"Intel MPI's library is not at {impi_lib}")
    env = {"LD_LIBRARY_PATH": str(impi_lib)}
    r = tune_cli("--version", "--mpi", MPICH_PREFIXES["mpich50"], env=env)
    assert r.returncode == 3
    assert f"LD_LIBRARY_PATH holds {impi_lib / 'libmpi.so.12'}" in _one_error(r)
    r = tune_cli("--keep-env", "--version", "--mpi", MPICH_PREFIXES["mpich50"], env=env)
    assert r.returncode == 3
    line = _one_error(r)
    assert f"{mpich.mpichversion} is there but answers as 'Intel(R) MPI Library" in line, line
    assert "no MPICH found" not in r.stderr
    # without the foreign library, the same prefix is MPICH's
    r = tune_cli("--version", "--mpi", MPICH_PREFIXES["mpich50"])
    assert r.returncode == 0 and f"MPICH {mpich.version}" in r.stdout


def _start(mpi: OpenMPI, env_extra: dict[str, str]) -> LaunchOutcome:
    """One real launch of the kernel on `mpi`, held to its library."""
    plan = KernelPlan("bcast", [KernelConfig(0)], [(0, 8)],
                      Repetitions(min_reps=2, max_reps=2, point_time=0.01))
    cmd, env = launch(mpi, place(2), "bcast", 0, None)
    return run_kernel(cmd, build_kernel(mpi), plan, {**env, **env_extra}, runs_on=mpi)


def test_a_launch_on_a_copy_of_the_library_outside_the_prefix_is_refused(
        tmp_path: Path) -> None:
    """The version string cannot see it: a copy of /usr's own libmpi.so.40 in another
    directory answers "Open MPI v4.1.4" as the prefix's does. The kernel's start event
    carries the file its ranks loaded, and the launch is refused before it measures,
    naming both; `tune reduce` stops (exit 3) and tune profile refuses the ranks the same
    way. The same launch without the copy runs, each rank on the prefix's own file (so
    the check is not one that always refuses)."""
    ompi = get_mpi("ompi41")
    own = _start(ompi, {})
    assert own.status == "ok", own.message
    f = Path(own.library_file).resolve()
    assert f.name.startswith("libmpi.so.40") and f.is_relative_to(Path("/usr"))
    assert library_problem(ompi, str(own.library), own.library_file) is None

    copy = tmp_path / "lib"
    copy.mkdir()
    shutil.copy2(f, copy / "libmpi.so.40")
    env = {"LD_LIBRARY_PATH": str(copy)}
    refused = _start(ompi, env)
    assert refused.status == "mismatch" and not refused.results
    assert f"loaded {copy / 'libmpi.so.40'}, outside /usr" in refused.message
    assert "Open MPI v4.1.4" in str(refused.library)  # the words alone would have passed

    env[tools.KEEP_ENV] = "1"
    out = tmp_path / "rules.conf"
    r = tune_cli("reduce", "--mpi", "/usr", "--np", "2", "--oversubscribe", "--sizes", "8",
                 "--out", str(out), "--db", str(tmp_path / "db.sqlite"), env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"loaded {copy / 'libmpi.so.40'}, outside /usr" in _one_error(r)
    assert not out.exists()

    exe = tmp_path / "profcheck"
    subprocess.run([str(ompi.mpicc), "-std=c99", "-o", str(exe), str(PROGRAM)], check=True,
                   env=ompi.tool_env())
    r = tune_cli("profile", "--mpi", "/usr", "-o", str(tmp_path / "p.json"), "--",
                 str(ompi.mpirun), "-np", "2", "--oversubscribe", str(exe),
                 env={**ompi.tool_env(), **env})
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"loaded {copy / 'libmpi.so.40'}, outside /usr" in _one_error(r)


def test_keep_env_is_taken_anywhere_before_the_programs_arguments() -> None:
    os.environ.pop(tools.KEEP_ENV, None)
    try:
        assert _keep_env(["reduce", "--np", "2"]) == ["reduce", "--np", "2"]
        assert tools.KEEP_ENV not in os.environ
        # after `--`, it is the application's own argument
        assert _keep_env(["profile", "--", "app", "--keep-env"]) == [
            "profile", "--", "app", "--keep-env"]
        assert tools.KEEP_ENV not in os.environ
        assert _keep_env(["reduce", "--keep-env", "--np", "2"]) == ["reduce", "--np", "2"]
        assert os.environ[tools.KEEP_ENV] == "1"
    finally:
        os.environ.pop(tools.KEEP_ENV, None)
