"""Open MPI 6's JSON rules file for coll/tuned (the same `coll_tuned_dynamic_rules_filename`
as the classic file): read as its reader reads it, and written from colltune's decisions.

Written from the reader's source (ompi/mca/coll/tuned/coll_tuned_dynamic_file.c and
coll_tuned_dynamic_rules.c at v6.0.x bb1c85d203; docs/openmpi.md), not from its docs:

- the file is tried as JSON first (opal's json-parser: strict JSON); not JSON, it is read
  as a classic file; JSON it cannot use drops the whole file (fixed decisions, silently);
- `collectives`: an object of collective name (lowercase) -> list of communicator rules;
  an unknown name drops the file;
- a communicator rule: `comm_size_min` (default 0), `comm_size_max` (default INT_MAX),
  `comm_rank_distribution` ("any", "one-per-node", "single-node"; another value is read
  as "any"), `rules` (required); sizes are read into an int, so "inf" as `comm_size_max`
  becomes -1 and the rule never matches;
- a message rule: `msg_size_min` (0), `msg_size_max` (infinity), `faninout`, `seg_size`,
  `reqs` (0), each an integer or a string starting "inf", "Inf" or "INF"; anything else
  drops the file; `alg` an integer or an algorithm's name: missing, the rule runs the fixed
  decision; not an algorithm of that collective, the rule is disabled; other keys (the
  project's converter writes `segsize`) are ignored;
- a duplicated key: the first one counts;
- lookup: the first communicator rule whose distribution fits and whose inclusive bounds
  hold the size, then its first message rule whose bounds hold the message size (what
  classic files compare: `ompi_classic.lookup_size`); no match: the fixed decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.errors import FormatError, parse_json
from colltune.rules import ompi_classic as classic
from colltune.rules.ompi_classic import COLLTYPE, OMPI_UNTUNED_IDS, RulesFile

INF = 2**63 - 1  # COLL_RULES_MESSAGE_SIZE_INF: SSIZE_MAX
INT_MAX = 2**31 - 1
DISTRIBUTIONS = ("any", "one-per-node", "single-node")
# the version Open MPI's own documentation gives JSON rules files (classic files are 1, 2)
RULE_FILE_VERSION = 3
# the keys Open MPI's schema allows at the top (it requires the first three)
TOP_KEYS = ("rule_file_version", "module", "collectives", "$schema")
NAMES = {**COLLTYPE, **{n: i for i, n in OMPI_UNTUNED_IDS.items()}}
_MSG_KEYS = {"msg_size_min", "msg_size_max", "alg", "faninout", "seg_size", "reqs"}
_COMM_KEYS = {"comm_size_min", "comm_size_max", "comm_rank_distribution", "rules"}


class JsonRulesError(FormatError):
    """A file Open MPI 6 would drop whole (its fixed decisions run instead)."""


@dataclass
class MsgRule:
    size_min: int = 0
    size_max: int = INF
    alg: int = 0  # 0: the fixed decision
    faninout: int = 0
    segsize: int = 0
    reqs: int = 0
    disabled: bool = False  # an algorithm the collective does not have: never matches


@dataclass
class CommRule:
    size_min: int = 0
    size_max: int = INT_MAX
    distribution: str = "any"
    rules: list[MsgRule] = field(default_factory=list)


@dataclass
class JsonRules:
    collectives: dict[str, list[CommRule]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # what Open MPI reads otherwise


def claims(text: str) -> bool:
    """Whether `text` is a JSON object with a `collectives` object (MPICH's and Intel MPI's
    JSON files have none)."""
    if not text.lstrip().startswith("{"):
        return False
    try:
        doc = parse_json(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("collectives"), dict)


def _first_wins(where: str, warnings: list[str]) -> Callable[[list[tuple[str, object]]],
                                                             dict[str, object]]:
    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for k, v in pairs:
            if k in out:
                warnings.append(f"{where}: key {k[:40]!r} twice: Open MPI reads the first")
            else:
                out[k] = v
        return out
    return hook


def parse(text: str, where: str = "<rules>",
          valid_algs: Callable[[str], dict[int, str]] | None = None) -> JsonRules:
    """The rules as Open MPI 6 reads them. `valid_algs(collective)`: its algorithms by id
    (an installation's catalog); without it, names cannot be checked and numbers are
    taken as they are."""
    out = JsonRules()
    try:
        doc = parse_json(text, object_pairs_hook=_first_wins(where, out.warnings))
    except ValueError as e:
        raise JsonRulesError(where, 0, f"not JSON ({str(e)[:80]}): Open MPI reads it as a "
                             "classic file") from None
    colls = doc.get("collectives") if isinstance(doc, dict) else None
    if isinstance(doc, dict) and isinstance(colls, dict):  # what the schema says of the rest
        out.warnings.extend(_schema_notes(doc))
    if not isinstance(colls, dict):
        raise JsonRulesError(where, 0, 'needs a "collectives" object of collective name -> '
                                       "list of communicator rules")
    for name, comm_rules in colls.items():
        if name not in NAMES:
            raise JsonRulesError(where, 0, f"unknown collective {name[:40]!r} (Open MPI "
                                           "drops the file): use lowercase names such as "
                                           "allgather")
        if name not in COLLTYPE:
            out.warnings.append(f"{name}: coll/tuned has no dynamic decision for it")
        if not isinstance(comm_rules, list):
            raise JsonRulesError(where, 0, f"{name}: needs a list of communicator rules")
        algs = valid_algs(name) if valid_algs else None
        out.collectives[name] = [_comm_rule(c, f"{where}: {name}[{i}]", algs, out.warnings)
                                 for i, c in enumerate(comm_rules)]
    return out


def _schema_notes(doc: dict[str, object]) -> list[str]:
    """Where the top of a file departs from Open MPI's schema (its C reader does not care; a
    site that validates with the schema, or converts with Open MPI's script, rejects it)."""
    notes = [f"no {k!r}, which Open MPI's schema requires" for k in TOP_KEYS[:2]
             if k not in doc]
    notes += [f"key {str(k)[:40]!r} is not in Open MPI's schema (its reader ignores it)"
              for k in list(doc)[:20] if k not in TOP_KEYS]
    return notes


def _integer(obj: dict[str, object], key: str, default: int, where: str) -> int:
    """An integer field as coll_tuned_get_json_integer_field reads it (or the default)."""
    if key not in obj:
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise JsonRulesError(where, 0, f"{key} must be an integer or \"inf\" (Open MPI "
                                       "drops the file)")
    if isinstance(v, str):
        if v[:3] in ("inf", "Inf", "INF"):
            return INF
        raise JsonRulesError(where, 0, f"{key} {v[:20]!r} is neither an integer nor "
                                       "\"inf\" (Open MPI drops the file)")
    if not -(2**63) <= v < 2**63:
        raise JsonRulesError(where, 0, f"{key} does not fit in 64 bits")
    return v


def _comm_rule(c: object, where: str, algs: dict[int, str] | None, warnings: list[str]
               ) -> CommRule:
    if not isinstance(c, dict):
        raise JsonRulesError(where, 0, "a communicator rule must be an object")
    r = CommRule()
    # read into a C int: "inf" (SSIZE_MAX) becomes -1, a rule no communicator matches
    for key, default in (("comm_size_min", 0), ("comm_size_max", INT_MAX)):
        v = _integer(c, key, default, where)
        as_int = (v + 2**31) % 2**32 - 2**31
        if as_int != v:
            warnings.append(f"{where}: {key} {v if v != INF else 'inf'} is read as "
                            f"{as_int} by Open MPI (a C int)")
        setattr(r, "size_min" if key.endswith("min") else "size_max", as_int)
    d = c.get("comm_rank_distribution", "any")
    if not isinstance(d, str):
        raise JsonRulesError(where, 0, "comm_rank_distribution must be a string")
    if d not in DISTRIBUTIONS:
        warnings.append(f"{where}: comm_rank_distribution {d[:40]!r} is read as \"any\" "
                        f"(Open MPI knows {', '.join(DISTRIBUTIONS)})")
        d = "any"
    r.distribution = d
    warnings += [f"{where}: key {k[:40]!r} is not read" for k in c if k not in _COMM_KEYS]
    rules = c.get("rules")
    if not isinstance(rules, list):
        raise JsonRulesError(where, 0, "a communicator rule needs a list of \"rules\"")
    r.rules = [_msg_rule(m, f"{where}.rules[{j}]", algs, warnings)
               for j, m in enumerate(rules)]
    return r


def _msg_rule(m: object, where: str, algs: dict[int, str] | None, warnings: list[str]
              ) -> MsgRule:
    if not isinstance(m, dict):
        raise JsonRulesError(where, 0, "a message rule must be an object")
    r = MsgRule(_integer(m, "msg_size_min", 0, where), _integer(m, "msg_size_max", INF, where),
                0, _integer(m, "faninout", 0, where), _integer(m, "seg_size", 0, where),
                _integer(m, "reqs", 0, where))
    for k in m:
        if k not in _MSG_KEYS:
            hint = " (Open MPI's key is seg_size)" if k == "segsize" else ""
            warnings.append(f"{where}: key {k[:40]!r} is not read{hint}")
    alg = m.get("alg")
    if alg is None:
        warnings.append(f"{where}: no \"alg\": the rule runs the fixed decision")
    elif isinstance(alg, bool) or not isinstance(alg, int | str):
        warnings.append(f"{where}: \"alg\" is neither a number nor a name: the rule runs "
                        "the fixed decision")
    elif isinstance(alg, str):
        by_name = {v: k for k, v in (algs or {}).items()}
        if algs is not None and alg not in by_name:
            r.disabled = True
            warnings.append(f"{where}: algorithm {alg[:40]!r} unknown: the rule is disabled")
        r.alg = by_name.get(alg, 0)
    elif algs is not None and alg != 0 and alg not in algs:
        r.disabled = True
        warnings.append(f"{where}: algorithm {alg} unknown: the rule is disabled")
    else:
        r.alg = alg
    return r


def fits(distribution: str, nodes: int, ppn: int) -> bool:
    """Whether a communicator of `nodes` x `ppn` ranks passes a rule's distribution:
    one-per-node needs one rank on each node, single-node every rank on one node."""
    return (distribution == "any" or (distribution == "single-node" and nodes == 1)
            or (distribution == "one-per-node" and ppn == 1))


def lookup(rules: JsonRules, coll: str, np: int, size: int, nodes: int = 1, ppn: int = 0
           ) -> tuple[int, CommRule, int, MsgRule] | None:
    """The communicator rule and message rule (with their indexes) Open MPI 6 takes for a
    call of `size` (its lookup size) on `np` ranks laid out as `nodes` x `ppn`; None: the
    fixed decision."""
    ppn = ppn or np // max(nodes, 1)
    for i, c in enumerate(rules.collectives.get(coll, [])):
        if fits(c.distribution, nodes, ppn) and c.size_min <= np <= c.size_max:
            for j, m in enumerate(c.rules):
                if not m.disabled and m.size_min <= size <= m.size_max:
                    return i, c, j, m
            return None
    return None


def distribution_of(nodes: int, ppn: int) -> str:
    """The distribution a measurement's layout can promise: one node, one rank a node,
    or any (ranks on several nodes, several on each)."""
    return "single-node" if nodes == 1 else "one-per-node" if ppn == 1 else "any"


def from_classic(rf: RulesFile, distribution: str = "any") -> dict[str, list[CommRule]]:
    """colltune's rules as Open MPI 6's JSON, meaning what the classic file means on 4.1
    and 5.0: a section from its size to the next one's minus 1 (the first from 0, the last
    up), a rule from its size to the next one's minus 1 (the first from 0, the last up);
    every section for jobs of `distribution`."""
    out: dict[str, list[CommRule]] = {}
    names = {i: n for n, i in COLLTYPE.items()}
    for cid, secs in sorted(rf.collectives.items()):
        rules = []
        for i, sec in enumerate(secs):
            last = i == len(secs) - 1
            msgs = [MsgRule(0 if j == 0 else m.msgsize, INF if j == len(sec.rules) - 1
                            else sec.rules[j + 1].msgsize - 1, m.alg, m.faninout,
                            m.segsize, m.maxreq or 0)
                    for j, m in enumerate(sec.rules)]
            rules.append(CommRule(0 if i == 0 else sec.comsize,
                                  INT_MAX if last else secs[i + 1].comsize - 1,
                                  distribution, msgs))
        out[names[cid]] = rules
    return out


# the first communicator rule that fits wins: the specific distributions go before "any"
LAYER_ORDER = ("single-node", "one-per-node", "any")


def render_layers(layers: dict[str, RulesFile]) -> str:
    """The file for rules measured in several layouts: one layer of sections per rank
    distribution (`layers[distribution]`, each meaning what a classic file means), the
    specific ones first. Where a collective has an "any" layer, a specific distribution it
    was not measured in gets the library's own choice (alg 0) ahead of it: rules measured
    across nodes are not promised to a job on one node, nor one measured with several ranks
    a node to a job with one."""
    per = {d: from_classic(layers.get(d, RulesFile()), d) for d in LAYER_ORDER}
    collectives: dict[str, list[CommRule]] = {}
    for name in sorted({n for cs in per.values() for n in cs}):
        for d in LAYER_ORDER:
            if name in per[d]:
                collectives.setdefault(name, []).extend(per[d][name])
            elif name in per["any"]:
                collectives.setdefault(name, []).append(
                    CommRule(0, INT_MAX, d, [MsgRule(0, INF, 0)]))
    return render(collectives)


def about_path(rules_path: Path) -> Path:
    """Where colltune keeps what a JSON rules file cannot say (who wrote it, the layouts each
    layer was measured in): beside it, as Open MPI's schema allows no key of colltune's in
    the file itself."""
    return rules_path.with_name(rules_path.name + ".colltune.json")


def render_about(about: dict[str, object]) -> str:
    return json.dumps({"schema": "colltune-rules-about", "version": 1, **about}, indent=1) + "\n"


def measured_in(about_text: str) -> dict[str, list[str]]:
    """What the file beside a JSON rules file (about_path) says of the layouts each layer was
    measured in ("2x2"); {} where it says nothing readable (it is data: any user's)."""
    try:
        doc = parse_json(about_text)
        got = doc.get("measured_in") if isinstance(doc, dict) else None
    except ValueError:
        return {}
    if not isinstance(got, dict):
        return {}
    return {d: [v[:20] for v in vs if isinstance(v, str)][:64] for d, vs in got.items()
            if d in DISTRIBUTIONS and isinstance(vs, list)}


def layers(rules: JsonRules) -> dict[str, RulesFile]:
    """A JSON file colltune wrote, back as one layer of sections per rank distribution (to
    merge into); refused where a layer's ranges are not the contiguous ones colltune
    writes."""
    out = {}
    for d in DISTRIBUTIONS:
        part = {n: [c for c in cs if c.distribution == d] for n, cs in rules.collectives.items()}
        if any(part.values()):
            out[d] = to_classic(JsonRules({n: cs for n, cs in part.items() if cs}))
    return out


def render(collectives: dict[str, list[CommRule]]) -> str:
    """The file, as Open MPI's schema for it requires (docs/tuning-apps/
    tuned_dynamic_file_schema.json: `rule_file_version`, `module`, `collectives` and no other
    key; its C reader reads only `collectives`). Defaults are left out; infinity is "inf"
    for message sizes and left out for communicator sizes (a C int cannot hold it)."""
    def msg(m: MsgRule) -> dict[str, object]:
        d: dict[str, object] = {"msg_size_min": m.size_min,
                                "msg_size_max": "inf" if m.size_max >= INF else m.size_max,
                                "alg": m.alg}
        d.update({k: v for k, v in (("faninout", m.faninout), ("seg_size", m.segsize),
                                    ("reqs", m.reqs)) if v})
        return d

    def comm(c: CommRule) -> dict[str, object]:
        d: dict[str, object] = {"comm_size_min": c.size_min}
        if c.size_max < INT_MAX:
            d["comm_size_max"] = c.size_max
        if c.distribution != "any":
            d["comm_rank_distribution"] = c.distribution
        d["rules"] = [msg(m) for m in c.rules]
        return d

    doc: dict[str, object] = {"rule_file_version": RULE_FILE_VERSION, "module": "tuned"}
    doc["collectives"] = {n: [comm(c) for c in cs] for n, cs in collectives.items()}
    return json.dumps(doc, indent=1) + "\n"


def to_classic(rules: JsonRules) -> RulesFile:
    """The rules of one distribution, back as sections and rules; refused where its ranges
    are not the contiguous ones colltune writes."""
    rf = RulesFile(version=2)
    for name, comm_rules in rules.collectives.items():
        if name not in COLLTYPE:
            continue
        secs = []
        for i, c in enumerate(comm_rules):
            nxt = comm_rules[i + 1].size_min - 1 if i + 1 < len(comm_rules) else INT_MAX
            if c.size_max != nxt or any(
                    m.size_max != (c.rules[j + 1].size_min - 1 if j + 1 < len(c.rules)
                                   else INF) for j, m in enumerate(c.rules)):
                raise JsonRulesError("--out", 0, f"{name}: its ranges are not contiguous as "
                                                 "colltune writes them; cannot merge")
            secs.append(classic.CommRule(max(c.size_min, 1), [
                classic.MsgRule(m.size_min, m.alg, m.faninout, m.segsize, m.reqs or None)
                for m in c.rules]))
        rf.collectives[COLLTYPE[name]] = secs
    return rf
