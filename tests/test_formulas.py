"""Cost formulas on small cases computed by hand (p = 2, 4, 8), with a toy network where a
message of m bytes costs 1 + m, back-to-back messages do not overlap (Hockney) and reducing
m bytes costs m/2; and one LogGP case where they do overlap."""

from __future__ import annotations

import pytest

from colltune.backends.openmpi.install import BUILTIN_CATALOG
from colltune.collectives import COLLECTIVES
from colltune.models import formulas as f
from colltune.models.formulas import FORMULAS
from colltune.models.network import Net, Shape


class Toy(Net):
    def msg(self, m: float) -> float:
        return 1 + m

    def inject(self, m: float) -> float:
        return 1 + m

    def red(self, m: float) -> float:
        return m / 2


class ToyLogGP(Net):
    """L = 1, o = 1, g = 2, G = 0.1: msg(m) = 3 + 0.1 (m-1), next send after 2 + 0.1 (m-1)."""

    def msg(self, m: float) -> float:
        return 1 + 2 * 1 + 0.1 * (m - 1)

    def inject(self, m: float) -> float:
        return max(2 + 0.1 * (m - 1), 1)

    def red(self, m: float) -> float:
        return 0.0


T = Toy()

CASES = [
    # (formula, p, m, segsize, fanout, by hand)
    (f.bcast_linear, 4, 10, 0, 0, 3 * 11),  # root sends 3 whole messages, one at a time
    (f.bcast_binomial, 2, 10, 0, 0, 11),
    (f.bcast_binomial, 4, 10, 0, 0, 2 * 11),
    (f.bcast_binomial, 8, 10, 0, 0, 3 * 11),  # lg p rounds
    (f.bcast_pipeline, 4, 100, 25, 0, (3 + 3) * 26),  # (p-1 + ns-1)(alpha + ms beta)
    (f.bcast_chain, 8, 100, 50, 2, 4 * 51 + 1 * (2 * 51)),  # chains of 4; root feeds 2
    (f.bcast_binary, 4, 10, 0, 0, 2 * 11),  # depth 2 (ranks 1,2 below 0; 3 below 1)
    (f.bcast_scatter_allgather, 4, 8, 0, 0, (5 + 3) + (3 + 5)),  # halves down, doubling up
    (f.bcast_scatter_allgather_ring, 4, 8, 0, 0, (5 + 3) + 3 * 3),
    (f.reduce_linear, 4, 10, 0, 0, 3 * 11 + 3 * 5),
    (f.reduce_binomial, 8, 10, 0, 0, 3 * (11 + 5)),  # lg p (alpha + n beta + n gamma)
    (f.reduce_binomial, 2, 10, 0, 0, 11 + 5),
    (f.reduce_in_order_binary, 4, 10, 0, 0, 2 * 16 + 11),  # then from rank p-1 to 0
    # m = 64 B is 8 doubles: enough elements for every rank (the kernel reduces MPI_DOUBLE)
    (f.reduce_rabenseifner, 4, 64, 0, 0, (33 + 16) + (17 + 8) + (33 + 17)),
    (f.reduce_rabenseifner, 4, 8, 0, 0, 3 * 9 + 3 * 4),  # 1 element < 4 ranks: linear
    (f.allreduce_ring, 4, 64, 0, 0, 2 * 3 * 17 + 3 * 8),  # 2(p-1) steps of n/p, (p-1) reductions
    (f.allreduce_ring, 4, 8, 0, 0, 2 * (9 + 4)),  # 1 element < 4 ranks: recursive doubling
    # 128 doubles, 8-double segments: 4 phases of 3 steps on 64 B, then 3 steps of 256 B
    (f.allreduce_segmented_ring, 4, 1024, 64, 0, 4 * 3 * (65 + 32) + 3 * 257),
    (f.allreduce_segmented_ring, 4, 128, 64, 0, 2 * 3 * 33 + 3 * 16),  # < p segments: ring
    (f.bcast_scatter_allgather, 4, 2, 0, 0, 3 * 3),  # 2 bytes < 4 ranks: linear
    (f.allreduce_recursive_doubling, 8, 10, 0, 0, 3 * (11 + 5)),
    (f.allreduce_recursive_doubling, 2, 10, 0, 0, 16),
    (f.allreduce_rabenseifner, 4, 8, 0, 0, (5 + 2) + (3 + 1) + 5 + 3),  # textbook: 19
    (f.allreduce_linear, 4, 10, 0, 0, (33 + 15) + 33),
    (f.allgather_ring, 8, 10, 0, 0, 7 * 11),
    (f.allgather_recursive_doubling, 8, 10, 0, 0, 11 + 21 + 41),
    (f.allgather_bruck, 4, 10, 0, 0, 11 + 21),
    (f.allgather_neighbor, 4, 10, 0, 0, 11 + 21),  # one exchange of m, p/2-1 of 2m
    (f.alltoall_pairwise, 4, 10, 0, 0, 3 * 11),
    (f.alltoall_modified_bruck, 8, 10, 0, 0, 3 * 41),  # lg p steps of n p/2
    (f.gather_binomial, 4, 10, 0, 0, 11 + 21),
    (f.gather_binomial, 8, 10, 0, 0, 11 + 21 + 41),
    (f.gather_linear, 2, 10, 0, 0, 11),
    (f.reduce_scatter_ring, 4, 10, 0, 0, 3 * (11 + 5)),
    (f.reduce_scatter_recursive_halving, 4, 10, 0, 0, (21 + 10) + (11 + 5)),
    (f.barrier_bruck, 8, 0, 0, 0, 3 * 2),
    (f.barrier_double_ring, 4, 0, 0, 0, 8 * 2),
    (f.barrier_recursive_doubling, 4, 0, 0, 0, 2 * 2),
]


