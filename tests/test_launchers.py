"""Launcher command lines (mpirun, srun, mpiexec, mpirun_rsh) and what a Slurm allocation
offers, from the environment Slurm sets inside `salloc -N 4 --ntasks-per-node 16`
(names and formats as Slurm documents them; no Slurm runs on this machine)."""

from __future__ import annotations

import pytest

from colltune.errors import ColltuneError
from colltune.launchers import (
    Layout,
    command,
    default_launcher,
    expand_tasks_per_node,
    slurm_allocation,
)
from colltune.slots import place

SALLOC = {
    "SLURM_JOB_ID": "812345", "SLURM_JOBID": "812345", "SLURM_JOB_NUM_NODES": "4",
    "SLURM_NNODES": "4", "SLURM_NTASKS": "64", "SLURM_NPROCS": "64",
    "SLURM_TASKS_PER_NODE": "16(x4)", "SLURM_JOB_NODELIST": "cn[001-004]",
    "SLURM_NTASKS_PER_NODE": "16", "SLURM_CLUSTER_NAME": "hpc",
}


def test_slurm_allocation_is_read_from_its_variables() -> None:
    a = slurm_allocation(SALLOC)
    assert a is not None
    assert (a.job_id, a.nodes, a.tasks, a.ppn, a.nodelist) == ("812345", 4, 64, 16,
                                                               "cn[001-004]")
    assert slurm_allocation({"HOME": "/root"}) is None
    assert expand_tasks_per_node("16(x3),8") == [16, 16, 16, 8]
    assert expand_tasks_per_node("2") == [2]
    with pytest.raises(ColltuneError):
        expand_tasks_per_node("16(x")
    # uneven nodes: the smallest count is what every node can take
    uneven = slurm_allocation({**SALLOC, "SLURM_TASKS_PER_NODE": "16(x3),8",
                               "SLURM_NTASKS": "56"})
    assert uneven is not None and uneven.ppn == 8 and uneven.tasks == 56


def test_placement_inside_an_allocation() -> None:
    p = place(64, env=SALLOC)
    assert (p.np, p.nodes, p.ppn, p.oversubscribe) == (64, 4, 16, False)
    assert place(2, env=SALLOC).nodes == 2
    with pytest.raises(ColltuneError, match="more than the 64 tasks of Slurm job 812345"):
        place(128, env=SALLOC)
    assert default_launcher(SALLOC, None) == "srun"
    assert default_launcher({}, None) == "mpirun"
    assert default_launcher(SALLOC, "mpirun") == "mpirun"
    with pytest.raises(ColltuneError, match="unknown launcher"):
        default_launcher({}, "aprun")


