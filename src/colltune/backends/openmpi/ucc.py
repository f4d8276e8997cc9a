"""UCC as Open MPI's coll/ucc reaches it: which UCC an installation loads, the tl/ucp
algorithms that UCC names, the job settings that put coll/ucc in charge, and the tuning
string (and the MCA parameter file beside it) written from per-size decisions.

The string's syntax and UCC's reading of it are rules/ucc_tune.py's; this module knows
Open MPI's side: where the UCC library is, how coll/ucc is switched on, and what a
communicator size of a section serves."""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.openmpi.install import OpenMPI
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.ranges import boundaries
from colltune.core.records import Decision
from colltune.errors import ColltuneError
from colltune.rules import safe, ucc_tune

if TYPE_CHECKING:
    from colltune.slots import Placement

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


class UccCatalog(Catalog):
    """tl/ucp's algorithms as a catalog: 0 is UCC's own choice, n the (n-1)th of its table
    (those UCC refuses for host buffers left out: HOST_REFUSED)."""


def catalog(table: dict[str, tuple[str, ...]], colls: list[str]) -> UccCatalog:
    return UccCatalog(algorithms={c: {0: "ucc", **{i + 1: a for i, a in enumerate(table[c])
                                                     if (c, a) not in HOST_REFUSED}}
                                  for c in colls if c in table}, source="ucc_info")


