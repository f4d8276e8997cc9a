"""A store written by colltune 0.1.0 (tests/data/store-0.1.0.sqlite: Open MPI 4.1.4 reduce,
bcast and alltoall at 2 and 3 ranks, MPICH 4.0.2 bcast, recorded on the host "vm" by that
release's `tune`) opens in today's colltune without loss: its parameter columns become
configuration keys, every row and value stays, a read-only open leaves the file as it was,
and `tune --from-db` on it writes byte for byte what 0.1.0's own `tune --from-db` wrote
(tests/golden/store-0.1.0-*, with time stamps and the output path
replaced by placeholders), but for the comment added since that says each section's
layout (issue 62), one per section measured. And a store of the release before MPICH's
parameters took their own names (radix, chunk) reads renamed, writing what that release
wrote. How they
were recorded: docs/architecture.md, "Stores"."""

from __future__ import annotations

import hashlib
import re
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest

from colltune.core.catalog import CHUNK, FAN, MAXREQ, RADIX, SEG
from colltune.core.config import Config
from colltune.options import TuneOptions
from colltune.store import Store
from colltune.store.schema import KEY_COLUMNS, OLD_PARAM_COLUMNS
from colltune.tuner.run import tune

RECORDED = Path(__file__).parent / "data" / "store-0.1.0.sqlite"
GOLDEN = Path(__file__).parent / "golden"
HOST = "vm"  # where the store was recorded: a store's contexts are per host


def _rows(path: Path, table: str) -> list[dict[str, object]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(f"SELECT * FROM {table} ORDER BY id")]
    finally:
        con.close()


def _migrated(tmp_path: Path) -> Path:
    db = tmp_path / "old.sqlite"
    shutil.copyfile(RECORDED, db)
    Store(db).close()
    return db


def test_an_old_store_migrates_every_row_and_value(tmp_path: Path) -> None:
    old = {t: _rows(RECORDED, t) for t, _ in KEY_COLUMNS if t != "decisions"}
    assert set(OLD_PARAM_COLUMNS) <= set(old["measurements"][0])  # really the old schema
    assert any(r["segsize"] for r in old["measurements"])  # and parameters to carry over
    db = _migrated(tmp_path)
    new = {t: _rows(db, t) for t in old}
    for m_old, m_new in zip(old["measurements"], new["measurements"], strict=True):
        # the columns' values are now the key's; everything else is as it was
        want = Config.of(int(m_old["algorithm"]), {  # type: ignore[call-overload]
            SEG: m_old["segsize"], FAN: m_old["fanout"], MAXREQ: m_old["max_requests"]})
        assert m_new["config_key"] == want.key
        assert Config.from_key(str(m_new["config_key"])) == want
        assert {k: v for k, v in m_old.items() if k not in OLD_PARAM_COLUMNS
                and k != "config_key"} == {k: v for k, v in m_new.items()
                                           if k != "config_key" and k in m_old}
        # a column added since carries what its rows were measured as: one launch each
        assert {k: v for k, v in m_new.items() if k not in m_old} == {"strata": "[]"}
    for table in ("counters", "confirmations"):
        assert len(new[table]) == len(old[table])
        for a, b in zip(old[table], new[table], strict=True):
            assert b["config_key"] == Config.from_key(str(a["config_key"])).key
    old_dec, new_dec = _rows(RECORDED, "decisions"), _rows(db, "decisions")
    assert [Config.from_key(str(d["chosen"])) for d in old_dec] == [
        Config.from_key(str(d["chosen"])) for d in new_dec]
    assert all(re.fullmatch(r"a\d+(/[a-z_]+=\d+)*", str(d["chosen"])) for d in new_dec)
    # a second open finds nothing to do
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    Store(db).close()
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_a_read_only_open_reads_an_old_store_as_migrated_and_leaves_it(tmp_path: Path
                                                                       ) -> None:
    copy = tmp_path / "ro.sqlite"
    shutil.copyfile(RECORDED, copy)
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    ro = Store(copy, readonly=True)
    rw = Store(_migrated(tmp_path))
    try:
        ctxs = ro.contexts()
        assert ctxs == rw.contexts() and len(ctxs) == 6
        for ctx in ctxs:
            assert ro.measurements(ctx) == rw.measurements(ctx)
            assert ro.decisions(ctx) == rw.decisions(ctx)
    finally:
        ro.close()
        rw.close()
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before


