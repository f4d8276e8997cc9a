"""Power and false-alarm rate of `tune verify` as a rollout gate (docs/benchmarks.md,
"The gate's power"): planted slowdowns (Open MPI rules files that force known-slow bcast
algorithms at two sizes) and A/A (both arms run the default), each verified `--runs` times
in a row as a site would run it, at its default sizes.

    python bench/gate_bench.py --mpi /usr --runs 10
    python bench/gate_bench.py --mpi /usr --runs 5 --old-src /tmp/old/src --label before

--old-src runs another checkout's colltune (PYTHONPATH) with the arguments its verify took
then (no --aa: an all-default file is its A/A, over the same sizes). Prints markdown: per
case, how often the gate failed (exit 1), was inconclusive (exit 5), passed; the verdicts
at the planted sizes, the ratio the runs measured there, launch pairs used, wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clirun import TUNE

HEAD = "1\n7\n1\n4\n"
# bcast at 4 ranks: default elsewhere, a slower algorithm at exactly 16 KiB and 128 KiB
PLANTS = {
    "2x": HEAD + "5\n0 0 0 0\n16384 9 0 0\n16385 0 0 0\n131072 8 0 0\n131073 0 0 0\n",
    "1.5x": HEAD + "5\n0 0 0 0\n16384 8 0 0\n16385 0 0 0\n131072 3 0 0\n131073 0 0 0\n",
    "1.2x": HEAD + "5\n0 0 0 0\n16384 4 0 0\n16385 0 0 0\n131072 1 0 0\n131073 0 0 0\n",
}
AA = HEAD + "1\n0 0 0 0\n"
AA_SIZES = "8,64,512,4K,16K,128K,1M"
# the file: nonoverlapping allreduce from 256 KiB to 768 KiB
SLOW = "1\n2\n1\n4\n3\n0 0 0 0\n262144 2 0 0\n786433 0 0 0\n"


def verify(args: list[str], old_src: str | None) -> tuple[int, dict | None, float]:
    env = dict(os.environ)
    if old_src:
        env["PYTHONPATH"] = old_src
    with tempfile.TemporaryDirectory() as t:
        out = Path(t) / "v.json"
        t0 = time.monotonic()
        r = subprocess.run([*TUNE, "verify", *args, "--json",
                            str(out), "--quiet"], capture_output=True, text=True, env=env,
                           check=False)
        wall = time.monotonic() - t0
        doc = json.loads(out.read_text()) if out.exists() else None
    if doc is None:
        print(f"verify failed to report (exit {r.returncode}): {r.stderr[-400:]}",
              file=sys.stderr)
    return r.returncode, doc, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default="/usr")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--cases", default="aa,1.2x,1.5x,2x,slow")
    ap.add_argument("--old-src", default=None)
    ap.add_argument("--label", default="after")
    a = ap.parse_args()
    print(f"| {a.label}: case | runs | gate failed (exit 1) | inconclusive (exit 5) | passed |"
          " verdicts at the changed sizes | measured ratio (min-max) | launch pairs per size"
          " (median) | wall s (median) |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as t:
        for case in a.cases.split(","):
            f = Path(t) / f"{case}.conf"
            f.write_text(AA if case == "aa" else SLOW if case == "slow" else PLANTS[case])
            args = [str(f), "--np", "4", "--mpi", a.mpi]
            if case == "aa":
                args += ["--sizes", AA_SIZES] + ([] if a.old_src else ["--aa"])
            if case == "slow":
                args += ["--collective", "allreduce"]
            codes: list[int] = []
            verdicts: dict[str, int] = {}
            by_size: dict[int, dict[str, int]] = {}
            ratios: list[float] = []
            pairs: list[int] = []
            walls: list[float] = []
            for _ in range(a.runs):
                code, doc, wall = verify(args, a.old_src)
                codes.append(code)
                walls.append(wall)
                if doc is None:
                    continue
                for row in doc["collectives"][0]["kernel"]:
                    unchanged = row["rule"].startswith("default") or row["rule"] == "no rule"
                    if row["verdict"] == "default" or (case != "aa" and unchanged):
                        continue  # the old gate measured unchanged sizes too: not counted
                    verdicts[row["verdict"]] = verdicts.get(row["verdict"], 0) + 1
                    per = by_size.setdefault(row["size"], {})
                    per[row["verdict"]] = per.get(row["verdict"], 0) + 1
                    ratios.append(row["ratio"])
                    pairs.append(row.get("rounds", 0))
            n = len(codes)
            vs = "; ".join(f"{size} B: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                           for size, c in sorted(by_size.items()))
            rr = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
            print(f"| {case} | {n} | {codes.count(1)} | {codes.count(5)} | {codes.count(0)} | "
                  f"{vs} | {rr} | {statistics.median(pairs) if pairs else '-'} | "
                  f"{statistics.median(walls):.0f} |", flush=True)


if __name__ == "__main__":
    main()
