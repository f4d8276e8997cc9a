"""Group-sequential judgement of default/rules launch pairs: look after a first batch and after
every extension, spend the error rates over the looks, and stop a size once it is decided.

One observation per launch pair and timing mode (a "cell"): the log ratio of the two launches'
medians. At each look a cell is tested at the share of alpha the spending function releases
there (Lan-DeMets, Pocock type: alpha * ln(1 + (e - 1) t), t = pairs / budget); by the union
bound over looks and cells the stated rates hold whenever the procedure stops:

- a cell whose arms are the same is called slower (or faster) with probability <= alpha / cells;
- a cell `threshold` or more slower is called "same" with probability <= beta.

"same" means the interval of the ratio lies inside +-threshold; a cell that is neither
significant nor inside the threshold when the budget runs out is "inconclusive". A gate's
size (no choice to confirm) whose every cell ends faster, same, or with its interval below
+threshold is "not slower": that interval gives the same beta bound as "same" for the only
question a gate asks (a file 2x faster in two modes and 1.6x, not yet significantly, in
the third was "inconclusive" before, and its gate failed where an equal file's passed). Exact
group-sequential boundaries would be less conservative; the union bound needs no
independence between looks and no normal approximation beyond the t-test's own.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from statistics import fmean

from colltune.core.stats import STALL_ALPHA, fisher_more, median, stalls

# in the order a summary lists them
VERDICTS = ("faster", "same", "not slower", "slower", "inconclusive")
VETO_LEAN = 0.10  # a veto cell this much slower, not yet significant, asks for more pairs


@dataclass(frozen=True)
class Design:
    """The error rates and the budget of one sequential comparison."""

    alpha: float = 0.05  # over the whole family: a same cell called slower (or faster)
    beta: float = 0.05  # per cell: a cell `threshold` or more slower called "same"
    threshold: float = 0.10  # a practical difference: 10% slower (or faster)
    min_gain: float = 0.03  # significant but smaller than this is not called different
    first: int = 4  # launch pairs before the first look; each later look doubles them
    max_pairs: int = 16  # budget per size
    # budget per size where the default stalls (at `stalling`; 0: max_pairs): where a
    # call takes 50 ms and a stall 200, one stall more or less moves a launch's mean by a
    # third and its median from one level to the other, and a loop stretch holds only a
    # handful of calls (alltoall of 1 MiB on the shaped nodes: pairwise 2x faster in every
    # mode, its loop cell still undecided after 8 pairs and shown faster after 16)
    stall_pairs: int = 0
    # those sizes: known before the first look, so the error is spent over that budget
    stalling: tuple[int, ...] = ()
    family: int = 0  # cells tested together (Bonferroni); 0: every cell of the run
    # cells that can only refuse (an application's first calls): slower there is slower;
    # otherwise they hold nothing back, as a size's other cells decide it
    veto: tuple[str, ...] = ()

    def spent(self, n: int, total: float) -> float:
        """Error spent by the look at `n` pairs, of `total` (Pocock-type spending)."""
        t = min(1.0, n / self.max_pairs)
        return total * math.log(1 + (math.e - 1) * t)

    def level(self, n_prev: int, n: int, total: float) -> float:
        return max(self.spent(n, total) - self.spent(n_prev, total), 1e-12)


@dataclass
class Cell:
    """One timing mode of one size at its latest look."""

    verdict: str  # faster | same | slower | undecided | inconclusive
    ratio: float  # rules / default, geometric mean over launch pairs (< 1: faster)
    lo: float  # the interval of the ratio at this look's beta level
    hi: float
    p_slower: float
    p_faster: float
    mde: float  # smallest slowdown (ratio) found with 80% power at this look's level
    pairs: int
    can_win: bool = True  # the interval still reaches a gain of min_gain (futility)
    veto: bool = False  # only its "slower" counts (Design.veto)


def _t() -> object:
    from scipy import stats

    return stats.t


def look(x: list[float], n_prev: int, d: Design) -> Cell:
    """Judge one cell's log ratios `x` at a look after `n_prev` pairs were judged before."""
    t = _t()
    n = len(x)
    mean = sum(x) / n
    ratio = math.exp(mean)
    if n < 2:
        return Cell("undecided", ratio, 0.0, math.inf, 1.0, 1.0, math.inf, n)
    a = d.level(n_prev, n, d.alpha / max(1, d.family))
    b = d.level(n_prev, n, d.beta)
    sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1))
    se = sd / math.sqrt(n)
    if se == 0:  # every pair gave the same ratio: the sign decides
        ps, pf = (0.0, 1.0) if mean > 0 else (1.0, 0.0) if mean < 0 else (1.0, 1.0)
        half = 0.0
    else:
        ps = float(t.sf(mean / se, n - 1))  # type: ignore[attr-defined]
        pf = float(t.cdf(mean / se, n - 1))  # type: ignore[attr-defined]
        half = float(t.ppf(1 - b, n - 1)) * se  # type: ignore[attr-defined]
    mde = math.exp((float(t.ppf(1 - a, n - 1)) + float(t.ppf(0.8, n - 1))) * se)  # type: ignore[attr-defined]
    bound = math.log(1 + d.threshold)
    if ps < a and ratio >= 1 / (1 - d.min_gain):
        verdict = "slower"
    elif pf < a and ratio <= 1 - d.min_gain:
        verdict = "faster"
    elif -bound < mean - half and mean + half < bound:
        verdict = "same"
    else:
        verdict = "undecided"
    return Cell(verdict, ratio, math.exp(mean - half), math.exp(mean + half), ps, pf, mde, n,
                mean - half < math.log(1 - d.min_gain))


