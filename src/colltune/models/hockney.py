"""Hockney's model: a message of m bytes costs alpha + beta*m, and reducing m bytes costs
gamma*m. Fitted on ping-pong (half round trips) and MPI_Reduce_local, one (alpha, beta)
piece per protocol when the data shows a switch.

When the probe has them, the fit takes the figures measured with every rank busy at once
(all pairs ping-ponging, all ranks reducing): inside a collective no rank is idle, and where
ranks share cores, memory bandwidth or a NIC that is what a message costs. A pairwise
exchange (every rank sending and receiving at once) gets its own line, `exch`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from colltune.models.linfit import Line, Quality, fit_line, fit_pieces, piece_for, quality
from colltune.models.probe import ProbeData


@dataclass(frozen=True)
class Hockney:
    pieces: list[Line]  # (alpha, beta) as (a, b), per protocol range
    gamma: float  # seconds per byte reduced
    gamma_quality: Quality
    quality: Quality  # of the ping-pong fit
    exchange: list[Line] = field(default_factory=list)  # empty: an exchange costs a message
    loaded: bool = False  # fitted on the all-ranks-busy ping-pong and reduction

    def exch(self, m: float) -> float:
        """Every rank sends m bytes and receives m bytes at once."""
        return piece_for(self.exchange, m)(m) if self.exchange else self.p2p(m)

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
                   Quality(**d["gamma_quality"]), Quality(**d["quality"]),
                   [Line(**p) for p in d.get("exchange", [])], bool(d.get("loaded", False)))


def pingpong_times(data: ProbeData, same_node: bool | None) -> tuple[list[tuple[int, float]],
                                                                      bool]:
    """(size, half round trip) to fit on, and whether they are the all-busy figures. Pairs
    inside a node and across nodes (`same_node`) are only told apart by rank 0's own pairs."""
    if same_node is None and data.pingpong_loaded:
        return sorted(data.pingpong_loaded), True
    return [(r.size, r.pingpong) for r in data.pairs(same_node)], False


def exchange_pieces(data: ProbeData, loaded: bool) -> list[Line]:
    """The exchange line, fitted where the busy figures are used (empty: none)."""
    if not loaded or len(data.exchange) < 2:
        return []
    return fit_pieces([s for s, _ in data.exchange], [x for _, x in data.exchange])


def fit_hockney(data: ProbeData, same_node: bool | None = None) -> Hockney:
    pp, loaded = pingpong_times(data, same_node)
    m = [s for s, _ in pp]
    t = [x for _, x in pp]
    pieces = fit_pieces(m, t)
    q = quality([piece_for(pieces, x)(x) for x in m], t)
    # gamma: the slope over the sizes where the per-call cost no longer dominates
    rl = data.reduce_local_loaded if loaded and data.reduce_local_loaded else data.reduce_local
    red = [(s, x) for s, x in rl if s >= 1024] or rl
    g = fit_line([s for s, _ in red], [x for _, x in red])
    gq = quality([g(s) for s, _ in red], [x for _, x in red])
    return Hockney(pieces, g.b, gq, q, exchange_pieces(data, loaded), loaded)
