"""What every family whose output is Open MPI coll/tuned's dynamic rules shares (Open MPI,
and SimGrid's ports of its algorithms): the backend and session bases, forcing through
MCA variables, the rules built from decisions, and their export."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from colltune import __version__
from colltune.backends.base import Backend, Decisions, Session, provenance, stamp, write_file
from colltune.backends.files import (
    Arms,
    Checked,
    ExportRequest,
    FileFormats,
    Installable,
    StoredDecisions,
)
from colltune.backends.openmpi.install import (
    FIXED_DECISION_ENV,
    builtin_catalog,
    dynamic_env,
    find_openmpi,
    forcing_vars,
    read_catalog,
    supports_rules_json,
    supports_rules_v2,
)
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import FAN, MAXREQ, SEG, Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.ranges import boundaries
from colltune.core.records import Decision
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.outfile import Planned, destination, write_atomic
from colltune.rules import ompi_classic as rules
from colltune.rules import ompi_json, ompi_v6
from colltune.rules.ompi_classic import COLLTYPE, NAME_BY_ID, CommRule, MsgRule
from colltune.rules.safe import check_env

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context

RULES_NAME = "colltune-rules.conf"
T = TypeVar("T", bound=Installation)


class TunedRulesFiles(FileFormats):
    """coll/tuned's dynamic rules files (classic, version 2, and Open MPI 6's JSON), read
    as Open MPI reads them."""

    def rules_arms(self, rules: Path) -> Arms:
        return {"default": FIXED_DECISION_ENV, "tuned": dynamic_env(rules=rules)}

    def installable(self, req: ExportRequest) -> Installable:
        return installable(self.backend, req)

    def decided_rules(self, db: Path, name: str, decided: list[StoredDecisions]) -> str:
        return decided_rules(db, name, decided)

    def section_text(self, ctx: Context, decisions: list[Decision]) -> tuple[str, str] | None:
        # version 2 where a chosen configuration sets max_requests (classic cannot say it)
        v2 = any(d.chosen.get(MAXREQ) for d in decisions)
        rf = rules.RulesFile(version=2 if v2 else 1)
        rf.set_section(COLLTYPE[ctx.collective], section(ctx.np, decisions))
        return (rules.render(rf),
                "Open MPI " + ("rule-file-version-2" if v2 else "classic") + " format")

    def explain(self, path: Path, coll: Collective, np: int, size: int
                ) -> tuple[str, dict[str, object]]:
        """`size`: what Open MPI compares (the lookup size)."""
        text = read_text(path)
        if ompi_json.claims(text):
            return explain_json(ompi_json.parse(text, str(path)), path, coll, np, size)
        hit = rules.lookup(rules.read(path), COLLTYPE[coll.name], np, size)
        if hit is None:
            return (f"{path} has no rules for {coll.name}: Open MPI uses its fixed decision",
                    {"rule": None})
        sec, r = hit
        what = "Open MPI's fixed decision" if r.alg == 0 else f"algorithm {r.alg}"
        return (f"{coll.name}, {np} ranks, {size} B: line {r.line}: comm-size section "
                f"{sec.comsize}, rule from {r.msgsize} B -> {what}, fan in/out {r.faninout}, "
                f"segment size {r.segsize}" + (f", max requests {r.maxreq}" if r.maxreq else ""),
                {"rule": {"line": r.line, "comm_size_section": sec.comsize,
                          "msgsize": r.msgsize, "algorithm": r.alg, "faninout": r.faninout,
                          "segsize": r.segsize, "max_requests": r.maxreq}})

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        valid, allow_v2, major, catalog = None, None, None, None
        if version:
            parts = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
            allow_v2, major = supports_rules_v2(parts), parts[0] if parts else None
        elif mpi:
            inst = find_openmpi(mpi)
            allow_v2, major = supports_rules_v2(inst.version_tuple), inst.version_tuple[0]
            catalog = read_catalog(inst)
            valid = valid_algorithms(catalog)
        text = read_text(path)
        if ompi_json.claims(text):
            return check_json(text, path, major, catalog)
        rf = rules.read(path, valid_algs=valid, allow_v2=allow_v2)
        fmt = "rule-file-version-2" if rf.version == 2 else "classic"
        n = sum(len(s.rules) for secs in rf.collectives.values() for s in secs)
        said = layouts_said(text)
        warnings = rules.coverage_warnings(rf)  # Open MPI reads the file: not errors
        if major is not None and major >= 6:  # its reader gives sections another meaning
            warnings += ompi_v6.v6_warnings(rf)
        return Checked(f"{fmt} format, {len(rf.collectives)} collective(s), {n} rule(s)"
                       + (f"; tuned for {'; '.join(said)} (the format cannot say a layout: "
                          "Open MPI applies it to any)" if said else ""), {
            "format": fmt, "tuned_for": said,
            "collectives": {(NAME_BY_ID[cid] if cid in NAME_BY_ID
                             else str(cid)): [
                {"comm_size": sec.comsize,
                 "rules": [{"msgsize": r.msgsize, "algorithm": r.alg, "faninout": r.faninout,
                            "segsize": r.segsize, "max_requests": r.maxreq}
                           for r in sec.rules]}
                for sec in secs] for cid, secs in rf.collectives.items()}}, warnings)


TUNED_FOR = re.compile(r"^# tuned for (\w+) at (\d+) ranks on (\d+) node\(s\) x (\d+)",
                       re.M)


def tuned_for(name: str, np: int, nodes: int, ppn: int) -> str:
    """The comment that says a classic section's layout (`tune check` reads it back)."""
    return (f"tuned for {name} at {np} ranks on {nodes} node(s) x {ppn} "
            f"({ompi_json.distribution_of(nodes, ppn)}); this format cannot say it, so "
            "Open MPI applies the section whatever the job's layout")


