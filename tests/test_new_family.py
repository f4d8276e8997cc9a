"""A new MPI family is one module plus a registry line (issue 34): a family defined here,
in tests/ only (its installation class, a catalog of one algorithm, its own file format),
registered at run time, goes through `tune --from-db`, `tune check`, `tune report` and
`tune export` with no edit to colltune. What it can do is asked of its backend; if generic
code still asked which family it drives, this family would be refused or written as Open
MPI's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from colltune.backends import registry
from colltune.backends.base import (
    Arms,
    Backend,
    Checked,
    Decisions,
    ExportRequest,
    Installable,
    Session,
    write_file,
)
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult
from colltune.errors import FormatError, read_text
from colltune.options import TuneOptions
from colltune.outfile import Planned, destination
from colltune.slots import Placement, place
from colltune.store import Context, Store
from colltune.tuner.measure import context_for


@dataclass(frozen=True)
class Dummy:
    """An installation of the family: the Toolchain and launcher members only."""

    prefix: Path
    version: str = "1.0"
    name: str = "DummyMPI"
    wrapper_flags: tuple[str, ...] = ("-show",)
    standalone: bool = True

    @property
    def mpicc(self) -> Path:
        return self.prefix / "bin" / "mpicc"

    @property
    def mpirun(self) -> Path:
        return self.prefix / "bin" / "mpirun"

    @property
    def key(self) -> str:
        return f"dummy-{self.version}@{self.prefix}"

    def describe(self) -> str:
        return f"DummyMPI {self.version} at {self.prefix}"

    def runs_on(self, library: str) -> bool:
        return "DummyMPI" in library

    def tool_env(self) -> dict[str, str]:
        return {}


ALGS = {"reduce": {1: "pipe"}}
HEADER = "# dummy tuning file"


def _render(choices: dict[int, int]) -> str:
    """The family's own format: `SIZE ALGORITHM` lines under a header."""
    return HEADER + "\n" + "".join(f"{s} {a}\n" for s, a in sorted(choices.items()))


class DummyBackend(Backend[Dummy]):
    name = "dummy"
    formats = ("dummy",)
    short = "dm"
    output = "a dummy tuning file"

    def launch(self, mpi: Dummy, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        raise AssertionError("--from-db must not launch anything")

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return {"DUMMY_ALG": str(cfg.algorithm)}

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[Dummy]:
        return DummySession(self, self.find(opts.mpi), Catalog(algorithms=ALGS),
                            [place(n, None) for n in opts.nps], opts)

    def find(self, prefix: str | None) -> Dummy:
        return Dummy(Path(prefix or "/opt/dummy"))

    def claims(self, text: str) -> bool:
        return text.startswith(HEADER)

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        lines = read_text(path).splitlines()[1:]
        for no, line in enumerate(lines, 2):
            if len(line.split()) != 2 or not all(x.isdigit() for x in line.split()):
                raise FormatError(str(path), no, "want SIZE ALGORITHM")
        return Checked(f"dummy tuning file, {len(lines)} rule(s)", {"format": "dummy"}, [])

    def section_text(self, ctx: Context, decisions: list[Decision]) -> tuple[str, str] | None:
        return _render({d.size: d.chosen.algorithm for d in decisions
                        if d.chosen != DEFAULT}), "dummy format"

    def installable(self, req: ExportRequest) -> Installable:
        site = req.site or req.home
        return Installable([Planned(destination(site / "dummy.conf"), read_text(req.source),
                                    "the dummy tuning file")],
                           {"DUMMY_TUNING_FILE": str(site / "dummy.conf")}, "dummy tuning")


class DummySession(Session[Dummy]):
    def __init__(self, backend: DummyBackend, mpi: Dummy, catalog: Catalog,
                 placements: list[Placement], opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog = backend, mpi, catalog
        self.placements, self.opts, self.sweep = placements, opts, "relaunch"

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        return {"default": {}, "tuned": {"DUMMY_TUNING_FILE": str(path)}}

    def write(self, decisions: Decisions, summary: dict[str, object],
              predicted: dict[tuple[str, int], str]) -> None:
        np = max(self.opts.nps)
        choices = {d.size: d.chosen.algorithm for d in decisions["reduce"][np]
                   if d.chosen != DEFAULT}
        summary["wrote"] = {"what": "dummy tuning file", "use": "DUMMY_TUNING_FILE=FILE",
                            "notes": []}
        if self.opts.out:
            write_file(self.opts.out, _render(choices), "--out")
        return None


def _recorded(db: Path, mpi: Dummy) -> Context:
    """What a real run would have stored: the default and `pipe` at two sizes, `pipe`
    clearly faster at 64 KiB and the same at 1 KiB."""
    ctx = context_for(mpi, get_collective("reduce"), place(2, None))
    s = Store(db)
    s.add_catalog(mpi.key, "dummy", {"reduce": {0: "default", 1: "pipe"}})
    for alg, size, t in ((0, 1024, 10.0), (1, 1024, 10.0), (0, 65536, 40.0), (1, 65536, 20.0)):
        xs = [t * 1e-6 * (1 + 0.01 * i) for i in range(-5, 6)]
        s.add(ctx, Config(alg), PointResult(0, size, "ok", len(xs), sorted(xs)[5], min(xs),
                                            max(xs), samples=xs), "relaunch")
    s.close()
    return ctx


@pytest.fixture
def dummy(monkeypatch: pytest.MonkeyPatch) -> DummyBackend:
    b = DummyBackend()
    monkeypatch.setitem(registry.BACKENDS, b.name, b)
    monkeypatch.setattr(registry, "CHOICES", (*registry.CHOICES, b.name))
    return b


def test_a_family_defined_outside_colltune_goes_through_every_command(
        dummy: DummyBackend, tmp_path: Path) -> None:
    from colltune.outputs.export import export
    from colltune.reporting.report import load, write_report
    from colltune.tuner.run import tune

    mpi = Dummy(tmp_path / "dummy")
    db = tmp_path / "s.sqlite"
    _recorded(db, mpi)
    out = tmp_path / "tuned.dummy"
    res = tune(TuneOptions(["reduce"], [2], out=out, mpi=str(mpi.prefix), db=db,
                           from_db=True, backend="dummy", confirm_rounds=0))
    chosen = {d.size: d.chosen.algorithm for d in res.decisions["reduce"][2]}
    assert chosen == {1024: 0, 65536: 1}, res.decisions
    assert out.read_text() == HEADER + "\n65536 1\n"
    assert res.summary["wrote"]["what"] == "dummy tuning file"  # type: ignore[index]

    # tune check: the family's own reader, by what the file claims to be
    assert registry.for_file(out) is dummy
    assert dummy.check(out, None, None).doc["format"] == "dummy"

    # tune report: named by the catalog the store recorded, the section in its own format
    entries = load(db)
    assert [e.ctx.backend for e in entries] == ["dummy"]
    assert entries[0].slug.split("-")[2].startswith("dm")
    html = write_report(entries, tmp_path / "report").read_text()
    assert "dummy format" in html and "pipe" in html

    # tune export: the family's files and the module that sets its variable
    done = export(out, tmp_path / "site")
    assert (tmp_path / "site" / "dummy.conf").read_text() == out.read_text()
    lua = next(p for p in done if p.path.name == "tuned.lua")
    assert "DUMMY_TUNING_FILE" in lua.text
