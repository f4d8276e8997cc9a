"""`tune runtime`: tune job-wide runtime parameters (binding, eager limits, collective
components) for an application or a collective, and prove a written file applied."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from colltune import jobdir
from colltune.backends.registry import CHOICES
from colltune.cli.common import (
    HOSTFILE_OPTION,
    LAUNCHER_ARGS_OPTION,
    LAUNCHER_OPTION,
    NODES_OPTION,
    PPN_OPTION,
    _fail,
    app,
    err,
    json_to_stdout,
    launch_of,
    out,
    write_json,
)
from colltune.errors import ColltuneError
from colltune.outfile import ensure_writable


def _values(specs: list[str]) -> dict[str, list[str]]:
    """`--param NAME=V1,V2` options."""
    got: dict[str, list[str]] = {}
    for spec in specs:
        name, eq, vals = spec.partition("=")
        if not eq or not name.strip() or not vals.strip():
            raise ColltuneError(f"--param {spec[:60]!r}: not NAME=V1,V2",
                                "e.g. --param btl_vader_eager_limit=4k,16k")
        got.setdefault(name.strip(), []).extend(v for v in vals.split(",") if v.strip())
    return got


@app.command("runtime", context_settings={"allow_interspersed_args": False})
def runtime_cmd(
    command: list[str] = typer.Argument(None, metavar="[-- LAUNCHER ARGS... PROGRAM ARGS...]",
                                        help="The application (after --): its wall time is "
                                             "the objective."),
    np: int = typer.Option(4, "--np", help="Ranks of the collective objective."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI prefix."),
    backend: str | None = typer.Option(None, "--backend", help="The MPI family (default: "
                                       "the one at --mpi): " + ", ".join(CHOICES[:-1]) + "."),
    params: str | None = typer.Option(None, "--params",
                                      help="Parameters to search (comma-separated; default: "
                                           "every one --list shows)."),
    param: list[str] = typer.Option([], "--param", help="NAME=V1,V2: the values to try "
                                                        "(also a parameter --list lacks, if "
                                                        "the library lists it)."),
    collective: str | None = typer.Option(None, "--collective",
                                          help="Objective: this collective's time per call "
                                               "in the kernel (instead of -- CMD)."),
    sizes: str = typer.Option("8,1K,64K", "--sizes", help="Sizes of --collective."),
    calls: int = typer.Option(30, "--calls", help="Windows of calls per size, --collective."),
    rules: Path | None = typer.Option(None, "--rules", help="A rules file every launch "
                                                            "reads (both arms) and the output "
                                                            "loads."),
    metric: str | None = typer.Option(None, "--metric",
                                      help="With a program: judge it by what it prints, "
                                           "not its wall time: osu, imb, or a regular "
                                           "expression whose first group is seconds."),
    rounds: int = typer.Option(2, "--rounds", help="Screening launches per candidate."),
    budget: int = typer.Option(48, "--budget", help="Screening launches at most (every "
                                                    "combination when it fits, else bayes)."),
    pairs: int = typer.Option(12, "--pairs", help="Fresh launch pairs at most to confirm."),
    out_path: Path | None = typer.Option(None, "--out", "-o", help="Parameter file to write."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON."),
    timeout: float | None = typer.Option(600, "--timeout", help="Seconds per launch."),
    hostfile: str | None = HOSTFILE_OPTION,
    launcher: str | None = LAUNCHER_OPTION,
    nodes: int | None = NODES_OPTION,
    ppn: int | None = PPN_OPTION,
    launcher_args: str = LAUNCHER_ARGS_OPTION,
    listing: bool = typer.Option(False, "--list", help="Show the parameters and exit."),
    prove: Path | None = typer.Option(None, "--prove",
                                      help="Run the command once as the environment is and "
                                           "read back every value of this file."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar=""),
) -> None:
    """Search runtime parameters (binding, eager limits, collective components) for an
    application's wall time (-- CMD) or a collective (--collective), confirm the best
    against the library's defaults in fresh launch pairs, and write the parameter file the
    library reads. Example: tune runtime --params btl_vader_eager_limit,coll_han_priority
    --out params.conf -- mpirun -np 4 lmp -in in.melt"""
    a = _RuntimeArgs(**locals())  # the options, converted once (before any other local)
    from colltune.apploop.jobwide import runtime_search as rt
    from colltune.backends import registry
    from colltune.core.runtime import build_space

    json_to_stdout(json_out)
    say = (lambda _s: None) if quiet else (lambda s: err.print(s, highlight=False,
                                                               markup=False))
    try:
        be = registry.named(registry.resolve(backend, None, mpi)[0])
        runtime = be.with_runtime()  # the refusal that names what is missing first
        inst = be.with_apps().find(mpi)
        catalog = runtime.knobs(inst)
        if listing:
            _list(catalog)
            return
        if prove is not None:
            _prove(be, inst, prove, command or [], timeout)
            return
        for p in (out_path, json_out):
            if p is not None:
                ensure_writable(p, "--out" if p == out_path else "--json")
        values = _values(param)
        names = [n.strip() for n in (params or "").split(",") if n.strip()]
        extra = {n: k for n in [*names, *values] if not any(c.name == n for c in catalog)
                 for k in [runtime.vouch(inst, n)] if k is not None}
        space = build_space(catalog, names, values, extra)
        with jobdir.temporary(prefix="colltune-runtime-") as tmp:
            obj = _objective(a, be, inst, space, Path(tmp))
            runtime.refuse(inst, space.knobs, obj.cmd)
            say(f"searching {len(space.knobs)} parameter(s), {space.size()} combination(s), "
                f"for {obj.what}")
            res = rt.search(rt.Request(be, inst, space, obj, rounds, budget, pairs, rules,
                                       timeout, note=say, named=set(values)))
    except ColltuneError as e:
        _fail(e)
        return
    _show(res)
    _write_runtime(a, runtime, inst, space, res, obj.what)


@dataclass(frozen=True)
class _RuntimeArgs:
    """tune runtime's options as the command took them (its parameters, in order)."""

    command: list[str]
    np: int
    mpi: str | None
    backend: str | None
    params: str | None
    param: list[str]
    collective: str | None
    sizes: str
    calls: int
    rules: Path | None
    metric: str | None
    rounds: int
    budget: int
    pairs: int
    out_path: Path | None
    json_out: Path | None
    timeout: float | None
    hostfile: str | None
    launcher: str | None
    nodes: int | None
    ppn: int | None
    launcher_args: str
    listing: bool
    prove: Path | None
    quiet: bool


