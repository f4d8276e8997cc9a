"""`tune import-osu` and `tune import-imb`: another benchmark's runs (one file = one launch
of one algorithm) become stored measurements, decisions and the family's own file, written
by the family's session as if colltune had measured them."""

from __future__ import annotations

import json
import math
import re
import socket
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from colltune.backends import registry
from colltune.backends.base import write_file
from colltune.collectives import COLLECTIVES, get_collective
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult
from colltune.core.stats import welch_t_less
from colltune.errors import ColltuneError
from colltune.options import TuneOptions
from colltune.rules.ompi_classic import INT_MAX as MAX_NP
from colltune.store import Context, Store, default_db_path
from colltune.tuner.checks import check_outputs
from colltune.tuner.run import TuneResult, make_summary

# "reduce_alg3.txt", "osu_bcast.algorithm-6.out", "alg=2", "default.txt"
_ALG = re.compile(r"(?:^|[^a-z])alg(?:orithm)?[_=\-.]?(\d+)(?![0-9])", re.IGNORECASE)
_DEFAULT = re.compile(r"(?:^|[^a-z])default(?:[^a-z]|$)", re.IGNORECASE)
SINGLE_RUN_GAIN = 0.10  # one run per arm: no test possible, so ask for a clear margin


def algorithm_from_name(path: Path) -> int | None:
    m = _ALG.search(path.name)
    if m:
        return int(m[1])
    return 0 if _DEFAULT.search(path.name) else None


def file_algorithm(path: Path, algorithm: int | None) -> int:
    """The algorithm a file's run forced: --algorithm, else its name says."""
    alg = algorithm if algorithm is not None else algorithm_from_name(path)
    if alg is None:
        raise ColltuneError(f"{path}: cannot tell which algorithm this run used",
                            "put alg<N> or 'default' in the file name, or pass --algorithm N")
    return alg


@dataclass
class Run:
    """One benchmark launch of one collective under one algorithm (0: the default)."""

    path: Path
    collective: str
    avg_us: dict[int, float]  # size per rank -> the run's average time of a call
    algorithm: int


def _decide_size(size: int, lookup: int, runs: dict[Config, list[float]], alpha: float,
                 min_gain: float, source: str) -> Decision:
    """Compare run averages: Welch's t on log averages with >= 2 runs per arm, else a
    clear single-run margin."""
    logs = {c: [math.log(x) for x in xs if x > 0] for c, xs in runs.items()}
    logs = {c: v for c, v in logs.items() if v}

    def gm(c: Config) -> float:
        return math.exp(sum(logs[c]) / len(logs[c]))

    if not logs:
        return Decision(size, lookup, DEFAULT, None, None, None, None, False,
                        reason=f"no usable {source} averages")
    best = min(logs, key=lambda c: (gm(c), c))
    if DEFAULT not in logs:
        return Decision(size, lookup, DEFAULT, best, gm(best), None, None, False,
                        n_best=len(logs[best]),
                        reason=f"no {source} run of the library default imported; kept")
    d, b = logs[DEFAULT], logs[best]
    if best == DEFAULT:
        return Decision(size, lookup, DEFAULT, DEFAULT, gm(best), gm(best), None, False,
                        len(b), len(d), reason="the default is the fastest")
    ratio = gm(best) / gm(DEFAULT)
    if len(b) >= 2 and len(d) >= 2:
        p = welch_t_less(b, d)
        win = p < alpha and ratio <= 1 - min_gain
        why = (f"faster over {len(b)} vs {len(d)} {source} runs (Welch p={p:.3g})" if win
               else f"no significant win over {len(b)} vs {len(d)} {source} runs: default "
                    "kept")
    else:
        p = None
        win = ratio <= 1 - SINGLE_RUN_GAIN
        why = (f"one {source} run per arm: {1 / ratio:.2f}x by average; confirm with tune "
               "verify" if win else
               f"one {source} run per arm and less than a 10% margin: default kept")
    return Decision(size, lookup, best if win else DEFAULT, best, gm(best), gm(DEFAULT), p, win,
                    len(b), len(d), reason=why)


