"""The ask/tell loop every search strategy runs in (as scikit-optimize's Optimizer): a
strategy asks for repetitions of points and is told what was measured; one driver answers
(tuner.live: from the store first, then the kernel), so every strategy resumes after a kill
the same way and none of them knows how points are measured.

A strategy is written as a generator: it yields an `Ask`, receives the samples, and returns
its outcome. `AskTell` gives that generator skopt's ask()/tell() shape."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from colltune.core.config import DEFAULT, Config

Point = tuple[Config, int]
Samples = dict[Point, list[float]]
# measure(points, reps) -> new samples for each point (a failed point is left out); reps
# None: as many as the kernel's own stopping rule takes, once (what a grid asks)
Measure = Callable[[list[Point], "int | None"], Samples]


@dataclass(frozen=True)
class Ask:
    points: list[Point]
    reps: int | None  # None: the kernel's own stopping rule, each point measured once


class Outcome(Protocol):
    def best(self, size: int) -> Config: ...

    def describe(self, grid_points: int) -> str | None:
        """One line on what the search did; None: nothing worth saying (a grid)."""

    def record(self, grid_points: int) -> dict[str, object] | None:
        """What the summary JSON keeps of the search; None: nothing."""


OutcomeT = TypeVar("OutcomeT", bound=Outcome)
Strategy = Generator[Ask, Samples, OutcomeT]


class AskTell(Generic[OutcomeT]):
    """ask() the next points (None once the strategy is done), tell() what they gave."""

    def __init__(self, strategy: Strategy[OutcomeT]) -> None:
        self._gen = strategy
        self._next: Ask | None = None
        self.outcome: OutcomeT | None = None
        self._advance(lambda: next(self._gen))

    def _advance(self, step: Callable[[], Ask]) -> None:
        try:
            self._next = step()
        except StopIteration as done:
            self._next, self.outcome = None, done.value

    def ask(self) -> Ask | None:
        return self._next

    def tell(self, samples: Samples) -> None:
        if self._next is None:
            raise RuntimeError("tell() without an ask() outstanding")
        self._advance(lambda: self._gen.send(samples))


def drive(strategy: Strategy[OutcomeT], measure: Measure) -> OutcomeT:
    """Run a strategy to its end, every ask answered by `measure`."""
    loop = AskTell(strategy)
    while (a := loop.ask()) is not None:
        loop.tell(measure(a.points, a.reps))
    assert loop.outcome is not None
    return loop.outcome


@dataclass
class GridOutcome:
    """Every point measured to the kernel's own stopping rule."""
    samples: Samples = field(default_factory=dict)

    def best(self, size: int) -> Config:
        from colltune.core.stats import median

        here = [(median(v), c) for (c, s), v in self.samples.items() if s == size and v]
        return min(here)[1] if here else DEFAULT

    def describe(self, grid_points: int) -> str | None:
        return None

    def record(self, grid_points: int) -> dict[str, object] | None:
        return None


def grid(candidates: dict[int, list[Config]]) -> Strategy[GridOutcome]:
    """Every candidate at every size, in one ask."""
    points = [(c, size) for size in sorted(candidates) for c in candidates[size]]
    got = yield Ask(points, None)
    return GridOutcome(dict(got))
