"""The files capability: what a family reads of the files given to colltune (which family a
file is, `tune check`, `tune explain`, `tune verify`'s two arms, `tune export`, `tune report`'s
sections). A family without it tunes and writes its output, and those commands say it cannot
read one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.records import Decision
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.outfile import Planned

if TYPE_CHECKING:
    from colltune.slots import Placement
    from colltune.store import Context

# a stored context, what was decided there, and when it was measured ("first .. last")
StoredDecisions = tuple["Context", list[Decision], str]
Arms = dict[str, dict[str, str]]  # "default" / "tuned" -> launch environment


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
    notes: list[str] = field(default_factory=list)  # said before anything is launched


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


# what a family's files may refuse (FileFormats.answers): the rest every family answers
REFUSABLE = ("check", "rules_arms", "verify_target", "installable", "decided_rules")


def _nobody(method: str) -> list[str]:
    return []


# the --backend names whose files answer a REFUSABLE method: set by backends/registry.py,
# which knows every family (a family module cannot import it)
ANSWERING: Callable[[str], list[str]] = _nobody


class FileFormats:
    """A family's files, read as the library reads them. Made with the family's Backend
    (`backend`), whose installation search and placement the readers use. A method a
    family's files do not answer refuses with what to do instead."""

    binary_suffixes: tuple[str, ...] = ()  # its outputs that are not text (read: registry)
    export_as: tuple[str, ...] = ()  # --as formats this family's files are converted to

    def __init__(self, backend: Any) -> None:
        self.backend = backend  # the Backend (typed Any: base.py imports this module)

    @property
    def name(self) -> str:
        return str(self.backend.name)

    def answers(self, method: str) -> bool:
        """Whether this family's files answer `method`, one of REFUSABLE: the one place that
        says so (the registry's `answering` asks it of every family, and each refusal
        names those that do)."""
        if method not in REFUSABLE:
            raise ValueError(f"{method} is not one of {REFUSABLE}")
        return getattr(type(self), method) is not getattr(FileFormats, method)

    def refusal(self, method: str, message: str, hint: str) -> ColltuneError:
        """The refusal of `method` by a family whose files do not answer it, naming the
        families whose files do (the registry knows them all: ANSWERING)."""
        names = [n for n in ANSWERING(method) if n != self.name]
        who = ("; it does for --backend " + ", ".join(names)) if names else \
            "; no family here does this yet"
        return ColltuneError(message + who, hint)

    def claims(self, text: str) -> bool:
        """Whether a file's text is this family's output (for commands given a file)."""
        return False

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        """Validate a file as the library reads it (`--mpi`: that installation; `version`:
        the library's). A line the library would refuse raises FormatError with its number."""
        raise self.refusal("check", f"tune check does not read {self.name} files yet",
                           "run the library with the file and read its own errors")

    def layouts_said(self, text: str) -> set[str] | None:
        """The layouts (NODESxPPN) a file's text says it was tuned in; None: it says none."""
        return None

    def explain(self, path: Path, coll: Collective, np: int, size: int
                ) -> tuple[str, dict[str, object]] | None:
        """A call's rule in a file, read without the library; None: read as verify reads."""
        return None

    def rules_arms(self, rules: Path) -> Arms:
        """The two arms of a fresh-launch comparison of the library's choice with a file."""
        raise self.refusal("rules_arms",
                           f"{self.name} has no rules file to compare in fresh launches",
                           "use tune's own confirmation for this MPI family")

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None, launch: Launch | None = None) -> VerifyTarget:
        raise self.refusal("verify_target", f"tune verify does not read {self.name} files yet",
                           "verify the file's decisions with tune's own confirmation")

    def installable(self, req: ExportRequest) -> Installable:
        """The files (and module environment) that install this family's output."""
        raise self.refusal("installable", f"tune export does not install {self.name} files",
                           "install the file tune wrote as the library's documentation says")

    def decided_rules(self, db: Path, name: str, decided: list[StoredDecisions]) -> str:
        """The tuning file a store's decisions make (tune export --from STORE)."""
        raise self.refusal("decided_rules",
                           f"{db} holds {name} measurements; tune export --from a store does "
                           f"not write {self.name} files",
                           "write the file with tune <collective> --from-db --mpi PREFIX "
                           "--out FILE, then export that file")

    def section_text(self, ctx: Context, decisions: list[Decision]) -> tuple[str, str] | None:
        """A stored context's decisions as the family's output shows them, and the format's
        name (tune report); None: its file needs more (counters, ties): tune --from-db."""
        return None
