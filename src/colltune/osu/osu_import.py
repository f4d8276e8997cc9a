"""`tune import-osu`: OSU Micro-Benchmarks output files -> stored measurements, decisions
and rules, as if colltune had measured them (one file = one launch of one algorithm)."""

from __future__ import annotations

import json
import math
import re
import socket
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from colltune.backends import registry
from colltune.backends.base import write_file
from colltune.backends.openmpi import find_openmpi, read_catalog
from colltune.backends.openmpi_backend import choose_rules_version
from colltune.backends.tuned_rules import build_rules, load_merge_base
from colltune.collectives import COLLECTIVES, get_collective
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult
from colltune.core.stats import welch_t_less
from colltune.errors import ColltuneError, FormatError
from colltune.options import TuneOptions
from colltune.osu.osu_output import OsuRun
from colltune.osu.osu_output import read as read_osu
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import INT_MAX as MAX_NP
from colltune.store import Context, Store, default_db_path
from colltune.tuner.run import TuneResult, check_outputs, make_summary

# "reduce_alg3.txt", "osu_bcast.algorithm-6.out", "alg=2", "default.txt"
_ALG = re.compile(r"(?:^|[^a-z])alg(?:orithm)?[_=\-.]?(\d+)(?![0-9])", re.IGNORECASE)
_DEFAULT = re.compile(r"(?:^|[^a-z])default(?:[^a-z]|$)", re.IGNORECASE)
SINGLE_RUN_GAIN = 0.10  # one run per arm: no test possible, so ask for a clear margin


def algorithm_from_name(path: Path) -> int | None:
    m = _ALG.search(path.name)
    if m:
        return int(m[1])
    return 0 if _DEFAULT.search(path.name) else None


@dataclass
class Imported:
    run: OsuRun
    algorithm: int


def _decide_size(size: int, lookup: int, runs: dict[Config, list[float]], alpha: float,
                 min_gain: float) -> Decision:
    """Compare run averages: Welch's t on log averages with >= 2 runs per arm, else a
    clear single-run margin."""
    logs = {c: [math.log(x) for x in xs if x > 0] for c, xs in runs.items()}
    logs = {c: v for c, v in logs.items() if v}

    def gm(c: Config) -> float:
        return math.exp(sum(logs[c]) / len(logs[c]))

    if not logs:
        return Decision(size, lookup, DEFAULT, None, None, None, None, False,
                        reason="no usable OSU averages")
    best = min(logs, key=lambda c: (gm(c), c))
    if DEFAULT not in logs:
        return Decision(size, lookup, DEFAULT, best, gm(best), None, None, False,
                        n_best=len(logs[best]),
                        reason="no OSU run of the library default imported; kept")
    d, b = logs[DEFAULT], logs[best]
    if best == DEFAULT:
        return Decision(size, lookup, DEFAULT, DEFAULT, gm(best), gm(best), None, False,
                        len(b), len(d), reason="the default is the fastest")
    ratio = gm(best) / gm(DEFAULT)
    if len(b) >= 2 and len(d) >= 2:
        p = welch_t_less(b, d)
        win = p < alpha and ratio <= 1 - min_gain
        why = (f"faster over {len(b)} vs {len(d)} OSU runs (Welch p={p:.3g})" if win else
               f"no significant win over {len(b)} vs {len(d)} OSU runs: default kept")
    else:
        p = None
        win = ratio <= 1 - SINGLE_RUN_GAIN
        why = (f"one OSU run per arm: {1 / ratio:.2f}x by average; confirm with tune verify"
               if win else "one OSU run per arm and less than a 10% margin: default kept")
    return Decision(size, lookup, best if win else DEFAULT, best, gm(best), gm(DEFAULT), p, win,
                    len(b), len(d), reason=why)