def import_runs(runs: list[Run], np: int, source: str, backend: str = "openmpi",  # noqa: PLR0913 (the API of `tune import-osu/-imb`, options by keyword)
                mpi_prefix: str | None = None, db: Path | None = None, out: Path | None = None,
                summary_json: Path | None = None, rules_version: int | None = None,
                alpha: float = 0.05, min_gain: float = 0.03, host: str | None = None,
                note: Callable[[str], None] = lambda s: None) -> TuneResult:
    """Store the runs (source: "osu", "imb"), decide per size, and let the family's session
    write its file. `host`: the machine the runs were made on (default: this one; runs
    copied from a cluster name the cluster's node)."""
    if host is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}", host):
        raise ColltuneError(f"--host {host[:40]!r} is not a host name",
                            "letters, digits, '.', '-' and '_', as hostname prints it")
    if not 2 <= np <= MAX_NP:
        raise ColltuneError(f"--np {np}: a collective needs 2 to {MAX_NP} ranks",
                            f"pass the number of ranks the {source.upper()} runs used")
    if not runs:
        raise ColltuneError("no runs given", f"tune import-{source} FILE... --np N")
    check_outputs(out, summary_json)
    colls = sorted({r.collective for r in runs})
    for r in runs:
        if r.collective not in COLLECTIVES:
            raise ColltuneError(f"{r.path}: colltune does not tune {r.collective}",
                                "leave that file out; tuned: " + ", ".join(sorted(COLLECTIVES)))
    opts = TuneOptions(colls, [np], out=out, mpi=mpi_prefix, backend=backend,
                       rules_version=rules_version, from_db=True)
    # the session reads the file being merged into: one that cannot be merged fails the
    # import before the store is touched
    sess = registry.named(backend).open(opts, colls, note)
    mpi, catalog = sess.mpi, sess.catalog
    [placement] = [p for p in sess.placements if p.np == np]
    for r in runs:
        if r.algorithm and r.algorithm not in catalog.algorithms.get(r.collective, {}):
            raise ColltuneError(f"{r.path}: {r.collective} has no algorithm {r.algorithm} in "
                                f"{mpi.describe()}",
                                f"valid: {sorted(catalog.algorithms.get(r.collective, {}))}")
    by_coll: dict[str, dict[int, dict[Config, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for r in runs:
        for size, us in r.avg_us.items():
            by_coll[r.collective][size][Config(r.algorithm)].append(us * 1e-6)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    ctxs = {name: Context(mpi.key, mpi.name, mpi.version, str(mpi.prefix),
                          host or socket.gethostname(), np, np, 1, name, sess.backend.name)
            for name in by_coll}
    points = [(ctxs[name], cfg, PointResult(
        0, size, "ok", n=len(xs), median=sorted(xs)[len(xs) // 2], ci_lo=min(xs),
        ci_hi=max(xs), mean=sum(xs) / len(xs), min=min(xs), max=max(xs), samples=xs,
        message=f"{source.upper()} run averages, imported {stamp}"))
        for name, per_size in by_coll.items() for size, per_cfg in per_size.items()
        for cfg, xs in per_cfg.items()]
    store = Store(db or default_db_path())
    decisions: dict[str, dict[int, list[Decision]]] = {}
    try:
        replaced = store.replace_source(points, source)  # one transaction, all or nothing
        store.add_catalog(mpi.key, sess.backend.name, catalog.algorithms)
        for name, per_size in by_coll.items():
            coll = get_collective(name)
            ds = [_decide_size(s, sess.backend.rule_size(coll, s, np), per_size[s], alpha,
                               min_gain,
                               source.upper()) for s in sorted(per_size)]
            ds = sess.decided(name, placement, ds, store.measurements(ctxs[name]), store,
                              ctxs[name])
            decisions[name] = {np: ds}
        decisions = sess.final(decisions)
        summary = make_summary(mpi, catalog, sess.rules_version, decisions, [], opts)
        summary["replaced_points"] = replaced  # of an earlier import: corrected data replaces
        sess.write(decisions, {}).into(summary)
    finally:
        store.close()
    if summary_json is not None:
        write_file(summary_json, json.dumps(summary, indent=2) + "\n", "--summary-json")
    return TuneResult(mpi, catalog, sess.rules_version, decisions, [], summary)
