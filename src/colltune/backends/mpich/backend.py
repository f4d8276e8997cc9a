"""MPICH as a Backend: per-size decisions become its tuning file (csel JSON) and an
environment profile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from colltune import __version__
from colltune.backends.apps import AppSupport, hydra_env
from colltune.backends.base import (
    Backend,
    Decisions,
    Session,
    Traits,
    Written,
    decision_comments,
    hydra_placements,
    provenance,
    write_file,
)
from colltune.backends.common import env_runtime
from colltune.backends.files import (
    Arms,
    Checked,
    ExportRequest,
    FileFormats,
    Installable,
    VerifyTarget,
)
from colltune.backends.mpich import install as mpich
from colltune.backends.mpich import runtime
from colltune.backends.mpich.install import KNOBS, MPICH, MPICHCatalog
from colltune.backends.mpich.runtime import MPICHRuntime
from colltune.collectives import Collective
from colltune.core.catalog import CHUNK, FAN, RADIX, SEG, Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.ranges import boundaries
from colltune.core.records import Decision
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.kernel.build import build_kernel
from colltune.launchers import Launch
from colltune.outfile import Planned, destination
from colltune.rules import mpich_csel, mpich_env
from colltune.rules.mpich_csel import SIZE_KEY, Ranges, Tuning, lookup, ranges_from_starts
from colltune.rules.safe import check_env

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context


def config_of(catalog: MPICHCatalog, coll: str, text: str) -> Config | None:
    """The configuration a tuning-file range holds ("MPIR_Bcast_intra_tree k=3"); None
    for a container this MPICH's catalog does not know."""
    container, overrides = mpich_csel.split_choice(text)
    alg = next((i for i, c in (catalog.container or {}).get(coll, {}).items()
                if c == container), None)
    if alg is None:
        return None
    values = {KNOBS[k]: int(v) for k, v in overrides.items() if k in KNOBS and v.isdigit()}
    return Config.of(alg, values)


def env_path(out: Path) -> Path:
    """The environment profile beside the tuning file: x.json -> x.env."""
    return out.with_suffix(".env") if out.suffix == ".json" else out.with_name(out.name + ".env")


def ranges(coll: str, catalog: MPICHCatalog, np: int, ds: list[Decision]) -> Ranges:
    """One comm size's decisions as MPICH size ranges (None: MPICH's own choice kept)."""
    containers = catalog.container or {}

    def cont(d: Decision) -> str | None:
        c = d.chosen
        if not c.algorithm:
            return None
        return mpich_csel.choice(containers[coll][c.algorithm],
                                 catalog.leaf_overrides(coll, c))

    sized = sorted((d for d in ds if d.size >= 0), key=lambda d: d.size)
    if SIZE_KEY.get(coll) is None or not sized:
        chosen = {cont(d) for d in ds}
        # no size to compare: one algorithm if every size agreed, else MPICH's own
        return Ranges([(None, chosen.pop() if len(chosen) == 1 else None)])
    starts = boundaries([lookup(coll, d.size, np) for d in sized],
                        [d.chosen == DEFAULT for d in sized])
    return ranges_from_starts([(s, cont(d)) for s, d in zip(starts, sized, strict=True)])


def tuning(decisions: dict[str, dict[int, list[Decision]]], catalog: MPICHCatalog) -> Tuning:
    """The collectives where some size left MPICH's own choice (the others stay MPICH's,
    device path included)."""
    out: Tuning = {}
    for coll, per_np in decisions.items():
        if any(d.chosen.algorithm for ds in per_np.values() for d in ds):
            out[coll] = {np: ranges(coll, catalog, np, ds) for np, ds in per_np.items()}
    return out


