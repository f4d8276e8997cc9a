"""A family shaped as colltune's own are, a folder (tests/families/bare: install.py and
backend.py), with the Backend core only: no runtime capability, no files capability.
Registered at run time, it tunes and writes its output from a store; every command that
needs a capability it lacks says so, naming the families that have it (from the
registry), instead of failing somewhere inside or passing for another family (issue 63)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from colltune.backends import registry
from colltune.cli import app
from colltune.collectives import get_collective
from colltune.core.config import DEFAULT, Config
from colltune.core.records import PointResult
from colltune.slots import place
from colltune.store import Store
from colltune.tuner.measure import context_for
from families import register
from families.bare.backend import BareBackend
from families.bare.install import Bare

runner = CliRunner()


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch) -> BareBackend:
    b = BareBackend()
    register(monkeypatch, b)
    return b


def _recorded(db: Path, mpi: Bare) -> None:
    """A store as a run would leave it: `ring` twice as fast as the default at 64 KiB."""
    ctx = context_for(mpi, get_collective("reduce"), place(2, None))
    s = Store(db)
    s.add_catalog(mpi.key, "bare", {"reduce": {0: "default", 1: "ring"}})
    for cfg in (DEFAULT, Config(1)):
        for size in (1024, 65536):
            t = 20.0 if (size, cfg) == (65536, Config(1)) else 40.0
            xs = [t * 1e-6 * (1 + 0.01 * i) for i in range(-5, 6)]
            s.add(ctx, cfg, PointResult(0, size, "ok", len(xs), sorted(xs)[5], min(xs),
                                        max(xs), samples=xs), "relaunch")
    s.close()


def _cli(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    return r.exit_code, " ".join(r.output.split())  # rich wraps its panels


def test_a_bare_family_tunes_and_says_what_it_lacks(bare: BareBackend, tmp_path: Path
                                                    ) -> None:
    assert bare.runtime is None and bare.files is None and bare.apps is None \
        and bare.bands is None
    mpi = Bare(tmp_path / "bare")
    db, out = tmp_path / "s.sqlite", tmp_path / "tuned.bare"
    _recorded(db, mpi)

    # the core works: decided from the store, written in its own format, stored, reported
    code, said = _cli("reduce", "--np", "2", "--backend", "bare", "--mpi", str(mpi.prefix),
                      "--db", str(db), "--from-db", "--out", str(out))
    assert code == 0, said
    assert out.read_text() == "65536 1\n"
    code, said = _cli("show", "--db", str(db))
    assert code == 0 and "ring" in said, said
    code, said = _cli("report", "--db", str(db), "--out", str(tmp_path / "report"))
    assert code == 0, said
    assert (tmp_path / "report" / "index.html").exists()

    # what needs files: refused, naming the families that read theirs
    with_files = registry.having("files")
    assert "bare" not in with_files and {"openmpi", "mpich", "impi"} <= set(with_files)
    code, said = _cli("export", "--from", str(db), "--site", str(tmp_path / "site"))
    assert code == 2 and "colltune reads no bare files" in said, said
    assert "use --backend " + ", ".join(with_files[:-1]) in said, said
    # what runs the user's program: refused, naming the families that can
    with_apps = registry.having("apps")
    assert "bare" not in with_apps and "smpi" not in with_apps and "mpich" in with_apps
    code, said = _cli("compare", "--lib", f"bare:{mpi.prefix}={out}",
                      "--lib", f"bare:{mpi.prefix}", "--collective", "reduce")
    assert code == 2 and "colltune runs no program of its users on bare" in said, said
    assert "use --backend " + ", ".join(with_apps[:-1]) in said, said
    assert not (tmp_path / "site").exists()

    # what needs runtime parameters: refused before anything runs
    with_runtime = registry.having("runtime")
    assert "bare" not in with_runtime and "mvapich2" in with_runtime
    code, said = _cli("runtime", "--backend", "bare", "--mpi", str(mpi.prefix),
                      "--collective", "reduce", "--params", "x", "--out",
                      str(tmp_path / "p.conf"))
    assert code == 2 and "tune runtime does not tune bare" in said, said
    assert "use --backend " + ", ".join(with_runtime[:-1]) in said, said
    assert not (tmp_path / "p.conf").exists()