def combine(cells: list[Cell], need_faster: bool = False) -> str:
    """A size's verdict from its timing modes: slower if any is; faster only if all are
    (a veto cell aside: it can only make a size slower).
    With `need_faster` (a tuner's choice must win everywhere) a size is also decided, as
    "same", as soon as one mode cannot be faster: "same", or its interval excludes a gain
    of min_gain (at the look's beta level: a real win is given up with probability <= beta)."""
    if any(c.verdict == "slower" for c in cells):
        return "slower"
    veto = [c for c in cells if c.veto]
    cells = [c for c in cells if not c.veto]
    vs = [c.verdict for c in cells]
    if need_faster and ("same" in vs or not all(c.can_win for c in cells)):
        return "same"
    if "undecided" in vs:
        return "undecided"
    # a veto cell that leans slower by a practical difference gets the size's remaining
    # pairs to show it (a slow start is noisy: one stretch a launch)
    if any(c.verdict == "undecided" and c.ratio > 1 + VETO_LEAN for c in veto):
        return "undecided"
    if vs and all(v == "faster" for v in vs):
        return "faster"
    return "inconclusive" if "inconclusive" in vs else "same"


@dataclass
class SizeResult:
    size: int
    verdict: str
    cells: dict[str, Cell]  # per timing mode ("samples" where the launch gives one figure)
    pairs: int
    default: list[list[float]] = field(default_factory=list)  # samples per launch
    tuned: list[list[float]] = field(default_factory=list)
    statistic: str = "median"  # what summed up each launch: "mean" where an arm stalls
    # with a WhereStalls: (default's stalled calls, of how many, tuned's, of how many), the
    # timing modes pooled, at the look that turned the size to means, else at its last
    stalled: tuple[int, int, int, int] | None = None
    logs: dict[str, list[float]] = field(default_factory=dict)  # per cell, per pair: judged
    # where the size's verdict came from the sizes sharing its choice (pooled): their cells
    pooled: dict[str, Cell] = field(default_factory=dict)
    pooled_sizes: int = 0

    @property
    def main(self) -> Cell:
        """The cell that decided: the slowest-looking one if any is slower, else the first."""
        cells = list(self.cells.values())
        return max(cells, key=lambda c: (c.verdict == "slower", c.ratio)) \
            if self.verdict == "slower" else cells[0]


# what a batch of launch pairs gives: per size, per cell, per arm, per launch, samples
Batch = dict[int, dict[str, dict[str, list[list[float]]]]]


@dataclass
class WhereStalls:
    """`means` for a gate that does not know where a tune judged by means: a size still
    undecided turns to launch means, from its first pair on, at the look where its arms'
    calls show one stalling significantly more often than the other (core/stats.py,
    STALL_ALPHA). The switch reads how often each arm stalls, not which is faster; under
    the null (the same configuration twice) it happens at a look with probability at most
    2 x STALL_ALPHA, which bounds what it adds to the gate's false alarms there. A size
    where an arm stalled, not yet significantly more often, is not called "same" by its
    medians before its budget ends. `found` fills with those sizes as it goes: the caller's
    measure() may give their later launches the calls a mean needs."""

    found: set[int] = field(default_factory=set)


def stall_counts(cells: dict[str, dict[str, list[list[float]]]]) -> tuple[int, int, int, int]:
    """One size's stalled calls in each arm (core/stats.stalls against the faster arm's
    median call in each mode), the launches and modes pooled: (default's stalled, of how
    many, tuned's stalled, of how many)."""
    k = {"default": 0, "tuned": 0}
    n = dict(k)
    for arms in cells.values():
        calls = {a: [x for launch in arms[a] for x in launch] for a in k}
        if not all(calls.values()):
            continue
        typical = min(median(v) for v in calls.values())
        for a, v in calls.items():
            k[a] += stalls(v, typical)
            n[a] += len(v)
    return k["default"], n["default"], k["tuned"], n["tuned"]


