"""Where the network decides (issue 85, item 2; root): on the test cluster's nodes, every
port shaped by a link profile (tests/testcluster.py's LINKS), `tune C` in a layout writes
its file; then OSU, in alternating launches of the same layout, runs the library's
default, that file, and every algorithm forced (coll/tuned's own parameters left as they
are: the oracle an OSU user builds by hand, the fastest per size). Per collective and
layout: the oracle's and the file's geometric-mean speed-up over the default, the share
of the oracle's gain the file captured, the sizes where the file is significantly slower
(one-sided paired t-test over launch rounds, Holm over sizes), and the tune's time there.

    .venv/bin/python bench/network_bench.py --osu /tmp/osu74 --link 1gbit \\
        --layouts 4x1,2x2 --colls bcast,reduce,allreduce,allgather,alltoall --rounds 4

Ranks are not bound (`--bind-to none`, for the tune too): every namespace node sees the
machine's two cores as its own, and Open MPI would bind each node's first rank to core 0.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from scipy import stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from colltune.backends.openmpi.install import find_openmpi, parse_ompi_info  # noqa: E402
from colltune.osu.osu_output import parse as parse_osu  # noqa: E402
from colltune.verification.second import OSU_PROGRAMS  # noqa: E402
from testcluster import LINKS, REPO, Cluster, make  # noqa: E402

MIN_GAIN = 1.03  # a forced algorithm counts only where it beats the default by 3% (tune's)


@dataclass
class Layout:
    nodes: int
    ppn: int

    @property
    def np(self) -> int:
        return self.nodes * self.ppn

    @property
    def name(self) -> str:
        return f"{self.nodes}x{self.ppn}"


@dataclass
class Judged:
    """OSU's average latency (seconds) per arm, per size, one value per round."""
    times: dict[str, dict[int, list[float]]] = field(default_factory=dict)

    def add(self, arm: str, rows: dict[int, float]) -> None:
        for size, t in rows.items():
            self.times.setdefault(arm, {}).setdefault(size, []).append(t)


def launcher(c: Cluster, lay: Layout) -> list[str]:
    return ["/usr/bin/mpirun.openmpi", "-np", str(lay.np), "--hostfile", c.hostfile(lay.ppn),
            "--map-by", f"ppr:{lay.ppn}:node", "--bind-to", "none", "--mca", "plm_rsh_agent",
            c.agent]


def tune(c: Cluster, coll: str, lay: Layout, work: Path) -> tuple[Path, float, str]:
    """`tune COLL` in the layout, on node 1: its file, its wall time, its allocation line."""
    out = work / f"{coll}.{lay.name}.conf"
    env = c.env(PYTHONPATH=str(REPO / "src"))
    t = time.monotonic()
    r = c.on("node1", [sys.executable, "-m", "colltune.cli", coll, "--np", str(lay.np),
                       "--hostfile", c.hostfile(lay.ppn), "--ppn", str(lay.ppn),
                       "--launcher-args", f"--mca plm_rsh_agent {c.agent} --bind-to none",
                       "--mpi", "/usr", "--db", str(work / "db.sqlite"), "--out", str(out)],
             env=env, cwd=work, timeout=7200)
    took = time.monotonic() - t
    if r.returncode != 0:
        raise SystemExit(f"tune {coll} {lay.name} failed: {r.stderr[-3000:]}")
    said = r.stdout + r.stderr
    alloc = next((ln for ln in said.splitlines() if ln.startswith("allocation:")), "")
    changes = next((ln for ln in said.splitlines() if ln.startswith("the file changes")), "")
    return out, took, f"{alloc}\n{changes}"


def arms(coll: str, rules: Path) -> dict[str, dict[str, str]]:
    """The environment of every arm: default (fixed decisions), the file, each algorithm."""
    mpi = find_openmpi("/usr")
    info = subprocess.run([str(mpi.ompi_info), "--param", "coll", "tuned", "--level", "9",
                           "--parsable"], capture_output=True, text=True, check=True).stdout
    out = {"default": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"},
           "file": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                    "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(rules)}}
    for alg, name in sorted(parse_ompi_info(info).algorithms[coll].items()):
        if alg == 0 or name == "two_proc":  # "ignore" (fixed decisions), 2 ranks only
            continue
        out[f"{alg}:{name}"] = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                                f"OMPI_MCA_coll_tuned_{coll}_algorithm": str(alg)}
    return out


