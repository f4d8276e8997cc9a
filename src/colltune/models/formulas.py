"""Predicted time of every Open MPI coll/tuned algorithm, written once over a network model;
the tables by the name a catalog gives (`Catalog.cost_model`).

Each formula follows the algorithm's communication pattern and is expressed with three
primitives a network model provides: `msg(m)`, one message of m bytes from start to
arrival; `inject(m)`, how soon one process can start its next message of m bytes after the
previous one (back-to-back sends, or a root receiving from many); `red(m)`, reducing m
bytes locally. Hockney charges a full alpha + beta*m for each of them (a process does one
message at a time); LogGP lets back-to-back messages overlap (g and G). The patterns and
their reasoning are in docs/models.md.

Sizes: `m` is the per-rank block colltune measures (what one rank contributes or receives
from one peer); `n` is the whole vector of a bcast/reduce/allreduce, here also m."""

from __future__ import annotations

import math

from colltune.core.catalog import FAN, MAXREQ, SEG, Catalog
from colltune.core.config import Config
from colltune.models.network import Formula, Net, Shape

KNOMIAL_RADIX = 4  # Open MPI's default coll_tuned_bcast_knomial_radix
# The kernel reduces MPI_DOUBLE and broadcasts MPI_BYTE; several algorithms switch to
# another one below an element count, so the formulas need the count, not only bytes.
REDUCE_TYPE_SIZE = 8


def _count(s: Shape) -> int:
    """Elements of the reduced vector (the kernel's MPI_DOUBLE)."""
    return int(s.m) // REDUCE_TYPE_SIZE


def _pipeline(depth: int, ns: int, hop: float, stage: float) -> float:
    """A segmented tree: the first segment crosses `depth` hops, the others follow one
    `stage` (the busiest node's per-segment work) apart."""
    return depth * hop + (ns - 1) * max(stage, hop)


def binary_depth(p: int) -> int:
    """Levels below the root of a complete binary tree of p nodes."""
    return math.ceil(math.log2(p + 1)) - 1 if p > 1 else 0


def _halving(net: Net, s: Shape, n: float, reduce: bool) -> float:
    """Recursive halving (or, without `reduce`, doubling): lg p exchanges of n/2, n/4, ..."""
    k = int(math.log2(s.p)) if s.pow2 else int(math.floor(math.log2(s.p)))
    return sum(net.exch(n / 2 ** i) + (net.red(n / 2 ** i) if reduce else 0.0)
               for i in range(1, k + 1))


def _fold_in(net: Net, s: Shape, n: float) -> float:
    """Non-power-of-two sizes: the ranks beyond the largest power of two first hand their
    data to a partner, which reduces it in."""
    return 0.0 if s.pow2 else net.msg(n) + net.red(n)


def _fold_out(net: Net, s: Shape, n: float) -> float:
    """... and get their result back at the end."""
    return 0.0 if s.pow2 else net.msg(n)


# --- bcast -------------------------------------------------------------------------------

def bcast_linear(net: Net, s: Shape) -> float:
    return net.seq(s.p - 1, s.m)


def bcast_chain(net: Net, s: Shape) -> float:
    f = max(1, min(s.fanout or 4, s.p - 1))
    ns, ms = s.segments()
    length = math.ceil((s.p - 1) / f)
    return _pipeline(length, ns, net.msg(ms), net.seq(f, ms))


def bcast_pipeline(net: Net, s: Shape) -> float:
    return bcast_chain(net, Shape(s.p, s.m, s.segsize, 1))


def bcast_binary(net: Net, s: Shape) -> float:
    ns, ms = s.segments()
    return _pipeline(binary_depth(s.p), ns, net.msg(ms), net.seq(2, ms))


def bcast_split_binary(net: Net, s: Shape) -> float:
    """Each half goes down one subtree of the binary tree, then partners swap halves."""
    if s.p < 3:
        return bcast_binary(net, s)
    half = s.m / 2
    ns, ms = Shape(s.p, half, s.segsize).segments()
    return _pipeline(binary_depth(s.p), ns, net.msg(ms), net.seq(2, ms)) + net.exch(half)


def bcast_binomial(net: Net, s: Shape) -> float:
    ns, ms = s.segments()
    return _pipeline(s.lg, ns, net.msg(ms), net.seq(s.lg, ms))


def bcast_knomial(net: Net, s: Shape) -> float:
    k = KNOMIAL_RADIX
    levels = math.ceil(math.log(s.p, k) - 1e-9) if s.p > 1 else 0
    children = min(k - 1, s.p - 1)
    ns, ms = s.segments()
    return _pipeline(levels, ns, net.seq(children, ms), net.seq(children, ms))


