"""Which of Open MPI's collective components serves each collective: a coll/tuned rules file
changes only what coll/tuned serves. Said before a job from the installation's own settings
as that job sees them (ompi_info reads the same environment and parameter files as mpirun),
and proven in a launch by the library itself: rank 0 runs under gdb, counting calls into
every component's entry functions for the collective (their symbols are exported)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from colltune import jobdir
from colltune.backends.common import tools
from colltune.backends.openmpi.install import OpenMPI, launch_command, launch_env
from colltune.collectives import Collective
from colltune.errors import ColltuneError, MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel

if TYPE_CHECKING:
    from colltune.slots import Placement

TUNED = "tuned"

# (collective, comm size, sizes) -> (applied | not applied | ... , why): a file's proof
Applied = Callable[[Collective, int, list[int]], tuple[str, str]]

# Components that never take an intra-communicator's blocking collective from coll/tuned,
# whatever their priority: self (a communicator of one rank), inter (inter-communicators),
# libnbc (non-blocking collectives only), sync and monitoring (wrappers that call the
# component below them, and only when switched on), ftagree (agreement only). coll/basic
# is not among them: raised above coll/tuned, it serves.
NEVER_IN_THE_WAY = frozenset({"self", "inter", "libnbc", "sync", "monitoring", "ftagree"})

# what a component's reach is, where it is known not to be every collective it implements
REACH = {"han": "on communicators that span nodes (it steps aside on one node)"}

_PARAM = re.compile(r"^mca:coll:(\w+):param:coll_(\w+)_priority:(value|source):(.*)$")
# a component that is off until switched on, whatever its priority (coll/ucc in Open MPI 5:
# coll_ucc_enable 0 by default; sites set it with the priority)
_ENABLE = re.compile(r"^mca:coll:(\w+):param:coll_(\w+)_enable:(value|source):(.*)$")
_SELECTION = re.compile(r"^mca:coll:base:param:coll:value:(.*)$")


@dataclass(frozen=True)
class Setting:
    """One component's priority as a job with this environment gets it, and from where
    (Open MPI's own word: default, environment, file, ...)."""

    component: str
    priority: int
    source: str
    enabled: tuple[bool, str] | None = None  # its coll_<name>_enable and whence; None: none

    def said(self) -> str:
        said = f"coll_{self.component}_priority {self.priority}{_whence(self.source)}"
        if self.enabled is not None:
            said += f" and coll_{self.component}_enable 1{_whence(self.enabled[1])}"
        return said

    @property
    def on(self) -> bool:
        return self.enabled is None or self.enabled[0]


def _whence(src: str) -> str:
    """Where a parameter's value came from, in Open MPI's own words."""
    return ("" if src == "default" else ", set in the environment" if src == "environment"
            else f", set in {src[6:-1]}" if src.startswith("file (") and src.endswith(")")
            else f", set by {src}")


def settings(mpi: OpenMPI, env: dict[str, str]) -> tuple[dict[str, Setting], str]:
    """Every coll component's priority, and the `coll` selection (`^han`, `tuned,basic`,
    or "" for all), as ompi_info reads them with `env`."""
    text = tools.ask([str(mpi.ompi_info), "--param", "coll", "all", "--level", "9",
                      "--parsable"], mpi.prefix, "Open MPI", env=launch_env(env))
    values: dict[str, dict[str, str]] = {}
    enable: dict[str, dict[str, str]] = {}
    selection = ""
    for line in text.splitlines():
        if (m := _PARAM.match(line)) and m.group(1) == m.group(2):
            values.setdefault(m.group(1), {})[m.group(3)] = m.group(4)
        elif (m := _ENABLE.match(line)) and m.group(1) == m.group(2):
            enable.setdefault(m.group(1), {})[m.group(3)] = m.group(4)
        elif (s := _SELECTION.match(line)):
            selection = s.group(1).strip()
    out = {}
    for comp, v in values.items():
        e = enable.get(comp)
        on = None if e is None else (e.get("value", "").strip().lower() in ("1", "true"),
                                     e.get("source", "default"))
        try:
            out[comp] = Setting(comp, int(v.get("value", "")), v.get("source", "default"), on)
        except ValueError:
            continue  # a priority that is not a number: Open MPI's own concern
    return out, selection


def selected(selection: str, component: str) -> bool:
    """Whether the `coll` selection lets `component` be opened at all."""
    if not selection or selection == "<none>":
        return True
    names = {n.strip() for n in selection.lstrip("^").split(",")}
    return (component not in names) if selection.startswith("^") else component in names


def in_the_way(mpi: OpenMPI, env: dict[str, str]) -> tuple[list[Setting], Setting | None]:
    """The components above coll/tuned that would serve in its place wherever they
    implement a collective, and coll/tuned's own setting (None: the job does not open it)."""
    prio, selection = settings(mpi, env)
    tuned = prio.get(TUNED)
    if tuned is None or not selected(selection, TUNED) or tuned.priority <= 0:
        return [], None
    return _at_least(prio, selection, tuned, above=True), tuned


def _at_least(prio: dict[str, Setting], selection: str, comp: Setting, above: bool
              ) -> list[Setting]:
    """The other components a job opens and switches on whose priority is above `comp`'s
    (or, `above` False, not below it), highest first."""
    return sorted((s for s in prio.values() if s.component not in NEVER_IN_THE_WAY
                   and s.component != comp.component and selected(selection, s.component)
                   and s.on and (s.priority > comp.priority if above
                                 else s.priority >= comp.priority)),
                  key=lambda s: -s.priority)


def warnings(mpi: OpenMPI, env: dict[str, str]) -> list[str]:
    """What a site must hear before it installs a coll/tuned file for jobs run with `env`:
    the components that serve in coll/tuned's place, each with the parameter that puts it
    there, or that the job does not use coll/tuned at all."""
    prio, selection = settings(mpi, env)
    tuned = prio.get(TUNED)
    if tuned is None or not selected(selection, TUNED) or tuned.priority <= 0:
        why = (f"the coll selection {selection!r} leaves it out" if tuned is not None
               and not selected(selection, TUNED) else "its priority is 0 or it is missing")
        return [f"{mpi.describe()} does not use coll/tuned in this environment ({why}): "
                "this file changes nothing; remove that setting, or tune the component "
                "that serves"]
    above, _ = in_the_way(mpi, env)
    return [f"coll/{s.component} ({s.said()}) is above coll/tuned's {tuned.priority}: "
            f"{REACH.get(s.component, 'wherever it implements a collective')} it serves "
            "instead, and this file's rules do not run there (`tune verify` proves which "
            f"ran); to let them run, set coll_{s.component}_priority below "
            f"{tuned.priority} or leave the component out (--mca coll ^{s.component})"
            for s in above]


def ucc_warnings(mpi: OpenMPI, env: dict[str, str]) -> list[str]:
    """What a site must hear before it hands UCC tuning strings to jobs run with `env`:
    UCC reads them for Open MPI's collectives only where coll/ucc serves, which needs the
    component built, selected, switched on and above every other that serves."""
    prio, selection = settings(mpi, env)
    ucc = prio.get("ucc")
    if ucc is None:
        return [f"{mpi.describe()} has no coll/ucc component: its collectives never reach "
                "UCC, and these strings change nothing for them"]
    if not selected(selection, "ucc"):
        return [f"the coll selection {selection!r} leaves coll/ucc out: these strings "
                "change nothing for Open MPI's collectives"]
    if not ucc.on:
        assert ucc.enabled is not None
        return [f"coll/ucc is off (coll_ucc_enable 0{_whence(ucc.enabled[1])}): these "
                "strings change nothing until the job sets coll_ucc_enable 1 (and "
                "coll_ucc_priority above the other components')"]
    others = _at_least(prio, selection, ucc, above=False)
    return [f"coll/{s.component} ({s.said()}) is above coll/ucc ({ucc.said()}): "
            f"{REACH.get(s.component, 'wherever it implements a collective')} it serves "
            "instead, and UCC is not asked" if s.priority > ucc.priority else
            f"coll/{s.component} ({s.said()}) has coll/ucc's priority: which of them serves "
            "is not said by any setting; raise coll_ucc_priority" for s in others]


# rank 0 under gdb, the others as they are (Open MPI's mpirun sets OMPI_COMM_WORLD_RANK,
# srun SLURM_PROCID)
# the ranks COLLTUNE_BREAK_RANKS lists run under gdb, each writing its counts to its own
# file (COLLTUNE_BREAK_OUT.RANK); the others run as they are
_WRAP = ('r=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}}; g=$1; shift; '
         'case " $COLLTUNE_BREAK_RANKS " in *" $r "*) '
         'COLLTUNE_BREAK_OUT=$COLLTUNE_BREAK_OUT.$r exec "$g" -q -batch -nx -x '
         '"$COLLTUNE_BREAK_SCRIPT" --args "$@";; *) exec "$@";; esac')

# an entry of a component's collective: ompi_coll_adapt_bcast, mca_coll_han_bcast_intra,
# ompi_coll_tuned_bcast_intra_dec_fixed, mca_coll_ucc_bcast (base: shared algorithms)
ENTRY = r"^(?:ompi|mca)_coll_(?!base_)([a-z0-9]+)_{coll}(?:_|$)"


def listing(coll: str) -> str:
    return rf"^\(ompi\|mca\)_coll_[a-z0-9]*_{coll}"


def first_served(mpi: OpenMPI, placement: Placement, check: Applied) -> Applied:
    """`check` (the traffic proof that Open MPI ran what a file says), preceded, where a
    component sits above coll/tuned in this environment, by the launch that asks who
    served the collective: a file for coll/tuned is not applied where another served (the
    traffic proof alone saw the same traffic with and without the file, "unproven")."""
    above, _ = in_the_way(mpi, {})
    if not above:
        return check

    def applied(coll: Collective, np: int, sizes: list[int]) -> tuple[str, str]:
        if shutil.which("gdb") is None:
            return "unproven", (f"coll/{above[0].component} is above coll/tuned here; "
                                "install gdb to see which component served (its symbols)")
        who, calls = served_by(mpi, placement, coll.name, {})
        if who != TUNED:
            return "not applied", (f"coll/{who} served {coll.name}, not coll/tuned, whose "
                                   "rules these are (calls into each component's entry, "
                                   f"counted under gdb: {calls})")
        return check(coll, np, sizes)
    return applied


def served_by(mpi: OpenMPI, placement: Placement, coll: str, env: dict[str, str],
              size: int = 1024, gdb: str = "gdb") -> tuple[str, dict[str, int]]:
    """The component that ran `coll` on the kernel's communicator in one launch with
    `env`, and the calls counted into each component's entries (a component that calls
    another, coll/han calling coll/tuned on its sub-communicators, shows both: the one
    above in the stack is the one that served)."""
    counts = count_calls(mpi, placement, coll, [size], env,
                         (listing(coll), ENTRY.format(coll=coll)), gdb).get(size, {})
    per: dict[str, int] = {}
    for fn, n in counts.items():
        if (m := re.match(ENTRY.format(coll=coll), fn)) and isinstance(n, int):
            per[m.group(1)] = per.get(m.group(1), 0) + n
    if not per:
        raise ColltuneError(f"no component's {coll} entry was called in the proof launch",
                            "the library's components may be built without exported "
                            "symbols; `ompi_info` lists them")
    prio, _ = settings(mpi, env)
    top = max(per, key=lambda c: prio[c].priority if c in prio else -1)
    return top, per


def count_calls(mpi: OpenMPI, placement: Placement, coll: str, sizes: list[int],  # noqa: PLR0913 (a launch's what, where and which functions)
                env: dict[str, str], functions: tuple[str, str], gdb: str = "gdb",
                datatype: str = "double") -> dict[int, dict[str, int]]:
    """Per kernel size, the calls rank 0 made into the library's functions that match
    `functions` (a gdb regex to list them, a Python regex to keep them), in one launch of
    the kernel's `coll` (a reduction summing `datatype`) with `env`
    (kernel/breakcount.gdb)."""
    return count_by_rank(mpi, placement, coll, sizes, env, functions, (0,), gdb,
                         datatype)[0]


def count_by_rank(mpi: OpenMPI, placement: Placement, coll: str, sizes: list[int],  # noqa: PLR0913 (count_calls' and which ranks)
                  env: dict[str, str], functions: tuple[str, str], ranks: tuple[int, ...],
                  gdb: str = "gdb", datatype: str = "double"
                  ) -> dict[int, dict[int, dict[str, int]]]:
    """count_calls for each of `ranks` (of MPI_COMM_WORLD), in the same launch: rank ->
    size -> function -> calls."""
    exe = build_kernel(mpi)
    script = resources.files("colltune.kernel").joinpath("breakcount.gdb")
    plan = KernelPlan(coll, [KernelConfig(0, {}, placement.group)], [(0, s) for s in sizes],
                      Repetitions(warmup=1, min_reps=2, max_reps=2, point_time=0.05),
                      dup_always=False, datatype=datatype)
    with jobdir.temporary(prefix="colltune-served-") as tmp, \
            resources.as_file(script) as script_path:
        out = Path(tmp) / "counts.json"
        job = launch_env({**env, "COLLTUNE_BREAK_SCRIPT": str(script_path),
                          "COLLTUNE_BREAK_LIST": functions[0],
                          "COLLTUNE_BREAK_MATCH": functions[1],
                          "COLLTUNE_BREAK_OUT": str(out),
                          "COLLTUNE_BREAK_RANKS": " ".join(map(str, ranks)),
                          # the components are opened inside MPI_Init (as DSOs where built
                          # so): listed at the kernel's first point, before its calls
                          "COLLTUNE_BREAK_AFTER": "collbench_point"})
        cmd = [*launch_command(mpi, placement), "/bin/sh", "-c", _WRAP, "sh", gdb]
        outcome = run_kernel(cmd, exe, plan, job, runs_on=mpi)
        files = {r: out.with_name(f"{out.name}.{r}") for r in ranks}
        if outcome.status != "ok" or not all(f.exists() for f in files.values()):
            raise MPIError(f"the launch that counts {coll}'s calls (rank(s) "
                           f"{', '.join(map(str, ranks))} under gdb) failed: "
                           f"{outcome.status} {outcome.message}".strip(),
                           "check that gdb runs here (ptrace allowed) and that the job "
                           "runs without gdb")
        counts = {r: json.loads(f.read_text()) for r, f in files.items()}
    return {r: {int(k): {fn: n for fn, n in v.items() if isinstance(n, int)}
                for k, v in c.items()} for r, c in counts.items()}
