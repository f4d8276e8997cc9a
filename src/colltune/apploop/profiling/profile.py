"""`tune profile`: run an application once with the PMPI profiler (kernel/prof/collprof.c)
preloaded into its ranks, and write what its collectives cost as one JSON file.

The profiler reaches the ranks through the launcher's own option for a rank's environment
(Open MPI `-x`, Hydra `-genv`, srun `--export`), never through the launcher's environment:
preloaded into mpirun itself, a library of PMPI wrappers would not even load. Each rank
writes its own file at MPI_Finalize; a rank that failed writes none, and then no profile is
written. The schema is in docs/profile.md."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from colltune import __version__, jobdir
from colltune.apploop.profiling import arrival
from colltune.apploop.profiling.schema import problem
from colltune.backends import registry
from colltune.backends.base import Backend
from colltune.collectives import COLLECTIVES
from colltune.core.toolchain import Installation, library_problem
from colltune.errors import ColltuneError, FormatError, MPIError, TimedOut, parse_json, read_text
from colltune.kernel.build import build_kernel
from colltune.outfile import write_atomic

SCHEMA = "colltune-profile"
# 2: where the ranks ran (layout), the clock and each group's arrival pattern; 1 still loads
VERSION = 2
PROFILER = "collprof"
# what a launcher is called, by the launcher families colltune knows how to pass settings to
_MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun")


def inject(cmd: list[str], backend: Backend, env: dict[str, str]) -> list[str]:
    """`cmd` (a launcher command line) with `env` given to every rank."""
    if not cmd:
        raise ColltuneError("no command to profile",
                            "tune profile -o app.json -- mpirun -np 4 ./app ARGS")
    name = Path(cmd[0]).name
    if name == "srun":
        if "," in env.get("LD_PRELOAD", ""):
            raise ColltuneError("a profiler path with ',' cannot pass through srun --export",
                                "set XDG_CACHE_HOME to a directory without commas")
        # a value with a comma cannot be one of --export's: srun exports its own
        # environment too (ALL), so such a one goes there (never LD_PRELOAD: above)
        plain = {k: v for k, v in env.items() if "," not in v}
        listed = [f"{k}={v}" for k, v in env.items() if k not in plain]
        return [*(["env", *listed] if listed else []), cmd[0],
                "--export=ALL," + ",".join(f"{k}={v}" for k, v in plain.items()), *cmd[1:]]
    if name.startswith(_MPI_LAUNCHERS):
        return [cmd[0], *backend.with_apps().launcher_env(env), *cmd[1:]]
    raise ColltuneError(f"'{cmd[0]}' is not an MPI launcher colltune can pass the profiler "
                        "through", "give the launcher's command: tune profile -o app.json -- "
                        "mpirun -np 4 ./app ARGS (or mpiexec, or srun)")


def run(cmd: list[str], out: Path, backend_name: str = "openmpi", prefix: str | None = None,
        timeout: float | None = None) -> dict[str, object]:
    """Run `cmd` once, profiled, and write its profile to `out` (returned too)."""
    backend = registry.named(backend_name)
    mpi = backend.with_apps().find(prefix)
    profile = profiled_run(cmd, backend, mpi, timeout=timeout)
    why = problem(profile)  # what every reader will check: never write what they refuse
    if why is not None:
        raise MPIError(f"the ranks' records make no valid profile: {why}",
                       "report this with the application's command")
    write_atomic(out, json.dumps(profile, indent=1) + "\n")
    return profile


def launch_timed(full: list[str], timeout: float | None, capture: bool,
                 environ: dict[str, str] | None, lost: str
                 ) -> tuple[subprocess.CompletedProcess[str], float]:
    """The application's launch `full` and its elapsed time; a launcher that is not there,
    or a run past `timeout`, is an error that says what is therefore `lost`."""
    start = time.monotonic()
    try:
        res = subprocess.run(full, timeout=timeout, check=False, text=True,
                             capture_output=capture, env=environ)
    except FileNotFoundError:
        raise ColltuneError(f"cannot run {full[0]}: not found",
                            "give the launcher's path, or put it on PATH") from None
    except subprocess.TimeoutExpired:
        raise TimedOut(f"the application ran longer than --timeout {timeout} s; {lost}",
                       "raise --timeout") from None
    return res, time.monotonic() - start


def profiled_run(cmd: list[str], backend: Backend, mpi: Installation,
                 env: dict[str, str] | None = None, timeout: float | None = None,
                 capture: bool = False, launcher_environ: dict[str, str] | None = None,
                 cvars: list[str] | None = None) -> dict[str, object]:
    """One run of `cmd` with the profiler, `env` given to every rank too; its profile, with
    `run_s`: the whole command's elapsed time, launch included. `capture`: the
    application's output is kept (shown only if it fails), not printed. `launcher_environ`:
    the launcher's whole environment (what it reads itself, such as binding; None: this
    process's); `cvars`: control variables read back in every rank besides `env`'s."""
    lib = build_kernel(mpi, name=PROFILER)
    # made 0700 by Python in the job directory, which every node sees (docs/cluster.md): the
    # profiler writes only into a directory of this user that no one else can write, and
    # never makes one (docs/security.md)
    with jobdir.temporary(prefix="colltune-profile-") as tmp:
        preload = ":".join(p for p in (str(lib), os.environ.get("LD_PRELOAD", "")) if p)
        names = ",".join(dict.fromkeys([*backend.with_apps().readback(env or {}), *(cvars or [])]))
        full = inject(cmd, backend, {**(env or {}), "LD_PRELOAD": preload,
                                     "COLLTUNE_PROFILE_DIR": tmp,
                                     **({"COLLTUNE_PROFILE_CVARS": names} if names else {})})
        res, elapsed = launch_timed(full, timeout, capture, launcher_environ,
                                    "no profile written")
        if res.returncode != 0:
            tail = (res.stderr or "").strip().splitlines()[-3:] if capture else []
            raise MPIError(f"the application failed (exit {res.returncode}); no profile "
                                "written" + (": " + " | ".join(tail) if tail else ""),
                                "run it without tune profile first")
        profile = merge(read_ranks(Path(tmp), mpi), cmd, mpi)
        # processes MPI_Comm_spawn started that loaded the profiler: not the job's ranks
        profile["spawned_processes"] = len(list(Path(tmp).glob("spawned.*.json")))
    profile["run_s"] = elapsed
    if capture:  # for an objective the program prints, and the library's own log (kept
        profile["stdout"], profile["stderr"] = res.stdout, res.stderr  # out of profiles)
    chose = backend.with_apps().chooser(mpi, cmd, {**os.environ, **(env or {})})
    for e in profile["entries"]:  # type: ignore[attr-defined]
        # what the library ran there, as far as its settings say (null: not known)
        e["algorithm"] = chose(e["collective"], e["comm_size"], e["size"]) \
            if chose is not None and e["tuned_by_colltune"] else None
    return profile


def read_ranks(where: Path, mpi: Installation) -> list[dict]:  # type: ignore[type-arg]
    """Every rank's record; a missing rank (it failed, or never loaded the profiler) is an
    error, as is a rank that ran on another MPI than the one the profiler was built for."""
    files = sorted(where.glob("rank.*.json"))
    if not files:
        raise MPIError(
            f"no rank wrote a profile: the program did not load the profiler built for "
            f"{mpi.describe()}",
            "check that the command runs an MPI program linked to that MPI (dynamically), "
            "or pass its prefix with --mpi / --backend")
    ranks = []
    for f in files:
        try:
            ranks.append(json.loads(f.read_text()))
        except (OSError, ValueError) as e:
            raise MPIError(f"a rank's profile {f.name} is unreadable: {e}",
                                "report this with the application's command") from None
    world = int(ranks[0]["world"])
    missing = sorted(set(range(world)) - {int(r["rank"]) for r in ranks})
    if missing:
        raise MPIError(f"rank(s) {', '.join(map(str, missing[:10]))} of {world} wrote no "
                            "profile (failed, ended without MPI_Finalize, or ran on a node "
                            f"that does not see {where}); none written",
                            "run the application without tune profile to see why; across "
                            "nodes, COLLTUNE_JOB_DIR must be on a shared file system")
    # every rank's own library, by its words and its file: an inherited LD_LIBRARY_PATH can
    # give one node's ranks another MPI's libmpi than the prefix's
    wrong = next((w for r in ranks if (w := library_problem(
        mpi, str(r["library"]), str(r.get("library_file", "")),
        [str(o) for o in r.get("library_objects", [])])) is not None), None)
    if wrong is not None:
        raise MPIError(f"the application {wrong}",
                       "pass the prefix of the MPI the application is linked to, with --mpi "
                       "(and --backend); `module unload` another MPI whose libraries "
                       "LD_LIBRARY_PATH holds")
    return ranks


def _spread(xs: list[float], world: int) -> dict[str, float]:
    """Mean over every rank (a rank without the value counts 0) and the largest."""
    return {"mean": sum(xs) / world, "max": max(xs, default=0.0)}


def merge(ranks: list[dict], cmd: list[str], mpi: Installation) -> dict[str, object]:  # type: ignore[type-arg]
    """One profile from every rank's record: per (collective, communicator size, size
    bucket) the calls one rank made, the ranks that made them, and the time in them (mean
    over the ranks that made them, and the slowest rank's)."""
    world = len(ranks)
    backend = registry.of(mpi)  # the size its rules compare, per entry
    by: dict[tuple[str, int, int], list[dict]] = defaultdict(list)  # type: ignore[type-arg]
    for r in ranks:
        for e in r["entries"]:
            by[(str(e["collective"]), int(e["comm_size"]), int(e["bucket"]))].append(e)
    wall = _spread([float(r["wall_s"]) for r in ranks], world)
    where = arrival.layout(ranks)
    spreads = arrival.arrivals(ranks, where["hosts"] if where else None)
    entries = []
    for (name, n, bucket), es in by.items():
        coll = COLLECTIVES.get(name)
        times = [float(e["time_s"]) for e in es]
        firsts = [[float(x) for x in e.get("first_s", [])] for e in es]
        # per call, the slowest rank (a call is done when its last rank is)
        first = [max(f[i] for f in firsts if len(f) > i)
                 for i in range(max((len(f) for f in firsts), default=0))]
        calls = sum(int(e["calls"]) for e in es)
        mean = sum(times) / len(es)
        summed = {str(e["datatype"]) for e in es if e.get("datatype")}
        entries.append({
            "collective": name, "comm_size": n, "size": bucket,
            "lookup_size": backend.rule_size(coll, bucket, n) if coll else None,
            "tuned_by_colltune": coll is not None,
            "calls": max(int(e["calls"]) for e in es), "ranks": len(es),
            "bytes_per_call": sum(float(e["bytes"]) for e in es) / calls if calls else 0.0,
            "time_s": {"mean": mean, "max": max(times)},
            "longest_call_s": max(float(e["longest_s"]) for e in es),
            "share": mean * len(es) / world / wall["mean"] if wall["mean"] > 0 else 0.0,
            "first_s": first,
            "first_total_s": sum(sum(f) for f in firsts) / len(es),
            "warmup": warmup(first),
            # how far apart the ranks entered the sampled calls (null: none sampled whole)
            "arrival": spreads.get((name, n, bucket)),
        })
        if summed:  # what a reduction's calls summed (a library may decide by the elements)
            entries[-1]["datatype"] = summed.pop() if len(summed) == 1 else "mixed"
    entries.sort(key=lambda e: (-e["time_s"]["mean"], e["collective"], e["comm_size"],  # type: ignore[index]
                                e["size"]))
    nonblocking: dict[str, int] = defaultdict(int)
    settings: dict[str, set[str | None]] = defaultdict(set)
    for r in ranks:
        for k, v in r.get("nonblocking", {}).items():
            nonblocking[k] = max(nonblocking[k], int(v))
        for k, v in r.get("settings", {}).items():
            settings[str(k)].add(None if v is None else str(v))
    return {
        "schema": SCHEMA, "version": VERSION, "colltune": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(), "command": cmd,
        # where it ran from: tune online's runs of the same program are found by it
        "cwd": os.getcwd(),
        "mpi": {"key": mpi.key, "name": mpi.name, "version": mpi.version,
                "prefix": str(mpi.prefix), "library": str(ranks[0]["library"]),
                "library_file": str(ranks[0].get("library_file", "")),
                "backend": registry.of(mpi).name},
        "ranks": world,
        # where the ranks ran: nodes, the most ranks on one, each world rank's host
        "layout": where,
        "clock": arrival.clock(ranks),
        "arrivals_dropped": sum(int(r.get("arrivals_dropped", 0)) for r in ranks),
        "wall_s": wall,
        "collective_s": _spread([float(r["collective_s"]) for r in ranks], world),
        "p2p_s": _spread([float(r["p2p_s"]) for r in ranks], world),
        "dropped_calls": sum(int(r.get("dropped", 0)) for r in ranks),
        "entries": entries,
        # counted only: coll/tuned's rules do not decide nonblocking collectives
        "nonblocking": dict(sorted(nonblocking.items())),
        # what the library read back for the settings asked of it (MPI_T), the distinct
        # values over the ranks (null: it has no such variable)
        "settings": {k: sorted(v, key=str) for k, v in sorted(settings.items())},
        # how many CPUs each rank may run on (its binding), the distinct counts
        "cpus_per_rank": sorted({int(r.get("cpus", -1)) for r in ranks}),
    }


def warmup(first: list[float]) -> dict[str, float] | None:
    """Where an entry's first calls change level (core.stats.change_point), or None."""
    from colltune.core.stats import change_point

    cp = change_point(first) if len(first) >= 24 else None
    # a call under 0.1 us on either side moved nothing (HPCC's 0-byte bcast: 0.0 -> 0.2 us)
    if cp is not None and min(cp.before_median, cp.after_median) < 1e-7:
        cp = None
    return None if cp is None else {"after_calls": cp.after, "before_s": cp.before_median,
                                    "after_s": cp.after_median, "p_value": cp.p_value}


def warmups(prof: dict[str, object]) -> list[str]:
    """One line per entry whose calls changed level after its first calls."""
    out = []
    for e in prof["entries"]:  # type: ignore[attr-defined]
        w = e.get("warmup")
        if w:
            n = int(w["after_calls"])
            out.append(
                f"{e['collective']} {e['size']} B at {e['comm_size']} ranks: calls 1-{n} "
                f"took {w['before_s'] * 1e6:.1f} us (median), later calls "
                f"{w['after_s'] * 1e6:.1f} us (Mann-Whitney p={w['p_value']:.1g}): the "
                f"calls changed level after call {n} (the library switching, or the "
                "application's own phases): a benchmark of fewer calls measures the "
                "first level only")
    return out


def load(path: Path) -> dict[str, object]:
    """A profile `tune profile` wrote, checked against its schema before any field is used
    (a profile may come from another user); a newer schema version is refused."""
    try:
        doc = parse_json(read_text(path))
    except (OSError, ValueError, FormatError) as e:
        raise ColltuneError(f"cannot read the profile {path}: {e}",
                            "pass the file tune profile -o wrote") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ColltuneError(f"{path} is not a colltune profile",
                            "pass the file tune profile -o wrote")
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise ColltuneError(f"{path} has profile version {str(doc.get('version'))[:20]}; "
                            f"this colltune reads up to {VERSION}", "upgrade colltune")
    why = problem(doc)
    if why is not None:
        raise ColltuneError(f"{path} is not a valid colltune profile: {why}",
                            "pass the file tune profile -o wrote, unedited")
    return doc


def lacks(profile: dict[str, object]) -> list[str]:
    """What an older profile does not hold that this colltune would use."""
    out = []
    if not profile.get("layout"):
        out.append("where its ranks ran")
    if not any(isinstance(e, dict) and e.get("arrival")
               for e in profile["entries"]):  # type: ignore[attr-defined]
        out.append("when they entered each call")
    return out
