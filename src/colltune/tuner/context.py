"""What one tune hands its stages: the `Run` (options, session, store, plan, reporter, and
what the stages collect: failures, searches, predictions) and a `Target` (one collective at
one placement), instead of ten parameters each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from colltune.collectives import Collective, get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.plan import Plan
from colltune.core.records import PointResult
from colltune.core.toolchain import Installation
from colltune.options import TuneOptions
from colltune.slots import Placement
from colltune.store import Context, Store
from colltune.tuner.budget import Budget
from colltune.tuner.measure import Lab, Reporter, context_for

if TYPE_CHECKING:
    from colltune.backends.base import Backend, Session


@dataclass(frozen=True)
class Target:
    """One collective at one communicator size (its placement)."""

    coll: Collective
    placement: Placement

    @property
    def where(self) -> str:
        return f"{self.coll.name} np={self.placement.np}"


@dataclass
class Run:
    """One tune, as its stages share it."""

    opts: TuneOptions
    sess: Session[Any]
    store: Store
    plan: Plan
    rep: Reporter = field(default_factory=Reporter)
    failures: list[str] = field(default_factory=list)  # one line per failed point
    searches: dict[str, dict[str, object]] = field(default_factory=dict)  # what each did
    predicted: dict[tuple[str, int], str] = field(default_factory=dict)  # --predict's notes
    budget: Budget | None = None  # --time-budget: what is left, what was left out

    @classmethod
    def start(cls, opts: TuneOptions, sess: Session[Any], store: Store,
              rep: Reporter | None = None) -> Run:
        """A run whose plan is what the session's grid allows (a parameter this library
        does not declare: refused here)."""
        return cls(opts, sess, store, Plan(sess.catalog, sess.grid(opts), opts.sizes),
                   rep or Reporter())

    @property
    def mpi(self) -> Installation:
        return self.sess.mpi

    def collective(self, name: str) -> Collective:
        """The collective `name` as this tune measures it (a reduction: summing
        --datatype)."""
        return get_collective(name).summing(self.opts.settings.datatype)

    @property
    def catalog(self) -> Catalog:
        return self.sess.catalog

    @property
    def backend(self) -> Backend[Any]:
        return self.sess.backend

    @property
    def exact(self) -> bool:
        return self.sess.backend.traits.exact

    @property
    def lab(self) -> Lab:
        """Where and how this run measures a point."""
        return Lab(self.mpi, self.catalog, self.store, self.opts.settings, self.sess.sweep,
                   self.rep)

    def context(self, t: Target) -> Context:
        return context_for(self.mpi, t.coll, t.placement, self.opts.settings)

    def failed(self, t: Target) -> Callable[[Config, PointResult], None]:
        """What records a failed point of `t` in `failures`, one line each."""
        def failed(cfg: Config, r: PointResult) -> None:
            self.failures.append(f"{t.where} {cfg.label(self.catalog, t.coll.name)} "
                                 f"{r.size} B: {r.status}"
                                 + (f" ({r.message})" if r.message else ""))
        return failed
