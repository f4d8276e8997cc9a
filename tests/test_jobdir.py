"""Where a job's files go and what is refused across nodes; srun's PMI choice and binding
when the user gave their own (the choice from `srun --mpi=list` is tested live on the test
cluster, tests/test_cluster_live.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune import jobdir
from colltune.errors import ColltuneError
from colltune.launchers import Layout, command, srun_mpi


def test_node_local_paths_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TMPDIR", raising=False)
    assert "under /tmp" in (jobdir.node_local(Path("/tmp/x/y")) or "")
    assert "under /dev/shm" in (jobdir.node_local(Path("/dev/shm/j")) or "")
    monkeypatch.setenv("TMPDIR", "/scratch-local")
    assert "under /scratch-local" in (jobdir.node_local(Path("/scratch-local/j")) or "")
    # a path in no temporary directory, on the root file system (not in memory)
    assert jobdir.node_local(Path("/home/someone/.cache")) is None


def test_a_job_across_nodes_is_refused_node_local_files(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setenv("COLLTUNE_JOB_DIR", "/tmp/jobs")
    jobdir.require_shared(1)  # one node: /tmp is fine
    with pytest.raises(ColltuneError) as e:
        jobdir.require_shared(2)
    assert "the job directory /tmp/jobs must be seen by all 2 nodes" in e.value.message
    assert "COLLTUNE_JOB_DIR" in e.value.hint
    monkeypatch.setenv("COLLTUNE_JOB_DIR", "/home/someone/jobs")
    monkeypatch.setenv("XDG_CACHE_HOME", "/dev/shm/cache")
    with pytest.raises(ColltuneError) as e:
        jobdir.require_shared(4)
    assert "colltune's cache" in e.value.message and "XDG_CACHE_HOME" in e.value.hint


def test_a_jobs_files_are_private_and_removed(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setenv("COLLTUNE_JOB_DIR", str(tmp_path / "jobs"))
    with jobdir.temporary("colltune-x-") as d:
        assert Path(d).parent == tmp_path / "jobs" and Path(d).stat().st_mode & 0o077 == 0
    assert not Path(d).exists()
    assert (tmp_path / "jobs").stat().st_mode & 0o077 == 0


def test_the_users_pmi_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_MPI_TYPE", raising=False)
    assert srun_mpi("srun", ("--mpi=pmi2",), {}, ("pmix",)) == []
    assert srun_mpi("srun", ("--mpi", "pmi2"), {}, ("pmix",)) == []
    assert srun_mpi("srun", (), {"SLURM_MPI_TYPE": "pmi2"}, ("pmix",)) == []
    # an srun that lists nothing: the MPI's own first choice, said
    assert srun_mpi("/nonexistent/srun", (), {}, ("pmix", "pmi2")) == ["--mpi=pmix"]


def test_the_users_binding_applies(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = command("srun", "srun", Layout(4, nodes=2, ppn=2, extra=("--mpi=pmix",
                                                                  "--cpu-bind=sockets")))
    assert "--cpu-bind=cores" not in cmd and "--cpu-bind=sockets" in cmd
    cmd = command("mpirun", "mpirun", Layout(4, nodes=2, ppn=2,
                                              extra=("--bind-to", "socket")))
    assert cmd.count("--bind-to") == 1 and cmd[cmd.index("--bind-to") + 1] == "socket"
    err = capsys.readouterr().err
    assert "--cpu-bind sockets from --launcher-args applies" in err
    assert "--bind-to socket from --launcher-args applies" in err