def _normalised(text: str, out: Path) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "<stamp>", text)
    return text.replace(str(out.with_suffix(".json")), "<out>")


@pytest.mark.mpi  # reads the installed Open MPI 4.1.4 and MPICH 4.0.2, launches nothing
@pytest.mark.parametrize("coll,nps,fmt,suffix", [
    ("reduce", [2, 3], "openmpi", ".conf"), ("bcast", [2], "openmpi", ".conf"),
    ("alltoall", [2], "openmpi", ".conf"), ("bcast", [2, 3], "mpich", ".json")])
def test_from_db_on_an_old_store_writes_what_its_release_wrote(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, coll: str, nps: list[int],
        fmt: str, suffix: str) -> None:
    from conftest import get_mpi, get_mpich

    get_mpi("ompi41") if fmt == "openmpi" else get_mpich("mpich40")  # skips with the reason
    db = tmp_path / "old.sqlite"
    shutil.copyfile(RECORDED, db)
    monkeypatch.setattr(socket, "gethostname", lambda: HOST)
    out = tmp_path / f"out{suffix}"
    tune(TuneOptions([coll], nps, out=out, mpi="/usr", db=db, from_db=True, backend=fmt))
    name = f"store-0.1.0-{fmt if fmt == 'mpich' else coll}"
    written = [(out, GOLDEN / f"{name}{suffix}")]
    if fmt == "mpich":
        written.append((out.with_suffix(".env"), GOLDEN / f"{name}.env"))
    for got, want in written:
        text = got.read_text()
        layouts = [ln for ln in text.splitlines(keepends=True) if ln.startswith("# tuned for ")]
        assert len(layouts) == (len(nps) if fmt == "openmpi" else 0), layouts
        text = "".join(ln for ln in text.splitlines(keepends=True) if ln not in layouts)
        assert _normalised(text, out) == want.read_text(), got.name


def test_an_old_store_with_a_key_no_release_wrote_is_refused_untouched(tmp_path: Path
                                                                       ) -> None:
    """A store is data someone else may have written: a key colltune cannot read stops
    the migration with a store error (no traceback), and the file stays as it was."""
    from colltune.errors import StoreError

    db = tmp_path / "bad.sqlite"
    shutil.copyfile(RECORDED, db)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE measurements SET config_key='a1/<script>' WHERE id=1")
    con.close()
    before = _rows(db, "measurements")
    for readonly in (False, True):
        with pytest.raises(StoreError, match="configuration key colltune cannot read"):
            Store(db, readonly=readonly)
    # rolled back whole: the old columns and every key as they were
    assert _rows(db, "measurements") == before and "segsize" in before[0]


# --- MPICH's parameters under their own names ---------------------------------------------
# A store the release before today's wrote (tests/data/store-mpich-5.0.2-91fde8d.sqlite:
# `tune bcast --backend mpich --segsizes 0,4K` on MPICH 5.0.2 at 4 ranks, commit 91fde8d),
# when MPICH's radix and chunk size were stored under coll/tuned's names (fanout, segsize).
MPICH_STORE = Path(__file__).parent / "data" / "store-mpich-5.0.2-91fde8d.sqlite"
MPICH_HOST = "vm"  # where it was recorded
MPICH_PREFIX = "/work/main/.venv-mpich"  # the installation it was recorded with


def _keys(path: Path) -> list[tuple[str, str]]:
    return [(str(r["mpi_key"]), str(r[column])) for table, column in KEY_COLUMNS
            for r in _rows(path, table)]


