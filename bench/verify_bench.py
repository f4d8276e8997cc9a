"""`tune verify` tables for docs/benchmarks.md: tune each collective at 4 ranks, then
verify the written file in fresh interleaved launches, with the kernel and, where OSU
Micro-Benchmarks are built, with OSU as an independent second measurement.

    python bench/verify_bench.py --mpi /usr --osu-dir /tmp/osu-41 \
        --mpi WHEEL_PREFIX --osu-dir /tmp/osu-50 --colls reduce,bcast,allreduce,gather

Prints markdown. --osu-dir pairs with the --mpi before it (OSU built with that MPI).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from clirun import TUNE


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TUNE, *args], capture_output=True,
                          text=True, check=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", action="append", required=True)
    ap.add_argument("--osu-dir", action="append", default=[])
    ap.add_argument("--colls", default="reduce,bcast,allreduce,gather")
    ap.add_argument("--np", default="4")
    ap.add_argument("--rounds", default="6")
    args = ap.parse_args()
    osu = dict(zip(args.mpi, args.osu_dir))
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for prefix in args.mpi:
            for coll in args.colls.split(","):
                rules = tmp / f"{coll}.conf"
                db = tmp / f"{abs(hash(prefix))}.sqlite"
                t0 = time.monotonic()
                r = run(coll, "--np", args.np, "--mpi", prefix, "--db", str(db), "--out",
                        str(rules), "--quiet")
                if r.returncode != 0:
                    print(f"tune {coll} failed: {r.stderr}")
                    continue
                tune_s = time.monotonic() - t0
                extra = ["--with", "osu", "--osu-dir", osu[prefix]] if prefix in osu else []
                t0 = time.monotonic()
                v = run("verify", str(rules), "--np", args.np, "--mpi", prefix, "--rounds",
                        args.rounds, "--json", str(tmp / "v.json"), "--quiet", *extra)
                verify_s = time.monotonic() - t0
                if not (tmp / "v.json").exists() or v.returncode not in (0, 1):
                    print(f"verify {coll} failed: {v.stderr}")
                    continue
                doc = json.loads((tmp / "v.json").read_text())
                (tmp / "v.json").unlink()
                c = doc["collectives"][0]
                osu_by = {s["size"]: s for s in c["osu"]}
                print(f"\n#### {coll}, {args.np} ranks, {doc['mpi']['name']} "
                      f"{doc['mpi']['version']} (tune {tune_s:.0f} s, verify {verify_s:.0f} s;"
                      f" {c['applied']}: {c['applied_detail']})\n")
                print("| size/rank | rule | default us | rules us | rules/default | verdict |"
                      " OSU default us | OSU rules us | OSU rules/default | OSU verdict |")
                print("|---|---|---|---|---|---|---|---|---|---|")
                for s in c["kernel"]:
                    if s["verdict"] == "default":  # left to the library: not measured
                        continue
                    o = osu_by.get(s["size"])
                    oc = (f"{o['default_median'] * 1e6:.2f} | {o['tuned_median'] * 1e6:.2f} | "
                          f"{o['ratio']:.3f} | {o['verdict']}" if o else "- | - | - | -")
                    print(f"| {s['size']} | {s['rule']} | {s['default_median'] * 1e6:.2f} | "
                          f"{s['tuned_median'] * 1e6:.2f} | {s['ratio']:.3f} | {s['verdict']}"
                          f"{' (' + s['note'] + ')' if s['note'] else ''} | {oc} |")
                sp = f"{c['speedup']:.3f}x" if c["speedup"] else "-"
                osp = f", OSU {c['osu_speedup']:.3f}x" if c["osu_speedup"] else ""
                print(f"\ngeometric-mean speed-up: kernel {sp}{osp}; exit status "
                      f"{v.returncode}", flush=True)


if __name__ == "__main__":
    main()
