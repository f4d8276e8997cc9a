"""Intel MPI as a Backend: presets forced by a tuning file per size band (or a launch each),
the library's own symbols say what ran (impi_proof), decisions become its JSON tuning file
and a profile that names it, or its own binary table with the wins spliced in.

A JSON file has no "library's choice" entry: a collective it names is the file's at every
size and comm size (the same holds for I_MPI_ADJUST_*: outside its rules the generic
selection runs, not the default's table). So where the default is kept, the file names a
stand-in (impi_standin); with none shown close enough the collective is left to Intel MPI
whole, and the summary says why. The spliced table (--format impi-bin, impi_splice) keeps
the library's own entry there instead, and needs none."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.apps import AppSupport, hydra_env
from colltune.backends.banded import BandSupport
from colltune.backends.base import (
    Backend,
    Decisions,
    Session,
    Traits,
    Written,
    decision_comments,
    hydra_placements,
    provenance,
)
from colltune.backends.files import (
    Arms,
    Checked,
    ExportRequest,
    FileFormats,
    Installable,
    VerifyTarget,
)
from colltune.backends.impi import install as impi
from colltune.backends.impi.files import (
    FORMATS,
    TABLE_INSTEAD,
    checked_table,
    comm_size_note,
    env_path,
    installable,
    read_files,
    seen_summary,
    table_of,
    table_route,
    tuned_env,
    write_adjusts,
    write_table,
    write_tuning,
)
from colltune.backends.impi.install import ImpiCatalog, IntelMPI
from colltune.backends.impi.proof import Probes, describe, gdb_path, obeyed, presets_env
from colltune.backends.impi.splice import BIN_VAR, SUFFIX, Splicer
from colltune.backends.impi.standin import (
    STAND_IN_BOUND,
    Prints,
    StandIns,
    candidates,
    ranked,
    rules,
    same_as,
    swept,
    wanted,
)
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.records import Decision
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.rules import impi_env, impi_tuning
from colltune.rules.impi_tuning import LIBRARY, ImpiFormatError, Layers, Rules, Tuning, rules_for

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context, Measurement, Store

class ImpiFiles(FileFormats):
    """Intel MPI's JSON tuning files and spliced binary tables."""

    binary_suffixes = (SUFFIX,)  # a frozen tuning file: its JSON source is read beside it

    def claims(self, text: str) -> bool:
        return re.match(r'\s*\{\s*"coll=', text) is not None or "export I_MPI_" in text

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        layers, prof, text = read_files(path, "will not check")
        if text is None:  # a spliced table: by its content, against the installation
            checked_table(mpi, table_of(path, prof), layers, "check", self.backend.place)
        what = ("profile of I_MPI_ADJUST_* variables" if prof.adjusts() else
                "tuning table (its own, with colltune's rules spliced in)" if text is None
                else "tuning file")
        colls = impi_tuning.collectives(layers)
        ppn = sorted(k or -1 for k in layers)  # ranks a node each layer is for (-1: any)
        layered = f", rules for {', '.join(map(str, ppn))} ranks a node" if ppn != [-1] else ""
        return Checked(f"Intel MPI {what}, {len(colls)} collective(s) tuned{layered}",
                       {"format": "impi", "collectives": colls, "ppn": ppn,
                        "profile": prof.settings}, [])

    def installable(self, req: ExportRequest) -> Installable:
        return installable(req, self.backend.place)

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None, launch: Launch | None = None) -> VerifyTarget:
        layers, prof, text = read_files(path)
        mpi = impi.find_impi(mpi_prefix)
        names = impi_tuning.collectives(layers)
        catalog = impi.catalog(mpi, names)
        placement = self.backend.place(np, hostfile, launch)
        # the layer of the job's ranks a node: in JSON the first at or above it, else the
        # largest; a spliced table changed only the jobs of exactly its ppn (its fences)
        t = impi_tuning.layer_for(layers, placement.ppn) if text is not None else \
            layers.get(placement.ppn, {})
        notes = [] if t or text is not None else [
            f"{path} holds rules for {', '.join(str(k) for k in sorted(layers, key=str))} "
            f"ranks a node, and this job runs {placement.ppn}: it runs Intel MPI's own "
            "entries"]
        env = tuned_env(path, prof)

        def rule_at(coll: Collective, n: int, size: int) -> Config | None:
            r = rules_for(t, coll.name, n)
            preset = r.preset_at(size) if r else None
            return None if preset is None or preset == LIBRARY else Config(preset)

        def applied(coll: Collective, n: int, sizes: list[int]) -> tuple[str, str]:
            r = rules_for(t, coll.name, n)
            if r is None:
                return "default everywhere", "the file does not name this collective"
            probes = Probes(mpi, self.backend.place(n, hostfile, launch), coll.name,
                            coll.datatype)
            return obeyed(probes, r, env, sizes)

        # a spliced table changes what runs where it names the library's own entry too (its
        # fences and copies of the selected node), so every size is tested
        return VerifyTarget(mpi, catalog, names, {"default": {}, "tuned": env},
                            placement, rule_at, applied, whole=text is None, notes=notes)