def test_mpich_parameters_stored_under_coll_tuned_names_are_renamed(tmp_path: Path) -> None:
    old = _keys(MPICH_STORE)
    assert any("/segsize=" in k for _, k in old) and any("/fanout=" in k for _, k in old)
    db = tmp_path / "m.sqlite"
    shutil.copyfile(MPICH_STORE, db)
    ro = Store(db, readonly=True)  # read as renamed, the file left as it was
    ro_rows = {c: ro.measurements(c) for c in ro.contexts()}
    ro.close()
    assert _keys(db) == old
    Store(db).close()
    new = _keys(db)
    # every row kept, each key with its values under MPICH's own names
    assert len(new) == len(old)
    for (mk, a), (mk2, b) in zip(old, new, strict=True):
        was = Config.from_key(a)
        assert mk2 == mk and Config.from_key(b) == Config.of(was.algorithm, {
            {SEG: CHUNK, FAN: RADIX}[n]: v for n, v in was.params})
    assert not any("/segsize=" in k or "/fanout=" in k for _, k in new)
    assert any("/chunk=" in k for _, k in new) and any("/radix=" in k for _, k in new)
    rw = Store(db)
    try:
        assert {c: rw.measurements(c) for c in rw.contexts()} == ro_rows
    finally:
        rw.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    Store(db).close()  # a second open finds nothing to do
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.mpi  # reads MPICH 5.0.2's catalog, launches no collective
def test_from_db_on_a_store_with_mpich_old_names_writes_what_that_release_wrote(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from conftest import get_mpich

    mpich = get_mpich("mpich50")
    db = tmp_path / "m.sqlite"
    shutil.copyfile(MPICH_STORE, db)
    with sqlite3.connect(db) as con:  # the store moved with its installation
        for table, _ in KEY_COLUMNS:
            con.execute(f"UPDATE {table} SET mpi_key=replace(mpi_key, ?, ?)",
                        (MPICH_PREFIX, str(mpich.prefix)))
        con.execute("UPDATE measurements SET mpi_path=replace(mpi_path, ?, ?)",
                    (MPICH_PREFIX, str(mpich.prefix)))
        con.execute("UPDATE catalogs SET mpi_key=replace(mpi_key, ?, ?)",
                    (MPICH_PREFIX, str(mpich.prefix)))
    con.close()
    monkeypatch.setattr(socket, "gethostname", lambda: MPICH_HOST)
    out = tmp_path / "out.json"
    tune(TuneOptions(["bcast"], [4], out=out, mpi=str(mpich.prefix), db=db, from_db=True,
                     backend="mpich"))
    for got, want in ((out, "store-mpich-5.0.2-91fde8d.json"),
                      (out.with_suffix(".env"), "store-mpich-5.0.2-91fde8d.env")):
        assert _normalised(got.read_text(), out).replace(str(mpich.prefix), "<prefix>") == (
            GOLDEN / want).read_text(), got.name


def test_a_point_stored_under_both_names_keeps_todays_row(tmp_path: Path) -> None:
    """An older release that wrote to a store after a newer one renamed it leaves a point
    under both names: the store holds one row per point, and it keeps today's."""
    db = tmp_path / "m.sqlite"
    shutil.copyfile(MPICH_STORE, db)
    with sqlite3.connect(db) as con:
        row = con.execute("SELECT id, config_key, size FROM measurements WHERE config_key LIKE "
                          "'%/fanout=%' ORDER BY id LIMIT 1").fetchone()
        cols = [r[1] for r in con.execute("PRAGMA table_info(measurements)") if r[1] != "id"]
        was = Config.from_key(row[1])
        today = Config.of(was.algorithm, {{SEG: CHUNK, FAN: RADIX}[n]: v
                                          for n, v in was.params}).key
        con.execute(f"INSERT INTO measurements ({', '.join(cols)}) SELECT "
                    f"{', '.join('?' if c in ('config_key', 'median') else c for c in cols)} "
                    "FROM measurements WHERE id=?", (today, 1.0, row[0]))
    assert cols.index("config_key") < cols.index("median")  # the order of the ? above
    con.close()
    n = len(_rows(db, "measurements"))
    Store(db).close()
    after = _rows(db, "measurements")
    assert len(after) == n - 1  # the old-named duplicate went
    kept = [r for r in after if r["config_key"] == today and r["size"] == row[2]]
    assert len(kept) == 1 and kept[0]["median"] == 1.0


def test_recorded_stores_leave_nothing_beside_them_when_read() -> None:
    """A recorded store in WAL mode grows -wal and -shm files in the checkout whenever a
    test reads it in place: tests/data holds them in rollback-journal mode (header byte 18:
    1; WAL: 2)."""
    for db in sorted((Path(__file__).parent / "data").glob("*.sqlite")):
        assert db.read_bytes()[18] == 1, f"{db.name}: PRAGMA journal_mode=DELETE on it"
