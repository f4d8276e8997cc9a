"""Fresh-launch confirmation: known answers on synthetic data, and a real refutation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from colltune.backends import registry
from colltune.backends.openmpi.install import OpenMPI
from colltune.collectives import get_collective
from colltune.core.clock import PAIRS, clocked, stage
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.options import TuneOptions
from colltune.slots import place
from colltune.store import Store
from colltune.tuner.confirm import ABSamples, confirm_decisions
from colltune.tuner.context import Run, Target
from colltune.tuner.measure import context_for
from judges import judge


def _ab(rng: random.Random, tuned_factor: list[float], n: int = 30) -> ABSamples:
    ab = ABSamples(rounds=len(tuned_factor))
    for f in tuned_factor:
        ab.samples["default"].setdefault(64, []).append(
            [rng.lognormvariate(0, 0.1) for _ in range(n)])
        ab.samples["tuned"].setdefault(64, []).append(
            [f * rng.lognormvariate(0, 0.1) for _ in range(n)])
    return ab


def test_judge_known_answers() -> None:
    rng = random.Random(1)
    assert judge(_ab(rng, [0.7, 0.7, 0.7, 0.7]))[64].verdict == "faster"
    assert judge(_ab(rng, [1.4, 1.4, 1.4, 1.4]))[64].verdict == "slower"
    assert judge(_ab(rng, [1.0, 1.0, 1.0, 1.0]))[64].verdict == "same"
    # pooled it looks faster, but it won only 2 of 4 launch pairs: not confirmed
    v = judge(_ab(rng, [0.4, 0.4, 1.1, 1.1]))[64]
    assert v.rounds_won == 2 and v.verdict != "faster"


@pytest.mark.mpi
@pytest.mark.alone
def test_a_slow_choice_is_refuted_and_the_default_kept(ompi41: OpenMPI, tmp_path: Path) -> None:
    coll = get_collective("reduce")
    placement = place(4)
    store = Store(tmp_path / "db.sqlite")
    ctx = context_for(ompi41, coll, placement)
    size = 1 << 20
    slow = Config(7)  # rabenseifner: 2x to 10x slower than the default here at 1 MiB
    # the store must know the size was measured; the sweep's numbers are made up on purpose
    store.add(ctx, slow, _point(size), "mpit")
    d = Decision(size, size, slow, slow, 1e-4, 1e-3, 1e-6, True)
    opts = TuneOptions(["reduce"], [4], confirm_rounds=3, mpi=str(ompi41.prefix),
                       boundaries="midpoint")
    sess = registry.named("openmpi").open(opts, ["reduce"], print)
    with clocked() as spent:
        confirm_decisions(Run.start(opts, sess, store), Target(coll, placement), [d])
        pairs = spent[PAIRS]  # the launch pairs' time is counted as theirs
    assert 0 < pairs <= spent["total"]
    assert d.chosen == DEFAULT
    # usually "slower"; with 3 launch pairs on a loaded 2-core machine, sometimes "same"
    # (no assertion on the ratio itself: one disturbed launch pair on this shared machine
    # can move a 3-pair geometric mean either way; the verdict is what must hold)
    assert [v.verdict for v in d.confirmations] in (["slower"], ["same"])
    # sequential: 3 pairs, doubled once while a win is still possible (up to twice 3)
    assert d.confirmations[0].rounds in (3, 6)
    assert "not confirmed" in d.reason
    # stored: deciding again from the store reuses the verdict without launching
    again = Decision(size, size, slow, slow, 1e-4, 1e-3, 1e-6, True)
    with clocked() as spent:
        confirm_decisions(Run.start(TuneOptions(["reduce"], [4], from_db=True), sess, store),
                          Target(coll, placement), [again])
    assert again.chosen == DEFAULT and again.confirmations == d.confirmations
    assert PAIRS not in spent  # nothing launched, nothing counted


@pytest.mark.mpi
@pytest.mark.alone
def test_a_choice_that_starts_slow_is_refused_by_its_first_calls(
        ompi41: OpenMPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's test-only "cold" fault makes the rules file's arm (the only one that
    turns coll/tuned's dynamic rules on) 2 ms slower in each of a point's first 10 calls:
    20 ms a launch, past the warm-up every other mode is timed after. Only the start cell
    sees it, and it refuses the choice."""
    monkeypatch.setenv("COLLTUNE_TEST_FAULT", "cold:coll_tuned_use_dynamic_rules=1")
    coll = get_collective("bcast")
    placement = place(2)
    store = Store(tmp_path / "db.sqlite")
    ctx = context_for(ompi41, coll, placement)
    size = 8
    choice = Config(1)  # basic linear: at 2 ranks what the default runs at 8 B, give or take
    store.add(ctx, choice, _point(size), "mpit")
    d = Decision(size, size, choice, choice, 1e-4, 1e-3, 1e-6, True)
    opts = TuneOptions(["bcast"], [2], confirm_rounds=3, mpi=str(ompi41.prefix),
                       boundaries="midpoint")
    sess = registry.named("openmpi").open(opts, ["bcast"], print)
    confirm_decisions(Run.start(opts, sess, store), Target(coll, placement), [d])
    assert d.chosen == DEFAULT and "not confirmed" in d.reason
    (v,) = d.confirmations
    assert v.verdict == "slower"
    modes = v.modes
    # 1000 calls from cold carry 20 ms more on the tuned side (about 100x here), which the
    # warm modes, timed after the fault's calls, do not see (0.88-1.06x in three runs; not
    # asserted: each may read "slower" by chance at the design's alpha): the start decides
    assert modes["start"]["verdict"] == "slower", modes
    assert v.launch_speedup == modes["start"]["launch_speedup"], modes


