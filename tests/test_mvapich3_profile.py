"""MVAPICH 3 profiles: round trip, and what an MVAPICH2 profile becomes (one algorithm per
variable, two-level bcast variants, what has no counterpart, size-dependent tables)."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.rules import mvapich2 as mv2
from colltune.rules import mvapich3 as mv3
from colltune.rules.mvapich2 import Range
from helpers import module_env, tune_cli


def _mv2() -> mv2.Profile:
    p = mv2.Profile(comments=["tuned for 4 ranks"])
    p.set_ranges("MV2_INTER_REDUCE_TUNING", [Range(1, 0, 1024), Range(5, 1025, None)])
    p.set_ranges("MV2_INTER_BCAST_TUNING", [Range(6, 0, None)])  # scatter-ring 2-level
    p.set_ranges("MV2_ALLTOALL_TUNING", [Range(3, 0, None)])
    p.settings["MV2_INTER_RED_SCAT_TUNING"] = "2"
    return p


def test_conversion_and_round_trip() -> None:
    got, notes = mv3.from_mvapich2(_mv2(), at_size=4096)
    assert got.settings == {"MVP_REDUCE_INTER_NODE_TUNING_ALGO": "RED_SCAT_GATHER",
                            "MVP_BCAST_INTER_NODE_TUNING_ALGO": "SCATTER_RING_ALLGATHER",
                            "MVP_BCAST_TUNING_IS_TWO_LEVEL": "1",
                            "MVP_ALLTOALL_COLLECTIVE_ALGORITHM": "PAIRWISE"}
    assert any("4096" in n for n in notes)  # the reduce table was cut at one size
    assert any("MV2_INTER_RED_SCAT_TUNING" in n for n in notes)  # no MVAPICH 3 variable
    back = mv3.parse(mv3.render(got))
    assert back.settings == got.settings and back.comments == got.comments
    small, _ = mv3.from_mvapich2(_mv2(), at_size=1024)  # the range's upper end is inside
    assert small.settings["MVP_REDUCE_INTER_NODE_TUNING_ALGO"] == "BINOMIAL"


def test_size_dependent_table_needs_a_size_and_bad_values_are_refused() -> None:
    with pytest.raises(mv3.ConversionError, match="--for-size"):
        mv3.from_mvapich2(_mv2())
    one = mv2.Profile()
    one.set_ranges("MV2_INTER_BCAST_TUNING", [Range(10, 0, None)])  # zero-copy: gen2 only
    got, notes = mv3.from_mvapich2(one)
    assert got.settings == {} and "no MVAPICH 3 counterpart" in notes[0]
    for text, words in (("export MVP_REDUCE_INTER_NODE_TUNING_ALGO=RING\n", "not one of"),
                        ("MVP_BCAST_TUNING_IS_TWO_LEVEL=2\n", "0 or 1"),
                        ("export MVP_A=1\nexport MVP_A=2\n", "twice"),
                        ("MV2_X=1\n", "not `export MVP_")):
        with pytest.raises(mv3.ConversionError, match=words):
            mv3.parse(text)


def test_export_as_mvapich3(tmp_path: Path) -> None:
    src = tmp_path / "mv2.conf"
    src.write_text(mv2.render(_mv2()))
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "s"), "--as",
                 "mvapich3")
    assert r.returncode == 2 and "--for-size" in r.stderr
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "s"), "--as",
                 "mvapich3", "--for-size", "64K")
    assert r.returncode == 0, r.stderr
    prof = mv3.parse((tmp_path / "s" / "colltune-mvapich3.env").read_text())
    assert prof.settings["MVP_REDUCE_INTER_NODE_TUNING_ALGO"] == "RED_SCAT_GATHER"
    env = module_env(tmp_path / "s" / "modulefiles" / "colltune" / "tuned")
    assert env["MVP_ALLTOALL_COLLECTIVE_ALGORITHM"] == "PAIRWISE"
    rules = tmp_path / "r.conf"
    rules.write_text("1\n11\n1\n4\n1\n0 1 0 0\n")
    r = tune_cli("export", "--from", str(rules), "--site", str(tmp_path / "t"), "--as",
                 "mvapich3")
    assert r.returncode == 2 and "converts an MVAPICH2 profile" in r.stderr


def test_the_two_level_first_range_carries_over_only_where_it_applies() -> None:
    """An MVAPICH2 profile whose first reduce range is the default's shared-memory path
    (two-level, intra-node shared memory): converted inside that range, MVAPICH 3 gets the
    two-level switch with it; converted above it, the switch is left out and said so."""
    p = mv2.Profile()
    p.set_ranges("MV2_INTER_REDUCE_TUNING", [Range(1, 0, 2048), Range(2, 2049, None)])
    p.settings.update({"MV2_INTER_REDUCE_TUNING_TWO_LEVEL": "1",
                       "MV2_INTRA_REDUCE_TUNING": "4"})
    small, _ = mv3.from_mvapich2(p, at_size=1024)
    assert small.settings["MVP_REDUCE_TUNING_IS_TWO_LEVEL"] == "1"
    assert small.settings["MVP_REDUCE_INTRA_NODE_TUNING_ALGO"] == "SHMEM"
    assert small.settings["MVP_REDUCE_INTER_NODE_TUNING_ALGO"] == "BINOMIAL"
    large, notes = mv3.from_mvapich2(p, at_size=65536)
    assert "MVP_REDUCE_TUNING_IS_TWO_LEVEL" not in large.settings
    assert large.settings["MVP_REDUCE_INTER_NODE_TUNING_ALGO"] == "KNOMIAL"
    assert any("first range" in n for n in notes), notes
    mv3.parse(mv3.render(small))
