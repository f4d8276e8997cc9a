"""MVAPICH2 as a Backend: finding it, forcing and counting its algorithms, confirming,
and writing its environment profile (the ranges themselves: mvapich2_ranges.py).

MVAPICH2 has no "library's choice" entry in a range table: a range where its default was
kept names the algorithm the default ran, as MVAPICH2's own counters reported it while the
default was measured. Where they cannot name it (or a range string cannot hold it), the
neighbouring size's algorithm is written there only if it was measured at that size as a
tie with the default and fresh launch pairs do not find it slower; otherwise the collective
is left to MVAPICH2 whole. It has no communicator-size dimension either: one np is
written."""

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
from colltune.backends.files import Arms, Checked, ExportRequest, FileFormats, Installable
from colltune.backends.mvapich2 import install as mv2
from colltune.backends.mvapich2 import runtime
from colltune.backends.mvapich2.install import MV2Catalog
from colltune.backends.mvapich2.ranges import (
    Counters,
    Ties,
    Trades,
    confirmed_ties,
    profile,
    ranges,
    tentative,
    ties_in,
    trades_in,
)
from colltune.backends.mvapich2.runtime import MVAPICH2Runtime
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, Verdict
from colltune.errors import ColltuneError, FormatError
from colltune.outfile import Planned, destination
from colltune.rules import mvapich2, mvapich3
from colltune.rules.mvapich2 import Range
from colltune.rules.safe import check_env

if TYPE_CHECKING:
    from colltune.options import TuneOptions
    from colltune.slots import Placement
    from colltune.store import Context, Measurement, Store

class MVAPICH2Files(FileFormats):
    """MVAPICH2's tuning profiles and runtime parameter files."""

    export_as = ("mvapich3",)  # MVAPICH 3's variables, one algorithm each

    def claims(self, text: str) -> bool:
        return mvapich2.is_profile_text(text) or env_runtime.claims(text, "MVAPICH2")

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        prof = mvapich2.read(path)
        n = sum(1 for v in prof.settings if v in mvapich2.TUNING_VARS)
        return Checked(f"MVAPICH2 profile, {len(prof.settings)} variable(s), {n} tuning "
                       "table(s)", {"format": "mvapich2", "variables": dict(prof.settings)},
                       [])

    def installable(self, req: ExportRequest) -> Installable:
        """The parameter file (the site's /etc/mvapich2.conf, or the user's ~/.mvapich2.conf);
        with --as mvapich3, the profile carried over to MVAPICH 3's environment."""
        if req.as_format == "mvapich3":
            return self.backend._mvapich3(req)
        try:
            prof = mvapich2.read(req.source)
        except FormatError as e:
            raise ColltuneError(f"will not export {e}", "check it with `tune check`") from None
        env = dict(prof.settings)
        bad = runtime.MAY_SET.refused(list(env))
        if bad:
            raise ColltuneError(f"will not export {req.source}: it sets "
                                f"{', '.join(b[:60] for b in bad[:5])}: an MVAPICH2 file may "
                                "set only MVAPICH2's own variables (MV2_...)",
                                "export the file tune wrote, unedited")
        user = req.site is None
        where = req.home if req.site is None else req.site
        conf = [f"# MVAPICH2 parameters {req.stamp}"]
        if not user:
            conf.append("# install: as /etc/mvapich2.conf, or set MV2_USER_CONFIG to this file")
        conf += [f"{k} = {v}" for k, v in check_env(env, "the MVAPICH2 parameter file").items()]
        return Installable(
            [Planned(destination(where / (".mvapich2.conf" if user else "mvapich2.conf")),
                     "\n".join(conf) + "\n", "MVAPICH2 parameter file", merge=user)],
            env, "MVAPICH2 collectives tuned by colltune")


class MVAPICH2Apps(AppSupport[mv2.MVAPICH2]):
    """A program under MVAPICH2's mpiexec (Hydra): settings as `-genv`."""

    not_online = ("MVAPICH2 reads its MV2_ variables only at MPI_Init: no configuration "
                  "can change inside a run")


    def find(self, prefix: str | None) -> mv2.MVAPICH2:
        return mv2.find_mvapich2(prefix)

    def launcher_env(self, env: dict[str, str]) -> list[str]:
        return hydra_env(env)