def forcing(catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
    """The environment that runs `cfg` at every size of a job (nothing: UCC's own)."""
    if cfg.algorithm == 0:
        return {}
    name = catalog.algorithm_name(coll.name, cfg.algorithm)
    return {ucc_tune.TL_UCP: f"{coll.name}:0-inf:@{name}"}


# A section: (collective, the team size measured) -> [(first message size, algorithm or
# None for UCC's own choice)], message sizes in UCC's own measure
Sections = dict[tuple[str, int], list[tuple[int, str | None]]]


def section(catalog: Catalog, coll: str, ds: list[Decision]) -> list[tuple[int, str | None]]:
    """Where each decision's range starts (as coll/tuned's rules: the geometric midpoint,
    or the measured size where UCC's own choice meets a chosen one) and what it runs."""
    ordered = sorted(ds, key=lambda d: d.lookup_size)
    starts = boundaries([d.lookup_size for d in ordered], [d.chosen == DEFAULT for d in ordered])
    out: list[tuple[int, str | None]] = []
    for start, d in zip(starts, ordered, strict=False):
        alg = None if d.chosen == DEFAULT else catalog.algorithm_name(coll, d.chosen.algorithm)
        if not out or out[-1][1] != alg:
            out.append((start, alg))
    return out


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
            for j, (lo, alg) in enumerate(rows):
                end = rows[j + 1][0] if j + 1 < len(rows) else ucc_tune.INF
                if alg is not None:
                    tokens.append(f"{coll}:{ucc_tune.size_text(lo)}-"
                                  f"{ucc_tune.size_text(end)}:{team}:@{alg}")
    return "#".join(tokens)


def read_sections(value: str, where: str) -> Sections:
    """The sections of a string colltune wrote (to merge a new run into): refused where the
    string is not one token per collective, range, team span and algorithm."""
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
    out: Sections = {}
    for key, have in spans.items():
        rows: list[tuple[int, str | None]] = []
        pos = 0
        for lo, hi, alg in sorted(have):
            if lo > pos:
                rows.append((pos, None))  # a gap: UCC's own choice
            rows.append((lo, alg))
            pos = hi
        if pos != ucc_tune.INF:
            rows.append((pos, None))
        out[key] = rows
    return out


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
    return out


def config_path(out: Path) -> Path:
    return out.with_name(out.stem + "-sections.conf")


def mca_fragment(value: str, header: list[str]) -> str:
    """The MCA parameter file that switches coll/ucc on above every other component and
    hands the string to UCC in every rank (Open MPI 5's mca_base_env_list)."""
    return _comments(header) + (
        "coll_ucc_enable = 1\ncoll_ucc_priority = 100\n"
        f"mca_base_env_list = {ucc_tune.TL_UCP}={_written(value)}\n")


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


def env_file(value: str, header: list[str]) -> str:
    """The job's environment file: the string, single-quoted (it holds '#' and '[')."""
    return _comments(header) + f"{ucc_tune.TL_UCP}='{_written(value)}'\n"


def says(value: str) -> Callable[[Collective, int, int], str | None]:
    """What a string runs for (collective, team size, per-rank block): the algorithm's
    name, or None for UCC's own choice; UccTuneError where UCC refuses it for the team."""
    tokens = ucc_tune.parse(value)

    def at(coll: Collective, np: int, size: int) -> str | None:
        return ucc_tune.runs(ucc_tune.apply(tokens, np), coll.name, msg_size(coll, size, np))

    return at


def init_function(coll: str, alg: str, stage: str = "init") -> str:
    """tl/ucp's init (or start) function of an algorithm (UCC 1.8's symbols)."""
    own = "srg_knomial" if (coll, alg) == ("reduce", "srg") else alg
    return f"ucc_tl_ucp_{coll}_{own}_{stage}"


# init functions an algorithm's own init calls (UCC 1.8 here: allgather's linear sets up
# its batched form), entered whenever it runs
INTERNAL = {("allgather", "linear"): frozenset({"batched"})}
# algorithms that UCC 1.8 refuses for a plain host buffer (allreduce's sliding_window is
# for DPUs, alltoall's onesided needs globally registered buffers): their init is entered,
# fails, and UCC runs its own choice instead (allreduce: knomial's start is entered), so a
# tune forcing them would measure another algorithm (tests/test_ucc_live.py)
HOST_REFUSED = frozenset({("allreduce", "sliding_window"), ("alltoall", "onesided")})


def ran(mpi: OpenMPI, placement: Placement, coll: Collective, sizes: list[int],
        env: dict[str, str], table: dict[str, tuple[str, ...]]) -> dict[int, set[str]]:
    """Per size, what rank 0 ran in one kernel launch with coll/ucc on and `env`, from
    UCC's own functions counted under gdb: the tl/ucp algorithms it initialised (NAME),
    those it started (`start:NAME`: an init that fails leaves UCC to start another), and
    `coll/NAME` for another Open MPI component that served the call (coll/ucc hands a call
    UCC could not take to the component below it)."""
    from colltune.backends.openmpi import serving

    names = {init_function(coll.name, a, stage): (a if stage == "init" else f"start:{a}")
             for a in table.get(coll.name, ()) for stage in ("init", "start")}
    entry = re.compile(serving.ENTRY.format(coll=coll.name))
    # a breakpoint on the init and start functions only: each is entered once a call,
    # where an algorithm's progress function is entered on every poll while it waits
    # (thousands a call across a slow link, each a stop in gdb: the launch stalled)
    counted = "|".join(re.escape(fn) for fn in sorted(names))
    counts = serving.count_calls(
        mpi, placement, coll.name, sizes, {**UCC_ON, **baseline(mpi), **env},
        (f"^ucc_tl_ucp_{coll.name}_\\|" + serving.listing(coll.name),
         f"^(?:{counted})$|{entry.pattern}"))
    out: dict[int, set[str]] = {}
    for s in sizes:
        got = out.setdefault(s, set())
        for fn, n in counts.get(s, {}).items():
            if fn in names and n:
                got.add(names[fn])
            elif n and (m := entry.match(fn)) and m.group(1) != "ucc":
                got.add(f"coll/{m.group(1)}")
    return out


def runs_alone(coll: str, alg: str, got: set[str]) -> bool:
    """Whether `got` (ran()'s, at one size) is `alg` running and nothing else: its init
    entered, no other algorithm initialised or started (but those its own init sets up),
    no other component serving."""
    allowed = {alg} | INTERNAL.get((coll, alg), frozenset())
    inits = {g for g in got if ":" not in g and "/" not in g}
    starts = {g.split(":", 1)[1] for g in got if g.startswith("start:")}
    return alg in inits and inits <= allowed and starts <= allowed and not any(
        g.startswith("coll/") for g in got)


def proof(mpi: OpenMPI, placement: Placement, value: str,  # noqa: PLR0913 (the job and what it should run)
          table: dict[str, tuple[str, ...]], job: dict[str, str] | None = None
          ) -> Callable[[Collective, int, list[int]], tuple[str, str]]:
    """`tune verify`'s proof that UCC ran what the string says (handed to the job as
    `job` says: by default in its environment): at every size where it names an
    algorithm, rank 0 entered that algorithm's init function and no other's."""
    at = says(value)
    job = job if job is not None else {ucc_tune.TL_UCP: value}

    def applied(coll: Collective, np: int, sizes: list[int]) -> tuple[str, str]:
        want = {s: a for s in sizes if (a := at(coll, np, s)) is not None}
        if not want:
            return "default everywhere", "the string leaves every size verified to UCC"
        got = ran(mpi, placement, coll, sorted(want), job, table)
        wrong = [f"{s} B: {', '.join(sorted(got[s])) or 'no tl/ucp function'} instead of "
                 f"{a}" for s, a in sorted(want.items()) if not runs_alone(coll.name, a,
                                                                          got[s])]
        if wrong:
            return "not applied", "UCC's init functions (rank 0 under gdb): " + "; ".join(
                wrong)
        return "applied", (f"UCC initialised the string's algorithm at each of {len(want)} "
                           "size(s) (its tl/ucp init functions, rank 0 under gdb)")

    return applied
