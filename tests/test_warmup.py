"""Warm-up detection: the profiler times each entry's first 48 calls one by one and a
change of level among them is reported. Synthetic: a program whose 17th call is slower.
Real: Open MPI 4.1.4's shared-memory transport sets up its fast boxes after
btl_vader_fbox_threshold sends to a peer; at 2 ranks an 8-byte allreduce then runs about
twice as fast, and the change point moves with the library's own parameter."""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from colltune.core.stats import change_point
from helpers import tune_cli

SOURCE = Path(__file__).parent / "data" / "allreduce48.c"
ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def test_a_step_is_found_where_it_is_and_noise_or_one_slow_first_call_is_not() -> None:
    rng = random.Random(3)
    noise = [rng.lognormvariate(0, 0.3) for _ in range(48)]
    assert change_point(noise) is None
    assert change_point([50.0] + noise[1:]) is None  # a first call setting up connections
    step = [x * (1 if i < 16 else 4) for i, x in enumerate(noise)]
    cp = change_point(step)
    assert cp is not None and cp.after == 16 and cp.ratio > 3
    assert change_point([x * (1 if i < 16 else 1.2) for i, x in enumerate(noise)]) is None
    # the synthetic program below on a machine kept busy (two spinning processes): a
    # second level after the step (us; the rank test alone put the change at 18)
    loaded = [115, 4, 1, 2, 3, 6, 4, 1, 1, 1, 1, 2, 2, 2, 1, 7, 5088, 5090, 5085, 5085, 5087,
              5094, 5092, 5088, 5089, 5099, 5109, 5093, 5095, 8512, 12485, 9080, 5088, 8746,
              12736, 9077, 5086, 8756, 12759, 9092, 5084, 8734, 12735, 9082, 5094, 8743,
              12741, 9097]
    cp = change_point([x * 1e-6 for x in loaded])
    assert cp is not None and cp.after == 16, cp


def _profile(ompi: OpenMPI, tmp: Path, exe: Path, env: dict[str, str]) -> dict[str, object]:
    out = tmp / f"{exe.name}.json"
    res = tune_cli("profile", "-o", str(out), "--mpi", str(ompi.prefix), "--",
                   str(ompi.mpirun), "-np", "2", str(exe), env={**ROOT, **env})
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    doc["stderr"] = res.stderr
    return doc


def _build(ompi: OpenMPI, tmp: Path, *flags: str) -> Path:
    exe = tmp / ("late" if flags else "plain")
    subprocess.run([str(ompi.mpicc), "-std=c99", "-O2", *flags, "-o", str(exe), str(SOURCE)],
                   check=True, capture_output=True)
    return exe


def _allreduce(doc: dict[str, object]) -> dict[str, object]:
    return next(e for e in doc["entries"] if e["collective"] == "allreduce")  # type: ignore[attr-defined]


@pytest.mark.alone
def test_a_program_whose_17th_call_is_slower_is_reported(ompi41: OpenMPI, tmp_path: Path
                                                          ) -> None:
    doc = _profile(ompi41, tmp_path, _build(ompi41, tmp_path, "-DLATE_FROM=16"), {})
    entry = _allreduce(doc)
    w, first = entry["warmup"], entry["first_s"]
    assert w is not None and w["after_s"] > 5 * w["before_s"], w
    # the step is after call 16. One exception follows the data, not the cause: when call 16
    # itself measured nearer the later level than the earlier one (a rank preempted in it),
    # the calls do change level after call 15, and the least-deviation split says so (a CI
    # run reported 15 once; its series was not kept)
    mid = math.sqrt(w["before_s"] * w["after_s"])
    assert w["after_calls"] == 16 or (w["after_calls"] == 15 and first[15] > mid), (
        w, first[:20])
    assert f"changed level after call {w['after_calls']}" in str(doc["stderr"])


@pytest.mark.alone
@pytest.mark.parametrize("threshold", [8, 16])
def test_open_mpi_changes_after_its_fast_boxes_and_the_point_follows_its_threshold(
        ompi41: OpenMPI, tmp_path: Path, threshold: int) -> None:
    """Up to five launches, two must agree: one launch's scheduling noise can hide a 0.6 ->
    0.3 us change, the library's own behaviour shows in most launches."""
    exe = _build(ompi41, tmp_path)
    found = []
    for _ in range(5):
        doc = _profile(ompi41, tmp_path, exe,
                       {"OMPI_MCA_btl_vader_fbox_threshold": str(threshold)})
        w = _allreduce(doc)["warmup"]
        # the fast boxes start after `threshold` sends to a peer (an allreduce at 2 ranks
        # sends one message each way); a few calls setting them up, then a faster level
        found.append(w["after_calls"] if w is not None and w["after_s"] < w["before_s"]
                     else None)
        agree = [n for n in found if n is not None and threshold <= n <= threshold + 5]
        if len(agree) == 2:
            break
    # two agree (a CI run's first two read 15 and 10 at threshold 8: the first two alone
    # failed on one launch's noise, which three launches were meant to outvote; another's
    # three read 9, none and 27, the suite running beside nothing else: five now)
    assert len(agree) == 2, found
