"""SimGrid SMPI as a Backend: Open MPI's algorithms simulated on a platform file, switched
inside one launch, deterministic times, Open MPI's rules file as output."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.base import Session, Traits, Written
from colltune.backends.files import Arms
from colltune.backends.openmpi.rules_files import TunedRulesFiles
from colltune.backends.openmpi.tuned_rules import TunedRulesBackend, TunedSession
from colltune.backends.selecting import SelectSupport
from colltune.backends.smpi import install as smpi
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import FAN, SEG, Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.core.space import sizes_for
from colltune.errors import ColltuneError

if TYPE_CHECKING:
    from colltune.backends.base import Decisions
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context

# the ranks from which SimGrid's quadratic wait shows (smpi.waits_quadratically)
QUADRATIC_WAIT_NP = 128  # measured: 0.13 s at 128 ranks (unsegmented), 17 s at 160
# alltoall's basic linear puts every pair's message in flight at once: at 512 ranks
# (261,632 flows) SimGrid 3.32's max-min solver aborted on the fat tree and ran past 600 s
# a point on the Gigabit platform, with the fix above or without (docs/smpi.md); measured
# at 512 ranks only
LINEAR_FLOWS_NP = 512


class SMPIFiles(TunedRulesFiles):
    """Open MPI rules files, compared in simulated launches."""

    def rules_arms(self, rules: Path) -> Arms:
        raise ColltuneError("a simulation has no launch-to-launch variation to compare",
                            "verify the rules on a real Open MPI")


class SMPISelect(SelectSupport):
    """SimGrid's name of each algorithm (the default: its `ompi` selector)."""

    def name(self, catalog: Catalog, coll: Collective, cfg: Config) -> str:
        return smpi.algorithm_name(coll.name, cfg.algorithm)


