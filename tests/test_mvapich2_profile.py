"""MVAPICH2 profiles: round trip, and the mistakes MVAPICH2 crashes on or silently ignores."""

from __future__ import annotations

import pytest

from colltune.errors import FormatError
from colltune.rules import mvapich2 as mv
from colltune.rules.mvapich2 import Profile, Range


def _profile() -> Profile:
    p = Profile(comments=["tuned by colltune for 4 ranks"])
    p.set_ranges("MV2_INTER_REDUCE_TUNING",
                 [Range(1, 0, 1024), Range(2, 1025, 8192), Range(5, 8193, None)])
    p.set_ranges("MV2_ALLTOALL_TUNING", [Range(0, 0, 256), Range(3, 257, None)])
    p.settings["MV2_ENABLE_AFFINITY"] = "0"
    return p


@pytest.mark.parametrize("style", ["conf", "env"])
def test_round_trip(style: str) -> None:
    p = _profile()
    text = mv.render(p, style)
    back = mv.parse(text, "p.conf")
    assert back.settings == p.settings and back.comments == p.comments
    assert back.settings["MV2_USE_INDEXED_TUNING"] == "0"
    assert back.settings["MV2_USE_INDEXED_REDUCE_TUNING"] == "0"
    assert back.settings["MV2_USE_INDEXED_ALLTOALL_TUNING"] == "0"
    if style == "env":
        assert "export MV2_INTER_REDUCE_TUNING=1:0-1024,2:1025-8192,5:8193-+" in text
    else:
        assert "MV2_INTER_REDUCE_TUNING = 1:0-1024,2:1025-8192,5:8193-+" in text


def test_lookup_uses_the_upper_ends() -> None:
    p = _profile()
    assert [mv.lookup(p, "MV2_INTER_REDUCE_TUNING", s) for s in (0, 1024, 1025, 8192, 8193,
                                                                 10**9)] == [1, 1, 2, 2, 5, 5]
    assert mv.lookup(p, "MV2_ALLTOALL_TUNING", 100) == 0  # alltoall counts from 0
    assert mv.lookup(p, "MV2_INTER_BCAST_TUNING", 8) is None
    single = mv.parse("MV2_INTER_BCAST_TUNING=8\n")
    assert mv.lookup(single, "MV2_INTER_BCAST_TUNING", 12345) == 8


def _reject(text: str, line: int, words: str) -> None:
    with pytest.raises(FormatError) as e:
        mv.parse(text, "p.conf")
    assert e.value.line == line and words in e.value.reason, str(e.value)
    assert str(e.value).startswith(f"p.conf:{line}:")


def test_ranges_without_indexed_switches_are_rejected() -> None:
    # the combination that kills every rank in MPI_Init on MVAPICH2 2.3.7
    _reject("MV2_INTER_REDUCE_TUNING = 1:0-1024,2:1025-+\n", 1, "MV2_USE_INDEXED_TUNING")
    _reject("MV2_USE_INDEXED_TUNING = 0\nMV2_INTER_REDUCE_TUNING = 1:0-1024,2:1025-+\n", 2,
            "MV2_USE_INDEXED_REDUCE_TUNING")
    # a single index needs no switch; reduce_scatter has no indexed table at all
    mv.parse("MV2_INTER_REDUCE_TUNING = 2\nMV2_INTER_RED_SCAT_TUNING = 2:0-64,3:65-+\n")


def test_reduce_via_allreduce_only_alone() -> None:
    # 2.3.7's range parser has no case for 8 and falls back to knomial without a word
    flags = "MV2_USE_INDEXED_TUNING = 0\nMV2_USE_INDEXED_REDUCE_TUNING = 0\n"
    _reject(flags + "MV2_INTER_REDUCE_TUNING = 1:0-1024,8:1025-+\n", 3, "knomial")
    assert mv.lookup(mv.parse("MV2_INTER_REDUCE_TUNING = 8\n"), "MV2_INTER_REDUCE_TUNING",
                     5) == 8
    mv.parse(flags + "MV2_INTER_REDUCE_TUNING = 8:0-+\n")  # one entry: read as the number


def test_bad_tables_are_rejected() -> None:
    flags = "MV2_USE_INDEXED_TUNING=0\nMV2_USE_INDEXED_REDUCE_TUNING=0\n"
    _reject(flags + "MV2_INTER_REDUCE_TUNING=3:0-+\n", 3, "algorithm 3 does not exist")
    _reject(flags + "MV2_INTER_REDUCE_TUNING=1:0-100,2:200-+\n", 3, "should start at 101")
    _reject(flags + "MV2_INTER_REDUCE_TUNING=1:0-+,2:1-+\n", 3, "only the last")
    _reject(flags + "MV2_INTER_REDUCE_TUNING=1:0-1024\n", 3, "must end in '+'")
    _reject(flags + "MV2_INTER_REDUCE_TUNING=1:0-1024;2:1025-+\n", 3, "is not ALG:MIN-MAX")
    _reject(flags + "MV2_INTER_REDUCE_TUNING=\n", 3, "no value")
    _reject("MV2_ALLTOALL_TUNING=5\n", 1, "algorithm 5 does not exist")


def test_syntax_and_names() -> None:
    _reject("# ok\nMV2_A=1\nMV2_A=2\n", 3, "set twice (first on line 2)")
    _reject("OMPI_MCA_coll=tuned\n", 1, "not an MVAPICH2")
    _reject("MV2_INTER_REDUCE_TUNING 1\n", 1, "expected NAME = VALUE")
    _reject("MV2_USE_INDEXED_TUNING=no\n", 1, "must be 0 or 1")
    p = mv.parse("export MV2_INTER_BCAST_TUNING=\"8\"\n  MV2_ENABLE_AFFINITY = '0'\n")
    assert p.settings == {"MV2_INTER_BCAST_TUNING": "8", "MV2_ENABLE_AFFINITY": "0"}
