"""`tune profile`: the PMPI profiler preloaded through the launcher counts exactly the
collectives a program of known calls makes (world, a dup, the halves of a split, v-variants,
a nonblocking one), on Open MPI 4.1 and 5.0 and MPICH; a failed or unprofiled run writes no
profile."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from arrival_prog import DELAY, build_arrival, check_arrival
from colltune.apploop.profiling.profile import inject
from colltune.backends import registry
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from conftest import get_mpi, get_mpich, missing
from helpers import mpirun_args, tune_cli

PROGRAM = Path(__file__).parent / "data" / "profcheck.c"
NP = 4


def _build(mpi: Installation, where: Path) -> Path:
    exe = where / "profcheck"
    res = subprocess.run([str(mpi.mpicc), "-std=c99", "-Wall", "-Wextra", "-Werror", "-o",
                          str(exe), str(PROGRAM)], capture_output=True, text=True,
                         env=mpi.tool_env(), check=False)
    assert res.returncode == 0, res.stderr
    return exe


def _launcher(which: str, mpi: Installation) -> tuple[str, list[str]]:
    if which.startswith("ompi"):
        return "openmpi", [str(mpi.mpirun), "-np", str(NP), "--oversubscribe"]
    return "mpich", [str(mpi.mpirun), "-n", str(NP)]


@pytest.mark.parametrize("which", ["ompi41", "ompi50", "mpich50"])
def test_profile_counts_exactly_the_calls_the_program_makes(which: str, tmp_path: Path
                                                            ) -> None:
    mpi = get_mpi(which) if which.startswith("ompi") else get_mpich(which)
    exe = _build(mpi, tmp_path)
    backend, launch = _launcher(which, mpi)
    out = tmp_path / "app.json"
    r = tune_cli("profile", "-o", str(out), "--mpi", str(mpi.prefix), "--backend", backend,
                 "--timeout", "120", "--", *launch, str(exe), env=mpi.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "colltune-profile" and doc["version"] == 2
    assert doc["ranks"] == NP and doc["mpi"]["version"] == mpi.version
    assert mpi.runs_on(doc["mpi"]["library"])
    got = {(e["collective"], e["comm_size"], e["size"]): (e["calls"], e["ranks"],
                                                         e["bytes_per_call"])
           for e in doc["entries"]}
    assert got == {
        ("allreduce", NP, 1024): (3, NP, 800.0),  # 100 doubles
        ("bcast", NP, 16): (5, NP, 16.0),
        ("reduce", NP // 2, 4): (7, NP, 4.0),  # on both halves of the split
        ("barrier", NP, 0): (4, NP, 0.0),  # on the dup
        ("allgatherv", NP, 32): (2, NP, 32.0),
        ("gatherv", NP, 32): (1, NP, 32.0),
        ("alltoallv", NP, 32): (2, NP, 32.0),
    }, got  # and nothing the library calls inside (comm split, dup, finalize)
    # what the reductions summed (a library may decide by the elements); nothing else says
    assert {e["collective"]: e.get("datatype") for e in doc["entries"]} == {
        "allreduce": "double", "reduce": "int", "bcast": None, "barrier": None,
        "allgatherv": None, "gatherv": None, "alltoallv": None}
    assert doc["nonblocking"] == {"iallreduce": 1}
    for e in doc["entries"]:
        assert 0 < e["time_s"]["mean"] <= e["time_s"]["max"] or e["collective"] == "gatherv"
        assert e["lookup_size"] is not None or not e["tuned_by_colltune"]
    assert doc["wall_s"]["max"] > 0 and doc["collective_s"]["mean"] > 0
    assert "profile written to" in r.stdout and "iallreduce 1" in r.stdout


def test_a_failed_or_unprofiled_run_writes_no_profile(ompi41: Installation, tmp_path: Path
                                                      ) -> None:
    out = tmp_path / "app.json"
    base = ["profile", "-o", str(out), "--mpi", str(ompi41.prefix), "--"]
    launch = [str(ompi41.mpirun), "-np", "2", "--oversubscribe"]
    r = tune_cli(*base, *launch, "false", env=ompi41.tool_env())
    assert r.returncode == 3 and "the application failed" in r.stderr, r.stderr  # MPI/job
    r = tune_cli(*base, *launch, "true", env=ompi41.tool_env())  # no MPI program
    assert r.returncode == 3 and "no rank wrote a profile" in r.stderr, r.stderr
    r = tune_cli(*base, "./app", env=ompi41.tool_env())
    assert r.returncode == 2 and "not an MPI launcher" in r.stderr, r.stderr
    assert not out.exists()


def test_the_profiler_reaches_ranks_through_each_launchers_own_option() -> None:
    env = {"LD_PRELOAD": "/c/libcollprof.so", "COLLTUNE_PROFILE_DIR": "/t"}
    assert inject(["mpirun", "-np", "4", "./a"], registry.named("openmpi"), env) == [
        "mpirun", "-x", "LD_PRELOAD=/c/libcollprof.so", "-x", "COLLTUNE_PROFILE_DIR=/t",
        "-np", "4", "./a"]
    assert inject(["/opt/mpich/bin/mpiexec", "-n", "2", "./a"], registry.named("mpich"),
                  env)[:7] == ["/opt/mpich/bin/mpiexec", "-genv", "LD_PRELOAD",
                               "/c/libcollprof.so", "-genv", "COLLTUNE_PROFILE_DIR", "/t"]
    assert inject(["srun", "-n", "2", "./a"], registry.named("openmpi"), env)[1] == \
        "--export=ALL,LD_PRELOAD=/c/libcollprof.so,COLLTUNE_PROFILE_DIR=/t"
    with pytest.raises(ColltuneError, match="srun --export"):
        inject(["srun", "./a"], registry.named("openmpi"), {"LD_PRELOAD": "/a,b"})
    with pytest.raises(ColltuneError, match="runs no program of its users on smpi"):
        registry.named("smpi").with_apps()


MELT = Path("/usr/share/lammps/examples/melt/in.melt")


def test_profile_of_lammps(ompi41: Installation, tmp_path: Path) -> None:
    """A real application (Debian's LAMMPS, Open MPI 4.1.4) at 4 ranks: every rank's record
    arrives, its collectives are on the world communicator, allreduce and bcast among them."""
    lmp = shutil.which("lmp")
    if lmp is None or not MELT.exists():
        missing("needs Debian's lammps and lammps-examples")
    work = tmp_path / "melt"
    work.mkdir()
    shutil.copy(MELT, work / "in.melt")
    out = tmp_path / "melt.json"
    r = subprocess.run(
        [sys.executable, "-m", "colltune.cli", "profile", "-o", str(out), "--mpi",
         str(ompi41.prefix), "--", str(ompi41.mpirun), "-np", str(NP), "--oversubscribe",
         lmp, "-in", "in.melt", "-log", "none", "-screen", "none"],
        cwd=work, capture_output=True, text=True, timeout=300,
        env={**os.environ, **ompi41.tool_env()}, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["ranks"] == NP
    colls = {e["collective"] for e in doc["entries"]}
    assert {"allreduce", "bcast"} <= colls, colls
    assert all(e["comm_size"] == NP and e["ranks"] == NP for e in doc["entries"])
    assert 0 < doc["collective_s"]["mean"] < doc["wall_s"]["mean"]


def test_each_entry_says_what_the_active_rules_file_runs(ompi41: Installation,
                                                         tmp_path: Path) -> None:
    """As tune explain does: the rules file the command switches on (--mca) decides the
    entries it has a rule for; the rest is Open MPI's fixed decision."""
    exe = _build(ompi41, tmp_path)
    conf = tmp_path / "r.conf"
    conf.write_text("1\n2\n1\n4\n1\n0 1 0 0\n")  # allreduce at 4 ranks: basic_linear
    out = tmp_path / "app.json"
    r = tune_cli("profile", "-o", str(out), "--mpi", str(ompi41.prefix), "--",
                 str(ompi41.mpirun), "-np", str(NP), "--oversubscribe", "--mca",
                 "coll_tuned_use_dynamic_rules", "1", "--mca",
                 "coll_tuned_dynamic_rules_filename", str(conf), str(exe),
                 env=ompi41.tool_env())
    assert r.returncode == 0, r.stderr
    algs = {e["collective"]: e["algorithm"] for e in json.loads(out.read_text())["entries"]}
    assert algs["allreduce"].startswith("basic_linear(1)") and str(conf) in algs["allreduce"]
    assert algs["bcast"].startswith("Open MPI's fixed decision")
    assert algs["gatherv"] is None  # not a collective colltune tunes


FORTRAN = {"ompi41": "/usr/bin/mpifort.openmpi", "mpich40": "/usr/bin/mpifort.mpich"}


@pytest.mark.parametrize("which", ["ompi41", "mpich40"])
@pytest.mark.parametrize("source", ["profcheck.f90", "profcheck_f08.f90"])
def test_fortran_callers_are_counted_once(which: str, source: str, tmp_path: Path) -> None:
    """Open MPI's Fortran bindings call PMPI_* directly (the C wrappers alone see nothing),
    MPICH's call MPI_* (the C wrappers see them): the profiler's Fortran entry points count
    every call of `use mpi` and `use mpi_f08` programs exactly once on both."""
    if shutil.which("gfortran") is None:
        missing("needs gfortran")
    mpi = get_mpi(which) if which.startswith("ompi") else get_mpich(which)
    exe = tmp_path / "fcheck"
    res = subprocess.run([FORTRAN[which], "-o", str(exe), str(PROGRAM.parent / source)],
                         capture_output=True, text=True, env=mpi.tool_env(), check=False)
    assert res.returncode == 0, res.stderr
    backend, launch = _launcher(which, mpi)
    out = tmp_path / "app.json"
    r = tune_cli("profile", "-o", str(out), "--mpi", str(mpi.prefix), "--backend", backend,
                 "--", *launch, str(exe), env=mpi.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr
    got = {(e["collective"], e["comm_size"], e["size"]): (e["calls"], e["ranks"])
           for e in json.loads(out.read_text())["entries"]}
    assert got == {("allreduce", NP, 1024): (3, NP), ("bcast", NP, 16): (5, NP),
                   ("reduce", NP // 2, 4): (7, NP), ("barrier", NP, 0): (4, NP),
                   ("allgatherv", NP, 16): (2, NP)}, got
    # what each reduction summed, by Fortran's own handles (MPI_DOUBLE_PRECISION is not
    # C's MPI_DOUBLE), on the entry the calls were counted in
    summed = {e["collective"]: e.get("datatype") for e in json.loads(out.read_text())["entries"]}
    assert summed == {"allreduce": "double", "reduce": "int", "bcast": None, "barrier": None,
                      "allgatherv": None}, summed


def test_the_preloaded_library_exports_only_mpi_entries() -> None:
    """collprof is preloaded into the application: any other global name it defined (its
    `now`, `record`, tables) could bind to the application's own function of that name, or
    the application's to its. Only MPI's C and Fortran entries are exported."""
    from colltune.kernel.build import build_kernel

    if shutil.which("nm") is None:
        missing("needs nm (binutils)")
    lib = build_kernel(get_mpi("ompi41"), name="collprof")
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    names = [ln.split()[-1] for ln in out.splitlines() if ln.split()]
    assert "MPI_Allreduce" in names and "mpi_allreduce_" in names
    assert "mpi_allreduce_f08_" in names and "MPI_Finalize" in names
    assert [n for n in names if not n.startswith(("MPI_", "mpi_"))] == []


@pytest.mark.alone
def test_profile_records_where_ranks_ran_and_a_known_arrival_pattern(
        ompi41: Installation, tmp_path: Path) -> None:
    """One rank sleeps a set time before each call: the profile's spread for each group
    matches the sleep, and it names that rank as the late one."""
    exe = build_arrival(ompi41, tmp_path)
    out = tmp_path / "arrival.json"
    r = tune_cli("profile", "-o", str(out), "--mpi", str(ompi41.prefix), "--",
                 str(ompi41.mpirun), "-np", "4", "--oversubscribe", str(exe),
                 str(int(DELAY * 1e6)), "3", "100", env=ompi41.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    check_arrival(doc, [doc["layout"]["hosts"][0]] * 4)
    # the kernel replays it: each rank waits its profiled delay before each call (the
    # same rows, in order, for every configuration), and the spread it gave is the
    # profiled one (the replay's accuracy)
    world = next(e["arrival"] for e in doc["entries"]
                 if (e["collective"], e["comm_size"]) == ("allreduce", 4))
    rows = tuple(tuple(row) for row in world["delays_s"])
    plan = KernelPlan("allreduce", [KernelConfig(0, {}), KernelConfig(1, {})],
                      [(0, 8), (1, 8)], Repetitions(min_reps=20, max_reps=40, arrival=rows))
    got = run_kernel(mpirun_args(ompi41, 4, True), build_kernel(ompi41), plan,  # type: ignore[arg-type]
                     ompi41.tool_env())
    assert got.status == "ok" and len(got.results) == 2, got.message
    profiled = world["spread_s"]["median"]
    for res in got.results:
        replayed = statistics.median(res.arrival_spread)
        print(f"cid {res.cid}: replayed spread {replayed * 1e3:.2f} ms, profiled "
              f"{profiled * 1e3:.2f} ms")
        assert len(res.arrival_spread) == res.n
        assert 0.8 * profiled <= replayed <= 1.3 * profiled, (replayed, profiled)
    # rows that differ by repetition: every rank takes the next row at each repetition.
    # The replay once advanced rank 0's row only, the others replaying the first row
    # throughout: with these, rank 0 alone late, then every rank but rank 0, every
    # second repetition had all ranks entering together (a spread near 0)
    turns = ((DELAY, 0.0, 0.0, 0.0), (0.0, DELAY, DELAY, DELAY))
    plan = KernelPlan("allreduce", [KernelConfig(0, {})], [(0, 8)],
                      Repetitions(min_reps=8, max_reps=8, point_time=0.01, arrival=turns))
    got = run_kernel(mpirun_args(ompi41, 4, True), build_kernel(ompi41), plan,  # type: ignore[arg-type]
                     ompi41.tool_env())
    assert got.status == "ok", got.message
    spreads = got.results[0].arrival_spread
    # every repetition late by the sleep (the defect gave a spread near 0 every second
    # one); a sleep overshoots on a loaded machine, so the bound above is on the median
    assert len(spreads) == 8 and all(0.8 * DELAY <= x for x in spreads), spreads
    assert statistics.median(spreads) <= 2 * DELAY, spreads
    # a pattern out of bounds (a delay over 10 s) is a plan the kernel refuses
    bad = KernelPlan("allreduce", [KernelConfig(0, {})], [(0, 8)],
                     Repetitions(arrival=((0.0, 0.0, 0.0, 11.0),)))
    got = run_kernel(mpirun_args(ompi41, 4, True), build_kernel(ompi41), bad,  # type: ignore[arg-type]
                     ompi41.tool_env())
    assert got.status != "ok" and not got.results, got.status
