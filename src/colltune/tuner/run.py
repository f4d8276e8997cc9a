"""The tuning pipeline as a Python API: plan -> measure -> store -> decide -> write."""

from __future__ import annotations

import json
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from colltune import __version__
from colltune.backends import Installation, waiting_cause
from colltune.backends import han as han_backend
from colltune.backends import mpich as mpich_backend
from colltune.backends import mvapich2 as mv2_backend
from colltune.backends import smpi as smpi_backend
from colltune.backends.openmpi import (
    OpenMPI,
    find_openmpi,
    han_excluded,
    read_catalog,
    supports_rules_v2,
)
from colltune.collectives import COLLECTIVES, Collective, get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult
from colltune.errors import ColltuneError
from colltune.host import cores
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import OBJECTIVES, TIMINGS, Repetitions
from colltune.launchers import Launch
from colltune.outfile import ensure_writable, write_atomic
from colltune.rules import mpich_csel, mvapich2
from colltune.rules import ompi_classic as rules
from colltune.slots import Placement, place
from colltune.store import Context, Store, default_db_path
from colltune.tuner import artifacts, han_rules, mpich_rules, mvapich2_rules
from colltune.tuner.bayes import BayesOutcome, BayesSettings
from colltune.tuner.confirm import ab_runs, judge
from colltune.tuner.decide import decide, section
from colltune.tuner.live import search, store_measure
from colltune.tuner.measure import (
    MeasureSettings,
    Reporter,
    context_for,
    measure,
    mpit_takes_effect,
)
from colltune.tuner.race import RaceOutcome, RaceSettings
from colltune.tuner.space import configurations, sizes_for, useful_at


@dataclass
class TuneOptions:
    collectives: list[str]
    nps: list[int]
    out: Path | None = None
    mpi: str | None = None
    db: Path | None = None
    sizes: list[int] | None = None
    segsizes: list[int] | None = None
    max_requests: list[int] | None = None
    strategy: str = "grid"  # grid | race | bayes
    budget: int | None = None  # bayes: measured points; race: repetitions
    ei_stop: float = 0.0005  # bayes stops when no point is expected to gain more (log ratio)
    top_k: int = 3  # model: configurations measured per size besides the default
    predict: bool = False  # write rules for `nps` from models fitted at `fit_nps`
    fit_nps: list[int] = field(default_factory=lambda: [2, 3, 4])
    sweep: str = "mpit"
    backend: str = "openmpi"  # openmpi | smpi | mpich | mvapich2
    for_np: int | None = None  # mvapich2: the comm size whose decisions the profile holds
    platform: Path | None = None  # smpi: the SimGrid platform file to simulate
    tune_han: bool = False  # Open MPI 5 across nodes: coll/han's choices, han's rules file
    rules_version: int | None = None
    from_db: bool = False
    hostfile: str | None = None
    launch: Launch | None = None  # --launcher, --nodes, --ppn, --launcher-args
    summary_json: Path | None = None
    alpha: float = 0.01
    min_gain: float = 0.03
    confirm_rounds: int = 4  # fresh launch pairs that must confirm each win; 0: skip
    confirm_alpha: float = 0.05  # paired t-test over those launch pairs
    settings: MeasureSettings = field(default_factory=MeasureSettings)


@dataclass
class TuneResult:
    mpi: Installation
    catalog: Catalog
    rules_version: int
    decisions: dict[str, dict[int, list[Decision]]]
    rules_file: rules.RulesFile | None
    failures: list[str]
    summary: dict[str, object]


