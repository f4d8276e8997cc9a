"""The network a cost formula is written over: three primitives (one message, back-to-back
injection, local reduction) bound to a fitted Hockney or LogGP model, and the shape of one
configuration (ranks, block, the parameters its formula reads)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from colltune.models.hockney import Hockney
from colltune.models.loggp import LogGP


class Net:
    """The primitives every formula uses; subclasses bind them to a fitted model."""

    def msg(self, m: float) -> float:
        raise NotImplementedError

    def inject(self, m: float) -> float:
        raise NotImplementedError

    def absorb(self, m: float) -> float:
        """How soon one process can take in its next message of m bytes when several arrive
        back to back (a root gathering or reducing): the receiving side of `inject`."""
        return self.inject(m)

    def red(self, m: float) -> float:
        raise NotImplementedError

    def seq(self, k: int, m: float) -> float:
        """k messages of m bytes leaving one process (or reaching one) back to back, until
        the last has arrived."""
        return 0.0 if k <= 0 else self.msg(m) + (k - 1) * self.inject(m)

    def seq_in(self, k: int, m: float) -> float:
        """k messages of m bytes reaching one process back to back, until it has taken in
        the last."""
        return 0.0 if k <= 0 else self.msg(m) + (k - 1) * self.absorb(m)

    def exch(self, m: float) -> float:
        """A pairwise exchange (send and receive at once, full duplex)."""
        return self.msg(m)


@dataclass
class HockneyNet(Net):
    model: Hockney

    def msg(self, m: float) -> float:
        return self.model.p2p(m)

    def inject(self, m: float) -> float:
        return self.model.p2p(m)  # one message at a time

    def exch(self, m: float) -> float:
        return self.model.exch(m)

    def red(self, m: float) -> float:
        return self.model.gamma * m


@dataclass
class LogGPNet(Net):
    model: LogGP
    gamma: float  # LogGP has no computation term: the same measured gamma as Hockney

    def msg(self, m: float) -> float:
        return self.model.p2p(m)

    def inject(self, m: float) -> float:
        p = self.model.piece(m)
        o_send = p.o if p.o_send is None else p.o_send
        return max(p.g + max(m - 1, 0) * p.G, o_send)

    def exch(self, m: float) -> float:
        return self.model.exch(m)

    def absorb(self, m: float) -> float:
        p = self.model.piece(m)
        # o is the mean of the two overheads, so the receive one is what o_send leaves
        o_recv = p.o if p.o_send is None else max(2 * p.o - p.o_send, 0.0)
        return max(p.g + max(m - 1, 0) * p.G, o_recv)

    def red(self, m: float) -> float:
        return self.gamma * m


@dataclass(frozen=True)
class Shape:
    p: int  # ranks
    m: float  # per-rank block, bytes
    segsize: int = 0
    fanout: int = 0
    max_requests: int = 0

    @property
    def lg(self) -> int:
        return math.ceil(math.log2(self.p)) if self.p > 1 else 0

    @property
    def pow2(self) -> bool:
        return self.p & (self.p - 1) == 0

    def segments(self, n: float | None = None) -> tuple[int, float]:
        """(number of segments, bytes per segment) of an n-byte message."""
        n = self.m if n is None else n
        if self.segsize <= 0 or self.segsize >= n:
            return 1, n
        ns = math.ceil(n / self.segsize)
        return ns, n / ns


Formula = Callable[[Net, Shape], float]
