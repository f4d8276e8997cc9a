"""The `tune` command: a thin typer layer over colltune's Python API."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from colltune.backends import registry
from colltune.backends.openmpi import find_openmpi, read_catalog, supports_rules_v2
from colltune.backends.openmpi_backend import valid_algorithms
from colltune.collectives import COLLECTIVES, get_collective
from colltune.core.records import Decision, Verdict
from colltune.errors import ColltuneError, FormatError
from colltune.launchers import Launch
from colltune.options import MeasureSettings, TuneOptions
from colltune.outfile import ensure_writable, write_atomic
from colltune.rules import mvapich2
from colltune.rules import ompi_classic as rules
from colltune.tuner.measure import Reporter
from colltune.tuner.run import TuneResult, check_repetitions, tune
from colltune.tuner.space import parse_size, parse_sizes

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure MPI collective algorithms and write rules the library obeys.")
err = Console(stderr=True, soft_wrap=True)  # one error, one line: greppable
# tables stay readable in logs and CI output, where there is no terminal to size them
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 150)


class BarReporter(Reporter):
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def begin(self, total: int, what: str) -> None:
        if self.quiet:
            return
        self.progress = Progress(TextColumn("[bold]{task.fields[what]}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.description}"), console=err, transient=False)
        self.progress.start()
        self.task = self.progress.add_task("", total=total, what=what)

    def advance(self, desc: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, advance=1, description=desc[:60])

    def note(self, text: str) -> None:
        if not self.quiet or text.startswith("warning"):
            err.print(text, highlight=False, markup=False)

    def end(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _fail(e: ColltuneError) -> None:
    err.print(f"error: {e.message}", highlight=False, markup=False)
    if e.hint:
        err.print(f"  what to do: {e.hint}", highlight=False, markup=False)
    raise typer.Exit(2)


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ColltuneError(f"cannot read {what} '{text}'",
                            f"give whole numbers separated by commas, e.g. {what} 2,4") from None
    if not vals:
        raise ColltuneError(f"no value given for {what}", f"e.g. {what} 4")
    return vals


def _print_result(res: TuneResult, quiet: bool) -> None:
    if quiet:
        return
    for name, per_np in res.decisions.items():
        for np, ds in per_np.items():
            t = Table(title=f"{name}, {np} ranks ({res.mpi.name} {res.mpi.version})")
            for col in ("size/rank", "lookup", "chosen", "best us", "default us", "sweep",
                        "fresh", "verdict"):
                t.add_column(col)
            for d in ds:
                t.add_row(
                    str(d.size) if d.size >= 0 else "all", str(d.lookup_size),
                    d.chosen.label(res.catalog, name),
                    f"{d.best_median * 1e6:.2f}" if d.best_median and d.size >= 0 else "-",
                    f"{d.default_median * 1e6:.2f}" if d.default_median and d.size >= 0 else "-",
                    f"{d.speedup:.2f}x" if d.speedup else "-",
                    ", ".join(_fresh(v) for v in d.confirmations) or "-",
                    d.verdict + ("!" if d.warning else ""))
            out.print(t)
            _print_warnings(ds)
            if any(d.simulated for d in ds):
                out.print("simulated (deterministic) times: tuned = at least 3% faster than the "
                          "default (SMPI's port of an older coll/tuned decision); no test, no "
                          "fresh launches needed; kept = less than 3% faster")
                continue
            out.print("sweep: default/best median in the sweep; fresh: default/chosen, geometric "
                      "mean over fresh launch pairs, per timing mode (iso: one call after a "
                      "barrier, b2b: calls back to back); a choice must win in every mode")
            out.print("verdict: tuned = significantly faster, confirmed in fresh launches; "
                      "refuted = faster in the sweep, not in fresh launches (default kept); "
                      "kept = no significant win; default = the default was best; "
                      "tuned? = not confirmed (--confirm-rounds 0 or --from-db)")
    if res.failures:
        err.print(f"{len(res.failures)} point(s) excluded:", highlight=False)
        for f in res.failures[:20]:
            err.print(f"  {f}", highlight=False, markup=False)


def _fresh(v: Verdict) -> str:
    if not v.modes:
        return f"{v.launch_speedup:.2f}x"
    short = {"isolated": "iso", "back-to-back": "b2b"}
    return " ".join(f"{short.get(m, m)} {float(x['launch_speedup']):.2f}x"  # type: ignore[arg-type]
                    for m, x in sorted(v.modes.items(), key=lambda kv: kv[0] != "isolated"))


def _print_warnings(ds: list[Decision]) -> None:
    for d in ds:
        if d.warning:
            out.print(f"! {d.size if d.size >= 0 else 'all'} B: {d.warning}", highlight=False,
                      markup=False)


def _backend_for(backend: str, out_format: str | None) -> str:
    """--format names what to write; each format comes from one MPI family."""
    try:
        return registry.for_format(backend, out_format)
    except ColltuneError as e:
        _fail(e)
        raise


def _run_tune(collectives: list[str], np: str, out_path: Path | None, mpi: str | None,
              db: Path | None, sizes: str | None, segsizes: str | None,
              strategy: str, sweep: str, rules_version: int | None, from_db: bool,
              hostfile: str | None, summary_json: Path | None, quiet: bool,
              timeout: float, point_time: float, rel_ci: float, min_reps: int, max_reps: int,
              seed: int, confirm_rounds: int, budget: int | None = None,
              ei_stop: float = 0.0005, top_k: int = 3, predict: bool = False,
              fit_np: str = "2,3,4", launch: Launch | None = None,
              backend: str = "openmpi", platform: Path | None = None,
              tune_han: bool = False, for_np: int | None = None,
              timing: str = "both", window: int = 64, objective: str = "completion") -> None:
    try:
        opts = TuneOptions(
            backend=backend, platform=platform, tune_han=tune_han, for_np=for_np,
            collectives=collectives, nps=_ints(np, "--np"), out=out_path, mpi=mpi, db=db,
            sizes=parse_sizes(sizes) if sizes else None,
            segsizes=[parse_size(s) for s in segsizes.split(",")] if segsizes else None,
            strategy=strategy, budget=budget, ei_stop=ei_stop, top_k=top_k, sweep=sweep,
            predict=predict, fit_nps=_ints(fit_np, "--fit-np"), launch=launch,
            rules_version=rules_version, from_db=from_db,
            hostfile=hostfile, summary_json=summary_json, confirm_rounds=confirm_rounds,
            settings=MeasureSettings(min_reps=min_reps, max_reps=max_reps, rel_ci=rel_ci,
                                     point_time=point_time, seed=seed, timeout=timeout,
                                     timing=timing, window=window, objective=objective),
        )
        res = tune(opts, BarReporter(quiet))
    except ColltuneError as e:
        _fail(e)
        return
    _print_result(res, quiet)
    han = res.summary.get("han")
    if out_path and isinstance(han, dict) and not quiet:
        err.print(f"wrote {out_path} (coll/han's dynamic rules) and {han['mca_params']}; use: "
                  f"mpirun --mca mca_base_param_files {han['mca_params']} ...",
                  highlight=False, markup=False)
        for n in han["notes"]:
            err.print(f"note: {n}", highlight=False, markup=False)
    elif out_path and isinstance(res.summary.get("mpich"), dict) and not quiet:
        prof = res.summary["mpich"]["env_profile"]  # type: ignore[index]
        err.print(f"wrote {out_path} (MPICH tuning file) and {prof}; use: source {prof} "
                  "(or set its variables) before mpiexec", highlight=False, markup=False)
    elif out_path and isinstance(res.summary.get("mvapich2"), dict) and not quiet:
        mv2 = res.summary["mvapich2"]
        assert isinstance(mv2, dict)
        err.print(f"wrote {out_path} (MVAPICH2 profile for {mv2['for_np']} ranks); use: "
                  f"MV2_USER_CONFIG={out_path} mpiexec ..., or tune export --site",
                  highlight=False, markup=False)
        for n in mv2["notes"]:
            err.print(f"note: {n}", highlight=False, markup=False)
    elif out_path and not quiet:
        err.print(f"wrote {out_path} (format: "
                  f"{'rule-file-version-2' if res.rules_version == 2 else 'classic'})",
                  highlight=False, markup=False)


def _write_slurm_script(name: str, np: str, sizes: str | None, segsizes: str | None,
                        nodes: int | None, ppn: int | None, point_time: float,
                        path: Path) -> None:
    from colltune.backends.openmpi import builtin_catalog
    from colltune.slurm_script import render
    from colltune.tuner.space import configurations, sizes_for, useful_at

    try:
        nps = _ints(np, "--np")
        names = sorted(COLLECTIVES) if name == "all" else [get_collective(name).name]
        size_list = parse_sizes(sizes) if sizes else None
        segs = [parse_size(x) for x in segsizes.split(",")] if segsizes else None
        cat = builtin_catalog()  # the plan's size; the batch job reads the real catalog
        points = sum(1 for n in names for p in nps
                     for c in configurations(get_collective(n), cat, p, segs)
                     for sz in sizes_for(get_collective(n), p, size_list)
                     if useful_at(c, sz, get_collective(n), p))
        args = sys.argv[1:]
        i = args.index("--slurm-script")
        args = args[:i] + args[i + 2:]
        text = render(args, max(nps), nodes, ppn, points, point_time,
                      launches=len(names) * len(nps), name=f"colltune-{name}")
        ensure_writable(path, "--slurm-script")
        write_atomic(path, text)
        path.chmod(0o755)
    except (ColltuneError, ValueError) as e:
        _fail(e if isinstance(e, ColltuneError) else
              ColltuneError(f"cannot write the batch script: {e}", "check the options"))
        return
    err.print(f"wrote {path}: submit it with sbatch {path}", highlight=False, markup=False)


TIMING_OPTION = typer.Option(
    "both", "--timing", help="isolated (one call after a barrier), back-to-back (a window of "
                             "consecutive calls, as an application loop makes them) or both "
                             "(a win must hold in each; docs/methodology.md).")
WINDOW_OPTION = typer.Option(64, "--window", help="Calls per back-to-back window (fewer "
                                                  "where they would take over 10 ms).")
OBJECTIVE_OPTION = typer.Option(
    "completion", "--objective", help="What a repetition's time is: completion (slowest "
                                      "rank), mean (over ranks, as OSU prints) or root.")


def _make_tune_command(name: str) -> None:
    help_text = ("Tune every collective." if name == "all" else
                 f"Measure {name} algorithms and write Open MPI rules.")

    def command(
        np: str = typer.Option("4", "--np", help="Communicator size(s), e.g. 4 or 2,4."),
        out_path: Path | None = typer.Option(None, "--out", "-o",
                                                help="Rules file to write (merged if it exists)."),
        mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
        backend: str = typer.Option(
            "openmpi", "--backend", help="openmpi, mpich or mvapich2 (run it), or smpi "
                                         "(simulate Open MPI's algorithms on --platform "
                                         "with SimGrid)."),
        out_format: str | None = typer.Option(
            None, "--format", help="openmpi (coll/tuned rules), mpich (MPICH's tuning "
                                   "JSON at --out and an environment profile beside it; "
                                   "implies --backend mpich; mvapich4 is the same), or "
                                   "mvapich2 (MV2_ profile; "
                                   "implies --backend mvapich2); both need --mpi PREFIX."),
        for_np: int | None = typer.Option(
            None, "--for-np", help="mvapich2: the --np whose decisions the profile holds "
                                   "(MVAPICH2 has one table for every communicator size; "
                                   "default: the largest)."),
        platform: Path | None = typer.Option(None, "--platform",
                                             help="smpi: SimGrid platform XML to simulate."),
        tune_han: bool = typer.Option(
            False, "--tune-han", help="Open MPI 5 across nodes: tune coll/han's own choices "
                                      "(flat tuned or han, han's algorithm, its level "
                                      "modules); --out gets han's rules file and an MCA "
                                      "parameter file beside it."),
        db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
        sizes: str | None = typer.Option(None, "--sizes", help="Per-rank sizes: 8,1K,1M."),
        segsizes: str | None = typer.Option(None, "--segsizes", help="Segment sizes: 0,4K."),
        strategy: str = typer.Option(
            "grid", "--strategy", help="grid (every point), race (successive halving per "
                                       "size), bayes (Gaussian process, expected improvement) "
                                       "or model (a race among the fitted model's "
                                       "shortlist per size: its --top-k and each "
                                       "algorithm's best-predicted variant)."),
        budget: int | None = typer.Option(
            None, "--budget", help="Per collective and --np: bayes measures at most this many "
                                   "(configuration, size) points, defaults included; race "
                                   "spends at most this many repetitions."),
        top_k: int = typer.Option(3, "--top-k", help="model: configurations predicted "
                                                     "fastest that join each algorithm's "
                                                     "best-predicted one in the race."),
        predict: bool = typer.Option(False, "--predict",
                                     help="--np cannot run here: measure at --fit-np, fit the "
                                          "cost models, write rules predicted for --np."),
        fit_np: str = typer.Option("2,3,4", "--fit-np",
                                   help="With --predict: communicator sizes measured."),
        ei_stop: float = typer.Option(0.0005, "--ei-stop",
                                      help="bayes stops when no point is expected to improve "
                                           "on its size's best by this (log ratio)."),
        sweep: str = typer.Option("mpit", "--sweep", help="mpit (one launch) or relaunch."),
        rules_version: int | None = typer.Option(None, "--rules-version",
                                                    help="1 classic, 2 rule-file-version-2."),
        from_db: bool = typer.Option(False, "--from-db", help="Decide from stored data only."),
        hostfile: str | None = typer.Option(None, "--hostfile", help="Open MPI hostfile."),
        launcher: str | None = typer.Option(None, "--launcher",
                                            help="mpirun or srun (default: srun inside a "
                                                 "Slurm allocation, else mpirun)."),
        nodes: int | None = typer.Option(None, "--nodes", help="Nodes to spread ranks over."),
        ppn: int | None = typer.Option(None, "--ppn", help="Ranks per node."),
        launcher_args: str = typer.Option("", "--launcher-args",
                                          help="More launcher options, passed as they are."),
        slurm_script: Path | None = typer.Option(
            None, "--slurm-script", help="Write a Slurm batch script that runs this tuning "
                                         "in an allocation, instead of running it now."),
        summary_json: Path | None = typer.Option(None, "--summary-json",
                                                    help="Write decisions as JSON."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress or tables."),
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds without progress "
                                                              "before a launch is killed."),
        point_time: float = typer.Option(0.25, "--point-time",
                                         help="Time budget per (config, size) in seconds."),
        rel_ci: float = typer.Option(0.05, "--rel-ci", help="Target CI half-width / median."),
        min_reps: int = typer.Option(7, "--min-reps"),
        max_reps: int = typer.Option(400, "--max-reps"),
        seed: int = typer.Option(1, "--seed", help="Seed of the measurement order."),
        confirm_rounds: int = typer.Option(4, "--confirm-rounds",
                                           help="Fresh default/tuned launch pairs that must "
                                                "confirm each win (0: skip)."),
        timing: str = TIMING_OPTION,
        window: int = WINDOW_OPTION,
        objective: str = OBJECTIVE_OPTION,
    ) -> None:
        if slurm_script is not None:
            _write_slurm_script(name, np, sizes, segsizes, nodes, ppn, point_time,
                                slurm_script)
            return
        _run_tune([name], np, out_path, mpi, db, sizes, segsizes, strategy, sweep,
                  rules_version, from_db, hostfile, summary_json, quiet, timeout, point_time,
                  rel_ci, min_reps, max_reps, seed, confirm_rounds, budget, ei_stop, top_k,
                  predict, fit_np, Launch(launcher, nodes, ppn,
                                          tuple(shlex.split(launcher_args))),
                  _backend_for(backend, out_format), platform, tune_han, for_np,
                  timing, window, objective)

    command.__doc__ = help_text
    app.command(name=name, help=help_text)(command)


for _name in [*sorted(COLLECTIVES), "all"]:
    _make_tune_command(_name)


@app.command("check")
def check_cmd(
    path: Path = typer.Argument(..., help="Rules file or MVAPICH2 profile to validate."),
    ompi_version: str | None = typer.Option(None, "--ompi-version",
                                               help="Validate for this Open MPI version."),
    mpi: str | None = typer.Option(None, "--mpi", help="Validate against this installation."),
) -> None:
    """Validate a rules file or profile the way the library reads it; report what it would
    drop or crash on."""
    try:
        if mvapich2.looks_like_profile(path):
            prof = mvapich2.read(path)
            n = sum(1 for v in prof.settings if v in mvapich2.TUNING_VARS)
            out.print(f"{path}: OK (MVAPICH2 profile, {len(prof.settings)} variable(s), "
                      f"{n} tuning table(s))", highlight=False)
            return
        valid = None
        allow_v2: bool | None = None
        if ompi_version:
            allow_v2 = supports_rules_v2(tuple(int(x) for x in re.findall(r"\d+",
                                                                          ompi_version)[:3]))
        elif mpi:
            inst = find_openmpi(mpi)
            allow_v2 = supports_rules_v2(inst.version_tuple)
            valid = valid_algorithms(read_catalog(inst))
        rf = rules.read(path, valid_algs=valid, allow_v2=allow_v2)
    except FormatError as e:
        err.print(f"error: {e}", highlight=False, markup=False)
        err.print("  what to do: fix that line; the library would ignore the whole file or "
                  "fail at start-up", highlight=False, markup=False)
        raise typer.Exit(1) from None
    except ColltuneError as e:
        _fail(e)
        return
    n = sum(len(s.rules) for secs in rf.collectives.values() for s in secs)
    out.print(f"{path}: OK ({'rule-file-version-2' if rf.version == 2 else 'classic'} format, "
              f"{len(rf.collectives)} collective(s), {n} rule(s))", highlight=False)


@app.command("explain")
def explain_cmd(
    path: Path = typer.Argument(..., help="Rules file."),
    collective: str = typer.Option(..., "--collective", "-c"),
    np: int = typer.Option(..., "--np"),
    size: str = typer.Option(..., "--size", help="Size Open MPI compares, in bytes (4K ok)."),
) -> None:
    """Say which rule Open MPI applies to a call."""
    try:
        coll = get_collective(collective)
        nbytes = parse_size(size)
        rf = rules.read(path)
    except rules.RulesError as e:
        err.print(f"error: {e}", highlight=False, markup=False)
        err.print(f"  what to do: run 'tune check {path}' and fix that line; Open MPI would "
                  "ignore the whole file", highlight=False, markup=False)
        raise typer.Exit(1) from None
    except ColltuneError as e:
        _fail(e)
        return
    hit = rules.lookup(rf, coll.ompi_id, np, nbytes)
    if hit is None:
        out.print(f"{path} has no rules for {coll.name}: Open MPI uses its fixed decision")
        return
    sec, r = hit
    what = "Open MPI's fixed decision" if r.alg == 0 else f"algorithm {r.alg}"
    out.print(f"{coll.name}, {np} ranks, {nbytes} B: line {r.line}: comm-size section "
              f"{sec.comsize}, rule from {r.msgsize} B -> {what}, fan in/out {r.faninout}, "
              f"segment size {r.segsize}" + (f", max requests {r.maxreq}" if r.maxreq else ""),
              highlight=False)


@app.command("import-osu")
def import_osu_cmd(
    paths: list[Path] = typer.Argument(..., help="OSU output files, one run per file."),
    np: int = typer.Option(..., "--np", help="Ranks the OSU runs used."),
    algorithm: int | None = typer.Option(None, "--algorithm", "-a",
                                         help="Algorithm of every file (default: from each "
                                              "file name: alg<N> or 'default')."),
    mpi: str | None = typer.Option(None, "--mpi", help="The Open MPI the runs used."),
    db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
    out_path: Path | None = typer.Option(None, "--out", "-o", help="Rules file to write."),
    summary_json: Path | None = typer.Option(None, "--summary-json"),
    rules_version: int | None = typer.Option(None, "--rules-version"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Store OSU results, decide per size and write rules, as if measured here."""
    from colltune.osu_import import import_osu

    try:
        if rules_version not in (None, 1, 2):
            raise ColltuneError(f"unknown --rules-version {rules_version}", "use 1 or 2")
        res = import_osu(paths, np, algorithm, mpi, db, out_path, summary_json, rules_version)
    except ColltuneError as e:
        _fail(e)
        return
    _print_result(res, quiet)
    if out_path and not quiet:
        err.print(f"wrote {out_path}", highlight=False, markup=False)


