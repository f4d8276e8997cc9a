"""Which Backend answers for a --backend name, an installation or a stored context.

Adding an MPI family: a folder in backends/ (its backend.py, the Backend, and the
modules it is built from) and a line in BACKENDS and in CHOICES (what --backend offers)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from colltune.backends import base, files
from colltune.backends.base import Backend
from colltune.backends.common import tools
from colltune.backends.impi.backend import ImpiBackend
from colltune.backends.mpich.backend import MPICHBackend
from colltune.backends.mvapich2.backend import MVAPICH2Backend
from colltune.backends.openmpi.backend import OpenMPIBackend
from colltune.backends.openmpi.han_backend import HanBackend
from colltune.backends.openmpi.ucc_backend import UccBackend
from colltune.backends.smpi.backend import SMPIBackend
from colltune.errors import ColltuneError, FormatError, MPIError, read_text
from colltune.store.schema import RENAMES, Rename

if TYPE_CHECKING:
    from colltune.core.toolchain import Installation
    from colltune.slots import Placement
    from colltune.store import Context

# han and ucc first: their keys are Open MPI's with a suffix, and ucc claims UCC's strings
# before Open MPI's files do; Intel MPI before MPICH, which claims any JSON file
BACKENDS: dict[str, Backend[Any]] = {b.name: b for b in (
    HanBackend(), UccBackend(), OpenMPIBackend(), ImpiBackend(), MPICHBackend(), MVAPICH2Backend(),
    SMPIBackend())}

# parameters a family once stored under other names are renamed as its stores open
RENAMES.extend(Rename(b.owns, b.stored_names) for b in BACKENDS.values() if b.stored_names)

# what --backend offers; coll/han and UCC are Open MPI's, chosen with --tune-han, --tune-ucc
CHOICES = ("openmpi", "mpich", "mvapich2", "impi", "smpi")


def having(capability: str) -> list[str]:
    """The --backend names whose family has `capability` ("files", "runtime", "apps",
    "bands", "selects": an attribute of the Backend that is None where a family lacks
    it)."""
    return [n for n in CHOICES if getattr(BACKENDS[n], capability) is not None]


base.FAMILIES_WITH = having  # the hints of the base's refusals name these


def answering(method: str) -> list[str]:
    """The --backend names whose family's files answer `method` (files.REFUSABLE)."""
    return [n for n in CHOICES if (f := BACKENDS[n].files) is not None and f.answers(method)]


files.ANSWERING = answering  # a files refusal names these


def taking(option: str) -> list[str]:
    """The --backend names whose family takes the tune option `option` (a TuneOptions field
    of options.FAMILY_OPTIONS)."""
    return [n for n in CHOICES if option in BACKENDS[n].options]


def backend_help() -> str:
    """--backend's help, from the registered families (a new family is listed unedited)."""
    return ("The MPI family (default: the one installed at --mpi): "
            + ", ".join(f"{n} ({BACKENDS[n].output})" for n in CHOICES) + ".")


def _formats() -> dict[str, str]:
    """Each format and the first family (in CHOICES order) that writes it."""
    out: dict[str, str] = {}
    for n in CHOICES:
        for f in BACKENDS[n].formats:
            out.setdefault(f, n)
    return out


def format_help() -> str:
    """--format's help: every format a family writes, and which."""
    return ("What to write at --out: " + ", ".join(
        f"{f} ({BACKENDS[n].output})" for f, n in _formats().items())
        + "; a format implies the family that writes it; all need --mpi PREFIX.")


def outputs_help() -> str:
    """What `tune export --from` installs: each format's output, as its first writer names
    it (SMPI writes Open MPI's)."""
    return ", ".join(dict.fromkeys(BACKENDS[n].output for n in _formats().values()))


def named(name: str, han: bool = False, ucc: bool = False) -> Backend[Any]:
    """The backend `--backend name` (with --tune-han: coll/han's; --tune-ucc: UCC's)
    selects."""
    if name not in CHOICES:
        raise ColltuneError(f"unknown backend '{name}'",
                            "use --backend " + ", ".join(CHOICES[:-1]) + " or " + CHOICES[-1])
    if han and ucc:
        raise ColltuneError("--tune-han and --tune-ucc tune two components that cannot both "
                            "serve a collective", "choose one")
    if name == "openmpi" and (han or ucc):
        return BACKENDS["han" if han else "ucc"]
    return BACKENDS[name]


def for_format(backend: str, out_format: str | None) -> str:
    """The --backend that writes `out_format`: a format another family writes implies
    that family when --backend was left at its default."""
    if out_format is None:
        return backend
    writers = [name for name in CHOICES if out_format in BACKENDS[name].formats]
    if not writers:
        known = [f for name in CHOICES for f in BACKENDS[name].formats]
        raise ColltuneError(f"unknown --format '{out_format}'",
                            "use " + ", ".join(dict.fromkeys(known)))
    if backend in writers:
        return backend
    if backend == CHOICES[0] and writers:
        return writers[0]
    raise ColltuneError(f"--format {out_format} cannot be written from --backend {backend}",
                        f"use --backend {writers[0]}")


