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

    timeout: float = 60.0  # seconds without progress before a launch is killed as hung
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
    # the sweep stops points clearly slower than the default early
    cutoff: float = setting(
        1.5, "--cutoff", help="Stop measuring a configuration at a size once it is clearly "
        "this many times slower than the library default there, in some timing mode (it "
        "cannot be chosen); 0: measure every point fully.")
    min_ticks: int = 100  # calls under 100 timer steps are timed in batches (issue 37)
    # where the default has a launch of its own (a launch per configuration), it may be
    # measured in several, spread over the sweep: every configuration is compared with it,
    # and one launch of it moves up to 2x; opt-in, whole tunes not shown better (methodology)
    default_launches: int = 1


# TuneOptions fields that only some families take, and the flag that sets each: a family
# lists those it takes in its backend's `options`; the others are refused before a tune
# opens anything (tuner/run.open_run), naming the families that take them
FAMILY_OPTIONS = {"tune_han": "--tune-han", "rules_version": "--rules-version",
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
    strategy: str = "grid"  # grid | race | bayes
    budget: int | None = None  # bayes: measured points; race: repetitions
    ei_stop: float = 0.0005  # bayes stops when no point is expected to gain more (log ratio)
    top_k: int = 3  # model: configurations measured per size besides the default
    predict: bool = False  # write rules for `nps` from models fitted at `fit_nps`
    fit_nps: list[int] = field(default_factory=lambda: [2, 3, 4])
    sweep: str = "mpit"
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
    tune_han: bool = False  # Open MPI 5 across nodes: coll/han's choices, han's rules file
    rules_version: int | None = None
    out_format: str | None = None  # --format: which of its family's formats to write
    from_db: bool = False
    hostfile: str | None = None
    launch: Launch | None = None  # --launcher, --nodes, --ppn, --launcher-args
    summary_json: Path | None = None
    alpha: float = 0.01
    min_gain: float = 0.03
    # a configuration with fewer samples at a size is never chosen there (tune online: the
    # candidates successive halving left with a few calls; the kernel's points have more)
    min_samples: int = 1
    oversubscribe: bool = False  # run above MAX_OVERSUBSCRIPTION ranks per core anyway
    confirm_rounds: int = 4  # fresh launch pairs that must confirm each win; 0: skip
    confirm_alpha: float = 0.05  # paired t-test over those launch pairs
    # ... and up to this many where still undecided; None: twice confirm_rounds (4, 8)
    confirm_max_rounds: int | None = None
    # an application's calls at a size in one launch: the launch pairs also judge a choice
    # over this many calls from the size's first on, where a slow start can outweigh a
    # faster call (and refuse it); 0: judge warm calls only
    start_calls: int = 1000
    # sizes above the largest measured one: "extend" its decision, or "library" (a default
    # rule just above it: what was not measured is left to the library's own choice)
    beyond: str = "extend"
    # where neighbouring sizes decide differently: "measure" between them until the switch
    # is located within 1.25x (tuner.boundaries), or "midpoint" (the geometric midpoint)
    boundaries: str = "measure"
    # MVAPICH2's: where the output cannot name the library's default at a size (its
    # shared-memory reduce): write the fastest nameable algorithm measured there and note its
    # cost, rather than leave the whole collective to the library
    trade_off: bool = False
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
