"""The store's schema, its migrations and how a store file is opened: created or
migrated for writing, or read-only (an older store migrated in a copy in memory)."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

from colltune.core.config import Config
from colltune.errors import StoreError

SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    mpi_key TEXT NOT NULL,
    mpi_name TEXT NOT NULL,
    mpi_version TEXT NOT NULL,
    mpi_path TEXT NOT NULL,
    host TEXT NOT NULL,
    np INTEGER NOT NULL,
    ppn INTEGER NOT NULL,
    nodes INTEGER NOT NULL,
    collective TEXT NOT NULL,
    config_key TEXT NOT NULL,
    algorithm INTEGER NOT NULL,
    size INTEGER NOT NULL,
    status TEXT NOT NULL,
    n INTEGER NOT NULL,
    median REAL, ci_lo REAL, ci_hi REAL, mean REAL, min REAL, max REAL,
    samples TEXT NOT NULL,
    message TEXT NOT NULL,
    sweep TEXT NOT NULL,
    created TEXT NOT NULL,
    timing TEXT NOT NULL DEFAULT 'isolated',
    objective TEXT NOT NULL DEFAULT 'completion',
    series TEXT NOT NULL DEFAULT '{}',
    backend TEXT NOT NULL DEFAULT '',
    strata TEXT NOT NULL DEFAULT '[]',
    UNIQUE (mpi_key, host, np, ppn, collective, config_key, size)
);
CREATE TABLE IF NOT EXISTS counters (
    id INTEGER PRIMARY KEY,
    mpi_key TEXT NOT NULL,
    host TEXT NOT NULL,
    np INTEGER NOT NULL,
    ppn INTEGER NOT NULL,
    collective TEXT NOT NULL,
    config_key TEXT NOT NULL,
    size INTEGER NOT NULL,
    counts TEXT NOT NULL,
    UNIQUE (mpi_key, host, np, ppn, collective, config_key, size)
);
CREATE TABLE IF NOT EXISTS confirmations (
    id INTEGER PRIMARY KEY,
    mpi_key TEXT NOT NULL,
    host TEXT NOT NULL,
    np INTEGER NOT NULL,
    ppn INTEGER NOT NULL,
    collective TEXT NOT NULL,
    size INTEGER NOT NULL,
    config_key TEXT NOT NULL,
    verdict TEXT NOT NULL,
    default_median REAL NOT NULL,
    tuned_median REAL NOT NULL,
    p_faster REAL NOT NULL,
    p_slower REAL NOT NULL,
    rounds_won INTEGER NOT NULL,
    rounds INTEGER NOT NULL,
    launch_speedup REAL NOT NULL,
    created TEXT NOT NULL,
    modes TEXT NOT NULL DEFAULT '{}',
    UNIQUE (mpi_key, host, np, ppn, collective, size, config_key)
);
CREATE TABLE IF NOT EXISTS models (
    id INTEGER PRIMARY KEY,
    mpi_key TEXT NOT NULL,
    mpi_version TEXT NOT NULL,
    host TEXT NOT NULL,
    np INTEGER NOT NULL,
    ppn INTEGER NOT NULL,
    model TEXT NOT NULL,
    params TEXT NOT NULL,
    probe TEXT NOT NULL,
    created TEXT NOT NULL,
    UNIQUE (mpi_key, host, np, ppn, model)
);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY,
    mpi_key TEXT NOT NULL,
    host TEXT NOT NULL,
    np INTEGER NOT NULL,
    ppn INTEGER NOT NULL,
    collective TEXT NOT NULL,
    size INTEGER NOT NULL,
    chosen TEXT NOT NULL,
    verdict TEXT NOT NULL,
    evidence TEXT NOT NULL,
    created TEXT NOT NULL,
    UNIQUE (mpi_key, host, np, ppn, collective, size)
);
CREATE TABLE IF NOT EXISTS catalogs (
    mpi_key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    algorithms TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS allocations (
    id INTEGER PRIMARY KEY,
    mpi_key TEXT NOT NULL,
    host TEXT NOT NULL,
    collectives TEXT NOT NULL,
    nps TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    simulated INTEGER NOT NULL,
    node_seconds REAL NOT NULL,
    account TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS timers (
    mpi_key TEXT NOT NULL,
    host TEXT NOT NULL,
    wtick REAL NOT NULL,
    step REAL NOT NULL,
    created TEXT NOT NULL,
    PRIMARY KEY (mpi_key, host)
);
"""