def stalls_differ(counts: tuple[int, int, int, int]) -> bool:
    """One arm stalls significantly more often than the other (either way)."""
    kd, nd, kt, nt = counts
    return min(fisher_more(kd, nd, kt, nt), fisher_more(kt, nt, kd, nd)) < STALL_ALPHA


def run(measure: Callable[[list[int], int, int], Batch], sizes: list[int], d: Design,
        need_faster: bool = False, deadline: float | None = None,
        note: Callable[[str], None] = lambda s: None,
        own: dict[int, Design] | None = None,
        means: Collection[int] | WhereStalls = ()) -> dict[int, SizeResult]:
    """Measure `sizes` in `d.first` launch pairs, then double the pairs of the sizes still
    undecided until each is decided, the per-size budget `d.max_pairs` is spent
    (`d.stall_pairs` at `d.stalling`), or the monotonic clock passes `deadline`.
    `measure(sizes, first_round, rounds)` runs launch pairs numbered from `first_round`
    (the order of the arms alternates with it).
    `own` gives sizes a design of their own (threshold, budget), judged without
    `need_faster`: a stand-in for the default need not win, only be shown inside its bound,
    so its pairs go on until they show that, or show it slower. A launch is summed up by
    its median, or at `means` by its mean (a choice made where the default stalls: every
    stall is paid, tuner/decide.py); with a WhereStalls, where the pairs so far show it."""
    mine = own or {}
    by_mean = set() if isinstance(means, WhereStalls) else set(means)
    stalled: dict[int, tuple[int, int, int, int]] = {}
    # every launch so far, per size, cell and arm: a size that turns to means at a later
    # look is summed up again from its first pair
    launches: dict[int, dict[str, dict[str, list[list[float]]]]] = {s: {} for s in sizes}
    cells: dict[int, dict[str, Cell]] = {s: {} for s in sizes}
    logs_of: dict[int, dict[str, list[float]]] = {s: {} for s in sizes}
    judged: dict[int, int] = dict.fromkeys(sizes, 0)
    open_sizes, done_round, rounds = list(sizes), 0, d.first

    # sizes where an arm stalled but not (yet) significantly more often than the other:
    # their medians may not call them "same" before the budget ends, as a mean that
    # differs could still show
    held: set[int] = set()

    def verdict(s: int) -> str:
        v = combine(list(cells[s].values()), need_faster and s not in mine)
        budget = ds[s].max_pairs
        return "undecided" if v == "same" and s in held and judged[s] < budget else v

    while open_sizes:
        batch = measure(open_sizes, done_round, rounds)
        done_round += rounds
        if d.family == 0:  # Bonferroni over every cell of the run
            per_size = max(len(batch[s]) for s in open_sizes)
            d = dataclasses.replace(d, family=max(1, per_size * len(sizes)))
            mine = {s: dataclasses.replace(o, family=o.family or d.family)
                    for s, o in mine.items()}
        ds = {s: _design(s, mine, d) for s in sizes}  # each size's, at this look
        for s in open_sizes:
            for key, arms in batch[s].items():
                got = launches[s].setdefault(key, {"default": [], "tuned": []})
                for arm in got:
                    got[arm].extend(arms[arm])
            if isinstance(means, WhereStalls) and s not in by_mean:
                counts = stalled[s] = stall_counts(launches[s])
                if stalls_differ(counts):
                    by_mean.add(s)
                    means.found.add(s)
                    note(f"{s} B: one arm stalls more often (default {counts[0]} of "
                         f"{counts[1]} calls, tuned {counts[2]} of {counts[3]}): "
                         "each launch summed up by its mean")
                held.discard(s)
                if s not in by_mean and (counts[0] or counts[2]):
                    held.add(s)
            summed = fmean if s in by_mean else median
            logs = logs_of[s] = {k: [math.log(summed(tl) / summed(dl))
                                     for tl, dl in zip(arms["tuned"], arms["default"],
                                                       strict=True)]
                                 for k, arms in launches[s].items()}
            cells[s] = {k: dataclasses.replace(look(xs, judged[s], ds[s]), veto=k in ds[s].veto)
                        for k, xs in logs.items()}
            judged[s] = len(next(iter(logs.values())))
        still = [s for s in open_sizes if verdict(s) == "undecided"]
        late = deadline is not None and time.monotonic() > deadline
        if still and late:
            note(f"time budget spent: {len(still)} size(s) undecided")
        open_sizes = [] if late else [s for s in still if judged[s] < ds[s].max_pairs]
        if open_sizes:
            # doubling: few looks, so the last one keeps a large share of alpha and beta
            # every open size has had every pair so far; none passes its own budget
            n = judged[open_sizes[0]]
            rounds = min(n, min(ds[s].max_pairs for s in open_sizes) - n)
            note(f"{len(open_sizes)} size(s) undecided after {n} launch pairs: {rounds} more")
    out = {}
    for s in sizes:
        for c in cells[s].values():
            if c.verdict == "undecided":
                c.verdict = "inconclusive"
        first = next(iter(launches[s].values()))
        # a held size whose time ran out is not "same"
        v = _ended(verdict(s), cells[s].values(), need_faster, ds[s])
        out[s] = SizeResult(s, v, cells[s],
                            judged[s], first["default"],
                            first["tuned"],
                            statistic="mean" if s in by_mean else "median",
                            stalled=stalled.get(s), logs=logs_of[s])
    return out


