"""MPICH's collective selection tuning file (csel JSON, read from the file named by
`MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE`): writer and reader.

The file replaces MPICH's compiled-in table for every collective, so it is written as that
table (read from the user's library) with the tuned collectives' intra-communicator
subtrees replaced by ours. Our subtree, per collective:

    "collective=reduce": {
      "comm_type=intra": {
        "is_commutative=yes": {                     (reductions: what was measured)
          "comm_size<=3": {"avg_msg_size=any": <MPICH's own>},  (not measured below 4)
          "comm_size<=4": {"avg_msg_size<=2895": {"algorithm=MPIR_Reduce_intra_binomial": {}},
                           ...,
                           "avg_msg_size=any": {...}},
          "comm_size=any": {...}},
        <the compiled-in intra subtree, for other operations>},
      "comm_type=inter": <the compiled-in inter subtree>}

A leaf names every parameter of its algorithm (see PARAMS in the MPICH backend); a range's
choice carries those it sets away from the launch values ("MPIR_Bcast_intra_tree k=3").

Keys at one level are tried in order and the first that matches wins; every chain of
sizes ends in `=any`. Where MPICH's own choice is kept, its compiled-in subtree is nested
under that size inside an always-true `comm_type=intra`, which marks it as not ours.
Message sizes are what MPICH compares, which is not the same number for every collective
(see SIZE_KEY)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from colltune.errors import parse_json

# The size MPICH computes per collective (MPICH's csel): avg_msg_size is count x type size
# of one rank's buffer; total_msg_size multiplies by the comm size. Collectives not listed
# have no size condition (one algorithm per comm size).
SIZE_KEY = {
    "allreduce": "avg_msg_size", "bcast": "avg_msg_size", "reduce": "avg_msg_size",
    "alltoall": "avg_msg_size",
    "allgather": "total_msg_size", "allgatherv": "total_msg_size",
    "gather": "total_msg_size", "scatter": "total_msg_size",
    "reduce_scatter": "total_msg_size", "reduce_scatter_block": "total_msg_size",
    "alltoallv": "total_msg_size",
}
# collectives whose tuned choice holds for commutative operations only (MPI_SUM was
# measured): other operations keep MPICH's own subtree
COMMUTATIVE_ONLY = {"reduce", "allreduce", "reduce_scatter"}


class CselError(ValueError):
    pass


def lookup(coll: str, size: int, np: int) -> int:
    """The number MPICH compares for a per-rank block of `size` bytes at `np` ranks."""
    return size * np if SIZE_KEY.get(coll) == "total_msg_size" else size


def choice(container: str, overrides: dict[str, str] | None = None) -> str:
    """What a range holds: the algorithm's container, then the leaf parameters set away from
    the launch values, e.g. "MPIR_Bcast_intra_tree k=3"."""
    return " ".join([container, *(f"{k}={v}" for k, v in sorted((overrides or {}).items()))])


def split_choice(text: str) -> tuple[str, dict[str, str]]:
    container, *words = text.split()
    return container, dict(w.split("=", 1) for w in words)


@dataclass
class Ranges:
    """One collective at one comm size: (upper bound in MPICH's size, choice: see `choice`),
    ascending; None as the last bound means any larger size, None as the choice MPICH's
    own (its compiled-in subtree, nested under that size)."""

    limits: list[tuple[int | None, str | None]] = field(default_factory=list)
    # by ranks per node: the ranges for jobs of that many ranks a node on average (MPICH's
    # comm_avg_ppn), measured in that layout (tune --layouts); `limits` serve the others
    per_ppn: dict[int, Ranges] = field(default_factory=dict)

    def algorithm_at(self, value: int) -> str | None:
        for upper, alg in self.limits:
            if upper is None or value <= upper:
                return alg
        raise CselError("ranges do not end with =any")


# collective -> comm size (None: any larger) -> ranges
Tuning = dict[str, dict[int | None, Ranges]]


def ranges_from_starts(starts: list[tuple[int, str | None]]) -> Ranges:
    """Ranges from (first size of the range, container) pairs, ascending from 0: adjacent
    equal choices merge, each range ends one below the next start."""
    merged: list[tuple[int, str | None]] = []
    for start, alg in sorted(starts):
        if not merged or merged[-1][1] != alg:
            merged.append((start, alg))
    limits = [(merged[i + 1][0] - 1, alg) for i, (_, alg) in enumerate(merged[:-1])]
    return Ranges(limits + [(None, merged[-1][1])])


def agreed(below: Ranges, above: Ranges) -> Ranges:
    """The ranges for the communicator sizes between two measured ones (issue 84, item
    4): what both choose where they agree, MPICH's own where they part; where either was
    measured per layout (comm_avg_ppn), MPICH's own throughout."""
    if below.per_ppn or above.per_ppn:
        return Ranges([(None, None)])
    uppers = sorted({u for u, _ in below.limits + above.limits if u is not None})
    starts = [0] + [u + 1 for u in uppers]
    return ranges_from_starts([
        (start, a if (a := below.algorithm_at(start)) == above.algorithm_at(start) else None)
        for start in starts])


Params = dict[str, dict[str, str]]  # container -> parameter -> value, as the leaf names them


def _leaf(coll: str, alg: str | None, own: dict, params: Params) -> dict:
    if alg is not None:
        # MPICH leaves a parameter the file does not name uninitialised: name them all
        container, overrides = split_choice(alg)
        values = {**params.get(container, {}), **overrides}
        return {f"algorithm={container}": {f"{k}={v}": {} for k, v in values.items()}}
    if not own:
        raise CselError(f"MPICH's own choice for {coll} is kept somewhere, but the base "
                        "table has no subtree for it")
    # wrapped in an always-true condition, which marks it as MPICH's when read back
    return {"comm_type=intra": json.loads(json.dumps(own))}


def _size_chain(coll: str, r: Ranges, own: dict, params: Params) -> dict:
    key = SIZE_KEY.get(coll)
    if key is None:
        if len({a for _, a in r.limits}) != 1:
            raise CselError(f"MPICH compares no message size for {coll}: one algorithm "
                            "per comm size")
        return _leaf(coll, r.limits[0][1], own, params)
    chain = {}
    for upper, alg in r.limits:
        chain[f"{key}<={upper}" if upper is not None else f"{key}=any"] = _leaf(coll, alg, own,
                                                                                 params)
    return chain


def _bands(r: Ranges) -> list[tuple[int | None, Ranges]]:
    """A comm size's `comm_avg_ppn<=N` entries in order (None: `=any`): each measured
    layout's ranges, the averages between measured ones and above them left to `limits`
    (MPICH's own, as tune writes)."""
    rest, out, below = Ranges(r.limits), [], 0
    for ppn in sorted(r.per_ppn):
        if ppn - 1 > below:
            out.append((ppn - 1, rest))
        out.append((ppn, r.per_ppn[ppn]))
        below = ppn
    return [*out, (None, rest)]


def _layers(coll: str, r: Ranges, own: dict, params: Params) -> dict:
    """A comm size's entry: its size chain, or, measured per layout, a chain per ranks a
    node (MPICH takes the first `comm_avg_ppn<=N` whose N x nodes holds the ranks)."""
    if not r.per_ppn:
        return _size_chain(coll, r, own, params)
    return {f"comm_avg_ppn<={n}" if n is not None else "comm_avg_ppn=any":
            _size_chain(coll, band, own, params) for n, band in _bands(r)}


def _ours(coll: str, per_np: dict[int | None, Ranges], own: dict, params: Params) -> dict:
    nps = sorted(n for n in per_np if n is not None)
    out = {}
    if nps and nps[0] > 2:
        # smaller communicators were not measured: MPICH's own choice there
        out[f"comm_size<={nps[0] - 1}"] = _size_chain(coll, Ranges([(None, None)]), own,
                                                      params)
    out.update({f"comm_size<={n}": _layers(coll, per_np[n], own, params) for n in nps})
    # larger communicators: as the largest tuned size (repeated, so reading back keeps it)
    out["comm_size=any"] = _layers(coll, per_np.get(None) or per_np[nps[-1]], own, params)
    return out


def render(base: dict, tuning: Tuning, params: Params | None = None) -> str:
    """The tuning file: `base` (MPICH's own table) with the tuned collectives replaced;
    `params` gives the leaves of parameterised algorithms their values."""
    table = json.loads(json.dumps(base))  # a deep copy that keeps the key order
    for coll, per_np in tuning.items():
        key = f"collective={coll}"
        old = table.get(key, {})
        old_intra = old.get("comm_type=intra", {})
        ours = _ours(coll, per_np, old_intra, params or {})
        if coll in COMMUTATIVE_ONLY and old_intra:
            # other operations fall through to MPICH's own subtree
            intra = {"is_commutative=yes": ours,
                     **{k: v for k, v in old_intra.items() if k != "is_commutative=yes"}}
        else:
            intra = ours
        node = {"comm_type=intra": intra}
        node.update({k: v for k, v in old.items() if k != "comm_type=intra"})
        table[key] = node
    return json.dumps(table, indent=1) + "\n"


_CONTAINER = re.compile(r"^algorithm=(MPIR_\w+)$")
_PARAM = re.compile(r"^(\w+)=(\S+)$")


def _container(node: dict, params: Params) -> str | None:
    """The choice of a leaf (its parameters that differ from `params`), None for MPICH's
    own subtree."""
    if len(node) == 1:
        key, sub = next(iter(node.items()))
        m = _CONTAINER.match(key)
        if m and isinstance(sub, dict):
            launch = params.get(m.group(1), {})
            values = {pm.group(1): pm.group(2) for pm in map(_PARAM.match, sub) if pm}
            return choice(m.group(1), {k: v for k, v in values.items() if launch.get(k) != v})
        if "comm_type=intra" in node:
            return None
    raise CselError(f"neither an algorithm nor MPICH's own subtree: {str(node)[:80]}")


def _read_chain(coll: str, chain: dict, params: Params) -> Ranges | None:
    """Our size chain, None for anything else (a subtree of MPICH's own table)."""
    key = SIZE_KEY.get(coll)
    try:
        if key is None:
            return Ranges([(None, _container(chain, params))])
        limits: list[tuple[int | None, str | None]] = []
        for k, v in chain.items():
            lm = re.fullmatch(rf"{key}<=(\d{{1,18}})|{key}=any", k)
            if not lm or not isinstance(v, dict):
                return None
            limits.append((int(lm.group(1)) if lm.group(1) else None, _container(v, params)))
    except CselError:
        return None
    if not limits or limits[-1][0] is not None:
        return None
    uppers = [u for u, _ in limits[:-1] if u is not None]
    if uppers != sorted(uppers):
        raise CselError(f"{coll}: size limits not ascending: {uppers}")
    return Ranges(limits)


def _read_layers(coll: str, node: dict, params: Params) -> Ranges | None:
    """A comm size's entry as `_layers` writes it; a layer that is MPICH's own at every size
    is what `_layers` puts between measured ones (a measured one like it means the same)."""
    if not any(k.startswith("comm_avg_ppn") for k in node):
        return _read_chain(coll, node, params)
    out, bounds = Ranges(), []
    for k, v in node.items():
        m = re.fullmatch(r"comm_avg_ppn<=(\d{1,9})|comm_avg_ppn=any", k)
        r = _read_chain(coll, v, params) if m and isinstance(v, dict) else None
        if r is None or not m:
            return None
        if m.group(1) is None:
            out.limits = r.limits
        elif any(a is not None for _, a in r.limits):
            out.per_ppn[int(m.group(1))] = r
        bounds.append(int(m.group(1) or 0))
    if not out.limits or bounds[-1] != 0 or bounds[:-1] != sorted(bounds[:-1]):
        raise CselError(f"{coll}: comm_avg_ppn limits not ascending, or no =any last")
    return out


def _read_comm_sizes(coll: str, node: dict, params: Params) -> dict[int | None, Ranges] | None:
    out: dict[int | None, Ranges] = {}
    for k, v in node.items():
        m = re.fullmatch(r"comm_size<=(\d{1,18})|comm_size=any", k)
        if not m or not isinstance(v, dict):
            return None
        r = _read_layers(coll, v, params)
        if r is None:
            return None
        out[int(m.group(1)) if m.group(1) else None] = r
    if None not in out:
        return None
    explicit = sorted(n for n in out if n is not None)
    if explicit and out[None] == out[explicit[-1]]:
        del out[None]  # the repeat of the largest tuned size
    # MPICH's own choice just below the next size is what render puts below the first
    # tuned size: not a tuned size of its own (render writes it again)
    if len(explicit) > 1 and explicit[0] + 1 == explicit[1] and not out[explicit[0]].per_ppn \
            and all(a is None for _, a in out[explicit[0]].limits):
        del out[explicit[0]]
    return out


def parse(text: str, params: Params | None = None) -> Tuning:
    """The tuned collectives of a tuning file written by `render` (subtrees of MPICH's own
    table are not ours and are skipped); a leaf's parameters that equal `params` (the launch
    values render was given) are not part of its choice."""
    try:
        table = parse_json(text)
    except ValueError as e:
        raise CselError(f"not JSON: {e}") from None
    if not isinstance(table, dict):
        raise CselError("the top level is not an object")
    out: Tuning = {}
    for key, node in table.items():
        m = re.fullmatch(r"collective=(\w+)", key)
        if not m:
            raise CselError(f"unexpected top-level key {key!r}")
        coll = m.group(1)
        intra = node.get("comm_type=intra") if isinstance(node, dict) else None
        if not isinstance(intra, dict):
            continue
        if coll in COMMUTATIVE_ONLY and "is_commutative=yes" in intra:
            intra = intra["is_commutative=yes"]
        got = _read_comm_sizes(coll, intra, params or {})
        if got:
            out[coll] = got
    return out


def algorithm_for(table: dict, coll: str, np: int, value: int, commutative: bool = True,
                  params: Params | None = None, nodes: int = 1) -> str | None:
    """What MPICH selects from `table` for an intra-communicator call on `np` ranks over
    `nodes` nodes, as a choice (following only the keys this writer uses; None where MPICH's
    own subtree decides)."""
    node = table.get(f"collective={coll}", {}).get("comm_type=intra")
    if not isinstance(node, dict):
        return None
    if coll in COMMUTATIVE_ONLY and "is_commutative=yes" in node:
        if not commutative:
            return None
        node = node["is_commutative=yes"]
    for key, sub in node.items():  # in order: the first that matches wins, as in MPICH
        m = re.fullmatch(r"comm_size<=(\d{1,18})|comm_size=any", key)
        if not m or not isinstance(sub, dict):
            return None
        if m.group(1) is None or np <= int(m.group(1)):
            chain = _read_layers(coll, sub, params or {})
            if chain and chain.per_ppn:
                chain = next(r for n, r in _bands(chain) if n is None or np <= n * nodes)
            return chain.algorithm_at(value) if chain else None
    return None
