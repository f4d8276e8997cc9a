"""Intel MPI's binary tuning table (rules/impi_table.py): every table this Intel MPI ships
decodes and encodes back to the same tree, the library loads colltune's encoding and dumps
the same tree back, a table from elsewhere is data (malformed ones are refused, never
crash the reader), and a splice changes what one job size and ppn select and nothing else."""

from __future__ import annotations

import copy
import random
import zlib
from pathlib import Path

import pytest

from colltune.backends.impi.install import IntelMPI
from colltune.backends.impi.splice import BIN_VAR, dump
from colltune.launchers import Launch
from colltune.rules import impi_table
from colltune.rules.impi_table import Node, clip, decode, encode, messages, splice
from colltune.rules.impi_tuning import ImpiFormatError
from colltune.slots import place


def shipped(impi: IntelMPI) -> list[Path]:
    return sorted((impi.prefix / "opt" / "mpi" / "etc").glob("tuning_*.dat"))


def test_the_tables_this_intel_mpi_ships_round_trip(impi: IntelMPI) -> None:
    """Decoded and encoded again, a shipped table holds the same tree (in colltune's own
    layout: a node before its children): the generic ones (what an AMD CPU like this one
    loads) and the largest (all 47 take 47 s; each decodes alike)."""
    tables = shipped(impi)
    assert len(tables) > 10, tables
    largest = max(tables, key=lambda t: t.stat().st_size)
    for t in [*(t for t in tables if "generic" in t.name), largest]:
        tree = decode(t.read_bytes())
        assert decode(encode(tree)) == tree, t.name


@pytest.mark.mpi
def test_intel_mpi_loads_colltunes_encoding_as_written(impi: IntelMPI, tmp_path: Path
                                                       ) -> None:
    """The library's own table, dumped by the library, is the table it ships; colltune's
    encoding of it, loaded with I_MPI_TUNING_BIN, is dumped back as the same tree."""
    placement = place(2, None, launch=Launch(launcher="mpiexec"))
    own = decode(dump(impi, placement, "bcast", {}))
    assert any(decode(t.read_bytes()) == own for t in shipped(impi))
    mine = tmp_path / "mine.dat"
    mine.write_bytes(encode(own))
    assert decode(dump(impi, placement, "bcast", {BIN_VAR: str(mine)})) == own


