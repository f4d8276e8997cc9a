"""Intel MPI's binary tuning table (its own `opt/mpi/etc/tuning_*.dat`, what
I_MPI_TUNING_BIN loads and I_MPI_TUNING_BIN_DUMP writes), read and written, and one
collective's rules spliced into it.

Layout, as Intel MPI 2021.18 writes and reads it (observed; docs/impi.md, "The library's own
table"): zlib over a tree of nodes, each a 40-byte header (parent offset, level, the
children's level, key, slots, children, tag, 0) then, under tag 0xEEEEEEEE, the children's
offsets (8 bytes each, `slots` of them), or under tag 0xCCCCCCCC (a leaf: one algorithm)
`children` records of five int32 (the algorithm's composition, then each part's algorithm
and parameters; -1: chosen at run time). Below a collective's node the levels are ppn,
comm size, comm id, message size and the leaf; at each the first key at or above the value
wins, -1 is the catch-all, else the last key serves larger values. A file may come from
another user: it is data, bounded and checked as it is read."""

from __future__ import annotations

import copy
import json
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from colltune.rules.impi_tuning import LIBRARY, NAMES, ImpiFormatError, Layers, Rules, file_name

_HEADER = struct.Struct("<qiiqiiII")
_INNER, _LEAF = 0xEEEEEEEE, 0xCCCCCCCC
_SLOT, _RECORD = struct.Struct("<Q"), struct.Struct("<5i")
_MAX_BYTES = 64 << 20  # Intel MPI's largest table here is 1.1 MB decompressed
_MAX_DEPTH, _MAX_KIDS = 32, 1 << 16
_CATCH_ALL = -1
Record = tuple[int, int, int, int, int]


@dataclass
class Node:
    """One node: a key at a level, and its children, or a leaf's records."""

    level: int
    child_level: int
    key: int
    kids: list[Node] = field(default_factory=list)
    records: list[Record] | None = None  # a leaf: one algorithm
    spare: int = 0  # unused child slots (the root has one)

    def child(self, key: int) -> Node | None:
        return next((k for k in self.kids if k.key == key), None)


def decode(raw: bytes) -> Node:
    """The tree a table holds; ImpiFormatError where it is not one Intel MPI wrote."""
    try:
        z = zlib.decompressobj()
        data = z.decompress(raw, _MAX_BYTES)
    except zlib.error as e:
        raise ImpiFormatError(f"not an Intel MPI binary tuning table (zlib: {e})") from None
    if z.unconsumed_tail:
        raise ImpiFormatError(f"larger than {_MAX_BYTES >> 20} MiB decompressed")
    seen: set[int] = set()
    end, header = len(data), _HEADER.unpack_from

    # a table of 1.3 MB (Intel MPI's largest here) is 176,000 nodes, about a second to
    # decode: each node's slots and records are unpacked in one call each
    def node(off: int, depth: int) -> Node:
        if depth > _MAX_DEPTH or off in seen or off < 0 or off + _HEADER.size > end:
            raise ImpiFormatError(f"a node at byte {off} is out of bounds, repeated or too "
                                  "deep")
        seen.add(off)
        _, level, below, key, slots, count, tag, _ = header(data, off)
        body = off + _HEADER.size
        if tag == _LEAF and 0 <= count <= 64 and body + count * _RECORD.size <= end:
            return Node(level, below, 0, records=list(_RECORD.iter_unpack(
                data[body:body + count * _RECORD.size])))
        if tag != _INNER or not 0 <= count <= slots <= _MAX_KIDS or \
                body + slots * _SLOT.size > end:
            raise ImpiFormatError(f"the node at byte {off} is malformed")
        offsets = struct.unpack_from(f"<{count}Q", data, body)
        return Node(level, below, key, [node(k, depth + 1) for k in offsets],
                    spare=slots - count)

    return node(0, 0)


def encode(root: Node) -> bytes:
    """The table Intel MPI loads from `root` (each node before its children)."""
    out = bytearray()

    def put(n: Node, parent: int) -> int:
        off = len(out)
        if n.records is not None:
            out.extend(_HEADER.pack(parent, n.level, n.child_level, n.key, len(n.records),
                                    len(n.records), _LEAF, 0))
            for r in n.records:
                out.extend(_RECORD.pack(*r))
            return off
        slots = len(n.kids) + n.spare
        out.extend(_HEADER.pack(parent, n.level, n.child_level, n.key, slots, len(n.kids),
                                _INNER, 0))
        at = len(out)
        out.extend(bytes(slots * _SLOT.size))
        for i, k in enumerate(n.kids):
            _SLOT.pack_into(out, at + i * _SLOT.size, put(k, off))
        return off

    put(root, -1)
    return zlib.compress(bytes(out))