# Columns added after stores were in use: an older store gets them with the values its
# rows were measured with (one call after a barrier, the slowest rank, no per-mode verdicts)
MIGRATIONS = [
    ("measurements", "timing", "TEXT NOT NULL DEFAULT 'isolated'"),
    ("measurements", "objective", "TEXT NOT NULL DEFAULT 'completion'"),
    ("measurements", "series", "TEXT NOT NULL DEFAULT '{}'"),
    ("confirmations", "modes", "TEXT NOT NULL DEFAULT '{}'"),
    ("measurements", "backend", "TEXT NOT NULL DEFAULT ''"),
    # which launch each run of samples came from (tune online pools several runs' calls)
    ("measurements", "strata", "TEXT NOT NULL DEFAULT '[]'"),
]
# columns of Open MPI's parameters that stores had before catalogs declared parameters:
# their values live in the configuration key since (a3/segsize=1024, was a3/s1024/f0/r0)
OLD_PARAM_COLUMNS = ("segsize", "fanout", "max_requests")
# where configuration keys are stored
KEY_COLUMNS = (("measurements", "config_key"), ("counters", "config_key"),
               ("confirmations", "config_key"), ("decisions", "chosen"))




@dataclass(frozen=True)
class Rename:
    """Parameter names one family's older stores gave its configurations (MPICH's radix
    was stored as coll/tuned's fanout): renamed in that family's rows when a store opens."""

    owns: Callable[[str], bool]  # whose rows, by installation key
    names: Mapping[str, str]  # stored name -> today's


# each family registers its own (backends/registry.py): the store knows no family
RENAMES: list[Rename] = []


def _fail_open(path: Path, e: Exception) -> NoReturn:
    raise StoreError(f"cannot open the measurement store {path}: {e}",
                     "pass a writable file with --db PATH") from None


# the tables a store holds (one being made by another tuner may hold only some so far):
# a file with any other table is someone else's database
def _own_tables() -> set[str]:
    return set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA))


