"""What a tuning run was asked to do: the options of `tune` and of each measurement, as
the CLI, the API, the backends and the tuner pass them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from colltune.core.plan import Excluded
from colltune.core.setting import setting
from colltune.kernel.launch import Repetitions
from colltune.launchers import Launch


@dataclass
class MeasureSettings(Repetitions):
    """How a tune measures: the kernel's repetitions, and what tuning adds. The options
    every measuring command shares are declared here once (core/setting): tune, tune app
    and tune verify take their flag, default and help from these fields."""

    # the kernel's stopping rule (Repetitions), as tune and tune app take it
    point_time: float = setting(
        Repetitions.point_time, "--point-time",
        help="Time budget per (config, size) in seconds.")
    rel_ci: float = setting(Repetitions.rel_ci, "--rel-ci",
                            help="Target CI half-width / median.")
    min_reps: int = setting(Repetitions.min_reps, "--min-reps", help="")
    max_reps: int = setting(Repetitions.max_reps, "--max-reps", help="")
    seed: int = setting(Repetitions.seed, "--seed", help="Seed of the measurement order.")
    # a launch without progress this long is killed as hung
    timeout: float = setting(60.0, "--timeout",
                             help="Seconds without progress before a launch is killed.")
    # a win must hold isolated and back to back (docs/methodology.md)
    timing: str = setting(
        "both", "--timing", help="isolated (one call after a barrier), back-to-back (a "
        "window of consecutive calls, as an application loop makes them) or both (a win "
        "must hold in each; docs/methodology.md).")
    window: int = setting(
        Repetitions.window, "--window", help="Calls per back-to-back window (fewer where "
        "they would take over 10 ms).")
    objective: str = setting(
        Repetitions.objective, "--objective", help="What a repetition's time is: completion "
        "(slowest rank), mean (over ranks, as OSU prints) or root.")
    # a library decides by the bytes and by the elements a call holds (collectives.DATATYPES)
    datatype: str = setting(
        "double", "--datatype", help="What a reduction sums: double, float, int or char "
        "(one-byte integers, as OSU sums unless told otherwise). A library may run another "
        "algorithm for 8 B of chars than for one double: tune with what the application "
        "sums. Stored apart; other collectives move bytes.")
    # the sweep stops points clearly slower than the default early
    cutoff: float = setting(
        1.5, "--cutoff", help="Stop measuring a configuration at a size once it is clearly "
        "this many times slower than the library default there, in some timing mode (it "
        "cannot be chosen); 0: measure every point fully.")
    min_ticks: int = 100  # calls under 100 timer steps are timed in batches (issue 37)
    # where the default has a launch of its own (a launch per configuration), it may be
    # measured in several, spread over the sweep: every configuration is compared with it,
    # and one launch of it moves up to 2x; opt-in, whole tunes not shown better (methodology)
    default_launches: int = setting(
        1, "--default-launches",
        help="Where each configuration has a launch of its own (--sweep relaunch or "
             "bands, and libraries without MPI_T), launches measuring the library's "
             "default, spread over the sweep, samples pooled: what all are compared "
             "with.")


# TuneOptions fields that only some families take, and the flag that sets each: a family
# lists those it takes in its backend's `options`; the others are refused before a tune
# opens anything (tuner/run.open_run), naming the families that take them
FAMILY_OPTIONS = {"tune_han": "--tune-han", "tune_ucc": "--tune-ucc",
                  "rules_version": "--rules-version",
                  "for_np": "--for-np", "trade_off": "--trade-off", "platform": "--platform",
                  "launch_cost": "--launch-cost"}


@dataclass
class TuneOptions:
    collectives: list[str]
    nps: list[int]
    out: Path | None = None
    mpi: str | None = None
    db: Path | None = None
    sizes: list[int] | None = None
    segsizes: list[int] | None = None  # every segment-like parameter's values
    # values per parameter the installation's catalog declares (--param NAME=VALUES)
    params: dict[str, list[int]] = field(default_factory=dict)
    strategy: str = setting(
        "grid", "--strategy", help="grid (every point), race (successive halving per "
        "size), bayes (Gaussian process, expected improvement) or model (a race among the "
        "fitted model's shortlist per size: its --top-k and each algorithm's "
        "best-predicted variant).")
    budget: int | None = setting(
        None, "--budget", help="Per collective and --np: bayes measures at most this many "
        "(configuration, size) points, defaults included; race spends at most this many "
        "repetitions.")
    ei_stop: float = setting(
        0.0005, "--ei-stop", help="bayes stops when no point is expected to improve on its "
        "size's best by this (log ratio).")
    top_k: int = setting(
        3, "--top-k", help="model: configurations predicted fastest that join each "
        "algorithm's best-predicted one in the race.")
    # write rules for `nps` from models fitted at `fit_nps`
    predict: bool = setting(
        False, "--predict", help="--np cannot run here: measure at --fit-np, fit the cost "
        "models, write rules predicted for --np.")
    fit_nps: list[int] = field(default_factory=lambda: [2, 3, 4])
    sweep: str = setting(
        "mpit", "--sweep",
        help="mpit (one launch through MPI_T where the library has it), relaunch (a launch "
             "per configuration) or bands (a file naming a configuration per message size, "
             "each measured near its size: Intel MPI).")
    # a ladder: measure these communicator sizes inside the one launch of --np ranks
    # (consecutive-rank groups, all at once), one rules section each
    comm_sizes: list[int] | None = None
    # --layouts: (nodes, ranks per node) measured in turn inside this allocation, each a
    # run of its own; `layout` names the one a run measures ("2x2")
    layouts: list[tuple[int, int]] | None = None
    layout: str | None = None
    backend: str = "openmpi"  # openmpi | smpi | mpich | mvapich2
    # the options only some families take (FAMILY_OPTIONS; each family's `options` says
    # which it takes, and a tune refuses the others): MVAPICH2's
    for_np: int | None = None  # the comm size whose decisions the profile holds
    # SMPI's
    platform: Path | None = None  # the SimGrid platform file to simulate
    # Open MPI's (and SMPI's, which writes Open MPI's rules: rules_version)
    tune_han: bool = setting(
        False, "--tune-han", help="Open MPI 5 across nodes: tune coll/han's own choices "
        "(flat tuned or han, han's algorithm, its level modules); --out gets han's rules "
        "file and an MCA parameter file beside it.")
    tune_ucc: bool = setting(
        False, "--tune-ucc", help="Open MPI 5 built with coll/ucc: tune UCC's tl/ucp "
        "algorithms with coll/ucc in charge; --out gets the UCC_TL_UCP_TUNE string and an "
        "MCA parameter file beside it (docs/ucc.md).")
    rules_version: int | None = None
    out_format: str | None = None  # --format: which of its family's formats to write
    from_db: bool = setting(False, "--from-db", help="Decide from stored data only.")
    hostfile: str | None = None
    launch: Launch | None = None  # --launcher, --nodes, --ppn, --launcher-args
    summary_json: Path | None = None
    alpha: float = 0.01
    min_gain: float = 0.03
    # a configuration with fewer samples at a size is never chosen there (tune online: the
    # candidates successive halving left with a few calls; the kernel's points have more)
    min_samples: int = 1
    # run above MAX_OVERSUBSCRIPTION ranks per core anyway
    oversubscribe: bool = setting(
        False, "--oversubscribe", help="Run more than 4 ranks per core on this machine "
        "anyway (refused otherwise: the timings would measure the scheduler).")
    confirm_rounds: int = setting(
        4, "--confirm-rounds", help="Fresh default/tuned launch pairs that must confirm "
        "each win (0: skip).")
    confirm_alpha: float = 0.05  # paired t-test over those launch pairs
    # ... and up to this many where still undecided; None: twice confirm_rounds (4, 8)
    confirm_max_rounds: int | None = setting(
        None, "--confirm-max-rounds", help="... and up to this many where they leave a win "
        "undecided (default: twice as many; a stand-in for the default, or a choice "
        "where the default stalls: twice this).")
    # an application's calls at a size in one launch: the launch pairs also judge a choice
    # over this many calls from the size's first on, where a slow start can outweigh a
    # faster call (and refuse it); 0: judge warm calls only
    start_calls: int = setting(
        1000, "--start-calls",
        help="An application's calls at one size per launch: a choice must not lose over "
             "this many calls from the size's first (a slow start); 0: judge warm calls "
             "only.")
    # sizes above the largest measured one: "extend" its decision, or "library" (a default
    # rule just above it: what was not measured is left to the library's own choice)
    beyond: str = "extend"
    # where neighbouring sizes decide differently: "measure" between them until the switch
    # is located within 1.25x, finer where a side gains 4x or more over the default
    # (tuner.boundaries), or "midpoint" (the geometric midpoint)
    boundaries: str = setting(
        "measure", "--boundaries",
        help="measure: where neighbouring sizes decide differently, measure between them "
             "until the switch is located within 1.25x (finer where a side is 4x or more "
             "faster than the default); midpoint: put the boundary at the "
             "geometric midpoint unmeasured.")
    # communicator sizes between the measured ones (--np): "rule" (a job there runs what
    # both chose where they agree, the library's own choice where they part: the family's
    # writer, said in the file), or "measure" (where the two part, the size halfway is
    # measured too: tuner/between.py)
    between: str = setting(
        "rule", "--between",
        help="rule: a communicator size between two of --np runs what the file says for "
             "it (Open MPI's and MPICH's: what both chose where they agree, the library's "
             "own choice where they part); measure: where either's choice loses at the "
             "other, measure the size halfway too (one more per gap).")
    # the sizes --between measure added, and the collectives measured at each (set by the
    # tune's second pass: the others there are not measured)
    halfway: dict[int, list[str]] = field(default_factory=dict)
    # MVAPICH2's: where the output cannot name the library's default at a size (its
    # shared-memory reduce): write the fastest nameable algorithm measured there and note its
    # cost, rather than leave the whole collective to the library
    trade_off: bool = setting(
        False, "--trade-off",
        help="mvapich2: where a range string cannot name MVAPICH2's default (its "
             "shared-memory reduce, reduce via allreduce), write the fastest algorithm "
             "measured there anyway and note its cost; without it such a collective is left "
             "to MVAPICH2 whole.")
    # points not to measure (core/plan.Excluded): what tune app already knows from the
    # application's own calls (apploop/online/for_app.py)
    excluded: Excluded = frozenset()
    # --time-budget in seconds: measure and confirm only what fits (tuner/budget.py)
    time_budget: float | None = None
    # what a launch's start-up costs on real nodes, where the launches are simulated (SMPI):
    # core/account.LaunchCost's text ("BASE" or "BASE+PER_NODE/node"); None: the one measured
    launch_cost: str | None = setting(
        None, "--launch-cost",
        help="smpi: seconds a launch takes to start on the real nodes the simulation "
             "stands for, BASE or BASE+PER_NODE/node (default: as measured here, "
             "docs/benchmarks.md), charged to the allocation the tune reports.")
    settings: MeasureSettings = field(default_factory=MeasureSettings)
