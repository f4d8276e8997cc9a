"""Model parameters fitted on collective measurements instead of point-to-point probes:
the (alpha, beta, gamma) or (L, o, g, G, gamma) that make the formulas best match every
configuration and size measured, over one or several communicator sizes.

Why: on a shared or oversubscribed node, what a collective pays per message (contention,
descheduling of ranks that share a core) is not what an isolated ping-pong sees, and the
formulas then err by a factor. Fitted on what the collectives themselves did at the sizes
that can be run, the same formulas can then be evaluated at a size that cannot
(`--predict`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.models.formulas import cost
from colltune.models.hockney import Hockney
from colltune.models.linfit import Line, Quality, quality
from colltune.models.loggp import LogGP, LogGPPiece
from colltune.models.network import Formula, HockneyNet, LogGPNet, Net, Shape
from colltune.models.predict import Models

WHOLE = 1 << 40  # one piece covering every size


@dataclass(frozen=True)
class Observation:
    coll: Collective
    np: int
    config: Config
    size: int
    seconds: float  # measured median


def _hockney(x: np.ndarray) -> Hockney:
    a, b, g = (float(v) for v in np.exp(x))
    q = Quality(0, 0, 0, 0)
    return Hockney([Line(a, b, 0, WHOLE)], g, q, q)


def _loggp(x: np.ndarray) -> tuple[LogGP, float]:
    big_l, o, g, big_g, gamma = (float(v) for v in np.exp(x))
    return LogGP([LogGPPiece(0, WHOLE, big_l, o, g, big_g)], Quality(0, 0, 0, 0)), gamma


def _formulas(obs: list[Observation], catalog: Catalog
              ) -> list[tuple[Observation, Formula, Shape]]:
    out: list[tuple[Observation, Formula, Shape]] = []
    for o in obs:
        found = cost(catalog, o.coll.name, o.config, o.np, float(o.size))
        if found is not None and o.seconds > 0:
            out.append((o, *found))
    return out


def fit_on_collectives(obs: list[Observation], catalog: Catalog) -> Models:
    """Least squares on log(predicted / measured) (every size counts alike), parameters
    kept positive by fitting their logarithms."""
    from scipy.optimize import least_squares

    pairs = _formulas(obs, catalog)
    if len(pairs) < 6:
        from colltune.errors import ColltuneError
        raise ColltuneError("too few measured configurations with a cost formula to fit",
                            "measure a grid first (tune <collective> --np N)")
    y = np.log([o.seconds for o, _, _ in pairs])

    def residuals(net_of: Callable[[np.ndarray], Net]) -> Callable[[np.ndarray], np.ndarray]:
        def res(x: np.ndarray) -> np.ndarray:
            net = net_of(x)
            return np.log([max(fn(net, s), 1e-12) for _, fn, s in pairs]) - y
        return res

    res_h = residuals(lambda x: HockneyNet(_hockney(x)))
    res_l = residuals(lambda x: LogGPNet(*_loggp(x)))
    # starting points: shared memory orders of magnitude (1 us, 0.1 ns/B, 0.01 ns/B)
    xh = least_squares(res_h, np.log([1e-6, 1e-10, 1e-11]), method="trf").x
    xl = least_squares(res_l, np.log([1e-7, 1e-6, 1e-6, 1e-10, 1e-11]), method="trf").x
    measured = [o.seconds for o, _, _ in pairs]
    h = _hockney(xh)
    hq = quality(np.exp(res_h(xh) + y), measured)
    lg, gamma = _loggp(xl)
    lq = quality(np.exp(res_l(xl) + y), measured)
    nps = sorted({o.np for o, _, _ in pairs})
    return Models(Hockney(h.pieces, h.gamma, hq, hq), LogGP(lg.pieces, lq),
                  f"fitted on {len(pairs)} collective measurements at np="
                  f"{','.join(map(str, nps))}", gamma_loggp=gamma)
