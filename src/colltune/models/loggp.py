"""LogGP: a message of m bytes costs L + 2o + (m-1)G; back-to-back messages leave every g
(small) or (m-1)G (large) apart. o from the send and receive overheads timed separately,
g and G from message trains, L what the ping-pong leaves over. One parameter set per
protocol range, the ranges found in the ping-pong times (as for Hockney).

The send overhead is also fitted on its own (`o_send`) and stored: a process sending back
to back pays o_send per message, one taking messages in pays the receive overhead
(2o - o_send); docs/models.md, "From parameters to collectives".

With a probe that has them, L and G come from the all-ranks-busy ping-pong and the exchange
line is kept (as for Hockney, hockney.py); o and g still come from rank 0's own pairs: what
one process pays per message to send or receive, which load does not split apart."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from colltune.models.hockney import exchange_pieces, pingpong_times
from colltune.models.linfit import (
    Line,
    Quality,
    fit_line,
    fit_pieces,
    piece_for,
    quality,
    theil_sen,
)
from colltune.models.probe import ProbeData


@dataclass(frozen=True)
class LogGPPiece:
    lo: int
    hi: int
    L: float  # noqa: N815 (the model's own names)
    o: float
    g: float
    G: float  # noqa: N815
    o_send: float | None = None  # None: fits stored before it was kept apart


@dataclass(frozen=True)
class LogGP:
    pieces: list[LogGPPiece]
    quality: Quality  # of L + 2o + (m-1)G against the ping-pong
    exchange: list[Line] = field(default_factory=list)  # empty: an exchange costs a message

    def piece(self, m: float) -> LogGPPiece:
        for p in self.pieces[:-1]:
            if m <= p.hi:
                return p
        return self.pieces[-1]

    def p2p(self, m: float) -> float:
        p = self.piece(m)
        return p.L + 2 * p.o + max(m - 1, 0) * p.G

    def exch(self, m: float) -> float:
        """Every rank sends m bytes and receives m bytes at once."""
        return piece_for(self.exchange, m)(m) if self.exchange else self.p2p(m)

    def as_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> LogGP:  # type: ignore[type-arg]
        return cls([LogGPPiece(**p) for p in d["pieces"]], Quality(**d["quality"]),
                   [Line(**p) for p in d.get("exchange", [])])


def fit_loggp(data: ProbeData, same_node: bool | None = None) -> LogGP:
    rows = data.pairs(same_node)
    pp_all, loaded = pingpong_times(data, same_node)
    ranges = [(ln.lo, ln.hi) for ln in fit_pieces([s for s, _ in pp_all],
                                                  [x for _, x in pp_all])]
    pieces = []
    for lo, hi in ranges:
        here = [r for r in rows if lo <= r.size <= hi]
        m = [r.size for r in here]
        over = fit_line(m, [(r.send_overhead + r.recv_overhead) / 2 for r in here])
        o_send = max(fit_line(m, [r.send_overhead for r in here]).a, 0.0)
        gaps = theil_sen(m, [r.gap for r in here])
        pp = fit_line(*zip(*[(s, x) for s, x in pp_all if lo <= s <= hi]))
        o = over.a
        # G: per byte of a train where the bytes dominate (with every rank busy: of the busy
        # ping-pong, the rate messages move at inside a collective); g: a train's floor
        G = pp.b if loaded or gaps.b <= 0 else gaps.b  # noqa: N806
        L = max(pp.a - 2 * o, 0.0)  # noqa: N806 (shared memory: close to 0)
        pieces.append(LogGPPiece(lo, hi, L, o, max(gaps.a, 0.0), G, o_send))
    ex = exchange_pieces(data, loaded)
    model = LogGP(pieces, Quality(0, 0, 0, 0), ex)
    q = quality([model.p2p(s) for s, _ in pp_all], [x for _, x in pp_all])
    return LogGP(pieces, q, ex)
