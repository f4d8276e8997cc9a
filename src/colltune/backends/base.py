"""The Backend interface's core: what the tuner asks of every MPI family, so generic code
never asks which family it drives.

A Backend answers for an installation (how a configuration is forced, how a job is
launched) and says how its measurements behave (`Traits`); `open` finds the installation,
starts a run and returns a Session: what the run found (installation, catalog, placements), turning
decisions into the family's files. What only some families do is a capability a Backend
has or lacks (None): `files` (files.py), `runtime` (runtime.py), `apps` (apps.py),
`bands` (banded.py) and `selects` (selecting.py); `Traits` never says what a family can
do."""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from colltune.backends.apps import AppSupport
from colltune.backends.banded import BandSupport
from colltune.backends.files import Arms, FileFormats
from colltune.backends.runtime import RuntimeSupport
from colltune.backends.selecting import SelectSupport
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.records import Decision
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.outfile import write_atomic
from colltune.slots import place

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context, Measurement, Store

Decisions = dict[str, dict[int, list[Decision]]]  # collective -> comm size -> per size
M = TypeVar("M", bound=Installation)  # a family's own installation class


def who_can(capability: str) -> str:
    """A hint naming the families that have `capability`: the registry, which knows them
    all, answers (it sets FAMILIES_WITH; a family module cannot import it), so the names
    cannot go stale as families come."""
    names = FAMILIES_WITH(capability)
    return ("use --backend " + ", ".join(names[:-1]) + (" or " if len(names) > 1 else "")
            + names[-1]) if names else "no family here does this yet"


def _nobody(capability: str) -> list[str]:
    return []


FAMILIES_WITH: Callable[[str], list[str]] = _nobody  # set by backends/registry.py


@dataclass(frozen=True)
class Traits:
    """How a family's measurements behave, which the pipeline adapts to without asking
    which family it drives."""

    exact: bool = False  # simulated: a time is deterministic, no test and no fresh launch
    pvar_prefix: str = ""  # MPI_T performance variables that say which algorithm ran
    # waiting ranks spin instead of yielding: oversubscribed, every call waits for the
    # scheduler (milliseconds) and timings rank scheduling as much as algorithms
    busy_polls: bool = False
    # measure on MPI_COMM_WORLD where no MPI_T write needs a duplicate (Intel MPI: bcast
    # 16 KiB preset 7 1.5x faster on a duplicate, 1.2x slower on WORLD, where apps call)
    on_world: bool = False