def merged_table(existing: Path | None, builtin: dict, new: Tuning,
                 params: mpich_csel.Params | None = None) -> tuple[str, Tuning]:
    """The tuning file text: an existing file (ours) keeps the collectives not tuned now;
    MPICH's own subtrees always come from the library's table. Between two comm sizes
    measured now, `comm_size<=` the larger minus one holds what both choose where they
    agree (mpich_csel.agreed): MPICH gives a size the ranges of the first key at or above
    it, a measured size's choice a guess at another (issue 84, item 4). A key of the file
    merged into just below the larger is written again; one elsewhere between is kept,
    and nothing is added."""
    old: Tuning = mpich_csel.parse(read_text(existing), params) \
        if existing and existing.exists() else {}
    for coll, per_np in new.items():
        mine = old.setdefault(coll, {})
        for n, r in per_np.items():
            if r.per_ppn and n in mine:  # one layout's layer, beside the others'
                r = Ranges(mine[n].limits, {**mine[n].per_ppn, **r.per_ppn})
            mine[n] = r
        nps = sorted(n for n in per_np if n is not None)
        for lo, hi in zip(nps, nps[1:], strict=False):
            if hi - lo >= 2 and not any(n is not None and lo < n < hi - 1 for n in mine):
                mine[hi - 1] = mpich_csel.agreed(mine[lo], mine[hi])
    return mpich_csel.render(builtin, old, params), old


def single_algorithms(t: Tuning, catalog: MPICHCatalog
                      ) -> tuple[dict[str, str], dict[str, str]]:
    """Collectives tuned to one choice at every size and comm size: the algorithm by
    variable value name, and the variables of the radix / chunk size it was tuned with."""
    ids = {c: {cont: i for i, cont in m.items()} for c, m in (catalog.container or {}).items()}
    names, knobs = {}, {}
    for coll, per_np in t.items():
        algs = {a for r in per_np.values() for _, a in r.limits}
        if len(algs) != 1 or (a := algs.pop()) is None:
            continue
        cont, overrides = mpich_csel.split_choice(a)
        alg = ids.get(coll, {}).get(cont)
        if alg is None:
            continue
        variables = (catalog.knobs or {}).get(coll, {}).get(alg, {})
        if any(KNOBS.get(key) not in variables for key in overrides):
            continue  # a leaf parameter no variable sets: the tuning file alone says it
        names[coll] = catalog.algorithms[coll][alg]
        knobs.update({variables[KNOBS[key]]: value for key, value in overrides.items()})
    return names, knobs


def env_profile(t: Tuning, catalog: MPICHCatalog, tuning_file: Path, comments: list[str]
                ) -> str:
    names, knobs = single_algorithms(t, catalog)
    return mpich_env.render(mpich_env.EnvProfile(
        collectives=sorted(t), tuning_file=tuning_file.resolve(), algorithms=names,
        comments=comments, knobs=knobs))


def tentative(path: Path, builtin: dict, coll: str, np: int, r: Ranges,
              params: mpich_csel.Params | None = None) -> dict[str, str]:
    """Writes a tuning file for one collective at one comm size; the environment that
    applies it (the confirmation's "tuned" arm)."""
    path.write_text(mpich_csel.render(builtin, {coll: {np: r}}, params))
    return {mpich_env.device_var(coll): "0", mpich_env.JSON_VAR: str(path.resolve())}





