"""`tune show` and `tune report` name each stored context's algorithms with its own
family's catalog (found through the backend registry from the stored installation key),
not with coll/tuned's: MPICH 5.0.2's reduce 1 is not Open MPI's `linear`."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from colltune.backends import registry
from colltune.backends.mpich import install as mpich_backend
from colltune.core.config import DEFAULT, Config
from colltune.core.records import PointResult
from colltune.kernel.build import build_kernel
from colltune.store import Context, Store
from conftest import get_mpich
from helpers import tune_cli


def _add(store: Store, ctx: Context, cfgs: list[Config]) -> None:
    rng = random.Random(1)
    for i, cfg in enumerate(cfgs):
        xs = [1e-4 * (1 + 0.2 * i) * rng.uniform(0.95, 1.05) for _ in range(20)]
        store.add(ctx, cfg, PointResult(0, 4096, "ok", len(xs), sorted(xs)[10], samples=xs),
                  "mpit")


@pytest.mark.mpi  # reads MPICH 5.0.2's catalog through MPI_T (builds the kernel)
def test_show_names_mpich_and_mvapich2_algorithms_with_their_own_catalogs(
        tmp_path: Path) -> None:
    mpich = get_mpich("mpich50")
    store = Store(tmp_path / "s.db")
    m_ctx = Context(mpich.key, mpich.name, mpich.version, str(mpich.prefix), "elsewhere", 4,
                    4, 1, "reduce")
    _add(store, m_ctx, [Config(1), DEFAULT])  # the first is the fastest: show names it
    # MVAPICH2 is not installed here: its catalog is the switch statements colltune knows
    v_ctx = Context("mvapich2-2.3.7@/opt/mv2", "MVAPICH2", "2.3.7", "/opt/mv2", "elsewhere",
                    4, 4, 1, "allreduce")
    _add(store, v_ctx, [Config(2), DEFAULT])
    # as tune records it when it measures: MPICH's own catalog, read through MPI_T
    exe = build_kernel(mpich)
    names = mpich_backend.catalog(exe, mpich_backend.library_path(exe), ["reduce"]).algorithms
    store.add_catalog(mpich.key, "mpich", names)
    store.close()

    m_cat = registry.for_key(mpich.key).catalog_for(m_ctx, names)  # type: ignore[union-attr]
    v_cat = registry.for_key(v_ctx.mpi_key).catalog_for(v_ctx, None)  # type: ignore[union-attr]
    assert m_cat is not None and v_cat is not None
    res = tune_cli("show", "--db", str(tmp_path / "s.db"),
                   env={**os.environ, "COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    for cat, coll, cfg in ((m_cat, "reduce", Config(1)), (v_cat, "allreduce", Config(2))):
        name = cat.algorithm_name(coll, cfg.algorithm)
        assert not name.startswith("algorithm "), (coll, cfg)  # the catalog knows it
        assert f"{name}({cfg.algorithm})" in res.stdout, (coll, cfg, res.stdout)
    # what Open MPI's catalog calls them (the bug: every store was read as Open MPI's)
    assert "linear(1)" not in res.stdout and "nonoverlapping(2)" not in res.stdout


def test_the_store_records_which_backend_measured_a_context(tmp_path: Path) -> None:
    """The family comes from the store's own record, not only from the key's spelling: a
    key no backend's prefix matches is still named by the backend that measured it, and a
    context stored before the record existed (backend '') falls back to the key."""
    store = Store(tmp_path / "s.db")
    recorded = Context("site-build-2.3.7@/opt/mv2", "MVAPICH2", "2.3.7", "/opt/mv2", "h", 4,
                       4, 1, "allreduce", "mvapich2")
    _add(store, recorded, [Config(2), DEFAULT])
    old = Context("openmpi-4.1.4@/usr", "Open MPI", "4.1.4", "/usr", "h", 4, 4, 1, "reduce")
    _add(store, old, [DEFAULT])
    store.close()
    ro = Store(tmp_path / "s.db", readonly=True)
    got = {c.collective: c for c in ro.contexts()}
    ro.close()
    assert got["allreduce"].backend == "mvapich2" and got["reduce"].backend == ""
    assert registry.for_key(recorded.mpi_key) is None  # the key alone names no family
    assert registry.for_context(got["allreduce"]).name == "mvapich2"  # type: ignore[union-attr]
    assert registry.for_context(got["reduce"]).name == "openmpi"  # type: ignore[union-attr]
    res = tune_cli("show", "--db", str(tmp_path / "s.db"), env={**os.environ, "COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    v_cat = registry.BACKENDS["mvapich2"].catalog_for(got["allreduce"], None)
    assert v_cat is not None
    assert f"{v_cat.algorithm_name('allreduce', 2)}(2)" in res.stdout, res.stdout


def test_show_json_holds_every_context_and_its_decisions(tmp_path: Path) -> None:
    import json

    store = Store(tmp_path / "s.db")
    ctx = Context("openmpi-4.1.4@/usr", "Open MPI", "4.1.4", "/usr", "h", 4, 4, 1, "reduce",
                  "openmpi")
    _add(store, ctx, [Config(1), DEFAULT])
    store.close()
    r = tune_cli("show", "--db", str(tmp_path / "s.db"), "--json", "-")
    assert r.returncode == 0, r.stderr
    [c] = json.loads(r.stdout)["contexts"]
    assert (c["collective"], c["np"], c["mpi"]["version"]) == ("reduce", 4, "4.1.4")
    assert [d["size"] for d in c["decisions"]] == [4096]
    assert "reduce, 4 ranks" in r.stderr  # the table went to standard error
