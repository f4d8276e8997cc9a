"""What Intel MPI ran, in the library's own terms: rank 0 of a kernel launch runs under gdb
with a counting breakpoint on every internal function named after the collective
(libmpi.so keeps its symbol table) and on the kernel's `collbench_point`, so each size's
calls are attributed. A size's fingerprint is the set of (function, calls per collective
call) it showed.

Intel MPI prints nothing per call and has no MPI_T performance variables; this costs about
a second a launch. Two presets with one fingerprint ran the same functions; where their
code differs only inside inlined helpers the fingerprint cannot tell them apart, so
"applied" is claimed only where the file's choice and the library's default differ."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from colltune import jobdir
from colltune.backends.impi.install import IntelMPI, forcing_env, job_env, launch_command
from colltune.core.clock import PROOF, stage
from colltune.core.config import Config
from colltune.errors import ColltuneError, MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.rules.impi_tuning import LIBRARY, Rules, file_name

if TYPE_CHECKING:
    from colltune.slots import Placement
    from colltune.store import Context, Store

Fingerprint = frozenset[tuple[str, int]]

GDB_HINT = "install gdb (apt-get install gdb): Intel MPI's proof of what ran reads its symbols"

# probe launches at once on a node (rank 0 of each under gdb; Intel MPI's ranks yield)
PARALLEL_PROBES = 2

# rank 0 runs under gdb, the others as they are (PMI_RANK: Hydra; SLURM_PROCID: srun)
_WRAP = ('r=${PMI_RANK:-${SLURM_PROCID:-0}}; g=$1; shift; '
         'if [ "$r" = 0 ]; then exec "$g" -q -batch -nx -x "$COLLTUNE_BREAK_SCRIPT" '
         '--args "$@"; else exec "$@"; fi')


def gdb_path() -> str:
    found = shutil.which("gdb")
    if not found:
        raise ColltuneError("gdb is not installed", GDB_HINT)
    return found


def patterns(coll: str) -> tuple[str, str]:
    """(gdb regex that lists candidates quickly, Python regex for the functions that belong
    to `coll`): the collective's name as a word of its own, so reduce is not allreduce or
    reduce_scatter, and bcast is not Ibcast (non-blocking)."""
    listing = "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in coll)
    tail = "(?!_scatter)" if coll == "reduce" else ""
    match = rf"^(?!P?MPIX?_|p?mpi_)(?!.*memcpy)\w*(?<![A-Za-z])(?i:{coll}){tail}(?![a-z])"
    return listing, match


def fingerprint(counts: dict[str, int], coll: str) -> Fingerprint | None:
    """The functions a size's calls went through, per call (the library's entry function
    MPIR_<Coll> counts the calls); None where the entry was never seen."""
    entry = f"MPIR_{file_name(coll)}"
    calls = counts.get(entry, 0)
    if not calls:
        return None
    # the selection's own steps (`auto`, an algorithm's `_check` of its conditions) are not
    # what ran: BCAST=7 at 2 ranks checks Shumilin's, then runs binomial through auto
    return frozenset((f, max(1, round(n / calls))) for f, n in counts.items()
                     if f != entry and not f.endswith(("_check", "_auto")))


def describe(fp: Fingerprint | None, coll: str) -> str:
    """A fingerprint in words: "binomial", "scatter_ring_allgather", "binomial x2"."""
    if fp is None:
        return "unknown"
    strip = re.compile(rf"^MPIR_{file_name(coll)}_(intra_|allcomm_)?")
    parts = [strip.sub("", f) + (f" x{n}" if n > 1 else "")
             for f, n in sorted(fp)]
    return "+".join(parts) or "entry only"


Counts = dict[str, int]  # function -> calls while a size was measured (the entry's too)

_SYMBOL = re.compile(r"[A-Za-z_]\w{0,199}")


def valid_counts(data: object) -> Counts | None:
    """Stored counts as a probe wrote them (a store may come from another user: symbol
    names and call counts only, else None: probed again)."""
    if not isinstance(data, dict) or len(data) > 1000:
        return None
    ok = all(isinstance(k, str) and _SYMBOL.fullmatch(k) and type(v) is int and 0 <= v
             for k, v in data.items())
    return dict(data) if ok else None


@stage(PROOF)
def probe(mpi: IntelMPI, placement: Placement, coll: str, sizes: list[int],  # noqa: PLR0913 (a launch's what, where, and its kernel)
          env: dict[str, str], timeout: float = 60.0, exe: Path | None = None,
          datatype: str = "double") -> dict[int, Counts]:
    """The calls of each internal function of `coll` (a reduction summing `datatype`)
    while each size ran, in one launch with `env` (a few calls a size); `exe`: the kernel,
    if already built for `mpi`."""
    gdb = gdb_path()
    exe = exe or build_kernel(mpi)
    listing, match = patterns(coll)
    script = resources.files("colltune.kernel").joinpath("breakcount.gdb")
    plan = KernelPlan(coll, [KernelConfig(0, {}, placement.group)], [(0, s) for s in sizes],
                      Repetitions(warmup=1, min_reps=2, max_reps=2, point_time=0.05),
                      dup_always=False, datatype=datatype)
    with jobdir.temporary(prefix="colltune-proof-") as tmp, \
            resources.as_file(script) as script_path:
        out = Path(tmp) / "counts.json"
        job = job_env(mpi, {**env, "COLLTUNE_BREAK_SCRIPT": str(script_path),
                            "COLLTUNE_BREAK_LIST": listing, "COLLTUNE_BREAK_MATCH": match,
                            "COLLTUNE_BREAK_OUT": str(out)})
        cmd = [*launch_command(mpi, placement), "/bin/sh", "-c", _WRAP, "sh", gdb]
        outcome = run_kernel(cmd, exe, plan, job, point_timeout=timeout,
                             runs_on=mpi)
        if outcome.status != "ok" or not out.exists():
            raise MPIError(f"the proof launch (rank 0 under gdb) failed: {outcome.status} "
                           f"{outcome.message} {outcome.stderr[-400:]}".strip(),
                           "check that gdb runs here (ptrace allowed) and that the job runs "
                           "without gdb")
        counts = json.loads(out.read_text())
    return {s: valid_counts(counts.get(str(s), {})) or {} for s in sizes}


class Probes:
    """What was counted so far for one collective on one placement, by (environment, size):
    a launch only for the sizes an environment was not probed at yet (nor `known`: counts
    a store kept)."""

    def __init__(self, mpi: IntelMPI, placement: Placement, coll: str,
                 datatype: str = "double") -> None:
        self.mpi, self.placement, self.coll = mpi, placement, coll
        self.datatype = datatype  # what a reduction sums, as the tune or verify measured
        self.seen: dict[tuple[tuple[tuple[str, str], ...], int], Counts] = {}
        self.exe: Path | None = None  # built (and checked) once, not per launch

    @staticmethod
    def _key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(env.items()))

    def known(self, env: dict[str, str], size: int, counts: Counts) -> None:
        self.seen[(self._key(env), size)] = counts

    def has(self, env: dict[str, str], size: int) -> bool:
        return (self._key(env), size) in self.seen

    def counts(self, env: dict[str, str], sizes: list[int]) -> dict[int, Counts]:
        key = self._key(env)
        missing = [s for s in sizes if (key, s) not in self.seen]
        if missing:
            got = probe(self.mpi, self.placement, self.coll, missing, env, exe=self._ready(),
                        datatype=self.datatype)
            self.seen.update({(key, s): c for s, c in got.items()})
        return {s: self.seen[(key, s)] for s in sizes}

    def _ready(self) -> Path:
        """The kernel, built (and checked) once; gdb first: without it nothing is counted."""
        gdb_path()
        self.exe = self.exe or build_kernel(self.mpi)
        return self.exe

    @stage(PROOF)  # its wall time, here: the worker threads do not carry the tune's clock
    def prefetch(self, wanted: list[tuple[dict[str, str], list[int]]]) -> None:
        """Count what `wanted` lacks, PARALLEL_PROBES launches at a time: a probe times
        nothing, and what Intel MPI runs at a size does not depend on the machine's load,
        so launches may share the cores (a preset a launch: 23 for bcast, 1 s each)."""
        need: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], set[int]]] = {}
        for env, sizes in wanted:
            need.setdefault(self._key(env), (env, set()))[1].update(
                s for s in sizes if not self.has(env, s))
        todo = [(env, sorted(sizes)) for env, sizes in need.values() if sizes]
        if len(todo) < 2:
            return
        self._ready()  # once, before the threads
        with ThreadPoolExecutor(PARALLEL_PROBES) as pool:
            list(pool.map(lambda t: self.counts(*t), todo))

    def __call__(self, env: dict[str, str], sizes: list[int]
                 ) -> dict[int, Fingerprint | None]:
        return {s: fingerprint(c, self.coll) for s, c in self.counts(env, sizes).items()}

    def recall(self, envs: dict[int, dict[str, str]], sizes: list[int], store: Store,
               ctx: Context) -> None:
        """What an earlier run (or the run an import follows) counted, per preset: the
        library's own answer for this installation and placement, no launch needed."""
        stored = {k: c for k, v in store.counters(ctx).items()
                  if (c := valid_counts(v)) is not None}
        for p, env in envs.items():
            for size in sizes:
                if (c := stored.get((Config(p).key, size))) is not None:
                    self.known(env, size, c)

    def prints(self, envs: dict[int, dict[str, str]], asked: dict[int, list[int]],
               store: Store, ctx: Context) -> dict[int, dict[int, Fingerprint | None]]:
        """Each preset's fingerprints at the sizes asked of it (the launches it lacks, a
        few at a time), the new counts stored."""
        self.prefetch([(envs[p], at) for p, at in asked.items()])
        got = {p: self(envs[p], at) for p, at in asked.items()}
        if not store.readonly:
            had = store.counters(ctx)
            store.add_counts(ctx, [(Config(p).key, size, c) for p, at in asked.items()
                                   for size, c in self.counts(envs[p], at).items()
                                   if had.get((Config(p).key, size)) != c])
        return got


