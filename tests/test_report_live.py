"""`tune report` and `tune show` from a real tuning run: files, plots, CSV, and the page as
headless Chromium renders it (screenshot kept in the test's temp dir)."""

from __future__ import annotations

import csv
import shutil
import sqlite3
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from conftest import missing
from helpers import tune_cli

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import get_mpi

    ompi: OpenMPI = get_mpi("ompi41")
    d = tmp_path_factory.mktemp("report")
    r = tune_cli("reduce", "--boundaries", "midpoint",
                 "--np", "4", "--mpi", str(ompi.prefix), "--db", str(d / "db.sqlite"),
                 "--sizes", "8,512,4K,64K", "--out", str(d / "rules.conf"), "--point-time",
                 "0.05", "--confirm-rounds", "2", "--quiet")  # confirmation: test_confirm
    assert r.returncode == 0, r.stderr
    fit = tune_cli("model", "fit", "--np", "2", "--mpi", str(ompi.prefix), "--db",
                   str(d / "db.sqlite"), "--reps", "5", "--max-size", "64K")
    assert fit.returncode == 0, fit.stderr
    return d


def test_report_files_plots_and_exports(tuned: Path) -> None:
    out = tuned / "report"
    r = tune_cli("report", "--db", str(tuned / "db.sqlite"), "--out", str(out), "--rules",
                 str(tuned / "rules.conf"))
    assert r.returncode == 0, r.stderr
    page = (out / "index.html").read_text()
    assert page.count("src='data:image/png;base64,") == 2  # self-contained
    assert "Open MPI 4.1.4" in page and "rules.conf" in page
    for kind in ("latency", "speedup"):
        stem = f"reduce-np4-ompi4_1_4-{_where('/usr')}-{_host()}-{kind}"
        assert (out / f"{stem}.png").stat().st_size > 10_000
        ET.parse(out / f"{stem}.svg")  # well-formed SVG
    with sqlite3.connect(tuned / "db.sqlite") as c:
        stored = c.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    rows = list(csv.DictReader(open(out / "measurements.csv")))
    assert len(rows) == stored and {r["collective"] for r in rows} == {"reduce"}
    decisions = list(csv.DictReader(open(out / "decisions.csv")))
    assert [int(d["size"]) for d in decisions] == [8, 512, 4096, 65536]
    # the fitted models, with their fit quality, as stored
    models = page.split("<h2>Model fits</h2>", 1)[1]
    assert "<h3>hockney: MPI 4.1.4" in models and "<h3>loggp: MPI 4.1.4" in models
    assert "alpha us" in models and "R<sup>2</sup>" in models


def test_show_prints_the_same_decisions(tuned: Path) -> None:
    r = tune_cli("show", "--db", str(tuned / "db.sqlite"))
    assert r.returncode == 0, r.stderr
    assert "reduce, 4 ranks" in r.stdout
    for size in ("8", "512", "4096", "65536"):
        assert f"│ {size} " in r.stdout


def test_report_renders_in_headless_chromium(tuned: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing("chromium is not installed (Debian's chromium)")
    out = tmp_path / "report"
    assert tune_cli("report", "--db", str(tuned / "db.sqlite"), "--out", str(out)).returncode == 0
    shot = tmp_path / "screenshot.png"  # the artifact
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1200,1400",
                        f"--screenshot={shot}", (out / "index.html").as_uri()],
                       capture_output=True, text=True, timeout=180, check=False)
    assert shot.exists(), r.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)[:, :, :3]
    # the default's thick black curve and the gold stars of the chosen configurations are
    # drawn only inside the embedded plot: finding them proves the browser decoded it
    gold = (abs(img[:, :, 0] - 1.0) < 0.08) & (abs(img[:, :, 1] - 0.84) < 0.08) & \
        (img[:, :, 2] < 0.15)
    blue = (abs(img[:, :, 0] - 0.12) < 0.08) & (abs(img[:, :, 1] - 0.47) < 0.08) & \
        (abs(img[:, :, 2] - 0.71) < 0.08)  # matplotlib's first line colour, C0
    assert gold.sum() > 100 and blue.sum() > 100, (gold.sum(), blue.sum())


def _where(prefix: str) -> str:
    """The installation's mark in report file names (two of one version do not collide)."""
    import hashlib

    return hashlib.sha1(prefix.encode()).hexdigest()[:6]


def _host() -> str:
    import socket

    return socket.gethostname()
