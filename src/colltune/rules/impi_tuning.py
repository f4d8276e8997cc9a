"""Intel MPI's JSON tuning file (I_MPI_TUNING=file.json), read and written.

Shape, as Intel MPI 2021.18 reads it (observed; docs/impi.md):
`{"coll=Bcast": {"ppn=-1": {"comm_size=4": {"comm_id=-1": {"msg_size=1024": {"Bcast=1": {}},
"msg_size=-1": {"Bcast=3": {}}}}}}}`. Keys ascend; the first key at or above the value wins;
-1 is the catch-all and comes last; the last rule also covers larger values. Without the
comm_id level the library misreads the file. A collective the file names is wholly the
file's: Intel MPI has no "library's choice" entry for a range.

The ppn level (ranks a node) is -1 unless rules were measured per layout (tune --layouts):
then one layer per measured ppn, read as the other levels are (tests/test_impi.py shows it
on the library): a job of another ppn takes the first layer at or above its own, else the
largest, as a job of an unmeasured size takes a comm size's rules."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from colltune.errors import parse_json


class ImpiFormatError(ValueError):
    """An Intel MPI tuning file or profile the library would misread or refuse."""


# a collective's name in the file (coll=Bcast; its preset key repeats it: Bcast=3)
NAMES = ("Allgather", "Allgatherv", "Allreduce", "Alltoall", "Alltoallv", "Alltoallw",
          "Barrier", "Bcast", "Exscan", "Gather", "Gatherv", "Reduce", "Reduce_scatter",
          "Reduce_scatter_block", "Scan", "Scatter", "Scatterv")


def file_name(coll: str) -> str:
    """colltune's collective name as the file spells it: reduce_scatter -> Reduce_scatter."""
    return coll[0].upper() + coll[1:]


@dataclass
class Rules:
    """One collective at one comm-size key: (upper message size, inclusive; None for the
    catch-all -1) and the preset id, ascending."""

    limits: list[tuple[int | None, int]] = field(default_factory=list)

    def preset_at(self, size: int) -> int | None:
        """The preset Intel MPI runs for `size` (the last rule covers larger sizes)."""
        for upper, preset in self.limits:
            if upper is None or size <= upper:
                return preset
        return self.limits[-1][1] if self.limits else None

    def ranges(self) -> list[tuple[int, int | None, int]]:
        """(lowest size, highest size or None, preset) of each rule."""
        out, low = [], 0
        for upper, preset in self.limits:
            out.append((low, upper, preset))
            low = (upper or 0) + 1
        return out


# collective (colltune's name) -> comm size key (None: -1) -> its rules
Tuning = dict[str, dict[int | None, Rules]]
# ranks a node (None: -1, any) -> the rules measured with that many
Layers = dict[int | None, Tuning]
# a rule's preset where the library's own table serves the range: only a table spliced
# into Intel MPI's own (rules/impi_table.py) can say so; JSON and variables cannot
LIBRARY = -1


def refuse_library(t: Tuning, what: str) -> None:
    """ImpiFormatError where a rule leaves a range to the library: `what` cannot say so."""
    for coll, per in sorted(t.items()):
        for np, r in per.items():
            if any(p == LIBRARY for _, p in r.limits):
                raise ImpiFormatError(f"{coll} at comm size {np}: {what} has no entry for "
                                      "Intel MPI's own choice (only --format impi-bin does)")


def rules_from(points: list[tuple[int, int]]) -> Rules:
    """Rules from (lowest size of a range, preset), ascending: each range ends where the next
    begins; the last is the catch-all. Neighbours with one preset merge."""
    merged: list[tuple[int, int]] = []
    for start, preset in points:
        if not merged or merged[-1][1] != preset:
            merged.append((start, preset))
    limits: list[tuple[int | None, int]] = [
        (nxt[0] - 1, preset) for (_, preset), nxt in zip(merged, merged[1:], strict=False)]
    return Rules(limits + [(None, merged[-1][1])] if merged else [])


def _num(key: str) -> int | None:
    return None if key == "-1" else int(key)


def _order(k: int | None) -> tuple[int, int]:
    return (1, 0) if k is None else (0, k)


def render(t: Tuning) -> str:
    """A file of one layer, ppn=-1: its rules for every layout."""
    return render_layers({None: t})


def collectives(layers: Layers) -> list[str]:
    """The collectives any layer tunes, sorted."""
    return sorted({c for t in layers.values() for c in t})


def merged(old: Layers, new: Layers) -> Layers:
    """`old` with `new`'s rules in it, layer by layer and collective by collective (a comm
    size `new` tunes replaces the old one's rules); layers left empty dropped."""
    for ppn, t in new.items():
        for c, per in t.items():
            old.setdefault(ppn, {}).setdefault(c, {}).update(per)
    return {k: v for k, v in old.items() if v}


