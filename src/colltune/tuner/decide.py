"""Turn stored measurements into per-size decisions and a rules-file section."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from colltune.collectives import Collective
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.core.stats import (
    STALL_ALPHA,
    STALL_TEXT,
    Comparison,
    bootstrap_median_ci,
    compare,
    compare_means,
    fisher_more,
    median,
    stalls,
    stratified_compare,
    stratified_ratio,
)
from colltune.store import Measurement

# (collective, per-rank size, comm size) -> the size a family's rules compare
RuleSize = Callable[[Collective, int, int], int]


def _compare(candidate: list[float], baseline: list[float], alpha: float, min_gain: float,
             exact: bool) -> Comparison:
    """The rank test on measured samples; on deterministic (simulated) times a difference
    is real, so only the minimum gain applies."""
    if not exact:
        return compare(candidate, baseline, alpha, min_gain)
    cm, bm = median(candidate), median(baseline)
    win = cm <= bm * (1 - min_gain)
    return Comparison(cm, bm, 0.0 if win else 1.0, win)


def group_by_size(ms: list[Measurement]) -> dict[int, dict[Config, Measurement]]:
    """The stored points by size, then by configuration."""
    out: dict[int, dict[Config, Measurement]] = defaultdict(dict)
    for m in ms:
        out[m.size][m.config] = m
    return out


def _enough(points: dict[Config, Measurement], min_samples: int
            ) -> dict[Config, Measurement]:
    """The points a decision may choose from: the default, and every configuration with
    at least `min_samples` samples (a handful of fast calls is not a win, whatever the rank
    test's p says: chosen among many, the fastest few are the luckiest)."""
    return {c: m for c, m in points.items() if c == DEFAULT or len(m.samples) >= min_samples
            or m.status != "ok"}


def _short(points: dict[Config, Measurement], min_samples: int) -> str:
    """What a decision says of the configurations `_enough` left out ("": none)."""
    n = len(points) - len(_enough(points, min_samples))
    return f" ({n} configuration(s) with fewer than {min_samples} samples not chosen)" \
        if n else ""


def decide_size(size: int, lookup: int, points: dict[Config, Measurement], alpha: float,
                min_gain: float, exact: bool = False, min_samples: int = 1) -> Decision:
    d = _decide_size(size, lookup, _enough(points, min_samples), alpha, min_gain, exact)
    d.reason += _short(points, min_samples)
    d.simulated = exact
    for cfg, attr in ((d.best, "best_ci"), (DEFAULT, "default_ci")):
        m = points.get(cfg) if cfg is not None else None
        if m is not None and m.status == "ok" and m.samples:
            setattr(d, attr, bootstrap_median_ci(m.samples, resamples=1000, seed=size))
    return d


def _modes(m: Measurement) -> dict[str, list[float]]:
    """The series a decision must win in: every timing mode measured (older stores: the
    samples alone)."""
    return {k: v for k, v in m.series.items() if v} or {"isolated": m.samples}


def _worst_ratio(m: Measurement, default: Measurement) -> float:
    """The candidate's median over the default's, in the mode where it does worst; pooled
    from several launches, launch by launch (stats.stratified_ratio)."""
    if m.strata or default.strata:
        r = stratified_ratio(m.by_launch(), default.by_launch())
        return math.inf if r is None else r
    mine, base = _modes(m), _modes(default)
    shared = [k for k in mine if k in base and median(base[k]) > 0]
    if not shared:
        return median(m.samples) / median(default.samples) if median(default.samples) else 1.0
    return max(median(mine[k]) / median(base[k]) for k in shared)


def _stall_counts(m: Measurement, modes: list[str], typical: dict[str, float]
                  ) -> tuple[int, int]:
    """How many of `m`'s calls in `modes` stalled, and of how many."""
    ms = _modes(m)
    return (sum(stalls(ms[k], typical[k]) for k in modes), sum(len(ms[k]) for k in modes))


def _typical(ok: dict[Config, Measurement], modes: list[str]) -> dict[str, float]:
    """The size's typical call per timing mode: the fastest configuration's median."""
    return {k: min(median(_modes(m)[k]) for m in ok.values() if _modes(m).get(k))
            for k in modes}


def stall_suspects(points: dict[Config, Measurement]) -> dict[Config, tuple[float, float]]:
    """Where the default stalls (core/stats.stalls: on a healthy node it does not), the
    configurations that stall less often (the timing modes pooled), each with its share
    of stalled calls and its worst ratio of means to the default's over the modes: the
    candidates a decision by means looks at ({} where the default does not stall). No
    bar on the means yet: a few calls' mean is one stall away from another."""
    ok = {c: m for c, m in points.items() if m.status == "ok" and m.samples}
    default = ok.get(DEFAULT)
    if default is None or default.strata:
        return {}
    dm = _modes(default)
    typical = _typical(ok, list(dm))
    if not any(stalls(v, typical[k]) for k, v in dm.items()):
        return {}
    out: dict[Config, tuple[float, float]] = {}
    for c, m in ok.items():
        cm = _modes(m)
        shared = [k for k in cm if k in dm]
        if c == DEFAULT or m.strata or not shared:
            continue
        (kd, nd), (kc, nc) = (_stall_counts(default, shared, typical),
                              _stall_counts(m, shared, typical))
        if kc * nd < kd * nc:
            out[c] = (kc / nc, max(compare_means(cm[k], dm[k], 1.0, 0.0).speedup ** -1
                                   for k in shared))
    return out


def stall_power(points: dict[Config, Measurement], c: Config
                ) -> tuple[tuple[int, int], tuple[int, int], int | None]:
    """What the calls at a size could tell about `c` against the default: the default's
    stalls and calls, `c`'s, and the fewest of the default's stalls (in as many calls)
    that Fisher's test at STALL_ALPHA would tell from a `c` that never stalls (None: no
    count would, too few calls)."""
    ok = {k: m for k, m in points.items() if m.status == "ok" and m.samples}
    if DEFAULT not in ok or c not in ok:
        return (0, 0), (0, 0), None
    dm = _modes(ok[DEFAULT])
    shared = [k for k in _modes(ok[c]) if k in dm]
    typical = _typical(ok, shared)
    (kd, nd), (kc, nc) = (_stall_counts(ok[DEFAULT], shared, typical),
                          _stall_counts(ok[c], shared, typical))
    least = next((k for k in range(1, nd + 1) if fisher_more(k, nd, 0, nc) < STALL_ALPHA),
                 None)
    return (kd, nd), (kc, nc), least


def _by_mean(size: int, lookup: int, ok: dict[Config, Measurement], min_gain: float,
             suspects: dict[Config, tuple[float, float]]) -> Decision | None:
    """Where the default stalls (a congested link's retransmission timeouts: calls of
    250 ms among calls of 50, docs/methodology.md) its median hides what an application
    pays, which is every stall: of the configurations that stall significantly less often
    (`stall_suspects`, Fisher) and whose mean is lower by `min_gain` in every timing mode,
    the one with the lowest worst ratio is proposed by its mean. Proposed only: the
    sweep's calls at large sizes are too few for Welch's test on means (its p is
    reported), so fresh launch pairs judge it, by each launch's mean (tuner/confirm)."""
    default = ok[DEFAULT]
    dm = _modes(default)
    typical = _typical(ok, list(dm))

    def counts(c: Config) -> tuple[tuple[int, int], tuple[int, int]]:
        shared = [k for k in _modes(ok[c]) if k in dm]
        return (_stall_counts(default, shared, typical),
                _stall_counts(ok[c], shared, typical))

    ratios = {}
    # proposed by its mean: a candidate that stalls significantly less often than the
    # default (the modes pooled): with the calls tuner/stalls.py adds, a retransmission-
    # bound default is far below it, a passing burst in one point's few calls is not
    for c, (_, r) in suspects.items():
        (kd, nd), (kc, nc) = counts(c)
        if r <= 1 - min_gain and fisher_more(kd, nd, kc, nc) < STALL_ALPHA:
            ratios[c] = r
    if not ratios:
        return None
    best_cfg = min(ratios, key=lambda c: (ratios[c], c))
    bm = _modes(ok[best_cfg])
    first = next(k for k in bm if k in dm)
    cmp = compare_means(bm[first], dm[first], 1.0, min_gain)
    (kd, nd), (kc, nc) = counts(best_cfg)
    return Decision(
        size, lookup, best_cfg, best_cfg, cmp.candidate_median, cmp.baseline_median,
        cmp.p_value, False, ok[best_cfg].n, default.n, statistic="mean",
        reason=f"faster by its mean, {ratios[best_cfg]:.2f} of the default's in its worst "
               f"timing mode: the default stalled in {kd} of {nd} calls ({STALL_TEXT}, "
               f"the size's typical call the fastest's median), this configuration in {kc} "
               f"of {nc}; proposed "
               "for fresh launch pairs, which judge it by each launch's mean")


def _decide_size(size: int, lookup: int, points: dict[Config, Measurement], alpha: float,
                 min_gain: float, exact: bool) -> Decision:
    d = _by_median(size, lookup, points, alpha, min_gain, exact)
    ok = {c: m for c, m in points.items() if m.status == "ok" and m.samples}
    if exact or DEFAULT not in ok or ok[DEFAULT].strata:
        return d
    suspects = stall_suspects(ok)
    if d.chosen == DEFAULT:
        d = _by_mean(size, lookup, ok, min_gain, suspects) or d
    # whichever statistic chose, the pairs judging the choice here need more launches
    d.default_stalls = bool(suspects)
    return d


def _by_median(size: int, lookup: int, points: dict[Config, Measurement], alpha: float,
               min_gain: float, exact: bool) -> Decision:
    """The decision by medians: the typical call, as every size is judged first."""
    ok = {c: m for c, m in points.items() if m.status == "ok" and m.samples}
    default = ok.get(DEFAULT)
    if not ok:
        return Decision(size, lookup, DEFAULT, None, None, None, None, False,
                        reason="nothing measured successfully")
    if default is None:
        best_cfg = min(ok, key=lambda c: (median(ok[c].samples), c))
        return Decision(size, lookup, DEFAULT, best_cfg, median(ok[best_cfg].samples), None,
                        None, False, n_best=ok[best_cfg].n,
                        reason="the library default was not measured; kept")
    # the candidate whose worst timing mode is best: a win must hold isolated and back to
    # back (docs/methodology.md, "Timing modes")
    best_cfg = min(ok, key=lambda c: (_worst_ratio(ok[c], default), c))
    best = ok[best_cfg]
    if best_cfg == DEFAULT:
        first = min(ok, key=lambda c: (median(ok[c].samples), c))  # by the first mode alone
        if first == DEFAULT:
            return Decision(size, lookup, DEFAULT, DEFAULT, median(default.samples),
                            median(default.samples), None, False, default.n, default.n,
                            reason="the default is the fastest")
        fm, dm_ = _modes(ok[first]), _modes(default)
        ratios = ", ".join(f"{k} {median(fm[k]) / median(dm_[k]):.2f}" for k in sorted(fm)
                           if k in dm_)
        if ok[first].strata or default.strata:  # pooled launches: ranked launch by launch
            return Decision(size, lookup, DEFAULT, first, median(ok[first].samples),
                            median(default.samples), None, False, ok[first].n, default.n,
                            reason=f"no configuration is faster launch by launch (the "
                                   f"fastest by the pooled medians, {ratios} of the "
                                   f"default, is {_worst_ratio(ok[first], default):.2f} by "
                                   "its launches' ratios): default kept")
        return Decision(size, lookup, DEFAULT, first, median(ok[first].samples),
                        median(default.samples), None, False, ok[first].n, default.n,
                        reason=f"no configuration wins in every timing mode (the fastest "
                               f"isolated, of the default: {ratios}): default kept")
    launches = len(set(best.by_launch()) & set(default.by_launch()))
    if (best.strata or default.strata) and not exact:
        # pooled from several launches (tune online's runs): each launch ranked on its own
        cmp = stratified_compare(best.by_launch(), default.by_launch(), alpha, min_gain)
    else:
        cmp = _compare(best.samples, default.samples, alpha, min_gain, exact)
    significant, reason = cmp.significant, "significantly faster"
    if launches > 1:
        reason += f" (over {launches} launches, each ranked on its own)"
    if not significant:
        reason = "no significant win: default kept"
    bm, dm = _modes(best), _modes(default)
    for mode in (k for k in bm if k in dm and len(bm) > 1):
        c = _compare(bm[mode], dm[mode], alpha, min_gain, exact)
        if significant and not c.significant:
            significant = False
            reason = (f"no significant win {mode} ({c.candidate_median / c.baseline_median:.2f}"
                      " of the default): default kept")
    if significant and len(bm) > 1:
        reason = "significantly faster in every timing mode (" + ", ".join(sorted(bm)) + ")"
    return Decision(
        size, lookup, best_cfg if significant else DEFAULT, best_cfg, cmp.candidate_median,
        cmp.baseline_median, cmp.p_value, significant, best.n, default.n, reason=reason,
    )


def decide_overall(points_by_size: dict[int, dict[Config, Measurement]], alpha: float,
                   min_gain: float, lookup: int, exact: bool = False) -> Decision:
    """One decision for collectives whose rule lookup ignores the message size: the
    configuration with the best geometric-mean ratio to the default (in its worst timing
    mode), adopted only if it wins significantly at most sizes and loses significantly at
    none, in every timing mode."""
    ratios: dict[Config, list[float]] = defaultdict(list)
    for pts in points_by_size.values():
        d = pts.get(DEFAULT)
        if not d or d.status != "ok" or not d.samples or median(d.samples) <= 0:
            continue
        for c, m in pts.items():
            if m.status == "ok" and m.samples:
                ratios[c].append(_worst_ratio(m, d))
    nsizes = len(points_by_size)
    full = {c: r for c, r in ratios.items() if len(r) == nsizes}
    if DEFAULT not in full:
        return Decision(-1, lookup, DEFAULT, None, None, None, None, False,
                        reason="the library default was not measured at every size; kept")
    gm = {c: math.exp(sum(math.log(x) for x in r) / len(r)) for c, r in full.items()}
    best = min(gm, key=lambda c: (gm[c], c))
    if best == DEFAULT:
        return Decision(-1, lookup, DEFAULT, DEFAULT, 1.0, 1.0, None, False,
                        reason="the default is the fastest")
    wins = losses = 0
    worst_p = 0.0
    for pts in points_by_size.values():
        am, dm = _modes(pts[best]), _modes(pts[DEFAULT])
        shared = [k for k in am if k in dm]
        if not shared:  # one measured with modes, the other without: the samples
            am, dm, shared = {"": pts[best].samples}, {"": pts[DEFAULT].samples}, [""]
        cmps = [_compare(am[k], dm[k], alpha, min_gain, exact) for k in shared]
        wins += all(c.significant for c in cmps)
        worst_p = max([worst_p, *(c.p_value for c in cmps)])
        if any(_compare(dm[k], am[k], alpha, min_gain, exact).significant for k in shared):
            losses += 1
    adopt = wins * 2 > nsizes and losses == 0
    return Decision(
        -1, lookup, best if adopt else DEFAULT, best, gm[best], 1.0, worst_p, adopt,
        reason=(f"faster at {wins} of {nsizes} sizes (geometric mean ratio {gm[best]:.3f})"
                if adopt else
                f"wins at {wins}, losses at {losses} of {nsizes} sizes: default kept"),
        simulated=exact,
    )


def decide(coll: Collective, np: int, ms: list[Measurement], alpha: float = 0.01,
           min_gain: float = 0.03, exact: bool = False, rule_size: RuleSize | None = None,
           min_samples: int = 1) -> list[Decision]:
    """Per-size decisions; `exact` for deterministic (simulated) times; `rule_size`: what
    the family's rules compare (its Backend.rule_size; None: the per-rank size);
    `min_samples`: what a configuration needs at a size to be chosen."""
    by_size = group_by_size(ms)
    if not by_size:
        return []
    size_of = rule_size or (lambda c, size, n: size)
    if not coll.size_dependent:
        d = decide_overall({s: _enough(pts, min_samples) for s, pts in by_size.items()},
                           alpha, min_gain, size_of(coll, 0, np), exact)
        d.reason += next(filter(None, (_short(p, min_samples) for p in by_size.values())), "")
        return [d]
    return [decide_size(s, size_of(coll, s, np), by_size[s], alpha, min_gain, exact,
                        min_samples) for s in sorted(by_size)]
