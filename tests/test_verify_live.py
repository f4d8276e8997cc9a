"""`tune verify` against real Open MPI: a file forcing a known-slow configuration is a
regression (exit 1), a file Open MPI would ignore is "not applied", and the file the tuner
wrote shows no regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from colltune.kernel.build import build_kernel
from helpers import tune_cli

pytestmark = pytest.mark.mpi

# bcast pipeline with 1 KiB segments: at 64 KiB and above, 16x slower than the default
# decision on this machine (measured with this command); and traffic tells it apart.
SLOW_BCAST = "1\n7\n1\n4\n1\n0 3 0 1024\n"


# The verdicts below are the same statistics on either Open MPI; they run on 4.1 only to keep
# the suite under 15 minutes (5.0's verify path: test_file_open_mpi_would_drop_is_not_applied)
@pytest.mark.alone
def test_known_slow_file_is_a_regression(ompi41: OpenMPI, tmp_path: Path) -> None:
    ompi = ompi41
    f = tmp_path / "slow.conf"
    f.write_text(SLOW_BCAST)
    # an application's profile names the step's sizes: here collstep's own run of bcast at
    # 8 B and 64 KiB, profiled as tune profile profiles any application
    prof = tmp_path / "app.json"
    p = tune_cli("profile", "-o", str(prof), "--mpi", str(ompi.prefix), "--",
                 str(ompi.prefix / "bin" / "mpirun"), "--oversubscribe", "-np", "4",
                 str(build_kernel(ompi, name="collstep")), "bcast", "0.01", "8", "65536",
                 env={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    assert p.returncode == 0, p.stderr
    r = tune_cli("verify", str(f), "--np", "4", "--mpi", str(ompi.prefix), "--sizes", "64K,1M",
                 "--rounds", "3", "--step-from", str(prof), "--json", str(tmp_path / "v.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "SLOWER" in r.stdout and "verify failed: bcast 65536 B" in r.stderr
    doc = json.loads((tmp_path / "v.json").read_text())
    (bcast,) = doc["collectives"]
    assert bcast["applied"] == "applied", bcast["applied_detail"]
    assert all(s["verdict"] == "slower" and s["ratio"] > 1.5 for s in bcast["kernel"])
    # sequential: a 16x slowdown needs no more than the first look's pairs (or one more)
    assert all(s["rounds"] in (3, 6) for s in bcast["kernel"])
    assert all(s["mde"] is not None and s["mde"] > 1 for s in bcast["kernel"])
    assert bcast["speedup"] < 1 and doc["failed"] is True
    # the application step of 8 B and 64 KiB (--step-from) runs the file in its rules arm:
    # the 64 KiB call's slowdown shows in the step (both arms the default, it would not).
    # Its rounds are not bounded as the sizes' are: the unchanged 8 B call dilutes the
    # step's ratio, and on a loaded machine (the suite's other worker) it took 12 looks
    (step,) = bcast["step"]
    assert step["what"] == "one step of 8 B, 65536 B" and step["rounds"] >= 3, step
    assert step["verdict"] == "slower" and step["ratio"] > 1.5, step
    assert "bcast one step of 8 B, 65536 B" in r.stderr
    assert doc["design"]["family"] == 2 * 3 + 1  # 2 sizes x 3 modes, and the step


# bcast pipeline with 1 KiB segments from 16 KiB to 64 KiB, the default elsewhere: 6-16x
# slower here. Issue 32's own file (nonoverlapping allreduce from 256 KiB to 768 KiB) is
# slower by 1.3-2.5x on a quiet machine but was faster at 256 KiB and inconclusive above on
# CI's (a gate that says "inconclusive" there is right; a test that needs "slower" is not):
# its rates are bench/gate_bench.py's "slow" case, in docs/benchmarks.md.
SLOW_PART = "1\n7\n1\n4\n3\n0 0 0 0\n16384 3 0 1024\n65537 0 0 0\n"


@pytest.mark.alone
def test_the_gate_fails_a_file_slower_over_part_of_its_range(ompi41: OpenMPI,
                                                              tmp_path: Path) -> None:
    """At its default sizes (21), verify tests only the 3 the file changes, sequentially,
    and fails the gate; before issue 32 Holm over all 42 size x mode cells passed a file
    slower over part of its range. docs/benchmarks.md ("The gate's power") has the rates
    over repeated runs."""
    f = tmp_path / "slow.conf"
    f.write_text(SLOW_PART)
    r = tune_cli("verify", str(f), "--np", "4", "--mpi", str(ompi41.prefix), "--json",
                 str(tmp_path / "v.json"), "--quiet")
    doc = json.loads((tmp_path / "v.json").read_text())
    rows = doc["collectives"][0]["kernel"]
    tested = [k["size"] for k in rows if k["verdict"] != "default"]
    # 16 KiB and 64 KiB are the rule's edges (16383 and 65537, their other sides, untested)
    assert tested == [16384, 32768, 65536], tested
    assert len(rows) == 21 and doc["design"]["family"] == 9  # 3 sizes x 3 modes
    assert r.returncode == 1, r.stdout + r.stderr
    assert "verify failed: bcast" in r.stderr
    assert all(k["verdict"] == "slower" for k in rows if k["size"] in tested)


def test_file_open_mpi_would_drop_is_not_applied(ompi: OpenMPI, tmp_path: Path) -> None:
    f = tmp_path / "dropped.conf"
    f.write_text("1\n7\n1\n4\n1\n64 3 0 1024\n")  # first rule not at 0: Open MPI drops it
    r = tune_cli("verify", str(f), "--np", "4", "--mpi", str(ompi.prefix), "--rounds", "2")
    assert r.returncode != 0
    assert "not applied" in r.stderr and "first rule" in r.stderr


def test_tuned_file_has_no_regression(ompi41: OpenMPI, tmp_path: Path) -> None:
    ompi = ompi41
    out = tmp_path / "rules.conf"
    t = tune_cli("reduce", "--boundaries", "midpoint",
                 "--np", "4", "--mpi", str(ompi.prefix), "--db",
                 str(tmp_path / "db.sqlite"), "--sizes", "8,4K,64K", "--out", str(out),
                 "--point-time", "0.05", "--quiet")
    assert t.returncode == 0, t.stderr
    r = tune_cli("verify", str(out), "--np", "4", "--mpi", str(ompi.prefix), "--sizes",
                 "8,4K,64K", "--rounds", "3", "--max-rounds", "6", "--json",
                 str(tmp_path / "v.json"))
    doc = json.loads((tmp_path / "v.json").read_text())
    (reduce,) = doc["collectives"]
    assert reduce["applied"] in ("applied", "default everywhere", "unproven"), reduce
    # 5: a size neither slower nor shown within 10% in 16 pairs (this machine's noise)
    assert r.returncode in (0, 5), r.stdout + r.stderr
    assert [s["size"] for s in reduce["kernel"]] == [8, 4096, 65536]
    assert all(s["verdict"] != "slower" for s in reduce["kernel"])


def test_osu_measures_beside_the_kernel(ompi41: OpenMPI, tmp_path: Path) -> None:
    """With OSU Micro-Benchmarks built for this MPI (COLLTUNE_OSU_DIR, or osu_bcast on
    PATH), verify runs them too; CI has no OSU, so there this is skipped."""
    import os
    import shutil

    osu_dir = os.environ.get("COLLTUNE_OSU_DIR")
    if not osu_dir and not shutil.which("osu_bcast"):
        pytest.skip("no OSU Micro-Benchmarks: set COLLTUNE_OSU_DIR to a directory holding "
                    "osu_bcast built with Open MPI 4.1")
    f = tmp_path / "slow.conf"
    f.write_text(SLOW_BCAST)
    r = tune_cli("verify", str(f), "--np", "4", "--mpi", str(ompi41.prefix), "--sizes", "1M",
                 "--rounds", "3", "--with", "osu", *(["--osu-dir", osu_dir] if osu_dir else []),
                 "--json", str(tmp_path / "v.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    (bcast,) = json.loads((tmp_path / "v.json").read_text())["collectives"]
    assert [s["size"] for s in bcast["osu"]] == [1 << 20]
    assert bcast["osu"][0]["ratio"] > 1.5  # OSU sees the same slowdown, independently


def test_verify_checks_both_sides_of_every_rule_boundary(ompi41: OpenMPI,
                                                         tmp_path: Path) -> None:
    """A slow configuration on a range that ends between two powers of two (300000 to
    399999 B per rank: no power of two falls inside) is invisible at the powers of two;
    by default verify also measures the last size below and the first above each rule
    boundary, marks them, and the gate fails there."""
    f = tmp_path / "edges.conf"
    # allreduce at 4 ranks: the default, segmented ring with 1 KiB segments from 300000 B
    # (7-9x slower here), the default again from 400000 B
    f.write_text("1\n2\n1\n4\n3\n0 0 0 0\n300000 5 0 1024\n400000 0 0 0\n")
    out = tmp_path / "v.json"
    # 5 pairs: Holm over 22 sizes needs p < 0.002, out of reach of a t-test on 3 pairs
    r = tune_cli("verify", str(f), "--np", "4", "--mpi", str(ompi41.prefix), "--rounds", "5",
                 "--timing", "isolated", "--point-time", "0.03", "--json", str(out), "--quiet")
    doc = json.loads(out.read_text())
    rows = {k["size"]: k for k in doc["collectives"][0]["kernel"]}
    edges = {s for s, k in rows.items() if k["boundary"]}
    assert edges == {299992, 300000, 399992, 400000}
    assert {1 << k for k in range(3, 21)} <= set(rows)  # every power of two (8 B: doubles)
    inside = [rows[s] for s in (300000, 399992)]
    assert all("segmented_ring" in k["rule"] for k in inside)
    assert any(k["verdict"] == "slower" for k in inside), inside
    assert r.returncode == 1 and doc["failed"] is True
