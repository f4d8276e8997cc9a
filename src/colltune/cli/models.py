"""`tune model`: fit, show, predict and validate the cost models."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import typer
from rich.table import Table

from colltune.backends import registry
from colltune.cli.common import (
    DB_HELP,
    JSON_OPTION,
    _fail,
    app,
    json_to_stdout,
    out,
    write_json,
)
from colltune.collectives import get_collective
from colltune.core.catalog import Catalog
from colltune.core.plan import Plan
from colltune.core.space import parse_size
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.options import TuneOptions
from colltune.outfile import write_atomic

model_app = typer.Typer(no_args_is_help=True, help="Cost models: fit Hockney and LogGP.")
app.add_typer(model_app, name="model")


MODEL_BACKEND = typer.Option(None, "--backend", help=registry.backend_help())


def _installation(backend: str | None, mpi: str | None, colls: list[str], np: int
                  ) -> tuple[Installation, Catalog]:
    """The installation under --mpi and its catalog, read as `tune` reads them; one whose
    algorithms have no cost formulas is refused (nothing to predict)."""
    from colltune.models.formulas import has_formulas

    backend = registry.resolve(backend, None, mpi)[0]
    sess = registry.named(backend).open(TuneOptions(colls, [np], mpi=mpi, backend=backend),
                                        colls, lambda s: None)
    if not has_formulas(sess.catalog):
        raise ColltuneError(f"colltune has no cost formulas for {sess.mpi.name}'s algorithms",
                            "tune it by measuring: tune <collective> --backend "
                            f"{backend} --np N")
    return sess.mpi, sess.catalog


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
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    max_size: str = typer.Option("1M", "--max-size", help="Largest message probed."),
    reps: int = typer.Option(50, "--reps", help="Repetitions per probe and size (median)."),
    hostfile: str | None = typer.Option(None, "--hostfile", help="Open MPI hostfile."),
    launcher: str | None = typer.Option(None, "--launcher", help="mpirun or srun."),
    nodes: int | None = typer.Option(None, "--nodes", help="Nodes to spread ranks over."),
    ppn: int | None = typer.Option(None, "--ppn", help="Ranks per node."),
    launcher_args: str = typer.Option("", "--launcher-args",
                                      help="More launcher options, passed as they are."),
    backend: str | None = MODEL_BACKEND,
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
            family = registry.resolve(backend, None, mpi)[0]
            cal = calibrate(store, mpi, np, size, reps, hostfile,
                            Launch(launcher, nodes, ppn, tuple(shlex.split(launcher_args))),
                            family, note=lambda text: print(text, file=sys.stderr,
                                                            flush=True))
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
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    json_out: Path | None = JSON_OPTION,
) -> None:
    """The fitted models in the store."""
    from colltune.store import Store, default_db_path

    json_to_stdout(json_out)
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
    write_json(json_out, {"fits": [
        {"mpi_key": f.mpi_key, "mpi_version": f.mpi_version, "host": f.host, "np": f.np,
         "ppn": f.ppn, "model": f.model, "params": f.params, "created": f.created}
        for f in fits]})
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
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    model: str = typer.Option("hockney", "--model", help="Rank by hockney or loggp."),
    top: int = typer.Option(0, "--top", help="Show only the first N (0: all)."),
    backend: str | None = MODEL_BACKEND,
) -> None:
    """Every algorithm's predicted time, ranked, from the fitted models."""
    from colltune.models.predict import MODELS, load_models, predict
    from colltune.store import Store, default_db_path

    try:
        if model not in MODELS:
            raise ColltuneError(f"unknown model '{model}'", "use --model hockney or loggp")
        if np < 2:
            raise ColltuneError("--np must be at least 2", "e.g. --np 512")
        coll = get_collective(collective)
        nbytes = parse_size(size)
        inst, catalog = _installation(backend, mpi, [coll.name], np)
        store = Store(db or default_db_path(), readonly=True)
        try:
            models = load_models(store, inst)
        finally:
            store.close()
        preds = predict(models, coll, catalog, np, nbytes,
                        Plan(catalog).candidates(coll, np, nbytes), rank_by=model)
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
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the report as JSON."),
    backend: str | None = MODEL_BACKEND,
) -> None:
    """Predicted against measured (from `tune <collective>` runs in the store): median and
    worst relative error per algorithm and model, and how often each model's pick is within
    5% of the measured best."""
    import json

    from colltune.models.predict import MODELS, load_models
    from colltune.models.validate import validate
    from colltune.slots import place
    from colltune.store import Store, default_db_path
    from colltune.tuner.measure import context_for

    reports = []
    json_to_stdout(json_out)
    try:
        inst, catalog = _installation(backend, mpi, [get_collective(c).name for c in collective],
                                      np)
        store = Store(db or default_db_path(), readonly=True)
        try:
            models = load_models(store, inst)
            for name in collective:
                coll = get_collective(name)
                ms = store.measurements(context_for(inst, coll, place(np)))
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