class ImpiApps(AppSupport[IntelMPI]):
    """A program under Intel MPI's mpiexec (Hydra): settings as `-genv`."""

    not_online = ("Intel MPI reads its I_MPI_ADJUST_ choices only at MPI_Init: no "
                  "configuration can change inside a run")


    def find(self, prefix: str | None) -> IntelMPI:
        return impi.find_impi(prefix)

    def launcher_env(self, env: dict[str, str]) -> list[str]:
        return hydra_env(env)


class ImpiBands(BandSupport):
    """Presets per size band, from a tuning file written for the launch."""

    def env(self, coll: Collective, np: int, at: dict[int, Config], folder: Path
            ) -> dict[str, str]:
        return impi.banded_env(coll.name, np, {s: c.algorithm for s, c in at.items()}, folder)


class ImpiBackend(Backend[IntelMPI]):
    """Intel MPI: presets forced per launch (I_MPI_ADJUST_<OP>) or per size band (a tuning
    file), its symbols as proof, its JSON tuning file as output."""

    Files = ImpiFiles
    name = "impi"
    apps = ImpiApps()
    own_launcher = "mpiexec"
    output = "an Intel MPI tuning file"
    formats = FORMATS
    short = "impi"
    # bands: the choice is fixed per launch (MPI_T writes read back, change nothing), but a
    # tuning file selects it per message size
    bands = ImpiBands()
    # on_world: bcast 16 KiB preset 7: 1.5x faster than the default on a dup, slower on WORLD
    traits = Traits(on_world=True)

    def launch(self, mpi: IntelMPI, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        return impi.launch_command(mpi, placement), impi.job_env(mpi, env_extra)

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return impi.forcing_env(coll.name, cfg.algorithm)

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[IntelMPI]:
        placements = hydra_placements(opts)
        mpi = impi.find_impi(opts.mpi)
        if not opts.from_db:  # deciding from a store needs gdb only for what it lacks
            gdb_path()  # the proof of what ran: refused before any launch, not after a sweep
        catalog = impi.catalog(mpi, colls)
        missing = [c for c in colls if not catalog.algorithms.get(c)]
        if missing:
            raise ColltuneError(f"{mpi.describe()} has no I_MPI_ADJUST_ presets for "
                                + ", ".join(missing) + " (impi_info)", "tune other collectives")
        if opts.out_format == "impi-env" and len(placements) > 1:
            raise ColltuneError("--format impi-env holds one comm size per collective "
                                f"(Intel MPI: one message-size rule per process range); got "
                                f"--np {','.join(str(p.np) for p in placements)}",
                                "tune one --np, or write the tuning file (--format impi)")
        fmt = opts.out_format or ("impi-bin" if opts.out and opts.out.suffix == SUFFIX
                                  else "impi")  # --out's extension: Intel MPI's own name
        if fmt == "impi-bin" and (opts.out is None or opts.out.suffix != SUFFIX):
            raise ColltuneError(f"--format impi-bin writes Intel MPI's binary tuning file: "
                                f"give --out a name ending in {SUFFIX}",
                                f"e.g. --out tuning{SUFFIX} (its JSON source is written "
                                "beside it as tuning.json)")
        # no --format: the table where only it carries the wins (its proofs need gdb, which
        # --from-db does not otherwise ask for)
        auto = opts.out_format is None and (not opts.from_db or shutil.which("gdb") is not None)
        session = ImpiSession(self, mpi, catalog, placements, opts.out, fmt, auto,
                              "bands" if opts.sweep == "bands" else "relaunch")
        # the JSON file's ppn level and the table's hold each layout's rules apart (not where
        # either may be chosen: each run of --layouts could write the other one)
        session.datatype = opts.settings.datatype
        session.says_layout = fmt in ("impi", "impi-bin") and not auto
        session.layer = placements[0].ppn if opts.layout and session.says_layout else None
        return session

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        return ImpiCatalog(algorithms=names or {}, source="store")


class ImpiSession(Session[IntelMPI]):
    def __init__(self, backend: Backend[IntelMPI], mpi: IntelMPI, catalog: ImpiCatalog,
                 placements: list[Placement], out: Path | None, out_format: str = "impi",
                 auto: bool = False, sweep: str = "relaunch") -> None:
        self.backend, self.mpi, self.catalog, self.placements = backend, mpi, catalog, placements
        self.out, self.out_format, self.sweep = out, out_format, sweep
        self.auto = auto  # no --format: the JSON file, or the table if only it carries the wins
        self.fill_within = STAND_IN_BOUND - 1  # fresh pairs go on until a stand-in is bounded
        self.probes: dict[tuple[str, int], Probes] = {}
        self.layer: int | None = None  # ranks a node, where the rules are that layer (ppn=)
        self.standins: dict[tuple[str, int], StandIns] = {}
        self.notes: dict[str, None] = {}  # ordered, once each (decided runs per round)
        # --format impi-bin: the library's own table, the wins spliced in; where the default
        # is kept it keeps its own entries, so no stand-in is looked for
        self.splicer = self._splicer() if out_format == "impi-bin" else None
        self.datatype = "double"  # what the tune's reductions sum (its proofs sum the same)

    def _splicer(self) -> Splicer:
        return Splicer(self.mpi, max(self.placements, key=lambda p: p.np),
                       {c: sorted(a) for c, a in self.catalog.algorithms.items()})

    def _si(self, name: str, np: int) -> StandIns:
        return self.standins.setdefault((name, np), StandIns(name, np))

    def decided(self, name: str, placement: Placement, ds: list[Decision],
                ms: list[Measurement], store: Store, ctx: Context) -> list[Decision]:
        """What the default and every preset run at the decided sizes (a launch each): which
        preset a kept default is, and which presets fell back to another's functions."""
        probes = self.probes.setdefault((name, placement.np),
                                        Probes(self.mpi, placement, name, self.datatype))
        si = self._si(name, placement.np)
        si.store, si.ctx = store, ctx
        if self.splicer is not None:
            # the table keeps the library's own entries where the default is kept: no
            # stand-in is looked for, and what ran is asked for the written wins only, once
            # fresh launches have judged them (write): most of a sweep's choices are refuted
            return ds
        sizes = sorted({d.size for d in ds if d.size >= 0} | {2 * max(
            (d.size for d in ds), default=0)} - {0})
        # decided runs again after each round of boundary measurements: only new sizes
        # cost launches, and only for the presets that matter there
        envs = self._envs(name)
        probes.recall(envs, sizes, store, ctx)
        # every preset at the swept sizes (twins, fallbacks); at the others (boundaries,
        # twice the largest) only what could stand in there, unless a preset is launched
        # anyway or was counted already
        fast = ranked(ms)
        sweep = set(swept(fast))
        full = [s for s in sizes if s in sweep]
        rest = [s for s in sizes if s not in sweep]
        fresh = {p: not all(probes.has(env, s) for s in full) for p, env in envs.items()}
        asked = {p: full + (rest if fresh[p] else []) for p in envs}
        probes.prefetch([(envs[p], at) for p, at in asked.items()])
        if rest:
            first = {p: probes(envs[p], full) for p in envs}
            want = {s: wanted(first, fast, sorted(sweep), s) | {0} for s in rest}
            for p, env in envs.items():
                if not fresh[p]:
                    asked[p] += [s for s in rest if p in want[s] or probes.has(env, s)]
        si.prints = probes.prints(envs, asked, store, ctx)
        si.candidates = candidates(si.prints, fast,
                                   sorted({d.size for d in ds if d.size >= 0}))
        self._twins(name, placement.np, ds, si.prints)
        return ds

    def _envs(self, name: str, upto: int | None = None) -> dict[int, dict[str, str]]:
        """The default and each listed preset (up to `upto`), with what forces it."""
        presets = [0, *sorted(self.catalog.algorithms.get(name, {}))]
        return presets_env(name, [p for p in presets if upto is None or p <= upto])

    def _twins(self, name: str, np: int, ds: list[Decision], prints: Prints) -> None:
        """A note for each chosen preset seen running what a lower preset runs."""
        for d in ds:
            p = d.chosen.algorithm
            twin = same_as(prints, p, d.size) if p else None
            if twin is not None and twin < p:
                self.notes[f"{name} np={np} {d.size} B: preset {p} runs the functions preset "
                           f"{twin} runs ({describe(prints[p][d.size], name)}): a fallback, "
                           "or a difference the symbols do not show"] = None

    def _wins_seen(self, name: str, np: int, ds: list[Decision]) -> None:
        """--format impi-bin: what the written wins run, and the default and every preset
        below a win at its sizes, so a win that falls back to a lower preset is named."""
        wins = {d.size: d.chosen.algorithm for d in ds if d.chosen.algorithm and d.size >= 0}
        si, probes = self._si(name, np), self.probes.get((name, np))
        if not wins or probes is None or si.store is None or si.ctx is None:
            return
        envs = self._envs(name, upto=max(wins.values()))
        probes.recall(envs, sorted(wins), si.store, si.ctx)
        asked = {q: at for q in envs if (at := [s for s, p in wins.items() if q <= p])}
        si.prints = probes.prints(envs, asked, si.store, si.ctx)
        self._twins(name, np, ds, si.prints)

    def _to_table(self) -> bool:
        """Without --format, where the JSON file cannot carry the wins: the table from now
        on, at --out's name with its suffix (False: --format said which, or no --out)."""
        if not (self.auto and self.out_format == "impi" and self.out):
            return False
        self.splicer, self.out_format = self._splicer(), "impi-bin"
        self.out = self.out.with_suffix(SUFFIX)
        # the twins seen so far were of the sweep's choices; the table's wins are seen anew
        self.notes = {TABLE_INSTEAD: None}
        return True

    def _json_drops(self, decisions: Decisions) -> bool:
        """Whether the JSON file would leave a collective with confirmed wins to the library
        (no preset stands in for its default where it was kept)."""
        return any(self._rules(name, np, ds)[0] is None for name, per_np in decisions.items()
                   for np, ds in per_np.items()
                   if any(d.chosen.algorithm and d.verdict == "tuned" for d in ds))

    def _rules(self, name: str, np: int, ds: list[Decision]) -> tuple[Rules | None, str]:
        si = self._si(name, np)
        if self.splicer is not None:
            return rules(name, ds, si.prints, lambda _: LIBRARY)
        return rules(name, ds, si.prints, si.fill, si.unfilled)

    def fills(self, name: str, placement: Placement, ds: list[Decision]
              ) -> list[tuple[int, Config]]:
        """Kept-default sizes and the preset the file names there, put to fresh launch
        pairs (none if the collective keeps the default everywhere); where one is found
        slower, the next candidate is asked for."""
        if self.splicer is not None:
            return []
        return [(s, Config(p)) for s, p in self._si(name, placement.np).kept(ds)]

    def unexpressed(self, coll: Collective, placement: Placement, ds: list[Decision]
                    ) -> str:
        why = self._rules(coll.name, placement.np, ds)[1]
        # the table carries what the JSON file cannot: launch pairs then judge the table
        return "" if why and self._to_table() else why

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        r, _ = self._rules(coll.name, placement.np, ds)
        if r is None or all(p == LIBRARY for _, p in r.limits):
            return {"default": {}, "tuned": {}}
        if self.splicer is not None:  # the table as it will be written
            try:
                path.write_bytes(self.splicer.table(
                    {placement.ppn: {coll.name: {placement.np: r}}}))
            except ImpiFormatError as e:
                raise ColltuneError(f"cannot splice {coll.name} into Intel MPI's table: {e}",
                                    "write the JSON tuning file (--format impi)") from None
            return {"default": {}, "tuned": {BIN_VAR: str(path.resolve())}}
        path.write_text(impi_tuning.render({coll.name: {placement.np: r}}))
        return {"default": {}, "tuned": {impi_env.TUNING_VAR: str(path.resolve())}}

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        """The tuning file at --out (merged into what it holds) and the profile beside it, or
        (--format impi-env) one profile of I_MPI_ADJUST_* variables."""
        t: Tuning = {}
        if self._json_drops(decisions):
            self._to_table()
        if self.splicer is not None:
            for name, per_np in decisions.items():
                for np, ds in per_np.items():
                    self._wins_seen(name, np, ds)
        notes = list(self.notes)
        not_carried: dict[str, int] = {}
        for name, per_np in decisions.items():
            unsaid = sum(bool(d.unexpressed) for ds in per_np.values() for d in ds)
            if unsaid and not self.splicer:  # wins no launch judged: the JSON cannot say them
                notes.append(table_route(self.out, name, unsaid, judged=False))
            if not any(d.chosen.algorithm for ds in per_np.values() for d in ds):
                continue  # the default everywhere: nothing to write
            got = {np: self._rules(name, np, ds) for np, ds in per_np.items()}
            why = [f"{name} np={np}: {w}" for np, (r, w) in got.items() if r is None]
            if why:
                notes += why + [f"{name} left to Intel MPI (a file names a collective at "
                                "every size and comm size)"]
                wins = not_carried[name] = sum(d.chosen.algorithm != 0 and d.verdict ==
                                               "tuned" for ds in per_np.values() for d in ds)
                notes += [table_route(self.out, name, wins)] if wins and not self.splicer else []
                continue
            t[name] = {np: r for np, (r, _) in got.items() if r is not None}
            notes += [n for np, ds in per_np.items() if self.splicer is None
                      and (n := self._si(name, np).note(ds))]
        out, table = self.out, self.splicer is not None
        notes.append(comm_size_note(table, sorted({p.np for p in self.placements})))
        written = Written(
            "Intel MPI tuning " + ("table (its own, colltune's rules spliced in)" if table
                                   else "file"),
            str(env_path(out)) if out else None,
            f"source {env_path(out) if out else 'PROFILE'} (sets "
            f"{BIN_VAR if table else impi_env.TUNING_VAR}) before mpirun", notes,
            path=str(out) if out else None, not_carried=not_carried,
            record={"impi": {"tuning_file": str(out) if out else None,
                             "rules": {c: {str(np): r.limits for np, r in per.items()}
                                       for c, per in t.items()},
                             "seen": seen_summary({k: si.prints for k, si in
                                                   self.standins.items()}), "notes": notes}})
        if not out:
            return written
        comments = [provenance(self.mpi)] + decision_comments(decisions, self.catalog)
        other: Written | None
        if self.out_format == "impi-env":
            other = write_adjusts(out, t, comments, notes)
        elif self.splicer is not None:
            ppn: dict[int | None, int] = {p.np: p.ppn for p in self.placements}
            layers: Layers = {}
            for c, per in t.items():
                for k, r in per.items():  # measured comm sizes: each its placement's ppn
                    layers.setdefault(ppn[k], {}).setdefault(c, {})[k] = r
            other = write_table(out, layers, self.splicer, comments, notes)
        else:
            other = write_tuning(out, {self.layer: t}, comments, notes)
        # another file than the tuning file (a profile only): said as it is, with the
        # family's record and the wins not carried
        return written if other is None else dataclasses.replace(
            other, record=written.record, not_carried=not_carried)
