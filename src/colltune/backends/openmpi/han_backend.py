"""coll/han as a Backend: per-size decisions among han's choices become han's rules file
and settings.

han takes its component and algorithm per message size from its file, but the modules of
its levels only per collective. So the level modules are chosen once per collective (the
pair with the lowest geometric-mean time over the sizes that run han's default algorithm,
if it beats han's own modules by the minimum gain), and every size that runs han's default
algorithm runs with that pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

from colltune import __version__
from colltune.backends.base import (
    Backend,
    Decisions,
    Session,
    Written,
    decision_comments,
    provenance,
    write_file,
)
from colltune.backends.files import Arms, Checked, ExportRequest, FileFormats
from colltune.backends.openmpi import han
from colltune.backends.openmpi.backend import OpenMPIBackend, OpenMPIFiles
from colltune.backends.openmpi.han import BASELINE, Choice, HanCatalog, HanRules
from colltune.backends.openmpi.install import OpenMPI, find_openmpi
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.ranges import boundaries
from colltune.core.records import Decision
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.outfile import write_atomic
from colltune.slots import place

if TYPE_CHECKING:
    from colltune.core.toolchain import Installation
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context, Measurement, Store


def _medians(ms: list[Measurement]) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for m in ms:
        if m.status == "ok" and m.samples:
            out[(m.config.algorithm, m.size)] = median(m.samples)
    return out


def choose_modules(coll: str, catalog: HanCatalog, ds: list[Decision],
                   ms: list[Measurement], min_gain: float) -> tuple[tuple[int, int], list[str]]:
    """The collective's (up, low) modules, and what that choice overrode."""
    med = _medians(ms)
    chosen = {d.size: catalog.choice(coll, d.chosen.algorithm) for d in ds}
    sizes = [s for s, c in chosen.items() if c.component == "han" and c.algorithm == "default"]
    variants = {c.modules: i for i, c in catalog.choices.get(coll, {}).items()
                if c.component == "han" and c.algorithm == "default"}
    best, best_score = (0, 0), 0.0
    for pair, alg in sorted(variants.items()):
        logs = [math.log(med[(alg, s)] / med[(0, s)]) for s in sizes
                if (alg, s) in med and (0, s) in med]
        if pair == (0, 0) or len(logs) < len(sizes) or not logs:
            continue
        score = sum(logs) / len(logs)
        if score < math.log(1 - min_gain) and score < best_score:
            best, best_score = pair, score
    notes = [f"{coll} {s} B: {chosen[s].label} was fastest; han's level modules are one "
             f"setting per collective ({Choice('han', 'default', *best).label})"
             for s in sizes if chosen[s].modules not in ((0, 0), best)]
    return best, notes


def apply_modules(coll: str, catalog: HanCatalog, ds: list[Decision],
                  modules: tuple[int, int]) -> list[Decision]:
    """Decisions as Open MPI will run them once the collective's modules are set: every
    size on han's default algorithm uses `modules`."""
    ids = {c: i for i, c in catalog.choices.get(coll, {}).items()}
    target = Config(ids[Choice("han", "default", *modules)]) if modules != (0, 0) else DEFAULT
    out = []
    for d in ds:
        c = catalog.choice(coll, d.chosen.algorithm)
        if c.component == "han" and c.algorithm == "default" and d.chosen != target:
            d = replace(d, chosen=target)
        out.append(d)
    return out


def keep_confirmed_modules(coll: str, catalog: HanCatalog, ds: list[Decision],
                           modules: tuple[int, int]) -> tuple[list[Decision], str | None]:
    """After fresh-launch confirmation: if any size on han's default algorithm went back
    to han's own modules, the collective's modules cannot be set (they would apply there
    too), so every size on han's default algorithm goes back to han's own."""
    family = [d for d in ds if catalog.choice(coll, d.chosen.algorithm).algorithm == "default"
              and catalog.choice(coll, d.chosen.algorithm).component == "han"]
    if all(d.chosen != DEFAULT for d in family):
        return ds, None
    label = Choice("han", "default", *modules).label
    note = (f"{coll}: {label} was not confirmed at every size that runs han's default "
            "algorithm; han's own level modules kept")
    out = [replace(new, reason=f"{label} not set: refuted at another size")
           if new.chosen != old.chosen else new
           for old, new in zip(ds, apply_modules(coll, catalog, ds, (0, 0)), strict=True)]
    return out, note


