"""The Backend interface: everything the tuner asks of an MPI family, so generic code never
asks which family it drives.

A Backend answers for an installation (how a configuration is forced, how a job is launched,
whether times are simulated); `open` starts a run and returns a Session: what the run found
(installation, catalog, placements), turning decisions into the family's files.

Over 400 lines: the interface and every default in one place, until issue 63 splits the
Backend into a small core and the capabilities a family has or lacks (runtime, files);
trimming it to the number would only hide that."""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.records import Decision
from colltune.core.runtime import Knob, Setting
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.outfile import Planned, write_atomic
from colltune.slots import place

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context, Measurement, Store

Decisions = dict[str, dict[int, list[Decision]]]  # collective -> comm size -> per size
# a stored context, what was decided there, and when it was measured ("first .. last")
StoredDecisions = tuple["Context", list[Decision], str]
Arms = dict[str, dict[str, str]]  # "default" / "tuned" -> launch environment
M = TypeVar("M", bound=Installation)  # a family's own installation class


@dataclass
class VerifyTarget:
    """What `tune verify` needs to compare a file with the library's own choice."""

    mpi: Installation
    catalog: Catalog
    collectives: list[str]  # what the file tunes
    arms: Arms  # the library's own choice, and the file
    placement: Placement
    # what the file says for (collective, comm size, per-rank size); None: nothing
    rule_at: Callable[[Collective, int, int], Config | None]
    # (collective, comm size, sizes) -> (applied | not applied | default everywhere |
    # unproven, why): the library's proof that it runs what the file says
    applied: Callable[[Collective, int, list[int]], tuple[str, str]]
    whole: bool = False  # sizes the file leaves to the library may run otherwise: test all


@dataclass(frozen=True)
class ExportRequest:
    """What `tune export` asks a family for: the files that install one tuned output."""

    source: Path  # the file given with --from
    stamp: str  # "written by colltune V from SOURCE, WHEN": goes into every file
    site: Path | None  # --site DIR; None: --user, into the user's own files under `home`
    home: Path
    as_format: str | None = None  # --as: the output converted for another family
    at_size: int | None = None  # --for-size of that conversion
    text: str | None = None  # the tuning file decided from a store (instead of `source`)
    mpi: str | None = None  # --mpi: the installation the files are for (checked against it)


@dataclass(frozen=True)
class Checked:
    """What `tune check` says of a valid file: what it holds, as a phrase and as JSON
    (with "format"), and what the library would read differently from what it says."""

    what: str
    doc: dict[str, object]
    warnings: list[str]


@dataclass(frozen=True)
class Installable:
    files: list[Planned]
    env: dict[str, str]  # what an environment module sets for the same effect
    title: str  # what the module says it is


def who_can(method: str) -> str:
    """A hint naming the families whose backend has `method`: the registry, which knows
    them all, answers (it sets FAMILIES_WITH; a family module cannot import it), so the
    names cannot go stale as families come."""
    names = FAMILIES_WITH(method)
    return ("use --backend " + ", ".join(names[:-1]) + (" or " if len(names) > 1 else "")
            + names[-1]) if names else "no family here does this yet"


def _nobody(method: str) -> list[str]:
    return []


FAMILIES_WITH: Callable[[str], list[str]] = _nobody  # set by backends/registry.py


