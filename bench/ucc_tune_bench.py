"""tune --tune-ucc judged: per collective, the tune's time and the string it wrote, then
UCC's own choice against that string, beside the oracle (each tl/ucp algorithm forced, the
fastest per size), coll/tuned's default (UCC off) and coll/tuned with the rules file `tune`
writes for it (UCC off: which of the two files serves the site better), by colltune's
kernel.

Needs an Open MPI 5.0 built with UCC (docs/ucc.md; never committed):

    .venv/bin/python bench/ucc_tune_bench.py --mpi $HOME/ompi5ucc --np 4 --rounds 5

Across the test cluster's nodes (root), 2 nodes x 2 ranks, every port shaped as --link says,
UCX over TCP on the nodes' ports, the tune and verify run from node 1 as a user there runs
them (hostfile, the launch agent and `-x UCX_*` in --launcher-args); with --osu-dir, `tune
verify --with osu` judges the string by OSU beside the kernel (OSU built with this Open
MPI's mpicc):

    .venv/bin/python bench/ucc_tune_bench.py --mpi $HOME/ompi5ucc --np 4 --rounds 3 \
        --nodes 2 --link 1gbit --osu-dir OSU/c/mpi/collective/blocking

(OSU: OSU 7.4's source tree configured with CC=$HOME/ompi5ucc/bin/mpicc and built there.)

The tune runs as a user runs it (`tune C --np N --tune-ucc --sizes ...`: sweep, boundaries,
fresh launch pairs). The arms are then measured as bench/ucc_bench.py measures them (one
launch per arm and round, every size in it, the order shuffled each round, an arm's time at
a size the median of its launches' medians), at the sizes the tune was given: ratios to
UCC's own choice in the same run (above 1: faster)."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ucc_bench import (  # noqa: E402
    UCC_OFF,
    UCC_ON,
    arms_for,
    cluster_args,
    geomean,
    measure,
    on_cluster,
)

from colltune.rules import ucc_tune as u  # noqa: E402
from testcluster import Cluster  # noqa: E402  (ucc_bench put tests/ on the path)

TUNE = Path(sys.executable).with_name("tune")


def as_user(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """`tune ARGV` as its user runs it: here, or from node 1 over the cluster's nodes."""
    cluster: Cluster | None = args.cluster
    if cluster is None:
        return [str(TUNE), *argv, "--mpi", args.mpi]
    return [*cluster.enter("node1"), str(TUNE), *argv, "--mpi", args.mpi,
            "--hostfile", cluster.hostfile(args.np // cluster.nodes),
            "--ppn", str(args.np // cluster.nodes), "--launcher-args",
            f"--mca plm_rsh_agent {cluster.agent} -x UCX_TLS -x UCX_NET_DEVICES"]


def user_env(args: argparse.Namespace) -> dict[str, str] | None:
    cluster: Cluster | None = args.cluster
    if cluster is None:
        return None
    return cluster.env(UCX_TLS="tcp,self", UCX_NET_DEVICES=cluster.net_devices)


def tuned_string(args: argparse.Namespace, coll: str, work: Path
                 ) -> tuple[dict[str, str], float]:
    """What `tune --tune-ucc` writes for `coll` (the string and any radix settings: {}
    where it keeps UCC's own everywhere), and the tune's wall time."""
    out = work / f"{coll}.env"
    start = time.monotonic()
    r = subprocess.run(as_user(args, [coll, "--np", str(args.np), "--tune-ucc", "--sizes",
                                      args.sizes, "--out", str(out), "--db",
                                      str(work / "s.db"), "--quiet"]),
                       capture_output=True, text=True, timeout=3600, env=user_env(args))
    took = time.monotonic() - start
    if r.returncode != 0:
        sys.exit(f"tune {coll} failed: {r.stderr[-2000:]}")
    settings = {n: v for _, n, v in u.env_lines(out.read_text()) or []}
    return (settings if settings.get(u.TL_UCP) else {}), took


def written(settings: dict[str, str]) -> str:
    """The string and its radix settings, as a table cell."""
    if not settings:
        return "(none: UCC own)"
    return "; ".join(f"`{v}`" if n == u.TL_UCP else f"{n.removeprefix('UCC_TL_UCP_')}=`{v}`"
                     for n, v in settings.items())


def tuned_file(args: argparse.Namespace, coll: str, work: Path) -> Path:
    """coll/tuned's rules for `coll` as `tune C` writes them with UCC off (Open MPI's own
    default): the other file a site could hand its jobs."""
    out = work / f"{coll}.conf"
    r = subprocess.run(as_user(args, [coll, "--np", str(args.np), "--sizes", args.sizes,
                                      "--out", str(out), "--db", str(work / "t.db"),
                                      "--quiet"]),
                       capture_output=True, text=True, timeout=3600, env=user_env(args))
    if r.returncode != 0:
        sys.exit(f"tune {coll} (coll/tuned) failed: {r.stderr[-2000:]}")
    return out


def verified(args: argparse.Namespace, coll: str, work: Path) -> str:
    """`tune verify` of the string written for `coll` (with OSU where --osu-dir is given):
    the geometric-mean speed-up by the kernel (and OSU), the verdicts, and its proof."""
    report = work / f"{coll}.verify.json"
    osu = ["--with", "osu", "--osu-dir", args.osu_dir] if args.osu_dir else []
    r = subprocess.run(as_user(args, ["verify", str(work / f"{coll}.env"), "--np",
                                      str(args.np), "--sizes", args.sizes, "--json",
                                      str(report), "--allow-inconclusive", *osu]),
                       capture_output=True, text=True, timeout=3600, env=user_env(args))
    if not report.exists():
        return f"verify failed ({r.returncode}): {r.stderr.strip()[-300:]}"
    (c,) = json.loads(report.read_text())["collectives"]
    verdicts = Counter(s["verdict"] for s in c["kernel"] + c["osu"] if s["verdict"] != "default")
    speed = "; ".join(f"{name} {x:.2f}x" for name, x in (("kernel", c["speedup"]),
                                                          ("OSU", c["osu_speedup"])) if x)
    return (f"{speed or 'nothing changed'} ({', '.join(f'{n} {v}' for v, n in verdicts.items())}"
            f"); {c['applied']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpi", required=True, help="Open MPI 5 prefix built --with-ucc")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--collectives", default="bcast,allreduce,reduce,allgather,alltoall")
    ap.add_argument("--sizes", default="8,64,512,4096,32768,262144,1048576")
    cluster_args(ap)
    ap.add_argument("--osu-dir", help="OSU's collective programs (built with --mpi's "
                    "mpicc): `tune verify --with osu` judges each string")
    on_cluster(ap.parse_args(), run)


def run(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| collective | tune | string / UCC | oracle / UCC | share | worst size | "
          "coll/tuned / UCC | coll/tuned + its file / UCC | string | tune verify |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    # shared by the nodes where there are nodes (a node's /tmp is its own)
    where = args.cluster.home if args.cluster else None
    with tempfile.TemporaryDirectory(prefix="ucc-tune-bench-", dir=where) as tmp:
        for coll in args.collectives.split(","):
            value, took = tuned_string(args, coll, Path(tmp))
            check = verified(args, coll, Path(tmp)) if value else "-"
            arms = arms_for(coll, args.np)
            arms["string"] = {**UCC_ON, **value}
            arms["tuned+file"] = {**UCC_OFF, "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                                  "OMPI_MCA_coll_tuned_dynamic_rules_filename":
                                  str(tuned_file(args, coll, Path(tmp)))}
            t = measure(args, coll, arms, sizes)
            forced = [a for a in t if a.startswith("@")]
            ok = [s for s in sizes if s in t["ucc"] and s in t["string"]
                  and all(s in t[a] for a in forced)]
            best = {s: min(t[a][s] for a in forced) for s in ok}
            mine = geomean([t["ucc"][s] / t["string"][s] for s in ok])
            oracle = geomean([t["ucc"][s] / best[s] for s in ok])
            # the oracle's gain captured, in log terms; a gain below 1% is not a share
            share = (f"{math.log(mine) / math.log(oracle):.0%}" if oracle > 1.01 else "-")
            worst = min(ok, key=lambda s: t["ucc"][s] / t["string"][s])
            tuned = geomean([t["ucc"][s] / t["tuned"][s] for s in ok if s in t["tuned"]])
            filed = geomean([t["ucc"][s] / t["tuned+file"][s] for s in ok
                             if s in t["tuned+file"]])
            print(f"| {coll} | {took:.0f} s | {mine:.2f}x | {oracle:.2f}x | {share} | "
                  f"{t['ucc'][worst] / t['string'][worst]:.2f}x at {worst} B | "
                  f"{tuned:.2f}x | {filed:.2f}x | {written(value)} | {check} |",
                  flush=True)


if __name__ == "__main__":
    main()
