"""Benchmark for docs/benchmarks.md (issue 36): colltune against Intel's own autotuner
(mpitune_fast) on Intel MPI, same machine, np and collectives.

    python bench/impi_vs_mpitune.py --mpi .venv-impi --np 4 --colls bcast,reduce \
        --sizes 8,1K,16K,64K,1M --pairs 8

Per collective: mpitune_fast is run (every I_MPI_ADJUST_* / I_MPI_TUNING* unset, from a
scratch directory, as it requires) and timed; `tune COLL --backend impi` is run and timed.
Then, in fresh launches, the three arms (the default; mpitune_fast's binary file through
I_MPI_TUNING_BIN; colltune's JSON through I_MPI_TUNING, or with `--tune-args "--format
impi-bin"` its spliced table through I_MPI_TUNING_BIN) run in every order in turn, each
judged by IMB-MPI1 (its t_avg), by OSU (its average latency; `--osu-dir`: OSU built with
Intel MPI's mpicc, never found on PATH) and by an application-style loop (bench/apploop.c:
calls back to back on MPI_COMM_WORLD, timed as a whole). Per size and judge: the speed-up over
the default as the geometric mean over pairs of default/arm, its 95% t-interval over the
pairs' log ratios (scipy; uncorrected: how large a difference could have gone unseen in that
cell), and a verdict, faster or slower, only where the t-test's p-value survives Holm's
correction over every cell of the run (its 2-3 comparisons x judges x sizes x collectives:
at 95% each, 120-180 cells would show about 6-9 "verdicts" by chance, and an A/A cell did).
Cells where both arms' tables run the same entry at that size (read from the files, leaf
against leaf, by Intel MPI's own lookup) are marked "=": a difference there is not the
entry's. Prints markdown at the end; `--rejudge RAW` prints a recorded run again.
Only ratios within one run count: this machine's launch-to-launch noise is large (2 cores,
up to 2.5x between launches).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from clirun import TUNE
from scipy import stats

from colltune.backends.impi.install import IntelMPI, find_impi, launch_command, launch_env
from colltune.backends.impi.install import catalog as impi_catalog
from colltune.backends.impi.splice import Splicer, dump, record_of
from colltune.core.clock import describe
from colltune.core.space import parse_sizes
from colltune.errors import MPIError
from colltune.launchers import Launch
from colltune.osu.imb_output import parse as parse_imb
from colltune.osu.imb_output import table
from colltune.osu.osu_output import parse as parse_osu
from colltune.rules import impi_table, impi_tuning
from colltune.rules.impi_tuning import ImpiFormatError
from colltune.slots import Placement, place

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from judges import holm  # noqa: E402  (test-only statistics: tests/judges.py)

HERE = Path(__file__).resolve().parent
IMB_NAMES = {"bcast": "Bcast", "reduce": "Reduce", "allreduce": "Allreduce",
             "gather": "Gather", "allgather": "Allgather", "alltoall": "Alltoall"}
ARMS = ("default", "mpitune", "colltune")
ORDERS = list(itertools.permutations(ARMS))


def clean_env(mpi: IntelMPI, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = launch_env(mpi.prefix, extra)
    env["PATH"] = f"{mpi.prefix / 'bin'}:{env.get('PATH', '')}"  # mpitune_fast's mpirun
    return env


def run_mpitune(mpi: IntelMPI, coll: str, np: int, work: Path) -> tuple[Path, float]:
    d = work / f"mpitune-{coll}-{np}"
    d.mkdir()
    (d / "hosts").write_text(socket.gethostname() + "\n")
    t = time.monotonic()
    r = subprocess.run([str(mpi.prefix / "bin" / "mpitune_fast"), "-f", "hosts", "-n", "1",
                        "-ppn", str(np), "-c", coll, "-d", str(d / "out")], cwd=d,
                       capture_output=True, text=True, env=clean_env(mpi), timeout=1800,
                       check=False)
    took = time.monotonic() - t
    dats = sorted((d / "out").rglob("cluster_merged_*.dat"))
    if r.returncode != 0 or not dats:
        raise SystemExit(f"mpitune_fast failed ({r.returncode}): {r.stdout[-800:]}"
                         f"{r.stderr[-800:]}")
    return dats[0], took


def tree_digest(dat: Path) -> str:
    """What a binary tuning file holds, compared across collectives: on this AMD machine
    mpitune_fast wrote the same tree whatever it tuned (docs/impi.md)."""
    raw = dat.read_bytes()
    try:
        raw = zlib.decompress(raw)
    except zlib.error:
        pass
    return hashlib.md5(raw).hexdigest()[:12]


def run_colltune(mpi: IntelMPI, coll: str, np: int, sizes: str, work: Path,
                 extra: list[str]) -> tuple[Path | None, float, dict]:
    # --format impi-bin (in --tune-args): Intel MPI's own table with the wins spliced in
    suffix = ".dat" if "impi-bin" in extra else ".json"
    out, summ = work / f"colltune-{coll}-{np}{suffix}", work / f"summary-{coll}-{np}.json"
    t = time.monotonic()
    r = subprocess.run([*TUNE, coll, "--backend", "impi",
                        "--mpi", str(mpi.prefix), "--np", str(np), "--sizes", sizes,
                        "--out", str(out), "--summary-json", str(summ),
                        "--db", str(work / "colltune.sqlite"), "-q", *extra],
                       capture_output=True, text=True, timeout=3600, check=False)
    took = time.monotonic() - t
    if r.returncode != 0:
        raise SystemExit(f"tune failed: {r.stderr[-1500:]}")
    return (out if out.exists() else None), took, json.loads(summ.read_text())


def build_loop(mpi: IntelMPI, work: Path) -> Path:
    exe = work / "apploop-impi"
    subprocess.run([str(mpi.mpicc), "-O2", "-std=c99", "-Wall", "-Wextra",
                    str(HERE / "apploop.c"), "-o", str(exe)], check=True, env=clean_env(mpi))
    return exe


def imb(mpi: IntelMPI, coll: str, np: int, sizes: list[int], env: dict[str, str],
        work: Path, iters: int = 200) -> dict[int, float]:
    lens = work / "msglens"
    lens.write_text("".join(f"{s}\n" for s in sizes))
    cmd = [*launch_command(mpi, place(np, None, launch=Launch("mpiexec"))),
           str(mpi.prefix / "bin" / "IMB-MPI1"), IMB_NAMES[coll], "-npmin", str(np),
           "-msglen", str(lens), "-iter", str(iters), "-iter_policy", "off", "-zero_size", "off"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(mpi, env),
                       timeout=600, check=False)
    t = table(parse_imb(r.stdout), IMB_NAMES[coll], np)
    if r.returncode != 0 or t is None:
        raise SystemExit(f"IMB failed: {r.stdout[-600:]} {r.stderr[-600:]}")
    return {s: v * 1e-6 for s, v in t.avg_us().items()}


def osu(mpi: IntelMPI, osu_dir: Path, coll: str, np: int, sizes: list[int],
        env: dict[str, str], skip: int = 20) -> dict[int, float]:
    """OSU's average latency per size (a barrier after every call, unlike the loop), after
    `skip` untimed calls per size (OSU cannot repeat a size: its lead is its warm-up)."""
    cmd = [*launch_command(mpi, place(np, None, launch=Launch("mpiexec"))),
           str(osu_dir / f"osu_{coll}"), "-f", "-i", "200", "-x", str(skip), "-m",
           f"{min(sizes)}:{max(sizes)}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(mpi, env),
                       timeout=600, check=False)
    if r.returncode != 0:
        raise SystemExit(f"OSU failed: {r.stdout[-600:]} {r.stderr[-600:]}")
    return {row.size: row.avg_us * 1e-6 for row in parse_osu(r.stdout, f"osu_{coll}").rows
            if row.size in sizes}


def loop(mpi: IntelMPI, exe: Path, coll: str, np: int, sizes: list[int],
         env: dict[str, str], iters: int) -> dict[int, float]:
    cmd = [*launch_command(mpi, place(np, None, launch=Launch("mpiexec"))), str(exe), coll,
           str(iters), *map(str, sizes)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(mpi, env),
                       timeout=600, check=False)
    if r.returncode != 0:
        raise SystemExit(f"loop failed: {r.stderr[-600:]}")
    return {int(d["size"]): float(d["completion"]) for d in
            (json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{"))}


COMPARISONS = (("default", "mpitune"), ("default", "colltune"), ("mpitune", "colltune"))
HEAD = ("mpitune_fast/default", "colltune/default", "colltune/mpitune_fast")


def cell(ratios: list[float]) -> tuple[str, float, float]:
    """base/arm over pairs: 'geometric mean (95% interval)', the two-sided p-value that the
    mean log ratio is 0 (one-sample t), and the mean log ratio."""
    logs = [math.log(x) for x in ratios]
    mean = sum(logs) / len(logs)
    if len(logs) < 2:
        return f"{math.exp(mean):.2f}x", 1.0, mean
    if len(set(logs)) == 1:
        return f"{math.exp(mean):.2f}x", 0.0 if mean else 1.0, mean
    lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=mean, scale=stats.sem(logs))
    p = float(stats.ttest_1samp(logs, 0.0).pvalue)
    return f"{math.exp(mean):.2f}x ({math.exp(lo):.2f}-{math.exp(hi):.2f})", p, mean


ALL = "all"  # a launch's every size: what an application calling them all spends


def timed(r: dict) -> dict[tuple, list[float]]:
    """A run's figures by (judge, arm, size), with each launch's sum over the sizes as
    size ALL: every judge makes as many calls at each size, so the sum's ratio is the
    ratio of the launch's whole time in that collective. A start cost the library pays
    once a launch, at whichever size first runs an algorithm (Intel MPI's allreduce at 2
    ranks: about 1.3 ms, at 1 KiB for the default, at 16 KiB for a table whose 1 KiB entry
    is another preset), moves between sizes; it stays in the sum."""
    got = {(j, arm, s): v for j, arm, s, v in r["times"]}
    for j, arm in {(j, arm) for j, arm, _ in got}:
        per = [got.get((j, arm, s)) for s in r["sizes"]]
        if all(per) and len({len(v) for v in per if v}) == 1:
            got[(j, arm, ALL)] = [sum(v) for v in zip(*(v for v in per if v))]
    return got


def report(runs: list[dict], judges: tuple[str, ...]) -> None:
    """Every collective's table, verdicts corrected over all cells of all of them."""
    cells = []  # (run, size, judge, comparison, text, p, mean log)
    for r in runs:
        got = timed(r)
        for s in [*r["sizes"], ALL]:
            for j in judges:
                for k, (base, arm) in enumerate(COMPARISONS):
                    if (j, base, s) in got and (j, arm, s) in got:
                        ratios = [x / y for x, y in zip(got[(j, base, s)], got[(j, arm, s)],
                                                        strict=True)]
                        cells.append((id(r), s, j, k, *cell(ratios)))
    keep = holm([c[5] for c in cells])
    verdict = {c[:4]: ("faster" if c[6] > 0 else "slower") if ok else "none"
               for c, ok in zip(cells, keep, strict=True)}
    text = {c[:4]: c[4] for c in cells}
    tally: dict[tuple[int, str], int] = {}
    for r in runs:
        print(f"### {r['coll']}, {r['np']} ranks\n")
        print("\n".join(r.get("head", [])) + "\n" if r.get("head") else "", end="")
        print("| size | judge | default us | " + " | ".join(HEAD) + " |")
        print("|---|---|---|---|---|---|")
        got = timed(r)
        for s in [*r["sizes"], ALL]:
            for j in judges:
                if (j, "default", s) not in got:
                    continue
                row = []
                for k, name in enumerate(HEAD):
                    key = (id(r), s, j, k)
                    marked = r.get("same", {}).get(name, [])
                    same = set(r["sizes"]) <= set(marked) if s == ALL else s in marked
                    v = verdict[key]
                    tally[(k, v, s == ALL)] = tally.get((k, v, s == ALL), 0) + 1
                    if same and v != "none":
                        tally[(k, "same entry")] = tally.get((k, "same entry"), 0) + 1
                    row.append(f"{'= ' if same else ''}{text[key]}"
                               + (f" **{v}**" if v != "none" else ""))
                d = sorted(got[(j, "default", s)])
                print(f"| {s} | {j} | {d[len(d) // 2] * 1e6:.2f} | {' | '.join(row)} |")
        print()
    print(f"Verdicts over {len(cells)} cells, Holm-corrected (family-wise 5%); "
          f"'=': both arms run the same entry at that size; '{ALL}': the sum over a launch's "
          "sizes (its time per call at each, summed: the same calls at each size):\n")
    for k, name in enumerate(HEAD):
        def n(v: str, whole: bool, k: int = k) -> int:
            return tally.get((k, v, whole), 0)
        print(f"- {name}: per size faster {n('faster', False)}, slower "
              f"{n('slower', False)}, none {n('none', False)}"
              + (f" ({tally[(k, 'same entry')]} of the verdicts at the same entry)"
                 if tally.get((k, "same entry")) else "")
              + f"; per launch faster {n('faster', True)}, slower {n('slower', True)}, "
                f"none {n('none', True)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default=os.environ.get("COLLTUNE_IMPI_PREFIX", ".venv-impi"))
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--colls", default="bcast")
    ap.add_argument("--sizes", default="8,1K,16K,64K,1M")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--tune-args", default="", help="more options for tune, e.g. "
                    "'--window 200'")
    ap.add_argument("--osu-dir", type=Path, default=None,
                    help="OSU collectives built with this Intel MPI's mpicc (a third judge)")
    ap.add_argument("--lead", type=int, default=0,
                    help="bytes each judge's launch measures first and nobody judges: the "
                    "first size of a launch also times the launch's first calls")
    ap.add_argument("--lead-calls", type=int, default=0,
                    help="with --lead: at least this many calls of it before the first judged "
                    "size (the loop and IMB repeat the lead size; OSU skips this many calls "
                    "per size). Intel MPI runs a launch's first 300-550 calls of most collectives "
                    "2-10x slower than the rest, for longer with some presets")
    ap.add_argument("--file", type=Path, default=None,
                    help="judge this colltune tuning file (one collective) instead of tuning "
                    "anew: a file whose tune wrote one, judged again")
    ap.add_argument("--raw", type=Path, default=None,
                    help="append every collective's figures here (JSON lines)")
    ap.add_argument("--rejudge", type=Path, default=None,
                    help="print a --raw file's runs again (no launch), verdicts corrected "
                    "over all of them")
    a = ap.parse_args()
    if a.rejudge:
        runs = [json.loads(ln) for ln in a.rejudge.read_text().splitlines() if ln.strip()]
        for r in runs:  # recorded before sizes were: every size any judge has
            r.setdefault("sizes", sorted({s for _, _, s, _ in r["times"]}))
        report(runs, ("IMB", "OSU", "loop"))
        return
    mpi = find_impi(a.mpi)
    sizes = parse_sizes(a.sizes)
    if a.file and "," in a.colls:
        raise SystemExit("--file judges one collective's file: give one --colls")
    if a.lead and a.lead in sizes:
        raise SystemExit(f"--lead {a.lead} is a judged size: pick one outside --sizes")
    print(f"Intel MPI {mpi.version}, {a.np} ranks on {os.cpu_count()} cores, sizes "
          f"{a.sizes}" + (f" after {a.lead} B not judged" if a.lead else "") +
          (f" ({a.lead_calls} calls or more)" if a.lead and a.lead_calls else "") +
          f", {a.pairs} rounds of fresh launches (the arms' six orders in turn), loop "
          f"{a.iters} calls, tune {a.tune_args or '(defaults)'}\n")
    placement = place(a.np, None, launch=Launch("mpiexec"))
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="impi-bench-") as tmp:
        work = Path(tmp)
        exe = build_loop(mpi, work)
        digests: dict[str, str] = {}
        for coll in a.colls.split(","):
            head: list[str] = []
            dat, t_intel = run_mpitune(mpi, coll, a.np, work)
            if a.file:  # judged as given: no tune, no tuning time
                js, t_ours, summary = a.file.resolve(), float("nan"), {"collectives": {}}
            else:
                js, t_ours, summary = run_colltune(mpi, coll, a.np, a.sizes, work,
                                                   a.tune_args.split())
            envs = {"default": {}, "mpitune": {"I_MPI_TUNING_BIN": str(dat)},
                    "colltune": {"I_MPI_TUNING_BIN" if js.suffix == ".dat" else
                                 "I_MPI_TUNING": str(js)} if js else {}}
            same = same_entries(mpi, placement, coll, sizes, envs)
            got: dict[tuple[str, str, int], list[float]] = {}
            # a judge's launch: the lead repeated (each time `iters` calls: IMB's and the
            # loop's) until it covers --lead-calls, then the judged sizes
            leads = [a.lead] * max(1, -(-a.lead_calls // a.iters)) if a.lead else []
            run = [*leads, *sizes]
            skip = max(20, a.lead_calls) if a.lead else 20
            for p in range(a.pairs):
                # every order of the three arms in turn: with rotation alone each arm always
                # followed the same one (the default after colltune's), and colltune's arm
                # read 0.85-0.93x against the default's by the loop while it was the default
                order = ORDERS[p % len(ORDERS)]
                for arm in order:
                    for s, v in imb(mpi, coll, a.np, run, envs[arm], work, a.iters).items():
                        got.setdefault(("IMB", arm, s), []).append(v)
                    for s, v in loop(mpi, exe, coll, a.np, run, envs[arm], a.iters).items():
                        got.setdefault(("loop", arm, s), []).append(v)
                    if a.osu_dir:
                        for s, v in osu(mpi, a.osu_dir, coll, a.np, run, envs[arm],
                                        skip).items():
                            got.setdefault(("OSU", arm, s), []).append(v)
            ours = f"{t_ours:.0f} s" if not a.file else f"not run (judging {a.file.name})"
            wrote = "wrote a tuning file" if js else "wrote no file: its arm is the default"
            head.append(f"tuning time: mpitune_fast {t_intel:.0f} s, colltune {ours} "
                        f"({wrote})\n")
            if isinstance(summary.get("seconds"), dict):  # what the confirmation cost
                head.append(f"colltune's tune took {describe(summary['seconds'])}\n")
            digest = tree_digest(dat)
            twins = [c for c, g in digests.items() if g == digest]
            digests[coll] = digest
            head.append(f"mpitune_fast's file: tree {digest}" + (
                f", the same tree as its {', '.join(twins)} file: nothing in it depends on "
                f"the collective tuned\n" if twins else "\n"))
            if not same:
                head.append("(the arms' entries could not be read: no '=' marks)\n")
            decided = [f"{d['size']} B preset {d['chosen']['algorithm']}"
                       for d in summary["collectives"].get(coll, {}).get(str(a.np), [])
                       if d.get("verdict") == "tuned"]
            if not a.file:
                head.append("colltune's confirmed choices: " + ("; ".join(decided) or "none")
                            + "\n")
            if js is not None and not a.file:  # what the file names, and what backs it
                # one node: the table's layer is the job's ppn, its np
                t = impi_table.parse_rules(record_of(js).read_text()).get(a.np, {}) if \
                    js.suffix == ".dat" else impi_tuning.parse(js.read_text())
                r = impi_tuning.rules_for(t, coll, a.np)
                head.append("colltune's file: " + ("; ".join(
                    f"{lo}-{'' if hi is None else hi} B "
                    + ("the library's own" if p == impi_tuning.LIBRARY else f"preset {p}")
                    for lo, hi, p in r.ranges()) if r else "no rules for this np") + "\n")
                head += [n + "\n" for n in summary.get("impi", {}).get("notes", [])
                         if n.startswith(f"{coll} ") and "stand-in" in n]
            if decided and js is None:  # confirmed, but no file could carry it: say why
                left = [n for n in summary.get("impi", {}).get("notes", [])
                        if n.startswith(f"{coll} ")]
                head.append("not written: " + ("; ".join(left) or "see the summary") + "\n")
            rec = {"coll": coll, "np": a.np, "sizes": sizes, "head": head, "same": same,
                   "tuning_s": {"mpitune_fast": t_intel, "colltune": t_ours},
                   "times": [[j, arm, s, v] for (j, arm, s), v in got.items()]}
            runs.append(rec)
            if a.raw:
                with a.raw.open("a") as f:  # every round's figure, to judge again later
                    f.write(json.dumps(rec) + "\n")
            print(f"{coll}: measured ({len(runs)} of {len(a.colls.split(','))})", flush=True)
    print()
    report(runs, ("IMB", "OSU", "loop") if a.osu_dir else ("IMB", "loop"))


def same_entries(mpi: IntelMPI, placement: Placement, coll: str, sizes: list[int],
                 envs: dict[str, dict[str, str]]) -> dict[str, list[int]]:
    """Per comparison, the sizes where both arms run the same entry: each arm's table as
    Intel MPI loaded it in a launch with the arm's environment (dumped), looked up at each
    size. Empty when a table cannot be read (then nothing is marked)."""
    try:
        spl = Splicer(mpi, placement, {c: sorted(p) for c, p in
                                       impi_catalog(mpi, [coll]).algorithms.items()})
        # an arm with nothing set loads the library's own table, which the splicer dumped
        loaded = {arm: impi_table.decode(dump(mpi, placement, coll, env)) if env else None
                  for arm, env in envs.items()}
        # what runs: the leaf's records (mpitune_fast's file fills a leaf's unused header
        # field with 0xCCCCCCCC where the library's own has 0: the same algorithm)
        leaf = {(arm, s): spl.entry(tree, coll, s).records for arm, tree in loaded.items()
                for s in sizes}
    except (ImpiFormatError, MPIError) as e:
        print(f"{coll}: the arms' entries not read ({e})", file=sys.stderr)
        return {}
    return {name: [s for s in sizes if leaf[(base, s)] == leaf[(arm, s)]]
            for name, (base, arm) in zip(HEAD, COMPARISONS, strict=True)}


if __name__ == "__main__":
    main()
