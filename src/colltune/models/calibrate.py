"""`tune model fit` as an API: probe a real MPI with modelbench, fit Hockney and LogGP, and
keep parameters, fit quality and the probe data in the store."""

from __future__ import annotations

from dataclasses import dataclass

from colltune.backends.openmpi import find_openmpi
from colltune.models.hockney import Hockney, fit_hockney
from colltune.models.loggp import LogGP, fit_loggp
from colltune.models.probe import ProbeData, run_probe
from colltune.slots import place
from colltune.store import Store


@dataclass
class Calibration:
    mpi: str
    np: int
    data: ProbeData
    hockney: Hockney
    loggp: LogGP


def calibrate(store: Store, mpi_prefix: str | None = None, np: int = 2,
              max_bytes: int = 1 << 20, reps: int = 50, hostfile: str | None = None
              ) -> Calibration:
    mpi = find_openmpi(mpi_prefix)
    placement = place(np, hostfile)
    data = run_probe(mpi, np, max_bytes, reps, hostfile)
    h, lg = fit_hockney(data), fit_loggp(data)
    for name, params in (("hockney", h.as_json()), ("loggp", lg.as_json())):
        store.add_model(mpi.key, mpi.version, data.host, np, placement.ppn, name, params,
                        data.as_json())
    return Calibration(mpi.describe(), np, data, h, lg)