class MPICHFiles(FileFormats):
    """MPICH's JSON tuning files and the profiles that load them or set runtime CVARs."""

    def claims(self, text: str) -> bool:
        return (text.lstrip().startswith("{") or "export MPIR_CVAR_" in text
                or env_runtime.claims(text, "MPICH"))

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        """The tuning file or its environment profile, read as `tune export` reads them
        (MPICH aborts at start-up on what this reader refuses)."""
        got = env_runtime.read(path, "MPICH", runtime.MAY_SET)
        if got is not None:
            return Checked(f"MPICH runtime profile, {len(got[0])} set",
                           {"format": "mpich-runtime", "parameters": got[0]}, [])
        text, prof = read_files(path, "will not check")
        tuned = mpich_csel.parse(text)
        warnings = []
        if mpi is None:
            warnings.append("not started with an MPICH: which keys and algorithms MPICH "
                            "takes depends on its version, and it aborts every job in "
                            "MPI_Init on one it does not (pass --mpi PREFIX)")
        else:
            starts(mpich.find_mpich(mpi), Path(prof.tuning_file or path), "check")
        return Checked(f"MPICH tuning file, {len(tuned)} collective(s) tuned",
                       {"format": "mpich", "collectives": sorted(tuned),
                        "tuning_file": str(prof.tuning_file or path)}, warnings)

    def installable(self, req: ExportRequest) -> Installable:
        """The tuning file and a shell profile naming it: MPICH reads no parameter file."""
        where = req.home / ".config" / "colltune" if req.site is None else req.site
        if req.text is None and env_runtime.read(req.source, "MPICH", runtime.MAY_SET) is not None:
            return env_runtime.installable(req.source, req.stamp, where, "MPICH",
                                            runtime.MAY_SET)
        json_text, prof = read_files(req.source)
        # what is installed is what the MPICH it is for starts with: named, never guessed
        # (a file for 5.0 that 4.0 aborts on is no file for 4.0)
        if req.mpi is None:
            raise ColltuneError(f"will not export {req.source} without the MPICH it is for: "
                                "MPICH aborts every job in MPI_Init on a key or algorithm "
                                "its version does not take",
                                "pass --mpi PREFIX of that MPICH")
        starts(mpich.find_mpich(req.mpi), Path(prof.tuning_file or req.source), "export")
        installed = destination(where / "colltune-mpich.json")
        prof.tuning_file = installed
        prof.comments = [f"MPICH collectives tuned by colltune: {req.stamp}",
                         "use: source this file before mpiexec (MPICH reads no parameter "
                         "file)" + ("; e.g. from ~/.bashrc" if req.site is None else "")]
        env = check_env(prof.variables(), "the MPICH profile")
        return Installable(
            [Planned(installed, json_text, "MPICH tuning file (csel JSON)"),
             Planned(destination(where / "colltune-mpich.env"), mpich_env.render(prof),
                     "MPICH environment profile")],
            env, "MPICH collectives tuned by colltune")

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None, launch: Launch | None = None) -> VerifyTarget:
        """The tuning file (or the profile that names it) against MPICH's own choice: the
        tuned arm sets the profile's variables."""
        json_text, prof = read_files(path)
        if prof.tuning_file is None:  # the tuning file alone: it is what the profile sets
            prof.tuning_file = path.resolve()
        mpi = mpich.find_mpich(mpi_prefix)
        tuned = mpich_csel.parse(json_text)
        names = sorted(c for c in tuned if c in prof.collectives)
        catalog = self.backend._catalog(mpi, names)
        tuned = mpich_csel.parse(json_text, catalog.params)
        placement = self.backend.place(np, hostfile, launch)

        def rule_at(coll: Collective, n: int, size: int) -> Config | None:
            per_np = tuned.get(coll.name)
            if not per_np:
                return None
            # the first "comm_size<=K" that holds n, else "any" (or the largest K: render
            # drops an "any" that repeats it)
            fits = sorted(k for k in per_np if k is not None and n <= k)
            key = fits[0] if fits else (None if None in per_np else max(
                k for k in per_np if k is not None))
            text = per_np[key].algorithm_at(lookup(coll.name, size, n))
            return DEFAULT if text is None else config_of(catalog, coll.name, text)

        def applied(coll: Collective, n: int, sizes: list[int]) -> tuple[str, str]:
            return "unproven", ("MPICH leaves no record of the algorithm it ran that "
                                "colltune reads (Open MPI's pml traffic has no MPICH "
                                "counterpart); the speed-ups below are the evidence")

        return VerifyTarget(mpi, catalog, names, {"default": {}, "tuned": prof.variables()},
                            placement, rule_at, applied)


