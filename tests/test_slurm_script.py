"""`--slurm-script`: a batch script with the layout and a time limit from the plan, that
runs the same tuning through srun; nothing is measured when it is written."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from colltune.collectives import get_collective
from colltune.options import MeasureSettings, TuneOptions
from colltune.outputs.slurm_script import hms
from colltune.slots import place
from colltune.tuner import forecast
from helpers import tune_cli


def test_batch_script_for_512_ranks(tmp_path: Path) -> None:
    job, db = tmp_path / "job.sh", tmp_path / "never.sqlite"
    r = tune_cli("reduce", "--np", "512", "--nodes", "32", "--ppn", "16", "--mpi", "/opt/ompi",
                 "--db", str(db), "--sizes", "8,1M", "--out", "rules.conf",
                 "--slurm-script", str(job))
    assert r.returncode == 0, r.stderr
    assert not db.exists()  # written, not run
    text = job.read_text()
    sb = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", text, re.M))
    assert (sb["nodes"], sb["ntasks-per-node"], sb["ntasks"]) == ("32", "16", "512")
    assert re.fullmatch(r"\d\d:\d\d:\d\d", sb["time"])
    assert subprocess.run(["bash", "-n", str(job)], check=False).returncode == 0
    cmd = shlex.split(text.strip().splitlines()[-1])
    assert cmd[1:3] == ["-m", "colltune.cli"] and "--slurm-script" not in cmd
    assert cmd[3:] == ["reduce", "--np", "512", "--nodes", "32", "--ppn", "16", "--mpi",
                       "/opt/ompi", "--db", str(db), "--sizes", "8,1M", "--out", "rules.conf",
                       "--launcher", "srun"]


def test_without_a_layout_slurm_places_the_ranks(tmp_path: Path) -> None:
    job = tmp_path / "job.sh"
    r = tune_cli("bcast", "--np", "64", "--slurm-script", str(job))
    assert r.returncode == 0, r.stderr
    text = job.read_text()
    sb = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", text, re.M))
    assert sb["ntasks"] == "64" and "nodes" not in sb and "ntasks-per-node" not in sb
    assert subprocess.run(["bash", "-n", str(job)], check=False).returncode == 0
    cmd = shlex.split(text.strip().splitlines()[-1])
    assert cmd[3:] == ["bcast", "--np", "64", "--launcher", "srun"]


def test_time_limit() -> None:
    assert forecast.time_limit(10, 0.25, 1)[0] == 600  # at least 10 minutes
    # the dry run's forecast, with nothing earlier to price it, doubled (issue 84)
    opts = TuneOptions(["reduce"], [4], settings=MeasureSettings(point_time=0.25))
    plan = forecast.forecast([forecast.Target(get_collective("reduce"), place(4), [8] * 10_000,
                                              4)], forecast.prices(None, "", 1, False, opts),
                             1, False)
    assert forecast.time_limit(10_000, 0.25, 4)[0] == int(2 * float(str(plan["node_seconds"])))
    assert hms(3725) == "01:02:05"


def test_slurm_script_with_an_equals_sign_is_the_spaced_form(tmp_path: Path) -> None:
    texts = []
    for form in (["--slurm-script", str(tmp_path / "a.sh")],
                 [f"--slurm-script={tmp_path / 'b.sh'}"]):
        r = tune_cli("reduce", "--np", "64", "--nodes", "4", "--ppn", "16", "--mpi",
                     "/opt/ompi", "--sizes", "8,1M", *form)
        assert r.returncode == 0, r.stderr
        texts.append((tmp_path / form[-1].split("=")[-1]).read_text())
    last = [t.strip().splitlines()[-1] for t in texts]
    assert last[0] == last[1] and "--slurm-script" not in last[0]


def test_the_time_limit_counts_the_chosen_familys_plan(tmp_path: Path) -> None:
    """--backend decides what the job measures: MVAPICH2's 4 reduce algorithms (one launch
    each, no segment sizes) make a smaller plan than Open MPI's, so a shorter limit; a
    family whose algorithms only its installation knows is refused, not counted as Open
    MPI."""
    def seconds(*extra: str) -> int:
        job = tmp_path / "job.sh"
        r = tune_cli("reduce", "--np", "2048", "--point-time", "5", *extra,
                     "--slurm-script", str(job))
        assert r.returncode == 0, r.stderr
        h, m, s = re.search(r"^#SBATCH --time=(\d+):(\d+):(\d+)$", job.read_text(),
                            re.M).groups()  # type: ignore[union-attr]
        return int(h) * 3600 + int(m) * 60 + int(s)

    assert seconds("--backend", "mvapich2") < seconds()
    # --between measure may add a size halfway between each two --np: the job's limit
    # counts them (512 and 1408 between 256, 768 and 2048)
    assert seconds("--np", "256,768,2048", "--between", "measure") > seconds(
        "--np", "256,768,2048")
    # a reduction summing chars measures 1 and 2 B besides doubles' sizes: a longer job
    assert seconds("--datatype", "char") > seconds()
    r = tune_cli("reduce", "--np", "64", "--backend", "mpich", "--slurm-script",
                 str(tmp_path / "m.sh"))
    assert r.returncode != 0 and "only from the installation" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "m.sh").exists()