def import_osu(paths: list[Path], np: int, algorithm: int | None = None,
               mpi_prefix: str | None = None, db: Path | None = None, out: Path | None = None,
               summary_json: Path | None = None, rules_version: int | None = None,
               alpha: float = 0.05, min_gain: float = 0.03, host: str | None = None
               ) -> TuneResult:
    """Store OSU runs, decide per size, write rules. `host`: the machine the runs were made
    on (default: this one; runs copied from a cluster name the cluster's node)."""
    if host is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}", host):
        raise ColltuneError(f"--host {host[:40]!r} is not a host name",
                            "letters, digits, '.', '-' and '_', as hostname prints it")
    if not 2 <= np <= MAX_NP:
        raise ColltuneError(f"--np {np}: a collective needs 2 to {MAX_NP} ranks",
                            "pass the number of ranks the OSU runs used")
    if not paths:
        raise ColltuneError("no OSU files given", "tune import-osu FILE... --np N")
    check_outputs(out, summary_json)
    mpi = find_openmpi(mpi_prefix)
    catalog = read_catalog(mpi)
    files: list[Imported] = []
    for p in paths:
        try:
            run = read_osu(p)
        except FormatError as e:
            raise ColltuneError(f"cannot import {e}", "fix or leave out that file") from None
        if run.collective not in COLLECTIVES:
            raise ColltuneError(f"{p}: colltune does not tune {run.collective} (Open MPI's "
                                "rules file has no entry it obeys for it)",
                                "leave that file out; tuned: " + ", ".join(sorted(COLLECTIVES)))
        alg = algorithm if algorithm is not None else algorithm_from_name(p)
        if alg is None:
            raise ColltuneError(f"{p}: cannot tell which algorithm this run used",
                                "put alg<N> or 'default' in the file name, or pass "
                                "--algorithm N")
        if alg and alg not in catalog.algorithms.get(run.collective, {}):
            raise ColltuneError(f"{p}: {run.collective} has no algorithm {alg} in "
                                f"{mpi.describe()}",
                                f"valid: {sorted(catalog.algorithms.get(run.collective, {}))}")
        files.append(Imported(run, alg))

    version = choose_rules_version(mpi, rules_version)
    # before the store is touched: a file that cannot be merged fails the import whole
    base = load_merge_base(out, catalog) if out else None
    store = Store(db or default_db_path())
    decisions: dict[str, dict[int, list[Decision]]] = {}
    points: list[tuple[Context, Config, PointResult]] = []
    try:
        by_coll: dict[str, dict[int, dict[Config, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list)))
        for f in files:
            for row in f.run.rows:
                by_coll[f.run.collective][row.size][Config(f.algorithm)].append(row.avg_us * 1e-6)
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        for name, per_size in by_coll.items():
            coll = get_collective(name)
            ctx = Context(mpi.key, mpi.name, mpi.version, str(mpi.prefix),
                          host or socket.gethostname(), np, np, 1, name, registry.of(mpi).name)
            for size, per_cfg in per_size.items():
                for cfg, xs in per_cfg.items():
                    ys = sorted(xs)
                    points.append((ctx, cfg, PointResult(
                        0, size, "ok", n=len(xs), median=ys[len(ys) // 2], ci_lo=ys[0],
                        ci_hi=ys[-1], mean=sum(xs) / len(xs), min=ys[0], max=ys[-1],
                        samples=xs, message=f"OSU run averages, imported {stamp}")))
            ds = [_decide_size(s, coll.lookup_size(s, np), per_size[s], alpha, min_gain)
                  for s in sorted(per_size)]
            decisions[name] = {np: ds}
        replaced = store.replace_imported(points, "osu")  # one transaction, all or nothing
        store.add_catalog(mpi.key, registry.of(mpi).name, catalog.algorithms)
    finally:
        store.close()
    rf = build_rules(base, version, decisions, mpi, catalog)
    opts = TuneOptions(sorted(decisions), [np], out=out)
    summary = make_summary(mpi, catalog, version, decisions, [], opts)
    summary["replaced_points"] = replaced  # of an earlier import: corrected data replaces
    if out is not None:
        write_file(out, rules.render(rf), "--out")
    if summary_json is not None:
        write_file(summary_json, json.dumps(summary, indent=2) + "\n", "--summary-json")
    return TuneResult(mpi, catalog, version, decisions, [], summary)
