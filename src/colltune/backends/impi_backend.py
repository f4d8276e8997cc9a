"""Intel MPI as a Backend: presets forced by a tuning file per size band (or a launch each),
the library's own symbols say what ran (impi_proof), decisions become its JSON tuning file
and a profile that names it.

Intel MPI has no "library's choice" entry: a collective a tuning file names is the file's at
every size and comm size (the same holds for I_MPI_ADJUST_*: outside its rules the generic
selection runs, not the default's table). So where the default is kept, the file names the
preset whose functions the default was seen to run at that size; where no preset runs what
the default runs, the collective is left to Intel MPI whole, and the summary says why."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends import impi
from colltune.backends.base import (
    Arms,
    Backend,
    Checked,
    Decisions,
    ExportRequest,
    Installable,
    Session,
    VerifyTarget,
    decision_comments,
    hydra_placements,
    provenance,
    refuse,
)
from colltune.backends.impi import ImpiCatalog, IntelMPI
from colltune.backends.impi_files import (
    FORMATS,
    env_path,
    read_files,
    tuned_env,
    write_adjusts,
    write_tuning,
)
from colltune.backends.impi_freeze import BIN_VAR, SUFFIX, freeze, source_of
from colltune.backends.impi_proof import Probes, describe, gdb_path, obeyed, valid_counts
from colltune.backends.impi_standin import (
    STAND_IN_BOUND,
    Prints,
    bound_note,
    candidates,
    ranked,
    rules,
    same_as,
    slowdown_bound,
    swept,
    wanted,
)
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, Verdict
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.outfile import Planned, destination
from colltune.rules import impi_env, impi_tuning
from colltune.rules.impi_tuning import Rules, Tuning, rules_for
from colltune.rules.safe import check_env
from colltune.slots import place

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context, Measurement, Store

class ImpiBackend(Backend[IntelMPI]):
    """Intel MPI: presets forced per launch (I_MPI_ADJUST_<OP>) or per size band (a tuning
    file), its symbols as proof, its JSON tuning file as output."""

    name = "impi"
    own_launcher = "mpiexec"
    output = "an Intel MPI tuning file"
    formats = FORMATS
    binary_suffixes = (SUFFIX,)  # a frozen tuning file: its JSON source is read beside it
    short = "impi"
    mpit_sweep = False  # the choice is fixed per launch (MPI_T writes read back, change nothing)
    by_size = True  # but a tuning file selects it per message size
    on_world = True  # bcast 16 KiB preset 7: 1.5x faster than the default on a dup, slower on WORLD

    def launch(self, mpi: IntelMPI, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        return impi.launch_command(mpi, placement), impi.launch_env(mpi.prefix, env_extra)

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return impi.forcing_env(coll.name, cfg.algorithm)

    def banded_env(self, coll: Collective, np: int, at: dict[int, Config], folder: Path
                   ) -> dict[str, str]:
        return impi.banded_env(coll.name, np, {s: c.algorithm for s, c in at.items()}, folder)

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[IntelMPI]:
        refuse(opts, self.name)
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
        if opts.out_format == "impi-bin" and (opts.out is None or opts.out.suffix != SUFFIX):
            raise ColltuneError(f"--format impi-bin writes Intel MPI's binary tuning file: "
                                f"give --out a name ending in {SUFFIX}",
                                f"e.g. --out tuning{SUFFIX} (its JSON source is written "
                                "beside it as tuning.json)")
        return ImpiSession(self, mpi, catalog, placements, opts.out, opts.out_format or "impi",
                           "bands" if opts.sweep == "bands" else "relaunch")

    def find(self, prefix: str | None) -> IntelMPI:
        return impi.find_impi(prefix)

    def launcher_env(self, env: dict[str, str]) -> list[str]:
        return [a for k, v in env.items() for a in ("-genv", k, v)]

    def claims(self, text: str) -> bool:
        return re.match(r'\s*\{\s*"coll=', text) is not None or "export I_MPI_" in text

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        text, prof = read_files(path, "will not check")
        t = impi_tuning.parse(text)
        what = ("profile of I_MPI_ADJUST_* variables" if prof.adjusts() else
                "binary tuning file (frozen from its JSON)" if BIN_VAR in prof.settings
                or path.suffix == SUFFIX else "tuning file")
        return Checked(f"Intel MPI {what}, {len(t)} collective(s) tuned",
                       {"format": "impi", "collectives": sorted(t),
                        "profile": prof.settings}, [])

    def installable(self, req: ExportRequest) -> Installable:
        """The tuning file and a profile that names it (Intel MPI reads no parameter file),
        or the profile of I_MPI_ADJUST_* variables alone."""
        text, source = read_files(req.source)
        where = req.home / ".config" / "colltune" if req.site is None else req.site
        if source.adjusts():
            prof = impi_env.ImpiProfile(
                [f"Intel MPI collectives tuned by colltune: {req.stamp}",
                 "use: source this file before mpirun (no I_MPI_TUNING beside it)"],
                source.adjusts())
            impi_env.check(prof.settings)  # the rule lists' own grammar (impi_env.render: quoted)
            env = check_env(dict(prof.settings), "the Intel MPI profile", quoted=True)
            return Installable([Planned(destination(where / "colltune-impi.env"),
                                        impi_env.render(prof), "Intel MPI environment profile")],
                               env, "Intel MPI collectives tuned by colltune")
        installed = destination(where / "colltune-impi.json")
        prof = impi_env.ImpiProfile(
            [f"Intel MPI collectives tuned by colltune: {req.stamp}",
             "use: source this file before mpirun (no I_MPI_ADJUST_* beside it)"],
            {impi_env.TUNING_VAR: str(installed)})
        env = check_env(dict(prof.settings), "the Intel MPI profile")
        return Installable([Planned(installed, text, "Intel MPI tuning file (JSON)"),
                            Planned(destination(where / "colltune-impi.env"),
                                    impi_env.render(prof), "Intel MPI environment profile")],
                           env, "Intel MPI collectives tuned by colltune")

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None) -> VerifyTarget:
        text, prof = read_files(path)
        t = impi_tuning.parse(text)
        mpi = impi.find_impi(mpi_prefix)
        names = sorted(t)
        catalog = impi.catalog(mpi, names)
        placement = place(np, hostfile, launch=Launch(launcher="mpiexec"))
        env = tuned_env(path, prof)

        def rule_at(coll: Collective, n: int, size: int) -> Config | None:
            r = rules_for(t, coll.name, n)
            preset = r.preset_at(size) if r else None
            return None if preset is None else Config(preset)

        def applied(coll: Collective, n: int, sizes: list[int]) -> tuple[str, str]:
            r = rules_for(t, coll.name, n)
            if r is None:
                return "default everywhere", "the file does not name this collective"
            probes = Probes(mpi, place(n, hostfile, launch=Launch(launcher="mpiexec")),
                            coll.name)
            return obeyed(probes, r, env, sizes)

        return VerifyTarget(mpi, catalog, names, {"default": {}, "tuned": env},
                            placement, rule_at, applied)

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        return ImpiCatalog(algorithms=names or {}, source="store")


class ImpiSession(Session[IntelMPI]):
    def __init__(self, backend: Backend[IntelMPI], mpi: IntelMPI, catalog: ImpiCatalog,
                 placements: list[Placement], out: Path | None, out_format: str = "impi",
                 sweep: str = "relaunch") -> None:
        self.backend, self.mpi, self.catalog, self.placements = backend, mpi, catalog, placements
        self.out, self.out_format, self.sweep = out, out_format, sweep
        self.fill_within = STAND_IN_BOUND - 1  # fresh pairs go on until _fill can read it
        self.prints: dict[tuple[str, int], Prints] = {}
        self.probes: dict[tuple[str, int], Probes] = {}
        self.stand_in: dict[tuple[str, int], dict[int, list[int]]] = {}
        self.ctx: dict[tuple[str, int], Context] = {}
        self.store: Store | None = None
        self.notes: dict[str, None] = {}  # ordered, once each (decided runs per round)

    def decided(self, name: str, placement: Placement, ds: list[Decision],
                ms: list[Measurement], store: Store, ctx: Context) -> list[Decision]:
        """What the default and every preset run at the decided sizes (a launch each): which
        preset a kept default is, and which presets fell back to another's functions."""
        sizes = sorted({d.size for d in ds if d.size >= 0} | {2 * max(
            (d.size for d in ds), default=0)} - {0})
        # decided runs again after each round of boundary measurements: only new sizes
        # cost launches, and only for the presets that matter there
        probes = self.probes.setdefault((name, placement.np),
                                        Probes(self.mpi, placement, name))
        presets = [0, *sorted(self.catalog.algorithms.get(name, {}))]
        envs = {p: impi.forcing_env(name, p) for p in presets}
        keys = {p: Config(p).key for p in presets}
        # what an earlier run (or the run an import follows) counted is the library's
        # own answer for this installation and placement: no launch, no gdb for it
        stored = {k: c for k, v in store.counters(ctx).items()
                  if (c := valid_counts(v)) is not None}
        for p, env in envs.items():
            for size in sizes:
                if (c := stored.get((keys[p], size))) is not None:
                    probes.known(env, size, c)
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
        prints: Prints = {p: probes(envs[p], at) for p, at in asked.items()}
        want = {s: wanted(prints, fast, sorted(sweep), s) | {0} for s in rest}
        for p, env in envs.items():
            if at := [s for s in rest if not fresh[p] and (p in want[s] or probes.has(env, s))]:
                prints[p].update(probes(env, at))
        if not store.readonly:
            store.add_counts(ctx, [(keys[p], size, c) for p, env in envs.items()
                                   for size, c in probes.counts(env, list(prints[p])).items()
                                   if stored.get((keys[p], size)) != c])
        self.prints[(name, placement.np)] = prints
        self.stand_in[(name, placement.np)] = candidates(prints, fast, sorted(
            {d.size for d in ds if d.size >= 0}))
        self.store, self.ctx[(name, placement.np)] = store, ctx
        for d in ds:
            p = d.chosen.algorithm
            twin = same_as(prints, p, d.size) if p else None
            if twin is not None and twin < p:
                self.notes[f"{name} np={placement.np} {d.size} B: preset {p} runs the "
                           f"functions preset {twin} runs ({describe(prints[p][d.size], name)})"
                           ": a fallback, or a difference the symbols do not show"] = None
        return ds

    def _fill(self, name: str, np: int) -> Callable[[int], int | None]:
        """The preset that stands in for the default at a kept size: the first of its
        candidates (the one seen running its functions, then the sweep's fastest) that fresh
        launch pairs showed at most STAND_IN_BOUND slower than the default there (95%, every
        mode), else the first not judged yet. A twin by the symbols is tested too."""
        judged, tried = self._judged(name, np), self._tried(name, np)

        def verdict(size: int, preset: int) -> str | None:
            if (v := judged(size, preset)) is None:
                return None
            return "slower" if v.verdict == "slower" or slowdown_bound(v) > STAND_IN_BOUND \
                else v.verdict

        def fill(size: int) -> int | None:
            seen = {p: verdict(size, p) for p in tried(size)}
            return next((p for p, v in seen.items() if v not in (None, "slower")),
                        next((p for p, v in seen.items() if v is None), None))
        return fill

    def _judged(self, name: str, np: int) -> Callable[[int, int], Verdict | None]:
        """A preset's stored fresh-launch verdict against the default at a size."""
        ctx, store = self.ctx.get((name, np)), self.store
        return lambda size, preset: None if ctx is None or store is None else (
            store.confirmation(ctx, size, Config(preset).key))

    def _tried(self, name: str, np: int) -> Callable[[int], list[int]]:
        """The stand-ins for the default at a size, before fresh launches judge them (a size
        decided after the sweep, --beyond library, was probed only: its twin, if any)."""
        stand, prints = self.stand_in.get((name, np), {}), self.prints.get((name, np), {})
        return lambda size: stand.get(size) or [
            t for t in [same_as(prints, 0, size)] if t is not None]

    def _unfilled(self, name: str, np: int) -> Callable[[int], str | None]:
        tried = self._tried(name, np)  # asked where _fill gave none: refuted stand-ins
        return lambda size: None if not (ps := tried(size)) else (
            f"its stand-in{'s' if len(ps) > 1 else ''}, preset "
            f"{', '.join(str(p) for p in ps)}, {'were' if len(ps) > 1 else 'was'} slower "
            f"than the default in fresh launches, or not shown within {STAND_IN_BOUND}x of "
            "it")

    def _rules(self, name: str, np: int, ds: list[Decision]) -> tuple[Rules | None, str]:
        return rules(name, ds, self.prints.get((name, np), {}), self._fill(name, np),
                     self._unfilled(name, np))

    def fills(self, name: str, placement: Placement, ds: list[Decision]
              ) -> list[tuple[int, Config]]:
        """Kept-default sizes and the preset the file names there, put to fresh launch
        pairs (none if the collective keeps the default everywhere); where one is found
        slower, the next candidate is asked for."""
        return [(s, Config(p)) for s, p in self._kept(name, placement.np, ds)]

    def _kept(self, name: str, np: int, ds: list[Decision]) -> list[tuple[int, int]]:
        if not any(d.chosen.algorithm for d in ds):
            return []
        fill = self._fill(name, np)
        return [(d.size, p) for d in sorted(ds, key=lambda d: d.size)
                if d.chosen == DEFAULT and d.size >= 0 and (p := fill(d.size)) is not None]

    def _bounds(self, name: str, np: int, ds: list[Decision]) -> str | None:
        """The file's note on its stand-ins: the most fresh launches let each be slower."""
        judged = self._judged(name, np)
        return bound_note(name, np, [(s, p, None if (v := judged(s, p)) is None
                                      else slowdown_bound(v))
                                     for s, p in self._kept(name, np, ds)])

    def unexpressed(self, coll: Collective, placement: Placement, ds: list[Decision]
                    ) -> str:
        return self._rules(coll.name, placement.np, ds)[1]

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        r, _ = self._rules(coll.name, placement.np, ds)
        if r is None:
            return {"default": {}, "tuned": {}}
        path.write_text(impi_tuning.render({coll.name: {placement.np: r}}))
        return {"default": {}, "tuned": {impi_env.TUNING_VAR: str(path.resolve())}}

    def write(self, decisions: Decisions, summary: dict[str, object],
              predicted: dict[tuple[str, int], str]) -> None:
        """The tuning file at --out (merged into what it holds) and the profile beside it, or
        (--format impi-env) one profile of I_MPI_ADJUST_* variables."""
        t: Tuning = {}
        notes = list(self.notes)
        for name, per_np in decisions.items():
            if not any(d.chosen.algorithm for ds in per_np.values() for d in ds):
                continue  # the default everywhere: nothing to write
            got = {np: self._rules(name, np, ds) for np, ds in per_np.items()}
            why = [f"{name} np={np}: {w}" for np, (r, w) in got.items() if r is None]
            if why:
                notes += why + [f"{name} left to Intel MPI (a file names a collective at "
                                "every size and comm size)"]
                continue
            t[name] = {np: r for np, (r, _) in got.items() if r is not None}
            notes += [n for np, ds in per_np.items() if (n := self._bounds(name, np, ds))]
        out = self.out
        top = max(p.np for p in self.placements)
        measured = ", ".join(str(n) for n in sorted({p.np for p in self.placements}))
        notes.append(f"comm sizes: measured at {measured} ranks only; Intel MPI runs a "
                     "file's rules at every job size (the first comm_size key at or above "
                     "the job's, else the largest), so jobs of other sizes, "
                     f"{top + 1} ranks and more included, run these rules unmeasured")
        summary["impi"] = {"tuning_file": str(out) if out else None,
                           "rules": {c: {str(np): r.limits for np, r in per.items()}
                                     for c, per in t.items()},
                           "seen": {f"{c} np={np}": {str(p): {str(s): describe(fp, c)
                                                               for s, fp in per.items()}
                                                      for p, per in pr.items()}
                                    for (c, np), pr in self.prints.items()},
                           "notes": notes}
        summary["coll_han_excluded"] = False
        frozen = self.out_format == "impi-bin"
        summary["wrote"] = {"what": "Intel MPI tuning file" + (" (binary, frozen from the "
                                                                "JSON beside it)" if frozen
                                                                else ""),
                            "also": str(env_path(out)) if out else None,
                            "use": f"source {env_path(out) if out else 'PROFILE'} (sets "
                                   f"{BIN_VAR if frozen else impi_env.TUNING_VAR}) before "
                                   "mpirun", "notes": notes}
        if not out:
            return None
        comments = [provenance(self.mpi)] + decision_comments(decisions, self.catalog)
        if self.out_format == "impi-env":
            write_adjusts(out, t, comments, notes, summary)
            return None
        placement = max(self.placements, key=lambda p: p.np)

        def dump(source: Path) -> Path:  # one launch of the largest --np
            freeze(self.mpi, placement, min(t), source, out)
            return out

        write_tuning(source_of(out) if frozen else out, t, comments, notes, summary,
                     dump if frozen else None)
        return None
