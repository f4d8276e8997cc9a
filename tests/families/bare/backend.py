"""The bare family's Backend: launch, force, open a session that writes `SIZE ALG` lines.
It has none of the capabilities (files, runtime, apps, bands): the commands that need them
must say so, naming the families that have them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from colltune.backends.base import Backend, Decisions, Session, Written, write_file
from colltune.backends.files import Arms
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.options import TuneOptions
from colltune.slots import Placement, place

from .install import Bare, catalog


class BareBackend(Backend[Bare]):
    name = "bare"
    formats = ("bare",)
    short = "bare"
    output = "a bare size list"

    def launch(self, mpi: Bare, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        raise AssertionError("--from-db must not launch anything")

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return {"BARE_ALG": str(cfg.algorithm)}

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[Bare]:
        return BareSession(self, Bare(Path(opts.mpi or "/opt/bare")), opts)


class BareSession(Session[Bare]):
    def __init__(self, backend: BareBackend, mpi: Bare, opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog = backend, mpi, catalog()
        self.placements = [place(n, None) for n in opts.nps]
        self.opts, self.sweep = opts, "relaunch"

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        return {"default": {}, "tuned": {"BARE_SIZES": str(path)}}

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        lines = [f"{d.size} {d.chosen.algorithm}\n" for per_np in decisions.values()
                 for ds in per_np.values() for d in ds if d.chosen != DEFAULT]
        if self.opts.out:
            write_file(self.opts.out, "".join(lines), "--out")
        return Written("bare size list", use="BARE_SIZES=FILE")
