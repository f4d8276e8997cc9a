"""tune online's cost-model pruning (issue 72: "pruned by the cost model, so a run explores
few"): which communicator sizes a launch makes, and which segment sizes the model keeps in
the two regimes whose answer is known without the model: where every message pays a large
start-up, segmenting only adds start-ups; where only bytes cost, a pipeline of small
segments keeps every hop busy. The real run (the layer never runs what the model left out)
is in tests/test_online.py."""

from __future__ import annotations

import socket
from pathlib import Path

from colltune.apploop.online.candidates import candidates, ids_of
from colltune.apploop.online.driver import OnlineRequest, _known
from colltune.apploop.online.known import bucket_of
from colltune.apploop.online.model import comm_sizes, variant_skips, world_size
from colltune.backends import registry
from colltune.backends.openmpi.install import OpenMPI, builtin_catalog
from colltune.core.config import Config
from colltune.models.hockney import Hockney
from colltune.models.linfit import Line, Quality
from colltune.models.loggp import LogGP, LogGPPiece
from colltune.models.predict import Models
from colltune.store import Store
from colltune.tuner.measure import Reporter


def test_the_launch_says_how_many_ranks() -> None:
    assert world_size(["mpirun", "-np", "4", "./app", "-n", "9"]) == 4
    assert world_size(["/opt/bin/mpiexec", "-n", "8", "./app"]) == 8
    assert world_size(["mpirun", "--np=6", "./app"]) == 6
    assert world_size(["srun", "-n4", "--mpi=pmix", "./app"]) == 4
    assert world_size(["srun", "--ntasks=3", "./app"]) == 3
    assert world_size(["srun", "--ntasks", "5", "./app"]) == 5
    # srun inside an allocation that gives the count: the allocation's
    assert world_size(["srun", "./app"], {"SLURM_NTASKS": "12"}) == 12
    # none given: the model is not used (said), never a guess
    assert world_size(["mpirun", "--hostfile", "h", "./app"], {}) is None
    assert world_size(["mpirun", "-np", "four", "./app"], {}) is None
    # the world, its divisors and the small sizes, the world's lines first
    assert comm_sizes(12) == [12, 8, 7, 6, 5, 4, 3, 2]
    assert comm_sizes(512)[:3] == [512, 256, 128] and 7 in comm_sizes(512)
    assert comm_sizes(2) == [2]


def _models(alpha: float, beta: float) -> Models:
    """A network where a message of m bytes costs alpha + beta*m, by both models."""
    q = Quality(1.0, 0.0, 0.0, 10)
    hockney = Hockney([Line(alpha, beta, 1, 1 << 30)], 1e-10, q, q)
    loggp = LogGP([LogGPPiece(1, 1 << 30, alpha, 0.0, 0.0, beta)], q)
    return Models(hockney, loggp, "a known network")


def _kept(models: Models, np: int, size: int, algorithm: str) -> set[Config]:
    """The configurations of bcast's `algorithm` the model leaves in question at `np`
    ranks and calls of `size` bytes."""
    catalog = builtin_catalog()
    ids = ids_of(candidates(registry.named("openmpi"), catalog))
    alg = next(a for a, n in catalog.algorithms["bcast"].items() if n == algorithm)
    skipped = {int(ln.split()[2]) for ln in variant_skips(models, catalog, ids, np)
               if ln.split()[1] == "bcast" and int(ln.split()[3]) == np
               and int(ln.split()[4]) == bucket_of(size)}
    return {c for k, c in ids["bcast"].items()
            if c.algorithm == alg and k not in skipped and size > max(dict(c.params).values(),
                                                                       default=0)}


def test_the_model_keeps_the_segment_size_the_network_favours() -> None:
    big = 65536  # bucket 17, at its lower end: the 1 and 8 KiB segments are smaller
    # a start-up of 1 ms and bytes for free: one message, not ninety
    latency = _kept(_models(1e-3, 1e-15), 8, big, "pipeline")
    assert latency == {Config(3)}, latency
    # bytes at 1 GB/s and no start-up: the smallest segments keep all seven hops busy
    bandwidth = _kept(_models(0.0, 1e-9), 8, big, "pipeline")
    # (a pipeline's other small segments may stay too: among the k fastest overall)
    assert Config.of(3, {"segsize": 1024}) in bandwidth and Config(3) not in bandwidth, \
        bandwidth
    # every algorithm keeps one variant at least: the model never drops an algorithm
    catalog = builtin_catalog()
    for name in catalog.algorithms["bcast"].values():
        if name != "ignore":
            assert _kept(_models(1e-3, 1e-15), 8, big, name), name


def test_the_run_asks_the_store_for_its_model_unless_told_not_to(ompi41: OpenMPI,
                                                                 tmp_path: Path) -> None:
    """The plan tune online writes: the model's lines where the store holds a fit of this
    installation on this host and the launch gives its count; none with --no-model, none
    (said) where the launch gives no count or the store holds no fit."""
    backend = registry.named("openmpi")
    mpi = ompi41
    catalog = builtin_catalog()
    cands = candidates(backend, catalog)
    db = tmp_path / "s.sqlite"
    cmd = ["mpirun", "-np", "4", "./app"]

    def plan(model: bool, launch: list[str]) -> tuple[list[str], list[str]]:
        said: list[str] = []

        class Notes(Reporter):
            def note(self, text: str) -> None:
                said.append(text)

        req = OnlineRequest(launch, tmp_path / "r.conf", db, model=model)
        return [ln for ln in _known(req, mpi, catalog, cands, Notes()) if
                ln.startswith("skip")], said

    assert plan(True, cmd) == ([], ["no cost model in the store: every segment size "
                                    "explored (tune model fit)"])
    m = _models(0.0, 1e-9)
    store = Store(db)
    store.add_models(mpi.key, mpi.version, socket.gethostname(), 2, 2,
                     [("hockney", m.hockney.as_json()), ("loggp", m.loggp.as_json())], {})
    store.close()
    skips, said = plan(True, cmd)
    assert skips and {int(ln.split()[3]) for ln in skips} == {2, 3, 4}, skips
    assert any("the cost model (fit on 2 ranks" in s for s in said), said
    assert plan(False, cmd) == ([], [])
    skips, said = plan(True, ["mpirun", "./app"])
    assert not skips and any("does not say how many ranks" in s for s in said), said