class MVAPICH2Backend(Backend[mv2.MVAPICH2]):
    """MVAPICH2 2.3 (and the MVAPICH 3 carry-over of its profile): one launch per
    configuration, its counters say what ran, its profile (`NAME = VALUE`) as output."""

    Files = MVAPICH2Files
    runtime = MVAPICH2Runtime()
    name = "mvapich2"
    apps = MVAPICH2Apps()
    own_launcher = "mpiexec"
    traits = Traits(busy_polls=True, pvar_prefix=mv2.PVAR_PREFIX)
    options = frozenset({"for_np", "trade_off"})
    output = "an MVAPICH2 profile"
    formats = ("mvapich2",)
    short = "mv2"
    waits = {mv2.MVAPICH2.name: "MVAPICH2's ranks busy-poll while they wait, so a rank "
                                "waits for a scheduler time slice of the rank whose core it "
                                "shares"}

    def launch(self, mpi: mv2.MVAPICH2, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        return (mv2.launch_command(mpi, placement),
                mv2.launch_env(env_extra, placement.oversubscribe))

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        assert isinstance(catalog, MV2Catalog)
        return mv2.forcing_env(catalog, coll.name, cfg.algorithm)

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[mv2.MVAPICH2]:
        """The MVAPICH2 under --mpi and its catalog."""
        if opts.for_np is not None and opts.for_np not in opts.nps:
            raise ColltuneError(f"--for-np {opts.for_np} is not among --np "
                                f"{','.join(map(str, opts.nps))}",
                                "name one of the communicator sizes tuned")
        placements = hydra_placements(opts)
        mpi = mv2.find_mvapich2(opts.mpi)
        catalog = mv2.catalog(colls)
        missing = [c for c in colls if not catalog.algorithms.get(c)]
        if missing:
            raise ColltuneError(f"colltune does not tune {', '.join(missing)} on MVAPICH2",
                                "tune " + ", ".join(sorted(mv2.ALGORITHMS)))
        return MVAPICH2Session(self, mpi, catalog, placements, opts)


    def _mvapich3(self, req: ExportRequest) -> Installable:
        try:
            prof, notes = mvapich3.from_mvapich2(mvapich2.read(req.source), req.at_size)
        except (FormatError, mvapich3.ConversionError) as e:
            raise ColltuneError(f"will not export {req.source} for MVAPICH 3: {e}",
                                "pass --for-size, or an MVAPICH2 profile `tune` wrote"
                                ) from None
        prof.comments = [f"MVAPICH 3 collectives tuned by colltune: {req.stamp}",
                         "use: source this file before mpiexec/mpirun_rsh"] + [
                            f"note: {n}" for n in notes]
        where = req.home / ".config" / "colltune" if req.site is None else req.site
        return Installable([Planned(destination(where / "colltune-mvapich3.env"),
                                    mvapich3.render(prof), "MVAPICH 3 environment profile")],
                           dict(prof.settings), "MVAPICH 3 collectives tuned by colltune")

    def plan_catalog(self, colls: list[str]) -> Catalog | None:
        return mv2.catalog(colls)  # MVAPICH2's numbers are fixed by its release

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        from colltune.collectives import COLLECTIVES

        return mv2.catalog(sorted(COLLECTIVES))


class MVAPICH2Session(Session[mv2.MVAPICH2]):
    def __init__(self, backend: Backend[mv2.MVAPICH2], mpi: mv2.MVAPICH2, catalog: MV2Catalog,
                 placements: list[Placement], opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog, self.placements = backend, mpi, catalog, placements
        self.mv2_catalog, self.opts = catalog, opts
        self.sweep = "relaunch"  # MVAPICH2 reads its variables once, in MPI_Init
        # what MVAPICH2 said it ran, for ranges where its default stays, and which
        # algorithms tied with the default where it cannot say
        self.counters: dict[str, dict[int, Counters]] = {}
        self.ties: dict[str, dict[int, Ties]] = {}
        self.trades: dict[str, dict[int, Trades]] = {}  # --trade-off

    def decided(self, name: str, placement: Placement, ds: list[Decision],
                ms: list[Measurement], store: Store, ctx: Context) -> list[Decision]:
        self.counters.setdefault(name, {})[placement.np] = store.counters(ctx)
        sweep = ties_in(ms, self.opts.min_gain, self.opts.alpha)

        def fresh(size: int, alg: int) -> Verdict | None:
            return store.confirmation(ctx, size, Config(alg).key)

        self.ties.setdefault(name, {})[placement.np] = confirmed_ties(sweep, fresh)
        if self.opts.trade_off:
            self.trades.setdefault(name, {})[placement.np] = trades_in(
                ms, self.mv2_catalog, name, self.counters[name][placement.np])
        return ds

    def _ranges(self, name: str, np: int, ds: list[Decision], tie: Ties | None = None
                ) -> tuple[list[Range], list[str]]:
        return ranges(name, self.mv2_catalog, ds, self.counters.get(name, {}).get(np, {}),
                      tie or self.ties.get(name, {}).get(np),
                      self.trades.get(name, {}).get(np))

    def fills(self, name: str, placement: Placement, ds: list[Decision]
              ) -> list[tuple[int, Config]]:
        """Sizes where the default was kept but the range string will name an algorithm
        (a tie of the sweep, or not refuted yet); none if the collective is left to
        MVAPICH2 anyway."""
        tie = self.ties.get(name, {}).get(placement.np)
        if tie is None:
            return []
        asked: list[tuple[int, Config]] = []

        def recording(size: int, alg: int) -> str | None:
            how = tie(size, alg)
            if how is not None:
                asked.append((size, Config(alg)))
            return how

        table, _ = self._ranges(name, placement.np, ds, recording)
        return asked if table else []

    def unexpressed(self, coll: Collective, placement: Placement, ds: list[Decision]
                    ) -> str:
        """What ranges() gave up on: its last note names the size and the reason."""
        table, notes = self._ranges(coll.name, placement.np, ds)
        return "" if table or not notes else notes[-1]

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        """MVAPICH2 as it comes against MVAPICH2 under this collective's profile."""
        table, _ = self._ranges(coll.name, placement.np, ds)
        return {"default": {}, "tuned": tentative(table, coll.name)}

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        """The MVAPICH2 profile (`NAME = VALUE`, as /etc/mvapich2.conf or MV2_USER_CONFIG)
        for one communicator size: MVAPICH2's tables have no comm-size dimension."""
        opts, cat = self.opts, self.mv2_catalog
        np = opts.for_np or max(opts.nps)
        comments = [f"MVAPICH2 profile written by colltune {__version__}",
                    provenance(self.mpi),
                    f"decisions at {np} ranks: MVAPICH2 uses these tables at every "
                    "communicator size"]
        if len(opts.nps) > 1:
            comments.append(f"tuned at {','.join(map(str, opts.nps))} ranks; written for {np} "
                            "(--for-np)")
        comments += decision_comments(decisions, cat, only_np=np)
        per_coll = {c: per_np.get(np, {}) for c, per_np in self.counters.items()}
        ties = {c: per_np[np] for c, per_np in self.ties.items() if np in per_np}
        trades = {c: per_np[np] for c, per_np in self.trades.items() if np in per_np}
        prof, notes = profile(decisions, cat, per_coll, np, comments, ties, trades)
        prof.comments += [f"note: {n}" for n in notes]
        if opts.out:
            write_file(opts.out, mvapich2.render(prof), "--out")
        return Written(
            f"MVAPICH2 profile for {np} ranks", None,
            f"MV2_USER_CONFIG={opts.out} mpiexec ..., or tune export --site", notes,
            record={"mvapich2": {"profile": str(opts.out) if opts.out else None, "for_np": np,
                                 "settings": dict(prof.settings), "notes": notes}},
            # confirmed wins of a collective left to MVAPICH2 whole
            not_carried={c: sum(d.chosen != DEFAULT and d.verdict == "tuned"
                                for d in per_np.get(np, []))
                         for c, per_np in decisions.items()
                         if any(n.startswith(f"{c} left to MVAPICH2") for n in notes)})
        return None