def _objective(a: _RuntimeArgs, be: Any, inst: Any, space: Any, tmp: Path) -> Any:
    """What the search times: a collective in colltune's kernel (--collective), or the
    user's command (its wall time, or what --metric reads from its output)."""
    from colltune.apploop.jobwide.objective import application, kernel, printed
    from colltune.core.space import parse_sizes

    if a.collective is not None:
        if a.command:
            raise ColltuneError("give --collective or a command, not both",
                                "one objective per search")
        if a.metric is not None:
            raise ColltuneError("--metric reads what a program prints",
                                "use it with -- CMD, not --collective")
        where = launch_of(a.launcher, a.nodes, a.ppn, a.launcher_args)
        obj = kernel(be, inst, be.place(a.np, a.hostfile, where), a.collective,
                     parse_sizes(a.sizes), a.calls, tmp)
        obj.cmd = be.with_runtime().own(obj.cmd, {k.name: k for k in space.knobs})
        return obj
    obj = application(a.command or [])
    return printed(obj, a.metric) if a.metric is not None else obj


def _write_runtime(a: _RuntimeArgs, runtime: Any, inst: Any, space: Any, res: Any,
                   what: str) -> None:
    """--out (the family's file of the chosen values, with the search's notes) and
    --json."""
    from colltune.apploop.jobwide import runtime_search as rt
    from colltune.core.runtime import changed, label

    doc = rt.as_json(res, what)
    if a.out_path is not None:
        notes = [f"objective: {what}", rt.verdict_line(res)]
        notes += [f"{k}: " + ", ".join(f"{v} {s:.3f}x" for v, s in e.items())
                  for k, e in res.effects.items()]
        try:
            doc["wrote"] = runtime.write(inst, {k.name: k for k in space.knobs},
                                         res.chosen, a.rules, a.out_path, notes)
        except ColltuneError as e:
            _fail(e)
        if not a.quiet:
            err.print(f"wrote {a.out_path}: {label(changed(res.chosen, space))}")
    write_json(a.json_out, doc)


def _list(catalog: list) -> None:  # type: ignore[type-arg]
    t = Table(title="runtime parameters")
    for col in ("name", "kind", "default", "tried", "set by", "proof", "affects"):
        t.add_column(col)
    for k in catalog:
        t.add_row(k.name, k.kind, k.default, ",".join(k.values), k.via, k.proof or "-",
                  "; ".join(k.affects))
    out.print(t)


def _show(res: object) -> None:
    from colltune.apploop.jobwide.runtime_search import Outcome, verdict_line
    from colltune.core.runtime import changed, label

    assert isinstance(res, Outcome)
    t = Table(title=f"screening ({res.strategy}, {res.launches} launches): best first")
    t.add_column("setting")
    t.add_column("vs defaults")
    for s, score in sorted(res.screened, key=lambda cs: cs[1])[:10]:
        t.add_row(label(changed(s, res.space)),
                  f"{score:.3f}x")
    out.print(t)
    for name, eff in res.effects.items():
        alone = res.alone.get(name, {})
        out.print(f"{name}: " + ", ".join(f"{v} {s:.3f}x" for v, s in eff.items())
                  + ("; alone: " + ", ".join(f"{v} {s:.3f}x" for v, s in alone.items())
                     if alone else ""), highlight=False, markup=False)
    for line in res.left_out:
        out.print(f"left out: {line}", highlight=False, markup=False)
    out.print(verdict_line(res), highlight=False, markup=False)
    for k, seen in res.applied.items():
        out.print(f"read back: {k}: " + "; ".join(f"{v} -> {w}" for v, w in seen.items()),
                  highlight=False, markup=False)


def _prove(be: object, inst: object, path: Path, cmd: list[str], timeout: float | None
           ) -> None:
    from colltune.apploop.jobwide.runtime_search import prove_file

    rows = prove_file(be, inst, path, cmd, timeout)  # type: ignore[arg-type]
    for name, value, seen in rows:
        out.print(f"{name} = {value}: {seen}", highlight=False, markup=False)