def found_at(prefix: str) -> tuple[list[tuple[str, Installation]], list[str]]:
    """Every family whose installation `prefix` holds (in BACKENDS' order: Open MPI before
    MPICH, as Debian's /usr holds both; Intel MPI before MPICH, whose tools it carries), and
    why each other family found none there. A family's tool that is there and crashed, or
    that the environment makes load another MPI, stops the search (ToolFailed): falling
    through would tune the prefix's other family and write a file the user does not run."""
    found, why = [], []
    for b in BACKENDS.values():
        if b.name not in CHOICES or b.apps is None:  # found by other means (SMPI: --platform)
            continue
        try:
            found.append((b.name, b.apps.find(prefix)))
        except tools.ToolFailed:
            raise
        except MPIError as e:  # looked, found none
            why.append(e.message)
    return found, why


def resolve(backend: str | None, out_format: str | None, prefix: str | None,
            platform: Path | None = None) -> tuple[str, str | None]:
    """The family a command drives, and a note when colltune chose among several: the
    --backend given; else the family that writes --format; else SMPI for --platform; else
    the family installed at --mpi PREFIX; else Open MPI (on PATH, or the wheel)."""
    if platform is not None and backend is None and out_format is None:
        return "smpi", None
    if backend is not None or out_format is not None:
        name = for_format(backend or CHOICES[0], out_format)
        if prefix is not None and platform is None:
            _holds(name, prefix)
        return name, None
    if prefix is None:
        return CHOICES[0], None
    found, why = found_at(prefix)
    if not found:
        # each family's own reason, the prefix written once
        raise MPIError(f"no MPI colltune drives at {prefix} (PREFIX): "
                       + "; ".join(w.replace(str(Path(prefix).expanduser().resolve()), "PREFIX")
                                   .replace(prefix.rstrip("/"), "PREFIX") for w in why),
                       "pass --mpi the prefix of an Open MPI, MPICH, MVAPICH2 or Intel MPI "
                       "installation (the directory holding bin/)")
    (name, mpi), *others = found
    if not others:
        return name, None
    also = ", ".join(f"{m.name} {m.version} (--backend {n})" for n, m in others)
    return name, (f"note: {prefix} holds {mpi.name} {mpi.version} and {also}: this is "
                  f"{mpi.name}'s")


def _holds(name: str, prefix: str) -> None:
    """MPIError, naming what `prefix` holds, where it holds no installation of `name`."""
    apps = BACKENDS[name].apps
    if apps is None:  # a family found by other means (SMPI): its own open says
        return
    try:
        apps.find(prefix)
    except tools.ToolFailed:
        raise
    except MPIError as e:
        found, _ = found_at(prefix)
        if not found:
            raise
        there = ", ".join(f"{m.name} {m.version} (--backend {n})" for n, m in found)
        raise MPIError(f"{e.message}; {prefix} holds {there}",
                       "leave --backend and --format out to tune what is there, or give "
                       "the prefix of the MPI they name") from None


def for_file(path: Path) -> Backend[Any]:
    """The backend whose output `path` is (Open MPI's rules file unless another claims it;
    its reader then says what is wrong)."""
    readers = [(b, b.files) for b in BACKENDS.values() if b.files is not None]
    try:
        text = read_text(path)
    except (OSError, FormatError):  # not text: a family's binary output, by its name
        return next((b for b, f in readers if path.suffix and
                     path.suffix in f.binary_suffixes), BACKENDS["openmpi"])
    # a first line that one family claims alone (a colltune header naming the family)
    # decides: an Open MPI parameter file with an MV2_ line is Open MPI's, and refused there
    head = text.split("\n", 1)[0] + "\n"
    return next((b for b, f in readers if head.startswith("# ") and f.claims(head)),
                next((b for b, f in readers if f.claims(text)), BACKENDS["openmpi"]))


def for_key(mpi_key: str) -> Backend[Any] | None:
    """The backend that made a stored installation key (None: made by none of these)."""
    return next((b for b in BACKENDS.values() if b.owns(mpi_key)), None)


def for_context(ctx: Context) -> Backend[Any] | None:
    """The backend that measured a stored context: as the store recorded it, or (a store
    older than that record) from its installation key."""
    return BACKENDS.get(ctx.backend) or for_key(ctx.mpi_key)


def of(mpi: Installation) -> Backend[Any]:
    """The backend that drives `mpi`."""
    b = for_key(mpi.key)
    if b is None:
        raise ColltuneError(f"no backend drives {mpi.describe()}", "report this")
    return b


def launch(mpi: Installation, placement: Placement, coll: str = "reduce", alg: int = 0,
           env_extra: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """Launcher command line (up to the executable) and environment, as `mpi`'s backend
    makes them: `env_extra` holds the family's variables (SMPI takes `coll` and `alg` on
    smpirun's command line)."""
    return of(mpi).launch(mpi, placement, coll, alg, env_extra)


def waiting_cause(mpi_name: str) -> str:
    """Why an installation's waiting ranks stall when they share cores, as its family
    says ("" when none does: a simulation)."""
    return next((w for b in BACKENDS.values() if (w := b.waiting(mpi_name))), "")
