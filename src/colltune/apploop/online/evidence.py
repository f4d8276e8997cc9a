"""What tune online's layer wrote, read as data: each rank's schedule (its head line, and
whether every communicator's members ran alike) and each communicator's evidence, as call
groups."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colltune.apploop.online.candidates import COLLECTIVES
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.errors import MPIError, parse_json, read_text


@dataclass
class OnlineGroup:
    """One call group of the run, as the layer reported it."""

    collective: str
    comm_size: int
    size: int  # the per-rank block of its first call
    calls: int
    explored: bool
    kept: int  # the configuration the run kept for its last calls (0: the library's)
    times: dict[int, list[float]]  # configuration id -> the slowest rank's time per call
    dropped: list[int]
    decision: Decision | None = None
    # not explored: the store knew them slower, or the cost model ranked them below their
    # algorithm's best segment size (online_model)
    pruned: list[int] = field(default_factory=list)
    wrong: list[int] = field(default_factory=list)  # answered unlike the library's choice
    halved: list[int] = field(default_factory=list)  # out at a round's end: the slower half
    # (nodes, ranks on the fullest node) of its communicator, as the layer counted hosts
    layout: tuple[int, int] = (1, 1)
    # the plan's id of each configuration -> what it runs (0: the library's own choice)
    configs: dict[int, Config] = field(default_factory=dict)
    # configuration id -> the calls earlier runs of the command gave it (the plan's
    # `prior`: the halving took up from there)
    prior: dict[int, int] = field(default_factory=dict)

    def config(self, ident: int) -> Config:
        """What the plan's `ident` runs."""
        return self.configs.get(ident) or (Config(ident) if ident else DEFAULT)

    def ident(self, cfg: Config) -> int | None:
        """The plan's id of `cfg` in this group (None: not one of its configurations)."""
        return next((k for k in self.times if self.config(k) == cfg), None)


def schedules(folder: Path, ended: bool = True) -> dict[int, list[str]]:
    """Each rank's schedule lines (schedule.RANK; its head line names the rank's host and
    the world's size, which says how many there must be). `ended`: the run reached
    MPI_Finalize, so every rank of the job must have written its final one (a missing or
    partial one: the layer said why on its stderr, or a rank never finalized)."""
    lines: dict[int, list[str]] = {}
    world, partial = 0, []
    for f in folder.glob("schedule.*"):
        if not f.name.split(".", 1)[1].isdigit():  # a .tmp a killed rank left
            continue
        rank = int(f.name.split(".", 1)[1])
        body = read_text(f).splitlines()
        head = _head(body[0] if body else "")
        if head is not None:
            world = max(world, head[0])
            body = body[1:]
            if head[2]:
                partial.append(rank)
        lines[rank] = body
    missing = sorted(set(range(world)) - set(lines))
    if ended and missing:
        raise MPIError(f"rank(s) {', '.join(map(str, missing[:8]))} of {world} wrote no "
                       "schedule: nothing written", "see the application's stderr for the "
                       "layer's reason (a job directory other nodes do not see?)")
    if ended and partial:
        raise MPIError(f"rank(s) {', '.join(map(str, partial[:8]))} ended without "
                       "MPI_Finalize: their schedules are partial; nothing written",
                       "tune online needs an application that finalizes MPI")
    return lines


def libraries(folder: Path) -> dict[int, tuple[str, str, list[str]]]:
    """rank -> (the library's words, the file defining MPI_Init, every MPI-named object it
    loaded), as each rank's layer wrote them at MPI_Init (library.RANK). Data: a value of
    another type than the layer writes is read as "", which no check passes."""
    out: dict[int, tuple[str, str, list[str]]] = {}
    for f in folder.glob("library.*"):
        if not f.name.split(".", 1)[1].isdigit():
            continue
        try:
            doc = parse_json(read_text(f))
        except ValueError:  # cut short (a killed rank) or not the layer's: proves nothing
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        objects = doc.get("library_objects")
        out[int(f.name.split(".", 1)[1])] = (
            str(doc.get("library") or ""), str(doc.get("library_file") or ""),
            [str(o) for o in objects] if isinstance(objects, list) else ["?"])
    return out


def _head(line: str) -> tuple[int, float, bool] | None:
    """A schedule's head line, `host H world N overhead S [partial]`: the world's size, the
    seconds the rank spent in the layer's own work, and whether the run was still going
    (None: not a head line)."""
    w = line.split()
    if len(w) not in (6, 7) or w[0] != "host" or w[2] != "world" or w[4] != "overhead" \
            or w[6:] not in ([], ["partial"]):
        return None
    try:
        world, spent = int(w[3]), float(w[5])
    except ValueError:
        return None
    return (world, spent, bool(w[6:])) if world > 0 and 0 <= spent < 1e7 else None