def pick(kids: list[Node], value: int) -> Node | None:
    """The child Intel MPI takes for `value`: the first key at or above it, else the
    catch-all, else the last."""
    ordered = [k for k in kids if k.key != _CATCH_ALL]
    return next((k for k in ordered if k.key >= value),
                next((k for k in kids if k.key == _CATCH_ALL), kids[-1] if kids else None))


def _exact(parent: Node, value: int) -> Node:
    """A child of `parent` that `value` alone selects, a copy of the one it selected, put in
    place so that every other value still selects a node equal to the one it did."""
    was = pick(parent.kids, value)
    if was is None:
        raise ImpiFormatError(f"level {parent.child_level} has no entries")
    mine = copy.deepcopy(was)
    mine.key = value
    below = [k for k in parent.kids if k.key != _CATCH_ALL and k.key < value]
    above = [k for k in parent.kids if (k.key == _CATCH_ALL or k.key > value)]
    if value - 1 > max((k.key for k in below), default=-1):
        fence = copy.deepcopy(was)  # the values just below this one keep what they had
        fence.key = value - 1
        below.append(fence)
    if was.key != _CATCH_ALL and was.key < value:
        tail = copy.deepcopy(was)  # the last key served larger values: so does its copy
        tail.key = 2**31 - 1
        above.append(tail)
    parent.kids = [*below, mine, *above]
    return mine


def find(root: Node, match: Callable[[Node], bool]) -> list[int]:
    """The keys from the root to the first node (depth first) for which `match(node)` is true."""
    def walk(n: Node, path: list[int]) -> list[int] | None:
        if match(n):
            return path
        for k in n.kids:
            if (got := walk(k, [*path, k.key])) is not None:
                return got
        return None
    got = walk(root, [])
    if got is None:
        raise ImpiFormatError("no node of the table matches")
    return got


def at(root: Node, path: list[int]) -> Node:
    """The node `path` (keys from the root) leads to."""
    n = root
    for key in path:
        nxt = n.child(key)
        if nxt is None:
            raise ImpiFormatError(f"the table has no entry {key} on the way to {path}")
        n = nxt
    return n


def _sizes(coll: Node, ppn: int, np: int) -> Node:
    """The node whose children are the message-size entries a job of `np` ranks, `ppn` per
    node, selects (comm id: the catch-all)."""
    p = pick(coll.kids, ppn)
    c = pick(p.kids, np) if p else None
    i = (c.child(_CATCH_ALL) or (c.kids[0] if len(c.kids) == 1 else None)) if c else None
    if i is None or not i.kids or any(m.records is not None or len(m.kids) != 1
                                      for m in i.kids):
        raise ImpiFormatError(f"no message-size entries for ppn={ppn} comm_size={np}")
    return i


def messages(coll: Node, ppn: int, np: int) -> list[tuple[int, Node]]:
    """A collective's message-size entries as Intel MPI selects them for a job of `np`
    ranks, `ppn` per node: (upper size, -1: catch-all; the leaf)."""
    return [(m.key, m.kids[0]) for m in _sizes(coll, ppn, np).kids]


def selected(coll: Node, ppn: int, np: int, size: int) -> Node:
    """The leaf (one algorithm) Intel MPI runs for a call of `size` bytes in that job."""
    m = pick(_sizes(coll, ppn, np).kids, size)
    assert m is not None  # _sizes refused a node without entries
    return m.kids[0]


def clip(entries: list[tuple[int, Node]], low: int, high: int | None
         ) -> list[tuple[int, Node]]:
    """The entries that serve sizes `low`..`high` (None: all above), each capped at `high`."""
    out, prev = [], -1
    for upper, leaf in entries:
        top = upper if upper != _CATCH_ALL else None
        if (top is None or top >= low) and (high is None or prev < high):
            out.append((upper if high is None or (top is not None and top <= high) else high,
                        leaf))
        if top is None:
            break
        prev = top
    if high is None and out and out[-1][0] != _CATCH_ALL:
        out.append((_CATCH_ALL, out[-1][1]))  # the last rule serves larger sizes anyway
    return out