def layouts_said(text: str) -> list[str]:
    """What a classic file's comments say of the layout each section was tuned in."""
    return [f"{m[0]} at {m[1]} ranks: {m[2]} node(s) x {m[3]}"
            for m in TUNED_FOR.findall(text[:1 << 20])]


def check_json(text: str, path: Path, major: int | None, catalog: Catalog | None
               ) -> Checked:
    """Open MPI 6's JSON rules file, read as it reads it; 4.1 and 5.0 read no JSON: they
    would take it for a classic file and drop it."""
    if major is not None and major < 6:
        raise FormatError(str(path), 0, f"a JSON rules file: Open MPI {major} reads only the "
                                        "classic format and would drop it (JSON: 6.0 and "
                                        "later; write --rules-version 1 or 2)")
    algs = (lambda name: catalog.algorithms.get(name, {})) if catalog else None
    js = ompi_json.parse(text, str(path), algs)
    n = sum(len(c.rules) for cs in js.collectives.values() for c in cs)
    return Checked(f"JSON format (Open MPI 6), {len(js.collectives)} collective(s), {n} "
                   "rule(s)", {"format": "json", "collectives": {
                       name: [{"comm_size_min": c.size_min, "comm_size_max": c.size_max,
                               "comm_rank_distribution": c.distribution,
                               "rules": [{"msg_size_min": m.size_min,
                                          "msg_size_max": m.size_max, "algorithm": m.alg,
                                          "faninout": m.faninout, "segsize": m.segsize,
                                          "max_requests": m.reqs, "disabled": m.disabled}
                                         for m in c.rules]} for c in cs]
                       for name, cs in js.collectives.items()}}, js.warnings)