def layer_seconds(folder: Path) -> float:
    """The most any rank spent in the layer's own work (its schedule's head line): what
    the layer cost the run beyond its candidates' calls, the slowest rank holding the
    others up at the next collective."""
    spent = [h[1] for f in folder.glob("schedule.*") if f.name.split(".", 1)[1].isdigit()
             for h in [_head(read_text(f).split("\n", 1)[0])] if h is not None]
    return max(spent, default=0.0)


def agreed(lines: dict[int, list[str]]) -> bool:
    """Whether every member of each communicator ran the same configurations in the same
    order for each of its groups (the digest of the sequence and the counts per
    configuration): each line names its communicator (its rank 0's world rank and count),
    and a communicator of N ranks must be reported by N ranks, all alike."""
    by_comm: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for rank, ls in lines.items():
        for ln in ls:
            by_comm[ln.split()[0]][rank].append(ln)
    for ranks in by_comm.values():
        size = int(next(iter(ranks.values()))[0].split()[1])
        if len(ranks) != size or len({tuple(sorted(v)) for v in ranks.values()}) > 1:
            return False
    return True


def evidence(folder: Path, ids: dict[str, dict[int, Config]] | None = None
              ) -> list[OnlineGroup]:
    """Every communicator's groups, from its rank 0's evidence; `ids`: the plan's ids per
    collective (None: each id is an algorithm's number with the library's parameters)."""
    groups = []
    for f in sorted(folder.glob("evidence.*")):
        if not f.name.split(".", 1)[1].isdigit():  # a .tmp a killed rank left
            continue
        for line in read_text(f).splitlines():
            try:
                groups.append(_group(parse_json(line), ids))
            except (KeyError, TypeError, ValueError) as err:  # ValueError: JSON cut short
                raise MPIError(f"{f.name}: unreadable evidence ({err})", "run again") from None
    return groups


def _group(e: Any, ids: dict[str, dict[int, Config]] | None) -> OnlineGroup:
    """One line of evidence, checked as data; a configuration never tried there (its
    segment holds the whole call) is left out."""
    if e["collective"] not in COLLECTIVES:
        raise ValueError(f"collective {str(e['collective'])[:40]!r}")
    np, nodes, ppn = int(e["comm_size"]), int(e["nodes"]), int(e["ppn"])
    if not (1 <= nodes <= np and 1 <= ppn <= np and nodes * ppn >= np):
        raise ValueError(f"{nodes} node(s) x {ppn} for {np} ranks")
    known = (ids or {}).get(e["collective"], {0: DEFAULT})
    cs = [c for c in e["configs"] if c.get("unfit") is not True]
    configs = {}
    for c in cs:
        k = int(c["id"])
        if ids is not None and k not in known:
            raise ValueError(f"configuration {k} is not in the plan")
        configs[k] = known.get(k, Config(k) if k else DEFAULT)

    def having(flag: str) -> list[int]:
        return [int(c["id"]) for c in cs if c.get(flag) is True]

    return OnlineGroup(
        e["collective"], np, int(e["bytes"]), int(e["calls"]), bool(e["explored"]),
        int(e["kept"]), {int(c["id"]): [float(t) for t in c["times_s"]] for c in cs
                         if c["times_s"]},
        having("dropped"), None, having("pruned"), having("wrong"), having("halved"),
        (nodes, ppn), configs,
        {int(c["id"]): int(c["prior"]) for c in cs if int(c.get("prior", 0)) > 0})


def merged(groups: list[OnlineGroup]) -> list[OnlineGroup]:
    """One group per (collective, communicator size and layout, size): the calls of
    several communicators of one size and layout (pw.x's halves) are one point each in the
    store."""
    out: dict[tuple[str, int, tuple[int, int], int], OnlineGroup] = {}
    for g in groups:
        key = (g.collective, g.comm_size, g.layout, g.size)
        if key not in out:
            out[key] = dataclasses.replace(g, times={k: list(v) for k, v in g.times.items()},
                                           dropped=list(g.dropped), pruned=list(g.pruned),
                                           wrong=list(g.wrong), halved=list(g.halved),
                                           configs=dict(g.configs), prior=dict(g.prior))
            continue
        m = out[key]
        m.calls += g.calls
        m.explored = m.explored or g.explored
        m.dropped = sorted(set(m.dropped) | set(g.dropped))
        m.pruned = sorted(set(m.pruned) & set(g.pruned))
        m.wrong = sorted(set(m.wrong) | set(g.wrong))
        m.halved = sorted(set(m.halved) | set(g.halved))
        m.configs.update(g.configs)
        for k, n in g.prior.items():  # the same plan line for both: not added up
            m.prior[k] = max(m.prior.get(k, 0), n)
        for k, xs in g.times.items():
            m.times.setdefault(k, []).extend(xs)
    return list(out.values())
