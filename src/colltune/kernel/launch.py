"""Launch collbench under mpirun, stream its JSON lines, and kill hung jobs with all their ranks."""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune import jobdir
from colltune.core import account
from colltune.core.records import PointResult
from colltune.core.toolchain import Toolchain, library_problem


@dataclass
class KernelConfig:
    """One configuration as the kernel sees it: an id and variable assignments."""

    cid: int
    assign: dict[str, int] = field(default_factory=dict)
    group: int = 0  # communicators of this many consecutive ranks, all at once; 0: the job
    baseline: bool = False  # the library default: what the repetitions' cutoff compares with
    select: str = ""  # SMPI: the algorithm's name, switched in the running simulation


TIMINGS = ("both", "isolated", "back-to-back")
OBJECTIVES = ("completion", "mean", "root")


@dataclass
class Repetitions:
    """How much the kernel repeats each point (its stopping rule)."""

    warmup: int = 2
    min_reps: int = 7
    max_reps: int = 400
    rel_ci: float = 0.05  # stop when the 95% CI half-width of the median is this fraction
    point_time: float = 0.25  # ... or when a point has used this many seconds
    seed: int = 1  # order of configurations and sizes
    # isolated: one call after a barrier; back-to-back: a window of `window` calls with no
    # synchronisation between them, per call; both: one of each per repetition. Isolated
    # here, for probes that count what a call sends; tuning and verify time both
    timing: str = "isolated"
    window: int = 64  # calls per back-to-back window, at most ...
    window_time: float = 0.01  # ... and fewer where the warm-up says they take longer (s)
    # > 0: also two stretches of this many calls, each after the barrier and free-running
    # within (series "loop"): how an application's loop calls a collective, run-ahead and all
    loop: int = 0
    loop_time: float = 0.015  # ... fewer where the warm-up says they take longer (s)
    # > 0: also a point's first calls, from its first on, up to this many, each after the
    # barrier (series "start": an algorithm's slow start, which the warm-up hides)
    start: int = 0
    start_time: float = 0.05  # ... fewer once they have taken this long (s)
    # what a repetition's time is: completion (slowest rank), mean (over ranks, as OSU),
    # root (the root's own time)
    objective: str = "completion"
    # > 0: a point whose median CI lies above this many times the baseline's median (same
    # size, any timing mode) stops after 3 repetitions; it cannot become a choice. 0: off
    cutoff: float = 0.0
    # > 0: a call shorter than this many steps of MPI_Wtime is timed in batches of calls
    # (tuning, verify); 0: one call a repetition, as probes that count what a call sends
    # need (a batch's size follows the warm-up's time, so its traffic would vary)
    min_ticks: int = 0
    # an arrival pattern to replay (tune profile's `delays_s` rows: seconds by rank in the
    # measured communicator, at most 64 rows of 512): isolated repetition n waits row
    # n mod rows on each rank before its call, every configuration the same rows in the same
    # order, and is timed from each rank's own entry. The result's arrival_spread says what
    # the replay gave
    arrival: tuple[tuple[float, ...], ...] = ()
    # points taken elsewhere than this kernel, kept under a store key of their own: tune
    # online's, from an application's own calls ("online=<digest of its command>"); "": the
    # kernel's. Never in the plan the kernel reads
    origin: str = ""
    # > 0: past this many seconds a point stops at 3 repetitions whatever min_reps says
    # (0: the kernel's own, 10x point_time): a stage that must end in its stated time
    floor_time: float = 0.0

    def arrival_lines(self) -> list[str]:
        """The plan's `arrival` lines: what the kernel replays, as it reads it."""
        return ["arrival " + " ".join(f"{d:.9g}" for d in row) for row in self.arrival]


