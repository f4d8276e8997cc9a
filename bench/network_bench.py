"""Where the network decides (issue 85, item 2; root): on the test cluster's nodes, every
port shaped by a link profile (tests/testcluster.py's LINKS), `tune C` in a layout writes
its file; then OSU, in alternating launches of the same layout, runs the library's
default, that file, and every algorithm forced (coll/tuned's own parameters left as they
are: the oracle an OSU user builds by hand, the fastest per size). Per collective and
layout: the oracle's and the file's geometric-mean speed-up over the default, the share
of the oracle's gain the file captured, the sizes where the file is significantly slower
(one-sided paired t-test over launch rounds, Holm over the sizes where the file changes
the choice) with the smallest slowdown each test could have seen, and the tune's time.

    .venv/bin/python bench/network_bench.py --osu /tmp/osu74 --link 1gbit \\
        --layouts 4x1,2x2 --colls bcast,reduce,allreduce,allgather,alltoall --rounds 4

OSU 7.4 sums MPI_CHAR in its reductions unless told otherwise (-T); `--datatype char` has
the tune sum one-byte integers too, so that both time the same call.

OSU runs with -f: besides its mean over ranks (the column it prints by default) the run
keeps the slowest rank's time, what the tune's default objective (completion) minimises;
`--stat max` judges by it (also with --rejudge). `--tune-args` passes options on to the
tune (e.g. "--objective mean --timing isolated": OSU's own measurement).

`--verify` also runs `tune verify` of each file in its layout on the shaped nodes (the
gate a site runs: the kernel's alternating launches, sequential, its verdict per size with
the smallest slowdown it could have seen); with `--rejudge` it verifies the files a
--json kept, writing the verdicts back into it.

Ranks are not bound (`--bind-to none`, for the tune too): every namespace node sees the
machine's two cores as its own, and Open MPI would bind each node's first rank to core 0.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scipy import stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from colltune.backends.openmpi.applied import rule_at  # noqa: E402
from colltune.backends.openmpi.install import find_openmpi, parse_ompi_info  # noqa: E402
from colltune.collectives import get_collective  # noqa: E402
from colltune.core.config import DEFAULT  # noqa: E402
from colltune.osu.osu_output import parse as parse_osu  # noqa: E402
from colltune.rules import ompi_classic as rules  # noqa: E402
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
    """OSU's latency (seconds) per arm, per size, one value per round: its mean over ranks
    (`times`) and its slowest rank's (`slowest`)."""
    times: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    slowest: dict[str, dict[int, list[float]]] = field(default_factory=dict)

    def add(self, arm: str, rows: dict[int, tuple[float, float]]) -> None:
        for size, (avg, top) in rows.items():
            self.times.setdefault(arm, {}).setdefault(size, []).append(avg)
            self.slowest.setdefault(arm, {}).setdefault(size, []).append(top)


def launcher(c: Cluster, lay: Layout) -> list[str]:
    return ["/usr/bin/mpirun.openmpi", "-np", str(lay.np), "--hostfile", c.hostfile(lay.ppn),
            "--map-by", f"ppr:{lay.ppn}:node", "--bind-to", "none", "--mca", "plm_rsh_agent",
            c.agent]


def tune(c: Cluster, coll: str, lay: Layout, work: Path, datatype: str = "double",
         extra: tuple[str, ...] = ()) -> tuple[Path, float, str]:
    """`tune COLL` in the layout, on node 1 (a reduction summing `datatype`): its file,
    its wall time, its allocation line."""
    out = work / f"{coll}.{lay.name}.conf"
    env = c.env(PYTHONPATH=str(REPO / "src"))
    t = time.monotonic()
    r = c.on("node1", [sys.executable, "-m", "colltune.cli", coll, "--np", str(lay.np),
                       "--hostfile", c.hostfile(lay.ppn), "--ppn", str(lay.ppn),
                       "--launcher-args", f"--mca plm_rsh_agent {c.agent} --bind-to none",
                       "--mpi", "/usr", "--db", str(work / "db.sqlite"), "--out", str(out),
                       "--summary-json", str(work / "summary.json"),
                       *(["--datatype", datatype] if get_collective(coll).reduction else []),
                       *extra],
             env=env, cwd=work, timeout=7200)
    took = time.monotonic() - t
    if r.returncode != 0:
        raise SystemExit(f"tune {coll} {lay.name} failed: {r.stderr[-3000:]}")
    said = r.stdout + r.stderr
    alloc = next((ln for ln in said.splitlines() if ln.startswith("allocation:")), "")
    changes = next((ln for ln in said.splitlines() if ln.startswith("the file changes")
                    or ln.startswith("the file keeps")), "")
    return out, took, "\n".join([alloc, changes, *by_means(work / "summary.json", coll,
                                                             lay.np)])


