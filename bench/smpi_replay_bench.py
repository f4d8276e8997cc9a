"""The tune at scale on the recorded exhaustive SMPI grids (tests/data/smpi): what its file
captures of the oracle's gain, its worst size, and the allocation it holds beside an
OSU-driven exhaustive sweep's (issue 84, item 5); and, on the grids recorded at several
communicator sizes (tests/data/smpi/commsizes), a tune at the powers of two judged at
every size, between them included, beside the same tune with --between measure and the
rule of the size below that files had before (item 4). Markdown on standard output.

    python bench/smpi_replay_bench.py
    python bench/smpi_replay_bench.py --unrecorded   # what to record before a replay

With --unrecorded, nothing is replayed: for each grid lacking sizes a tune at its
communicator size would measure, the command that records them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from colltune.core.account import LaunchCost

# what only tests and benchmarks use lives beside the tests (issue 63)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from replay_smpi import (  # noqa: E402
    DATA,
    commsizes,
    grids,
    judge,
    ladders,
    load,
    replay,
    tune_from,
    unrecorded,
)


def print_unrecorded() -> None:
    """The record_smpi_grids.py command for every grid that lacks sizes a tune asks."""
    for path in [*grids(), *commsizes()]:
        g = load(path)
        with tempfile.TemporaryDirectory() as t:
            sizes = unrecorded(g, Path(t))
        if sizes:
            out = "" if path.parent == DATA else f" --out {path.parent}"
            print(f"python bench/record_smpi_grids.py --np {g.np} --platform "
                  f"docs/platforms/{g.platform}.xml --colls {g.coll} --add-sizes "
                  f"{','.join(map(str, sizes))}{out}")


def main() -> None:
    ap = argparse.ArgumentParser(description="Replay the tune on the recorded SMPI grids.")
    ap.add_argument("--unrecorded", action="store_true",
                    help="print the commands that record what the grids lack, replay nothing")
    if ap.parse_args().unrecorded:
        print_unrecorded()
        return
    cost = LaunchCost()
    print("| platform | collective | ranks | sizes judged (of) | oracle's gain (GM) | "
          "file's gain (GM) | captured | worst size vs default | tune node-s | "
          "exhaustive node-s | tune / exhaustive |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in grids():
        g = load(path)
        with tempfile.TemporaryDirectory() as t:
            r = replay(g, Path(t))
        held, full = r.held(cost), r.exhaustive(cost)
        print(f"| {g.platform} | {g.coll} | {g.np} | {len(g.judged())} ({len(g.sizes)}) | "
              f"{r.gm(r.oracle):.3f} | {r.gm(r.speedup):.3f} | {100 * r.captured:.1f}% | "
              f"{r.worst:.3f} | {held:.1f} | {full:.1f} | {held / full:.3f} |", flush=True)
    print()
    print("| platform | collective | communicator size | measured: powers of two / "
          "--between measure | oracle's gain (GM) | powers of two: captured, worst | "
          "--between measure: captured, worst | the rule below (before): captured, worst |")
    print("|---|---|---|---|---|---|---|---|")
    for (platform, coll), recorded in sorted(ladders().items()):
        anchors = [g for g in recorded if g.np & (g.np - 1) == 0]
        spare = [g for g in recorded if g.np & (g.np - 1) != 0]
        with tempfile.TemporaryDirectory() as t:
            plain = tune_from(anchors, Path(t))
        with tempfile.TemporaryDirectory() as t:
            more = tune_from(anchors, Path(t), spare)
        for g in recorded:
            r, m, b = judge(g, plain), judge(g, more), judge(g, plain, below=True)
            said = "yes" if g.np in plain.measured else "no"
            said += " / " + ("yes" if g.np in more.measured else "no")
            print(f"| {platform} | {coll} | {g.np} | {said} | {r.gm(r.oracle):.3f} | "
                  f"{100 * r.captured:.1f}%, {r.worst:.3f} | "
                  f"{100 * m.captured:.1f}%, {m.worst:.3f} | "
                  f"{100 * b.captured:.1f}%, {b.worst:.3f} |", flush=True)
        # each measured size's own tune, as a tune at that size alone holds it
        held = {}
        for g in recorded:
            if g.np in more.measured:
                with tempfile.TemporaryDirectory() as t:
                    held[g.np] = replay(g, Path(t)).held(cost)
        print(f"\n{platform} {coll}: the tune at the powers of two holds "
              f"{sum(held[n] for n in plain.measured):.1f} node-s, with --between measure "
              f"{sum(held.values()):.1f} (added: "
              f"{', '.join(map(str, more.added)) or 'none'})")

if __name__ == "__main__":
    main()