def osu(c: Cluster, exe: Path, lay: Layout, env: dict[str, str], args: argparse.Namespace
        ) -> dict[int, float]:
    r = c.on("node1", [*launcher(c, lay), str(exe), "-m", f"1:{args.max_size}", "-i",
                       str(args.iters), "-x", str(args.warmup)], env=c.env(**env),
             timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{exe.name} failed: {r.stderr[-2000:]}")
    return {row.size: row.avg_us * 1e-6 for row in parse_osu(r.stdout, exe.name).rows}


def judge(j: Judged) -> dict[str, object]:
    default, mine = j.times["default"], j.times["file"]
    forced = {a: t for a, t in j.times.items() if a not in ("default", "file")}
    sizes = sorted(default)
    oracle, gains, pvals, best = [], [], [], {}
    for s in sizes:
        d = statistics.median(default[s])
        a, t = min(((a, statistics.median(t[s])) for a, t in forced.items()),
                   key=lambda x: x[1])
        oracle.append(d / t if d / t >= MIN_GAIN else 1.0)
        best[s] = a if d / t >= MIN_GAIN else "default"
        gains.append(d / statistics.median(mine[s]))
        logs = [math.log(f / d0) for f, d0 in zip(mine[s], default[s], strict=True)]
        pvals.append(stats.ttest_1samp(logs, 0.0, alternative="greater").pvalue
                     if len(set(logs)) > 1 else 1.0)
    holm = _holm(pvals)
    gm_oracle = math.exp(statistics.fmean(map(math.log, oracle)))
    gm_file = math.exp(statistics.fmean(map(math.log, gains)))
    worst = min(range(len(sizes)), key=lambda i: gains[i])
    return {"sizes": len(sizes), "oracle_gm": gm_oracle, "file_gm": gm_file,
            "captured": (gm_file - 1) / (gm_oracle - 1) if gm_oracle > 1 else None,
            "worst": (sizes[worst], 1 / gains[worst]),
            "slower": [sizes[i] for i, p in enumerate(holm) if p < 0.05],
            "best": best, "per_size": {s: (g, o) for s, g, o in zip(sizes, gains, oracle,
                                                                     strict=True)}}


def _holm(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [1.0] * len(p), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - k) * p[i]))
        out[i] = running
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--osu", type=Path, required=True, help="OSU built for Open MPI 4.1.4")
    ap.add_argument("--link", default="1gbit", choices=sorted(LINKS))
    ap.add_argument("--layouts", default="4x1,2x2")
    ap.add_argument("--colls", default="bcast,reduce,allreduce,allgather,alltoall")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-size", type=int, default=1 << 20)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    lays = [Layout(*map(int, s.split("x"))) for s in args.layouts.split(",")]
    c = make(max(lay.nodes for lay in lays), slurm=False)
    report = {}
    try:
        c.shape(LINKS[args.link])
        work = c.home / "network"
        work.mkdir(exist_ok=True)
        for coll in args.colls.split(","):
            # on the shared home: every node has a /tmp of its own
            exe = work / OSU_PROGRAMS[coll]
            shutil.copy2(next(iter(sorted(args.osu.rglob(OSU_PROGRAMS[coll])))), exe)
            for lay in lays:
                rules, took, said = tune(c, coll, lay, work)
                print(f"{coll} {lay.name}: tune took {took:.0f} s\n{said}", flush=True)
                env = arms(coll, rules)
                j = Judged()
                names = list(env)
                for rnd in range(args.rounds):
                    k = rnd % len(names)  # a different arm first each round
                    order = names[k:] + names[:k]
                    for arm in (order if rnd % 2 == 0 else order[::-1]):
                        j.add(arm, osu(c, exe, lay, env[arm], args))
                v = judge(j)
                v["tune_s"] = took
                report[f"{coll} {lay.name}"] = {**v, "times": j.times}
                print(f"{coll} {lay.name}: oracle {v['oracle_gm']:.3f}x, file "
                      f"{v['file_gm']:.3f}x, captured {v['captured']}, worst "
                      f"{v['worst']}, significantly slower at {v['slower']}", flush=True)
                for s, (g, o) in v["per_size"].items():  # type: ignore[attr-defined]
                    print(f"  {s:>8} file {g:.2f}x oracle {o:.2f}x ({v['best'][s]})",  # type: ignore[index]
                          flush=True)
                if args.json:
                    args.json.write_text(json.dumps(report, indent=1, default=str))
    finally:
        c.down()


if __name__ == "__main__":
    main()