class Backend(ABC, Generic[M]):
    """One MPI family driving its installations (`M`): attributes say what it can do."""

    name: str = ""  # what --backend (or --tune-han for coll/han) selects
    exact = False  # simulated: a time is deterministic, no test and no fresh launch needed
    mpit_sweep = True  # configurations are switched through MPI_T inside one launch
    pvar_prefix = ""  # MPI_T performance variables that say which algorithm ran
    # waiting ranks spin instead of yielding: oversubscribed, every call waits for the
    # scheduler (milliseconds) and timings rank scheduling as much as algorithms
    busy_polls = False
    # measure on MPI_COMM_WORLD where no MPI_T write needs a duplicate (Intel MPI: bcast
    # 16 KiB preset 7 1.5x faster on a duplicate, 1.2x slower on WORLD, where apps call)
    on_world = False
    # a file the library reads names a configuration per message size: a launch runs
    # several, each at sizes of its own (`banded_env`, tuner/bands.py)
    by_size = False
    formats: tuple[str, ...] = ()  # what --format names its output (first: the canonical)
    short = ""  # in file names the report writes
    export_as: tuple[str, ...] = ()  # --as formats this family's files are converted to
    output = "a tuning file"  # what its output is called, for messages
    # installation name -> how its ranks wait in a collective: why a default can look far
    # slower than a forced algorithm on shared cores (MPICH 5.0.2, 4 ranks on 2: 10-1560 ms)
    waits: dict[str, str] = {}
    own_launcher: str | None = None  # its launcher; None: srun in an allocation, else mpirun
    stored_names: dict[str, str] = {}  # parameter: its name in older stores -> today's
    binary_suffixes: tuple[str, ...] = ()  # its outputs that are not text (read: registry)

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

    def banded_env(self, coll: Collective, np: int, at: dict[int, Config], folder: Path
                   ) -> dict[str, str]:
        """(`by_size`) Launch environment that runs `at[size]` at each of its sizes, from
        a file written in `folder`."""
        raise NotImplementedError

    def rules_arms(self, rules: Path) -> Arms:
        """The two arms of a fresh-launch comparison of the library's choice with a file."""
        raise ColltuneError(f"{self.name} has no rules file to compare in fresh launches",
                            "use tune's own confirmation for this MPI family")

    @abstractmethod
    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[M]:
        """Find the installation and its catalog, place the ranks, refuse what does not
        apply to this family."""

    def find(self, prefix: str | None) -> M:
        """The installation at `prefix` (None: the family's own search rules), for commands
        that run the user's program rather than tune (tune profile)."""
        raise ColltuneError(f"tune profile does not run {self.name} applications",
                            who_can("find"))

    def launcher_env(self, env: dict[str, str]) -> list[str]:
        """Options of this family's own launcher (mpirun, mpiexec) that give every rank
        `env`, placed right after the launcher's name."""
        raise ColltuneError(f"colltune cannot pass settings through {self.name}'s launcher",
                            who_can("launcher_env"))

    def read_back(self, env: dict[str, str]) -> dict[str, str]:
        """The library's own names (MPI_T control variables) of the settings `env` makes,
        with the value a job launched with `env` must read back ({}: not provable for this
        family): how tune verify --app knows each arm ran as asked."""
        return {}

    def chooser(self, mpi: M, cmd: list[str], env: dict[str, str]
                ) -> Callable[[str, int, int], str] | None:
        """What the library runs for (collective, communicator size, per-rank size) in a
        job launched as `cmd` with `env`, as far as its settings say (None: not known)."""
        return None

    def claims(self, text: str) -> bool:
        """Whether a file's text is this family's output (for commands given a file)."""
        return False

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        """Validate a file as the library reads it (`--mpi`: that installation; `version`:
        the library's). A line the library would refuse raises FormatError with its number."""
        raise ColltuneError(f"tune check does not read {self.name} files yet",
                            "run the library with the file and read its own errors")

    def explain(self, path: Path, coll: Collective, np: int, size: int
                ) -> tuple[str, dict[str, object]] | None:
        """A call's rule in a file, read without the library; None: read as verify reads."""
        return None

    def installable(self, req: ExportRequest) -> Installable:
        """The files (and module environment) that install this family's output."""
        raise ColltuneError(f"tune export does not install {self.name} files",
                            "install the file tune wrote as the library's documentation says")

    def decided_rules(self, db: Path, name: str, decided: list[StoredDecisions]) -> str:
        """The tuning file a store's decisions make (tune export --from STORE)."""
        raise ColltuneError(f"{db} holds {name} measurements; tune export --from a store "
                            "writes Open MPI rules only",
                            "write the file with tune <collective> --from-db --mpi PREFIX "
                            "--out FILE, then export that file")

    def section_text(self, ctx: Context, decisions: list[Decision]) -> tuple[str, str] | None:
        """A stored context's decisions as the family's output shows them, and the format's
        name (tune report); None: its file needs more (counters, ties): tune --from-db."""
        return None

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None, launch: Launch | None = None) -> VerifyTarget:
        raise ColltuneError(f"tune verify does not read {self.name} files yet",
                            "verify the file's decisions with tune's own confirmation")

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

    # -- runtime parameters (tune runtime): job-wide settings, declared like the catalog

    def runtime_knobs(self, mpi: M) -> list[Knob]:
        """The runtime parameters colltune tunes for this installation."""
        raise ColltuneError(f"tune runtime does not tune {self.name} yet",
                            who_can("runtime_knobs"))

    def runtime_vouch(self, mpi: M, name: str) -> Knob | None:
        """An undeclared parameter the installation lists (None: the library has none)."""
        return None

    def runtime_refuse(self, mpi: M, knobs: list[Knob], cmd: list[str]) -> None:
        """Refuse, before any launch, a knob unknown here (ignored silently) or set by `cmd`."""
        return None

    def runtime_environ(self, mpi: M, knobs: dict[str, Knob], setting: Setting,
                        base: dict[str, str]) -> dict[str, str]:
        """The launcher's whole environment (from `base`) that applies `setting`: every
        inherited value of a tuned knob removed, the setting's non-default values added."""
        raise ColltuneError(f"tune runtime does not tune {self.name} yet",
                            who_can("runtime_environ"))

    def runtime_own(self, cmd: list[str], knobs: dict[str, Knob]) -> list[str]:
        """colltune's own launch command without what it sets for a knob searched."""
        return cmd

    def runtime_readback(self, mpi: M, knob: Knob, value: str) -> set[str]:
        """What the knob's control variable reads back in a rank when `value` applied."""
        return {value}

    def runtime_log_env(self, knobs: list[Knob]) -> dict[str, str]:
        """Launcher variables that make the library log the `component` knobs in charge."""
        return {}

    def runtime_logged(self, knob: Knob, value: str, log: str) -> tuple[bool, str]:
        """Whether the library's log (stderr) shows `value` of a `component` knob in effect."""
        return False, f"{self.name} logs nothing colltune reads"

    def runtime_cpus(self, knob: Knob, value: str) -> Callable[[int], bool] | None:
        """For a binding knob: whether a rank's CPU count fits `value` (None: not known)."""
        return None

    def runtime_write(self, mpi: M, knobs: dict[str, Knob], setting: Setting,
                      rules: Path | None, out: Path, notes: list[str]) -> dict[str, object]:
        """Write `setting` (and the settings that load `rules`) into the files sites install,
        at `out` and beside it; returns what was written (what, also, use)."""
        raise ColltuneError(f"tune runtime does not write {self.name} files yet",
                            who_can("runtime_write"))

    def runtime_read(self, path: Path) -> tuple[Setting, Path | None] | None:
        """The setting (and rules file) a tune runtime file holds; None: not this family's."""
        return None


class Session(ABC, Generic[M]):
    """One tuning run on one installation: what was found, and the family's outputs."""

    backend: Backend[M]
    mpi: M
    catalog: Catalog
    placements: list[Placement]
    rules_version = 0  # Open MPI's rules format version; 0 where the family has none
    sweep = "mpit"
    fill_within = 0.5  # how much slower than the default a fill may be shown (fills())

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
    def write(self, decisions: Decisions, summary: dict[str, object],
              predicted: dict[tuple[str, int], str]) -> None:
        """Write the family's files at --out (and beside it), adding what was written to
        `summary` (its "wrote": what, the file beside, how to use it, notes)."""


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


def refuse(opts: TuneOptions, family: str) -> None:
    """Refuse the options that name Open MPI's own rules formats and components."""
    for bad, what in ((opts.tune_han, "--tune-han"), (opts.rules_version, "--rules-version")):
        if bad:
            raise ColltuneError(f"{what} does not apply to --backend {family}",
                                "coll/han and the rules file versions are Open MPI's")
