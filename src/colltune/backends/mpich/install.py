"""MPICH: find an installation, read its algorithm catalog through MPI_T, force configurations,
launch with Hydra's mpiexec.

MPICH reads `MPIR_CVAR_<COLL>_INTRA_ALGORITHM` on every call, so the kernel switches
algorithms through MPI_T inside one launch. The values are enumerations without an MPI_T
enum object: their order is the order of the names in the variable's description, which is
therefore parsed. `MPIR_CVAR_<COLL>_DEVICE_COLLECTIVE=0` goes with every forced algorithm,
or the device (CH4) would route the calls around the MPIR algorithm chosen; other
collectives keep the device path (MPIR_CVAR_DEVICE_COLLECTIVES stays `percoll`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.common import tools
from colltune.core.catalog import CHUNK, RADIX, SEGMENT_GRID, Catalog, Param
from colltune.core.config import Config
from colltune.core.toolchain import HydraToolchain
from colltune.errors import ColltuneError, MPIError
from colltune.rules.mpich_names import (  # noqa: F401 (what the backend's users name)
    JSON_VAR,
    KNOBS,
    PARAMS,
    algorithm_var,
    device_var,
)

if TYPE_CHECKING:
    from colltune.slots import Placement

INSTALL_HINT = ("install one (pip install mpich into its own venv, or apt-get install mpich "
                "libmpich-dev) and point at it with --mpi PREFIX")

# a forced algorithm whose conditions a call does not meet fails the call (the kernel marks
# that point invalid) instead of silently running MPICH's own choice under its name
FALLBACK = {"MPIR_CVAR_COLLECTIVE_FALLBACK": "error"}
# algorithms that need hardware or libraries a tuning file cannot assume
SKIPPED = {"ccl"}


# radices tried beside the launch value, up to the comm size (k = np is one round, or a flat
# tree: a larger k changes nothing)
RADICES = (2, 3, 4, 8, 16, 32, 64, 128)




@dataclass(frozen=True)
class MPICH(HydraToolchain):
    """One MPICH installation, identified by its real binaries."""

    version: str
    prefix: Path
    mpicc: Path
    mpirun: Path  # Hydra's mpiexec
    mpichversion: Path
    name: str = "MPICH"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])

    @property
    def key(self) -> str:
        return f"{self.name.lower()}-{self.version}@{self.prefix}"

    def describe(self) -> str:
        return f"{self.name} {self.version} at {self.prefix} (mpiexec {self.mpirun})"

    def tool_env(self) -> dict[str, str]:
        return launch_env()


def _tool(bindir: Path, *names: str) -> Path | None:
    """The first of `names` in bindir; Debian's `name.mpich` comes first because the
    unsuffixed name may be the alternatives link to Open MPI."""
    for n in names:
        p = bindir / n
        if p.exists() and os.access(p, os.X_OK):
            return p
    return None


def _from_bindir(bindir: Path) -> MPICH | None:
    """The MPICH whose tools bindir holds; None where one is missing; MPIError (naming what
    it said) where mpichversion answers as another library."""
    ver = _tool(bindir, "mpichversion.mpich", "mpichversion")
    mpicc = _tool(bindir, "mpicc.mpich", "mpicc")
    mpiexec = _tool(bindir, "mpiexec.mpich", "mpiexec.hydra", "mpiexec")
    if not (ver and mpicc and mpiexec):
        return None
    out = tools.ask([str(ver)], bindir.parent, "MPICH", timeout=30)
    m = re.search(r"^(MPICH|MVAPICH) Version:\s*(\S+)", out, re.M)
    if not m:
        if "MVAPICH2 Version" in out:
            return None  # MVAPICH2's own: backends/mvapich2/install.py
        raise tools.not_answered(ver, out, "MPICH", bindir.parent)
    found = MPICH(m.group(2), bindir.parent, mpicc, mpiexec, ver, name=m.group(1))
    if found.name == "MVAPICH" and found.version_tuple[:1] < (4,):
        # MVAPICH 3 selects through its own MVP_ variables, not MPICH's csel
        raise MPIError(f"{found.describe()} is MVAPICH 3, which MPICH's variables and "
                            "tuning file do not drive",
                            "tune with MVAPICH2 (--format mvapich2) and carry the profile over "
                            "with `tune export --as mvapich3`")
    return found


def find_mpich(prefix: str | Path | None) -> MPICH:
    """The MPICH under --mpi PREFIX (MPICH is never guessed from PATH: Debian installs it
    beside Open MPI behind the same names), or an MVAPICH 4, which is MPICH underneath
    (its `mpichversion` says "MVAPICH Version: 4...")."""
    if not prefix:
        raise ColltuneError("--backend mpich needs --mpi PREFIX", INSTALL_HINT)
    root = Path(prefix).expanduser()
    for bindir in (root / "bin", root):
        if bindir.is_dir():
            found = _from_bindir(bindir)
            if found:
                return found
    bindir = root / "bin"
    missing = [n for n, names in (("mpichversion", ("mpichversion.mpich", "mpichversion")),
                                  ("mpicc", ("mpicc.mpich", "mpicc")),
                                  ("mpiexec", ("mpiexec.mpich", "mpiexec.hydra", "mpiexec")))
               if not _tool(bindir, *names)]
    why = (f"missing {', '.join(missing)} in {bindir}" if missing else
           "its mpichversion names MVAPICH2: --backend mvapich2")
    raise MPIError(f"no MPICH found under {root} ({why})", INSTALL_HINT)


# ---------------------------------------------------------------------------
# Catalog from the library's own MPI_T descriptions
# ---------------------------------------------------------------------------


def parse_choices(description: str) -> list[str]:
    """The names of an enumerated MPICH variable in value order (value = position).

    MPICH lists them one per line as `name   - text`. Some builds (Debian's 4.0.2) lose
    the line breaks, gluing each name to the end of the previous line; the names are padded
    to one column width, so a glued name is the last (width - padding) characters, and the
    width is read from the entry that follows the closing parenthesis of `auto`'s line."""
    lines = [ln for ln in description.splitlines() if re.match(r"^\w+\s+- ", ln)]
    if len(lines) >= 2:
        return [ln.split()[0] for ln in lines]
    entries = [(m.group(1), len(m.group(2)), description[m.end():])
               for m in re.finditer(r"(\S+?)( +)- ", description)]
    width = next((len(t) - t.rfind(")") - 1 + pad for t, pad, _ in entries if ")" in t), None)
    names = []
    for token, pad, rest in entries:
        if rest.startswith("Internal algorithm selection"):
            names.append("auto")
        elif ")" in token:
            names.append(token[token.rfind(")") + 1:])
        elif width and 0 < width - pad <= len(token):
            names.append(token[len(token) - (width - pad):])
        else:
            names.append(token)
    return names


def _list(exe: Path, text: str, env: dict[str, str] | None = None) -> list[dict]:
    try:
        res = subprocess.run([str(exe), "--cvars", text], capture_output=True, text=True,
                             timeout=60, env=launch_env(env), check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MPIError(f"cannot list MPI_T variables with {exe}: {e}",
                            "check that the kernel runs outside mpiexec") from None
    out = []
    for line in res.stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def init_refusal(exe: Path, tuning_file: Path) -> str | None:
    """Why the MPICH `exe` is built for aborts in MPI_Init on `tuning_file`, in its own
    last words, or None when it starts. The library is the judge: which keys, algorithm
    names and parameters its csel reader takes differs by version (4.0.2 asserts on
    comm_avg_ppn, which 4.2 on read), and an unknown one aborts every job."""
    env = launch_env({JSON_VAR: str(tuning_file.resolve())})
    try:
        res = subprocess.run([str(exe), "--init"], capture_output=True, text=True,
                             timeout=60, env=env, check=False)
    except subprocess.TimeoutExpired:
        return "MPI_Init did not return within 60 s"
    except OSError as e:
        raise MPIError(f"cannot run {exe}: {e}", "check that the kernel runs outside "
                       "mpiexec") from None
    if res.returncode == 0 and res.stdout.strip() == "ok":
        return None
    said = [ln.strip() for ln in (res.stderr + res.stdout).splitlines()
            if ln.strip() and not ln.lstrip().startswith(("/", "./", "[", "("))]
    why = next((ln for ln in said if "ssert" in ln or "rror" in ln), said[-1] if said else "")
    return f"exit {res.returncode}" + (f": {why[:160]}" if why else "")


def read_cvars(exe: Path, text: str) -> dict[str, str]:
    """name -> description of the MPI_T control variables whose name contains `text`, as
    the kernel built for this MPICH lists them."""
    return {d["name"]: d["description"] for d in _list(exe, text)}


def value_of(exe: Path, var: str, setting: str) -> int | None:
    """The integer MPICH gives `var` when the environment sets it to `setting` (how an
    enumeration's value is read from the library itself)."""
    for d in _list(exe, var, {var: setting}):
        if d["name"] == var:
            return d.get("value")
    return None


def containers(library: Path) -> set[str]:
    """The algorithm names the library's tuning-file reader knows (`MPIR_Reduce_intra_...`):
    found among the strings of the shared library."""
    data = library.read_bytes()
    return {m.decode() for m in re.findall(rb"MPIR_[A-Z][a-z_]*_(?:intra|allcomm)_[a-z0-9_]+",
                                           data)}


def container_name(coll: str, name: str, known: set[str]) -> str | None:
    """The name a tuning file gives algorithm `name` of `coll`; without the library's
    strings to check against (`known` empty), the usual intra-communicator form."""
    base = coll[0].upper() + coll[1:]
    for kind in ("intra", "allcomm"):
        cand = f"MPIR_{base}_{kind}_{name}"
        if cand in known:
            return cand
    return None if known else f"MPIR_{base}_intra_{name}"


@dataclass
class MPICHCatalog(Catalog):
    """Algorithms per collective (id = the variable's value) and the csel container name of
    each (what a tuning file names)."""

    container: dict[str, dict[int, str]] | None = None
    library: Path | None = None
    not_selectable: dict[str, list[str]] | None = None
    builtin: dict | None = None  # MPICH's compiled-in selection table
    # container -> the parameters its tuning-file leaf must carry (PARAMS, valued)
    params: dict[str, dict[str, str]] | None = None
    # collective -> algorithm id -> RADIX (k) / CHUNK (chunk size) -> the variable setting it
    knobs: dict[str, dict[int, dict[str, str]]] | None = None

    def declared(self) -> tuple[Param, ...]:
        # the pipeline chunk size and the radix k (stores before 0.2 named them as
        # coll/tuned's segment size and fanout: store/schema.py renames them)
        return (Param(CHUNK, "chunk", below_message=True), Param(RADIX, "k"))

    def uses(self, coll: str, alg: int, param: str) -> bool:
        return param in (self.knobs or {}).get(coll, {}).get(alg, {})

    def _launch_value(self, coll: str, alg: int, param: str) -> int | None:
        cont = (self.container or {}).get(coll, {}).get(alg)
        key = next((k for k, p in KNOBS.items() if p == param), None)
        text = (self.params or {}).get(cont or "", {}).get(key or "")
        return int(text) if text and text.lstrip("-").isdigit() else None

    def param_values(self, coll: str, alg: int, np: int, grid: dict[str, list[int]]
                ) -> dict[str, list[int]]:
        """Chunk sizes asked for and the radices up to the comm size, without the launch
        values (0 stands for them)."""
        chunk, radix = self._launch_value(coll, alg, CHUNK), self._launch_value(coll, alg, RADIX)
        values = {CHUNK: [s for s in grid.get(CHUNK, SEGMENT_GRID) if s == 0 or s != chunk],
                  RADIX: grid.get(RADIX, [0] + [k for k in RADICES
                                               if k <= max(np, 2) and k != radix])}
        return {p: v for p, v in values.items() if self.uses(coll, alg, p)}

    def assignments(self, coll: str, cfg: Config) -> dict[str, int]:
        """The MPI_T writes that run one configuration (MPICH reads them on every call)."""
        out = dict(self.forcing[coll][cfg.algorithm]) if cfg.algorithm else {}
        knobs = (self.knobs or {}).get(coll, {}).get(cfg.algorithm, {})
        for param, value in sorted(cfg.params, key=lambda nv: nv[0] != RADIX):
            if param in knobs:
                out[knobs[param]] = value
        return out

    def leaf_overrides(self, coll: str, cfg: Config) -> dict[str, str]:
        """The tuning-file leaf parameters that differ from the launch values."""
        knobs = (self.knobs or {}).get(coll, {}).get(cfg.algorithm, {})
        return {key: str(cfg.get(param)) for key, param in KNOBS.items()
                if cfg.get(param) and param in knobs
                and cfg.get(param) != self._launch_value(coll, cfg.algorithm, param)}


def catalog(exe: Path, library: Path | None, collectives: list[str]) -> MPICHCatalog:
    cvars = read_cvars(exe, "_INTRA_ALGORITHM")
    devices = read_cvars(exe, "_DEVICE_COLLECTIVE")
    known = containers(library) if library else set()
    values = _setting_values(exe)
    cat = MPICHCatalog(source="MPI_T", container={}, library=library, not_selectable={},
                       params={}, knobs={})
    assert cat.container is not None and cat.not_selectable is not None
    assert cat.params is not None and cat.knobs is not None
    for coll in collectives:
        var = algorithm_var(coll)
        if var not in cvars or device_var(coll) not in devices:
            continue
        names = parse_choices(cvars[var])
        algs: dict[int, str] = {}
        for i, n in enumerate(names):
            if n in ("auto", *SKIPPED):
                continue
            cont = container_name(coll, n, known)
            if cont is None:
                cat.not_selectable.setdefault(coll, []).append(n)
                continue
            if cont in PARAMS:
                got = {k: values.get(v) for k, v in PARAMS[cont]}
                if any(x is None for x in got.values()):
                    # its leaf could not be written completely: never chosen
                    cat.not_selectable.setdefault(coll, []).append(n)
                    continue
                cat.params[cont] = {k: str(x) for k, x in got.items()}
                knobs = {KNOBS[k]: v for k, v in PARAMS[cont] if k in KNOBS}
                if knobs:
                    cat.knobs.setdefault(coll, {})[i] = knobs
            algs[i] = n
            cat.container.setdefault(coll, {})[i] = cont
        cat.algorithms[coll] = algs
        cat.forcing[coll] = {i: {device_var(coll): 0, var: i} for i in algs}
    return cat


def _setting_values(exe: Path) -> dict[str, int | str]:
    """The launch values of the variables PARAMS names (integers, or text for tree types)."""
    wanted = {v for ps in PARAMS.values() for _, v in ps}
    out: dict[str, int | str] = {}
    for d in _list(exe, "MPIR_CVAR_"):
        if d["name"] in wanted:
            val = d.get("value", d.get("text"))
            if val is not None:
                out[d["name"]] = val
    return out


def library_path(exe: Path) -> Path | None:
    """The MPICH shared library the kernel loads."""
    try:
        out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"lib(?:mpi|mpich)\.so[.\d]*\s+=>\s+(\S+)", out)
    return Path(m.group(1)) if m else None


def builtin_table(library: Path) -> dict | None:
    """MPICH's compiled-in MPIR selection table (the JSON it uses when no tuning file is
    given), read from the user's own library: a tuning file replaces it entirely, so ours
    starts from it and changes only the collectives tuned."""
    data = library.read_bytes()
    dec = json.JSONDecoder()
    for m in re.finditer(rb'\{"collective=', data):
        end = data.find(b"\0", m.start())
        try:
            text = data[m.start(): end if end > 0 else None].decode()
            table, _ = dec.raw_decode(text)
        except (UnicodeDecodeError, ValueError):
            continue
        if "algorithm=MPIR_Reduce_intra_binomial" in text and "collective=reduce" in table:
            return dict(table)
    return None


# ---------------------------------------------------------------------------
# Launching
# ---------------------------------------------------------------------------

# inherited settings that would change what the library chooses
_INHERITED = re.compile(r"^(MPIR_CVAR|MPICH)_(\w+_INTRA_ALGORITHM|\w*DEVICE_COLLECTIVES?|"
                        r"COLL_SELECTION_TUNING_JSON_FILE|COLLECTIVE_FALLBACK)$")


def launch_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _INHERITED.match(k)}
    env.update(FALLBACK)
    env.update(extra or {})
    return env


def forcing_env(catalog: Catalog, coll: str, cfg: Config) -> dict[str, str]:
    """Environment that forces one configuration for a whole launch (names, as users
    write them), with its radix and chunk size where it has them."""
    if cfg.algorithm == 0:
        return {}
    env = {device_var(coll): "0", algorithm_var(coll): catalog.algorithms[coll][cfg.algorithm]}
    if isinstance(catalog, MPICHCatalog):
        extra = catalog.assignments(coll, cfg)
        env.update({v: str(x) for v, x in extra.items() if v not in env})
    return env


def launch_command(mpi: MPICH, placement: Placement) -> list[str]:
    from colltune.launchers import hydra_command

    return hydra_command(mpi.name, str(mpi.mpirun), placement.launch, placement.np,
                         placement.hostfile, placement.oversubscribe)
