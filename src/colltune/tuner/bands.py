"""Pack (configuration, size) points into as few launches as a library that selects its
algorithm by message size allows: each point is measured at a size of its own near its
size, so one launch (one file naming a configuration per size) runs many configurations.

Why: a launch per configuration compares configurations across launches, whose speeds
differ by up to 2.5x here; in one launch they share its state (Intel MPI, bcast at 2
ranks: the same preset's median read 0.08-1.8x between two launches of its own, 0.95-1.05x
between two shared launches). The cost is the size: a point is measured up to
max(size / WIDTH, NEAR steps) bytes away, below its size first (a protocol's chunk
count changes just above a power of two, not below it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

K = TypeVar("K")

WIDTH = 8
NEAR = 8


def window(size: int, step: int) -> list[int]:
    """The sizes `size` may be measured at: itself, then below it nearest first, then
    above it: whole multiples of `step` (the datatype's bytes), at least one."""
    return list(_nearest(size, step))


def _nearest(size: int, step: int) -> Iterator[int]:
    """`window` one size at a time: a point takes the first free one, and 1 MiB's window
    holds 262144 sizes in bytes (building it per point took 0.9 s a bcast grid)."""
    ks = range(1, max(size // WIDTH, NEAR * step) // step + 1)
    yield size
    yield from (size - k * step for k in ks if size - k * step >= step)
    yield from (size + k * step for k in ks)


def pack(points: list[tuple[K, int]], step: int) -> list[dict[int, tuple[K, int]]]:
    """Launches, each a map from the size measured to the (key, size) it stands for;
    every point in exactly one, every size of a launch distinct. Small sizes, whose
    windows are narrow and shared, take more launches than large ones."""
    left = sorted(points, key=lambda p: (p[1], repr(p[0])))
    launches: list[dict[int, tuple[K, int]]] = []
    while left:
        taken: dict[int, tuple[K, int]] = {}
        rest: list[tuple[K, int]] = []
        for key, size in left:
            at = next((m for m in _nearest(size, step) if m not in taken), None)
            if at is None:
                rest.append((key, size))
            else:
                taken[at] = (key, size)
        launches.append(taken)
        left = rest
    return launches