def explain_json(js: ompi_json.JsonRules, path: Path, coll: Collective, np: int, size: int
                 ) -> tuple[str, dict[str, object]]:
    """A call's rule in Open MPI 6's JSON file, for ranks on one node (a rule for another
    layout is skipped there, as Open MPI skips it)."""
    hit = ompi_json.lookup(js, coll.name, np, size)
    if hit is None:
        return (f"{path}: no rule for {coll.name} at {np} ranks on one node, {size} B: Open "
                "MPI 6 uses its fixed decision", {"rule": None})
    i, c, j, m = hit
    what = "Open MPI's fixed decision" if m.alg == 0 else f"algorithm {m.alg}"
    return (f"{coll.name}, {np} ranks on one node, {size} B: communicator rule {i + 1} "
            f"({c.size_min}-{c.size_max} ranks, {c.distribution}), message rule {j + 1} "
            f"from {m.size_min} B -> {what}, fan in/out {m.faninout}, segment size "
            f"{m.segsize}" + (f", max requests {m.reqs}" if m.reqs else ""),
            {"rule": {"comm_rule": i + 1, "msg_rule": j + 1, "algorithm": m.alg,
                      "distribution": c.distribution, "faninout": m.faninout,
                      "segsize": m.segsize, "max_requests": m.reqs}})


class TunedRulesBackend(Backend[T]):
    """A family whose output is coll/tuned's dynamic rules: Open MPI, and SimGrid's ports of
    its algorithms."""

    Files = TunedRulesFiles
    output = "an Open MPI rules file"
    formats = ("openmpi",)
    rules_name = RULES_NAME  # the installed rules file
    rules_what = "Open MPI rules file"

    def rule_size(self, coll: Collective, size: int, np: int) -> int:
        return rules.lookup_size(coll, size, np)

    def mpit_env(self) -> dict[str, str]:
        return dynamic_env()

    def mpit_vars(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, int]:
        if cfg.algorithm == 0:
            return {}  # the launch values: algorithm 0, the library's own decision
        if coll.name in catalog.forcing:  # coll/han's choices
            return catalog.forcing[coll.name][cfg.algorithm]
        return forcing_vars(coll.name, cfg.algorithm, cfg.get(SEG), cfg.get(FAN),
                            cfg.get(MAXREQ), catalog)

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return dynamic_env(self.mpit_vars(catalog, coll, cfg))

    def read_back(self, env: dict[str, str]) -> dict[str, str]:
        # an MCA parameter is an MPI_T control variable of the same name
        return {k[len("OMPI_MCA_"):]: v for k, v in env.items() if k.startswith("OMPI_MCA_")}

    def installed_rules(self, req: ExportRequest, rules_path: Path
                        ) -> tuple[str, dict[str, str]]:
        return installed_rules(req, rules_path)

    def plan_catalog(self, colls: list[str]) -> Catalog | None:
        return builtin_catalog()  # the batch job reads the installation's own

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        cat = builtin_catalog()  # a store older than its recorded names
        if names:
            cat.algorithms, cat.source = names, "store"
        return cat


def installable(backend: TunedRulesBackend[T], req: ExportRequest) -> Installable:
    """The rules file and the MCA parameter file that switches it on (the site's, to
    append to <prefix>/etc/openmpi-mca-params.conf, or the user's own)."""
    user = req.site is None
    where = req.home / ".openmpi" if req.site is None else req.site
    rules_path = destination(where / backend.rules_name)
    try:
        text, params = backend.installed_rules(req, rules_path)
    except FormatError as e:
        raise ColltuneError(f"will not export {e}", "check it with `tune check`") from None
    conf = [f"# Open MPI MCA parameters {req.stamp}"]
    if not user:
        conf.append("# install: append to <prefix>/etc/openmpi-mca-params.conf, or set "
                    "OMPI_MCA_mca_base_param_files to this file")
    conf += [f"{k} = {v}" for k, v in check_env(params, "the MCA parameter file").items()]
    conf_name = "mca-params.conf" if user else "openmpi-mca-params.conf"
    return Installable(
        [Planned(rules_path, text, backend.rules_what),
         Planned(destination(where / conf_name), "\n".join(conf) + "\n",
                 "Open MPI MCA parameter file", merge=user)],
        {f"OMPI_MCA_{k}": v for k, v in params.items()},
        "Open MPI collectives tuned by colltune")