def han_rules(coll: str, catalog: HanCatalog, per_np: dict[int, list[Decision]]) -> HanRules:
    """Message-size rules per communicator size; thresholds between measured sizes as for
    coll/tuned (the geometric midpoint), on the per-rank block han compares."""
    out: HanRules = {coll: {}}
    for np, ds in sorted(per_np.items()):
        ordered = sorted(ds, key=lambda d: d.size)
        rows: list[tuple[int, Choice]] = []
        for start, d in zip(boundaries([max(d.size, 0) for d in ordered]), ordered,
                            strict=False):
            c = catalog.choice(coll, d.chosen.algorithm)
            entry = Choice(c.component, c.algorithm)  # modules are not per size
            if not rows or rows[-1][1] != entry:
                rows.append((start, entry))
        out[coll][np] = rows or [(0, BASELINE)]
    return out


class HanFiles(OpenMPIFiles):
    """coll/han's rules files."""

    # a store of han's choices is not coll/tuned's rules
    decided_rules = FileFormats.decided_rules
    section_text = FileFormats.section_text

    def installed_rules(self, req: ExportRequest, rules_path: Path
                        ) -> tuple[str, dict[str, str]]:
        """han's file, normalised, and the MCA parameters that use it: the file switch and
        the level modules of the MCA parameter file `tune --tune-han` wrote beside it."""
        hint = "pass the han rules file `tune --tune-han` wrote"
        try:
            parsed = han.parse(read_text(req.source))
            frag = han.fragment_path(req.source)
            modules = han.fragment_modules(read_text(frag)) if frag.exists() else {}
        except (OSError, FormatError, han.HanRulesError) as e:
            raise ColltuneError(f"will not export {req.source}: {e}", hint) from None
        return (han.render(parsed, [f"Open MPI coll/han dynamic rules {req.stamp}"]),
                han.file_params(rules_path, modules))

    def claims(self, text: str) -> bool:
        return "global_communicator" in text

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        try:
            parsed = han.parse(read_text(path))
        except han.HanRulesError as e:
            raise ColltuneError(f"{path}: {e}", "write it again with tune --tune-han"
                                ) from None
        n = sum(len(v) for per in parsed.values() for v in per.values())
        return Checked(f"Open MPI coll/han rules, {len(parsed)} collective(s), {n} rule(s)",
                       {"format": "han", "collectives": sorted(parsed)}, [])


class HanBackend(OpenMPIBackend):
    """coll/han's own choices on Open MPI 5 across nodes (--tune-han): han's rules file and
    the MCA fragment that turns it on and sets the level modules."""

    Files = HanFiles
    name = "han"
    output = "an Open MPI coll/han rules file"

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[OpenMPI]:
        """The installation with coll/han left on, and han's choices as the catalog.
        Refused where han does not run: before Open MPI 5, on one node, for collectives it
        leaves to coll/tuned."""
        placements = [place(np, opts.hostfile, launch=opts.launch) for np in opts.nps]
        mpi = find_openmpi(opts.mpi)
        if mpi.version_tuple < (5,):
            raise ColltuneError(f"--tune-han needs Open MPI 5 or later; {mpi.describe()} has "
                                "no coll/han", "use --mpi with an Open MPI 5 installation")
        if opts.predict or opts.strategy == "model":
            raise ColltuneError("--predict and --strategy model tune coll/tuned's algorithms, "
                                "not coll/han's choices", "use --strategy grid, race or bayes")
        if len(opts.nps) > 1:
            raise ColltuneError("--tune-han tunes one communicator size per run: han's level "
                                "modules are one setting per collective, whatever the size",
                                "run once per --np with the same --out: the files merge (the "
                                "modules come from the last run of each collective)")
        single = [p.np for p in placements if p.nodes < 2]
        if single:
            raise ColltuneError(f"coll/han steps aside on one node: np={single[0]} runs on "
                                "one node", "give a --hostfile (or a Slurm allocation) "
                                "spanning several nodes, with --ppn")
        others = [c for c in colls if c not in han.COLLECTIVES]
        if others:
            raise ColltuneError(f"coll/han does not run {', '.join(others)} itself",
                                "han runs " + ", ".join(han.COLLECTIVES))
        algorithms = han.read_algorithms(mpi)
        if not algorithms:
            raise ColltuneError(f"ompi_info of {mpi.describe()} lists no coll/han algorithms",
                                "check that this Open MPI was built with coll/han")
        return HanSession(self, replace(mpi, han=True), han.catalog(algorithms), placements,
                          opts)

    rules_name = "colltune-han.rules"
    rules_what = "Open MPI coll/han rules file"

    def owns(self, mpi_key: str) -> bool:
        # the key may carry a replayed arrival pattern after it (tuner/measure.arrival_key)
        return mpi_key.startswith("openmpi-") and mpi_key.split("~", 1)[0].endswith("+han")

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        return han.HanCatalog(algorithms=names, source="store") if names else None