def test_a_start_cell_only_refuses() -> None:
    from colltune.tuner.sequential import Cell, combine

    def cell(verdict: str, veto: bool = False, ratio: float = 1.0) -> Cell:
        return Cell(verdict, ratio, 0.9, 1.1, 0.5, 0.5, 1.1, 4, True, veto)

    assert combine([cell("faster"), cell("same", veto=True)], need_faster=True) == "faster"
    assert combine([cell("faster"), cell("undecided", veto=True)],
                   need_faster=True) == "faster"
    # leaning slower by a practical difference: more pairs to show it, not yet a verdict
    assert combine([cell("faster"), cell("undecided", veto=True, ratio=1.3)],
                   need_faster=True) == "undecided"
    # once the pairs are spent, the unproven refusal holds nothing back
    assert combine([cell("faster"), cell("inconclusive", veto=True, ratio=1.3)],
                   need_faster=True) == "faster"
    assert combine([cell("faster"), cell("slower", veto=True)], need_faster=True) == "slower"
    # an ordinary cell that is only "same" still holds a tuner's choice back
    assert combine([cell("faster"), cell("same")], need_faster=True) == "same"


def test_from_cold_weighs_the_timed_start_against_the_warm_rest() -> None:
    from colltune.core.records import PointResult
    from colltune.tuner.confirm import from_cold

    r = PointResult(0, 8, "ok", 3, samples=[1e-5] * 3, start=10,
                    series={"start": {"completion": [1e-3]}, "loop": {"completion": [2e-5, 2e-5]}})
    # 10 calls timed at 1 ms each, 990 more at the loop's 20 us
    assert from_cold(r, 1000) == pytest.approx((10 * 1e-3 + 990 * 2e-5) / 1000)
    r.start = 1000
    assert from_cold(r, 1000) == pytest.approx(1e-3)


def _point(size: int):  # type: ignore[no-untyped-def]
    from colltune.core.records import PointResult

    return PointResult(0, size, "ok", 3, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, [1e-4] * 3)




def test_holm_controls_the_family() -> None:
    from judges import holm

    # classic example: only the two smallest survive at 0.05 over four tests
    assert holm([0.01, 0.04, 0.03, 0.005], 0.05) == [True, False, False, True]
    assert holm([0.2, 0.001], 0.05) == [False, True]
    assert holm([], 0.05) == []


def test_a_stage_inside_another_counts_once() -> None:
    """A tune's stages add up to no more than its time: a proof launch inside the launch
    pairs is the proof's, not both."""
    import time

    with clocked() as spent:
        with stage("outer"):
            time.sleep(0.02)
            with stage("inner"):
                time.sleep(0.02)
    assert spent["outer"] + spent["inner"] <= spent["total"]
    assert spent["outer"] > 0 and spent["inner"] > 0


def test_the_sizes_sharing_a_choice_are_the_rules_of_the_file() -> None:
    """Runs of sizes side by side that chose one configuration other than the default;
    a size the library keeps, or another choice, ends a run; a size judged before (no
    pairs here) neither ends one nor joins it; fewer than three: no run."""
    from colltune.tuner.confirm import sharing
    ring, neighbor = Config.of(4, {}), Config.of(5, {})

    def at(size: int, c: Config) -> Decision:
        return Decision(size, size, c, c, 1e-4, 1e-3, 1e-6, True)

    ds = [at(s, c) for s, c in ((8, neighbor), (16, neighbor), (32, DEFAULT), (64, neighbor),
                                (128, ring), (256, ring), (512, ring), (1024, ring),
                                (2048, neighbor), (4096, neighbor), (8192, neighbor))]
    judged = {d.size for d in ds} - {256}
    assert sharing(ds, judged) == [[128, 512, 1024], [2048, 4096, 8192]]
    assert sharing(ds, judged - {2048}) == [[128, 512, 1024]]
