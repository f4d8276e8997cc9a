"""UCC as Open MPI's coll/ucc reaches it: which UCC an installation loads, the tl/ucp
algorithms that UCC names, the job settings that put coll/ucc in charge, and the tuning
string (and the MCA parameter file beside it) written from per-size decisions.

The string's syntax and UCC's reading of it are rules/ucc_tune.py's; this module knows
Open MPI's side: where the UCC library is, how coll/ucc is switched on, and what a
communicator size of a section serves. What UCC then ran is ucc_proof.py's."""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from colltune.backends.openmpi.install import OpenMPI
from colltune.collectives import Collective
from colltune.core.catalog import RADIX, Catalog, Param
from colltune.core.config import DEFAULT, Config
from colltune.core.ranges import boundaries
from colltune.core.records import Decision
from colltune.errors import ColltuneError
from colltune.rules import safe, ucc_radix, ucc_tune

# coll/ucc serves only when switched on (Open MPI 5's default: off) and above every other
# component that implements the collective: coll/han's 35 is the highest of those shipped
UCC_ON = {"OMPI_MCA_coll_ucc_enable": "1", "OMPI_MCA_coll_ucc_priority": "100"}
# the collectives whose message sizes (below) are proven against UCC's own choices
# (tests/test_ucc_live.py): the only ones --tune-ucc tunes and verifies
PROVEN = ("allgather", "allreduce", "alltoall", "bcast", "reduce")
# the collectives whose per-rank block UCC counts as the whole receive buffer
# (ucc_coll_args_msgsize in UCC 1.8: dst.info.count for allgather and alltoall)
_WHOLE_BUFFER = frozenset({"allgather", "alltoall"})
# what a string colltune writes may hold: rules/ucc_tune's render, nothing a shell, an MCA
# parameter file or a module could read otherwise
SAFE = re.compile(r"[A-Za-z0-9_:,.#@\[\]\-]*")
USE = ("set -a; . THIS_FILE; set +a; mpirun --mca coll_ucc_enable 1 --mca coll_ucc_priority "
       "100 -x UCC_TL_UCP_TUNE ...")


def use(radix: dict[str, str]) -> str:
    """How a job takes the environment file (each variable it sets passed on by -x)."""
    return USE.replace(" ...", "".join(f" -x {v}" for v in radix) + " ...")


def msg_size(coll: Collective, size: int, np: int) -> int:
    """What UCC compares with a string's message ranges for a per-rank block of `size`."""
    return size * np if coll.name in _WHOLE_BUFFER else size


