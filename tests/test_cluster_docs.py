"""docs/cluster.md as a site would follow it: every `bash` block, as written and in order,
run as one script on the test cluster's first node (tests/testcluster.py), from the shared
home, with colltune on PATH and nothing else set."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import missing
from testcluster import REPO, Cluster

pytestmark = pytest.mark.mpi

DOC = REPO / "docs" / "cluster.md"
LMOD = Path("/usr/share/lmod/lmod/init/bash")


def blocks(text: str) -> list[str]:
    """The doc's ```bash blocks (```sh ones are shown, not run)."""
    return re.findall(r"^```bash\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_doc_has_blocks_to_run() -> None:
    found = blocks(DOC.read_text())
    assert len(found) >= 5 and all("tune" in b or "module" in b for b in found[1:])


def test_every_bash_block_of_the_cluster_walkthrough_runs(cluster: Cluster) -> None:
    if not LMOD.exists():  # CI installs it: a failure there, a skip elsewhere
        missing(f"no {LMOD}: needs Lmod (Debian: lmod)")
    script = "set -eo pipefail\n" + "\n".join(blocks(DOC.read_text()))
    bindir = str(Path(sys.executable).parent)  # where pip put `tune`
    env = cluster.env()
    env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}"
    r = cluster.on("node1", ["bash", "-c", script], env=env, timeout=600)
    # the batch job's own output is where a failed launch says why (kept in the message)
    job_out = "".join(p.read_text() for p in cluster.home.glob("colltune-reduce-*.out"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + "\njob:\n" + job_out[-3000:]
    work = cluster.home / "colltune-site"
    assert (work / "rules.conf").is_file() and (work / "site" / "colltune-rules.conf").is_file()
    rules = str(work / "site" / "colltune-rules.conf")
    # the module's setting reached a job's ranks on both nodes, and left with the unload
    assert f"node1: {rules}" in r.stdout and f"node2: {rules}" in r.stdout, r.stdout[-2000:]
    assert "OMPI_MCA_coll_tuned_dynamic_rules_filename=unset" in r.stdout
    # the batch job, submitted from the home directory, ran in $WORK (its rules file is
    # there) and launched with srun, which got the PMI: Slurm has MpiDefault=none, so srun
    # needs --mpi, and colltune picked pmix (what Open MPI 4.1.4 was built with, offered by
    # `srun --mpi=list`) and said so in the job's output (where sbatch ran); 2 ranks a node
    assert "note: srun --mpi=pmix: this MPI was built for pmix" in job_out, job_out[-2000:]
    con = sqlite3.connect(work / "colltune.db")
    assert con.execute("SELECT DISTINCT np, ppn, nodes FROM measurements").fetchall() == [
        (4, 2, 2)]
    con.close()
