"""`--time-budget`: a tune that fits the allocation it runs in. Before each collective at
each communicator size it prices what is left to do there (tuner/forecast.py: the store's
earlier tunes, else the stated defaults) and starts it only when it fits in what is left of
the budget; what does not fit is left to the library, said in the summary, and a later run
with more budget resumes from the store (every point is stored as it arrives)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from colltune.core.clock import SWEEP, SWITCHES
from colltune.errors import ColltuneError
from colltune.tuner.forecast import Prices, stage_seconds

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# what the tune keeps for itself at the end: deciding, writing, closing the store
RESERVE = 0.05
RESERVE_MIN = 5.0


def parse_duration(text: str) -> float:
    """Seconds in '90', '90s', '5m', '1h30m' or Slurm's 'HH:MM:SS' / 'MM:SS'."""
    t = text.strip().lower()
    if re.fullmatch(r"\d{1,4}(:\d{1,2}){1,2}", t):
        secs = 0.0
        for part in t.split(":"):
            secs = secs * 60 + int(part)
        return _checked(secs, text)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhd]?)", t)
    if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([smhd]?)", "", t).strip():
        raise ColltuneError(f"--time-budget {text!r}: not a duration",
                            "e.g. --time-budget 90s, 5m, 1h30m or 01:30:00")
    return _checked(sum(float(n) * UNITS[u or "s"] for n, u in parts), text)


def _checked(secs: float, text: str) -> float:
    if not 0 < secs <= 30 * 86400:
        raise ColltuneError(f"--time-budget {text!r}: needs more than 0 s and at most 30 days",
                            "e.g. --time-budget 5m")
    return secs


@dataclass
class Budget:
    """A tune's deadline and what it left out to keep it."""

    seconds: float
    prices: Prices
    started: float = field(default_factory=time.monotonic)
    left_out: list[str] = field(default_factory=list)  # "reduce np=4: not measured (...)"
    # target -> the seconds kept for confirming what its sweep finds (the sweeps all come
    # first, the launch pairs after them: a sweep may not spend its confirmation's time)
    kept: dict[str, float] = field(default_factory=dict)

    def left(self) -> float:
        """Seconds the tune may still spend measuring and confirming."""
        reserve = max(RESERVE_MIN, RESERVE * self.seconds)
        return (self.seconds - reserve - (time.monotonic() - self.started)
                - sum(self.kept.values()))

    def measure(self, what: str, launches: int, points: list[tuple[str, int]], rounds: int
                ) -> bool:
        """Whether a target's sweep, its switches and the launch pairs of a win at every
        size fit; if so the pairs' time is kept for it until `confirm` asks."""
        if not self.fits(what, self.whole(launches, points, rounds), "measured"):
            return False
        self.kept[what] = self.pairs_cost(rounds, sorted(set(points))) if rounds else 0.0
        return True

    def whole(self, launches: int, points: list[tuple[str, int]], rounds: int) -> float:
        """A target's expected seconds: sweep, switches and launch pairs at every size."""
        held = stage_seconds(self.prices, launches, points)
        return (held[SWEEP] + held.get(SWITCHES, 0.0)
                + (self.pairs_cost(rounds, sorted(set(points))) if rounds else 0.0))

    def confirm(self, what: str, rounds: int, sizes: list[tuple[str, int]]) -> bool:
        """Whether the launch pairs of a target's wins at `sizes` fit, with what was kept
        for them."""
        self.kept.pop(what, None)
        return not sizes or self.fits(what, self.pairs_cost(rounds, sizes), "confirmed")

    def pairs_cost(self, rounds: int, sizes: list[tuple[str, int]]) -> float:
        """Expected seconds of `rounds` fresh launch pairs at these sizes, half as many
        again where they leave a choice undecided (the most they take is twice)."""
        each = self.prices.startup + sum(self.prices.at(c, s) for c, s in sizes)
        return 1.5 * rounds * 2 * each

    def fits(self, what: str, cost: float, stage: str) -> bool:
        """Whether `cost` seconds fit in what is left; if not, `what` is recorded as left
        to the library."""
        if cost <= self.left():
            return True
        self.left_out.append(f"{what}: not {stage} within --time-budget (about {cost:.0f} s "
                             f"needed, {max(self.left(), 0):.0f} s left): left to the library")
        return False

    def summary(self) -> dict[str, object]:
        return {"seconds": self.seconds, "left_out": self.left_out,
                "priced_from": self.prices.source}
