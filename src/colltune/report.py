"""`tune report` and `tune show`: what the store holds, per collective and layout, as a
self-contained HTML page with plots (PNG and SVG), CSV exports, or a terminal summary."""

from __future__ import annotations

import base64
import csv
import html
import io
import math
import re
import socket
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from colltune.backends import registry, waiting_cause
from colltune.backends.openmpi_backend import section
from colltune.collectives import get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.records import Decision
from colltune.core.stats import median
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.host import cores
from colltune.outfile import check_destination, write_atomic
from colltune.rules import ompi_classic as rules
from colltune.store import Context, Measurement, ModelFit, Store
from colltune.tuner import artifacts
from colltune.tuner.decide import decide
from colltune.tuner.run import apply_confirmations


@dataclass
class Entry:
    """One (MPI, host, layout, collective) of the store with its decisions."""

    ctx: Context
    catalog: Catalog
    measurements: list[Measurement]
    decisions: list[Decision]
    first: str
    last: str

    @property
    def slug(self) -> str:
        v = self.ctx.mpi_version.replace(".", "_")
        backend = registry.for_context(self.ctx)
        family = backend.short if backend else "mpi"
        # a file name: the store's text (host, version) may hold '/' or '..'
        return re.sub(r"[^A-Za-z0-9_.-]|^\.+", "_",
                      f"{self.ctx.collective}-np{self.ctx.np}-{family}{v}-{self.ctx.host}")

    @property
    def title(self) -> str:
        c = self.ctx
        return f"{c.collective}, {c.np} ranks ({c.nodes} node(s)), {c.mpi_name} {c.mpi_version}"


def _catalog(ctx: Context, cache: dict[str, Catalog]) -> Catalog:
    """The catalog of the family that measured `ctx` (its own algorithm names); ids only
    when no backend claims the stored installation."""
    if ctx.mpi_key not in cache:
        backend = registry.for_context(ctx)
        cache[ctx.mpi_key] = (backend.catalog_for(ctx) if backend else None) or Catalog()
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
                        exact=bool(backend and backend.exact))
            apply_confirmations(ds, store, ctx)
            here = ctx.host == socket.gethostname() and ctx.nodes == 1
            artifacts.flag(ds, ctx.ppn, cores() if here else None, waiting_cause(ctx.mpi_name))
            out.append(Entry(ctx, _catalog(ctx, cats), ms, ds, *store.span(ctx)))
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

    curves = best_per_algorithm(e.measurements)
    figs: dict[str, object] = {}
    xs_all = sorted({m.size for m in e.measurements})
    x_of = {s: (s if s > 0 else 1) for s in xs_all}  # log axis: barrier's size 0 at 1

    fig, ax = plt.subplots(figsize=(8, 5))
    for alg in sorted(curves):
        pts = sorted(curves[alg].items())
        name = e.catalog.algorithm_name(e.ctx.collective, alg)
        if alg == 0:
            ax.plot([x_of[s] for s, _ in pts], [v * 1e6 for _, (_, v) in pts], color="black",
                    linewidth=3, marker="o", label="default (library decision)", zorder=5)
        else:
            ax.plot([x_of[s] for s, _ in pts], [v * 1e6 for _, (_, v) in pts], marker=".",
                    linewidth=1.2, label=f"{alg} {name}")
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
    ax.set_yscale("log")
    ax.set_xlabel("message size per rank (bytes)")
    ax.set_ylabel("latency, median (us)")
    ax.set_title(e.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    figs["latency"] = fig

    fig2, ax2 = plt.subplots(figsize=(8, 3.5))
    sp = [(d.size, d.default_median / d.best_median if d.default_median and d.best_median
           else 1.0, d.speedup or 1.0) for d in e.decisions if d.size >= 0]
    if sp:
        ax2.plot([x_of[s] for s, _, _ in sp], [b for _, b, _ in sp], marker="o",
                 label="best measured / default")
        ax2.plot([x_of[s] for s, _, _ in sp], [c for _, _, c in sp], marker="*",
                 markersize=12, label="chosen (written) / default")
    ax2.axhline(1.0, color="black", linewidth=1)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("message size per rank (bytes)")
    ax2.set_ylabel("speed-up over default")
    ax2.set_title(f"{e.ctx.collective}, {e.ctx.np} ranks: speed-up over the default")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=7)
    fig2.tight_layout()
    figs["speedup"] = fig2
    return figs


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _rules_text(e: Entry) -> str:
    rf = rules.RulesFile(version=1)
    rf.set_section(get_collective(e.ctx.collective).ompi_id, section(e.ctx.np, e.decisions))
    return rules.render(rf)