def _scatter_binomial(net: Net, s: Shape, n: float) -> float:
    """Binomial scatter of n bytes: the root's halves travel down lg p levels."""
    return sum(net.msg(n / 2 ** i) for i in range(1, s.lg + 1))


def bcast_scatter_allgather(net: Net, s: Shape) -> float:
    if s.m < s.p:
        return bcast_linear(net, s)  # Open MPI's fallback below one byte per rank
    return _scatter_binomial(net, s, s.m) + sum(net.exch(s.m * 2 ** i / s.p)
                                                 for i in range(s.lg))


def bcast_scatter_allgather_ring(net: Net, s: Shape) -> float:
    if s.m < s.p:
        return bcast_linear(net, s)
    return _scatter_binomial(net, s, s.m) + (s.p - 1) * net.exch(s.m / s.p)


# --- reduce ------------------------------------------------------------------------------

def reduce_linear(net: Net, s: Shape) -> float:
    # the root receives from each rank in turn and reduces as it goes
    return net.seq_in(s.p - 1, s.m) + (s.p - 1) * net.red(s.m)


def reduce_chain(net: Net, s: Shape) -> float:
    f = max(1, min(s.fanout or 4, s.p - 1))
    ns, ms = s.segments()
    length = math.ceil((s.p - 1) / f)
    return _pipeline(length, ns, net.msg(ms) + net.red(ms),
                     net.seq_in(f, ms) + f * net.red(ms))


def reduce_pipeline(net: Net, s: Shape) -> float:
    return reduce_chain(net, Shape(s.p, s.m, s.segsize, 1))


def reduce_binary(net: Net, s: Shape) -> float:
    ns, ms = s.segments()
    return _pipeline(binary_depth(s.p), ns, net.msg(ms) + net.red(ms),
                     net.seq_in(2, ms) + 2 * net.red(ms))


def reduce_binomial(net: Net, s: Shape) -> float:
    ns, ms = s.segments()
    return _pipeline(s.lg, ns, net.msg(ms) + net.red(ms),
                     net.seq_in(s.lg, ms) + s.lg * net.red(ms))


def reduce_in_order_binary(net: Net, s: Shape) -> float:
    # the in-order tree is rooted at rank p-1: the result then travels to root 0
    return reduce_binary(net, s) + (net.msg(s.m) if s.p > 1 else 0.0)


def reduce_rabenseifner(net: Net, s: Shape) -> float:
    """Reduce-scatter by recursive halving, then a binomial gather of the pieces."""
    if _count(s) < 2 ** int(math.floor(math.log2(s.p))):
        return reduce_linear(net, s)  # Open MPI's fallback: fewer elements than ranks
    return _fold_in(net, s, s.m) + _halving(net, s, s.m, True) + _scatter_binomial(net, s, s.m)


# --- allreduce ---------------------------------------------------------------------------

def allreduce_linear(net: Net, s: Shape) -> float:
    return reduce_linear(net, s) + bcast_linear(net, s)


def allreduce_nonoverlapping(net: Net, s: Shape) -> float:
    # reduce then bcast through the module's own (fixed-decision) functions: binomial here
    return reduce_binomial(net, Shape(s.p, s.m)) + bcast_binomial(net, Shape(s.p, s.m))


def allreduce_recursive_doubling(net: Net, s: Shape) -> float:
    k = int(math.floor(math.log2(s.p))) if s.p > 1 else 0
    return (_fold_in(net, s, s.m) + k * (net.exch(s.m) + net.red(s.m))
            + _fold_out(net, s, s.m))


def allreduce_ring(net: Net, s: Shape) -> float:
    if _count(s) < s.p:
        return allreduce_recursive_doubling(net, s)  # Open MPI's fallback
    block = s.m / s.p
    return 2 * (s.p - 1) * net.exch(block) + (s.p - 1) * net.red(block)


def allreduce_segmented_ring(net: Net, s: Shape) -> float:
    """The ring's reduce-scatter done in phases of one segment per block (each phase p-1
    steps of receive, reduce, send), then the ring allgather of whole blocks."""
    count = _count(s)
    seg = s.segsize // REDUCE_TYPE_SIZE if REDUCE_TYPE_SIZE <= s.segsize < s.m else count
    if count < s.p * max(seg, 1):
        return allreduce_ring(net, s)  # Open MPI's fallback: less than a segment per rank
    phases = count // (s.p * seg)
    rest = count % (s.p * seg)
    if rest >= s.p and rest > s.p * seg // 2:
        phases += 1
    piece = s.m / (s.p * phases)
    return (phases * (s.p - 1) * (net.msg(piece) + net.red(piece))
            + (s.p - 1) * net.exch(s.m / s.p))


