"""`tune report` and `tune show`: what the store holds, per collective and layout, as a
self-contained HTML page with plots (PNG and SVG), CSV exports, or a terminal summary."""

from __future__ import annotations

import base64
import csv
import io
import math
import socket
from collections import defaultdict
from pathlib import Path

from colltune.backends import registry
from colltune.backends.registry import waiting_cause
from colltune.collectives import get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.stats import median
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.host import cores
from colltune.outfile import write_atomic
from colltune.reporting.report_app import app_section, save_figure
from colltune.reporting.report_tables import Entry, model_tables, summary_table
from colltune.sinks import csv_cell, html_text, plot_text
from colltune.store import Context, Measurement, ModelFit, Store
from colltune.tuner import artifacts
from colltune.tuner.confirm import apply_confirmations
from colltune.tuner.decide import decide


def _catalog(ctx: Context, store: Store, cache: dict[str, Catalog]) -> Catalog:
    """The catalog of the family that measured `ctx`, naming algorithms as the store
    recorded them (nothing at the stored path is run); ids only when no backend claims
    the stored installation."""
    if ctx.mpi_key not in cache:
        backend = registry.for_context(ctx)
        names = store.algorithms(ctx.mpi_key)
        cache[ctx.mpi_key] = (backend.catalog_for(ctx, names) if backend else None) or \
            Catalog()
    return cache[ctx.mpi_key]


def load(db: Path, collectives: list[str] | None = None, nps: list[int] | None = None
         ) -> list[Entry]:
    store = Store(db, readonly=True)
    cats: dict[str, Catalog] = {}
    out = []
    try:
        for ctx in store.contexts():
            if collectives and ctx.collective not in collectives:
                continue
            if nps and ctx.np not in nps:
                continue
            ms = store.measurements(ctx)
            backend = registry.for_context(ctx)
            ds = decide(get_collective(ctx.collective), ctx.np, ms,
                        exact=bool(backend and backend.traits.exact),
                        rule_size=backend.rule_size if backend else None)
            apply_confirmations(ds, store, ctx)
            here = ctx.host == socket.gethostname() and ctx.nodes == 1
            artifacts.flag(ds, ctx.ppn, cores() if here else None, waiting_cause(ctx.mpi_name))
            out.append(Entry(ctx, _catalog(ctx, store, cats), ms, ds, *store.span(ctx)))
    finally:
        store.close()
    if not out:
        raise ColltuneError(f"{db} holds no measurements" +
                            (" for that selection" if collectives or nps else ""),
                            "run tune <collective> first, or check --collective/--np")
    return out


def best_per_algorithm(ms: list[Measurement]) -> dict[int, dict[int, tuple[Config, float]]]:
    """algorithm -> size -> (its fastest configuration, median): one curve per algorithm."""
    out: dict[int, dict[int, tuple[Config, float]]] = defaultdict(dict)
    for m in ms:
        if m.status != "ok" or not m.samples:
            continue
        med = median(m.samples)
        cur = out[m.config.algorithm].get(m.size)
        if cur is None or med < cur[1]:
            out[m.config.algorithm][m.size] = (m.config, med)
    return out


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------