def render_layers(layers: Layers) -> str:
    for t in layers.values():
        refuse_library(t, "a JSON tuning file")
    doc: dict[str, object] = {}
    for coll in collectives(layers):
        name = file_name(coll)
        per_ppn: dict[str, object] = {}
        for ppn in sorted((k for k in layers if coll in layers[k]), key=_order):
            sizes: dict[str, object] = {}
            for np in sorted(layers[ppn][coll], key=_order):
                rules = layers[ppn][coll][np]
                msgs: dict[str, object] = {
                    f"msg_size={-1 if u is None else u}": {f"{name}={p}": {}}
                    for u, p in rules.limits}
                sizes[f"comm_size={-1 if np is None else np}"] = {"comm_id=-1": msgs}
            per_ppn[f"ppn={-1 if ppn is None else ppn}"] = sizes
        doc[f"coll={name}"] = per_ppn
    return json.dumps(doc, indent=1) + "\n"


def _level(obj: object, key: str, where: str) -> list[tuple[int | None, object]]:
    """The entries `key=N` of one level, checked as Intel MPI needs them: integers, -1 last,
    ascending."""
    if not isinstance(obj, dict) or not obj:
        raise ImpiFormatError(f"{where}: expected an object of '{key}=N' entries")
    out = []
    for k, v in obj.items():
        m = re.fullmatch(rf"{key}=(-1|\d{{1,18}})", k)  # no int() of 300,000 digits
        if not m:
            raise ImpiFormatError(f"{where}: '{k}' is not '{key}=N'")
        out.append((_num(m.group(1)), v))
    keys = [k for k, _ in out]
    if keys != sorted(keys, key=_order) or len(set(keys)) != len(keys):
        raise ImpiFormatError(f"{where}: '{key}' keys must ascend with -1 last (Intel MPI takes "
                          "the first key at or above the value)")
    return out


def parse(text: str) -> Tuning:
    """A tuning file as Intel MPI reads it for a job whose ranks a node colltune does not
    know (its -1 layer, else its largest); ImpiFormatError where it would misread it."""
    return layer_for(parse_layers(text), None)


def layer_for(layers: Layers, ppn: int | None) -> Tuning:
    """The rules a job of `ppn` ranks a node takes from each collective's layers (None:
    the -1 layer, else the largest)."""
    out: Tuning = {}
    for coll in collectives(layers):
        have = [k for k in layers if coll in layers[k]]
        above = sorted(k for k in have if k is not None and ppn is not None and k >= ppn)
        key = above[0] if above else None if None in have else max(
            k for k in have if k is not None)
        out[coll] = layers[key][coll]
    return out


def parse_layers(text: str) -> Layers:
    """Every layer of a tuning file, as Intel MPI reads it; ImpiFormatError where it would
    misread it."""
    try:
        doc = parse_json(text)
    except ValueError as e:
        raise ImpiFormatError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or not doc:
        raise ImpiFormatError("an Intel MPI tuning file is an object of 'coll=Name' entries")
    out: Layers = {}
    by_name = {n: n.lower() for n in NAMES}
    for ckey, tree in doc.items():
        m = re.fullmatch(r"coll=(\w+)", ckey)
        if not m or m.group(1) not in by_name:
            raise ImpiFormatError(f"'{ckey}' names no collective Intel MPI tunes")
        name, coll = m.group(1), by_name[m.group(1)]
        for ppn, per_ppn in _level(tree, "ppn", ckey):
            for np, ids in _level(per_ppn, "comm_size", ckey):
                out.setdefault(ppn, {}).setdefault(coll, {})[np] = _rules(
                    ids, name, f"{ckey} comm_size={np}")
    return out


def _rules(ids: object, name: str, where: str) -> Rules:
    (cid, msgs), *more = _level(ids, "comm_id", where)
    if cid is not None or more:
        raise ImpiFormatError(f"{where}: one comm_id=-1 expected")
    limits: list[tuple[int | None, int]] = []
    for upper, leaf in _level(msgs, "msg_size", where):
        if not isinstance(leaf, dict) or len(leaf) != 1:
            raise ImpiFormatError(f"{where} msg_size={upper}: one '{name}=ID' expected")
        (pkey, _), = leaf.items()
        pm = re.fullmatch(rf"{name}=(\d{{1,18}})", pkey)
        if not pm:
            raise ImpiFormatError(f"{where} msg_size={upper}: '{pkey}' is not '{name}=ID'")
        limits.append((upper, int(pm.group(1))))
    return Rules(limits)


def rules_for(t: Tuning, coll: str, np: int) -> Rules | None:
    """The rules Intel MPI applies to `coll` at `np` ranks: the first comm-size key at or
    above np, else the catch-all, else the largest key (observed on 2021.18.1: a file with
    only comm_size=4 runs its rules at 2, 3 and 8 ranks too)."""
    per = t.get(coll)
    if not per:
        return None
    keys = sorted(k for k in per if k is not None and k >= np)
    if keys:
        return per[keys[0]]
    if None in per:
        return per[None]
    return per[max(k for k in per if k is not None)]
