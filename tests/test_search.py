"""Search strategies offline: racing and Bayesian search, and the replay harness on a
committed dataset, and the statistics they rely on, on synthetic samples with known
answers."""

from __future__ import annotations

import random
from pathlib import Path

from colltune.core.catalog import FAN, SEG
from colltune.core.config import DEFAULT, Config
from colltune.core.stats import bootstrap_median_ci
from colltune.tuner.bayes import BayesSettings, bayes_search
from colltune.tuner.race import Point, RaceSettings, race
from replay_data import load, replay_measure, run_bayes, run_race

DATA = Path(__file__).resolve().parent / "data" / "datasets"


def _synthetic(means: dict[Config, float], seed: int = 7):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)

    def measure(points: list[Point], reps: int) -> dict[Point, list[float]]:
        return {p: [rng.lognormvariate(0, 0.1) * means[p[0]] for _ in range(reps)]
                for p in points}
    return measure


def test_race_finds_a_20_percent_faster_configuration() -> None:
    means = {DEFAULT: 10.0, Config(1): 8.0, Config(2): 12.0, Config(3): 15.0, Config(4): 10.5}
    out = race({8: list(means)}, _synthetic(means))
    assert out.best(8) == Config(1)
    assert Config(3) not in out.survivors[8]  # dropped by the rank test
    assert DEFAULT in out.survivors[8]  # the baseline is never dropped


def test_race_respects_its_budget_and_keeps_the_default() -> None:
    means = {Config(i): 10.0 + i for i in range(8)}
    out = race({8: list(means), 64: list(means)}, _synthetic(means), RaceSettings(budget=120))
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


def _by_size(cost: dict[tuple[Config, int], float], seed: int = 3):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    asked: list[Point] = []

    def measure(points: list[Point], reps: int) -> dict[Point, list[float]]:
        asked.extend(points)
        return {p: [rng.lognormvariate(0, 0.1) * cost[p] for _ in range(reps)] for p in points}
    return measure, asked


def test_bayes_finds_the_faster_algorithm_at_each_size_within_its_budget() -> None:
    # algorithm 2 is 20% faster than the default at large sizes, algorithm 1 at small ones;
    # segmented variants of 3 are slow everywhere (the bulk of the space)
    sizes = [8 << (2 * i) for i in range(8)]
    cfgs = [DEFAULT, Config(1), Config(2)] + [Config.of(3, {SEG: 1024 << k}) for k in range(8)]
    cost = {}
    for j, size in enumerate(sizes):
        for c in cfgs:
            rel = 1.0
            if c.algorithm == 1:
                rel = 0.8 if j < 4 else 1.3
            elif c.algorithm == 2:
                rel = 1.3 if j < 4 else 0.8
            elif c.algorithm == 3:
                rel = 1.5 + 0.05 * (c.get(SEG) // 1024).bit_length()
            cost[(c, size)] = rel * size ** 0.5
    measure, asked = _by_size(cost)
    out = bayes_search({s: cfgs for s in sizes}, measure, BayesSettings(budget=50, seed=2))
    assert len(set(asked)) <= 50 and len(out.order) <= 50
    assert all((DEFAULT, s) in out.samples for s in sizes)  # the baseline at every size
    assert [out.best(s) for s in sizes] == [Config(1)] * 4 + [Config(2)] * 4
    assert out.stopped in ("budget", "expected improvement")


def test_bayes_stops_early_when_nothing_can_be_gained() -> None:
    # 16 algorithms, all as fast as the default at every size: once the model has seen
    # that, no point is expected to improve and the search ends well before the grid would
    sizes = [8 << (2 * i) for i in range(8)]
    cfgs = [DEFAULT] + [Config(a) for a in range(1, 9)] + [Config.of(9, {SEG: 1024 << k})
                                                            for k in range(8)]
    cost = {(c, s): float(s) ** 0.5 for c in cfgs for s in sizes}
    measure, asked = _by_size(cost)
    out = bayes_search({s: cfgs for s in sizes}, measure, BayesSettings(seed=1))
    assert out.stopped == "expected improvement"
    assert len(set(asked)) < 0.6 * len(cost)


def test_bayes_replay_is_deterministic_for_a_seed_and_respects_the_budget() -> None:
    ds = load(DATA / "ompi4.1.4-alltoall-np4.csv")
    s = BayesSettings(budget=20)
    a, b = run_bayes(ds, seed=5, settings=s), run_bayes(ds, seed=5, settings=s)
    assert a == b
    assert a.cost < ds.cost and a.sizes == len(ds.sizes)
    out = bayes_search({z: ds.configs(z) for z in ds.sizes}, replay_measure(ds, 5), s)
    assert len(out.order) <= 20 and out.stopped == "budget"


def test_model_shortlist_keeps_each_algorithm_best_variant_and_the_top_k() -> None:
    from colltune.models.predict import Prediction
    from colltune.tuner.guided import shortlist

    s1k, s4k = Config.of(6, {SEG: 1024}), Config.of(6, {SEG: 4096})
    chain = Config.of(2, {SEG: 1024, FAN: 4})
    ranked = [Prediction(s1k, 1.0, 9.0), Prediction(s4k, 1.1, 9.0),
              Prediction(Config(6), 1.2, 9.0), Prediction(chain, 2.0, 9.0),
              Prediction(Config.of(2, {SEG: 8192, FAN: 4}), 2.5, 9.0),
              Prediction(Config(1), 3.0, 9.0)]
    assert shortlist(ranked, 2) == sorted([s1k, s4k, chain, Config(1)])
    assert shortlist(ranked, 0) == sorted([s1k, chain, Config(1)])
    assert shortlist([], 3) == []


def test_every_strategy_is_an_ask_tell_loop() -> None:
    """grid, race, bayes and model propose points and are told results; nothing else
    measures (the driver does), so asking and telling by hand gives what drive() gives."""
    from colltune.models.predict import Prediction
    from colltune.tuner.asktell import AskTell, drive, grid
    from colltune.tuner.bayes import bayesian
    from colltune.tuner.guided import guided
    from colltune.tuner.race import racing

    means = {DEFAULT: 10.0, Config(1): 8.0, Config(2): 12.0, Config(3): 15.0}
    cands = {8: list(means), 64: list(means)}
    ranked = {s: [Prediction(c, means[c], means[c]) for c in sorted(means, key=means.get)]
              for s in cands}

    def fresh():  # type: ignore[no-untyped-def]
        return {"grid": grid(cands), "race": racing(cands),
                "bayes": bayesian(cands, BayesSettings(seed=3)),
                "model": guided(ranked, 1)}

    def answers():  # type: ignore[no-untyped-def]
        m = _synthetic(means)
        return lambda pts, reps: m(pts, 7 if reps is None else reps)  # a grid: the kernel's 7

    for name, strategy in fresh().items():
        loop, asks, measure = AskTell(strategy), [], answers()
        while (a := loop.ask()) is not None:
            asks.append(a)
            assert set(a.points) <= {(c, s) for s in cands for c in means}
            loop.tell(measure(a.points, a.reps))
        assert loop.outcome is not None and asks, name
        again = drive(fresh()[name], answers())
        assert [loop.outcome.best(s) for s in cands] == [again.best(s) for s in cands], name
        assert all(loop.outcome.best(s) == Config(1) for s in cands), name
        if name == "grid":  # one ask, to the kernel's own stopping rule
            assert len(asks) == 1 and asks[0].reps is None and len(asks[0].points) == 8
        else:
            assert all(a.reps for a in asks), name