def _expand(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if n == "all":
            out += sorted(COLLECTIVES)
        else:
            out.append(get_collective(n).name)
    return list(dict.fromkeys(out))


def load_merge_base(path: Path, mpi: Installation, catalog: Catalog) -> rules.RulesFile | None:
    """The existing rules file to merge into; a malformed one stops the run untouched."""
    if not path.exists():
        return None
    try:
        return rules.read(path, valid_algs=valid_algorithms(catalog))
    except rules.RulesError as e:
        raise ColltuneError(f"will not merge into {e}",
                            "fix or move that file, or choose another --out; it was not "
                            "changed") from None


def valid_algorithms(catalog: Catalog) -> Callable[[int], set[int]]:
    """For `rules.parse`: the algorithm ids this installation accepts, per collective id."""
    from colltune.collectives import COLLECTIVE_BY_ID

    def valid(coll_id: int) -> set[int]:
        c = COLLECTIVE_BY_ID.get(coll_id)
        return set(catalog.algorithms.get(c.name, {})) if c else set()

    return valid


def choose_rules_version(mpi: OpenMPI, requested: int | None) -> int:
    v2 = supports_rules_v2(mpi.version_tuple)
    if requested is None:
        return 2 if v2 else 1
    if requested == 2 and not v2:
        raise ColltuneError(f"Open MPI {mpi.version} does not read rule-file-version-2",
                            "use --rules-version 1 (needs 4.1.8+ or 5.0.7+ for version 2)")
    return requested


def check_repetitions(st: Repetitions) -> None:
    """Refuse timing settings the kernel cannot run (tune and verify)."""
    for ok, msg, hint in (
        (st.timing in TIMINGS, f"unknown --timing {st.timing}",
         "use " + ", ".join(TIMINGS) + " (both: a win must hold in each)"),
        (st.objective in OBJECTIVES, f"unknown --objective {st.objective}",
         "use " + ", ".join(OBJECTIVES)),
        (1 <= st.window <= 100_000, "--window must be between 1 and 100000 calls",
         "e.g. --window 64"),
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
        (opts.rules_version in (None, 1, 2), f"unknown --rules-version {opts.rules_version}",
         "use 1 (classic) or 2 (rule-file-version-2)"),
        (opts.budget is None or opts.budget > 0, "--budget must be more than 0",
         "e.g. --budget 60, or leave it out to let the search decide when to stop"),
        (opts.budget is None or opts.strategy in ("race", "bayes"),
         "--budget needs --strategy race or bayes",
         "the grid measures every point; add --strategy bayes"),
        (opts.ei_stop >= 0, "--ei-stop cannot be negative", "e.g. --ei-stop 0.0005"),
        (opts.top_k >= 1, "--top-k must be at least 1", "e.g. --top-k 3"),
        (opts.sizes != [], "--sizes names no size", "e.g. --sizes 8,1K,1M"),
        (opts.segsizes != [], "--segsizes names no size", "e.g. --segsizes 0,4K"),
        (all(0 < s <= 1 << 31 for s in opts.sizes or [1]), "sizes must be 1 B to 2 GiB",
         "e.g. --sizes 8,1K,1M"),
        (all(0 <= s <= 1 << 31 for s in opts.segsizes or [0]),
         "segment sizes must be 0 (none) to 2 GiB", "e.g. --segsizes 0,4K,32K"),
    ]
    for ok, what, hint in checks:
        if not ok:
            raise ColltuneError(what, hint)


def tune(opts: TuneOptions, reporter: Reporter | None = None) -> TuneResult:
    rep = reporter or Reporter()
    check_options(opts)
    if opts.strategy not in STRATEGIES:
        raise ColltuneError(f"unknown strategy '{opts.strategy}'",
                            "use --strategy " + ", ".join(STRATEGIES))
    if opts.sweep not in ("mpit", "relaunch"):
        raise ColltuneError(f"unknown sweep '{opts.sweep}'", "use --sweep mpit or relaunch")
    colls = _expand(opts.collectives)
    if not opts.nps:
        raise ColltuneError("no communicator size given", "pass --np N (or N,M,...)")
    check_outputs(opts.out, opts.summary_json)
    predicted: dict[tuple[str, int], str] = {}
    mpi: Installation
    if opts.backend == "smpi":
        mpi, catalog, version = _smpi_setup(opts)
        placements = [smpi_backend.place(mpi, np, opts.launch) for np in opts.nps]
    elif opts.backend == "openmpi":
        # with --predict, what is measured is fit_nps; nps are only predicted
        placements = [place(np, opts.hostfile, launch=opts.launch)
                      for np in (opts.fit_nps if opts.predict else opts.nps)]
        mpi = find_openmpi(opts.mpi)
        if opts.tune_han:
            mpi, catalog = _han_setup(opts, mpi, placements, colls)
            version = 1  # not used: han's file is written instead
        else:
            catalog = read_catalog(mpi)
            version = choose_rules_version(mpi, opts.rules_version)
    elif opts.backend == "mpich":
        launch = opts.launch or Launch()
        launch = replace(launch, launcher=launch.launcher or "mpiexec")
        placements = [place(np, opts.hostfile, launch=launch) for np in opts.nps]
        mpi, catalog = _mpich_setup(opts, colls)
        version = 1  # not used: MPICH's tuning file is written instead
    elif opts.backend == "mvapich2":
        launch = opts.launch or Launch()
        launch = replace(launch, launcher=launch.launcher or "mpiexec")
        placements = [place(np, opts.hostfile, launch=launch) for np in opts.nps]
        mpi, catalog = _mvapich2_setup(opts, colls)
        version = 1  # not used: the MVAPICH2 profile is written instead
    else:
        raise ColltuneError(f"unknown backend '{opts.backend}'",
                            "use --backend openmpi, mpich, mvapich2 or smpi")
    rep.note(f"tuning {mpi.describe()}")
    exact = isinstance(mpi, smpi_backend.SMPI)
    han = isinstance(mpi, OpenMPI) and mpi.han
    is_mpich = isinstance(mpi, mpich_backend.MPICH)
    is_mv2 = isinstance(mpi, mv2_backend.MVAPICH2)
    base = load_merge_base(opts.out, mpi, catalog) if opts.out and not (
        han or is_mpich or is_mv2) else None
    if base and base.version == 1 and version == 2:
        base.version = 2
    elif base and base.version == 2 and version == 1:
        raise ColltuneError(f"{opts.out} is a rule-file-version-2 file, Open MPI {mpi.version} "
                            "reads only the classic format", "choose another --out")
    store = Store(opts.db or default_db_path())
    # neither SMPI, han's variables nor MVAPICH2's are written through MPI_T: a launch per
    # choice
    sweep = "relaunch" if exact or han or is_mv2 else opts.sweep
    counters: dict[str, dict[int, mvapich2_rules.Counters]] = {}
    failures: list[str] = []
    searches: dict[str, dict[str, object]] = {}
    han_modules: dict[str, tuple[int, int]] = {}
    han_notes: dict[str, list[str]] = {}
    try:
        if not opts.from_db:
            for w in {p.warning for p in placements if p.warning}:
                rep.note(f"warning: {w}")
            if isinstance(mpi, OpenMPI) and han_excluded(mpi) and any(
                    p.nodes > 1 or p.hostfile for p in placements):
                rep.note(HAN_NOTE)
            build_kernel(mpi, on_rebuild=rep.note)  # before any launch, so a rebuild is told
            if sweep == "mpit" and isinstance(mpi, OpenMPI):
                verified = mpit_takes_effect(mpi, catalog)
                if verified is False:
                    rep.note("warning: an algorithm written through MPI_T did not change what "
                             "this Open MPI ran; relaunching per configuration instead")
                    sweep = "relaunch"
                elif verified is None:
                    rep.note("note: pml monitoring unavailable; trusting MPI_T read-back")
            for placement in placements:
                for name in colls:
                    search_one(opts, mpi, catalog, version, get_collective(name), placement,
                               store, sweep, rep, failures, searches)
        decisions: dict[str, dict[int, list[Decision]]] = {}
        if opts.predict:
            for name in colls:
                coll = get_collective(name)
                for np, (ds, text) in predict_decisions(store, mpi, catalog, coll, placements,
                                                        opts.nps, opts.sizes).items():
                    decisions.setdefault(name, {})[np] = ds
                    predicted[(name, np)] = text
                    rep.note(f"{name} np={np}: {text}")
        for placement in placements if not opts.predict else []:
            for name in colls:
                coll = get_collective(name)
                ms = store.measurements(context_for(mpi, coll, placement))
                if not ms:
                    if opts.from_db:
                        raise ColltuneError(
                            f"no stored measurements of {name} at np={placement.np} for "
                            f"{mpi.describe()} on {socket.gethostname()}",
                            "run without --from-db to measure first, or pass the --db used")
                    continue
                ds = decide(coll, placement.np, ms, opts.alpha, opts.min_gain, exact)
                artifacts.flag(ds, placement.ppn, None if placement.hostfile or
                               placement.nodes > 1 else cores(), waiting_cause(mpi.name))
                if is_mv2:  # what MVAPICH2 said it ran, for ranges where its default stays
                    counters.setdefault(name, {})[placement.np] = store.counters(
                        context_for(mpi, coll, placement))
                if han:
                    assert isinstance(catalog, han_backend.HanCatalog)
                    pair, notes = han_rules.choose_modules(name, catalog, ds, ms, opts.min_gain)
                    ds = han_rules.apply_modules(name, catalog, ds, pair)
                    han_modules[name], han_notes[name] = pair, notes
                if not exact:  # simulated times need no fresh launches
                    confirm_decisions(ds, coll, placement, store, mpi, version, opts, rep,
                                      catalog, counters.get(name, {}).get(placement.np))
                if han and han_modules[name] != (0, 0):
                    assert isinstance(catalog, han_backend.HanCatalog)
                    # the modules apply to every size on han's default algorithm: a size
                    # where fresh launches refuted them means they are not set at all
                    ds, note = han_rules.keep_confirmed_modules(name, catalog, ds,
                                                                han_modules[name])
                    if note:
                        han_modules[name] = (0, 0)
                        han_notes[name].append(note)
                ctx = context_for(mpi, coll, placement)
                for d in ds:
                    store.add_decision(ctx, d.size, d.chosen.key, d.verdict,
                                       d.as_json(catalog, name))
                decisions.setdefault(name, {})[placement.np] = ds
    finally:
        store.close()
    if han:
        return write_han_outputs(mpi, catalog, decisions, failures, opts, searches,
                                 han_modules, han_notes)
    if is_mpich:
        assert isinstance(mpi, mpich_backend.MPICH)
        assert isinstance(catalog, mpich_backend.MPICHCatalog)
        return write_mpich_outputs(mpi, catalog, decisions, failures, opts, searches)
    if is_mv2:
        assert isinstance(mpi, mv2_backend.MVAPICH2)
        assert isinstance(catalog, mv2_backend.MV2Catalog)
        return write_mvapich2_outputs(mpi, catalog, decisions, counters, failures, opts,
                                      searches)
    if exact:
        decisions = smpi_rule_configs(decisions)
    rf = build_rules(base, version, decisions, mpi, catalog, predicted)
    summary = make_summary(mpi, catalog, version, decisions, failures, opts, searches)
    summary["predicted"] = {f"{n} np={np}": text for (n, np), text in predicted.items()}
    summary["coll_han_excluded"] = isinstance(mpi, OpenMPI) and han_excluded(mpi)
    if isinstance(mpi, smpi_backend.SMPI):
        summary["simulated"] = {"platform": str(mpi.platform), "deterministic": True}
    write_outputs(rf, summary, opts.out, opts.summary_json)
    return TuneResult(mpi, catalog, version, decisions, rf, failures, summary)


def _han_setup(opts: TuneOptions, mpi: OpenMPI, placements: list[Placement],
               colls: list[str]) -> tuple[OpenMPI, han_backend.HanCatalog]:
    """The installation with coll/han left on, and han's choices as the catalog. Refused
    where han does not run: before Open MPI 5, on one node, for collectives it leaves to
    coll/tuned."""
    if mpi.version_tuple < (5,):
        raise ColltuneError(f"--tune-han needs Open MPI 5 or later; {mpi.describe()} has no "
                            "coll/han", "use --mpi with an Open MPI 5 installation")
    if opts.predict or opts.strategy == "model":
        raise ColltuneError("--predict and --strategy model tune coll/tuned's algorithms, "
                            "not coll/han's choices", "use --strategy grid, race or bayes")
    if len(opts.nps) > 1:
        raise ColltuneError("--tune-han tunes one communicator size per run: han's level "
                            "modules are one setting per collective, whatever the size",
                            "run once per --np with the same --out: the files merge (the "
                            "modules come from the last run of each collective)")
    single = [p.np for p in placements if p.nodes < 2]
    if single:
        raise ColltuneError(f"coll/han steps aside on one node: np={single[0]} runs on one "
                            "node", "give a --hostfile (or a Slurm allocation) spanning "
                            "several nodes, with --ppn")
    others = [c for c in colls if c not in han_backend.COLLECTIVES]
    if others:
        raise ColltuneError(f"coll/han does not run {', '.join(others)} itself",
                            "han runs " + ", ".join(han_backend.COLLECTIVES))
    algorithms = han_backend.read_algorithms(mpi)
    if not algorithms:
        raise ColltuneError(f"ompi_info of {mpi.describe()} lists no coll/han algorithms",
                            "check that this Open MPI was built with coll/han")
    return replace(mpi, han=True), han_backend.catalog(algorithms)


def write_han_outputs(mpi: Installation, catalog: Catalog,
                      decisions: dict[str, dict[int, list[Decision]]], failures: list[str],
                      opts: TuneOptions, searches: dict[str, dict[str, object]],
                      modules: dict[str, tuple[int, int]], notes: dict[str, list[str]]
                      ) -> TuneResult:
    """han's rules file at --out and, beside it, the MCA parameter file that turns it on
    and sets the collectives' level modules."""
    assert isinstance(catalog, han_backend.HanCatalog)
    frag = han_backend.fragment_path(opts.out) if opts.out else None
    # an existing file keeps the collectives and communicator sizes not tuned now
    rules_map: han_backend.HanRules = {}
    if opts.out and opts.out.exists():
        try:
            rules_map = han_backend.parse(opts.out.read_text())
        except (OSError, han_backend.HanRulesError) as e:
            raise ColltuneError(f"will not merge into {opts.out}: {e}",
                                "fix or move that file, or choose another --out; it was not "
                                "changed") from None
        if frag and frag.exists():
            modules = {**han_backend.fragment_modules(frag.read_text()), **modules}
    for name, per_np in decisions.items():
        rules_map.setdefault(name, {}).update(han_rules.han_rules(name, catalog, per_np)[name])
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    comments = [f"Open MPI coll/han dynamic rules written by colltune {__version__}",
                f"tuned on {socket.gethostname()} with {mpi.name} {mpi.version} "
                f"({mpi.prefix}), {stamp}",
                "use: mpirun --mca mca_base_param_files FRAGMENT ... (the -mca-params.conf "
                "file written beside this one)",
                "message sizes are the per-rank block in bytes; the first communicator "
                "size of a collective reads as 1 (han's format)"]
    for name, per_np in decisions.items():
        for np, ds in sorted(per_np.items()):
            for d in sorted(ds, key=lambda d: d.size):
                comments.append(f"{name} np={np} {d.size} B: {d.chosen.label(catalog, name)}; "
                                f"{d.verdict}")
    comments += [n for ns in notes.values() for n in ns]
    summary = make_summary(mpi, catalog, 0, decisions, failures, opts, searches)
    summary["han"] = {"rules_file": str(opts.out) if opts.out else None,
                      "mca_params": str(frag) if frag else None,
                      "modules": {c: {"up": han_backend.MODULES["up"][u],
                                      "low": han_backend.MODULES["low"][low]}
                                  for c, (u, low) in modules.items()},
                      "notes": [n for ns in notes.values() for n in ns]}
    summary["coll_han_excluded"] = False
    if opts.out and frag:
        _write(opts.out, han_backend.render(rules_map, comments), "--out")
        _write(frag, han_backend.mca_fragment(opts.out, modules), "--out")
    if opts.summary_json:
        _write(opts.summary_json, json.dumps(summary, indent=2) + "\n", "--summary-json")
    return TuneResult(mpi, catalog, 0, decisions, None, failures, summary)


def _write(path: Path, text: str, option: str) -> None:
    try:
        write_atomic(path, text)
    except OSError as e:
        raise ColltuneError(f"cannot write {option} {path}: {e.strerror or e}",
                            f"free space or choose a writable {option}; measurements are in "
                            "the store, so rerun with --from-db to write without "
                            "measuring") from None


def _mpich_setup(opts: TuneOptions, colls: list[str]
                 ) -> tuple[mpich_backend.MPICH, mpich_backend.MPICHCatalog]:
    """The MPICH under --mpi, its catalog read through MPI_T and its compiled-in selection
    table (the tuning file starts from it). What needs Open MPI's formulas is refused."""
    for bad, what in ((opts.predict, "--predict"), (opts.strategy == "model", "--strategy model"),
                      (opts.tune_han, "--tune-han"), (opts.rules_version, "--rules-version")):
        if bad:
            raise ColltuneError(f"{what} does not apply to --backend mpich",
                                "the cost models and rules formats are Open MPI's")
    mpi = mpich_backend.find_mpich(opts.mpi)
    exe = build_kernel(mpi)
    library = mpich_backend.library_path(exe)
    if library is None:
        raise ColltuneError(f"cannot tell which MPICH library {exe} loads (ldd)",
                            "check that ldd works and the kernel links libmpi or libmpich")
    catalog = mpich_backend.catalog(exe, library, colls)
    catalog.builtin = mpich_backend.builtin_table(library)
    if catalog.builtin is None:
        raise ColltuneError(f"MPICH's compiled-in selection table was not found in {library}",
                            "a tuning file replaces it for every collective, so colltune "
                            "writes one only from it; report this MPICH build")
    missing = [c for c in colls if not catalog.algorithms.get(c)]
    if missing:
        raise ColltuneError(f"{mpi.describe()} has no algorithm variable for "
                            + ", ".join(missing), "tune other collectives")
    return mpi, catalog


def _mvapich2_setup(opts: TuneOptions, colls: list[str]
                    ) -> tuple[mv2_backend.MVAPICH2, mv2_backend.MV2Catalog]:
    """The MVAPICH2 under --mpi and its catalog. What needs Open MPI's formulas is refused."""
    for bad, what in ((opts.predict, "--predict"), (opts.strategy == "model", "--strategy model"),
                      (opts.tune_han, "--tune-han"), (opts.rules_version, "--rules-version")):
        if bad:
            raise ColltuneError(f"{what} does not apply to --backend mvapich2",
                                "the cost models and rules formats are Open MPI's")
    if opts.for_np is not None and opts.for_np not in opts.nps:
        raise ColltuneError(f"--for-np {opts.for_np} is not among --np "
                            f"{','.join(map(str, opts.nps))}",
                            "name one of the communicator sizes tuned")
    mpi = mv2_backend.find_mvapich2(opts.mpi)
    catalog = mv2_backend.catalog(colls)
    missing = [c for c in colls if not catalog.algorithms.get(c)]
    if missing:
        raise ColltuneError(f"colltune does not tune {', '.join(missing)} on MVAPICH2",
                            "tune " + ", ".join(sorted(mv2_backend.ALGORITHMS)))
    return mpi, catalog


def write_mvapich2_outputs(mpi: mv2_backend.MVAPICH2, catalog: mv2_backend.MV2Catalog,
                           decisions: dict[str, dict[int, list[Decision]]],
                           counters: dict[str, dict[int, mvapich2_rules.Counters]],
                           failures: list[str], opts: TuneOptions,
                           searches: dict[str, dict[str, object]]) -> TuneResult:
    """The MVAPICH2 profile (`NAME = VALUE`, as /etc/mvapich2.conf or MV2_USER_CONFIG) for
    one communicator size: MVAPICH2's tables have no comm-size dimension."""
    np = opts.for_np or max(opts.nps)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    comments = [f"MVAPICH2 profile written by colltune {__version__}",
                f"tuned on {socket.gethostname()} with {mpi.name} {mpi.version} "
                f"({mpi.prefix}), {stamp}",
                f"decisions at {np} ranks: MVAPICH2 uses these tables at every communicator size"]
    if len(opts.nps) > 1:
        comments.append(f"tuned at {','.join(map(str, opts.nps))} ranks; written for {np} "
                        "(--for-np)")
    for name, per_np in decisions.items():
        for d in sorted(per_np.get(np, []), key=lambda d: d.size):
            comments.append(f"{name} {d.size} B: {d.chosen.label(catalog, name)}; {d.verdict}")
    per_coll = {c: per_np.get(np, {}) for c, per_np in counters.items()}
    prof, notes = mvapich2_rules.profile(decisions, catalog, per_coll, np, comments)
    prof.comments += [f"note: {n}" for n in notes]
    summary = make_summary(mpi, catalog, 0, decisions, failures, opts, searches)
    summary["mvapich2"] = {"profile": str(opts.out) if opts.out else None, "for_np": np,
                           "settings": dict(prof.settings), "notes": notes}
    summary["coll_han_excluded"] = False
    if opts.out:
        _write(opts.out, mvapich2.render(prof), "--out")
    if opts.summary_json:
        _write(opts.summary_json, json.dumps(summary, indent=2) + "\n", "--summary-json")
    return TuneResult(mpi, catalog, 0, decisions, None, failures, summary)


def write_mpich_outputs(mpi: mpich_backend.MPICH, catalog: mpich_backend.MPICHCatalog,
                        decisions: dict[str, dict[int, list[Decision]]], failures: list[str],
                        opts: TuneOptions, searches: dict[str, dict[str, object]]
                        ) -> TuneResult:
    """MPICH's tuning file at --out and, beside it, the environment profile that uses it."""
    assert catalog.builtin is not None
    new = mpich_rules.tuning(decisions, catalog)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    summary = make_summary(mpi, catalog, 0, decisions, failures, opts, searches)
    summary["mpich"] = {"tuning_file": str(opts.out) if opts.out else None,
                        "env_profile": str(mpich_rules.env_path(opts.out)) if opts.out
                        else None,
                        "not_selectable": catalog.not_selectable or {}}
    summary["coll_han_excluded"] = False
    if opts.out:
        try:
            text, merged = mpich_rules.merged_table(opts.out, catalog.builtin, new,
                                                    catalog.params)
        except (OSError, mpich_csel.CselError) as e:
            raise ColltuneError(f"will not merge into {opts.out}: {e}",
                                "fix or move that file, or choose another --out; it was not "
                                "changed") from None
        comments = [f"MPICH tuning written by colltune {__version__}",
                    f"tuned on {socket.gethostname()} with {mpi.name} {mpi.version} "
                    f"({mpi.prefix}), {stamp}",
                    f"use: source this file, or set these variables (module file, srun "
                    f"--export); the tuning file is {opts.out.resolve()}"]
        for name, per_np in decisions.items():
            for np, ds in sorted(per_np.items()):
                for d in sorted(ds, key=lambda d: d.size):
                    comments.append(f"{name} np={np} {d.size} B: "
                                    f"{d.chosen.label(catalog, name)}; {d.verdict}")
        _write(opts.out, text, "--out")
        _write(mpich_rules.env_path(opts.out),
               mpich_rules.env_profile(merged, catalog, opts.out, comments), "--out")
    if opts.summary_json:
        _write(opts.summary_json, json.dumps(summary, indent=2) + "\n", "--summary-json")
    return TuneResult(mpi, catalog, 0, decisions, None, failures, summary)


def _smpi_setup(opts: TuneOptions) -> tuple[smpi_backend.SMPI, Catalog, int]:
    """The simulated installation, its catalog and the rules format (classic unless asked:
    every Open MPI reads it). Searches that need models or fresh launches are refused."""
    if opts.predict or opts.strategy == "model":
        raise ColltuneError("--predict and --strategy model need models fitted on a real MPI",
                            "use --strategy grid, race or bayes with --backend smpi; "
                            "SMPI runs --np 512 directly")
    if opts.hostfile:
        raise ColltuneError("--hostfile does not apply to --backend smpi",
                            "the hosts come from --platform; choose ranks per host with --ppn")
    smpi = smpi_backend.find_smpi(opts.mpi, opts.platform)
    # one repetition: simulated time does not vary (one warm-up call all the same); one
    # call, not a window: a simulated call does not overlap the next the way the tuned
    # ranks' scheduling makes real ones do, and a window multiplies the simulation's time
    opts.settings.warmup, opts.settings.min_reps, opts.settings.max_reps = 1, 1, 1
    opts.settings.timing = "isolated"
    return smpi, smpi_backend.catalog(), opts.rules_version or 1


def smpi_rule_configs(decisions: dict[str, dict[int, list[Decision]]]
                      ) -> dict[str, dict[int, list[Decision]]]:
    """Decisions whose chosen configuration carries the segment size and fanout SMPI's
    port used internally, so Open MPI runs what was simulated."""
    out: dict[str, dict[int, list[Decision]]] = {}
    for name, per_np in decisions.items():
        for np, ds in per_np.items():
            fixed = []
            for d in ds:
                seg, fan = smpi_backend.smpi_segsize(name, d.chosen.algorithm, np,
                                                     max(d.size, 0))
                fixed.append(replace(d, chosen=replace(d.chosen, segsize=seg, fanout=fan))
                             if d.chosen != DEFAULT else d)
            out.setdefault(name, {})[np] = fixed
    return out


def search_one(opts: TuneOptions, mpi: Installation, catalog: Catalog, version: int,
               coll: Collective, placement: Placement, store: Store, sweep: str,
               rep: Reporter, failures: list[str], searches: dict[str, dict[str, object]]
               ) -> None:
    """Measure one collective at one communicator size with the chosen strategy; failed
    points go to `failures`, what a search did to `searches`."""
    mreqs = None if version == 2 else [0]
    cfgs = configurations(coll, catalog, placement.np, opts.segsizes, mreqs)
    pts = [(c, s) for c in cfgs for s in sizes_for(coll, placement.np, opts.sizes)
           if useful_at(c, s, coll, placement.np)]
    where = f"{coll.name} np={placement.np}"

    def failed(cfg: Config, r: PointResult) -> None:
        failures.append(f"{where} {cfg.label(catalog, coll.name)} {r.size} B: {r.status}"
                        + (f" ({r.message})" if r.message else ""))

    strategy, grid_points = opts.strategy, len(pts)
    if strategy == "model":
        chosen = model_points(store, mpi, catalog, coll, placement.np, pts, opts.top_k)
        rep.note(f"{where}: model: racing {len(chosen)} of {len(pts)} points (per size the "
                 f"fitted model's top {opts.top_k}, each algorithm's best-predicted variant, "
                 "and the default)")
        pts, strategy = chosen, "race"
    if strategy == "grid":
        for cfg, r in measure(mpi, catalog, coll, placement, pts, store, opts.settings, sweep,
                              rep):
            failed(cfg, r)
        return
    cands: dict[int, list[Config]] = {}
    for c, sz in pts:
        cands.setdefault(sz, []).append(c)
    if opts.strategy == "bayes" and opts.budget and opts.budget < len(cands):
        raise ColltuneError(
            f"--budget {opts.budget} is less than the {len(cands)} sizes of {coll.name}: "
            "the default is always measured at every size",
            f"use --budget {len(cands)} or more, or fewer --sizes")
    m = store_measure(mpi, catalog, coll, placement, store, opts.settings, sweep, rep, failed)
    out = search(strategy, cands, m, race_settings(opts), bayes_settings(opts))
    searches[where] = search_record(out, grid_points)
    if opts.strategy == "model":
        searches[where].update(top_k=opts.top_k, shortlisted=len(pts))
    rep.note(f"{where}: {opts.strategy} " + describe_search(out, grid_points))


HAN_NOTE = ("note: coll/han is excluded while tuning (--mca coll ^han): on several nodes "
            "Open MPI 5 would run han instead of the tuned algorithms measured here. The "
            "rules take effect where tuned runs: launch the application with --mca coll "
            "^han too, or keep han and its own choices")

STRATEGIES = ("grid", "race", "bayes", "model")


def predict_decisions(store: Store, mpi: Installation, catalog: Catalog, coll: Collective,
                      measured: list[Placement], targets: list[int], sizes: list[int] | None
                      ) -> dict[int, tuple[list[Decision], str]]:
    """Fit both models on what was measured at the `measured` sizes, keep the one with the
    smaller median error, and choose at each target size what it predicts fastest."""
    from colltune.models.collfit import Observation, fit_on_collectives
    from colltune.models.predict import predict

    obs = [Observation(coll, pl.np, m.config, m.size, m.median)
           for pl in measured for m in store.measurements(context_for(mpi, coll, pl))
           if m.status == "ok" and m.median]
    models = fit_on_collectives(obs, catalog)
    err = {"hockney": models.hockney.quality.median_rel, "loggp": models.loggp.quality.median_rel}
    which = min(err, key=lambda k: err[k])
    out: dict[int, tuple[list[Decision], str]] = {}
    for np in targets:
        ds = []
        for size in sizes_for(coll, np, sizes):
            cands = [c for c in configurations(coll, catalog, np) if useful_at(c, size, coll, np)]
            ranked = predict(models, coll, catalog, np, size, cands, rank_by=which)
            if not ranked:
                continue
            top = ranked[0]
            ds.append(Decision(size, coll.lookup_size(size, np), top.config, top.config,
                               top.time(which), None, None, False,
                               reason=f"predicted {top.time(which) * 1e6:.1f} us by {which}",
                               predicted=True))
        text = (f"{which} model {models.source} (median error there "
                f"{100 * err[which]:.0f}%); the library default cannot be predicted and "
                "was not compared; check with tune verify at this size before relying on it")
        out[np] = (ds, text)
    return out


def model_points(store: Store, mpi: Installation, catalog: Catalog, coll: Collective, np: int,
                 pts: list[tuple[Config, int]], k: int) -> list[tuple[Config, int]]:
    """Per size, the default and the fitted Hockney model's shortlist (tuner.guided);
    configurations without a formula are left out: nothing says they are good."""
    from colltune.models.predict import load_models, predict
    from colltune.tuner.guided import shortlist

    models = load_models(store, mpi)
    out: list[tuple[Config, int]] = []
    for size in sorted({s for _, s in pts}):
        here = [c for c, s in pts if s == size]
        ranked = predict(models, coll, catalog, np, size, here)
        out += [(DEFAULT, size)] + [(c, size) for c in shortlist(ranked, k)]
    return out


def race_settings(opts: TuneOptions) -> RaceSettings:
    return RaceSettings(budget=opts.budget)


def bayes_settings(opts: TuneOptions) -> BayesSettings:
    return BayesSettings(budget=opts.budget, ei_stop=opts.ei_stop, seed=opts.settings.seed)


def describe_search(out: RaceOutcome | BayesOutcome, grid_points: int) -> str:
    if isinstance(out, BayesOutcome):
        return (f"measured {len(out.order)} of {grid_points} points in {out.batches} "
                f"launches (stopped: {out.stopped})")
    return f"{out.rounds} rounds, {out.cost} repetitions over {grid_points} points"


def search_record(out: RaceOutcome | BayesOutcome, grid_points: int) -> dict[str, object]:
    if isinstance(out, BayesOutcome):
        return {"grid_points": grid_points, "points": len(out.order),
                "repetitions": sum(len(v) for v in out.samples.values()),
                "launches": out.batches, "stopped": out.stopped,
                "failed_points": len(out.failed)}
    return {"grid_points": grid_points, "points": len(out.samples),
            "repetitions": out.cost, "rounds": out.rounds,
            "survivors": {str(s): len(c) for s, c in sorted(out.survivors.items())}}


def check_outputs(out: Path | None, summary_json: Path | None) -> None:
    """Fail before measuring if the rules file or the summary could not be written."""
    for path, option in ((out, "--out"), (summary_json, "--summary-json")):
        if path is not None:
            ensure_writable(path, option)


def write_outputs(rf: rules.RulesFile, summary: dict[str, object], out: Path | None,
                  summary_json: Path | None) -> None:
    if out is not None:
        _write(out, rules.render(rf), "--out")
    if summary_json is not None:
        _write(summary_json, json.dumps(summary, indent=2) + "\n", "--summary-json")


def confirm_decisions(ds: list[Decision], coll: Collective, placement: Placement, store: Store,
                      mpi: Installation, version: int, opts: TuneOptions, rep: Reporter,
                      catalog: Catalog | None = None,
                      counters: mvapich2_rules.Counters | None = None) -> None:
    """Keep a non-default choice only if fresh alternating launches confirm it.

    Verdicts are stored, so a resumed run or --from-db reuses them instead of measuring."""
    ctx = context_for(mpi, coll, placement)
    pending = [d for d in ds if d.chosen != DEFAULT]
    if not pending:
        return
    measured = sorted({m.size for m in store.measurements(ctx)})
    # a size-independent decision (size -1) is checked at every measured size
    wanted = {d.size: d for d in pending}
    checks = {s: (measured if s < 0 else [s]) for s in wanted}
    missing = sorted({s for d in pending for s in checks[d.size]
                      if store.confirmation(ctx, s, d.chosen.key) is None})
    if missing and opts.confirm_rounds > 0 and not opts.from_db:
        rep.note(f"confirming {len(pending)} choice(s) of {coll.name} at np={placement.np} in "
                 f"{opts.confirm_rounds} fresh launch pairs")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tentative.conf"
            arms = None
            if isinstance(catalog, han_backend.HanCatalog):
                # han's file and the collective's modules, against han's own choices
                write_atomic(path, han_backend.render(
                    han_rules.han_rules(coll.name, catalog, {placement.np: ds})))
                # after apply_modules at most one pair besides han's own is left
                pairs = {catalog.choice(coll.name, d.chosen.algorithm).modules
                         for d in ds} - {(0, 0)}
                modules = {coll.name: next(iter(pairs), (0, 0))}
                arms = {"default": {}, "tuned": han_backend.file_env(path, modules)}
            elif isinstance(catalog, mv2_backend.MV2Catalog):
                # MVAPICH2 as it comes against MVAPICH2 under this collective's profile
                arms = {"default": {}, "tuned": mvapich2_rules.tentative(
                    coll.name, catalog, ds, counters or {})}
            elif isinstance(catalog, mpich_backend.MPICHCatalog):
                # MPICH as it comes against MPICH under the tuning file
                assert catalog.builtin is not None
                arms = {"default": {}, "tuned": mpich_rules.tentative(
                    path, catalog.builtin, coll.name, placement.np,
                    mpich_rules.ranges(coll.name, catalog, placement.np, ds), catalog.params)}
            else:
                tentative = rules.RulesFile(version=version)
                tentative.set_section(coll.ompi_id, section(placement.np, ds))
                write_atomic(path, rules.render(tentative))
            ab = ab_runs(mpi, coll, placement, path, missing, opts.confirm_rounds,
                         opts.settings, opts.settings.timeout, arms)
        verdicts = judge(ab, opts.confirm_alpha, opts.min_gain)
        for d in pending:
            for s in checks[d.size]:
                if s in verdicts:
                    store.add_confirmation(ctx, d.chosen.key, verdicts[s])
    apply_confirmations(ds, store, ctx)


def apply_confirmations(ds: list[Decision], store: Store, ctx: Context) -> None:
    """Attach stored fresh-launch verdicts; a choice they do not confirm reverts to the
    default. A choice never put to fresh launches keeps its mark ("tuned?")."""
    pending = [d for d in ds if d.chosen != DEFAULT]
    if not pending:
        return
    measured = sorted({m.size for m in store.measurements(ctx)})
    checks = {d.size: (measured if d.size < 0 else [d.size]) for d in pending}
    for d in pending:
        vs = [store.confirmation(ctx, s, d.chosen.key) for s in checks[d.size]]
        if any(v is None for v in vs):
            d.reason += " (not confirmed in fresh launches)"
            continue
        d.confirmations = [v for v in vs if v is not None]
        faster = sum(v.verdict == "faster" for v in d.confirmations)
        slower = sum(v.verdict == "slower" for v in d.confirmations)
        if faster * 2 > len(d.confirmations) and slower == 0:
            d.reason += "; confirmed in fresh launches"
        else:
            ratio = ", ".join(f"{v.launch_speedup:.2f}x" for v in d.confirmations)
            d.reason = f"not confirmed in fresh launches ({ratio}): default kept"
            d.chosen = DEFAULT


def build_rules(base: rules.RulesFile | None, version: int,
                decisions: dict[str, dict[int, list[Decision]]], mpi: Installation,
                catalog: Catalog, predicted: dict[tuple[str, int], str] | None = None
                ) -> rules.RulesFile:
    rf = base or rules.RulesFile(version=version)
    rf.version = version
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rf.comments = [
        f"Open MPI coll/tuned dynamic rules written by colltune {__version__}",
        f"tuned on {socket.gethostname()} with {mpi.name} {mpi.version} ({mpi.prefix}), {stamp}",
        "use: mpirun --mca coll_tuned_use_dynamic_rules 1 "
        "--mca coll_tuned_dynamic_rules_filename THIS_FILE ...",
    ]
    if isinstance(mpi, smpi_backend.SMPI):
        rf.comments += [
            f"SIMULATED, NOT MEASURED: Open MPI's algorithms as SimGrid SMPI implements them "
            f"on the platform {mpi.platform}",
            "segment sizes and fanouts are the ones SMPI's ports pick internally; "
            "algorithms marked (SMPI's own) are SMPI's implementation of the same pattern",
        ]
    for name, per_np in decisions.items():
        coll = get_collective(name)
        for np, ds in per_np.items():
            notes = [f"{name} at {np} ranks, {stamp}; message sizes are what Open MPI compares"]
            if predicted and (name, np) in predicted:
                notes.append(f"PREDICTED, NOT MEASURED at {np} ranks: {predicted[(name, np)]}")
            for d in sorted(ds, key=lambda d: d.lookup_size):
                where = f"{d.size} B per rank" if d.size >= 0 else "every size"
                if d.default_median and d.best_median and d.best:
                    notes.append(
                        f"  {where} (lookup {d.lookup_size}): {d.chosen.label(catalog, name)}; "
                        f"best {d.best.label(catalog, name)} {d.best_median * 1e6:.1f} us vs "
                        f"default {d.default_median * 1e6:.1f} us" if d.size >= 0 else
                        f"  {where}: {d.chosen.label(catalog, name)}; {d.reason}")
                else:
                    notes.append(f"  {where}: {d.chosen.label(catalog, name)}; {d.reason}")
                if isinstance(mpi, smpi_backend.SMPI) and not smpi_backend.exact_port(
                        name, d.chosen.algorithm):
                    notes[-1] += " (SMPI's own)"
            rf.set_section(coll.ompi_id, section(np, ds), notes)
    return rf


def make_summary(mpi: Installation, catalog: Catalog, version: int,
                 decisions: dict[str, dict[int, list[Decision]]], failures: list[str],
                 opts: TuneOptions, searches: dict[str, dict[str, object]] | None = None
                 ) -> dict[str, object]:
    return {
        "colltune": __version__,
        "mpi": {"name": mpi.name, "version": mpi.version, "prefix": str(mpi.prefix)},
        "host": socket.gethostname(),
        "rules_version": version,
        "rules_file": str(opts.out) if opts.out else None,
        "catalog_source": catalog.source,
        "collectives": {
            name: {str(np): [d.as_json(catalog, name) for d in ds] for np, ds in per_np.items()}
            for name, per_np in decisions.items()
        },
        "failures": failures,
        "strategy": opts.strategy,
        "searches": searches or {},  # "collective np=N": what the search measured
    }
