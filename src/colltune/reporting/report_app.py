"""The application part of `tune report`: a profile's time per collective, communicator
size and message size (tune profile), and its runs without and with the rules (tune verify
--app), as plots and tables."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

from colltune.apploop.profiling.profile import load
from colltune.apploop.profiling.schema import VERIFY_SCHEMA, problem
from colltune.errors import ColltuneError, FormatError, parse_json, read_text
from colltune.outfile import write_atomic
from colltune.sinks import html_text, plot_text


def _verify_doc(path: Path) -> dict:  # type: ignore[type-arg]
    try:
        doc = parse_json(read_text(path))
    except (OSError, ValueError, FormatError) as e:
        raise ColltuneError(f"cannot read {path}: {e}",
                            "pass the file tune verify --app --json wrote") from None
    why = problem(doc, VERIFY_SCHEMA)
    if why is not None or not isinstance(doc, dict):
        raise ColltuneError(f"{path} is not a tune verify --app result: {why}",
                            "pass the file tune verify --app --json wrote")
    return doc


def save_figure(fig: object, out_dir: Path, name: str) -> bytes:
    """The figure as PNG and SVG beside the page, each rendered in memory and written
    through the one safe path (a temporary file renamed in: a link planted at the name
    meanwhile is replaced, never followed); returns the PNG, for the page to embed."""
    import matplotlib.pyplot as plt

    data = {}
    for ext in ("png", "svg"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=110)  # type: ignore[attr-defined]
        data[ext] = buf.getvalue()
    plt.close(fig)  # type: ignore[arg-type]
    for ext, blob in data.items():
        write_atomic(out_dir / f"{name}.{ext}", blob)
    return data["png"]


def _save(fig: object, out_dir: Path, name: str) -> str:
    """The figure's files, and the page's image of it."""
    png = save_figure(fig, out_dir, name)
    return (f"<p><img class='plot' alt='{html_text(name)}' src='data:image/png;base64,"
            f"{base64.b64encode(png).decode()}'></p>")


def app_section(profile_path: Path, verify_path: Path | None, out_dir: Path) -> str:
    """HTML for one profile (and its before/after, when given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prof = load(profile_path)
    slug = re.sub(r"[^A-Za-z0-9_.-]|^\.+", "_", profile_path.stem)
    wall = float(prof["wall_s"]["mean"])  # type: ignore[index]
    entries = prof["entries"]
    assert isinstance(entries, list)
    cmd = " ".join(str(c) for c in prof["command"])  # type: ignore[attr-defined]
    parts = [f"<h2 id='app-{html_text(slug)}'>Application: {html_text(cmd[:120])}</h2>",
             f"<p>{html_text(prof['ranks'])} ranks on {html_text(str(prof['mpi']['name']))} "  # type: ignore[index]
             f"{html_text(str(prof['mpi']['version']))}; {wall:.4f} s per rank from "  # type: ignore[index]
             f"MPI_Init to MPI_Finalize, {float(prof['collective_s']['mean']):.4f} s of it "  # type: ignore[index]
             "in blocking collectives (mean rank).</p>"]
    top = entries[:20]
    if top:
        labels = [plot_text(f"{e['collective']} {e['comm_size']}r {e['size']} B")
                  for e in top][::-1]
        shares = [100 * float(e["share"]) for e in top][::-1]
        fig, ax = plt.subplots(figsize=(8, 0.3 * len(top) + 1.2))
        ax.barh(labels, shares, color="#4477aa")
        ax.set_xlabel("share of the application's wall time (%)")
        ax.set_title("time in each collective, communicator size and size")
        fig.tight_layout()
        parts.append(_save(fig, out_dir, f"app-{slug}-profile"))
    parts.append("<table><tr><th>collective</th><th>comm size</th><th>size/rank</th>"
                 "<th>calls/rank</th><th>ranks</th><th>time s (mean)</th><th>slowest rank"
                 "</th><th>share</th><th class='l'>what ran</th></tr>")
    for e in entries:
        parts.append("<tr>" + "".join(f"<td>{html_text(str(v))}</td>" for v in (
            e["collective"], e["comm_size"], e["size"], e["calls"], e["ranks"],
            f"{e['time_s']['mean']:.6f}", f"{e['time_s']['max']:.6f}",
            f"{100 * e['share']:.2f}%")) + f"<td class='l'>"
            f"{html_text(str(e.get('algorithm') or '-'))}</td></tr>")
    parts.append("</table>")
    nb = prof.get("nonblocking") or {}
    if nb:
        parts.append("<p>Nonblocking collectives (counted; coll/tuned's rules do not decide "
                     "them): " + html_text(", ".join(f"{k} {v}" for k, v in nb.items()))  # type: ignore[attr-defined]
                     + "</p>")
    if verify_path is not None:
        v = _verify_doc(verify_path)
        ms = v["measures"]
        fig, axes = plt.subplots(1, len(ms), figsize=(3.2 * len(ms), 3.2))
        for ax, (name, m) in zip(axes if len(ms) > 1 else [axes], ms.items(), strict=True):
            for i, arm in enumerate(("default_s", "tuned_s")):
                ys = m[arm]
                ax.scatter([i] * len(ys), ys, color=("#999999", "#228833")[i], zorder=3)
                ax.bar(i, sorted(ys)[len(ys) // 2], color=("#dddddd", "#aaddaa")[i])
            ax.set_xticks([0, 1], ["default", "rules"])
            ax.set_title(plot_text(f"{name}: {m['ratio']:.3f}x, {m['verdict']}"))
            ax.set_ylabel("seconds")
        fig.suptitle(plot_text(f"{v['pairs']} pairs without and with {Path(v['rules']).name}"))
        fig.tight_layout()
        parts.append("<h3>Without and with the rules (tune verify --app)</h3>")
        parts.append(_save(fig, out_dir, f"app-{slug}-before-after"))
        parts.append("<table><tr><th>measure</th><th>rules/default</th><th>p</th>"
                     "<th>could see</th><th>verdict</th></tr>" + "".join(
                         f"<tr><td>{html_text(n)}</td><td>{m['ratio']:.3f}</td><td>"
                         f"{'-' if m['p_value'] is None else format(m['p_value'], '.3g')}"
                         f"</td><td>{_could_see(m)}</td><td>"
                         f"{html_text(m['verdict'])}{_reason(m)}</td></tr>"
                         for n, m in ms.items()) + "</table>")
        parts.append("<p>Bars: median run; dots: every run. Verdict: the pairs judged "
                     "sequentially on the log ratio (the kernel's verify's test); could see: "
                     "the smallest slowdown it would have found with 80% power.</p>")
    return "\n".join(parts)


def _could_see(m: dict[str, object]) -> str:
    """A verdict's power, where the result states it (results before it do not)."""
    x = m.get("could_see")
    return f"{float(x):.2f}x" if isinstance(x, (int, float)) else "-"


def _reason(m: dict[str, object]) -> str:
    why = m.get("reason")
    return f" ({html_text(str(why))})" if why else ""
