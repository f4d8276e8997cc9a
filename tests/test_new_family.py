"""A new MPI family is one module plus a registry line (issue 34): a family defined here,
in tests/ only (its installation class, a catalog of one algorithm, its own file format),
registered at run time, goes through `tune --from-db`, `tune check`, `tune verify`'s
planning, `tune report` and `tune export` with no edit to colltune, and so does its own
algorithm parameter (a spread its catalog declares: searched, asked for by name with
--param, stored, decided, labelled and written by name). What it
can do is asked of its backend; if generic code still asked which family it drives, this
family would be refused or written as Open MPI's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from colltune.backends import registry
from colltune.backends.apps import AppSupport
from colltune.backends.base import Backend, Decisions, Session, Written, write_file
from colltune.backends.files import (
    Arms,
    Checked,
    ExportRequest,
    FileFormats,
    Installable,
    VerifyTarget,
)
from colltune.collectives import Collective, get_collective
from colltune.core.catalog import Catalog, Param
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult
from colltune.core.space import configurations
from colltune.errors import ColltuneError, FormatError, read_text
from colltune.launchers import Launch
from colltune.options import TuneOptions
from colltune.outfile import Planned, destination
from colltune.slots import Placement, place
from colltune.store import Context, Measurement, Store
from colltune.tuner.measure import context_for
from families import Installed, register


class Dummy(Installed):
    """An installation of the family (DummyMPI, keys dummy-...)."""


ALGS = {"reduce": {1: "pipe"}}
HEADER = "# dummy tuning file"
SPREAD = "spread"  # a parameter no family in colltune has


class DummyCatalog(Catalog):
    """One algorithm, `pipe`, whose spread is tunable: 0 (the library's) or 2, 4, 8."""

    def declared(self) -> tuple[Param, ...]:
        return (Param(SPREAD, "s"),)

    def param_values(self, coll: str, alg: int, np: int, grid: dict[str, list[int]]
                     ) -> dict[str, list[int]]:
        return {SPREAD: grid.get(SPREAD, [0, 2, 4, 8])} if alg == 1 else {}


def _render(choices: dict[int, Config]) -> str:
    """The family's own format: `SIZE ALGORITHM SPREAD` lines under a header."""
    return HEADER + "\n" + "".join(f"{s} {c.algorithm} {c.get(SPREAD)}\n"
                                   for s, c in sorted(choices.items()))


class DummyFiles(FileFormats):
    """Its own format: read, checked, verified, reported and exported."""

    def claims(self, text: str) -> bool:
        return text.startswith(HEADER)

    def check(self, path: Path, mpi: str | None, version: str | None) -> Checked:
        lines = read_text(path).splitlines()[1:]
        for no, line in enumerate(lines, 2):
            if len(line.split()) != 3 or not all(x.isdigit() for x in line.split()):
                raise FormatError(str(path), no, "want SIZE ALGORITHM SPREAD")
        return Checked(f"dummy tuning file, {len(lines)} rule(s)", {"format": "dummy"}, [])

    def verify_target(self, path: Path, np: int, mpi_prefix: str | None,
                      hostfile: str | None, launch: Launch | None = None) -> VerifyTarget:
        rules = sorted((int(s), Config.of(int(a), {SPREAD: int(r)}))
                       for s, a, r in (ln.split() for ln in read_text(path).splitlines()[1:]))

        def rule_at(coll: Collective, n: int, size: int) -> Config | None:
            here = [c for s, c in rules if s <= size]  # a line holds from its size up
            return here[-1] if here else None

        def applied(coll: Collective, n: int, sizes: list[int]) -> tuple[str, str]:
            raise ColltuneError("DummyMPI shows nothing of what it runs")

        return VerifyTarget(self.backend.with_apps().find(mpi_prefix),
                            DummyCatalog(algorithms=ALGS), ["reduce"],
                            {"default": {}, "tuned": {"DUMMY_TUNING_FILE": str(path)}},
                            place(np, hostfile), rule_at, applied)

    def section_text(self, ctx: Context, decisions: list[Decision]) -> tuple[str, str] | None:
        return _render({d.size: d.chosen for d in decisions
                        if d.chosen != DEFAULT}), "dummy format"

    def installable(self, req: ExportRequest) -> Installable:
        site = req.site or req.home
        return Installable([Planned(destination(site / "dummy.conf"), read_text(req.source),
                                    "the dummy tuning file")],
                           {"DUMMY_TUNING_FILE": str(site / "dummy.conf")}, "dummy tuning")


class DummyApps(AppSupport[Dummy]):
    def find(self, prefix: str | None) -> Dummy:
        return Dummy(Path(prefix or "/opt/dummy"))

    def launcher_env(self, env: dict[str, str]) -> list[str]:
        return [f"--env={k}={v}" for k, v in env.items()]


class DummyBackend(Backend[Dummy]):
    name = "dummy"
    formats = ("dummy",)
    short = "dm"
    output = "a dummy tuning file"
    Files = DummyFiles
    apps = DummyApps()

    def launch(self, mpi: Dummy, placement: Placement, coll: str, alg: int,
               env_extra: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        raise AssertionError("--from-db must not launch anything")

    def forcing_env(self, catalog: Catalog, coll: Collective, cfg: Config) -> dict[str, str]:
        return {"DUMMY_ALG": str(cfg.algorithm)}

    def open(self, opts: TuneOptions, colls: list[str], note: Callable[[str], None]
             ) -> Session[Dummy]:
        return DummySession(self, self.with_apps().find(opts.mpi),
                            DummyCatalog(algorithms=ALGS), [place(n, None) for n in opts.nps],
                            opts)

    def catalog_for(self, ctx: Context, names: dict[str, dict[int, str]] | None
                    ) -> Catalog | None:
        return DummyCatalog(algorithms=names or ALGS, source="store")


class DummySession(Session[Dummy]):
    def __init__(self, backend: DummyBackend, mpi: Dummy, catalog: Catalog,
                 placements: list[Placement], opts: TuneOptions) -> None:
        self.backend, self.mpi, self.catalog = backend, mpi, catalog
        self.placements, self.opts, self.sweep = placements, opts, "relaunch"
        self.stored: Callable[[], int] = lambda: 0

    def decided(self, name: str, placement: Placement, ds: list[Decision],
                ms: list[Measurement], store: Store, ctx: Context) -> list[Decision]:
        # read later, as MVAPICH2's ties read stored verdicts while its profile is written
        self.stored = lambda: len(store.measurements(ctx))
        return ds

    def arms(self, coll: Collective, placement: Placement, ds: list[Decision], path: Path
             ) -> Arms:
        return {"default": {}, "tuned": {"DUMMY_TUNING_FILE": str(path)}}

    def write(self, decisions: Decisions, predicted: dict[tuple[str, int], str]) -> Written:
        np = max(self.opts.nps)
        choices = {d.size: d.chosen for d in decisions["reduce"][np] if d.chosen != DEFAULT}
        if self.opts.out:
            write_file(self.opts.out, _render(choices), "--out")
        return Written("dummy tuning file", use="DUMMY_TUNING_FILE=FILE",
                       notes=[f"{self.stored()} points stored"])


def _recorded(db: Path, mpi: Dummy) -> Context:
    """What a real run of the grid would have stored: the default and `pipe` at each radix,
    at two sizes; `pipe` with radix 4 clearly fastest at 64 KiB, all the same at 1 KiB."""
    ctx = context_for(mpi, get_collective("reduce"), place(2, None))
    s = Store(db)
    s.add_catalog(mpi.key, "dummy", {"reduce": {0: "default", 1: "pipe"}})
    grid = configurations(get_collective("reduce"), DummyCatalog(algorithms=ALGS), 2)
    assert grid == [DEFAULT] + [Config.of(1, {SPREAD: r}) for r in (0, 2, 4, 8)]
    for cfg in grid:
        for size in (1024, 65536):
            t = 10.0 if size == 1024 else {0: 40.0, 4: 20.0}.get(cfg.get(SPREAD), 30.0)
            xs = [t * 1e-6 * (1 + 0.01 * i) for i in range(-5, 6)]
            s.add(ctx, cfg, PointResult(0, size, "ok", len(xs), sorted(xs)[5], min(xs),
                                        max(xs), samples=xs), "relaunch")
    s.close()
    return ctx


@pytest.fixture
def dummy(monkeypatch: pytest.MonkeyPatch) -> DummyBackend:
    b = DummyBackend()
    register(monkeypatch, b)
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
    chosen = {d.size: d.chosen for d in res.decisions["reduce"][2]}
    assert chosen == {1024: DEFAULT, 65536: Config.of(1, {SPREAD: 4})}, res.decisions
    assert out.read_text() == HEADER + "\n65536 1 4\n"
    assert res.summary["collectives"]["reduce"]["2"][1]["chosen"][SPREAD] == 4  # type: ignore[index]
    # the store is still open while a session writes (it may read stored verdicts then)
    assert res.summary["wrote"] == {"what": "dummy tuning file", "notes": ["10 points stored"],
                                    "use": "DUMMY_TUNING_FILE=FILE", "also": None}

    # --param: the values asked for, by the name the family's catalog declares; any other
    # name refused before anything runs, naming the family's own
    session = dummy.open(TuneOptions(["reduce"], [2], mpi=str(mpi.prefix)), ["reduce"], print)
    grid = session.grid(TuneOptions(["reduce"], [2], params={SPREAD: [0, 8]}))
    assert configurations(get_collective("reduce"), session.catalog, 2, grid) == [
        DEFAULT, Config(1), Config.of(1, {SPREAD: 8})]
    with pytest.raises(ColltuneError, match="radix") as refused:
        session.grid(TuneOptions(["reduce"], [2], params={"radix": [2]}))
    assert "its parameters: spread" in (refused.value.hint or "")

    # a family whose catalog names no table of cost formulas: --predict and --strategy
    # model are refused as such, whatever the family
    for ask in ({"predict": True}, {"strategy": "model"}):
        with pytest.raises(ColltuneError, match="need cost formulas for DummyMPI"):
            tune(TuneOptions(["reduce"], [2], mpi=str(mpi.prefix), db=db, from_db=True,
                             backend="dummy", **ask))  # type: ignore[arg-type]

    # tune check: the family's own reader, by what the file claims to be
    assert registry.for_file(out) is dummy
    assert dummy.with_files().check(out, None, None).doc["format"] == "dummy"

    # tune verify's plan: the sizes the file changes and both sides of its boundary, found
    # on the family's own reading of its file
    from colltune.verification.verify import plan

    target = registry.for_file(out).with_files().verify_target(out, 2, str(mpi.prefix),
                                                                None)
    [(coll, shown, edges, tested)] = plan(target, target.collectives, 2, None)
    assert coll.name == "reduce" and edges == {65536 - coll.granularity, 65536}
    assert tested == [s for s in shown if s >= 65536] and edges < set(shown)

    # tune report: named by the catalog the store recorded, the section in its own format
    entries = load(db)
    assert [e.ctx.backend for e in entries] == ["dummy"]
    assert entries[0].slug.split("-")[2].startswith("dm")
    html = write_report(entries, tmp_path / "report").read_text()
    assert "dummy format" in html and "pipe(1) s=4" in html

    # tune export: the family's files and the module that sets its variable
    done = export(out, tmp_path / "site")
    assert (tmp_path / "site" / "dummy.conf").read_text() == out.read_text()
    lua = next(p for p in done if p.path.name == "tuned.lua")
    assert "DUMMY_TUNING_FILE" in lua.text

    # the commands' help (--backend, --format, export --from) lists it, from the registry
    assert "dummy (a dummy tuning file)" in registry.backend_help()
    assert "dummy (a dummy tuning file)" in registry.format_help()
    assert "a dummy tuning file" in registry.outputs_help()


def test_a_refusal_names_the_families_that_can_from_the_registry() -> None:
    """Issue 63: hand-written lists of families went stale (tune profile's left out Intel
    MPI, tune runtime's MVAPICH2); the hints now come from the registry."""
    from colltune.backends.base import who_can
    from colltune.backends.registry import BACKENDS, CHOICES

    finders = [n for n in CHOICES if n != "smpi"]
    assert who_can("apps") == "use --backend " + ", ".join(finders[:-1]) + " or " + \
        finders[-1]
    assert "mvapich2" in who_can("runtime") and "impi" not in who_can("runtime")
    assert who_can("bands") == "use --backend impi"
    with pytest.raises(ColltuneError) as e:
        BACKENDS["smpi"].with_apps()
    assert e.value.hint == who_can("apps")
