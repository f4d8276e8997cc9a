"""Outputs and the store under hostile conditions, without MPI: a writer killed at random
moments, a full disk, a read-only disk, several processes writing one store at once."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from colltune.core.config import Config
from colltune.core.records import PointResult
from colltune.errors import ColltuneError
from colltune.outfile import ensure_writable, write_atomic
from colltune.store import Context, Store

CTX = Context("k", "Open MPI", "9.9", "/x", "host", 4, 4, 1, "reduce")


def _result(size: int) -> PointResult:
    return PointResult(cid=0, size=size, status="ok", n=3, median=1e-6, ci_lo=9e-7,
                       ci_hi=1.1e-6, mean=1e-6, min=9e-7, max=1.1e-6, samples=[1e-6] * 3)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs: a disk that really fills up."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip()}): needs root "
                    "with CAP_SYS_ADMIN")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path) -> None:
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


WRITER = """
import sys
from colltune.outfile import write_atomic
a, b, path = sys.argv[1], sys.argv[2], sys.argv[3]
texts = [open(a).read(), open(b).read()]
i = 0
print("ready", flush=True)
while True:
    write_atomic(path, texts[i % 2])
    i += 1
"""


def test_writer_killed_at_random_moments_leaves_old_or_new_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("# A\n" + "1 0 0 0\n" * 150_000)  # about 1 MiB, so a kill lands mid-write
    b.write_text("# B\n" + "2 0 0 0\n" * 120_000)
    out = tmp_path / "out" / "rules.conf"
    out.parent.mkdir()
    rng = random.Random(20261121)
    seen = set()
    kills = 30
    for _ in range(kills):
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(a), str(b), str(out)],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        if out.exists():
            text = out.read_text()
            assert text in (a.read_text(), b.read_text()), "a half-written file was left"
            seen.add(text[:3])
    assert seen, "no write ever completed: the test proves nothing"
    # temporaries of killed writers are swept by the next write
    write_atomic(out, "# final\n")
    assert [x.name for x in out.parent.iterdir()] == ["rules.conf"]


def test_full_disk_keeps_the_old_output_and_leaves_no_temporary(small_fs: Path) -> None:
    out = small_fs / "rules.conf"
    write_atomic(out, "old\n")
    _fill(small_fs)
    with pytest.raises(OSError) as e:
        write_atomic(out, "new " * 200_000)
    assert e.value.errno == 28  # ENOSPC
    assert out.read_text() == "old\n"
    assert sorted(x.name for x in small_fs.iterdir()) == ["filler", "rules.conf"]


def test_full_disk_while_storing_is_a_clear_error_and_the_store_stays_intact(
        small_fs: Path) -> None:
    db = small_fs / "db.sqlite"
    store = Store(db)
    stored = 0
    with pytest.raises(ColltuneError) as e:
        for size in range(1, 100_000):
            store.add(CTX, Config(1), _result(size), "mpit")
            stored = size
            if size == 50:
                _fill(small_fs)  # the disk fills in the middle of a run
    assert "disk" in e.value.message or "full" in e.value.message
    assert e.value.hint and "free disk space" in e.value.hint
    store.close()
    os.unlink(small_fs / "filler")
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        sizes = [s for (s,) in c.execute("SELECT size FROM measurements ORDER BY size")]
    assert sizes == list(range(1, stored + 1)), "a stored row was lost or a failed one kept"
    # and the run can go on once there is space again
    again = Store(db)
    again.add(CTX, Config(2), _result(8), "mpit")
    assert ("a2", 8) in again.done(CTX)


def test_read_only_disk_is_a_clear_error(small_fs: Path) -> None:
    Store(small_fs / "db.sqlite").close()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with pytest.raises(ColltuneError) as e:
        ensure_writable(small_fs / "rules.conf", "--out")
    assert "--out" in e.value.message and e.value.hint
    with pytest.raises(ColltuneError) as e2:
        s = Store(small_fs / "db.sqlite")
        s.add(CTX, Config(1), _result(8), "mpit")
    assert e2.value.hint


def test_unusable_output_paths_are_refused_before_measuring(tmp_path: Path) -> None:
    for path, words in ((tmp_path, "is a directory"),
                        (tmp_path / "nope" / "rules.conf", "does not exist")):
        with pytest.raises(ColltuneError) as e:
            ensure_writable(path, "--out")
        assert words in e.value.message and e.value.hint


def test_a_file_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "db.sqlite"
    bad.write_bytes(os.urandom(8192))
    with pytest.raises(ColltuneError) as e:
        Store(bad)
    assert str(bad) in e.value.message and e.value.hint


def _writer(db: str, who: int, n: int, barrier: object) -> None:
    store = Store(db)
    barrier.wait()  # type: ignore[attr-defined]
    for i in range(n):
        # every writer writes its own rows and some that others write too
        size = i if i % 3 == 0 else who * 100_000 + i
        store.add(CTX, Config(1), _result(size), "mpit")
    store.close()


def test_concurrent_writers_lose_nothing_and_duplicate_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "db.sqlite")
    Store(db).close()
    writers, n = 4, 150
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(writers)
    procs = [ctx.Process(target=_writer, args=(db, w, n, barrier)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    expected = {i if i % 3 == 0 else w * 100_000 + i for w in range(writers) for i in range(n)}
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        got = [s for (s,) in c.execute("SELECT size FROM measurements")]
    assert len(got) == len(set(got)) and set(got) == expected


def _open_store(path: Path, barrier: object, results: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        Store(path).close()
        results.put("ok")  # type: ignore[attr-defined]
    except ColltuneError as e:
        results.put(e.message)  # type: ignore[attr-defined]


def test_tuners_starting_together_all_open_a_new_store(tmp_path: Path) -> None:
    """Eight processes open one new store at the same instant (two tuners started by one
    job script): SQLite answers "database is locked" to the losers of the switch to WAL
    without waiting (CI, stop 19; 10 of 80 opens failed here before the retry)."""
    for trial in range(10):
        path = tmp_path / f"db{trial}.sqlite"
        barrier, results = mp.Barrier(8), mp.Queue()
        procs = [mp.Process(target=_open_store, args=(path, barrier, results))
                 for _ in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert sorted(results.get(timeout=5) for _ in procs) == ["ok"] * 8


def test_a_point_pooled_from_launches_keeps_each_launchs_samples(tmp_path: Path) -> None:
    """tune online's points pool runs of one command: the store keeps which launch each run
    of samples came from (a decision ranks each launch on its own), through a search that
    extends the point too; launches that do not add up to the samples are refused as an
    edited store, not believed."""
    from colltune.errors import StoreError

    db = tmp_path / "s.sqlite"
    store = Store(db)
    r = _result(8)
    r.samples, r.n, r.strata = [1.0, 2.0, 3.0, 4.0, 5.0], 5, [("a", 2), ("b", 3)]
    store.replace_source([(CTX, Config(1), r)], "online")
    plain = _result(8)
    store.extend(CTX, Config(1), plain, "online")
    store.add(CTX, Config(2), _result(8), "mpit")
    store.close()
    ms = {m.config: m for m in Store(db, readonly=True).measurements(CTX)}
    assert ms[Config(1)].by_launch() == {"a": [1.0, 2.0], "b": [3.0, 4.0, 5.0],
                                         "extended": [1e-6] * 3}
    assert ms[Config(2)].strata == [] and ms[Config(2)].by_launch() == {"": [1e-6] * 3}
    con = sqlite3.connect(db)
    con.execute("UPDATE measurements SET strata='[[\"a\", 2]]' WHERE config_key='a1'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="strata do not add up"):
        Store(db, readonly=True).measurements(CTX)