def copied_along(root: Node, path: list[int]) -> Node:
    """A copy of `root` that shares every subtree but the nodes on `path` and the whole
    subtree at its end, which a splice may change (a deep copy of the whole table, 1 MB of
    nodes, took 0.3 s; a collective's entry is a small part of it)."""
    top = replace(root, kids=list(root.kids))
    n = top
    for i, key in enumerate(path):
        j = next((j for j, k in enumerate(n.kids) if k.key == key), None)
        if j is None:
            raise ImpiFormatError(f"the table has no entry {key} on the way to {path}")
        kid = n.kids[j]
        n.kids[j] = copy.deepcopy(kid) if i == len(path) - 1 else replace(
            kid, kids=list(kid.kids))
        n = n.kids[j]
    return top


def splice(coll: Node, ppn: int, np: int, entries: list[tuple[int, Node]]) -> None:
    """Give jobs of `np` ranks, `ppn` per node, these message-size entries for the
    collective (ascending, the last the catch-all), leaving every other job size and ppn
    to entries equal to the ones they had."""
    if not entries or entries[-1][0] != _CATCH_ALL:
        raise ImpiFormatError("the message-size entries must end with the catch-all")
    p = _exact(coll, ppn)
    c = _exact(p, np)
    ids = c.child(_CATCH_ALL) or (c.kids[0] if len(c.kids) == 1 else None)
    if ids is None or not ids.kids:
        raise ImpiFormatError(f"no comm_id entry for ppn={ppn} comm_size={np}")
    proto = ids.kids[0]
    made = []
    for upper, leaf in entries:
        m = Node(proto.level, proto.child_level, upper, [copy.deepcopy(leaf)])
        made.append(m)
    ids.kids = made


# colltune's record of what it spliced, beside the table: one rule a line. Not JSON, so
# that no one loads it as a tuning file by mistake (Intel MPI 2021.18 took a JSON object
# of an unknown key as collective 0's table and ran it)
_HEAD = "# colltune: the rules spliced into Intel MPI's own table"
_LINE = re.compile(r"([a-z_]{1,32}) ([0-9]{1,7}) ([0-9]{1,7}) ([0-9]{1,12}) ([0-9]{1,12}|-) "
                   r"([0-9]{1,3}|library)")


def render_rules(layers: Layers, table: str) -> str:
    """The record of the rules spliced into the table at `table`, a layer per ranks a node:
    collective, comm size, ppn, lowest and highest size ('-': and above), preset or
    'library' (its own entries)."""
    # the path quoted as JSON: a newline in it cannot start a line of rules
    lines = [f"{_HEAD} {json.dumps(table)} (a record for colltune; jobs load the table)"]
    rows = sorted((coll, np, ppn, r) for ppn, t in layers.items() if ppn is not None
                  for coll, per in t.items() for np, r in per.items() if np is not None)
    for coll, np, ppn, r in rows:
        lines += [f"{coll} {np} {ppn} {low} {'-' if high is None else high} "
                  f"{'library' if p == LIBRARY else p}" for low, high, p in r.ranges()]
    return "\n".join(lines) + "\n"


def parse_rules(text: str) -> Layers:
    """The rules a record holds, a layer per ranks a node; ImpiFormatError where a line is
    not one colltune wrote, or a job's ranges do not run from 0 upwards without a gap."""
    out: Layers = {}
    ends: dict[tuple[str, int, int], int | None] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line.strip())
        if not m or file_name(m.group(1)) not in NAMES:
            raise ImpiFormatError(f"line {n}: not 'collective np ppn low high preset'")
        coll, np, per, low = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        high = None if m.group(5) == "-" else int(m.group(5))
        if not 0 < per <= np:
            raise ImpiFormatError(f"line {n}: {per} ranks per node does not fit {np} ranks")
        prev = ends.get((coll, np, per), -1)
        if prev is None or low != prev + 1 or (high is not None and high < low):
            raise ImpiFormatError(f"line {n}: {coll} at {np} ranks, {per} a node: the ranges "
                                  "must run from 0 upwards without a gap")
        ends[(coll, np, per)] = high
        preset = LIBRARY if m.group(6) == "library" else int(m.group(6))
        out.setdefault(per, {}).setdefault(coll, {}).setdefault(np, Rules()).limits.append(
            (high, preset))
    if not out or any(h is not None for h in ends.values()):
        raise ImpiFormatError("no rules, or a job's last range is not open ('-')")
    return out