class MPICHApps(AppSupport[MPICH]):
    """A program under MPICH's mpiexec (Hydra): settings as `-genv`."""

    online = "call"  # MPICH reads its algorithm control variables at each call


    def find(self, prefix: str | None) -> MPICH:
        return mpich.find_mpich(prefix)

    def launcher_env(self, env: dict[str, str]) -> list[str]:
        return hydra_env(env)


class MPICHBackend(Backend[MPICH]):
    """MPICH (and MVAPICH 4, which is MPICH): algorithms switched through MPI_T in one
    launch; its tuning file (csel JSON) and an environment profile as output."""

    Files = MPICHFiles
    runtime = MPICHRuntime()
    name = "mpich"
    apps = MPICHApps()
    own_launcher = "mpiexec"
    traits = Traits(busy_polls=True)
    output = "an MPICH tuning file or profile"
    short = "mpich"
    formats = ("mpich", "mvapich4")  # MVAPICH 4 selects with MPICH's variables and file
    # stored as coll/tuned's parameters until 0.2 (its first stores had their columns)
    stored_names = {SEG: CHUNK, FAN: RADIX}
    waits = {MPICH.name: "MPICH's ranks busy-poll while they wait, its default (shared-"
                         "memory) collectives most of all, so a rank waits for a scheduler "
                         "time slice of the rank whose core it shares",
             "MVAPICH": "MVAPICH's ranks busy-poll while they wait, so a rank waits for a "
                        "scheduler time slice of the rank whose core it shares"}

    def rule_size(self, coll: Collective, size: int, np: int) -> int:
        return lookup(coll.name, size, np)

    def launch(self, mpi: MPICH, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        return mpich.launch_command(mpi, placement), mpich.launch_env(env_extra)

    def mpit_vars(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, int]:
        if cfg.algorithm == 0 or not isinstance(catalog, MPICHCatalog):
            return {}
        return catalog.assignments(coll.name, cfg)

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return mpich.forcing_env(catalog, coll.name, cfg)

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[MPICH]:
        """The MPICH under --mpi, its catalog read through MPI_T and its compiled-in
        selection table (the tuning file starts from it)."""
        placements = hydra_placements(opts)
        mpi = mpich.find_mpich(opts.mpi)
        session = MPICHSession(self, mpi, self._catalog(mpi, colls), placements, opts.out)
        session.says_layout = reads_layers(mpi)
        # a run of --layouts: its ranges are this layout's layer of the file
        session.layer = placements[0].ppn if opts.layout and session.says_layout else None
        return session

    @staticmethod
    def _catalog(mpi: MPICH, colls: list[str]) -> MPICHCatalog:
        exe = build_kernel(mpi)
        library = mpich.library_path(exe)
        if library is None:
            raise ColltuneError(f"cannot tell which MPICH library {exe} loads (ldd)",
                                "check that ldd works and the kernel links libmpi or libmpich")
        catalog = mpich.catalog(exe, library, colls)
        catalog.builtin = mpich.builtin_table(library)
        if catalog.builtin is None:
            raise ColltuneError(f"MPICH's compiled-in selection table was not found in "
                                f"{library}", "a tuning file replaces it for every "
                                "collective, so colltune writes one only from it; report "
                                "this MPICH build")
        missing = [c for c in colls if not catalog.algorithms.get(c)]
        if missing:
            raise ColltuneError(f"{mpi.describe()} has no algorithm variable for "
                                + ", ".join(missing), "tune other collectives")
        return catalog

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        # MPICH's word for the parameters (k, chunk); ids only in an older store
        return MPICHCatalog(algorithms=names or {}, source="store")

    def owns(self, mpi_key: str) -> bool:
        return mpi_key.startswith(("mpich-", "mvapich-"))  # MVAPICH 4 names itself


def reads_layers(mpi: MPICH) -> bool:
    """Whether the library reads comm_avg_ppn in a tuning file: MPICH 5.0.2 does (tests/
    test_mpich.py); 4.0.2 aborts in MPI_Init on it (csel.c: "Assertion failed")."""
    return mpi.name == "MPICH" and mpi.version_tuple >= (5,)


class MPICHSession(Session[MPICH]):
    def __init__(self, backend: Backend[MPICH], mpi: MPICH, catalog: MPICHCatalog,
                 placements: list[Placement], out: Path | None) -> None:
        self.backend, self.mpi, self.catalog, self.placements = backend, mpi, catalog, placements
        self.mpich_catalog, self.out = catalog, out
        self.layer: int | None = None  # ranks a node, where the ranges are that layer

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        """MPICH as it comes against MPICH under the tuning file."""
        cat = self.mpich_catalog
        assert cat.builtin is not None
        return {"default": {}, "tuned": tentative(
            path, cat.builtin, coll.name, placement.np,
            ranges(coll.name, cat, placement.np, ds), cat.params)}

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        """MPICH's tuning file at --out and, beside it, the environment profile that uses
        it."""
        cat, out = self.mpich_catalog, self.out
        assert cat.builtin is not None
        new = tuning(decisions, cat)
        if self.layer is not None:  # MPICH's own for every other layout
            new = {c: {n: Ranges([(None, None)], per_ppn={self.layer: r})
                       for n, r in per_np.items()} for c, per_np in new.items()}
        written = Written(
            "MPICH tuning file", str(env_path(out)) if out else None,
            f"source {env_path(out) if out else 'PROFILE'} (or set its variables) before "
            "mpiexec", record={"mpich": {"tuning_file": str(out) if out else None,
                                         "env_profile": str(env_path(out)) if out else None,
                                         "not_selectable": cat.not_selectable or {}}})
        if out:
            try:
                text, merged = merged_table(out, cat.builtin, new, cat.params)
            except (OSError, FormatError, mpich_csel.CselError) as e:
                raise ColltuneError(f"will not merge into {out}: {e}",
                                    "fix or move that file, or choose another --out; it was "
                                    "not changed") from None
            comments = [f"MPICH tuning written by colltune {__version__}",
                        provenance(self.mpi),
                        f"use: source this file, or set these variables (module file, srun "
                        f"--export); the tuning file is {out.resolve()}"]
            comments += decision_comments(decisions, cat)
            write_file(out, text, "--out")
            write_file(env_path(out), env_profile(merged, cat, out, comments), "--out")
        return written


def starts(mpi: MPICH, tuning_file: Path, what: str) -> None:
    """Refuse a tuning file `mpi` aborts on in MPI_Init (one process, no launcher)."""
    why = mpich.init_refusal(build_kernel(mpi), tuning_file)
    if why is not None:
        raise ColltuneError(f"will not {what} {tuning_file}: {mpi.describe()} aborts in "
                            f"MPI_Init with it ({why})",
                            "fix the file for this MPICH's version (its keys and algorithm "
                            "names), or name the MPICH it is for with --mpi")


def read_files(source: Path, refusal: str = "will not export"
               ) -> tuple[str, mpich_env.EnvProfile]:
    """The tuning file's text and its profile, from either of the two files `tune --format
    mpich` wrote (the profile names the tuning file; the tuning file has its profile beside
    it, else the profile is made from the collectives the file tunes)."""
    try:
        text = read_text(source)
        if not text.lstrip().startswith("{"):
            prof = mpich_env.parse(text)
            if prof.tuning_file is None:
                raise mpich_env.EnvProfileError(f"it names no {mpich_env.JSON_VAR}")
            json_text = read_text(prof.tuning_file)
        else:
            json_text = text
            beside = env_path(source)
            prof = mpich_env.parse(read_text(beside)) if beside.exists() else \
                mpich_env.EnvProfile(collectives=sorted(mpich_csel.parse(text)))
        mpich_csel.parse(json_text)  # MPICH's reader aborts on what ours refuses
    except (OSError, FormatError, mpich_csel.CselError, mpich_env.EnvProfileError) as e:
        raise ColltuneError(f"{refusal} {source}: {e}",
                            "pass the tuning file or profile `tune --format mpich` wrote"
                            ) from None
    return json_text, prof