@dataclass
class KernelPlan:
    collective: str
    configs: list[KernelConfig]
    points: list[tuple[int, int]]  # (cid, size)
    reps: Repetitions = field(default_factory=Repetitions)
    dup_always: bool = True  # False: configurations without variables use MPI_COMM_WORLD
    pvars: str = ""  # prefix of the MPI_T counters to report per point (MVAPICH2: mv2_coll_)
    datatype: str = "double"  # what a reduction sums (Collective.datatype)
    # a configuration's sizes smallest first instead of shuffled: in an exact simulation
    # there is no noise to spread, and a point that runs out of time then leaves only
    # larger sizes behind it, excluded with it (tuner/measure._blame), not smaller ones
    # that a new launch would try one timeout at a time
    ordered: bool = False

    def render(self) -> str:
        r = self.reps
        lines = [
            "# collbench plan written by colltune",
            f"collective {self.collective}",
            f"warmup {r.warmup}",
            f"min_reps {r.min_reps}",
            f"max_reps {r.max_reps}",
            f"rel_ci {r.rel_ci}",
            f"point_time {r.point_time}",
            f"floor_time {r.floor_time}",
            f"seed {r.seed}",
            f"dup_always {int(self.dup_always)}",
            f"ordered {int(self.ordered)}",
            f"timing {r.timing}",
            f"window {r.window}",
            f"window_time {r.window_time}",
            f"loop {r.loop}",
            f"loop_time {r.loop_time}",
            f"start {r.start}",
            f"start_time {r.start_time}",
            f"objective {r.objective}",
            f"datatype {self.datatype}",
            f"cutoff {r.cutoff}",
            f"min_ticks {r.min_ticks}",
        ]
        if self.pvars:
            lines.append(f"pvars {self.pvars}")
        lines += r.arrival_lines()
        for c in self.configs:
            kv = " ".join(f"{k} {v}" for k, v in c.assign.items())
            group = f" group {c.group}" if c.group else ""
            base = " baseline" if c.baseline else ""
            select = f" select {c.select}" if c.select else ""
            lines.append(f"config {c.cid} {len(c.assign)} {kv}".rstrip() + group + select + base)
        lines += [f"point {cid} {size}" for cid, size in self.points]
        return "\n".join(lines) + "\n"


@dataclass
class LaunchOutcome:
    results: list[PointResult]
    status: str  # ok | timeout | crashed
    library: str | None = None
    library_file: str = ""  # the libmpi file the ranks loaded ("" where the loader cannot say)
    # every MPI-named file rank 0 loaded (kernel/common/mpiobjects.h), the shim's included
    library_objects: list[str] = field(default_factory=list)
    stuck: tuple[int, int] | None = None  # (cid, size) in progress when the job died
    stuck_cid: int | None = None
    message: str = ""
    other_lines: list[str] = field(default_factory=list)  # stdout lines that are not events
    stderr: str = ""
    launcher_retries: int = 0  # launches that died or hung before the kernel started
    # (MPI_Wtick, the step MPI_Wtime really takes), as the kernel measured them at start
    timer: tuple[float, float] | None = None
    wall: float = 0.0  # seconds from the launcher's start to its end
    startup: float = 0.0  # seconds until the kernel's first line (the whole launch if none)
    elapsed: float | None = None  # the kernel's clock from its start line to its last
    nodes: int = 1  # where the ranks ran, as the kernel saw it
    ranks: int = 0