def _csv_rows(entries: list[Entry]) -> tuple[list[list[object]], list[list[object]]]:
    meas: list[list[object]] = [["mpi", "version", "host", "np", "ppn", "nodes", "collective",
                                 "algorithm", "algorithm_name", "segsize", "fanout",
                                 "max_requests", "size", "status", "n", "median_s", "ci_lo_s",
                                 "ci_hi_s", "message"]]
    dec: list[list[object]] = [["mpi", "version", "host", "np", "collective", "size",
                                "lookup_size", "chosen", "best", "best_median_s",
                                "default_median_s", "p_value", "verdict", "reason"]]
    for e in entries:
        c = e.ctx
        for m in e.measurements:
            meas.append([c.mpi_name, c.mpi_version, c.host, c.np, c.ppn, c.nodes, c.collective,
                         m.config.algorithm,
                         e.catalog.algorithm_name(c.collective, m.config.algorithm),
                         m.config.segsize, m.config.fanout, m.config.max_requests, m.size,
                         m.status, m.n, m.median, m.ci_lo, m.ci_hi, m.message])
        for d in e.decisions:
            dec.append([c.mpi_name, c.mpi_version, c.host, c.np, c.collective, d.size,
                        d.lookup_size, d.chosen.label(e.catalog, c.collective),
                        d.best.label(e.catalog, c.collective) if d.best else "",
                        d.best_median, d.default_median, d.p_value, d.verdict, d.reason])
    return meas, dec


def _write_csv(path: Path, rows: list[list[object]]) -> None:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    write_atomic(path, buf.getvalue())


