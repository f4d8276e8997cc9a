"""What every family whose output is Open MPI coll/tuned's dynamic rules shares (Open MPI,
and SimGrid's ports of its algorithms): the backend and session bases, forcing through
MCA variables, and the rules built from decisions and written (their reading, checking
and export: rules_files.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from colltune import __version__
from colltune.backends.base import (
    Backend,
    Decisions,
    Session,
    Written,
    provenance,
    stamp,
    write_file,
)
from colltune.backends.files import (
    Arms,
)
from colltune.backends.openmpi.install import (
    builtin_catalog,
    dynamic_env,
    forcing_vars,
)
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import FAN, MAXREQ, SEG, Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.ranges import boundaries
from colltune.core.records import Decision
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, read_text
from colltune.outfile import is_stdout, write_atomic
from colltune.rules import ompi_classic as rules
from colltune.rules import ompi_json
from colltune.rules.ompi_classic import COLLTYPE, NAME_BY_ID, CommRule, MsgRule
from colltune.slots import layout_name

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context

RULES_NAME = "colltune-rules.conf"
T = TypeVar("T", bound=Installation)


TUNED_FOR = re.compile(r"^# tuned for (\w+) at (\d+) ranks on (\d+) node\(s\) x (\d+)",
                       re.M)


def tuned_for(name: str, np: int, nodes: int, ppn: int) -> str:
    """The comment that says a classic section's layout (`tune check` reads it back)."""
    return (f"tuned for {name} at {np} ranks on {nodes} node(s) x {ppn} "
            f"({ompi_json.distribution_of(nodes, ppn)}); this format cannot say it, so "
            "Open MPI applies the section whatever the job's layout")


def summing(name: str, datatype: str) -> str:
    """What a section of a reduction tuned on another datatype than double says (Open MPI
    decides by bytes and by count: a job summing doubles may run otherwise at these
    sizes); "" where there is nothing to say."""
    coll = get_collective(name).summing(datatype)
    if not coll.datatype_key:
        return ""
    return (f"measured summing {datatype} ({coll.granularity} B an element); a job that sums "
            "another datatype at these sizes may run another algorithm than was timed")


class TunedRulesBackend(Backend[T]):
    """A family whose output is coll/tuned's dynamic rules: Open MPI, and SimGrid's ports of
    its algorithms."""

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

    def plan_catalog(self, colls: list[str]) -> Catalog | None:
        return builtin_catalog()  # the batch job reads the installation's own

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        cat = builtin_catalog()  # a store older than its recorded names
        if names:
            cat.algorithms, cat.source = names, "store"
        return cat