def presets_env(coll: str, presets: list[int]) -> dict[int, dict[str, str]]:
    """The environment that forces each preset (0: none, the library's own choice)."""
    return {p: forcing_env(coll, p) for p in presets}


def obeyed(probes: Probes, r: Rules, env: dict[str, str], sizes: list[int]
           ) -> tuple[str, str]:
    """Whether a job launched with `env` runs, at each of `sizes`, what forcing the rule's
    preset runs there, or where the rule leaves the size to the library's own table, what
    the default runs (the library's symbols: a launch for the file, the default and each
    preset, unless already probed)."""
    coll = probes.coll
    want: dict[int, list[int]] = {}
    for s in sizes:
        want.setdefault(r.preset_at(s) or 0, []).append(s)
    forcing = {p: {} if p == LIBRARY else forcing_env(coll, p) for p in want}
    probes.prefetch([(env, sizes), ({}, sizes), *((forcing[p], at) for p, at in want.items())])
    got, default = probes(env, sizes), probes({}, sizes)
    bad, same = [], 0
    for preset, at in sorted(want.items()):
        forced = probes(forcing[preset], at)
        for s in at:
            if got[s] is None or got[s] != forced[s]:
                bad.append(f"{s} B ran {describe(got[s], coll)}, " + (
                    "the default runs" if preset == LIBRARY else f"preset {preset} runs")
                    + f" {describe(forced[s], coll)}")
            elif got[s] == default[s] and preset != LIBRARY:
                same += 1
    if bad:
        return "not applied", "; ".join(bad)
    if same and same == sum(len(at) for p, at in want.items() if p != LIBRARY):
        return "unproven", ("at every size the file's preset runs the functions the default "
                            "runs: the symbols cannot tell them apart")
    return "applied", (f"Intel MPI ran the file's preset at {len(sizes)} size(s), by the "
                       "functions it called (rank 0 under gdb)" + (
                           ", and the default's own where the file leaves it to the library"
                           if LIBRARY in want else ""))
