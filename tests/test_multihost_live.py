"""Two "hosts" on one machine: Linux network namespaces joined by a veth pair, Open MPI
started across them through an rsh agent that enters the other namespace (with its own
hostname). The tuner runs with a hostfile and 2 ranks per node; the proof that the
collectives really crossed the "network" is the veth pair's own byte counters: at least
one 64 KiB block per measured 64 KiB reduce."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from colltune.backends.openmpi import OpenMPI
from helpers import collbench_pids, ranks_left, rx_bytes

pytestmark = pytest.mark.mpi


def test_tuning_across_two_hosts_with_a_hostfile(ompi41: OpenMPI, two_hosts: dict[str, str],
                                                  tmp_path: Path) -> None:
    # Open MPI 5 tunes across the same two hosts in tests/test_han.py (--tune-han)
    ompi = ompi41
    db, out = tmp_path / "db.sqlite", tmp_path / "rules.conf"
    before_pids = set(collbench_pids())
    rx0 = rx_bytes(two_hosts["a"], two_hosts["veth_a"])
    tune = [sys.executable, "-m", "colltune.cli", "reduce", "--boundaries", "midpoint",
            "--np", "4", "--hostfile",
            two_hosts["hostfile"], "--ppn", "2", "--launcher-args",
            f"--mca plm_rsh_agent {two_hosts['agent']}", "--mpi", str(ompi.prefix),
            "--db", str(db), "--out", str(out), "--sizes", "8,64K", "--point-time", "0.02",
            "--min-reps", "5", "--max-reps", "20", "--confirm-rounds", "0", "--quiet"]
    r = subprocess.run(["ip", "netns", "exec", two_hosts["a"], "unshare", "--uts", "sh", "-c",
                        'hostname nodeA; exec "$@"', "sh", *tune],
                       capture_output=True, text=True, timeout=600, check=False,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                            "XDG_CACHE_HOME": two_hosts["cache"]})
    assert r.returncode == 0, r.stderr
    rx = rx_bytes(two_hosts["a"], two_hosts["veth_a"]) - rx0
    import sqlite3

    con = sqlite3.connect(db)
    (calls,) = con.execute("SELECT SUM(n) FROM measurements WHERE size=65536 AND status='ok'"
                           ).fetchone()
    # the root (rank 0) is on node A: every measured 64 KiB reduce brings at least one
    # 64 KiB block of node B's ranks' data over the link (warm-up calls come on top)
    print(f"node A received {rx} bytes for {calls} reduces of 64 KiB")
    assert calls and rx >= calls * 65536, (rx, calls)
    layout = con.execute("SELECT DISTINCT host, np, ppn, nodes FROM measurements").fetchall()
    statuses = {s for (s,) in con.execute("SELECT status FROM measurements")}
    con.close()
    assert layout == [("nodeA", 4, 2, 2)] and statuses == {"ok"}
    from helpers import tune_cli

    assert tune_cli("check", str(out), "--mpi", str(ompi.prefix)).returncode == 0
    assert ranks_left(before_pids) == set(), "ranks left behind on a 'host'"


def test_model_fit_separates_pairs_inside_and_across_nodes(
        ompi41: OpenMPI, two_hosts: dict[str, str], tmp_path: Path) -> None:
    import json
    import sqlite3

    db = tmp_path / "db.sqlite"
    fit = [sys.executable, "-m", "colltune.cli", "model", "fit", "--np", "4", "--hostfile",
           two_hosts["hostfile"], "--ppn", "2", "--launcher-args",
           f"--mca plm_rsh_agent {two_hosts['agent']}", "--mpi", str(ompi41.prefix),
           "--db", str(db), "--reps", "5", "--max-size", "16K"]
    r = subprocess.run(["ip", "netns", "exec", two_hosts["a"], "unshare", "--uts", "sh", "-c",
                        'hostname nodeA; exec "$@"', "sh", *fit],
                       capture_output=True, text=True, timeout=600, check=False,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                            "XDG_CACHE_HOME": two_hosts["cache"]})
    assert r.returncode == 0, r.stderr
    assert "pairs inside a node" in r.stdout and "pairs across nodes" in r.stdout
    con = sqlite3.connect(db)
    rows = {m: (json.loads(p), json.loads(d)) for m, p, d in
            con.execute("SELECT model, params, probe FROM models")}
    con.close()
    assert set(rows) == {"hockney", "loggp", "hockney-intra", "hockney-inter", "loggp-intra",
                         "loggp-inter"}
    probe = rows["hockney"][1]
    # ranks 0,1 on nodeA and 2,3 on nodeB (2 per node): what MPI_Get_processor_name said
    assert {(p["peer"], p["same_node"]) for p in probe["p2p"]} == {(1, True), (2, False),
                                                                    (3, False)}
    # each kind fitted on its own pairs: one size row per probed size (1 B .. 16 KiB)
    sizes = len({p["size"] for p in probe["p2p"]})
    for name in ("hockney-intra", "hockney-inter", "loggp-intra", "loggp-inter"):
        assert rows[name][0]["quality"]["points"] == sizes
    for name in ("hockney-intra", "hockney-inter"):
        assert all(p["a"] >= 0 and p["b"] >= 0 for p in rows[name][0]["pieces"])


def test_open_mpi_5_runs_han_across_nodes_unless_excluded(two_hosts: dict[str, str]) -> None:
    """Why every Open MPI 5 launch says `--mca coll ^han`: with tuned's linear reduce
    forced, the root's node receives one 64 KiB block per call from each rank of the other
    node (2 per call here); with han in place, han reduces inside that node first and only
    its leader's block crosses (1 per call): the veth byte counter tells them apart."""
    from colltune.backends.openmpi import (
        dynamic_env,
        forcing_vars,
        launch_env,
        read_catalog,
    )
    from colltune.kernel.build import build_kernel
    from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
    from conftest import get_mpi

    ompi50 = get_mpi("ompi50")
    cat = read_catalog(ompi50)
    linear = {v: k for k, v in cat.algorithms["reduce"].items()}["linear"]
    exe = build_kernel(ompi50)
    reps, size = 40, 65536
    plan = KernelPlan("reduce", [KernelConfig(0)], [(0, size)],
                      Repetitions(warmup=2, min_reps=reps, max_reps=reps, point_time=1e6))
    env = launch_env(dynamic_env(forcing_vars("reduce", linear, 0, 0, 0, cat)))
    blocks = {}
    for han_off in (True, False):
        cmd = [str(ompi50.mpirun), "-np", "4", "--hostfile", two_hosts["hostfile"],
               "--map-by", "ppr:2:node", "--mca", "plm_rsh_agent", two_hosts["agent"]]
        if han_off:
            cmd += ["--mca", "coll", "^han"]
        rx0 = rx_bytes(two_hosts["a"], two_hosts["veth_a"])
        out = run_kernel(["ip", "netns", "exec", two_hosts["a"], "unshare", "--uts", "sh",
                          "-c", 'hostname nodeA; exec "$@"', "sh", *cmd], exe, plan, env,
                         point_timeout=120)
        assert out.status == "ok", (out.message, out.stderr[-2000:])
        calls = sum(r.n for r in out.results) + plan.reps.warmup
        blocks[han_off] = (rx_bytes(two_hosts["a"], two_hosts["veth_a"]) - rx0) / (
            calls * size)
    print(f"64 KiB blocks received by the root's node per call: {blocks}")
    assert blocks[True] >= 1.9  # tuned's linear: ranks 2 and 3 each send to rank 0
    assert blocks[False] < 1.5  # han: one inter-node block (plus control traffic)
