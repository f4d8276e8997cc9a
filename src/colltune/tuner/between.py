"""Which communicator sizes between the measured ones a tune measures too (--between
measure, issue 84 item 4): the size halfway between two neighbours whose rules part, where
one's choice, run at the other, loses there. A job between them runs one of the two rules
(Open MPI: the section of the largest size at or below it), and where they part the sizes
between may want either, or something else (bcast at 96 ranks on the fat tree: a third
of its gain lay where neither 64's nor 128's rule was right)."""

from __future__ import annotations

from dataclasses import dataclass

from colltune.core.records import Decision
from colltune.tuner.context import Run, Target


@dataclass(frozen=True)
class Parting:
    """Two neighbouring measured sizes whose rules part, and what that costs."""

    coll: str
    below: int
    above: int
    halfway: int
    size: int  # the message size where one's choice loses most at the other
    loss: float  # how many times slower it is there than the other's own choice
    at: int  # the communicator size it loses at (below or above)

    def says(self) -> str:
        other = self.below if self.at == self.above else self.above
        return (f"{self.coll}: measuring {self.halfway} ranks too, between {self.below} and "
                f"{self.above}, whose rules part: {other}'s choice runs {self.loss:.2f}x "
                f"slower than {self.at}'s own at {self.at} ranks, {self.size} B")

    def as_json(self) -> dict[str, object]:
        return {"collective": self.coll, "below": self.below, "above": self.above,
                "halfway": self.halfway, "size": self.size, "loss": round(self.loss, 4),
                "at": self.at}


def halfway(below: int, above: int, ppn: int | None) -> int | None:
    """The communicator size halfway between two (a whole number of nodes where both are,
    with `ppn` ranks each); None where none lies strictly between."""
    mid = (below + above) // 2
    if ppn and below % ppn == 0 and above % ppn == 0:
        mid -= mid % ppn
    return mid if below < mid < above else None


def halfways(nps: list[int], ppn: int | None) -> list[int]:
    """The size halfway in every gap between the communicator sizes `nps`: what --between
    measure may add at most (a plan's and a batch script's count)."""
    ordered = sorted(nps)
    return [m for a, b in zip(ordered, ordered[1:], strict=False)
            if (m := halfway(a, b, ppn)) is not None]


def partings(run: Run, decisions: dict[str, dict[int, list[Decision]]]) -> list[Parting]:
    """Per collective, each two neighbouring measured sizes where either's choice, run at
    the other, is at least --min-gain slower there than that one's own (by the sweep's
    medians), and a size lies halfway between them not measured yet."""
    out = []
    ppn = run.opts.launch.ppn if run.opts.launch else None
    for name, per_np in decisions.items():
        nps = sorted(per_np)
        for below, above in zip(nps, nps[1:], strict=False):
            mid = halfway(below, above, ppn)
            if mid is None:
                continue
            worst = max((_loss(run, name, src, at, per_np) for src, at in
                         ((below, above), (above, below))), default=None,
                        key=lambda x: x[0] if x else 0.0)
            if worst and worst[0] >= 1 + run.opts.min_gain:
                out.append(Parting(name, below, above, mid, worst[1], worst[0], worst[2]))
    return out


def _loss(run: Run, name: str, src: int, at: int, per_np: dict[int, list[Decision]]
          ) -> tuple[float, int, int] | None:
    """How much `src`'s choices lose at `at` where the two differ: the largest ratio of
    the medians measured at `at`, the size, and `at`; None where nothing compares."""
    placement = next((p for p in run.sess.placements if p.np == at), None)
    if placement is None:
        return None
    ctx = run.context(Target(run.collective(name), placement))
    median = {(m.config, m.size): m.median for m in run.store.measurements(ctx)
              if m.median is not None}
    theirs = {d.size: d.chosen for d in per_np[src]}
    worst = None
    for d in per_np[at]:
        other = theirs.get(d.size)
        if other is None or other == d.chosen:
            continue
        mine, them = median.get((d.chosen, d.size)), median.get((other, d.size))
        if mine and them and (worst is None or them / mine > worst[0]):
            worst = (them / mine, d.size, at)
    return worst