def _figures(e: Entry) -> dict[str, object]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    curves = best_per_algorithm(e.measurements)
    figs: dict[str, object] = {}
    xs_all = sorted({m.size for m in e.measurements})
    x_of = {s: (s if s > 0 else 1) for s in xs_all}  # log axis: barrier's size 0 at 1

    fig, ax = plt.subplots(figsize=(8, 5))
    for alg in sorted(curves):
        pts = sorted(curves[alg].items())
        name = e.catalog.algorithm_name(e.ctx.collective, alg)
        if alg == 0:
            ci = {m.size: (m.ci_lo, m.ci_hi) for m in e.measurements
                  if m.config.algorithm == 0 and m.ci_lo is not None and m.ci_hi is not None}
            ys = [v * 1e6 for _, (_, v) in pts]
            err = [[max(0.0, y - (ci.get(s, (v, v))[0] or v) * 1e6) for (s, (_, v)), y in
                    zip(pts, ys, strict=True)],
                   [max(0.0, (ci.get(s, (v, v))[1] or v) * 1e6 - y) for (s, (_, v)), y in
                    zip(pts, ys, strict=True)]]
            ax.errorbar([x_of[s] for s, _ in pts], ys, yerr=err, color="black", linewidth=3,
                        marker="o", capsize=3, label="default (library decision), 95% CI",
                        zorder=5)
        else:
            ax.plot([x_of[s] for s, _ in pts], [v * 1e6 for _, (_, v) in pts], marker=".",
                    linewidth=1.2, label=plot_text(f"{alg} {name}"))
    med = {(m.config, m.size): median(m.samples) for m in e.measurements
           if m.status == "ok" and m.samples}
    cx, cy = [], []
    for d in e.decisions:
        sizes = [d.size] if d.size >= 0 else xs_all  # a size-independent rule holds everywhere
        for s in sizes:
            if (d.chosen, s) in med:
                cx.append(x_of[s])
                cy.append(med[(d.chosen, s)] * 1e6)
    if cx:
        ax.scatter(cx, cy, marker="*", s=220, color="gold", edgecolor="black", zorder=6,
                   label="chosen per size")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(_bytes_label))
    ax.set_yscale("log")
    ax.set_xlabel("message size per rank")
    ax.set_ylabel("latency, median (us)")
    ax.set_title(plot_text(e.title))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    figs["latency"] = fig

    # scaled by what was written and confirmed; sweep wins that fresh launches refuted are
    # drawn apart (hollow), and off the scale rather than stretching it
    fig2, ax2 = plt.subplots(figsize=(8, 3.5))
    sized = [d for d in e.decisions if d.size >= 0]
    written = [(x_of[d.size], d.confirmations[-1].launch_speedup if d.confirmations
                else (d.speedup or 1.0)) for d in sized]
    refuted = [(x_of[d.size], d.default_median / d.best_median) for d in sized
               if d.verdict in ("slower", "not significant") and d.default_median
               and d.best_median]
    if written:
        ax2.plot([x for x, _ in written], [y for _, y in written], marker="*",
                 markersize=12, label="written / default (fresh launches where confirmed)")
        top = max(max(y for _, y in written), 1.0) * 1.3
        low = min(min(y for _, y in written), 1.0) / 1.3
        if refuted:
            ax2.scatter([x for x, _ in refuted], [min(y, top) for _, y in refuted],
                        marker="o", facecolors="none", edgecolors="red",
                        label="sweep win not confirmed (not written; clipped to the scale)")
        ax2.set_ylim(low, top)
    ax2.axhline(1.0, color="black", linewidth=1)
    ax2.set_xscale("log", base=2)
    ax2.xaxis.set_major_formatter(FuncFormatter(_bytes_label))
    ax2.set_xlabel("message size per rank")
    ax2.set_ylabel("speed-up over default")
    ax2.set_title(plot_text(f"{e.ctx.collective}, {e.ctx.np} ranks: speed-up over the "
                            "default"))
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=7)
    fig2.tight_layout()
    figs["speedup"] = fig2
    return figs


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _csv_rows(entries: list[Entry]) -> tuple[list[list[object]], list[list[object]]]:
    meas: list[list[object]] = [["mpi", "version", "prefix", "host", "np", "ppn", "nodes",
                                 "collective", "algorithm", "algorithm_name", "parameters", "size",
                                 "status", "n", "median_s", "ci_lo_s",
                                 "ci_hi_s", "message"]]
    dec: list[list[object]] = [["mpi", "version", "prefix", "host", "np", "collective", "size",
                                "lookup_size", "chosen", "best", "best_median_s",
                                "default_median_s", "p_value", "verdict", "reason"]]
    for e in entries:
        c = e.ctx
        for m in e.measurements:
            meas.append([c.mpi_name, c.mpi_version, c.mpi_path, c.host, c.np, c.ppn, c.nodes,
                         c.collective, m.config.algorithm,
                         e.catalog.algorithm_name(c.collective, m.config.algorithm),
                         " ".join(f"{n}={v}" for n, v in m.config.params), m.size,
                         m.status, m.n, m.median, m.ci_lo, m.ci_hi, m.message])
        for d in e.decisions:
            dec.append([c.mpi_name, c.mpi_version, c.mpi_path, c.host, c.np, c.collective, d.size,
                        d.lookup_size, d.chosen.label(e.catalog, c.collective),
                        d.best.label(e.catalog, c.collective) if d.best else "",
                        d.best_median, d.default_median, d.p_value, d.verdict, d.reason])
    return meas, dec


def _write_csv(path: Path, rows: list[list[object]]) -> None:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows([[csv_cell(v) for v in row] for row in rows])
    write_atomic(path, buf.getvalue())


