"""The report's record of one stored context (`Entry`) and the HTML tables that summarise:
one row per collective and installation at the top, and the stored cost-model fits."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from colltune.backends import registry
from colltune.core.catalog import Catalog
from colltune.core.records import Decision
from colltune.sinks import html_text

if TYPE_CHECKING:
    from colltune.store import Context, Measurement, ModelFit


# what an installation key gains after it for points taken otherwise than by default
# (tuner/measure.point_key, Collective.datatype_key): said in a title, kept apart in a
# file name (two such contexts are otherwise the same collective on the same installation)
_MEASURED_AS = re.compile(r"~(arrival|online|datatype)=([A-Za-z0-9_-]+)")


def measured_as(key: str) -> list[str]:
    """How a stored context's points were taken, from its installation key's suffixes."""
    said = {"arrival": lambda v: "an arrival pattern replayed",
            "online": lambda v: "in the application's own calls (tune online)",
            "datatype": lambda v: f"summing {v}"}
    return [said[name](value) for name, value in _MEASURED_AS.findall(key)]


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
        # two installations of one version (a site build, a wheel) must not share files
        where = hashlib.sha1(self.ctx.mpi_path.encode()).hexdigest()[:6]
        # a file name: the store's text (host, version) may hold '/' or '..'
        how = "".join(f"-{n}-{v}" for n, v in _MEASURED_AS.findall(self.ctx.mpi_key))
        return re.sub(r"[^A-Za-z0-9_.-]|^\.+", "_",
                      f"{self.ctx.collective}-np{self.ctx.np}-{family}{v}-{where}-"
                      f"{self.ctx.host}{how}")

    @property
    def title(self) -> str:
        c = self.ctx
        how = "".join(f", {h}" for h in measured_as(c.mpi_key))
        return (f"{c.collective}, {c.np} ranks ({c.nodes} node(s)), {c.mpi_name} "
                f"{c.mpi_version} at {c.mpi_path}{how}")


def summary_table(entries: list[Entry]) -> str:
    """Per collective and installation: sizes where the file runs something else than the
    default, the geometric-mean speed-up there (confirmed in fresh launches where they
    were), and the verdicts."""
    if not entries:
        return ""
    rows = []
    for e in entries:
        sized = [d for d in e.decisions if d.size >= 0] or e.decisions
        written = [d for d in sized if d.verdict.startswith("tuned")]
        sps = [v.launch_speedup if (v := d.confirmations[-1] if d.confirmations else None)
               else (d.speedup or 1.0) for d in written]
        gm = math.exp(sum(math.log(x) for x in sps) / len(sps)) if sps else None
        verdicts: dict[str, int] = {}
        for d in sized:
            verdicts[d.verdict] = verdicts.get(d.verdict, 0) + 1
        rows.append(
            f"<tr><td class='l'><a href='#{html_text(e.slug)}'>{html_text(e.title)}</a>"
            f"</td><td>{len(written)} of {len(sized)}</td>"
            f"<td>{'-' if gm is None else f'{gm:.2f}x'}</td><td class='l'>"
            + html_text(", ".join(f"{k} {n}" for k, n in sorted(verdicts.items())))
            + "</td></tr>")
    return ("<table><tr><th class='l'>collective, ranks, MPI</th><th>sizes tuned</th>"
            "<th>speed-up where tuned (geometric mean, fresh launches)</th>"
            "<th class='l'>verdicts</th></tr>" + "".join(rows) + "</table>")


def _span(piece: dict[str, object]) -> str:
    return f"{html_text(piece['lo'])}..{html_text(piece['hi'])}"


def model_tables(fits: list[ModelFit]) -> str:
    """The fitted models (Store.models rows) as tables: parameters and fit quality."""
    if not fits:
        return "<p>No cost-model fits in this store (<code>tune model fit</code>).</p>"
    out = []
    for f in fits:
        model, params = f.model, f.params
        q = params["quality"]
        out.append(f"<h3>{html_text(model)}: MPI {html_text(f.mpi_version)} on "
                   f"{html_text(f.host)}, {f.np} ranks ({f.ppn} per node), "
                   f"{html_text(f.created)}</h3><p>ping-pong fit: R<sup>2</sup> {q['r2']:.3f}, "
                   "median error "
                   f"{100 * q['median_rel']:.1f}%, worst {100 * q['worst_rel']:.1f}%</p>")
        if model.startswith("hockney"):
            out.append("<table><tr><th>bytes</th><th>alpha us</th><th>beta ns/B</th>"
                       "<th>gamma ns/B</th></tr>" + "".join(
                           f"<tr><td>{_span(p)}</td><td>{p['a'] * 1e6:.3f}</td>"
                           f"<td>{p['b'] * 1e9:.4f}</td><td>{params['gamma'] * 1e9:.4f}</td>"
                           "</tr>" for p in params["pieces"]) + "</table>")
        else:
            out.append("<table><tr><th>bytes</th><th>L us</th><th>o us</th><th>g us</th>"
                       "<th>G ns/B</th></tr>" + "".join(
                           f"<tr><td>{_span(p)}</td><td>{p['L'] * 1e6:.3f}</td>"
                           f"<td>{p['o'] * 1e6:.3f}</td><td>{p['g'] * 1e6:.3f}</td>"
                           f"<td>{p['G'] * 1e9:.4f}</td></tr>" for p in params["pieces"])
                       + "</table>")
    return "".join(out)