def installed_rules(req: ExportRequest, rules_path: Path) -> tuple[str, dict[str, str]]:
    """The rules file (checked and normalised, or decided from a store) and the MCA
    parameters that make Open MPI read it at `rules_path`."""
    # one read: the text checked is the text installed (a file swapped between a check
    # and a second read was installed unchecked); decided from a store, it is checked
    # like the file it becomes (a stored np of 0 wrote rules tune check rejects)
    original = req.text if req.text is not None else read_text(req.source)
    where = str(req.source)
    if ompi_json.claims(original):
        return installed_json(req, original, rules_path)
    if req.mpi is not None:  # as that Open MPI reads it: a 4.1 drops a v2 file
        mpi = find_openmpi(req.mpi)
        try:
            rules.parse(original, where, valid_algs=valid_algorithms(read_catalog(mpi)),
                        allow_v2=supports_rules_v2(mpi.version_tuple))
        except rules.RulesError as e:
            raise ColltuneError(f"will not export: {mpi.describe()} would ignore {e}",
                                f"check it with tune check {req.source} --mpi "
                                f"{mpi.prefix}") from None
    else:
        rules.parse(original, where)
    if req.text is not None:
        return original, _switch(rules_path)
    # installed as written (its comments say which MPI, host and measurements it came
    # from), stamped after the version-2 header, which must stay the first bytes
    stamp = f"# installed by colltune export, {req.stamp}\n"
    first, nl, rest = original.partition("\n")
    text = (first + nl + stamp + rest if first.strip() == rules.V2_HEADER
            else stamp + original)
    return text, _switch(rules_path)


def installed_json(req: ExportRequest, original: str, rules_path: Path
                   ) -> tuple[str, dict[str, str]]:
    """Open MPI 6's JSON file, checked as it reads it (as that Open MPI with --mpi: 4.1 and
    5.0 would drop it), with the export's stamp in its `colltune` object."""
    import json

    catalog = None
    if req.mpi is not None:
        mpi = find_openmpi(req.mpi)
        if not supports_rules_json(mpi.version_tuple):
            raise ColltuneError(f"will not export: {mpi.describe()} reads no JSON rules and "
                                "would drop this file", "export it for an Open MPI 6, or "
                                "write it with --rules-version 1 or 2")
        catalog = read_catalog(mpi)
    ompi_json.parse(original, str(req.source),
                    (lambda name: catalog.algorithms.get(name, {})) if catalog else None)
    doc = json.loads(original)  # first-wins keys were warned about by parse
    about = doc.get("colltune") if isinstance(doc.get("colltune"), dict) else {}
    doc = {"colltune": {**about, "installed": f"by colltune export, {req.stamp}"},
           **{k: v for k, v in doc.items() if k != "colltune"}}
    return json.dumps(doc, indent=1) + "\n", _switch(rules_path)


def _switch(rules_path: Path) -> dict[str, str]:
    """The MCA parameters that make Open MPI read the rules at `rules_path`."""
    return {"coll_tuned_use_dynamic_rules": "1",
            "coll_tuned_dynamic_rules_filename": str(rules_path)}

def decided_rules(db: Path, name: str, decided: list[StoredDecisions]) -> str:
    """Every collective and communicator size the store holds, as tune writes them."""
    chosen = [d.chosen for _, ds, _ in decided for d in ds if d.chosen != DEFAULT]
    rf = rules.RulesFile(version=2 if any(c.get(MAXREQ) for c in chosen) else 1)
    rf.comments = [f"Open MPI coll/tuned dynamic rules decided from {db.resolve()} "
                   f"({name}) by colltune {__version__}"]
    for ctx, ds, when in decided:
        coll = get_collective(ctx.collective)
        rf.set_section(COLLTYPE[coll.name], section(ctx.np, ds),
                       [f"{coll.name} at {ctx.np} ranks ({ctx.nodes} x {ctx.ppn}), "
                        f"measured {when}"])
    for cid in list(rf.collectives):  # as tune writes it: nothing measured below
        rules.keep_default_below(rf, cid)
    return rules.render(rf)