@functools.cache
def library(mpi: OpenMPI) -> Path | None:
    """The UCC library this Open MPI's coll/ucc loads (its component's, or libmpi's where
    the component is built in), as the dynamic linker resolves it; None: none found."""
    lib = mpi.prefix / "lib"
    for dso in (lib / "openmpi" / "mca_coll_ucc.so", lib / "libmpi.so"):
        if not dso.exists():
            continue
        try:
            out = subprocess.run(["ldd", str(dso)], capture_output=True, text=True,
                                 timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        if m := re.search(r"^\s*libucc\.so\S*\s+=>\s+(\S+)", out, re.M):
            return Path(m.group(1))
    return None


def baseline(mpi: OpenMPI) -> dict[str, str]:
    """The configuration file UCC's own choice is measured with: the one its installation
    ships (share/ucc.conf), never one in the caller's home (UCC_CONFIG_FILE's default
    "auto" reads $HOME/ucc.conf first: an earlier export would be the baseline); none
    where it ships none ("": file configuration off)."""
    lib = library(mpi)
    shipped = lib.parent.parent / "share" / "ucc.conf" if lib else None
    return {"UCC_CONFIG_FILE": str(shipped) if shipped and shipped.is_file() else ""}


def parse_info(text: str) -> dict[str, tuple[str, ...]]:
    """tl/ucp's algorithms per collective, in id order, from `ucc_info -A`."""
    if "tl/ucp algorithms:" not in text:
        return {}
    ucp = text.split("tl/ucp algorithms:", 1)[1].split("\n\n", 1)[0]
    table: dict[str, dict[int, str]] = {}
    coll = ""
    for line in ucp.splitlines():
        if m := re.fullmatch(r"  (\w+)", line):
            coll = m.group(1).lower()
        elif coll and (m := re.fullmatch(r"\s+(\d+) :\s+(\w+) :.*", line)):
            table.setdefault(coll, {})[int(m.group(1))] = m.group(2)
    # a string's @N is the Nth: ids with a gap would make @N another algorithm
    return {c: tuple(a[i] for i in sorted(a)) for c, a in table.items()
            if sorted(a) == list(range(len(a)))}


def algorithms(mpi: OpenMPI) -> tuple[dict[str, tuple[str, ...]], str]:
    """tl/ucp's algorithms as the UCC this Open MPI loads names them, and where the table
    came from; refused where that UCC has no tl/ucp (no host-memory algorithms to tune)."""
    lib = library(mpi)
    info = lib.parent.parent / "bin" / "ucc_info" if lib else None
    if info is None or not info.is_file():
        return ucc_tune.TL_UCP_ALGS, (
            "UCC 1.8's table (no ucc_info beside " + (str(lib) if lib else "a libucc") + ")")
    try:
        text = subprocess.run([str(info), "-A"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ColltuneError(f"{info} -A failed: {e}", "check that UCC runs") from None
    table = parse_info(text)
    if not table:
        raise ColltuneError(f"the UCC at {lib} has no tl/ucp (`{info} -A` lists none): "
                            "no host-memory algorithm to tune",
                            "build UCC with UCX (--with-ucx), which tl/ucp needs")
    return table, f"`{info} -A`"


# algorithms that UCC 1.8 refuses for a plain host buffer (allreduce's sliding_window is
# for DPUs, alltoall's onesided needs globally registered buffers): their init is entered,
# fails, and UCC runs its own choice instead (allreduce: knomial's start is entered), so a
# tune forcing them would measure another algorithm (tests/test_ucc_live.py)
HOST_REFUSED = frozenset({("allreduce", "sliding_window"), ("alltoall", "onesided")})

# the radices measured where an algorithm takes one per message range (rules/ucc_tune's
# RADIX_VARS), up to the team size: UCC takes the smaller of the two
RADICES = (2, 3, 4, 8, 16, 32, 64)


class UccCatalog(Catalog):
    """tl/ucp's algorithms as a catalog: 0 is UCC's own choice, n the (n-1)th of its table
    (those UCC refuses for host buffers left out: HOST_REFUSED); the k-nomial algorithms
    whose radix UCC takes per message range carry it (0: the algorithm's own, "auto")."""

    def declared(self) -> tuple[Param, ...]:
        return (Param(RADIX, "radix"),)

    def param_values(self, coll: str, alg: int, np: int, grid: dict[str, list[int]]
                     ) -> dict[str, list[int]]:
        if (coll, self.algorithm_name(coll, alg)) not in ucc_tune.RADIX_VARS:
            return {}
        return {RADIX: grid.get(RADIX, [0, *(k for k in RADICES if k <= max(np, 2))])}


def catalog(table: dict[str, tuple[str, ...]], colls: list[str]) -> UccCatalog:
    return UccCatalog(algorithms={c: {0: "ucc", **{i + 1: a for i, a in enumerate(table[c])
                                                     if (c, a) not in HOST_REFUSED}}
                                  for c in colls if c in table}, source="ucc_info")


def forcing(catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
    """The environment that runs `cfg` at every size of a job (nothing: UCC's own): the
    algorithm by the string, its radix (where set) by its variable's default."""
    if cfg.algorithm == 0:
        return {}
    name = catalog.algorithm_name(coll.name, cfg.algorithm)
    out = {ucc_tune.TL_UCP: f"{coll.name}:0-inf:@{name}"}
    if cfg.get(RADIX) and (var := ucc_tune.RADIX_VARS.get((coll.name, name))):
        out[var] = str(cfg.get(RADIX))
    return out


# A section: (collective, the team size measured) -> rows of (first message size,
# algorithm or None for UCC's own choice, radix or 0 for the algorithm's own), message
# sizes in UCC's own measure
Row = tuple[int, str | None, int]
Sections = dict[tuple[str, int], list[Row]]


def section(catalog: Catalog, coll: str, ds: list[Decision]) -> list[Row]:
    """Where each decision's range starts (as coll/tuned's rules: the geometric midpoint,
    or the measured size where UCC's own choice meets a chosen one) and what it runs."""
    ordered = sorted(ds, key=lambda d: d.lookup_size)
    starts = boundaries([d.lookup_size for d in ordered], [d.chosen == DEFAULT for d in ordered])
    rows: list[Row] = []
    for start, d in zip(starts, ordered, strict=False):
        alg = None if d.chosen == DEFAULT else catalog.algorithm_name(coll, d.chosen.algorithm)
        rows.append((start, alg, d.chosen.get(RADIX) if alg is not None else 0))
    return _merged(rows)


def render(sections: Sections) -> str:
    """The string for every section: each collective's team sizes from the size measured up
    to the next one measured (the largest: every team above it; teams below the smallest
    are left to UCC), each range of a chosen algorithm a token; UCC's own choice no token."""
    tokens = []
    for coll in sorted({c for c, _ in sections}):
        nps = sorted(n for c, n in sections if c == coll)
        for i, np in enumerate(nps):
            team = f"[{np}-{nps[i + 1] - 1 if i + 1 < len(nps) else 'inf'}]"
            rows = sections[(coll, np)]
            for j, (lo, alg, _) in enumerate(rows):
                end = rows[j + 1][0] if j + 1 < len(rows) else ucc_tune.INF
                if alg is not None:
                    tokens.append(f"{coll}:{ucc_tune.size_text(lo)}-"
                                  f"{ucc_tune.size_text(end)}:{team}:@{alg}")
    return "#".join(tokens)


def read_sections(value: str, where: str, radix: dict[str, str] | None = None) -> Sections:
    """The sections of a string colltune wrote, with the radix settings beside it (to
    merge a new run into): refused where the string is not one token per collective,
    range, team span and algorithm, or a radix setting not one colltune writes."""
    spans: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    try:
        tokens = ucc_tune.parse(value)
    except ucc_tune.UccTuneError as e:
        raise ColltuneError(f"will not merge into {where}: {e}",
                            "choose another --out; it was not changed") from None
    for t in tokens:
        if (len(t.colls) != 1 or len(t.ranges) != 1 or len(t.teams) != 1 or t.alg is None
                or t.score is not None or t.mem_types):
            raise ColltuneError(f"will not merge into {where}: its token {t.text!r} is not "
                                "one colltune writes", "choose another --out; it was not "
                                "changed")
        (lo, hi), (team, _) = t.ranges[0], t.teams[0]
        spans.setdefault((t.colls[0], team), []).append((lo, hi, t.alg))
    radices = {var: _read_radix(v, var, where) for var, v in (radix or {}).items()}
    out: Sections = {}
    for key, have in spans.items():
        rows: list[Row] = []
        pos = 0
        for lo, hi, alg in sorted(have):
            if lo > pos:
                rows.append((pos, None, 0))  # a gap: UCC's own choice
            var = ucc_tune.RADIX_VARS.get((key[0], alg))
            k = radices[var].at(lo) if var in radices else None
            rows.append((lo, alg, k if isinstance(k, int) else 0))
            pos = hi
        if pos != ucc_tune.INF:
            rows.append((pos, None, 0))
        out[key] = rows
    return out


def _read_radix(value: str, var: str, where: str) -> ucc_radix.Radix:
    """A radix setting colltune wrote: host ranges and `auto` after them."""
    try:
        r = ucc_radix.parse_radix(value)
    except ucc_tune.UccTuneError as e:
        r = None
        why = str(e)
    else:
        why = "it is not one colltune writes"
    if (r is None or r.default is not None or var not in ucc_tune.RADIX_VARS.values()
            or any(x.mem_types != ("host",) for x in r.ranges)):
        raise ColltuneError(f"will not merge into {where}: its {var}: {why}",
                            "choose another --out; it was not changed")
    return r


def config_file(sections: Sections, one_node: set[int], header: list[str]) -> str:
    """UCC's configuration-file form of `sections`: a section per span of team sizes (cut
    at every size measured, of any collective), holding each collective's tokens for it,
    without team sizes (the section says them); `nnodes=1` where the span's first size was
    measured on one node in this run (rules measured on one node promise nothing across
    nodes: such teams are left to UCC)."""
    cuts = sorted({np for _, np in sections})
    out = _comments(header)
    for i, lo in enumerate(cuts):
        hi = cuts[i + 1] - 1 if i + 1 < len(cuts) else ucc_tune.TEAM_MAX
        mine: Sections = {}
        for coll in sorted({c for c, _ in sections}):
            below = [n for c, n in sections if c == coll and n <= lo]
            if below:
                mine[(coll, 1)] = sections[(coll, max(below))]
        value = render(mine).replace(":[1-inf]", "")
        if not value:
            continue
        _written(value)
        keys = f"team_size={lo}-{hi}" + (" nnodes=1" if lo in one_node else "")
        out += f"\n[{keys}]\n{ucc_tune.TL_UCP}={value}\n"
        # the radices of this span's teams only: a section confines them (the job-wide
        # variables of the environment form cannot)
        out += "".join(f"{var}={_written(v)}\n" for var, v in radix_settings(mine).items())
    return out


def radix_settings(sections: Sections) -> dict[str, str]:
    """The radix variables that give each row with a radix its radix (the algorithm's own
    elsewhere), for sections of one collective each (the variables are not per team)."""
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for (coll, _), sec in sorted(sections.items()):
        for j, (lo, alg, k) in enumerate(sec):
            var = ucc_tune.RADIX_VARS.get((coll, alg or ""))
            if var and k:
                end = sec[j + 1][0] if j + 1 < len(sec) else ucc_tune.INF
                rows.setdefault(var, []).append((lo, end, k))
    return {var: ucc_radix.render_radix(r) for var, r in sorted(rows.items())}


def env_form(sections: Sections) -> tuple[Sections, dict[str, str], list[str]]:
    """What a job's environment can carry of `sections`: the string's sections, the radix
    variables, and what was left out and why. A radix variable is one per job, for teams
    of every size: where a collective's radices were chosen at one team size it is
    written (said: a k-nomial UCC chooses itself for a smaller team runs it too); where at
    several, its rows with a radix are left to UCC here (the configuration file, with a
    section per span of team sizes, keeps them)."""
    out: Sections = {}
    said = []
    for coll in sorted({c for c, _ in sections}):
        mine = {k: v for k, v in sections.items() if k[0] == coll}
        with_radix = sorted(np for (_, np), rows in mine.items() if any(r[2] for r in rows))
        if len(mine) > 1 and with_radix:
            said.append(f"{coll}: radices chosen at teams of {', '.join(map(str, with_radix))} "
                        "ranks are in the configuration file (-sections.conf) only: a "
                        "job's environment holds one radix setting for every team size, so "
                        "those ranges are left to UCC here")
            mine = {k: _merged([(lo, None if k_ else alg, 0)
                                for lo, alg, k_ in rows]) for k, rows in mine.items()}
        elif with_radix:
            said.append(f"{coll}: the radix setting is for the job, teams of every size: "
                        f"below {with_radix[0]} ranks, where the string leaves UCC its own "
                        "choice, a k-nomial UCC chooses there takes this radix too "
                        "(the configuration file, -sections.conf, confines it)")
        out.update(mine)
    return out, radix_settings(out), said


def _merged(rows: list[Row]) -> list[Row]:
    """Rows with neighbours that run the same joined."""
    out: list[Row] = []
    for r in rows:
        if not out or out[-1][1:] != r[1:]:
            out.append(r)
    return out


def config_path(out: Path) -> Path:
    return out.with_name(out.stem + "-sections.conf")


def mca_fragment(value: str, header: list[str], radix: dict[str, str] | None = None) -> str:
    """The MCA parameter file that switches coll/ucc on above every other component and
    hands the string (and the radix settings) to UCC in every rank (Open MPI 5's
    mca_base_env_list, whose entries ';' separates: no value colltune writes holds one)."""
    env = ";".join(f"{k}={_written(v)}" for k, v in {ucc_tune.TL_UCP: value,
                                                      **(radix or {})}.items())
    return _comments(header) + (
        f"coll_ucc_enable = 1\ncoll_ucc_priority = 100\nmca_base_env_list = {env}\n")


def _written(value: str) -> str:
    """`value`, where it holds only what render writes (it goes into files every user's
    session reads: a shell, Open MPI's parameter reader, UCC's file reader)."""
    if not SAFE.fullmatch(value):
        raise ColltuneError("a UCC string with characters colltune does not write",
                            "report this")
    return value


def _comments(lines: list[str]) -> str:
    """Comment lines; a control character (a newline would end the comment and start a
    line the reader obeys, in a path of the header) becomes '?'."""
    return "".join(f"# {safe.comment(h)}\n" for h in lines)


def fragment_path(out: Path) -> Path:
    return out.with_name(out.stem + "-mca-params.conf")


def env_file(value: str, header: list[str], radix: dict[str, str] | None = None) -> str:
    """The job's environment file: the string, single-quoted (it holds '#' and '['), and
    the radix settings."""
    return _comments(header) + "".join(
        f"{k}='{_written(v)}'\n" for k, v in {ucc_tune.TL_UCP: value, **(radix or {})}.items())


def says(value: str) -> Callable[[Collective, int, int], str | None]:
    """What a string runs for (collective, team size, per-rank block): the algorithm's
    name, or None for UCC's own choice; UccTuneError where UCC refuses it for the team."""
    tokens = ucc_tune.parse(value)

    def at(coll: Collective, np: int, size: int) -> str | None:
        return ucc_tune.runs(ucc_tune.apply(tokens, np), coll.name, msg_size(coll, size, np))

    return at