_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:90%}td,th{border:1px solid #ccc;
padding:3px 8px;text-align:right}th{background:#eee}td.l{text-align:left}
pre{background:#f6f6f6;padding:1em;overflow:auto}img{max-width:100%}
.tuned{background:#dfd}.slower,.not-significant{background:#fdd}"""


MAX_PLOTS = 12  # contexts plotted by default: each takes about 1.5 s and four files


def write_report(entries: list[Entry], out_dir: Path, rules_files: list[Path] | None = None,
                 fits: list[ModelFit] | None = None,
                 apps: list[tuple[Path, Path | None]] | None = None,
                 max_plots: int = MAX_PLOTS) -> Path:
    """index.html (self-contained: images embedded), plus <slug>-latency/speedup .png/.svg
    for the first `max_plots` contexts (a store of thousands would take hours and write
    four files each; the others get their tables), measurements.csv and decisions.csv.
    Returns the page's path."""

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ColltuneError(f"cannot create {out_dir}: {exc.strerror or exc}",
                            "choose a writable --out directory") from None
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>colltune report"
             f"</title><style>{_CSS}</style></head><body><h1>colltune report</h1>"]
    parts.append("<p>Latency is the median over repetitions of one launch (the kernel's "
                 "stopping rule); each algorithm's curve shows its fastest configuration "
                 "(segment size, fanout) at each size. The default is the library's own "
                 "decision. Stars mark what the rules file runs at each measured size.</p>")
    parts.append(summary_table(entries))
    if len(entries) > max_plots:
        parts.append(f"<p><strong>Plots for the first {max_plots} of {len(entries)} "
                     "contexts</strong> (--max-plots); every context's table and the CSV "
                     "exports are complete. Select with --collective and --np, or raise "
                     "--max-plots.</p>")
    for profile, verified in apps or []:  # the applications' own view first
        parts.append(app_section(profile, verified, out_dir))
    for i, e in enumerate(entries):
        c = e.ctx
        parts.append(f"<h2 id='{html_text(e.slug)}'>{html_text(e.title)}</h2>")
        parts.append(
            "<table><tr><th>MPI</th><th>version</th><th>path</th><th>host</th><th>ranks</th>"
            "<th>ranks/node</th><th>measured</th><th>points</th></tr><tr>"
            + "".join(f"<td class='l'>{html_text(str(v))}</td>" for v in (
                c.mpi_name, c.mpi_version, c.mpi_path, c.host, c.np, c.ppn,
                f"{e.first} .. {e.last}", len(e.measurements)))
            + "</tr></table>")
        for kind, fig in (_figures(e) if i < max_plots else {}).items():
            # not with_suffix: a host name with dots would lose its tail (and plots collide)
            png = save_figure(fig, out_dir, f"{e.slug}-{kind}")
            parts.append(f"<p><img class='plot' alt='{kind} plot of {html_text(e.title)}' "
                         f"src='data:image/png;base64,{base64.b64encode(png).decode()}'></p>")
        parts.append("<table><tr><th>size/rank</th><th>lookup</th><th>default us</th>"
                     "<th>best</th><th>best us</th><th>chosen</th><th>verdict</th>"
                     "<th class='l'>why</th></tr>")
        for d in e.decisions:
            best = d.best.label(e.catalog, c.collective) if d.best else "-"
            cls = d.verdict.rstrip("?").replace(" ", "-")
            parts.append(
                f"<tr class='{cls}'><td>{d.size if d.size >= 0 else 'all'}"
                f"</td><td>{d.lookup_size}</td><td>{_us(d.default_median)}</td>"
                f"<td class='l'>{html_text(best)}</td><td>{_us(d.best_median)}</td>"
                f"<td class='l'>{html_text(d.chosen.label(e.catalog, c.collective))}</td>"
                f"<td>{html_text(d.verdict)}</td><td class='l'>{html_text(d.reason)}"
                + (f"<br><strong>warning: {html_text(d.warning)}</strong>" if d.warning
                   else "") + "</td></tr>")
        backend = registry.for_context(c)
        shown = (backend.files.section_text(c, e.decisions)
                 if backend and backend.files else None)
        if shown:
            parts.append(f"</table><p>Rules for this section ({html_text(shown[1])}, as "
                         f"tune writes it):</p><pre>{html_text(shown[0])}</pre>")
        else:
            parts.append("</table><p>This family's file for this section: "
                         f"<code>tune {html_text(c.collective)} --np {c.np} --from-db "
                         "--mpi PREFIX --out FILE</code> writes it from the store.</p>")
    for rf in rules_files or []:
        try:
            text = read_text(rf)
        except (OSError, FormatError) as err:
            why = err.strerror if isinstance(err, OSError) else str(err)
            raise ColltuneError(f"cannot show --rules {rf}: {why}",
                                "pass the rules file (text) with --rules") from None
        parts.append(f"<h2>Rules file {html_text(str(rf))}</h2><pre>{html_text(text)}</pre>")
    parts.append("<h2>Model fits</h2>" + model_tables(fits or []))
    parts.append("<p>Exports: measurements.csv, decisions.csv, and each plot as PNG and SVG "
                 "beside this page.</p></body></html>")
    meas, dec = _csv_rows(entries)
    _write_csv(out_dir / "measurements.csv", meas)
    _write_csv(out_dir / "decisions.csv", dec)
    page = out_dir / "index.html"
    write_atomic(page, "\n".join(parts))
    return page


def _bytes_label(x: float, _pos: object = None) -> str:
    """Size axes in B, KiB, MiB."""
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= div:
            return f"{x / div:g} {unit}"
    return f"{x:g} B"


def _us(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x * 1e6:.2f}"