def _refuse_foreign(path: Path, db: sqlite3.Connection) -> None:
    """StoreError unless the file is empty or colltune's own store: writing would convert
    another program's database (WAL mode, colltune's tables added)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables - _own_tables() - {"sqlite_sequence", "sqlite_stat1"}:
        db.close()
        raise StoreError(f"{path} is an SQLite database that is not a colltune store: "
                         "nothing was written to it", "pass your own store with --db")


def open_writable(path: Path) -> sqlite3.Connection:
    """The store at `path`, created or migrated as needed (WAL, so tuners can share it).
    Opened only as a regular file: a link (even one to a missing file) is refused, and so
    is another program's database; SQLite itself refuses a link swapped in before it opens
    (nofollow)."""
    if path.is_symlink():
        raise StoreError(f"--db {path} is a symbolic link: a store is opened only as a "
                         "regular file (a link could point at another user's database)",
                         "pass the file itself with --db")
    if path.exists() and not path.is_file():
        raise StoreError(f"--db {path} is not a regular file", "pass a file with --db")
    uri = f"file:{quote(str(path.absolute()))}?nofollow=1"
    # two tuners starting on one store race to switch it to WAL and create the tables;
    # SQLite answers "database is locked" at once there, without waiting: retry
    deadline = time.monotonic() + 60
    while True:
        db: sqlite3.Connection | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
            _refuse_foreign(path, db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
            migrate(db)
            return db
        except sqlite3.OperationalError as e:
            if ("locked" not in str(e) and "duplicate column" not in str(e)) or \
                    time.monotonic() > deadline:
                _fail_open(path, e)
            if db is not None:
                db.close()
            time.sleep(0.1)
        except (sqlite3.Error, OSError) as e:
            _fail_open(path, e)


def open_readonly(path: Path) -> sqlite3.Connection:
    """The store at `path` through SQLite's read-only mode; an older one is migrated in a
    copy in memory, its file untouched."""
    if not path.is_file():
        raise StoreError(f"no measurement store at {path}", "pass the --db used when tuning")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        try:
            db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.OperationalError:
            # a WAL store whose -shm/-wal files cannot be created (a read-only
            # filesystem, a directory the reader cannot write): read it as immutable
            db = sqlite3.connect(uri + "&immutable=1", uri=True, timeout=60,
                                 isolation_level=None)
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as e:
        raise StoreError(f"cannot read the measurement store {path}: {e}",
                         "pass the --db used when tuning") from None
    if not {"measurements", "confirmations", "models"} <= tables:
        db.close()
        raise StoreError(f"{path} is not a colltune measurement store",
                         "pass the --db used when tuning")
    if outdated(db):
        memory = sqlite3.connect(":memory:", isolation_level=None)
        db.backup(memory)
        db.close()
        db = memory
        db.executescript(SCHEMA)
        migrate(db)
    return db


def has(db: sqlite3.Connection, table: str, column: str) -> bool:
    """Whether a store has a column (added since, or dropped since)."""
    return column in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def outdated(db: sqlite3.Connection) -> bool:
    if any(not has(db, t, c) for t, c, _ in MIGRATIONS) or has(
            db, "measurements", OLD_PARAM_COLUMNS[0]):
        return True
    return bool(_stale_names(db))


def migrate(db: sqlite3.Connection) -> None:
    """An older store in today's form, in one transaction: a store someone else wrote that
    cannot be read (a key no release wrote) is left exactly as it was, new columns too."""
    if not outdated(db):
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for table, column, decl in MIGRATIONS:  # checked again: not done by a racing tuner
            if not has(db, table, column):
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        if has(db, "measurements", OLD_PARAM_COLUMNS[0]):
            _rekey(db)
        if _stale_names(db):
            _rename(db)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _today(key: str) -> str:
    """An older store's configuration key in today's form; a key no release wrote (the
    store is data another user may have written) is a store error, not a traceback."""
    try:
        return Config.from_key(key).key
    except ValueError:
        raise StoreError(f"the store holds a configuration key colltune cannot read: "
                         f"{key[:60]!r}", "pass a store colltune wrote (--db)") from None


def _renamed(key: str, names: Mapping[str, str]) -> str:
    cfg = Config.from_key(_today(key))
    return Config.of(cfg.algorithm, {names.get(n, n): v for n, v in cfg.params}).key


def _stale_names(db: sqlite3.Connection) -> list[tuple[str, str, str, str, str]]:
    """(table, column, installation key, stored key, today's key) of every configuration
    key a registered family stored under names it has renamed since."""
    if not RENAMES:
        return []
    out = []
    for table, column in KEY_COLUMNS:
        for mpi_key, key in db.execute(f"SELECT DISTINCT mpi_key, {column} FROM {table}"):
            for r in RENAMES:
                if r.owns(str(mpi_key)) and any(f"/{n}=" in str(key) for n in r.names):
                    out.append((table, column, mpi_key, key, _renamed(str(key), r.names)))
    return out


def _rename(db: sqlite3.Connection) -> None:
    """Every stale key in today's names, in one transaction. A point stored under both
    names (an older release wrote to the store after a newer one renamed it) keeps the
    row under today's name: a store holds one row per point. Inside migrate's transaction."""
    for table, column, mpi_key, old, new in _stale_names(db):
        db.execute(f"UPDATE OR IGNORE {table} SET {column}=? WHERE mpi_key=? AND {column}=?",
                   (new, mpi_key, old))
        db.execute(f"DELETE FROM {table} WHERE mpi_key=? AND {column}=?", (mpi_key, old))


def _rekey(db: sqlite3.Connection) -> None:
    """Configuration keys of the parameter columns' time in today's form, and the columns
    dropped, inside migrate's transaction: a store is either old or migrated."""
    for table, column in KEY_COLUMNS:
        olds = [r[0] for r in db.execute(f"SELECT DISTINCT {column} FROM {table}")]
        new = {k: _today(k) for k in olds}
        db.executemany(f"UPDATE {table} SET {column}=? WHERE {column}=?",
                       [(n, k) for k, n in new.items() if n != k])
    for column in OLD_PARAM_COLUMNS:
        db.execute(f"ALTER TABLE measurements DROP COLUMN {column}")