class SMPIBackend(TunedRulesBackend[smpi.SMPI]):
    """Open MPI's algorithms simulated; a simulation runs no real program (no apps
    capability: tune profile, tune app, verify --app say so)."""

    Files = SMPIFiles
    selects = SMPISelect()
    name = "smpi"
    output = "an Open MPI rules file, from a SimGrid simulation on --platform"
    traits = Traits(exact=True)
    # it writes Open MPI's rules; its launches start in no time, real ones do not
    options = frozenset({"platform", "rules_version", "launch_cost"})
    short = "smpi"

    def launch(self, mpi: smpi.SMPI, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        if placement.hostfile is None:
            raise ColltuneError("an SMPI placement has no hostfile", "report this")
        return (smpi.launch_command(mpi, Path(placement.hostfile), placement.np, coll, alg,
                                    placement.launch.args), dict(os.environ))

    def mpit_env(self) -> dict[str, str]:
        return {}

    def mpit_vars(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, int]:
        return {}  # no MPI_T: `selects` names the algorithm

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return {}  # launch() puts the algorithm on smpirun's command line

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[smpi.SMPI]:
        """The simulated installation, its catalog and the rules format (classic unless
        asked: every Open MPI reads it). Searches that need models or fresh launches are
        refused."""
        if opts.predict or opts.strategy == "model":
            raise ColltuneError("--predict and --strategy model need models fitted on a real "
                                "MPI", "use --strategy grid, race or bayes with --backend "
                                "smpi; SMPI runs --np 512 directly")
        if opts.rules_version not in (None, 1, 2):
            raise ColltuneError(f"--rules-version {opts.rules_version}: the simulated rules "
                                "are written in the classic format (1) or version 2",
                                "use --rules-version 1 or 2")
        if opts.hostfile:
            raise ColltuneError("--hostfile does not apply to --backend smpi",
                                "the hosts come from --platform; choose ranks per host with "
                                "--ppn")
        mpi = smpi.find_smpi(opts.mpi, opts.platform)
        if max(opts.nps) >= QUADRATIC_WAIT_NP and smpi.waits_quadratically(mpi):
            note(f"note: SimGrid {mpi.version} keeps every pending detached send in one "
                 "list (fixed upstream in 3.34): segmented reductions at hundreds of ranks "
                 "may not finish within --timeout and are left to the library; "
                 "docs/smpi.md says how to simulate without it (--mpi)")
        if "alltoall" in colls and max(opts.nps) >= LINEAR_FLOWS_NP:
            n = max(opts.nps)
            note(f"note: alltoall's basic linear (SMPI's default from 512 B a rank runs it) "
                 f"puts {n * (n - 1):,} flows in flight at once at {n} ranks: SimGrid's "
                 "max-min solver may abort or not finish within --timeout there (each "
                 "costs --timeout once), and what it cannot simulate is left to the "
                 "library; docs/smpi.md")
        # one repetition and no warm-up: simulated time does not vary, the first call
        # included (checked: a reduce's first three calls at 128 ranks agree to 1 ns; at
        # 512 ranks a segmented call takes minutes of wall time, so every call saved
        # counts); one call, not a window: a simulated call does not overlap the next the
        # way the tuned ranks' scheduling makes real ones do, and a window multiplies the
        # simulation's time
        opts.settings.warmup, opts.settings.min_reps, opts.settings.max_reps = 0, 1, 1
        opts.settings.timing = "isolated"
        placements = [smpi.place(mpi, np, opts.launch) for np in opts.nps]
        for name in colls:
            for np in opts.nps:
                smpi.refuse_too_large(name, np, sizes_for(get_collective(name), np,
                                                          opts.sizes))
        return SMPISession(self, mpi, smpi.catalog(), placements, opts.rules_version or 1,
                           opts)

    def plan_catalog(self, colls: list[str]) -> Catalog | None:
        return smpi.catalog()

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        return smpi.catalog()


class SMPISession(TunedSession[smpi.SMPI]):
    def __init__(self, backend: SMPIBackend, mpi: smpi.SMPI, catalog: Catalog,
                 placements: list[Placement], version: int, opts: TuneOptions) -> None:
        super().__init__(backend, mpi, catalog, placements, version, opts)
        # "mpit" (the default): one launch, every configuration switched in the running
        # simulation by name (the kernel's select); "relaunch": one launch per
        # configuration, the algorithm on smpirun's line. Same times (tests/test_smpi.py);
        # at scale a tune's cost is its launches
        self.sweep = "relaunch" if opts.sweep == "relaunch" else "mpit"

    def before_measuring(self, note: Callable[[str], None]) -> None:
        pass  # no MPI_T to prove, no coll/han

    def comments(self) -> list[str]:
        mpi = self.mpi
        return [
            f"SIMULATED, NOT MEASURED: Open MPI's algorithms as SimGrid SMPI implements them "
            f"on the platform {mpi.platform}",
            "segment sizes and fanouts are the ones SMPI's ports pick internally; "
            "algorithms marked (SMPI's own) are SMPI's implementation of the same pattern",
        ]

    def note_of(self, name: str, d: Decision) -> str:
        return "" if smpi.exact_port(name, d.chosen.algorithm) else " (SMPI's own)"

    def final(self, decisions: Decisions) -> Decisions:
        """Decisions whose chosen configuration carries the segment size and fanout SMPI's
        port used internally, so Open MPI runs what was simulated."""
        out: Decisions = {}
        for name, per_np in decisions.items():
            for np, ds in per_np.items():
                fixed = []
                for d in ds:
                    seg, fan = smpi.smpi_segsize(name, d.chosen.algorithm, np, max(d.size, 0))
                    fixed.append(replace(d, chosen=d.chosen.with_values({SEG: seg, FAN: fan}))
                                 if d.chosen != DEFAULT else d)
                out.setdefault(name, {})[np] = fixed
        return out

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        written = super().write(decisions, predicted)
        written.record["simulated"] = {"platform": str(self.mpi.platform),
                                       "deterministic": True}
        return written