def session_pids(sid: int) -> list[int]:
    """Every live process whose session id is `sid` (mpirun and all the ranks it started).
    Zombies are not: they hold nothing, and a signal cannot move them (mpirun itself is
    one until it is waited for, after this: counting it cost every launch 0.25 s of
    kill_session's retries, a quarter of an Intel MPI tune's wall time)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # fields after the parenthesised command: state ppid pgrp session ...
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 3 and int(rest[3]) == sid and rest[0] != "Z":
            pids.append(int(entry))
    return pids


# how long a launcher gets to end its job on every node after SIGTERM (mpirun and srun
# take their remote ranks down; SIGKILL would leave those running on the other nodes)
TERM_GRACE = 5.0


def kill_session(sid: int, grace: float = TERM_GRACE) -> None:
    """End the job: SIGTERM to the launcher (the session's leader), which ends its ranks on
    every node, for up to `grace` seconds; then SIGKILL the whole session here (ranks may
    leave mpirun's process group, not its session)."""
    if grace > 0 and sid in session_pids(sid):
        try:
            os.kill(sid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while sid in session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.05)
    for _ in range(5):
        pids = session_pids(sid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def die_with_parent() -> None:
    """In the child before exec: new session (so the job can be killed as a whole) and
    SIGKILL when the tuner dies, so a killed tuner leaves no MPI job behind."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


CUT = "stopped after 3 repetitions: clearly slower than the library default here"


def parse_result(ev: dict) -> PointResult:
    """A kernel `result` event as a PointResult."""
    return PointResult(
        cid=int(ev["cid"]), size=int(ev["size"]), status=str(ev.get("status", "ok")),
        n=int(ev.get("n", 0)), median=ev.get("median"), ci_lo=ev.get("ci_lo"),
        ci_hi=ev.get("ci_hi"), mean=ev.get("mean"), min=ev.get("min"), max=ev.get("max"),
        samples=[float(x) for x in ev.get("samples", [])],
        message=CUT if ev.get("cut") else str(ev.get("message", "")),
        pvars={str(k): int(v) for k, v in (ev.get("pvars") or {}).items()},
        series={str(m): {str(o): [float(x) for x in xs] for o, xs in objs.items()}
                for m, objs in (ev.get("series") or {}).items()},
        objective=str(ev.get("objective", "completion")),
        batch=int(ev.get("batch", 1)),
        loop=int(ev.get("loop", 0)),
        start=int(ev.get("start", 0)),
        spent=float(ev.get("spent", 0.0)),
        arrival_spread=[float(x) for x in ev.get("arrival_spread", [])],
    )


LAUNCH_RETRIES = 2  # launches that died before the kernel started
START_RETRIES = 1  # launches that did not start in the start timeout (each costs it again)


def start_timeout(floor: float) -> float:
    """Seconds a launch may take before the kernel's first line: COLLTUNE_START_TIMEOUT,
    else `floor`. Start-up across many nodes can take minutes; a test of a hang, seconds."""
    try:
        return float(os.environ.get("COLLTUNE_START_TIMEOUT", "")) or floor
    except ValueError:
        return floor


def run_kernel(
    cmd_prefix: list[str],
    exe: Path,
    plan: KernelPlan,
    env: dict[str, str],
    point_timeout: float = 60.0,
    starting: float = 120.0,
    on_event: Callable[[dict], None] | None = None,
    runs_on: Toolchain | None = None,
) -> LaunchOutcome:
    """Run one kernel launch. A job silent for `point_timeout` seconds is killed as hung,
    and one whose kernel has not started after `starting` seconds (COLLTUNE_START_TIMEOUT).
    A kernel whose ranks did not load the library of the installation `runs_on` (its
    version string, its libmpi file: toolchain.library_problem) is killed before it
    measures anything (status "mismatch"): built against another MPI than the one launching
    it, or given another MPI's library by the environment.

    A job that dies before the kernel reports its start is the launcher's failure, not a
    configuration's (seen: Open MPI 5.0.11's "PMIx server's listener thread failed to
    start", once in a few hundred launches): it is retried, up to LAUNCH_RETRIES times.
    So is, once, a job that did not start at all in `starting` seconds (seen on the test
    cluster twice in about ten full test runs, each time a two-node srun step under load
    whose second node's ranks never came up); a node that really hangs fails again, after
    twice the start timeout."""
    retries = hung = 0
    while True:
        out = _run_once(cmd_prefix, exe, plan, env, point_timeout, start_timeout(starting),
                        on_event, runs_on)
        account.charge(account.Launch(
            "", plan.collective, out.nodes, out.ranks, out.wall, out.startup, out.elapsed,
            *_by_size(out.results)))
        never_started = out.library is None  # the kernel's start line names its library
        if never_started and out.status == "crashed" and retries < LAUNCH_RETRIES:
            retries += 1
            time.sleep(retries)
        elif never_started and out.status == "timeout" and hung < START_RETRIES:
            hung += 1
        else:
            out.launcher_retries = retries + hung
            return out


def _by_size(results: list[PointResult]) -> tuple[dict[int, float], dict[int, int]]:
    """The kernel's time at each size of a launch, and the points measured there."""
    spent: dict[int, float] = {}
    points: dict[int, int] = {}
    for r in results:
        if r.spent > 0:
            spent[r.size] = spent.get(r.size, 0.0) + r.spent
            points[r.size] = points.get(r.size, 0) + 1
    return spent, points


def _run_once(  # noqa: C901, PLR0915 (one launch's life (start, stream, watchdog, kill) shares its state)
    cmd_prefix: list[str],
    exe: Path,
    plan: KernelPlan,
    env: dict[str, str],
    point_timeout: float,
    start_timeout: float,
    on_event: Callable[[dict], None] | None,
    runs_on: Toolchain | None,
) -> LaunchOutcome:
    with jobdir.temporary_file(".plan") as f:
        f.write(plan.render())
        plan_path = f.name
    lines: queue.Queue[str | None] = queue.Queue()
    err_chunks: list[str] = []
    out = LaunchOutcome(results=[], status="ok")
    t_launch = time.monotonic()
    proc = subprocess.Popen(
        [*cmd_prefix, str(exe), plan_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True, env=env, preexec_fn=die_with_parent,
    )

    def pump_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def pump_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_chunks.append(line)

    threads = [threading.Thread(target=pump_out, daemon=True),
               threading.Thread(target=pump_err, daemon=True)]
    for t in threads:
        t.start()
    current: tuple[int, int] | None = None
    current_cid: int | None = None
    started = False
    done = False
    last = time.monotonic()
    try:
        while True:
            limit = point_timeout if started else start_timeout
            try:
                line = lines.get(timeout=max(0.05, limit - (time.monotonic() - last)))
            except queue.Empty:
                out.status = "timeout"
                out.message = (f"no progress for {limit:.0f} s" if started else
                               f"the job did not start in {limit:.0f} s: a rank never got "
                               "through MPI_Init (a node that hangs, or cannot reach the "
                               "others) or the launcher hung")
                break
            if line is None:
                break
            last = time.monotonic()
            ev = None
            if line.startswith("{"):
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    ev = None
            if not isinstance(ev, dict) or "event" not in ev:
                out.other_lines.append(line.rstrip("\n"))
                continue
            kind = ev["event"]
            if kind == "start":
                started = True
                out.startup = time.monotonic() - t_launch
                out.nodes = max(int(ev.get("nodes") or 1), 1)
                out.ranks = int(ev.get("np") or 0)
                if int(ev.get("np", 0)) == 1:
                    # every collective colltune runs needs 2 ranks: this rank is alone
                    out.status = "nopmi"
                    out.message = no_pmi("the ranks started as singletons (MPI_COMM_WORLD "
                                         "of size 1 in each)")
                    break
                out.library = str(ev.get("library", ""))
                out.library_file = str(ev.get("library_file", ""))
                objects = ev.get("library_objects", [])
                out.library_objects = [str(o) for o in objects] \
                    if isinstance(objects, list) else ["?"]
                if "timer_step" in ev:
                    out.timer = (float(ev.get("wtick", 0.0)), float(ev["timer_step"]))
                problem = (library_problem(runs_on, out.library, out.library_file,
                                           out.library_objects)
                           if runs_on is not None else None)
                if problem is not None:
                    out.status = "mismatch"
                    out.message = f"the kernel {problem}"
                    break
            elif kind == "config":
                current_cid = int(ev["cid"])
            elif kind == "begin":
                current = (int(ev["cid"]), int(ev["size"]))
                current_cid = current[0]
            elif kind == "result":
                out.results.append(parse_result(ev))
                current = None
            elif kind == "rejected":
                out.results.append(PointResult(cid=int(ev["cid"]), size=-1, status="rejected",
                                               message=str(ev.get("message", ""))))
            elif kind == "done":
                done = True
                if "elapsed" in ev:
                    out.elapsed = float(ev["elapsed"])
            if on_event:
                on_event(ev)
    finally:
        kill_session(proc.pid)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for t in threads:
            t.join(timeout=5)
        os.unlink(plan_path)
    out.stderr = "".join(err_chunks)
    out.wall = time.monotonic() - t_launch
    if not started:
        out.startup = out.wall
    if out.status == "mismatch":
        return out
    if out.status == "ok" and (not done or proc.returncode not in (0, None)):
        out.status = "crashed"
        out.message = _crash_message(out.stderr, proc.returncode)
        if not started and any(w in out.stderr for w in _NO_PMI_WORDS):
            out.status = "nopmi"
            out.message = no_pmi("the ranks refused to start alone (the library: "
                                 "\"direct launched using srun\" without its PMI)")
    if out.status != "ok":
        out.stuck = current
        out.stuck_cid = current[0] if current else current_cid
    return out


def no_pmi(what: str) -> str:
    """The message for ranks that a launcher started without a PMI they can use: `what`
    they did, then (after ": ") what to do."""
    return (f"{what}, so the launcher gave them no PMI they can use: under Slurm use srun "
            "--mpi=pmix (or the PMI your MPI was built for, among srun --mpi=list), "
            "SLURM_MPI_TYPE, or mpirun inside the allocation")


# Open MPI 4.1 started by srun without a PMI: it refuses to run rather than run alone
_NO_PMI_WORDS = ("direct launched using \"srun\"", "not built with SLURM's PMI support")


def _crash_message(stderr: str, rc: int | None) -> str:
    """The library's own words about the failure, without its banner lines."""
    keep = [
        ln.strip() for ln in stderr.splitlines()
        if ln.strip() and not set(ln.strip()) <= set("-*=")
    ]
    signal_lines = [ln for ln in keep if "signal" in ln.lower() or "exited" in ln.lower()]
    chosen = signal_lines[:3] or keep[:3]
    text = " | ".join(chosen)[:500]
    return f"exit status {rc}: {text}" if text else f"exit status {rc}"