def _design(s: int, own: dict[int, Design], d: Design) -> Design:
    """Size `s`'s design: its own, else the run's, on the stalls' budget where the default
    stalls (the run's `stalling`)."""
    o = own.get(s, d)
    return dataclasses.replace(o, max_pairs=max(o.max_pairs, o.stall_pairs)) \
        if s in d.stalling and o.stall_pairs else o


def _ended(v: str, cells: Collection[Cell], need_faster: bool, d: Design) -> str:
    """A size's verdict when its pairs end: still undecided is inconclusive, and a gate's
    inconclusive size whose every mode's interval excludes the threshold's slowdown is
    not slower (a tuner's choice must still be faster)."""
    v = "inconclusive" if v == "undecided" else v
    return "not slower" if v == "inconclusive" and not need_faster and \
        not_slower(cells, d) else v


def not_slower(cells: Collection[Cell], d: Design) -> bool:
    """Every cell decided faster or same, or its interval (at its last look's beta level)
    below a slowdown of d.threshold: a size the threshold or more slower passes this with
    probability at most beta, as it is called "same"."""
    return all(c.verdict in ("faster", "same") or c.hi < 1 + d.threshold for c in cells)


def rules_judged(results: dict[int, SizeResult], sizes: list[int], d: Design) -> None:
    """`pooled` over each stretch of `sizes` (one choice, side by side) that no size ends:
    a size shown slower, or unable to win (same), is written as the library's own, so the
    rule stops there."""
    stretch: list[int] = []
    for s in [*sizes, None]:
        if s is not None and s in results and results[s].verdict in ("faster", "inconclusive"):
            stretch.append(s)
            continue
        pooled(results, stretch, d)
        stretch = []


def pooled(results: dict[int, SizeResult], sizes: list[int], d: Design) -> dict[str, Cell]:
    """Sizes side by side that share one choice (one rule of the file) judged together,
    where some of them stay inconclusive alone: per timing mode, each launch pair's log
    ratios averaged over the sizes it measured, tested once at alpha / 2 (the sizes' own
    looks spent alpha already: where no size of the run differs, one carried by the others
    is called faster with probability at most 1.5 alpha). The pairs are independent, so
    the test is valid however the sizes' noise is shared within a launch; what it shows is
    the rule's gain in the geometric mean over its sizes, not each size's: a size that
    gains nothing beside neighbours that do is held back only by its own pairs leaning
    the other way. Marks the inconclusive sizes the run carries
    (every mode faster together; each of their own modes leaning faster) and returns the
    pooled cells; nothing where a size of the run was shown slower or fewer than three
    sizes were judged."""
    run = [results[s] for s in sizes if s in results]
    if len(run) < 3 or any(r.verdict == "slower" for r in run) or \
            not any(r.verdict == "inconclusive" for r in run):
        return {}
    keys = set.intersection(*(set(r.logs) for r in run))
    once = dataclasses.replace(d, alpha=d.alpha / 2, family=1)
    cells: dict[str, Cell] = {}
    for k in sorted(keys):
        longest = max(len(r.logs[k]) for r in run)
        x = [fmean([r.logs[k][i] for r in run if len(r.logs[k]) > i]) for i in range(longest)]
        cells[k] = dataclasses.replace(look(x, 0, dataclasses.replace(once, max_pairs=len(x))),
                                       veto=k in d.veto)
    if not cells or any(c.verdict == "slower" for c in cells.values()) or \
            not all(c.verdict == "faster" for c in cells.values() if not c.veto):
        return cells
    for r in run:
        own = [c for k, c in r.cells.items() if k not in d.veto]
        if r.verdict == "inconclusive" and own and all(c.ratio < 1 for c in own):
            r.verdict, r.pooled, r.pooled_sizes = "faster", cells, len(run)
    return cells
