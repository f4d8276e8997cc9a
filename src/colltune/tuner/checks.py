"""What a tune refuses before anything is found or launched: its options, timing
settings, outputs, and another family's options (stage 0 of tuner/run.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from colltune.backends import registry
from colltune.backends.base import Backend
from colltune.collectives import COLLECTIVES, DATATYPES, get_collective, tunable_size
from colltune.errors import ColltuneError
from colltune.kernel.launch import OBJECTIVES, TIMINGS, Repetitions
from colltune.options import FAMILY_OPTIONS, TuneOptions
from colltune.outfile import ensure_writable
from colltune.tuner import forecast
from colltune.tuner.strategies import STRATEGIES


def _expand(names: list[str], within: tuple[str, ...] | None = None) -> list[str]:
    """The collectives named, "all" standing for every one (`within`: every one the family
    tunes)."""
    out: list[str] = []
    for n in names:
        if n == "all":
            out += [c for c in sorted(COLLECTIVES) if within is None or c in within]
        else:
            out.append(get_collective(n).name)
    return list(dict.fromkeys(out))


def check_repetitions(st: Repetitions) -> None:
    """Refuse timing settings the kernel cannot run (tune and verify)."""
    for ok, msg, hint in (
        (st.timing in TIMINGS, f"unknown --timing {st.timing}",
         "use " + ", ".join(TIMINGS) + " (both: a win must hold in each)"),
        (st.objective in OBJECTIVES, f"unknown --objective {st.objective}",
         "use " + ", ".join(OBJECTIVES)),
        (1 <= st.window <= 100_000, "--window must be between 1 and 100000 calls",
         "e.g. --window 64"),
        # below 1 it would stop configurations as fast as the default: they could win
        (st.cutoff == 0 or st.cutoff >= 1, f"--cutoff {st.cutoff} would stop configurations "
         "that are not slower than the default", "use 0 (off) or a factor of 1 or more"),
    ):
        if not ok:
            raise ColltuneError(msg, hint)


def check_options(opts: TuneOptions) -> None:
    """Refuse impossible settings before anything is launched."""
    st = opts.settings
    check_repetitions(st)
    checks = [
        (st.timeout > 0, "--timeout must be more than 0 seconds", "e.g. --timeout 60"),
        (st.point_time > 0, "--point-time must be more than 0 seconds", "e.g. --point-time 0.25"),
        (0 < st.rel_ci < 1, "--rel-ci must be between 0 and 1", "e.g. --rel-ci 0.05"),
        (1 <= st.min_reps <= st.max_reps, "need 1 <= --min-reps <= --max-reps",
         "e.g. --min-reps 7 --max-reps 400"),
        (st.max_reps <= 1_000_000, "--max-reps above 1000000", "e.g. --max-reps 400"),
        (st.warmup >= 0, "warm-up repetitions cannot be negative", "use 0 or more"),
        (0 <= st.seed < 2**63, "--seed must be a non-negative 64-bit number", "e.g. --seed 1"),
        (0 <= opts.confirm_rounds <= 1000, "--confirm-rounds must be between 0 and 1000",
         "e.g. --confirm-rounds 4, or 0 to skip confirmation"),
        ((opts.confirm_max_rounds or 0) <= 1000, "--confirm-max-rounds must be at most 1000",
         "e.g. --confirm-max-rounds 8"),
        (0 <= opts.start_calls <= 10**9, "--start-calls must be between 0 and 1e9",
         "e.g. --start-calls 1000, or 0 to judge warm calls only"),
        (opts.budget is None or opts.budget > 0, "--budget must be more than 0",
         "e.g. --budget 60, or leave it out to let the search decide when to stop"),
        (opts.budget is None or opts.strategy in ("race", "bayes"),
         "--budget needs --strategy race or bayes",
         "the grid measures every point; add --strategy bayes"),
        (opts.ei_stop >= 0, "--ei-stop cannot be negative", "e.g. --ei-stop 0.0005"),
        (opts.top_k >= 1, "--top-k must be at least 1", "e.g. --top-k 3"),
        (opts.sizes != [], "--sizes names no size", "e.g. --sizes 8,1K,1M"),
        (opts.segsizes != [], "--segsizes names no size", "e.g. --segsizes 0,4K"),
        (all(tunable_size(s) for s in opts.sizes or [1]), "sizes must be 1 B to 2 GiB",
         "e.g. --sizes 8,1K,1M"),
        (all(0 <= s <= 1 << 31 for s in opts.segsizes or [0]),
         "segment sizes must be 0 (none) to 2 GiB", "e.g. --segsizes 0,4K,32K"),
        (all(opts.params.values()), "--param names no value", "e.g. --param radix=0,2,4"),
        (all(0 <= v <= 1 << 31 for vs in opts.params.values() for v in vs),
         "--param values must be 0 (the library's own) to 2 GiB", "e.g. --param chunk=0,4K"),
    ]
    for ok, what, hint in checks:
        if not ok:
            raise ColltuneError(what, hint)


def refuse_options(opts: TuneOptions) -> list[str]:
    """Stage 0: refuse what cannot run, before anything is found or launched; returns the
    collectives named."""
    check_options(opts)
    for value, known, what in ((opts.boundaries, ("measure", "midpoint"), "--boundaries"),
                               (opts.beyond, ("extend", "library"), "--beyond"),
                               (opts.between, ("rule", "measure"), "--between"),
                               (opts.strategy, tuple(STRATEGIES), "--strategy"),
                               (opts.sweep, ("mpit", "relaunch", "bands"), "--sweep")):
        if value not in known:
            raise ColltuneError(f"unknown {what} '{value}'",
                                f"use {what} " + ", ".join(known))
    colls = _expand(opts.collectives, registry.named(
        opts.backend, han=opts.tune_han, ucc=opts.tune_ucc).collectives)
    if not opts.nps:
        raise ColltuneError("no communicator size given", "pass --np N (or N,M,...)")
    if opts.layouts and (opts.comm_sizes or opts.predict or opts.tune_han):
        raise ColltuneError("--layouts measures each layout in a launch of its own: without "
                            "--comm-sizes, --predict or --tune-han",
                            "tune those apart, e.g. --np 4 --comm-sizes 2,4")
    if opts.settings.arrival and (opts.predict or opts.strategy == "model"):
        raise ColltuneError("a replayed arrival pattern and the cost models: the models "
                            "are fitted on ranks entering together",
                            "tune with the pattern by measuring (--strategy grid, race or "
                            "bayes), or without it (--arrival off)")
    if opts.comm_sizes and (len(opts.nps) != 1 or opts.predict or opts.tune_han):
        raise ColltuneError(
            "--comm-sizes measures inside one launch: give one --np (the launch), without "
            "--predict or --tune-han", "e.g. --np 512 --comm-sizes 2:512")
    if opts.between == "measure" and (opts.comm_sizes or opts.predict or opts.from_db):
        raise ColltuneError(
            "--between measure adds communicator sizes in launches of their own: not with "
            "--comm-sizes, --predict or --from-db", "name every size to measure in "
            "--comm-sizes or --np, and measure at each without --predict or --from-db")
    _refuse_datatype(opts, colls)
    check_outputs(opts.out, opts.summary_json)
    forecast.launch_cost(opts)  # a --launch-cost that says no seconds: refused now
    return colls


def _refuse_datatype(opts: TuneOptions, colls: list[str]) -> None:
    """--datatype: one the kernel sums, for a reduction, measured (the cost models are
    fitted on doubles)."""
    dt = opts.settings.datatype
    if dt not in DATATYPES:
        raise ColltuneError(f"unknown --datatype '{dt}'",
                            "use --datatype " + ", ".join(DATATYPES))
    if dt == "double":
        return
    if not any(COLLECTIVES[c].reduction for c in colls):
        raise ColltuneError(f"--datatype {dt}: {', '.join(colls)} sums nothing (a reduction "
                            "sums its datatype; the others move bytes)",
                            "leave --datatype out, or tune a reduction (reduce, allreduce, "
                            "reduce_scatter, ...)")
    if opts.predict or opts.strategy == "model":
        raise ColltuneError(f"--datatype {dt} and the cost models: they are fitted on "
                            "doubles", "tune it by measuring (--strategy grid, race or "
                            "bayes), without --predict")


def refuse_foreign(opts: TuneOptions, backend: Backend[Any]) -> None:
    """Another family's own option, set: refused, naming the families that take it."""
    for field, flag in FAMILY_OPTIONS.items():
        if getattr(opts, field) not in (None, False) and field not in backend.options:
            takers = registry.taking(field)
            raise ColltuneError(f"{flag} does not apply to --backend {backend.name}",
                                f"it is {' and '.join(takers)}'s" if takers else
                                "no family takes it")


def check_outputs(out: Path | None, summary_json: Path | None) -> None:
    """Fail before measuring if the rules file or the summary could not be written."""
    for path, option in ((out, "--out"), (summary_json, "--summary-json")):
        if path is not None:
            ensure_writable(path, option)
