"""Issue 84, item 5: the tune at scale against exhaustive SMPI grids recorded at 512 ranks
(tests/data/smpi, bench/record_smpi_grids.py). SimGrid is deterministic, so a grid is an
exact oracle: the real tune decides from the recorded points its plan asks for (nothing
is simulated again: seconds), and its rules file is judged at every recorded size,
powers of two and the sizes between them that the file's ranges answer for."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from colltune.core.account import LaunchCost
from conftest import missing
from replay_smpi import (
    DATA,
    Grid,
    commsizes,
    grids,
    judge,
    ladders,
    load,
    replay,
    rules,
    tune_from,
    unrecorded,
)

# the targets (BETWEEN: at communicator sizes no tune measured)
CAPTURED, SLOWER, COST, BETWEEN = 0.95, 1.03, 0.10, 0.90


def test_the_recordings_are_there_and_whole() -> None:
    """Every recording loads, at 512 ranks or more, with the default and at least three
    algorithms at 20 sizes or more, most of them judged (a missing or hollow file would
    make the targets vacuous)."""
    paths = grids()
    assert paths, "no recorded grids under tests/data/smpi"
    for p in paths:
        g = load(p)
        assert g.np >= 512 and 0 in g.algorithms and len(g.algorithms) >= 3, p.name
        # two thirds: where Debian's SimGrid did not finish the default (its quadratic
        # wait, docs/smpi.md) a size is unjudged until recorded again with the fix; the
        # most a recording left was reduce on the Gigabit platform, 21 of 78
        assert len(g.sizes) >= 20 and 3 * len(g.judged()) >= 2 * len(g.sizes), p.name


# Grids with points that time out, the algorithms they are, and why (docs/smpi.md); the
# test checks nothing else times out there.
TIMEOUT_MISSES: dict[str, tuple[set[str], str]] = {
    "gige-32x16-alltoall-np512": ({"0", "1"}, (
        "basic linear, and SMPI's default from 512 B a rank, which runs it: 261,632 flows "
        "in flight on 1 Gb/s links, every stack sample in SimGrid's max-min solver, none "
        "in the quadratic wait (with upstream's fix of it: on the fat tree the same "
        "solver aborts, `crashed`)")),
}


def test_no_recorded_point_timed_out() -> None:
    """Item 5: no SMPI point times out at 512 ranks. Debian's SimGrid 3.32 could not finish
    segmented reductions there (its quadratic wait, docs/smpi.md); those sizes were
    recorded again with upstream's fix. What SimGrid cannot simulate at all (alltoall's
    default from 512 B, its basic linear: an abort in the max-min solver) is `crashed`,
    said in tests/data/smpi/README.md, not a timeout; where the solver runs on instead of
    aborting, TIMEOUT_MISSES says so."""
    for p in grids():
        with open(p, newline="") as f:
            late = {row["algorithm"] for row in csv.DictReader(f)
                    if row["status"] == "timeout"}
        allowed = TIMEOUT_MISSES.get(p.stem, (set(), ""))[0]
        assert late <= allowed and bool(late) == bool(allowed), (p.name, late)


@pytest.mark.parametrize("path", [*grids(), *commsizes()],
                         ids=lambda p: p.stem)
def test_every_size_a_tune_asks_is_recorded(path: Path, tmp_path: Path) -> None:
    """A replay runs as the tune does only where the grid holds every size the tune would
    measure; the rules that locate switches change what it asks (a large stake located
    finer asked sizes beyond the dense list). Fails naming the sizes to record
    (`bench/record_smpi_grids.py --add-sizes`), before a replay would simulate them."""
    if shutil.which("smpirun") is None:
        missing("SimGrid SMPI unavailable (apt-get install libsimgrid-dev)")
    assert unrecorded(load(path), tmp_path) == []


def test_unrecorded_names_what_a_grid_lacks(tmp_path: Path) -> None:
    """The check above can fail: flat reduce without 808560 B (the size its large-stake
    switch asks beyond the dense list) is named as lacking it."""
    if shutil.which("smpirun") is None:
        missing("SimGrid SMPI unavailable (apt-get install libsimgrid-dev)")
    g = load(DATA / "flat-64x8-reduce-np512.csv")
    g.times = {k: t for k, t in g.times.items() if k[1] != 808560}
    assert 808560 in unrecorded(g, tmp_path)


# Grids where the file misses CAPTURED, with why (docs/benchmarks.md, "The tune at scale,
# against exhaustive SMPI grids"); the test checks they still miss.
CAPTURE_MISSES: dict[str, str] = {
    # none since flat reduce: 94.9% until a switch with a large stake was located finer
    # (tuner/boundaries.within); its grid now holds the sizes that asks
}


@pytest.mark.parametrize("path", grids(), ids=lambda p: p.stem)
def test_the_tune_captures_the_oracle_at_a_tenth_of_the_cost(path: Path, tmp_path: Path
                                                            ) -> None:
    """Item 5: the file captures CAPTURED of the oracle's gain (except where
    CAPTURE_MISSES says why not), is never more than 3% slower than the default at any
    recorded size, and the tune holds at most COST of an OSU-driven exhaustive sweep."""
    if shutil.which("smpirun") is None:
        missing("SimGrid SMPI unavailable (apt-get install libsimgrid-dev)")
    got = replay(load(path), tmp_path)
    assert got.launches == 0  # every point came from the recording, none simulated again
    assert (got.captured >= CAPTURED) != (path.stem in CAPTURE_MISSES), (got.captured,
                                                                        got.chosen)
    assert got.worst <= SLOWER, got.worst
    cost = LaunchCost()
    assert got.held(cost) <= COST * got.exhaustive(cost), (got.held(cost),
                                                           got.exhaustive(cost))


def test_the_judge_sees_a_wrong_file() -> None:
    """The scores are not vacuous: a file that runs the slowest algorithm everywhere
    captures nothing and is slower than the default, on a grid made here."""
    from replay_smpi import Replayed

    g = Grid("fattree-32x16", "reduce", 512)
    for s in (1024, 2048, 4096):
        g.times.update({(0, s): 2.0, (1, s): 1.0, (2, s): 4.0})
    best = Replayed(g, [1024, 4096], {s: 1 for s in g.sizes}, 0)
    worst = Replayed(g, [1024, 4096], {s: 2 for s in g.sizes}, 0)
    assert best.captured == pytest.approx(1.0) and best.worst == pytest.approx(0.5)
    assert worst.captured < 0 and worst.worst == pytest.approx(2.0)


@pytest.mark.parametrize("key", sorted(ladders()), ids=lambda k: "-".join(k))
def test_communicator_sizes_between_the_anchors_are_never_slower(
        key: tuple[str, str], tmp_path: Path) -> None:
    """Item 4: the tune measures the powers of two up to the largest size (the anchors:
    one launch each, cheap below the largest); a job on a size between two anchors runs
    what both anchors' rules run where they agree and the library's own decision where
    they part (rules.agreed, said in the file). Judged at every size recorded between
    against its own exhaustive grid: never more than 3% slower than the default. Before,
    such a job ran the rule of the anchor below: bcast at 24 and 28 ranks ran 16's choice,
    2.3 and 3.3 times slower than the default at 55 KB (16 ranks fill one node of the fat
    tree, 24 span two)."""
    if shutil.which("smpirun") is None:
        missing("SimGrid SMPI unavailable (apt-get install libsimgrid-dev)")
    recorded = ladders()[key]
    anchors = [g for g in recorded if g.np & (g.np - 1) == 0]
    between = [g for g in recorded if g.np & (g.np - 1) != 0]
    assert len(anchors) >= 3 and between, [g.np for g in recorded]
    tuned = tune_from(anchors, tmp_path)
    assert tuned.launches == 0 and not tuned.added
    for g in between:
        got = judge(g, tuned)
        assert got.worst <= SLOWER, (g.np, got.worst, got.chosen)
    # the judge sees what the rule of the size below did (the fat tree's bcast at 28
    # ranks: 3.3x slower than the default at 55 KB), so the check above can fail
    before = {g.np: judge(g, tuned, below=True).worst for g in between}
    assert max(before.values()) > 2 * SLOWER, before


# Sizes between the measured ones where --between measure's file misses BETWEEN, with
# why (docs/benchmarks.md, "The tune at scale, against exhaustive SMPI grids"): the test
# checks they still miss, so a change that meets the target there shows up, as a
# regression elsewhere does.
MISSES = {
    ("fattree-32x16", "bcast", 20): "16 ranks fill one node, 20 span two: from 2,896 B "
                                    "16's rules and 24's part and the default runs there "
                                    "(basic_linear 1.1-1.3x): 71% captured",
    ("fattree-32x16", "bcast", 28): "24's and 32's rules part from 256 B (basic_linear "
                                    "1.0-1.2x) and at 1 MiB (binomial 2.3x): 75% captured",
    ("fattree-32x16", "bcast", 56): "basic_linear gains 1.2-1.3x to 215 B at 56 ranks, "
                                    "where 64's rule keeps the default from 45 B (its gain "
                                    "there under 3%): 50% captured",
    ("fattree-32x16", "bcast", 224): "binomial gains 1.2-1.7x from 256 B at 224 ranks, "
                                     "192's choice there, where 256's keeps the default: "
                                     "24% captured",
}


@pytest.mark.parametrize("key", sorted(ladders()), ids=lambda k: "-".join(k))
def test_between_measure_adds_the_size_halfway_where_rules_part(
        key: tuple[str, str], tmp_path: Path) -> None:
    """Item 4 with --between measure: where two neighbouring anchors' rules part (either's
    choice loses at the other), the tune measures the size halfway too, in the same run
    and file (served from the recordings: nothing simulated again). Judged at every
    recorded size it did not measure: never more than 3% slower than the default, and
    BETWEEN of the oracle's gain except where MISSES says why not."""
    if shutil.which("smpirun") is None:
        missing("SimGrid SMPI unavailable (apt-get install libsimgrid-dev)")
    recorded = ladders()[key]
    anchors = [g for g in recorded if g.np & (g.np - 1) == 0]
    spare = [g for g in recorded if g.np & (g.np - 1) != 0]
    tuned = tune_from(anchors, tmp_path, spare)
    assert tuned.launches == 0  # every size added was recorded: served, not simulated
    nps = [g.np for g in anchors]
    halfway = {(a + b) // 2 for a, b in zip(nps, nps[1:], strict=False) if b - a >= 2}
    assert tuned.added and set(tuned.added) <= halfway, tuned.added
    measured = set(nps) | set(tuned.added)
    sections = {s.comsize for s in tuned.rules.collectives[rules.COLLTYPE[key[1]]]}
    assert measured <= sections, (measured, sections)
    for g in recorded:
        if g.np in measured:
            continue
        got = judge(g, tuned)
        assert got.worst <= SLOWER, (g.np, got.worst)
        met = got.captured >= BETWEEN
        assert met != ((*key, g.np) in MISSES), (g.np, got.captured, got.chosen)
