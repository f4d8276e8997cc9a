"""`tune model fit` as an API: probe a real MPI with modelbench, fit Hockney and LogGP, and
keep parameters, fit quality and the probe data in the store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from colltune.backends import registry
from colltune.launchers import Launch
from colltune.models.hockney import Hockney, fit_hockney
from colltune.models.loggp import LogGP, fit_loggp
from colltune.models.probe import ProbeData, run_probe
from colltune.store import Store


@dataclass
class Calibration:
    mpi: str
    np: int
    data: ProbeData
    hockney: Hockney
    loggp: LogGP


    # when the ranks span nodes: the same fits for pairs inside a node and across nodes
    apart: dict[str, tuple[Hockney, LogGP]] = field(default_factory=dict)


def calibrate(store: Store, mpi_prefix: str | None = None, np: int = 2,  # noqa: PLR0913 (the API of `tune model fit`, its options by keyword)
              max_bytes: int = 1 << 20, reps: int = 50, hostfile: str | None = None,
              launch: Launch | None = None, backend: str = "openmpi",
              note: Callable[[str], None] | None = None) -> Calibration:
    family = registry.named(backend)
    mpi = family.with_apps().find(mpi_prefix)
    placement = family.place(np, hostfile, launch)
    data = run_probe(mpi, placement, max_bytes, reps, note=note)
    h, lg = fit_hockney(data), fit_loggp(data)
    cal = Calibration(mpi.describe(), np, data, h, lg)
    kinds = {r.same_node for r in data.p2p}
    if len(kinds) == 2:
        for same, label in ((True, "intra"), (False, "inter")):
            cal.apart[label] = (fit_hockney(data, same), fit_loggp(data, same))
    fits = [("hockney", h.as_json()), ("loggp", lg.as_json())]
    for label, (hh, ll) in cal.apart.items():
        fits += [(f"hockney-{label}", hh.as_json()), (f"loggp-{label}", ll.as_json())]
    # one timestamp for all: a fit whose rows straddled a second read back as half a fit
    store.add_models(mpi.key, mpi.version, data.host, np, placement.ppn, fits, data.as_json())
    return cal