class TunedSession(Session[T]):
    """A run that writes coll/tuned's dynamic rules (merged into an existing --out)."""

    def __init__(self, backend: Backend[T], mpi: T, catalog: Catalog,
                 placements: list[Placement], version: int, opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog = backend, mpi, catalog
        self.placements, self.rules_version, self.opts = placements, version, opts
        self.sweep = opts.sweep
        self.base = load_merge_base(opts.out, catalog) if opts.out else None
        if self.base and self.base.version == 1 and version >= 2:
            self.base.version = 2
        elif self.base and self.base.version == 2 and version == 1:
            raise ColltuneError(f"{opts.out} is a rule-file-version-2 file, Open MPI "
                                f"{mpi.version} reads only the classic format",
                                "choose another --out")

    def han_excluded(self) -> bool:
        """Whether coll/han was excluded while measuring (Open MPI 5)."""
        return False

    def grid(self, opts: TuneOptions) -> dict[str, list[int]]:
        grid = super().grid(opts)
        if self.rules_version == 1:  # the classic format has no max_requests column
            if any(grid.get(MAXREQ, [])):
                raise ColltuneError(f"--param {MAXREQ}: the classic rules format this "
                                    "output is written in cannot hold it",
                                    "add --rules-version 2 (Open MPI 5), or leave it out")
            grid[MAXREQ] = [0]
        return grid

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        tentative = rules.RulesFile(version=min(self.rules_version, 2))
        tentative.set_section(COLLTYPE[coll.name], section(placement.np, ds))
        tentative.layouts[(COLLTYPE[coll.name], placement.np)] = ompi_json.distribution_of(
            placement.nodes, placement.ppn)
        write_atomic(path, self.render(tentative))
        return self.backend.with_files().rules_arms(path)

    def render(self, rf: rules.RulesFile) -> str:
        """The file in the session's format: classic (version 1, 2) or Open MPI 6's JSON
        (3), each section marked with the layout it was measured in."""
        if self.rules_version != 3:
            return rules.render(rf)
        return ompi_json.render(ompi_json.from_classic(rf, rf.layouts), {
            "written_by": rf.comments[0] if rf.comments else "colltune",
            "tuned": rf.comments[1:2], "layouts": {
                f"{p.np} ranks": f"{p.nodes} node(s) x {p.ppn}" for p in self.placements}})

    def comments(self) -> list[str]:
        return []

    def note_of(self, name: str, d: Decision) -> str:
        return ""

    def write(self, decisions: Decisions, summary: dict[str, object],
              predicted: dict[tuple[str, int], str]) -> None:
        rf = build_rules(self.base, min(self.rules_version, 2), decisions, self.mpi,
                         self.catalog,
                         predicted, self.comments(), self.note_of,
                         {p.np: p.launched.np for p in self.placements if p.within})
        for p in self.placements:  # the layout each section was measured in
            rf.layouts.update({(COLLTYPE[name], p.np): ompi_json.distribution_of(p.nodes, p.ppn)
                               for name in decisions})
            if self.rules_version != 3:  # said in a comment: a classic file cannot say it
                for name in decisions:
                    rf.notes.setdefault((COLLTYPE[name], p.np), []).insert(
                        1, tuned_for(name, p.np, p.nodes, p.ppn))
        summary["coll_han_excluded"] = self.han_excluded()
        summary["sections"] = {  # which communicator sizes each written section decides
            name: [{"comsize": sec.comsize, "serves": [lo, hi]} for sec, lo, hi in
                   rules.served(rf.collectives[COLLTYPE[name]])]
            for name in decisions}
        fmt = {1: "classic", 2: "rule-file-version-2", 3: "JSON (Open MPI 6)"}
        summary["wrote"] = {"what": "format: " + fmt[3 if self.rules_version == 3
                                                     else rf.version],
                            "also": None, "use": None, "notes": []}
        if self.opts.out is not None:
            write_file(self.opts.out, self.render(rf), "--out")


def valid_algorithms(catalog: Catalog) -> Callable[[int], set[int]]:
    """For `rules.parse`: the algorithm ids this installation accepts, per collective id."""

    def valid(coll_id: int) -> set[int]:
        name = NAME_BY_ID.get(coll_id)
        return set(catalog.algorithms.get(name, {})) if name else set()

    return valid


def load_merge_base(path: Path, catalog: Catalog) -> rules.RulesFile | None:
    """The existing rules file to merge into; a malformed one stops the run untouched."""
    if not path.exists():
        return None
    try:
        text = read_text(path)
        if ompi_json.claims(text):  # Open MPI 6's JSON, as colltune writes it
            return ompi_json.to_classic(ompi_json.parse(text, str(path)))
        return rules.read(path, valid_algs=valid_algorithms(catalog))
    except (rules.RulesError, ompi_json.JsonRulesError) as e:
        raise ColltuneError(f"will not merge into {e}",
                            "fix or move that file, or choose another --out; it was not "
                            "changed") from None


# over the limits (pyproject.toml): a rules file's optional parts, each by keyword
def build_rules(base: rules.RulesFile | None, version: int, decisions: Decisions,  # noqa: PLR0913
                mpi: Installation, catalog: Catalog,
                predicted: dict[tuple[str, int], str] | None = None,
                comments: list[str] | None = None,
                note_of: Callable[[str, Decision], str] | None = None,
                rungs: dict[int, int] | None = None) -> rules.RulesFile:
    """The rules file for `decisions` (merged into `base`); `rungs` maps a communicator
    size measured inside a larger launch (a ladder) to that launch's size."""
    rf = base or rules.RulesFile(version=version)
    rf.version = version
    when = stamp()
    rf.comments = [
        f"Open MPI coll/tuned dynamic rules written by colltune {__version__}",
        provenance(mpi),
        "use: mpirun --mca coll_tuned_use_dynamic_rules 1 "
        "--mca coll_tuned_dynamic_rules_filename THIS_FILE ...",
    ] + (comments or [])
    for name, per_np in decisions.items():
        coll = get_collective(name)
        for np, ds in per_np.items():
            notes = [f"{name} at {np} ranks, {when}; message sizes are what Open MPI compares"]
            if rungs and np in rungs:
                notes.append(f"measured on groups of {np} consecutive ranks inside one "
                             f"{rungs[np]}-rank launch, every group at once")
            if predicted and (name, np) in predicted:
                notes.append(f"PREDICTED, NOT MEASURED at {np} ranks: {predicted[(name, np)]}")
            for d in sorted(ds, key=lambda d: d.lookup_size):
                where = f"{d.size} B per rank" if d.size >= 0 else "every size"
                if d.default_median and d.best_median and d.best:
                    notes.append(
                        f"  {where} (lookup {d.lookup_size}): {d.chosen.label(catalog, name)}; "
                        f"best {d.best.label(catalog, name)} {d.best_median * 1e6:.1f} us vs "
                        f"default {d.default_median * 1e6:.1f} us" if d.size >= 0 else
                        f"  {where}: {d.chosen.label(catalog, name)}; {d.reason}")
                else:
                    notes.append(f"  {where}: {d.chosen.label(catalog, name)}; {d.reason}")
                if note_of:
                    notes[-1] += note_of(name, d)
            rf.set_section(COLLTYPE[coll.name], section(np, ds), notes)
    for name in decisions:
        cid = COLLTYPE[name]
        rules.keep_default_below(rf, cid)
        for sec, lo, hi in rules.served(rf.collectives[cid]):
            written = rf.notes.get((cid, sec.comsize))  # made now (the reader keeps none)
            if written is not None:
                written.insert(1, f"serves communicators of {lo} to "
                                  f"{hi if hi is not None else 'any number of'} ranks")
    return rf


def section(np: int, decisions: list[Decision]) -> CommRule:
    """The comm-size section for `np`; adjacent sizes with the same choice share a rule."""
    sec = CommRule(np)
    if not decisions:
        sec.rules.append(MsgRule(0, 0))
        return sec
    ordered = sorted(decisions, key=lambda d: d.lookup_size)
    starts = boundaries([d.lookup_size for d in ordered], [d.chosen == DEFAULT for d in ordered])
    prev: Config | None = None
    for start, d in zip(starts, ordered, strict=False):
        if d.chosen == prev:
            continue
        c = d.chosen
        sec.rules.append(MsgRule(start, c.algorithm, c.get(FAN), c.get(SEG), c.get(MAXREQ)))
        prev = c
    return sec
