"""Issue 64: the summary reads true. Each verdict's word matches its fresh-launch interval
(judged by the real sequential procedure on launch pairs drawn here: a clear win, a
difference lost in noise, a clear loss), every column means what its header says, and the
last line says in one sentence what the written file changes."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from rich.console import Console

from colltune.cli import tuning as cli_tuning
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, Verdict
from colltune.slots import Placement
from colltune.tuner import outcome, sequential
from colltune.tuner.confirm import as_verdict
from colltune.tuner.run import TuneResult

MODES = ("isolated", "back-to-back", "loop")


def _judged(ratio: float, noise: float, seed: int) -> Verdict:
    """A fresh comparison at one size, by the procedure tune uses: launch pairs whose
    tuned/default time is `ratio`, each launch's median spread by `noise` (log scale)."""
    rng = random.Random(seed)

    def measure(sizes: list[int], first: int, rounds: int) -> sequential.Batch:
        def launch(t: float) -> list[float]:
            return [t * math.exp(rng.gauss(0, noise)) for _ in range(5)]

        return {s: {m: {"default": [launch(1e-5) for _ in range(rounds)],
                        "tuned": [launch(1e-5 * ratio) for _ in range(rounds)]}
                    for m in MODES} for s in sizes}

    (res,) = sequential.run(measure, [4096], sequential.Design(), need_faster=True).values()
    return as_verdict(res)


def _decision(v: Verdict) -> Decision:
    """As apply_confirmations leaves it: the candidate kept only when confirmed faster."""
    chosen = Config(3) if v.verdict == "faster" else DEFAULT
    return Decision(4096, 4096, chosen, Config(3), 0.5e-5, 1e-5, 0.001, True,
                    confirmations=[v])


def _speedup_intervals(v: Verdict) -> list[tuple[float, float]]:
    """Each mode's default/chosen interval, as the table prints it."""
    return [(1 / m["ratio_ci"][1], 1 / m["ratio_ci"][0])  # type: ignore[index]
            for m in v.modes.values()]


@pytest.mark.parametrize("ratio,noise,word", [(0.5, 0.05, "tuned"),
                                              (0.9, 0.8, "not significant"),
                                              (1.6, 0.05, "slower")])
def test_each_verdicts_word_matches_its_interval(ratio: float, noise: float, word: str
                                                 ) -> None:
    d = _decision(_judged(ratio, noise, seed=7))
    assert d.verdict == word
    ivs = _speedup_intervals(d.confirmations[0])
    if word == "tuned":  # faster in every mode: every interval above 1
        assert all(lo > 1 for lo, _ in ivs), ivs
    elif word == "slower":  # shown slower: some interval wholly below 1
        assert any(hi < 1 for _, hi in ivs), ivs
    else:  # not significant: the default kept, an interval that still holds 1 (no win)
        assert d.chosen == DEFAULT and any(lo <= 1 <= hi for lo, hi in ivs), ivs
    # and the table prints those intervals, and what the pairs could have seen
    text = cli_tuning._fresh(d.confirmations[0])
    for lo, hi in ivs:
        assert f"({lo:.2f}-{hi:.2f})" in text
    assert cli_tuning._could_see(d.confirmations).endswith("%")


def _render(decisions: list[Decision], tmp_path: Path) -> str:
    res = TuneResult(_Mpi(), Catalog(algorithms={"reduce": {1: "linear", 3: "binomial"}}),
                     1, {"reduce": {4: decisions}}, [], {})
    console = Console(record=True, width=400)
    old = cli_tuning.out
    cli_tuning.out = console  # type: ignore[assignment]
    try:
        cli_tuning._print_result(res, quiet=False)
    finally:
        cli_tuning.out = old  # type: ignore[assignment]
    return console.export_text()


class _Mpi:
    name, version = "Open MPI", "4.1.4"


def test_the_sweep_column_is_default_over_best_even_where_the_default_is_kept(
        tmp_path: Path) -> None:
    """The issue's row: best 9.2 us, default 19.2 us, the candidate not confirmed: the
    column said 1.00x (the chosen's ratio), its header says default/best."""
    d = _decision(_judged(0.9, 0.8, seed=7))
    d.best_median, d.default_median = 9.2e-6, 19.2e-6
    text = _render([d], tmp_path)
    row = next(ln for ln in text.splitlines() if ln.lstrip("│ ").startswith("4096"))
    assert "2.09x" in row and "not significant" in row and "refuted" not in text


def _placement(np: int) -> Placement:
    return Placement(np=np, oversubscribe=False, hostfile=None, nodes=1, ppn=np)


def test_the_last_line_says_what_the_file_changes() -> None:
    win = _decision(_judged(0.5, 0.05, seed=7))
    lost = _decision(_judged(0.9, 0.8, seed=7))
    kept = Decision(64, 64, DEFAULT, DEFAULT, 1e-5, 1e-5, 0.5, False)
    p = [_placement(4)]
    with_wins = outcome.changes({"reduce": {4: [kept, win]}}, {}, p)
    assert with_wins["sizes_changed"] == 1
    assert with_wins["sentence"].startswith("the file changes 1 size(s): reduce at 4 ranks")
    none = outcome.changes({"reduce": {4: [kept, lost]}}, {}, p)
    assert none["sizes_changed"] == 0
    assert none["sentence"].startswith("the file keeps the library's choice at every size: "
                                       "no candidate was confirmed faster")
    quiet = outcome.changes({"reduce": {4: [kept]}}, {}, p)
    assert "nothing beat it significantly" in str(quiet["sentence"])
    # a family whose file could not carry a confirmed win says so; the sentence follows
    dropped = outcome.changes({"reduce": {4: [kept, win]}}, {"not_carried": {"reduce": 1}},
                              p)
    assert dropped["sizes_changed"] == 0 and dropped["not_carried"] == 1
    assert "cannot carry the 1 confirmed win(s)" in str(dropped["sentence"])
    # written but never put to fresh launches (--confirm-rounds 0): a change, said unconfirmed
    unjudged = Decision(4096, 4096, Config(3), Config(3), 0.5e-5, 1e-5, 0.001, True)
    assert unjudged.verdict == "tuned?"
    bare = outcome.changes({"reduce": {4: [kept, unjudged]}}, {}, p)
    assert bare["sizes_changed"] == 1 and bare["confirmed"] == 0
    assert str(bare["sentence"]).endswith("; 1 of them not confirmed in fresh launches")
