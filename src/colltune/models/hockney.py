"""Hockney's model: a message of m bytes costs alpha + beta*m, and reducing m bytes costs
gamma*m. Fitted on ping-pong (half round trips) and MPI_Reduce_local, one (alpha, beta)
piece per protocol when the data shows a switch."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from colltune.models.linfit import Line, Quality, fit_line, fit_pieces, piece_for, quality
from colltune.models.probe import ProbeData


@dataclass(frozen=True)
class Hockney:
    pieces: list[Line]  # (alpha, beta) as (a, b), per protocol range
    gamma: float  # seconds per byte reduced
    gamma_quality: Quality
    quality: Quality  # of the ping-pong fit

    def alpha(self, m: float) -> float:
        return piece_for(self.pieces, m).a

    def beta(self, m: float) -> float:
        return piece_for(self.pieces, m).b

    def p2p(self, m: float) -> float:
        """One message of m bytes."""
        return piece_for(self.pieces, m)(m)

    def as_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Hockney:  # type: ignore[type-arg]
        return cls([Line(**p) for p in d["pieces"]], float(d["gamma"]),
                   Quality(**d["gamma_quality"]), Quality(**d["quality"]))


def fit_hockney(data: ProbeData, same_node: bool | None = None) -> Hockney:
    rows = data.pairs(same_node)
    m = [r.size for r in rows]
    t = [r.pingpong for r in rows]
    pieces = fit_pieces(m, t)
    q = quality([piece_for(pieces, x)(x) for x in m], t)
    # gamma: the slope over the sizes where the per-call cost no longer dominates
    red = [(s, x) for s, x in data.reduce_local if s >= 1024] or data.reduce_local
    g = fit_line([s for s, _ in red], [x for _, x in red])
    gq = quality([g(s) for s, _ in red], [x for _, x in red])
    return Hockney(pieces, g.b, gq, q)
