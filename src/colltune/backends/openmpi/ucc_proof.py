"""What UCC ran inside Open MPI's coll/ucc, from UCC's own functions under gdb: the
tl/ucp algorithm each size initialised (its init functions on rank 0) and the radix it
used (UCX's sends on the first and last ranks), against launches forcing each; `tune
verify`'s proof of a UCC string (ucc.py writes it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from colltune.backends.openmpi.install import OpenMPI
from colltune.backends.openmpi.ucc import RADICES, UCC_ON, baseline, msg_size, says
from colltune.collectives import Collective
from colltune.rules import ucc_radix, ucc_tune

if TYPE_CHECKING:
    from colltune.slots import Placement


def init_function(coll: str, alg: str, stage: str = "init") -> str:
    """tl/ucp's init (or start) function of an algorithm (UCC 1.8's symbols)."""
    own = "srg_knomial" if (coll, alg) == ("reduce", "srg") else alg
    return f"ucc_tl_ucp_{coll}_{own}_{stage}"


# init functions an algorithm's own init calls (UCC 1.8 here: allgather's linear sets up
# its batched form), entered whenever it runs
INTERNAL = {("allgather", "linear"): frozenset({"batched"})}


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


# UCX's tagged send: every message tl/ucp posts goes through it (some algorithms past
# tl/ucp's own send function: allgather's knomial), so its calls per kernel point tell
# radices apart. Counted on the first and the last rank: at 4 ranks rank 0 alone sends
# as often with radix 3 as with 4 (allreduce, allgather), the last rank (the one a radix
# 3 tree leaves over) does not (UCC 1.8 here, tests/test_ucc_live.py)
SEND = "ucp_tag_send_nbx"


def sends(mpi: OpenMPI, placement: Placement, coll: Collective, sizes: list[int],
          env: dict[str, str]) -> dict[int, tuple[int, int]]:
    """Per size, the messages the first and the last rank posted in one kernel launch
    with coll/ucc on and `env` (UCX's send function's calls counted under gdb; the
    kernel's own barriers, served by UCC too, add the same number in every launch)."""
    from colltune.backends.openmpi import serving

    ranks = (0, placement.np - 1)
    counts = serving.count_by_rank(mpi, placement, coll.name, sizes,
                                   {**UCC_ON, **baseline(mpi), **env},
                                   (f"^{SEND}$", f"^{SEND}$"), ranks, datatype=coll.datatype)
    return {s: (counts[0].get(s, {}).get(SEND, 0), counts[ranks[1]].get(s, {}).get(SEND, 0))
            for s in sizes}


def radix_proof(mpi: OpenMPI, placement: Placement, coll: Collective,
                want: dict[int, tuple[str, int]], job: dict[str, str]) -> tuple[str, str]:
    """That UCC ran each size's radix (`want`: size -> algorithm, radix): the first and
    last ranks' sends with the job's settings against launches forcing the algorithm with
    each radix up to the team size; a size is proven where its counts are its radix's and
    every other radix sends otherwise there (where one does not, the sends cannot tell
    the two apart: unproven)."""
    np = placement.np
    written = sends(mpi, placement, coll, sorted(want), job)
    ref: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
    for alg in sorted({a for a, _ in want.values()}):
        var = ucc_tune.RADIX_VARS[(coll.name, alg)]
        sizes = sorted(s for s, (a, _) in want.items() if a == alg)
        for k in sorted({k for a, k in want.values() if a == alg}
                        | {k for k in RADICES if k <= max(np, 2)}):
            ref[(alg, k)] = sends(mpi, placement, coll, sizes,
                                  {ucc_tune.TL_UCP: f"{coll.name}:0-inf:@{alg}", var: str(k)})
    wrong, alike = [], []
    for s, (alg, k) in sorted(want.items()):
        mine = ref[(alg, k)][s]
        others = {k2: r[s] for (a, k2), r in ref.items() if a == alg and k2 != k}
        if written[s] != mine:
            wrong.append(f"{s} B: sends {_pair(written[s])}, radix {k} {_pair(mine)} ("
                         + ", ".join(f"radix {k2} {_pair(n)}" for k2, n in
                                     sorted(others.items())) + ")")
        elif same := sorted(k2 for k2, n in others.items() if n == mine):
            alike.append(f"{s} B (radix {k} as {', '.join(map(str, same))})")
    how = (f"ranks 0 and {np - 1}'s UCX sends under gdb, against each radix forced")
    if wrong:
        return "not applied", f"the radix UCC ran is not the file's ({how}): " + "; ".join(
            wrong)
    if alike:
        return "unproven", (f"the sends cannot tell these radices apart at "
                            f"{'; '.join(alike)} ({how})")
    return "applied", f"UCC ran the file's radix at each of {len(want)} size(s) ({how})"


def _pair(n: tuple[int, int]) -> str:
    return f"{n[0]}/{n[1]}"


def proof(mpi: OpenMPI, placement: Placement, value: str,  # noqa: PLR0913 (the job and what it should run)
          table: dict[str, tuple[str, ...]], job: dict[str, str] | None = None,
          radix: dict[str, str] | None = None
          ) -> Callable[[Collective, int, list[int]], tuple[str, str]]:
    """`tune verify`'s proof that UCC ran what the string says (handed to the job as
    `job` says: by default in its environment): at every size where it names an
    algorithm, rank 0 entered that algorithm's init function and no other's; where the
    job sets that algorithm's radix (`radix`: the settings the job reads; by default those
    `job` holds), rank 0's sends are that radix's (radix_proof)."""
    at = says(value)
    job = job if job is not None else {ucc_tune.TL_UCP: value}
    radices = {var: ucc_radix.parse_radix(v) for var, v in (radix or job).items()
               if var in ucc_tune.RADIX_VARS.values()}

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
        said = (f"UCC initialised the string's algorithm at each of {len(want)} size(s) "
                "(its tl/ucp init functions, rank 0 under gdb)")
        ks = {}
        for s, a in want.items():
            var = ucc_tune.RADIX_VARS.get((coll.name, a))
            k = radices[var].at(msg_size(coll, s, np)) if var in radices else None
            if isinstance(k, int):
                ks[s] = (a, k)
        if not ks:
            return "applied", said
        status, why = radix_proof(mpi, placement, coll, ks, job)
        return status, f"{said}; {why}"

    return applied