class Backend(ABC, Generic[M]):
    """One MPI family driving its installations (`M`): the core every family has (catalog,
    launch, force, open a session), its `traits`, and the optional capabilities it has or
    lacks (None): `files` (check, explain, verify, export, report its files), `runtime`
    (tune runtime), `apps` (run a program colltune did not build: tune profile, tune app,
    verify --app, compare, model fit), `bands` (a configuration per message size in one
    launch: --sweep bands) and `selects` (algorithms switched by name inside one launch)."""

    name: str = ""  # what --backend (or --tune-han for coll/han) selects
    traits = Traits()
    runtime: RuntimeSupport[M] | None = None  # job-wide parameters (tune runtime)
    files: FileFormats | None = None  # files given to colltune: set by __init__ from Files
    Files: type[FileFormats] | None = None  # the family's FileFormats class
    apps: AppSupport[M] | None = None  # programs colltune did not build (tune profile)
    bands: BandSupport | None = None  # a configuration per message size (--sweep bands)
    selects: SelectSupport | None = None  # algorithms by name inside a running job
    formats: tuple[str, ...] = ()  # what --format names its output (first: the canonical)
    short = ""  # in file names the report writes
    output = "a tuning file"  # what its output is called, for messages
    # installation name -> how its ranks wait in a collective: why a default can look far
    # slower than a forced algorithm on shared cores (MPICH 5.0.2, 4 ranks on 2: 10-1560 ms)
    waits: dict[str, str] = {}
    own_launcher: str | None = None  # its launcher; None: srun in an allocation, else mpirun
    stored_names: dict[str, str] = {}  # parameter: its name in older stores -> today's
    # what `tune all` tunes with this family (None: every collective colltune measures)
    collectives: tuple[str, ...] | None = None
    # the family's own tune options (options.FAMILY_OPTIONS' fields) it takes: any other one
    # set is refused before the run opens, naming the families that take it
    options: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.files = self.Files(self) if self.Files is not None else None

    def with_files(self) -> FileFormats:
        """Its files capability, or a refusal naming the families that have one."""
        if self.files is None:
            raise ColltuneError(f"colltune reads no {self.name} files: check, explain, "
                                "verify, export and report cannot take one",
                                who_can("files"))
        return self.files

    def with_runtime(self) -> RuntimeSupport[M]:
        """Its runtime capability, or a refusal naming the families that have one."""
        if self.runtime is None:
            raise ColltuneError(f"tune runtime does not tune {self.name}", who_can("runtime"))
        return self.runtime

    def with_apps(self) -> AppSupport[M]:
        """Its apps capability, or a refusal naming the families that have one."""
        if self.apps is None:
            raise ColltuneError(f"colltune runs no program of its users on {self.name}: "
                                "tune profile, tune app, verify --app, compare and model fit "
                                "need a real MPI", who_can("apps"))
        return self.apps

    def place(self, np: int, hostfile: str | None = None, launch: Launch | None = None
              ) -> Placement:
        """`np` ranks placed for this family's own launcher, unless `launch` names one."""
        want = launch or Launch()
        return place(np, hostfile,
                     launch=replace(want, launcher=want.launcher or self.own_launcher))

    def rule_size(self, coll: Collective, size: int, np: int) -> int:
        """What the family's rules compare for a per-rank block of `size` bytes."""
        return size

    def waiting(self, mpi_name: str) -> str:
        """Why this family's waiting ranks stall when they share cores ("" for a
        simulation, whose times are not scheduled, or a name not this family's)."""
        return self.waits.get(mpi_name, "")

    @abstractmethod
    def launch(self, mpi: M, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        """Launcher command line (up to the executable) and environment."""

    def mpit_env(self) -> dict[str, str]:
        """Launch environment of a job whose configurations are written through MPI_T."""
        return {}

    def mpit_vars(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, int]:
        """The MPI_T writes that run `cfg` (nothing: the library's own choice)."""
        return {}

    @abstractmethod
    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        """Launch environment that runs `cfg` for the whole job."""

    @abstractmethod
    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[M]:
        """Find the installation and its catalog, place the ranks, refuse what does not
        apply to this family."""

    def plan_catalog(self, colls: list[str]) -> Catalog | None:
        """The catalog a plan is counted with before any installation is read (a batch
        script's time limit); None: only the installation knows."""
        return None

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        """The catalog that names a stored context's algorithms, from `names` (what the
        store recorded when it was measured) or what the family knows without running
        anything (None: ids only). Never runs a program: a stored path is data."""
        return Catalog(algorithms=names, source="store") if names else None

    def owns(self, mpi_key: str) -> bool:
        """Whether a stored installation key was made by this family."""
        return mpi_key.startswith(f"{self.name}-")

@dataclass
class Written:
    """What a Session wrote, for the run's summary: what (and its path where that is not
    --out), the file beside it, how it is used, its notes; the family's own record (its
    keys of the summary JSON: "mpich", "sections", ...); and per collective the confirmed
    wins the file could not carry (None: it carries every one)."""

    what: str
    also: str | None = None
    use: str | None = None
    notes: list[str] = field(default_factory=list)
    path: str | None = None
    record: dict[str, object] = field(default_factory=dict)
    not_carried: dict[str, int] | None = None

    def into(self, summary: dict[str, object]) -> None:
        """The summary's keys, as the CLI prints them and --summary-json keeps them."""
        summary.update(self.record)
        if self.not_carried is not None:
            summary["not_carried"] = self.not_carried
        wrote: dict[str, object] = {"what": self.what, "also": self.also, "use": self.use,
                                    "notes": self.notes}
        if self.path is not None:
            wrote["path"] = self.path
        summary["wrote"] = wrote


class Session(ABC, Generic[M]):
    """One tuning run on one installation: what was found, and the family's outputs."""

    backend: Backend[M]
    mpi: M
    catalog: Catalog
    placements: list[Placement]
    rules_version = 0  # Open MPI's rules format version; 0 where the family has none
    # how configurations are switched: "mpit" (through MPI_T inside one launch), "relaunch"
    # (a launch each: a family whose library reads its choice once, or that has no MPI_T
    # variables, sets it in its Session) or "bands" (a file naming one per message size)
    sweep = "mpit"
    fill_within = 0.5  # how much slower than the default a fill may be shown (fills())
    # whether the file written holds each layout's rules apart (the library choosing by
    # the job's layout): --layouts then writes all into --out, else one file per layout
    says_layout = False

    def before_measuring(self, note: Callable[[str], None]) -> None:
        """Checks and notes before the first launch (the kernel is built already)."""
        return None

    def grid(self, opts: TuneOptions) -> dict[str, list[int]]:
        """A search's values per parameter: --param, --segsizes, what the output can say."""
        return self.catalog.grid(opts.params, opts.segsizes)

    def decided(self, name: str, placement: Placement, ds: list[Decision],
                ms: list[Measurement], store: Store, ctx: Context) -> list[Decision]:
        """Decisions after the sweep, before fresh launches confirm them."""
        return ds

    def fills(self, name: str, placement: Placement, ds: list[Decision]
              ) -> list[tuple[int, Config]]:
        """(size, configuration) the family's file names where the default was kept (no
        "library's choice" entry): fresh pairs show each within `fill_within` of it."""
        return []

    def confirmed(self, name: str, placement: Placement, ds: list[Decision]
                  ) -> list[Decision]:
        """Decisions after fresh launches judged them."""
        return ds

    def final(self, decisions: Decisions) -> Decisions:
        """The decisions as the family's files carry them (and the summary reports)."""
        return decisions

    def unexpressed(self, coll: Collective, placement: Placement, ds: list[Decision]
                    ) -> str:
        """Why the family's file cannot carry `ds` (its arms would launch the library's
        default twice); "" if it does not know, or just turned to a file that can carry it."""
        return ""

    @abstractmethod
    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        """The library's choice against `ds`, as two launch environments; a file the tuned
        arm reads is written at `path`."""

    @abstractmethod
    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        """Write the family's files at --out (and beside it); say what was written."""


def hydra_placements(opts: TuneOptions) -> list[Placement]:
    """Each --np placed for a Hydra-launched family (MPICH, MVAPICH2): mpiexec unless
    --launcher names another."""
    launch = opts.launch or Launch()
    launch = replace(launch, launcher=launch.launcher or "mpiexec")
    return [place(np, opts.hostfile, launch=launch) for np in opts.nps]


def stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def provenance(mpi: Installation) -> str:
    """The comment line that says where and with what a file was tuned."""
    return (f"tuned on {socket.gethostname()} with {mpi.name} {mpi.version} "
            f"({mpi.prefix}), {stamp()}")


def decision_comments(decisions: Decisions, catalog: Catalog,
                      only_np: int | None = None) -> list[str]:
    """One comment per decision: collective, comm size, size, choice and verdict."""
    out = []
    for name, per_np in decisions.items():
        for np, ds in sorted(x for x in per_np.items() if only_np in (None, x[0])):
            where = f"{name}" if only_np is not None else f"{name} np={np}"
            for d in sorted(ds, key=lambda d: d.size):
                out.append(f"{where} {d.size} B: {d.chosen.label(catalog, name)}; {d.verdict}")
    return out


def write_file(path: Path, text: str | bytes, option: str) -> None:
    try:
        write_atomic(path, text)
    except OSError as e:
        raise ColltuneError(f"cannot write {option} {path}: {e.strerror or e}",
                            f"free space or choose a writable {option}; measurements are in "
                            "the store, so rerun with --from-db to write without "
                            "measuring") from None
