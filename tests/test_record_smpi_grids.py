"""bench/record_smpi_grids.py --jobs: the sizes dealt between simulations run at once make
the same grid as one simulation of them all (SimGrid simulates on one core, so a 512-rank
grid recorded with --jobs 2 on this machine's 2 cores takes half the wall time; issue 84)."""

from __future__ import annotations

import csv
import math
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import missing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from record_smpi_grids import SAME, SAME_S  # noqa: E402  (the recorder's own tolerance)


def record(out: Path, jobs: int) -> list[list[str]]:
    """bcast at 4 ranks on the flat platform, three sizes, every algorithm."""
    subprocess.run([sys.executable, str(ROOT / "bench" / "record_smpi_grids.py"), "--np",
                    "4", "--platform", str(ROOT / "docs" / "platforms" / "flat-64x8.xml"),
                    "--colls", "bcast", "--add-sizes", "8,1024,65536", "--timeout", "60",
                    "--jobs", str(jobs), "--out", str(out)], check=True, timeout=300)
    with open(out / "flat-64x8-bcast-np4.csv", newline="") as f:
        return list(csv.reader(f))


def test_jobs_deal_the_sizes_and_make_the_same_grid(tmp_path: Path) -> None:
    if shutil.which("smpirun") is None:
        missing("SimGrid SMPI unavailable (apt-get install libsimgrid-dev)")
    one, two = record(tmp_path / "one", 1), record(tmp_path / "two", 2)
    assert one[0] == two[0] == ["config_key", "algorithm", "size", "status", "seconds"]
    assert [r[:4] for r in one] == [r[:4] for r in two]
    assert {r[2] for r in one[1:]} == {"8", "1024", "65536"}
    assert all(r[3] == "ok" for r in one[1:]), one
    # a point's simulated time moves by nanoseconds with what ran before it in its launch
    # (the recorder's own tolerance): the same oracle, not the same digits
    for a, b in zip(one[1:], two[1:], strict=True):
        assert math.isclose(float(a[4]), float(b[4]), rel_tol=SAME, abs_tol=SAME_S), (a, b)
    # each recording says what it held: one launch, or one a simulation
    rows = [(tmp_path / d / "README.md").read_text().splitlines()[-1] for d in ("one", "two")]
    assert [r.split("|")[9].strip() for r in rows] == ["1", "2"], rows
