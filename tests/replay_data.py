"""Offline replay of recorded full-grid datasets (tests/data/datasets): a measure function that
draws repetitions from the recorded samples (seeded), so search strategies can be compared
on the same data, many times, without a machine."""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass, replace
from pathlib import Path

from colltune.core.config import Config
from colltune.core.stats import median
from colltune.errors import FormatError
from colltune.tuner.bayes import BayesSettings, bayes_search
from colltune.tuner.race import Measure, Point, RaceSettings, race


@dataclass
class Dataset:
    name: str
    samples: dict[Point, list[float]]  # only points the kernel measured successfully

    @property
    def sizes(self) -> list[int]:
        return sorted({s for _, s in self.samples})

    def configs(self, size: int) -> list[Config]:
        return sorted(c for c, s in self.samples if s == size)

    @property
    def cost(self) -> int:
        """Repetitions the grid spent: the reference every strategy's cost is divided by."""
        return sum(len(v) for v in self.samples.values())

    def best(self, size: int) -> tuple[Config, float]:
        c = min(self.configs(size), key=lambda c: (median(self.samples[(c, size)]), c))
        return c, median(self.samples[(c, size)])


def load(path: Path) -> Dataset:
    out: dict[Point, list[float]] = {}
    with open(path, newline="") as f:
        for no, row in enumerate(csv.DictReader(f), 2):
            try:
                if row["status"] != "ok":
                    continue
                cfg = Config.from_key(row["config_key"])
                out[(cfg, int(row["size"]))] = [float(x) for x in row["samples"].split()]
            except (KeyError, ValueError) as e:
                raise FormatError(str(path), no, f"not a dataset row: {e}") from None
    return Dataset(path.stem, out)


def replay_measure(ds: Dataset, seed: int) -> Measure:
    rng = random.Random(seed)

    def measure(points: list[Point], reps: int | None) -> dict[Point, list[float]]:
        if reps is None:  # a grid's ask: the point as it was recorded
            return {p: list(ds.samples[p]) for p in points if p in ds.samples}
        return {p: [rng.choice(ds.samples[p]) for _ in range(reps)] for p in points
                if p in ds.samples}

    return measure


@dataclass
class ReplayScore:
    cost: int  # repetitions drawn
    within: int  # sizes whose choice is within `tolerance` of the dataset's best median
    sizes: int
    worst_regret: float  # max over sizes of chosen median / best median - 1


def score(ds: Dataset, chosen: dict[int, Config], cost: int, tolerance: float = 0.05
          ) -> ReplayScore:
    within, worst = 0, 0.0
    for size, cfg in chosen.items():
        _, best = ds.best(size)
        got = median(ds.samples[(cfg, size)])  # judged on the full recorded data
        regret = got / best - 1
        within += regret <= tolerance
        worst = max(worst, regret)
    return ReplayScore(cost, within, len(chosen), worst)


def run_race(ds: Dataset, seed: int, settings: RaceSettings | None = None) -> ReplayScore:
    """Race every size at once on the dataset; the choice per size is the leader (the
    default when it is among the survivors and nothing beats it)."""
    out = race({size: ds.configs(size) for size in ds.sizes}, replay_measure(ds, seed),
               settings)
    chosen = {s: out.best(s) for s in ds.sizes}
    return score(ds, chosen, out.cost)


def counted(measure: Measure) -> tuple[Measure, list[int]]:
    """The measure function, and a list whose one element counts the repetitions drawn."""
    spent = [0]

    def m(points: list[Point], reps: int | None) -> dict[Point, list[float]]:
        got = measure(points, reps)
        spent[0] += sum(len(v) for v in got.values())
        return got

    return m, spent


def run_bayes(ds: Dataset, seed: int, settings: BayesSettings | None = None) -> ReplayScore:
    s = replace(settings or BayesSettings(), seed=seed)
    measure, spent = counted(replay_measure(ds, seed))
    out = bayes_search({size: ds.configs(size) for size in ds.sizes}, measure, s)
    return score(ds, {size: out.best(size) for size in ds.sizes}, spent[0])