def test_a_malformed_table_is_refused_not_crashed_on(impi: IntelMPI) -> None:
    """Truncated, bit-flipped, looping and oversized tables: each either decodes to some
    tree or is refused with ImpiFormatError; none raises anything else or hangs."""
    raw = zlib.decompress(shipped(impi)[0].read_bytes())
    rng = random.Random(7)
    cases = [raw[:n] for n in (0, 10, 39, 40, 41, 200, len(raw) // 2)]
    for _ in range(100):
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        cases.append(bytes(b))
    loop = bytearray(raw)
    loop[40:48] = (0).to_bytes(8, "little")  # the root's first child is the root
    cases.append(bytes(loop))
    refused = 0
    for c in cases:
        try:
            decode(zlib.compress(c))
        except ImpiFormatError:
            refused += 1
    assert refused >= 8  # the truncated ones and the loop at least
    with pytest.raises(ImpiFormatError, match="zlib"):
        decode(b"not zlib at all")
    with pytest.raises(ImpiFormatError, match="MiB decompressed"):
        decode(zlib.compress(bytes(80 << 20)))


def _table() -> Node:
    """A collective's node as Intel MPI's tables hold them: ppn 1, 4 and the catch-all;
    under ppn 4 comm sizes 4 and 16; each with message sizes 100, 1000 and the catch-all."""
    def leaf(tag: int) -> Node:
        return Node(8, 0, 0, records=[(3, 0, 0, 0, 0), (tag, 0, 0, 0, 0)])

    def msgs(base: int) -> Node:
        return Node(9, 7, -1, [Node(7, 8, k, [leaf(base + i)])
                               for i, k in enumerate((100, 1000, -1))])

    def comm(*keys: int) -> list[Node]:
        return [Node(6, 9, k, [msgs(10 * k)]) for k in keys]

    return Node(4, 5, 7, [Node(5, 6, 1, comm(2, 8)), Node(5, 6, 4, comm(4, 16)),
                          Node(5, 6, -1, comm(64))])


def _selected(coll: Node, ppn: int, np: int, size: int) -> Node:
    entries = messages(coll, ppn, np)
    return next((leaf for k, leaf in entries if k == -1 or size <= k), entries[-1][1])


@pytest.mark.parametrize("ppn,np", [(4, 4), (3, 3), (2, 4), (4, 12), (6, 6), (100, 100)])
def test_a_splice_changes_one_job_size_and_ppn_only(ppn: int, np: int) -> None:
    """Spliced at (ppn, np): that job runs the new entries at every size, every other ppn and
    comm size up to 200 selects an entry equal to the one it did, whatever keys the table
    had there (an exact key, one above, the catch-all, or the last key serving larger)."""
    before = _table()
    after = copy.deepcopy(before)
    new = Node(8, 0, 0, records=[(1, 0, 0, 0, 0), (-1, 0, 0, 0, 0), (11, 0, 0, 0, 0)])
    splice(after, ppn, np, [(500, new), *clip(messages(before, ppn, np), 501, None)])
    for p in range(1, 201):
        for n in range(p, 201, max(1, p)):
            for size in (1, 100, 101, 500, 501, 1000, 5000):
                got, was = _selected(after, p, n, size), _selected(before, p, n, size)
                assert impi_table.selected(after, p, n, size) == got, (p, n, size)
                if (p, n) == (ppn, np):
                    assert got == (new if size <= 500 else was), (p, n, size)
                else:
                    assert got == was, (p, n, size)


def test_clip_keeps_the_library_entries_of_a_range() -> None:
    """The entries serving sizes low..high, each capped at high; the last range ends with the
    catch-all even where the table's last key was a size."""
    a, b, c = (Node(8, 0, 0, records=[(i, 0, 0, 0, 0)]) for i in range(3))
    entries = [(100, a), (1000, b), (5000, c)]
    assert clip(entries, 0, 50) == [(50, a)]
    assert clip(entries, 50, 500) == [(100, a), (500, b)]
    assert clip(entries, 101, 1000) == [(1000, b)]
    assert clip(entries, 1001, None) == [(5000, c), (-1, c)]
    assert clip([(100, a), (-1, b)], 200, None) == [(-1, b)]
    assert impi_table.at(Node(0, 1, 0, [Node(1, 2, 5)]), [5]).key == 5


def test_a_copy_along_a_path_leaves_the_library_table_as_it_was(impi: IntelMPI) -> None:
    """The spliced table is a copy that shares the library's nodes off the collective's path:
    splicing into it changes the copy at that collective only, never the library's own
    table (every spliced table of a tune starts from it)."""
    own = decode(shipped(impi)[0].read_bytes())
    pristine = encode(own)
    coll = own.kids[0]
    path = [coll.key]
    mine = impi_table.copied_along(own, path)
    ppn, np = 4, 4
    new = Node(8, 0, 0, records=[(1, 0, 0, 0, 0), (-1, 0, 0, 0, 0), (11, 0, 0, 0, 0)])
    splice(impi_table.at(mine, path), ppn, np, [(-1, new)])
    assert encode(own) == pristine  # the library's table untouched
    assert impi_table.selected(impi_table.at(mine, path), ppn, np, 8) == new
    assert [k is o for k, o in zip(mine.kids[1:], own.kids[1:], strict=True)] == [True] * (
        len(own.kids) - 1)  # the other collectives shared, not copied
    with pytest.raises(ImpiFormatError):
        impi_table.copied_along(own, [coll.key, 10**9])