_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:90%}td,th{border:1px solid #ccc;
padding:3px 8px;text-align:right}th{background:#eee}td.l{text-align:left}
pre{background:#f6f6f6;padding:1em;overflow:auto}img{max-width:100%}
.tuned{background:#dfd}.refuted{background:#fdd}"""


def _model_tables(fits: list[ModelFit]) -> str:
    """The fitted models (Store.models rows) as tables: parameters and fit quality."""
    if not fits:
        return "<p>No cost-model fits in this store (<code>tune model fit</code>).</p>"
    out = []
    for f in fits:
        model, params = f.model, f.params
        q = params["quality"]
        out.append(f"<h3>{html.escape(model)}: MPI {html.escape(f.mpi_version)} on "
                   f"{html.escape(f.host)}, {f.np} ranks ({f.ppn} per node), "
                   f"{html.escape(f.created)}</h3><p>ping-pong fit: R<sup>2</sup> {q['r2']:.3f}, "
                   "median error "
                   f"{100 * q['median_rel']:.1f}%, worst {100 * q['worst_rel']:.1f}%</p>")
        if model.startswith("hockney"):
            out.append("<table><tr><th>bytes</th><th>alpha us</th><th>beta ns/B</th>"
                       "<th>gamma ns/B</th></tr>" + "".join(
                           f"<tr><td>{p['lo']}..{p['hi']}</td><td>{p['a'] * 1e6:.3f}</td>"
                           f"<td>{p['b'] * 1e9:.4f}</td><td>{params['gamma'] * 1e9:.4f}</td>"
                           "</tr>" for p in params["pieces"]) + "</table>")
        else:
            out.append("<table><tr><th>bytes</th><th>L us</th><th>o us</th><th>g us</th>"
                       "<th>G ns/B</th></tr>" + "".join(
                           f"<tr><td>{p['lo']}..{p['hi']}</td><td>{p['L'] * 1e6:.3f}</td>"
                           f"<td>{p['o'] * 1e6:.3f}</td><td>{p['g'] * 1e6:.3f}</td>"
                           f"<td>{p['G'] * 1e9:.4f}</td></tr>" for p in params["pieces"])
                       + "</table>")
    return "".join(out)


def write_report(entries: list[Entry], out_dir: Path, rules_files: list[Path] | None = None,
                 fits: list[ModelFit] | None = None,
                 apps: list[tuple[Path, Path | None]] | None = None) -> Path:
    """index.html (self-contained: images embedded), plus <slug>-latency/speedup .png/.svg,
    measurements.csv and decisions.csv. Returns the page's path."""
    import matplotlib.pyplot as plt

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
    parts.append("<ul>" + "".join(f"<li><a href='#{html.escape(e.slug)}'>"
                                  f"{html.escape(e.title)}</a></li>" for e in entries) + "</ul>")
    for profile, verified in apps or []:  # the applications' own view first
        from colltune.report_app import app_section

        parts.append(app_section(profile, verified, out_dir))
    for e in entries:
        c = e.ctx
        parts.append(f"<h2 id='{html.escape(e.slug)}'>{html.escape(e.title)}</h2>")
        parts.append(
            "<table><tr><th>MPI</th><th>version</th><th>path</th><th>host</th><th>ranks</th>"
            "<th>ranks/node</th><th>measured</th><th>points</th></tr><tr>"
            + "".join(f"<td class='l'>{html.escape(str(v))}</td>" for v in (
                c.mpi_name, c.mpi_version, c.mpi_path, c.host, c.np, c.ppn,
                f"{e.first} .. {e.last}", len(e.measurements)))
            + "</tr></table>")
        for kind, fig in _figures(e).items():
            # not with_suffix: a host name with dots would lose its tail (and plots collide)
            png, svg = (out_dir / f"{e.slug}-{kind}.{ext}" for ext in ("png", "svg"))
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110)  # type: ignore[attr-defined]
            check_destination(png, "report file")
            check_destination(svg, "report file")
            png.write_bytes(buf.getvalue())
            fig.savefig(svg)  # type: ignore[attr-defined]
            plt.close(fig)  # type: ignore[arg-type]
            parts.append(f"<p><img class='plot' alt='{kind} plot of {html.escape(e.title)}' "
                         f"src='data:image/png;base64,"
                         f"{base64.b64encode(buf.getvalue()).decode()}'></p>")
        parts.append("<table><tr><th>size/rank</th><th>lookup</th><th>default us</th>"
                     "<th>best</th><th>best us</th><th>chosen</th><th>verdict</th>"
                     "<th class='l'>why</th></tr>")
        for d in e.decisions:
            best = d.best.label(e.catalog, c.collective) if d.best else "-"
            parts.append(
                f"<tr class='{d.verdict.rstrip('?')}'><td>{d.size if d.size >= 0 else 'all'}"
                f"</td><td>{d.lookup_size}</td><td>{_us(d.default_median)}</td>"
                f"<td class='l'>{html.escape(best)}</td><td>{_us(d.best_median)}</td>"
                f"<td class='l'>{html.escape(d.chosen.label(e.catalog, c.collective))}</td>"
                f"<td>{d.verdict}</td><td class='l'>{html.escape(d.reason)}"
                + (f"<br><strong>warning: {html.escape(d.warning)}</strong>" if d.warning
                   else "") + "</td></tr>")
        parts.append("</table><p>Rules for this section (Open MPI classic format):</p>"
                     f"<pre>{html.escape(_rules_text(e))}</pre>")
    for rf in rules_files or []:
        try:
            text = read_text(rf)
        except (OSError, FormatError) as err:
            why = err.strerror if isinstance(err, OSError) else str(err)
            raise ColltuneError(f"cannot show --rules {rf}: {why}",
                                "pass the rules file (text) with --rules") from None
        parts.append(f"<h2>Rules file {html.escape(str(rf))}</h2><pre>{html.escape(text)}</pre>")
    parts.append("<h2>Model fits</h2>" + _model_tables(fits or []))
    parts.append("<p>Exports: measurements.csv, decisions.csv, and each plot as PNG and SVG "
                 "beside this page.</p></body></html>")
    meas, dec = _csv_rows(entries)
    _write_csv(out_dir / "measurements.csv", meas)
    _write_csv(out_dir / "decisions.csv", dec)
    page = out_dir / "index.html"
    write_atomic(page, "\n".join(parts))
    return page


def _us(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x * 1e6:.2f}"
