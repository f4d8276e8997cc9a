"""`tune --from-db` on the recorded datasets (tests/data/datasets) writes the same rules files as
the golden copies in tests/golden: refactoring the pipeline must not change a decision.

Regenerate only for an intended change of behaviour: COLLTUNE_REGEN_GOLDEN=1 pytest
tests/test_golden.py, and say why in the commit."""

from __future__ import annotations

import os
import re
import socket
import statistics
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from colltune.collectives import get_collective
from colltune.core.records import PointResult
from colltune.options import TuneOptions
from colltune.slots import place
from colltune.store import Store
from colltune.tuner.measure import context_for
from colltune.tuner.run import tune
from conftest import get_mpi
from replay_data import load

DATA = Path(__file__).parent / "data" / "datasets"
GOLDEN = Path(__file__).parent / "golden"
COLLS = ["allreduce", "alltoall", "bcast", "reduce"]
NPS = [2, 3, 4]


def _normalise(text: str, mpi: OpenMPI) -> str:
    """The rules without what differs between runs and machines: time, host, prefix."""
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "<stamp>", text)
    return text.replace(socket.gethostname(), "<host>").replace(str(mpi.prefix), "<prefix>")


@pytest.mark.mpi  # reads the installed Open MPIs (ompi_info), launches nothing
@pytest.mark.parametrize("label", ["ompi41", "ompi50"])
def test_from_db_on_recorded_datasets_writes_the_golden_rules(label: str, tmp_path: Path
                                                              ) -> None:
    mpi = get_mpi(label)
    store = Store(tmp_path / "db.sqlite")
    for name in COLLS:
        coll = get_collective(name)
        for np in NPS:
            ds = load(DATA / f"ompi{mpi.version}-{name}-np{np}.csv")
            ctx = context_for(mpi, coll, place(np, env={}))
            for (cfg, size), samples in sorted(ds.samples.items()):
                store.add(ctx, cfg, PointResult(0, size, "ok", n=len(samples),
                                                median=statistics.median(samples),
                                                samples=samples), "mpit")
    store.close()
    out = tmp_path / "rules.conf"
    tune(TuneOptions(COLLS, NPS, out=out, mpi=str(mpi.prefix), db=tmp_path / "db.sqlite",
                     from_db=True))
    got = _normalise(out.read_text(), mpi)
    golden = GOLDEN / f"from-db-{label}.conf"
    if os.environ.get("COLLTUNE_REGEN_GOLDEN") == "1":
        golden.write_text(got)
    assert got == golden.read_text(), f"--from-db no longer writes {golden.name}"