class TunedSession(Session[T]):
    """A run that writes coll/tuned's dynamic rules (merged into an existing --out)."""

    def __init__(self, backend: Backend[T], mpi: T, catalog: Catalog,
                 placements: list[Placement], version: int, opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog = backend, mpi, catalog
        self.placements, self.rules_version, self.opts = placements, version, opts
        self.sweep = opts.sweep
        # the existing --out, one layer of sections per rank distribution (a classic file:
        # one, "any": Open MPI applies it whatever the layout)
        # and, from its `colltune` object, the layouts (nodes x ranks a node) each layer
        # was measured in
        self.layers, self.measured = load_merge_base(opts.out, catalog) if opts.out else \
            ({}, {})
        self.base = None if version == 3 else self._classic_base()
        self.says_layout = version == 3  # Open MPI 6's comm_rank_distribution

    def _classic_base(self) -> rules.RulesFile | None:
        if len(self.layers) > 1:
            raise ColltuneError(f"{self.opts.out} holds rules for several layouts (Open MPI "
                                "6's JSON), which a classic file cannot hold",
                                "choose another --out, or --rules-version 3")
        base = next(iter(self.layers.values()), None)
        if base and base.version == 1 and self.rules_version >= 2:
            base.version = 2
        elif base and base.version == 2 and self.rules_version == 1:
            raise ColltuneError(f"{self.opts.out} is a rule-file-version-2 file, Open MPI "
                                f"{self.mpi.version} reads only the classic format",
                                "choose another --out")
        return base

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
        write_atomic(path, self.render({distribution(placement): tentative}))
        return self.backend.with_files().rules_arms(path)

    def render(self, layers: dict[str, rules.RulesFile]) -> str:
        """The file in the session's format: classic (version 1, 2: one layer) or Open MPI
        6's JSON (3), each layer of sections for the rank distribution it was measured in."""
        if self.rules_version != 3:
            (rf,) = layers.values()
            return rules.render(rf)
        return ompi_json.render_layers(layers)

    def about(self, layers: dict[str, rules.RulesFile]) -> dict[str, object]:
        """What a JSON file cannot say of itself (ompi_json.about_path): who wrote it, and
        each layer's layouts (those of the file it merges into, and this run's)."""
        built = next((rf for rf in layers.values() if rf.comments), rules.RulesFile())
        measured = {d: list(names) for d, names in self.measured.items()}
        for p in self.placements:
            names = measured.setdefault(distribution(p), [])
            if layout_name(p) not in names:
                names.append(layout_name(p))
        return {"written_by": built.comments[0] if built.comments else "colltune",
                "tuned": built.comments[1:2],
                "measured_in": {d: measured[d] for d in ompi_json.LAYER_ORDER
                                if d in measured and d in layers}}

    def comments(self) -> list[str]:
        return []

    def note_of(self, name: str, d: Decision) -> str:
        return ""

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        rungs = {p.np: p.launched.np for p in self.placements if p.within}
        if self.rules_version == 3:  # each placement's sections in its distribution's layer
            for p in self.placements:
                mine = {n: {p.np: per[p.np]} for n, per in decisions.items() if p.np in per}
                self.layers[distribution(p)] = build_rules(
                    self.layers.get(distribution(p)), 2, mine, self.mpi, self.catalog,
                    predicted, self.comments(), self.note_of, rungs)
        else:
            rf = build_rules(self.base, self.rules_version, decisions, self.mpi, self.catalog,
                             predicted, self.comments(), self.note_of, rungs)
            for p in self.placements:  # said in a comment: a classic file cannot say it
                for name in decisions:
                    notes = rf.notes.setdefault((COLLTYPE[name], p.np), [])
                    notes.insert(1, tuned_for(name, p.np, p.nodes, p.ppn))
                    summed = summing(name, self.opts.settings.datatype)
                    if summed:
                        notes.insert(2, summed)
            self.layers = {"any": rf}
        if self.opts.out is not None:
            write_file(self.opts.out, self.render(self.layers), "--out")
            if self.rules_version == 3 and not is_stdout(self.opts.out):
                write_file(ompi_json.about_path(self.opts.out),
                           ompi_json.render_about(self.about(self.layers)), "--out")
        fmt = {1: "classic", 2: "rule-file-version-2", 3: "JSON (Open MPI 6)"}
        return Written("format: " + fmt[self.rules_version], record={
            "coll_han_excluded": self.han_excluded(),
            "sections": {  # which communicator sizes each written section decides
                name: [{"comsize": sec.comsize, "serves": [lo, hi], "distribution": d}
                       for d, rf in self.layers.items() if COLLTYPE[name] in rf.collectives
                       for sec, lo, hi in rules.served(rf.collectives[COLLTYPE[name]])]
                for name in decisions}})


def distribution(p: Placement) -> str:
    """The rank distribution (Open MPI 6's word) a placement's measurements can promise."""
    return ompi_json.distribution_of(p.nodes, p.ppn)


def valid_algorithms(catalog: Catalog) -> Callable[[int], set[int]]:
    """For `rules.parse`: the algorithm ids this installation accepts, per collective id."""

    def valid(coll_id: int) -> set[int]:
        name = NAME_BY_ID.get(coll_id)
        return set(catalog.algorithms.get(name, {})) if name else set()

    return valid


def load_merge_base(path: Path, catalog: Catalog
                    ) -> tuple[dict[str, rules.RulesFile], dict[str, list[str]]]:
    """The existing rules file to merge into, one layer per rank distribution (a classic
    file: one, "any"), and what it says of the layouts each layer was measured in; a
    malformed one stops the run untouched."""
    if not path.exists():
        return {}, {}
    try:
        text = read_text(path)
        if ompi_json.claims(text):  # Open MPI 6's JSON, as colltune writes it
            about = ompi_json.about_path(path)
            return ompi_json.layers(ompi_json.parse(text, str(path))), \
                ompi_json.measured_in(read_text(about) if about.exists() else "")
        return {"any": rules.read(path, valid_algs=valid_algorithms(catalog))}, {}
    except (rules.RulesError, ompi_json.JsonRulesError) as e:
        raise ColltuneError(f"will not merge into {e}",
                            "fix or move that file, or choose another --out; it was not "
                            "changed") from None


def build_rules(base: rules.RulesFile | None, version: int, decisions: Decisions,  # noqa: PLR0913 (a rules file's optional parts, each by keyword)
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
        between_measured(rf, name, sorted(per_np))
    for name, per_np in decisions.items():
        cid = COLLTYPE[name]
        rules.keep_default_below(rf, cid)
        for sec, lo, hi in rules.served(rf.collectives[cid]):
            notes = rf.notes.setdefault((cid, sec.comsize), [])
            measured = sec.comsize in per_np  # in this run
            serves = served_note(sec.comsize if measured else None, lo, hi)
            if notes and notes[0].startswith(FEWER):  # said afresh: the smallest size
                notes.clear()  # measured may have changed
            old = [i for i, n in enumerate(notes) if n.startswith(SERVES)]
            if old and not measured:  # kept with its notes from the file merged into:
                # what it serves now (a size measured above or below changes that)
                notes[old[0]] = serves + ": kept from the file this run merged into"
                continue
            if not notes and not measured:  # kept from a file with no notes of colltune's
                notes.append(
                    f"{FEWER} {hi + 1 if hi else lo} ranks: nothing "
                    "measured there, so the library's own decision (algorithm 0)"
                    if lo == 1 and all(r.alg == 0 for r in sec.rules) else
                    f"{name} at {sec.comsize} ranks: kept from the file this run merged "
                    "into (its notes there are not carried over)")
            notes.insert(1, serves)
    return rf


# how the notes above begin, to find them again in a file merged into
SERVES, FEWER = "serves communicators of ", "communicators of fewer than"


def between_measured(rf: rules.RulesFile, name: str, nps: list[int]) -> None:
    """Between two communicator sizes measured in this run: a section of what both run
    where they agree, the library's own decision where they part (rules.agreed): a size
    between was measured at neither. A section of the file merged into just above the
    smaller is written again (the agreement of an earlier run's choices, or a size
    measured then: the file cannot say which, and a stale agreement could run what
    neither now chooses); one elsewhere between them is kept, and nothing is added."""
    cid = COLLTYPE[name]
    for lo, hi in zip(nps, nps[1:], strict=False):
        secs = {s.comsize: s for s in rf.collectives[cid]}
        if hi - lo < 2 or any(lo + 1 < c < hi for c in secs):
            continue
        sec = rules.agreed(secs[lo], secs[hi], lo + 1)
        kept = ("the library's own decision everywhere (the two chose nothing else in "
                "common)" if all(r.alg == 0 for r in sec.rules) else
                "what both run where they agree, the library's own decision where they part")
        rf.set_section(cid, sec, [f"{name} between {lo} and {hi} ranks: measured at neither; "
                                  + kept])


def served_note(measured: int | None, lo: int, hi: int | None) -> str:
    """What serves each communicator size a section decides (issue 84, item 4): the
    size it was measured at in this run (None: not), and the sizes it answers for with
    that size's rule."""
    upto = f"{hi}" if hi is not None else "any number of"
    text = f"{SERVES}{lo} to {upto} ranks"
    if measured is None:
        return text
    if hi == measured:
        return text + f": measured at {measured}"
    above = ("nothing larger was measured" if hi is None else
             f"the nearest measured size below them; {hi + 1} has its own")
    return text + (f": measured at {measured}; {measured + 1} to {upto} ranks take its "
                   f"rule ({above})")


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