def allreduce_rabenseifner(net: Net, s: Shape) -> float:
    """Reduce-scatter by recursive halving, allgather by recursive doubling."""
    return (_fold_in(net, s, s.m) + _halving(net, s, s.m, True) + _halving(net, s, s.m, False)
            + _fold_out(net, s, s.m))


# --- allgather (m: each rank's block) ----------------------------------------------------

def allgather_linear(net: Net, s: Shape) -> float:
    # gather to rank 0, then a bcast of the whole p*m
    return net.seq_in(s.p - 1, s.m) + bcast_binomial(net, Shape(s.p, s.p * s.m))


def allgather_bruck(net: Net, s: Shape) -> float:
    return sum(net.exch(min(2 ** i, s.p - 2 ** i) * s.m) for i in range(s.lg))


def allgather_recursive_doubling(net: Net, s: Shape) -> float:
    if not s.pow2:
        return allgather_bruck(net, s)  # Open MPI falls back for non-powers of two
    return sum(net.exch(2 ** i * s.m) for i in range(s.lg))


def allgather_ring(net: Net, s: Shape) -> float:
    return (s.p - 1) * net.exch(s.m)


def allgather_neighbor(net: Net, s: Shape) -> float:
    if s.p % 2:
        return allgather_ring(net, s)  # odd sizes fall back to the ring
    return net.exch(s.m) + (s.p // 2 - 1) * net.exch(2 * s.m)


def two_proc(net: Net, s: Shape) -> float:
    return net.exch(s.m)


def allgather_sparbit(net: Net, s: Shape) -> float:
    return allgather_bruck(net, s)  # the same lg p steps with doubling data


# --- alltoall (m: block sent to each peer) -----------------------------------------------

def alltoall_linear(net: Net, s: Shape) -> float:
    # every send and receive posted at once: the slower side of a rank sets the pace
    return max(net.seq(s.p - 1, s.m), net.seq_in(s.p - 1, s.m))


def alltoall_pairwise(net: Net, s: Shape) -> float:
    return (s.p - 1) * net.exch(s.m)


def alltoall_modified_bruck(net: Net, s: Shape) -> float:
    return s.lg * net.exch(s.m * s.p / 2)


def alltoall_linear_sync(net: Net, s: Shape) -> float:
    window = s.max_requests if s.max_requests > 0 else s.p - 1
    waves = math.ceil((s.p - 1) / max(1, window))
    return (max(net.seq(s.p - 1, s.m), net.seq_in(s.p - 1, s.m))
            + (waves - 1) * net.msg(1))


# --- gather, scatter (m: each rank's block) ----------------------------------------------

def gather_linear(net: Net, s: Shape) -> float:
    return net.seq_in(s.p - 1, s.m)


def gather_binomial(net: Net, s: Shape) -> float:
    # the root receives its children's subtrees: blocks of m, 2m, 4m, ...
    return sum(net.msg(min(2 ** i, s.p - 2 ** i) * s.m) for i in range(s.lg))


def gather_linear_sync(net: Net, s: Shape) -> float:
    # a zero-byte go-ahead from the root before each rank sends its block
    return (s.p - 1) * net.msg(1) + net.seq_in(s.p - 1, s.m)


def scatter_linear(net: Net, s: Shape) -> float:
    return net.seq(s.p - 1, s.m)


def scatter_binomial(net: Net, s: Shape) -> float:
    return gather_binomial(net, s)


# --- reduce_scatter (m: each rank's block of the result) ---------------------------------

def reduce_scatter_nonoverlapping(net: Net, s: Shape) -> float:
    return reduce_binomial(net, Shape(s.p, s.p * s.m)) + net.seq(s.p - 1, s.m)


def reduce_scatter_recursive_halving(net: Net, s: Shape) -> float:
    n = s.p * s.m
    return _fold_in(net, s, n) + _halving(net, s, n, True) + _fold_out(net, s, s.m)


def reduce_scatter_ring(net: Net, s: Shape) -> float:
    return (s.p - 1) * (net.exch(s.m) + net.red(s.m))


# --- barrier -----------------------------------------------------------------------------

def barrier_linear(net: Net, s: Shape) -> float:
    return net.seq_in(s.p - 1, 1) + net.seq(s.p - 1, 1)  # in to the root, then out


def barrier_double_ring(net: Net, s: Shape) -> float:
    return 2 * s.p * net.msg(1)


def barrier_recursive_doubling(net: Net, s: Shape) -> float:
    k = int(math.floor(math.log2(s.p))) if s.p > 1 else 0
    return k * net.exch(1) + (0.0 if s.pow2 else 2 * net.msg(1))


def barrier_bruck(net: Net, s: Shape) -> float:
    return s.lg * net.exch(1)


def barrier_tree(net: Net, s: Shape) -> float:
    return 2 * s.lg * net.msg(1)


FORMULAS: dict[str, dict[str, Formula]] = {
    "bcast": {"basic_linear": bcast_linear, "chain": bcast_chain, "pipeline": bcast_pipeline,
              "split_binary_tree": bcast_split_binary, "binary_tree": bcast_binary,
              "binomial": bcast_binomial, "knomial": bcast_knomial,
              "scatter_allgather": bcast_scatter_allgather,
              "scatter_allgather_ring": bcast_scatter_allgather_ring},
    "reduce": {"linear": reduce_linear, "chain": reduce_chain, "pipeline": reduce_pipeline,
               "binary": reduce_binary, "binomial": reduce_binomial,
               "in-order_binary": reduce_in_order_binary, "rabenseifner": reduce_rabenseifner},
    "allreduce": {"basic_linear": allreduce_linear,
                  "nonoverlapping": allreduce_nonoverlapping,
                  "recursive_doubling": allreduce_recursive_doubling, "ring": allreduce_ring,
                  "segmented_ring": allreduce_segmented_ring,
                  "rabenseifner": allreduce_rabenseifner},
    "allgather": {"linear": allgather_linear, "bruck": allgather_bruck,
                  "recursive_doubling": allgather_recursive_doubling, "ring": allgather_ring,
                  "neighbor": allgather_neighbor, "two_proc": two_proc,
                  "sparbit": allgather_sparbit},
    "alltoall": {"linear": alltoall_linear, "pairwise": alltoall_pairwise,
                 "modified_bruck": alltoall_modified_bruck, "linear_sync": alltoall_linear_sync,
                 "two_proc": two_proc},
    "gather": {"basic_linear": gather_linear, "binomial": gather_binomial,
               "linear_sync": gather_linear_sync},
    "scatter": {"basic_linear": scatter_linear, "binomial": scatter_binomial,
                "linear_nb": scatter_linear},
    "reduce_scatter": {"non-overlapping": reduce_scatter_nonoverlapping,
                       "recursive_halving": reduce_scatter_recursive_halving,
                       "ring": reduce_scatter_ring,
                       "butterfly": reduce_scatter_recursive_halving},
    "barrier": {"linear": barrier_linear, "double_ring": barrier_double_ring,
                "recursive_doubling": barrier_recursive_doubling, "bruck": barrier_bruck,
                "two_proc": lambda net, s: net.exch(1), "tree": barrier_tree},
}


# a catalog's `cost_model` -> formulas by collective and algorithm name, and the parameter
# names its shapes read (segment size, fanout, request window). A family whose algorithms
# have formulas adds its table here and names it in its catalog.
TABLES: dict[str, tuple[dict[str, dict[str, Formula]], tuple[str, str, str]]] = {
    "coll_tuned": (FORMULAS, (SEG, FAN, MAXREQ))}


def formula(collective: str, algorithm: str) -> Formula | None:
    """coll/tuned's formula for an algorithm (None: none)."""
    return FORMULAS.get(collective, {}).get(algorithm)


def has_formulas(catalog: Catalog) -> bool:
    """Whether a table here predicts the catalog's algorithms (--predict, --strategy model,
    tune model predict need one)."""
    return catalog.cost_model in TABLES


def cost(catalog: Catalog, coll: str, cfg: Config, np: int, size: float
         ) -> tuple[Formula, Shape] | None:
    """The formula that predicts one configuration and its shape, from the table the
    catalog names; None: the library's own choice, or no formula for the algorithm."""
    table = TABLES.get(catalog.cost_model)
    if table is None or cfg.algorithm == 0:
        return None
    fn = table[0].get(coll, {}).get(catalog.algorithm_name(coll, cfg.algorithm))
    seg, fan, req = table[1]
    return None if fn is None else (fn, Shape(np, size, cfg.get(seg), cfg.get(fan),
                                              cfg.get(req)))