@pytest.mark.parametrize("fn,p,m,seg,fan,expected", CASES,
                         ids=[f"{c[0].__name__}-p{c[1]}-m{c[2]}" for c in CASES])
def test_formula_by_hand(fn, p, m, seg, fan, expected) -> None:  # type: ignore[no-untyped-def]
    assert fn(T, Shape(p, m, seg, fan)) == pytest.approx(expected)


def test_loggp_overlaps_back_to_back_messages() -> None:
    # bcast linear, p = 4, m = 11: first arrives at 3 + 1 = 4, then one every 2 + 1 = 3
    assert f.bcast_linear(ToyLogGP(), Shape(4, 11)) == pytest.approx(4 + 2 * 3)
    assert f.bcast_linear(T, Shape(4, 11)) == pytest.approx(3 * 12)  # Hockney: no overlap


class FanInSlow(Toy):
    """Sending back to back costs 1 per message, taking them in costs 5."""

    def inject(self, m: float) -> float:
        return 1.0

    def absorb(self, m: float) -> float:
        return 5.0


def test_fan_in_pays_the_receive_side_and_fan_out_the_send_side() -> None:
    net, s = FanInSlow(), Shape(4, 10)
    assert f.bcast_linear(net, s) == pytest.approx(11 + 2 * 1)
    assert f.reduce_linear(net, s) == pytest.approx(11 + 2 * 5 + 3 * 5)
    assert f.gather_linear(net, s) == pytest.approx(11 + 2 * 5)
    assert f.reduce_binomial(net, s) == pytest.approx(2 * (11 + 5))  # one segment: depth only
    assert f.alltoall_linear(net, s) == pytest.approx(11 + 2 * 5)  # the slower side


def test_loggp_net_keeps_send_and_receive_overheads_apart() -> None:
    from colltune.models.linfit import Quality
    from colltune.models.loggp import LogGP, LogGPPiece
    from colltune.models.network import LogGPNet

    piece = LogGPPiece(0, 1 << 40, L=1.0, o=3.0, g=0.5, G=0.0, o_send=1.0)
    net = LogGPNet(LogGP([piece], Quality(0, 0, 0, 0)), gamma=0.0)
    assert net.msg(1) == pytest.approx(1 + 2 * 3)
    assert net.inject(1) == pytest.approx(1.0)  # o_send
    assert net.absorb(1) == pytest.approx(5.0)  # 2o - o_send
    old = LogGPNet(LogGP([LogGPPiece(0, 1 << 40, 1.0, 3.0, 0.5, 0.0)], Quality(0, 0, 0, 0)),
                   gamma=0.0)
    assert old.inject(1) == old.absorb(1) == pytest.approx(3.0)  # fits without o_send


def test_every_tuned_algorithm_has_a_formula() -> None:
    names = {"bcast", "reduce", "allreduce", "allgather", "alltoall", "gather", "scatter",
             "reduce_scatter", "barrier"}
    for coll in names:
        assert coll in COLLECTIVES
        for alg in BUILTIN_CATALOG[coll]:
            assert f.formula(coll, alg) is not None, (coll, alg)
    assert set(FORMULAS) == names


def test_a_measured_exchange_prices_the_exchanging_steps_only() -> None:
    """Hockney with an exchange line (every rank sending and receiving at once costs
    10 + m, a lone message 1 + m): ring allreduce's 2(p-1) steps are exchanges, a binomial
    bcast's are lone messages; fits without the line price an exchange as a message."""
    from colltune.models.hockney import Hockney
    from colltune.models.linfit import Line, Quality
    from colltune.models.network import HockneyNet

    q = Quality(0, 0, 0, 0)
    one = [Line(1.0, 1.0, 0, 1 << 40)]
    with_x = HockneyNet(Hockney(one, 0.5, q, q, [Line(10.0, 1.0, 0, 1 << 40)], True))
    without = HockneyNet(Hockney(one, 0.5, q, q))
    s = Shape(4, 64 * 8)  # 64 doubles: above p, so the ring runs (no fallback)
    block = s.m / 4
    assert f.allreduce_ring(with_x, s) == pytest.approx(6 * (10 + block) + 3 * block / 2)
    assert f.allreduce_ring(without, s) == pytest.approx(6 * (1 + block) + 3 * block / 2)
    assert f.bcast_binomial(with_x, s) == f.bcast_binomial(without, s) == pytest.approx(
        2 * (1 + s.m))