class HanSession(Session[OpenMPI]):
    def __init__(self, backend: Backend[OpenMPI], mpi: OpenMPI, catalog: HanCatalog,
                 placements: list[Placement], opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog, self.placements = backend, mpi, catalog, placements
        self.han_catalog, self.opts = catalog, opts
        self.sweep = "relaunch"  # han reads its variables at communicator creation
        self.modules: dict[str, tuple[int, int]] = {}
        self.notes: dict[str, list[str]] = {}

    def decided(self, name: str, placement: Placement, ds: list[Decision],
                ms: list[Measurement], store: Store, ctx: Context) -> list[Decision]:
        pair, notes = choose_modules(name, self.han_catalog, ds, ms, self.opts.min_gain)
        self.modules[name], self.notes[name] = pair, notes
        return apply_modules(name, self.han_catalog, ds, pair)

    def confirmed(self, name: str, placement: Placement, ds: list[Decision]
                  ) -> list[Decision]:
        if self.modules[name] == (0, 0):
            return ds
        # the modules apply to every size on han's default algorithm: a size where fresh
        # launches refuted them means they are not set at all
        ds, note = keep_confirmed_modules(name, self.han_catalog, ds, self.modules[name])
        if note:
            self.modules[name] = (0, 0)
            self.notes[name].append(note)
        return ds

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        """han's file and the collective's modules, against han's own choices."""
        cat = self.han_catalog
        write_atomic(path, han.render(han_rules(coll.name, cat, {placement.np: ds})))
        # after apply_modules at most one pair besides han's own is left
        pairs = {cat.choice(coll.name, d.chosen.algorithm).modules for d in ds} - {(0, 0)}
        modules = {coll.name: next(iter(pairs), (0, 0))}
        return {"default": {}, "tuned": han.file_env(path, modules)}

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        return write_han_outputs(self.mpi, self.han_catalog, decisions, self.opts.out,
                                 self.modules, self.notes)


def write_han_outputs(mpi: Installation, catalog: HanCatalog, decisions: Decisions,
                      out: Path | None, modules: dict[str, tuple[int, int]],
                      notes: dict[str, list[str]]) -> Written:
    """han's rules file at `out` and, beside it, the MCA parameter file that turns it on
    and sets the collectives' level modules; an existing pair is merged into."""
    frag = han.fragment_path(out) if out else None
    # an existing file keeps the collectives and communicator sizes not tuned now
    rules_map: HanRules = {}
    if out and out.exists():
        try:
            rules_map = han.parse(read_text(out))
        except (OSError, FormatError, han.HanRulesError) as e:
            raise ColltuneError(f"will not merge into {out}: {e}",
                                "fix or move that file, or choose another --out; it was not "
                                "changed") from None
        if frag and frag.exists():
            try:
                modules = {**han.fragment_modules(read_text(frag)), **modules}
            except FormatError as e:
                raise ColltuneError(f"will not merge into {out}: {e}",
                                    "fix or move that file, or choose another --out") from None
    for name, per_np in decisions.items():
        rules_map.setdefault(name, {}).update(han_rules(name, catalog, per_np)[name])
    comments = [f"Open MPI coll/han dynamic rules written by colltune {__version__}",
                provenance(mpi),
                "use: mpirun --mca mca_base_param_files FRAGMENT ... (the -mca-params.conf "
                "file written beside this one)",
                "message sizes are the per-rank block in bytes; the first communicator "
                "size of a collective reads as 1 (han's format)"]
    comments += decision_comments(decisions, catalog)
    comments += [n for ns in notes.values() for n in ns]
    said = [n for ns in notes.values() for n in ns]
    if out and frag:
        write_file(out, han.render(rules_map, comments), "--out")
        write_file(frag, han.mca_fragment(out, modules), "--out")
    return Written("coll/han's dynamic rules", str(frag) if frag else None,
                   f"mpirun --mca mca_base_param_files {frag} ...", said, record={
                       "han": {"rules_file": str(out) if out else None,
                               "mca_params": str(frag) if frag else None,
                               "modules": {c: {"up": han.MODULES["up"][u],
                                               "low": han.MODULES["low"][low]}
                                           for c, (u, low) in modules.items()},
                               "notes": said},
                       "coll_han_excluded": False})
