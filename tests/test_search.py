"""Search strategies offline: the racing strategy and the replay harness on a committed
dataset, and the statistics they rely on, on synthetic samples with known answers."""

from __future__ import annotations

import random
from pathlib import Path

from colltune.tuner.race import Point, RaceSettings, race
from colltune.tuner.replay import load, run_race
from colltune.tuner.space import DEFAULT, Config
from colltune.tuner.stats import bootstrap_median_ci

DATA = Path(__file__).resolve().parents[1] / "bench" / "data"


def _synthetic(means: dict[Config, float], seed: int = 7):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)

    def measure(points: list[Point], reps: int) -> dict[Point, list[float]]:
        return {p: [rng.lognormvariate(0, 0.1) * means[p[0]] for _ in range(reps)]
                for p in points}
    return measure


def test_race_finds_a_20_percent_faster_configuration() -> None:
    means = {DEFAULT: 10.0, Config(1): 8.0, Config(2): 12.0, Config(3): 15.0, Config(4): 10.5}
    out = race(list(means), [8], _synthetic(means))
    assert out.best(8) == Config(1)
    assert Config(3) not in out.survivors[8]  # dropped by the rank test
    assert DEFAULT in out.survivors[8]  # the baseline is never dropped


def test_race_respects_its_budget_and_keeps_the_default() -> None:
    means = {Config(i): 10.0 + i for i in range(8)}
    out = race(list(means), [8, 64], _synthetic(means), RaceSettings(budget=120))
    assert out.cost <= 120
    assert all(DEFAULT in s for s in out.survivors.values())


def test_bootstrap_ci_covers_the_true_median() -> None:
    rng = random.Random(11)
    covered = 0
    for i in range(100):
        xs = [rng.expovariate(1.0) for _ in range(40)]
        lo, hi = bootstrap_median_ci(xs, resamples=400, seed=i)
        covered += lo <= 0.6931 <= hi  # median of Exp(1) is ln 2
    assert 85 <= covered <= 100
    assert bootstrap_median_ci([1.0, 2.0, 3.0], seed=1) == bootstrap_median_ci([1.0, 2.0, 3.0],
                                                                               seed=1)


def test_replay_is_deterministic_for_a_seed_and_respects_the_budget() -> None:
    ds = load(DATA / "ompi4.1.4-alltoall-np4.csv")
    assert len(ds.sizes) >= 5 and ds.cost > 1000
    a, b = run_race(ds, seed=5), run_race(ds, seed=5)
    assert a == b
    assert a.cost < ds.cost  # racing spends fewer repetitions than the recorded grid
    capped = run_race(ds, seed=5, settings=RaceSettings(budget=300))
    assert capped.cost <= 300 and capped.sizes == len(ds.sizes)