def verify(c: Cluster, coll: str, lay: Layout, work: Path, path: Path,
           extra: tuple[str, ...] = ()) -> dict[str, object]:
    """`tune verify` of the file in the layout it was tuned in (the item's "never
    significantly slower": the gate a site runs, with its power): its exit status, and
    per size it tested (where the file changes the choice) the verdict, the ratio and the
    smallest slowdown it could have seen."""
    out = work / f"verify.{coll}.{lay.name}.json"
    r = c.on("node1", [sys.executable, "-m", "colltune.cli", "verify", str(path), "-c", coll,
                       "--np", str(lay.np), "--hostfile", c.hostfile(lay.ppn), "--ppn",
                       str(lay.ppn), "--launcher-args",
                       f"--mca plm_rsh_agent {c.agent} --bind-to none", "--mpi", "/usr",
                       "--json", str(out), *extra],
             env=c.env(PYTHONPATH=str(REPO / "src")), cwd=work, timeout=7200)
    if r.returncode not in (0, 1, 5) or not out.exists():  # 0, 1, 5: each a verdict
        raise SystemExit(f"verify {coll} {lay.name} failed (exit {r.returncode}):\n"
                         f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    (check,) = json.loads(out.read_text())["collectives"]
    rows = [k for k in check["kernel"] if k["verdict"] != "default"]
    return {"exit": r.returncode,
            "verdicts": {v: sum(k["verdict"] == v for k in rows)
                         for v in sorted({k["verdict"] for k in rows})},
            # a size shown faster has answered; the others' power is the verdict's
            "could_see": max((k["mde"] for k in rows if k["verdict"] not in
                              ("faster", "slower")), default=None),
            "per_size": {k["size"]: (k["verdict"], k["ratio"], k["mde"]) for k in rows}}


def show_verify(name: str, v: dict) -> None:  # type: ignore[type-arg]
    said = {0: "passes", 1: "fails (a size slower)", 5: "undecided at some size"}[v["exit"]]
    print(f"{name}: tune verify {said}; {v['verdicts']}; where not shown faster, could "
          f"see {_x(v['could_see'])} at its weakest size", flush=True)
    for s, (verdict, ratio, mde) in sorted(v["per_size"].items(), key=lambda x: int(x[0])):
        print(f"  {s:>8} {verdict} file/default {ratio:.2f}, could see {_x(mde)}", flush=True)


def by_means(summary: Path, coll: str, np: int) -> list[str]:
    """The sizes the tune decided by means (the default stalls), and what its fresh
    launch pairs said there, mode by mode."""
    out = []
    for d in json.loads(summary.read_text())["collectives"][coll][str(np)]:
        if d.get("statistic") != "mean":
            continue
        said = [f"{d['size']} B: {d['reason']}"]
        for v in d["confirmations"]:
            modes = ", ".join(f"{m} {c['launch_speedup']:.2f}x {c['verdict']}"
                              for m, c in v["modes"].items())
            said.append(f"  {v['verdict']} after {v['rounds']} pairs: {modes}")
        out += said
    return out


def arms(coll: str, path: Path) -> dict[str, dict[str, str]]:
    """The environment of every arm: default (fixed decisions), the file, each algorithm."""
    mpi = find_openmpi("/usr")
    info = subprocess.run([str(mpi.ompi_info), "--param", "coll", "tuned", "--level", "9",
                           "--parsable"], capture_output=True, text=True, check=True).stdout
    out = {"default": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"},
           "file": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                    "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(path)}}
    for alg, name in sorted(parse_ompi_info(info).algorithms[coll].items()):
        if alg == 0 or name == "two_proc":  # "ignore" (fixed decisions), 2 ranks only
            continue
        out[f"{alg}:{name}"] = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                                f"OMPI_MCA_coll_tuned_{coll}_algorithm": str(alg)}
    return out


def osu(c: Cluster, exe: Path, lay: Layout, env: dict[str, str], args: argparse.Namespace
        ) -> dict[int, tuple[float, float]]:
    """OSU's mean and slowest rank's latency per size: up to --small-max with
    --small-iters iterations (a call takes tens of microseconds there), above it with
    --iters."""
    got = {}
    for lo, hi, iters in ((1, args.small_max, args.small_iters),
                          (2 * args.small_max, args.max_size, args.iters)):
        r = c.on("node1", [*launcher(c, lay), str(exe), "-f", "-m", f"{lo}:{hi}", "-i",
                           str(iters), "-x", str(args.warmup)], env=c.env(**env),
                 timeout=1800)
        if r.returncode != 0:
            raise SystemExit(f"{exe.name} failed: {r.stderr[-2000:]}")
        got.update({row.size: (row.avg_us * 1e-6, (row.max_us or row.avg_us) * 1e-6)
                    for row in parse_osu(r.stdout, exe.name).rows if lo <= row.size <= hi})
    return got


def _p(a: list[float], b: list[float], alternative: str) -> float:
    """One-sided paired t-test over launch rounds on log(a / b) (a round's arms ran next
    to each other)."""
    logs = [math.log(x / y) for x, y in zip(a, b, strict=True)]
    if len(set(logs)) < 2:
        return 1.0
    return float(stats.ttest_1samp(logs, 0.0, alternative=alternative).pvalue)


def could_see(a: list[float], b: list[float], level: float) -> float:
    """The smallest slowdown a / b that the one-sided paired t-test at `level` finds with
    80% power, given the rounds' own spread of log(a / b): what "not significantly slower"
    at that size could have seen (the gate's measure, tuner/sequential.look)."""
    logs = [math.log(x / y) for x, y in zip(a, b, strict=True)]
    n = len(logs)
    if n < 2:
        return math.inf
    se = statistics.stdev(logs) / math.sqrt(n)
    return math.exp((float(stats.t.ppf(1 - level, n - 1)) + float(stats.t.ppf(0.8, n - 1)))
                    * se)


def changes(text: str, coll: str, np: int) -> Callable[[int], bool]:
    """Whether the file names a configuration other than the library's own at a size."""
    rf = rules.parse(text, "the file")
    c = get_collective(coll)

    def at(size: int) -> bool:
        cfg = rule_at(rf, c, np, size)
        return cfg is not None and cfg != DEFAULT
    return at


def judge(j: Judged, changed: Callable[[int], bool]) -> dict[str, object]:
    """Per size: the oracle's gain (the fastest forced algorithm by its median, counted
    where it beats the default by 3% and significantly: the minimum of eleven noisy arms
    is biased low), the file's gain (measured where it changes the choice, 1 where it
    keeps the library's: the same configuration, whatever the noise said), and the best
    known (the larger of the two: the file's segment sizes and fan-outs are outside the
    forced algorithms' space)."""
    default, mine = j.times["default"], j.times["file"]
    forced = {a: t for a, t in j.times.items() if a not in ("default", "file")}
    sizes = sorted(default)
    oracle, gains, best = [], [], {}

    def gm(xs: list[float]) -> float:
        return math.exp(statistics.fmean(map(math.log, xs)))
    for s in sizes:
        d = statistics.median(default[s])
        a = min(forced, key=lambda arm: statistics.median(forced[arm][s]))
        g = d / statistics.median(forced[a][s])
        real = g >= MIN_GAIN and _p(forced[a][s], default[s], "less") < 0.05
        oracle.append(g if real else 1.0)
        best[s] = a if real else "default"
        gains.append(d / statistics.median(mine[s]) if changed(s) else 1.0)
    # "slower" is asked only where the file changes the choice (elsewhere it runs the
    # library's own configuration): Holm over those sizes, and each one's power at
    # Holm's strictest level, alpha / m, an upper bound of what its test could see
    tested = [s for s in sizes if changed(s)]
    holm = dict(zip(tested, _holm([_p(mine[s], default[s], "greater") for s in tested]),
                    strict=True))
    see = {s: could_see(mine[s], default[s], 0.05 / len(tested)) for s in tested}
    known = [max(o, g) for o, g in zip(oracle, gains, strict=True)]


    worst = min(range(len(sizes)), key=lambda i: gains[i])
    return {"sizes": len(sizes), "oracle_gm": gm(oracle), "file_gm": gm(gains),
            "known_gm": gm(known),
            "captured": (gm(gains) - 1) / (gm(oracle) - 1) if gm(oracle) > 1 else None,
            "captured_known": (gm(gains) - 1) / (gm(known) - 1) if gm(known) > 1 else None,
            "worst": (sizes[worst], 1 / gains[worst]),
            "slower": [s for s in tested if holm[s] < 0.05],
            "could_see": max(see.values(), default=None), "could_see_per_size": see,
            "changed": tested, "best": best,
            "per_size": {s: (g, o) for s, g, o in zip(sizes, gains, oracle, strict=True)}}


def show(name: str, v: dict) -> None:  # type: ignore[type-arg]
    print(f"{name}: oracle {v['oracle_gm']:.3f}x, file {v['file_gm']:.3f}x, best known "
          f"{v['known_gm']:.3f}x; captured {v['captured']} of the oracle, "
          f"{v['captured_known']} of the best known; worst {v['worst']}, significantly "
          f"slower at {v['slower']}; where the file changes the choice, 'not slower' "
          f"could see {_x(v['could_see'])} at its weakest size", flush=True)
    for s, (g, o) in v["per_size"].items():
        see = v["could_see_per_size"].get(s)
        mark = f" (could see {_x(see)})" if see else " (file: the library's own)"
        print(f"  {s:>8} file {g:.2f}x oracle {o:.2f}x ({v['best'][s]}){mark}", flush=True)


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


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
    ap.add_argument("--rounds", type=int, default=4, help="OSU's rounds (0: tune only)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--small-iters", type=int, default=200)
    ap.add_argument("--small-max", type=int, default=8192)
    ap.add_argument("--rejudge", type=Path, default=None,
                    help="judge the times a --json of an earlier run kept; run nothing")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-size", type=int, default=1 << 20)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--datatype", default="double",
                    help="what the tune's reductions sum (OSU 7.4 sums chars unless -T)")
    ap.add_argument("--stat", default="avg", choices=("avg", "max"),
                    help="judge by OSU's mean over ranks or its slowest rank")
    ap.add_argument("--tune-args", default="", help="more options for the tune")
    ap.add_argument("--verify", action="store_true",
                    help="also `tune verify` each file in its layout (with --rejudge: "
                         "the files the --json kept, on the shaped nodes)")
    ap.add_argument("--verify-args", default="",
                    help="more options for verify (e.g. the tune's --objective)")
    args = ap.parse_args()
    kept_as = "times" if args.stat == "avg" else "slowest"
    if args.rejudge:
        report = json.loads(args.rejudge.read_text())
        for name, kept in report.items():
            coll, lay = name.split()
            times = {arm: {int(size): t for size, t in per.items()}
                     for arm, per in kept.get(kept_as, kept["times"]).items()}
            show(name, judge(Judged(times), changes(kept["file"], coll, Layout(
                *map(int, lay.split("x"))).np)))
        if args.verify:
            verify_kept(report, args)
        return
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
                path, took, said = tune(c, coll, lay, work, args.datatype,
                                        tuple(shlex.split(args.tune_args)))
                print(f"{coll} {lay.name}: tune took {took:.0f} s\n{said}", flush=True)
                # the tune's own account of every size (its medians, its fresh launch
                # pairs' verdicts): why it kept the library's choice where OSU disagrees
                summary = json.loads((work / "summary.json").read_text())
                if args.rounds == 0:
                    continue
                env = arms(coll, path)
                j = Judged()
                names = list(env)
                for rnd in range(args.rounds):
                    k = rnd % len(names)  # a different arm first each round
                    order = names[k:] + names[:k]
                    for arm in (order if rnd % 2 == 0 else order[::-1]):
                        j.add(arm, osu(c, exe, lay, env[arm], args))
                text = path.read_text()
                v = judge(Judged(getattr(j, kept_as)), changes(text, coll, lay.np))
                v["tune_s"] = took
                if args.verify:
                    v["verify"] = verify(c, coll, lay, work, path, _verify_args(coll, args))
                    show_verify(f"{coll} {lay.name}", v["verify"])
                report[f"{coll} {lay.name}"] = {**v, "times": j.times, "slowest": j.slowest,
                                                "file": text, "said": said,
                                                "summary": summary}
                show(f"{coll} {lay.name}", v)
                if args.json:
                    args.json.write_text(json.dumps(report, indent=1, default=str))
    finally:
        c.down()


def _verify_args(coll: str, args: argparse.Namespace) -> tuple[str, ...]:
    dt = ("--datatype", args.datatype) if get_collective(coll).reduction else ()
    return (*dt, *shlex.split(args.verify_args))


def verify_kept(report: dict, args: argparse.Namespace) -> None:  # type: ignore[type-arg]
    """`tune verify` of each file a --json kept, in its layout on the shaped nodes (its
    verdicts written back into the --json)."""
    lays = {name: Layout(*map(int, name.split()[1].split("x"))) for name in report}
    c = make(max(lay.nodes for lay in lays.values()), slurm=False)
    try:
        c.shape(LINKS[args.link])
        work = c.home / "network"
        work.mkdir(exist_ok=True)
        for name, kept in report.items():
            coll, lay = name.split()[0], lays[name]
            path = work / f"{coll}.{lay.name}.conf"
            path.write_text(kept["file"])
            kept["verify"] = verify(c, coll, lay, work, path, _verify_args(coll, args))
            show_verify(name, kept["verify"])
            args.rejudge.write_text(json.dumps(report, indent=1, default=str))
    finally:
        c.down()


if __name__ == "__main__":
    main()