@app.command("verify")
def verify_cmd(
    path: Path = typer.Argument(..., help="Rules file to verify."),
    np: int = typer.Option(4, "--np", help="Communicator size."),
    collective: list[str] | None = typer.Option(None, "--collective", "-c",
                                                help="Only these (default: all in the file)."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
    sizes: str | None = typer.Option(None, "--sizes", help="Per-rank sizes: 8,1K,1M."),
    rounds: int = typer.Option(6, "--rounds", help="Default/rules launch pairs."),
    point_time: float = typer.Option(0.15, "--point-time", help="Seconds per size and launch."),
    with_: str | None = typer.Option(None, "--with", help="osu: also run OSU benchmarks."),
    osu_dir: Path | None = typer.Option(None, "--osu-dir", help="Where osu_<coll> live."),
    hostfile: str | None = typer.Option(None, "--hostfile"),
    json_out: Path | None = typer.Option(None, "--json", help="Write the results as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    timing: str = TIMING_OPTION,
    window: int = WINDOW_OPTION,
    objective: str = OBJECTIVE_OPTION,
) -> None:
    """Default vs the rules file in fresh interleaved launches; exit 1 on any regression or
    if Open MPI does not apply the file."""
    from colltune.kernel.launch import Repetitions
    from colltune.verify import report_json, verify

    try:
        if with_ not in (None, "osu"):
            raise ColltuneError(f"unknown --with {with_}", "use --with osu")
        if point_time <= 0:
            raise ColltuneError("--point-time must be more than 0", "e.g. --point-time 0.15")
        if json_out is not None:
            ensure_writable(json_out, "--json")
        reps = Repetitions(min_reps=15, point_time=point_time, timing=timing, window=window,
                           objective=objective)
        check_repetitions(reps)
        rep = verify(path, np, mpi, collective or None, parse_sizes(sizes) if sizes else None,
                     rounds, reps,
                     with_osu=with_ == "osu", osu_dir=osu_dir, hostfile=hostfile,
                     note=(lambda s: None) if quiet else
                     (lambda s: err.print(s, highlight=False, markup=False)))
    except ColltuneError as e:
        _fail(e)
        return
    for c in rep.checks:
        mark = {"applied": "applied", "default everywhere": "applied (default everywhere)"}
        out.print(f"{c.collective}, {c.np} ranks: {mark.get(c.applied, c.applied.upper())}: "
                  f"{c.applied_detail}", highlight=False)
        for source, rows in (("kernel", c.kernel), ("OSU", c.osu)):
            if not rows:
                continue
            t = Table(title=f"{c.collective}, {c.np} ranks, {source} "
                            f"({rep.mpi.name} {rep.mpi.version})")
            modes = sorted({m for r in rows for m in r.modes})
            for col in ("size/rank", "lookup", "rule", "default us (95% CI)",
                        "rules us (95% CI)", "rules/default",
                        *(f"{m} rules/default" for m in modes), "verdict"):
                t.add_column(col)
            for r in rows:
                t.add_row(str(r.size), str(r.lookup_size), r.rule,
                          f"{r.default_median * 1e6:.2f} ({r.default_ci[0] * 1e6:.2f}-"
                          f"{r.default_ci[1] * 1e6:.2f})",
                          f"{r.tuned_median * 1e6:.2f} ({r.tuned_ci[0] * 1e6:.2f}-"
                          f"{r.tuned_ci[1] * 1e6:.2f})",
                          f"{r.ratio:.3f}",
                          *(_mode_cell(r.modes.get(m)) for m in modes),
                          r.verdict.upper() if r.verdict == "slower" else r.verdict)
            out.print(t)
            for r in rows:
                if r.note:
                    out.print(f"  {r.size} B: {r.note}", highlight=False)
        sp = f"{c.speedup:.3f}x (kernel)" if c.speedup else ""
        if c.osu_speedup:
            sp += f", {c.osu_speedup:.3f}x (OSU)"
        out.print(f"{c.collective}: geometric-mean speed-up {sp}; "
                  f"{sum(r.verdict == 'faster' for r in c.kernel)} faster, "
                  f"{sum(r.verdict == 'same' for r in c.kernel)} same, "
                  f"{sum(r.verdict == 'slower' for r in c.kernel)} slower", highlight=False)
    out.print("rules/default: geometric mean over launch pairs of the ratio of launch medians;"
              " faster/slower: paired t-test over launch pairs, Holm-corrected over all sizes "
              "and timing modes (family-wise p < 0.05), and >= 3%; faster only if faster in "
              "every mode, slower if slower in any; either must reproduce in a recheck",
              highlight=False)
    if json_out is not None:
        write_atomic(json_out, report_json(rep))
    if rep.failed:
        bad = [f"{c.collective} {r.size} B{src}" for c in rep.checks
               for src, rows in (("", c.kernel), (" (OSU)", c.osu))
               for r in rows if r.verdict == "slower"]
        bad += [f"{c.collective} not applied" for c in rep.checks if c.applied == "not applied"]
        err.print(f"verify failed: {', '.join(bad)}", highlight=False, markup=False)
        raise typer.Exit(1)


def _mode_cell(m: dict[str, object] | None) -> str:
    return "" if m is None else f"{float(m['ratio']):.3f} {m['verdict']}"  # type: ignore[arg-type]


def _selection(collective: list[str] | None, np: str | None) -> tuple[list[str] | None,
                                                                     list[int] | None]:
    colls = [get_collective(c).name for c in collective] if collective else None
    return colls, (_ints(np, "--np") if np else None)


@app.command("report")
def report_cmd(
    out_dir: Path = typer.Option(..., "--out", "-o", help="Directory for the report."),
    db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
    collective: list[str] | None = typer.Option(None, "--collective", "-c"),
    np: str | None = typer.Option(None, "--np", help="Only these communicator sizes."),
    rules_file: list[Path] | None = typer.Option(None, "--rules",
                                                 help="Rules file(s) to show verbatim."),
) -> None:
    """HTML page with plots (PNG, SVG) and CSV exports of everything in the store."""
    from colltune.report import load, write_report
    from colltune.store import Store, default_db_path

    try:
        colls, nps = _selection(collective, np)
        entries = load(db or default_db_path(), colls, nps)
        store = Store(db or default_db_path(), readonly=True)
        try:
            fits = store.models()
        finally:
            store.close()
        page = write_report(entries, out_dir, rules_file, fits)
    except ColltuneError as e:
        _fail(e)
        return
    out.print(f"wrote {page}", highlight=False)


@app.command("show")
def show_cmd(
    db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
    collective: list[str] | None = typer.Option(None, "--collective", "-c"),
    np: str | None = typer.Option(None, "--np", help="Only these communicator sizes."),
) -> None:
    """The decisions the store supports, as terminal tables."""
    from colltune.report import load
    from colltune.store import default_db_path

    try:
        colls, nps = _selection(collective, np)
        entries = load(db or default_db_path(), colls, nps)
    except ColltuneError as e:
        _fail(e)
        return
    for en in entries:
        t = Table(title=f"{en.title} on {en.ctx.host}, {en.first} .. {en.last}")
        for col in ("size/rank", "lookup", "default us", "best", "best us", "speed-up",
                    "chosen", "verdict"):
            t.add_column(col)
        for d in en.decisions:
            t.add_row(str(d.size) if d.size >= 0 else "all", str(d.lookup_size),
                      f"{d.default_median * 1e6:.2f}" if d.default_median else "-",
                      d.best.label(en.catalog, en.ctx.collective) if d.best else "-",
                      f"{d.best_median * 1e6:.2f}" if d.best_median else "-",
                      f"{d.default_median / d.best_median:.2f}x"
                      if d.default_median and d.best_median else "-",
                      d.chosen.label(en.catalog, en.ctx.collective),
                      d.verdict + ("!" if d.warning else ""))
        out.print(t)
        _print_warnings(en.decisions)


@app.command("export")
def export_cmd(
    source: Path = typer.Option(..., "--from", help="Open MPI rules file, MPICH tuning file "
                                                    "or profile, MVAPICH2 profile, or "
                                                    "measurement store (.sqlite) to install."),
    site: Path | None = typer.Option(None, "--site", help="Directory for the site profile."),
    user: bool = typer.Option(False, "--user", help="Into your home (~/.openmpi, "
                                                    "~/.mvapich2.conf, ~/.config/colltune "
                                                    "for MPICH) instead."),
    force: bool = typer.Option(False, "--force", help="Replace files that exist."),
    as_format: str | None = typer.Option(
        None, "--as", help="mvapich3: carry an MVAPICH2 profile over to MVAPICH 3's MVP_ "
                           "variables (one algorithm each)."),
    for_size: str | None = typer.Option(
        None, "--for-size", help="With --as mvapich3: the message size whose algorithm a "
                                 "size-dependent MVAPICH2 table keeps."),
) -> None:
    """Write what an administrator installs once (or a user in their home): the tuning
    file, the MPI's own parameter file pointing at it, and environment modules (Tcl, Lua)."""
    from colltune.export import export

    try:
        written = export(source, site, user, force, None, as_format,
                         parse_size(for_size) if for_size else None)
    except ColltuneError as e:
        _fail(e)
        return
    for p in written:
        out.print(f"wrote {p.path}  ({p.what})", highlight=False, markup=False)


model_app = typer.Typer(no_args_is_help=True, help="Cost models: fit Hockney and LogGP.")
app.add_typer(model_app, name="model")


def _model_table(title: str, rows: Sequence[tuple[str, ...]], head: tuple[str, ...]) -> None:
    t = Table(title=title)
    for col in head:
        t.add_column(col)
    for r in rows:
        t.add_row(*r)
    out.print(t)


def _print_models(label: str, hockney: dict, loggp: dict) -> None:  # type: ignore[type-arg]
    def us(x: float) -> str:
        return f"{x * 1e6:.3f}"

    def gbs(per_byte: float) -> str:
        return f"{1e-9 / per_byte:.2f}" if per_byte > 0 else "inf"

    hq, lq = hockney["quality"], loggp["quality"]
    busy = " with every rank busy" if hockney.get("loaded") else ""
    _model_table(
        f"Hockney, {label} (ping-pong{busy} fit: R^2 {hq['r2']:.3f}, median error "
        f"{100 * hq['median_rel']:.1f}%; gamma fit R^2 {hockney['gamma_quality']['r2']:.3f})",
        [(f"{p['lo']}..{p['hi']}", us(p["a"]), f"{p['b'] * 1e9:.4f}", gbs(p["b"]),
          f"{hockney['gamma'] * 1e9:.4f}") for p in hockney["pieces"]],
        ("bytes", "alpha us", "beta ns/B", "GB/s", "gamma ns/B"))
    _model_table(
        f"LogGP, {label} (ping-pong: R^2 {lq['r2']:.3f}, median error "
        f"{100 * lq['median_rel']:.1f}%)",
        [(f"{p['lo']}..{p['hi']}", us(p["L"]), us(p["o"]), us(p["g"]), f"{p['G'] * 1e9:.4f}")
         for p in loggp["pieces"]],
        ("bytes", "L us", "o us", "g us", "G ns/B"))
    if hockney.get("exchange"):
        _model_table(
            f"Pairwise exchange, {label} (every rank sending and receiving at once; both "
            "models price the exchanging steps of rings, recursive doubling, Bruck with it)",
            [(f"{p['lo']}..{p['hi']}", us(p["a"]), f"{p['b'] * 1e9:.4f}", gbs(p["b"]))
             for p in hockney["exchange"]],
            ("bytes", "alpha us", "beta ns/B", "GB/s"))


@model_app.command("fit")
def model_fit_cmd(
    np: int = typer.Option(2, "--np", help="Ranks; rank 0 probes each other rank."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
    db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
    max_size: str = typer.Option("1M", "--max-size", help="Largest message probed."),
    reps: int = typer.Option(50, "--reps", help="Repetitions per probe and size (median)."),
    hostfile: str | None = typer.Option(None, "--hostfile", help="Open MPI hostfile."),
    launcher: str | None = typer.Option(None, "--launcher", help="mpirun or srun."),
    nodes: int | None = typer.Option(None, "--nodes", help="Nodes to spread ranks over."),
    ppn: int | None = typer.Option(None, "--ppn", help="Ranks per node."),
    launcher_args: str = typer.Option("", "--launcher-args",
                                      help="More launcher options, passed as they are."),
) -> None:
    """Probe point-to-point costs (ping-pong, overheads, trains, local reduction; the
    ping-pong and reduction with every rank busy, and a train of ring exchanges) and fit
    Hockney and LogGP; parameters and fit quality go to the store. When the ranks span
    nodes, pairs inside a node and across nodes are also fitted apart."""
    from colltune.models.calibrate import calibrate
    from colltune.store import Store, default_db_path

    try:
        size = parse_size(max_size)
        if not 8 <= size <= 1 << 30 or not 1 <= reps <= 100000:
            raise ColltuneError("--max-size must be 8 B to 1 GiB and --reps 1 to 100000",
                                "e.g. --max-size 1M --reps 50")
        store = Store(db or default_db_path())
        try:
            cal = calibrate(store, mpi, np, size, reps, hostfile,
                            Launch(launcher, nodes, ppn, tuple(shlex.split(launcher_args))))
        finally:
            store.close()
    except ColltuneError as e:
        _fail(e)
        return
    _print_models(f"{cal.mpi}, {np} ranks on {cal.data.host}", cal.hockney.as_json(),
                  cal.loggp.as_json())
    for label, (h, lg) in cal.apart.items():
        _print_models(f"pairs {'inside a node' if label == 'intra' else 'across nodes'}",
                      h.as_json(), lg.as_json())


@model_app.command("show")
def model_show_cmd(
    db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
) -> None:
    """The fitted models in the store."""
    from colltune.store import Store, default_db_path

    try:
        store = Store(db or default_db_path(), readonly=True)
        try:
            fits = store.models()
        finally:
            store.close()
        if not fits:
            raise ColltuneError("no fitted models in the store", "run `tune model fit` first")
    except ColltuneError as e:
        _fail(e)
        return
    by: dict[tuple[str, str, int], dict[str, dict]] = {}  # type: ignore[type-arg]
    for f in fits:
        by.setdefault((f.mpi_version, f.host, f.np), {})[f.model] = f.params
    for (version, host, np), ms in sorted(by.items()):
        for suffix, what in (("", ""), ("-intra", ", pairs inside a node"),
                             ("-inter", ", pairs across nodes")):
            if f"hockney{suffix}" in ms and f"loggp{suffix}" in ms:
                _print_models(f"MPI {version}, {np} ranks on {host}{what}",
                              ms[f"hockney{suffix}"], ms[f"loggp{suffix}"])


@model_app.command("predict")
def model_predict_cmd(
    collective: str = typer.Option(..., "--collective", "-c"),
    np: int = typer.Option(..., "--np", help="Communicator size (any: nothing is launched)."),
    size: str = typer.Option(..., "--size", help="Per-rank block, e.g. 64K."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
    db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
    model: str = typer.Option("hockney", "--model", help="Rank by hockney or loggp."),
    top: int = typer.Option(0, "--top", help="Show only the first N (0: all)."),
) -> None:
    """Every algorithm's predicted time, ranked, from the fitted models."""
    from colltune.backends.openmpi import find_openmpi, read_catalog
    from colltune.collectives import get_collective
    from colltune.models.predict import MODELS, load_models, predict
    from colltune.store import Store, default_db_path

    try:
        if model not in MODELS:
            raise ColltuneError(f"unknown model '{model}'", "use --model hockney or loggp")
        if np < 2:
            raise ColltuneError("--np must be at least 2", "e.g. --np 512")
        coll = get_collective(collective)
        nbytes = parse_size(size)
        ompi = find_openmpi(mpi)
        catalog = read_catalog(ompi)
        store = Store(db or default_db_path())
        try:
            models = load_models(store, ompi)
        finally:
            store.close()
        preds = predict(models, coll, catalog, np, nbytes, rank_by=model)
    except ColltuneError as e:
        _fail(e)
        return
    rows = [(str(i + 1), p.config.label(catalog, coll.name), f"{p.hockney * 1e6:.2f}",
             f"{p.loggp * 1e6:.2f}") for i, p in enumerate(preds[: top or None])]
    _model_table(f"{coll.name}, {np} ranks, {nbytes} B per rank: predicted, ranked by "
                 f"{model} ({models.source})", rows, ("rank", "configuration", "Hockney us",
                                                       "LogGP us"))


@model_app.command("validate")
def model_validate_cmd(
    collective: list[str] = typer.Option(..., "--collective", "-c"),
    np: int = typer.Option(4, "--np", help="Communicator size measured."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
    db: Path | None = typer.Option(None, "--db", help="SQLite measurement store."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the report as JSON."),
) -> None:
    """Predicted against measured (from `tune <collective>` runs in the store): median and
    worst relative error per algorithm and model, and how often each model's pick is within
    5% of the measured best."""
    import json

    from colltune.backends.openmpi import find_openmpi, read_catalog
    from colltune.collectives import get_collective
    from colltune.models.predict import MODELS, load_models
    from colltune.models.validate import validate
    from colltune.outfile import write_atomic
    from colltune.slots import place
    from colltune.store import Store, default_db_path
    from colltune.tuner.measure import context_for

    reports = []
    try:
        ompi = find_openmpi(mpi)
        catalog = read_catalog(ompi)
        store = Store(db or default_db_path())
        try:
            models = load_models(store, ompi)
            for name in collective:
                coll = get_collective(name)
                ms = store.measurements(context_for(ompi, coll, place(np)))
                if not ms:
                    raise ColltuneError(f"no measurements of {name} at np={np} in the store",
                                        f"run `tune {name} --np {np}` first")
                reports.append(validate(models, coll, catalog, np, ms))
        finally:
            store.close()
        if json_out:
            write_atomic(json_out, json.dumps([r.as_json() for r in reports], indent=1))
    except ColltuneError as e:
        _fail(e)
        return
    for r in reports:
        rows = [(a.algorithm, str(a.points),
                 *(f"{100 * a.median[k]:.0f}% / {100 * a.worst[k]:.0f}%" for k in MODELS))
                for a in r.per_algorithm]
        rows.append(("all", str(sum(a.points for a in r.per_algorithm)),
                     *(f"{100 * r.overall_median[k]:.0f}%" for k in MODELS)))
        rows.append(("model's pick within 5% of the measured best", str(r.sizes),
                     *(f"{r.picks_within[k]}/{r.sizes}" for k in MODELS)))
        _model_table(f"{r.collective}, {r.np} ranks: relative error, median / worst "
                     f"({models.source})", rows, ("algorithm", "points", "Hockney", "LogGP"))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted: finished measurements are in the store; rerun to resume")
        sys.exit(130)


if __name__ == "__main__":
    main()
