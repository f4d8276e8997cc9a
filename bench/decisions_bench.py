"""What the timing rule changes in what tune writes, judged by OSU and an application loop.

Per collective: `tune C --np N --timing isolated` (the decisions before this rule: one call
after a barrier) and `tune C --np N --timing both` (a win must also hold back to back) write
a rules file each; then each file is run against the library default in fresh alternating
launch pairs by two programs that share nothing with the kernel: bench/apploop.c (calls
back to back, slowest rank) and OSU (when --osu names a build). Per file: at how many sizes
it differs from the default, and there how many the outside programs find faster, the
same, or slower (paired t-test over launch pairs, as tune's confirmation).

    python bench/decisions_bench.py --mpi /usr --np 4 --colls reduce,bcast,allreduce,gather \\
        --rounds 6 [--osu /tmp/osu41]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agreement_bench import build_apploop
from clirun import TUNE

from colltune.backends import registry
from colltune.backends.openmpi.applied import rule_at
from colltune.backends.openmpi.install import (
    FIXED_DECISION_ENV,
    OpenMPI,
    dynamic_env,
    find_openmpi,
    launch_command,
    launch_env,
)
from colltune.collectives import get_collective
from colltune.core.config import DEFAULT
from colltune.core.space import sizes_for
from colltune.rules import ompi_classic as rules
from colltune.slots import Placement, place
from colltune.tuner.confirm import ABSamples
from colltune.verification.second import find_osu, osu_ab_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from judges import judge  # noqa: E402  (the first statistics: tests/judges.py)


def loop_ab_runs(mpi: OpenMPI, placement: Placement, coll: str, path: Path,
                 sizes: list[int], rounds: int, iters: int) -> ABSamples:
    exe = build_apploop(mpi)
    out = ABSamples(rounds)
    arms = {"default": FIXED_DECISION_ENV, "tuned": dynamic_env(rules=path)}
    for rnd in range(rounds):
        for arm in (("default", "tuned") if rnd % 2 == 0 else ("tuned", "default")):
            res = subprocess.run([*launch_command(mpi, placement), str(exe), coll, str(iters),
                                  *map(str, sizes)], capture_output=True, text=True,
                                 env=launch_env(arms[arm]), timeout=600, check=True)
            for line in res.stdout.splitlines():
                d = json.loads(line)
                out.samples[arm].setdefault(int(d["size"]), []).append([d["completion"]])
    return out


def tune(mpi: OpenMPI, coll: str, np: int, timing: str, out: Path, db: Path) -> float:
    t0 = time.monotonic()
    subprocess.run([*TUNE, coll, "--np", str(np), "--mpi",
                    str(mpi.prefix), "--timing", timing, "--out", str(out), "--db", str(db),
                    "--quiet"], check=True, env=launch_env())
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mpi", default="/usr")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--colls", default="reduce,bcast,allreduce,gather")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--osu", type=Path, default=None)
    args = ap.parse_args()
    mpi = find_openmpi(args.mpi)
    placement = place(args.np, None)
    print(f"{mpi.name} {mpi.version}, {args.np} ranks, {args.rounds} launch pairs per judge\n")
    print("| collective | timing | tune s | sizes not default | loop: faster/same/slower "
          "| OSU: faster/same/slower |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for coll_name in args.colls.split(","):
            coll = get_collective(coll_name)
            sizes = sizes_for(coll, args.np)
            for timing in ("isolated", "both"):
                path = Path(tmp) / f"{coll_name}-{timing}.conf"
                secs = tune(mpi, coll_name, args.np, timing, path, Path(tmp) / f"{timing}.db")
                rf = rules.read(path)
                changed = [s for s in sizes
                           if (c := rule_at(rf, coll, args.np, s)) and c != DEFAULT]
                cells = []
                for name in ("loop", "osu"):
                    if not changed:
                        cells.append("-")
                        continue
                    if name == "loop":
                        ab = loop_ab_runs(mpi, placement, coll_name, path, changed,
                                          args.rounds, args.iters)
                    else:
                        exe = find_osu(coll_name, args.osu) if args.osu else None
                        if exe is None:
                            cells.append("no OSU")
                            continue
                        arms = registry.of(mpi).with_files().rules_arms(path)
                        ab = osu_ab_runs(mpi, exe, placement, arms, changed, args.rounds,
                                         iterations=args.iters)
                    vs = judge(ab)
                    counts = [sum(v.verdict == k for v in vs.values())
                              for k in ("faster", "same", "slower")]
                    detail = " ".join(f"{s}:{1 / vs[s].launch_speedup:.2f}" for s in sorted(vs))
                    cells.append("/".join(map(str, counts)) + f" ({detail})")
                print(f"| {coll_name} | {timing} | {secs:.0f} | {len(changed)} of {len(sizes)}"
                      f" | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