def test_mpirun_command_lines() -> None:
    assert command("mpirun", "mpirun", Layout(4, oversubscribe=True)) == [
        "mpirun", "-np", "4", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
    assert command("mpirun", "/opt/ompi/bin/mpirun",
                   Layout(64, nodes=4, ppn=16, hostfile="hosts", extra=("--tag-output",)),
                   mca={"coll": "^han"}, env={"MY": "1"}) == [
        "env", "MY=1", "/opt/ompi/bin/mpirun", "-np", "64", "--hostfile", "hosts",
        "--map-by", "ppr:16:node", "--bind-to", "core", "--mca", "coll", "^han", "-x", "MY",
        "--tag-output"]


def test_srun_command_lines() -> None:
    assert command("srun", "srun", Layout(64, nodes=4, ppn=16), mca={"coll": "^han"}) == [
        "env", "OMPI_MCA_coll=^han", "srun", "-n", "64", "-N", "4", "--ntasks-per-node",
        "16", "--cpu-bind=cores"]
    assert command("srun", "srun", Layout(4, oversubscribe=True)) == [
        "env", "OMPI_MCA_mpi_yield_when_idle=1", "srun", "-n", "4", "--cpu-bind=none",
        "--overcommit"]


def test_mpiexec_and_mpirun_rsh_command_lines() -> None:
    assert command("mpiexec", "mpiexec", Layout(8, ppn=4, hostfile="h"),
                   env={"MPIR_CVAR_DEVICE_COLLECTIVES": "none"}) == [
        "mpiexec", "-n", "8", "-f", "h", "-ppn", "4", "-bind-to", "core", "-genv",
        "MPIR_CVAR_DEVICE_COLLECTIVES", "none"]
    with pytest.raises(ColltuneError, match="MCA"):
        command("mpiexec", "mpiexec", Layout(2), mca={"coll": "^han"})
    assert command("mpirun_rsh", "mpirun_rsh", Layout(2, oversubscribe=True),
                   env={"MV2_INTER_REDUCE_TUNING": "1:0-+"}) == [
        "mpirun_rsh", "-np", "2", "localhost", "localhost", "MV2_INTER_REDUCE_TUNING=1:0-+",
        "MV2_ENABLE_AFFINITY=0"]
    assert command("mpirun_rsh", "mpirun_rsh", Layout(4, hostfile="hosts"))[:5] == [
        "mpirun_rsh", "-np", "4", "-hostfile", "hosts"]


@pytest.mark.mpi
def test_layout_and_launcher_args_reach_the_real_launch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """--nodes/--ppn are recorded with every measurement, and --launcher-args reach mpirun
    and the ranks: `-x NAME=VALUE` (only there, not in the tuner's environment) sets the
    kernel's test-only fault switch, and the configuration it names comes back invalid,
    which only the ranks themselves can report."""
    import sqlite3

    from colltune.backends.openmpi.install import find_openmpi
    from helpers import tune_cli

    ompi = find_openmpi("/usr")
    db = tmp_path / "db.sqlite"
    r = tune_cli("reduce", "--np", "4", "--nodes", "1", "--ppn", "4", "--mpi", str(ompi.prefix),
                 "--db", str(db), "--sizes", "64", "--confirm-rounds", "0", "--quiet",
                 "--launcher-args", "-x COLLTUNE_TEST_FAULT=wrong:coll_tuned_reduce_algorithm=1")
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(db)
    rows = con.execute("SELECT DISTINCT np, ppn, nodes FROM measurements").fetchall()
    bad = con.execute("SELECT config_key FROM measurements WHERE status='invalid'").fetchall()
    con.close()
    assert rows == [(4, 4, 1)]
    assert bad == [("a1",)]


def test_open_mpi_5_launches_exclude_han_and_4_1_does_not() -> None:
    """coll/han would run instead of the tuned algorithms on several nodes (5.x only)."""
    from pathlib import Path

    from colltune.backends.openmpi.install import OpenMPI, launch_command
    from colltune.launchers import Launch as L

    p = place(4, env={}, launch=L("mpirun", 2, 2))
    for version, han_off in (("5.0.11", True), ("4.1.4", False)):
        mpi = OpenMPI(version, Path("/x"), Path("/x/bin/mpicc"), Path("/x/bin/mpirun"),
                      Path("/x/bin/ompi_info"))
        cmd = launch_command(mpi, p)
        assert (" --mca coll ^han" in " ".join(cmd)) is han_off, cmd
    p = place(4, env={"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_NTASKS": "4"})
    mpi = OpenMPI("5.0.11", Path("/x"), Path("/x/bin/mpicc"), Path("/x/bin/mpirun"),
                  Path("/x/bin/ompi_info"))
    assert "OMPI_MCA_coll=^han" in launch_command(mpi, p)  # srun: through the environment


def test_a_launch_placed_otherwise_than_its_layout_is_refused() -> None:
    """The kernel's start event says where the ranks are (their processor names): an exact
    layout asked for (--layouts, --nodes x --ppn = --np) must be the one that runs, as
    every measurement is recorded with it; a layout only bounded (--ppn 16 at 4 ranks)
    may be filled less."""
    from colltune.launchers import Launch
    from colltune.slots import Placement
    from colltune.tuner.measure import check_placed

    exact = Placement(4, False, "hosts", 1, 4, launch=Launch("mpirun", 1, 4))
    check_placed(exact, {"event": "start", "nodes": 1, "ppn": 4})
    check_placed(exact, {"event": "start"})  # a kernel that does not say: nothing to check
    with pytest.raises(ColltuneError, match="as 1 node.s. x 4, the launcher placed them "
                                            "as 2 node.s. x 2"):
        check_placed(exact, {"event": "start", "nodes": 2, "ppn": 2})
    bounded = Placement(4, False, None, 1, 16, launch=Launch("mpirun", None, 16))
    check_placed(bounded, {"event": "start", "nodes": 1, "ppn": 4})
    filled = Placement(4, False, "hosts", 1, 4)  # a hostfile's slots, filled host by host
    with pytest.raises(ColltuneError, match="placed them as 2 node"):
        check_placed(filled, {"event": "start", "nodes": 2, "ppn": 2})
    unasked = Placement(4, False, None, 2, 2)  # an allocation's: the launcher's own
    check_placed(unasked, {"event": "start", "nodes": 1, "ppn": 4})


def test_a_hostfile_is_filled_host_by_host(tmp_path) -> None:  # noqa: ANN001
    """Without --ppn, a hostfile's layout is its slots filled in order, as mpirun and Hydra
    fill them: recorded with every measurement and checked against where the ranks ran."""
    from colltune.slots import hostfile_fill, hostfile_slots

    ompi = tmp_path / "hosts"
    ompi.write_text("# two nodes\nn1 slots=2\nn2 slots=2 # the second\n")
    hydra = tmp_path / "hydra"
    hydra.write_text("n1:4\nn2:4\n")
    lines = tmp_path / "lines"
    lines.write_text("n1\nn1\nn2\nn2\n")
    assert [hostfile_fill(str(f), 4) for f in (ompi, hydra, lines)] == [(2, 2), (1, 4), (2, 2)]
    assert hostfile_fill(str(hydra), 6) == (2, 4) and hostfile_slots(str(hydra)) == 8
    p = place(4, str(ompi), env={})
    assert (p.nodes, p.ppn) == (2, 2)
