"""The queries on the SQLite store: every measurement with its full context, decisions,
confirmations, catalogs, timers and model fits (the records are records.py; the schema,
its migrations and opening a file schema.py)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from colltune.core.account import stored_summary
from colltune.core.config import Config
from colltune.core.records import PointResult, Verdict
from colltune.errors import ColltuneError, StoreError
from colltune.store.records import (
    Context,
    Measurement,
    ModelFit,
    fit_params,
    json_object,
    number_list,
    opt_number,
    strata_list,
    timing_of,
)
from colltune.store.schema import open_readonly, open_writable


def _pooled_strata(before: list[list[object]], n_before: int, r: PointResult
                   ) -> list[list[object]]:
    """The launches of a point extended by `r`: a point pooled from launches stays so, the
    new samples one launch more ([]: neither was pooled)."""
    if not before and not r.strata:
        return []
    # samples pooled before launches were told apart: one launch, labelled as a point that
    # never was pooled is ("")
    old = before or ([["", n_before]] if n_before else [])
    new = [list(x) for x in r.strata] or ([["extended", len(r.samples)]] if r.samples else [])
    return old + new


class Store:
    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        """`readonly`: for commands that only read (show, report, export, model show): the
        file is opened through SQLite's read-only mode, nothing is created or converted on
        disk (an older store is migrated in memory), and a file that is not a colltune
        store is refused."""
        self.path = Path(path)
        self.readonly = readonly
        self.db = open_readonly(self.path) if readonly else open_writable(self.path)

    @classmethod
    def for_deciding(cls, path: str | Path) -> Store:
        """A store to decide from (tune --from-db): writable where it can be (decisions are
        recorded), else read-only (a store another user owns, a read-only filesystem):
        deciding needs only to read."""
        try:
            return cls(path)
        except ColltuneError as first:
            try:
                return cls(path, readonly=True)
            except ColltuneError:
                raise first from None

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """An immediate transaction, retried while another tuner holds the lock. Any SQLite
        failure (disk full, read-only file) becomes an error that says what to do; the
        transaction is rolled back, so the store keeps exactly what it had."""
        try:
            for attempt in range(50):
                try:
                    self.db.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) and "busy" not in str(e):
                        raise
                    time.sleep(min(0.05 * (attempt + 1), 1.0))
            else:
                raise StoreError(f"the store {self.path} stayed locked",
                                    "another tuner holds it; wait for it or use --db")
            try:
                yield self.db
                self.db.execute("COMMIT")
            except BaseException:
                try:
                    self.db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # SQLite already rolled back (it does on SQLITE_FULL)
                raise
        except sqlite3.Error as e:
            raise StoreError(f"cannot write to the store {self.path}: {e}",
                                "check free disk space and permissions; finished "
                                "measurements are kept and a rerun resumes") from None

    def _read(self, sql: str, args: tuple[object, ...]) -> list[tuple]:
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"cannot read the store {self.path}: {e}",
                                "check the file with sqlite3 PATH 'PRAGMA integrity_check', "
                                "or pass another --db") from None

    def add(self, ctx: Context, cfg: Config, r: PointResult, sweep: str) -> None:
        """Stores one point; a point already stored (same context, config, size) is kept."""
        with self._write() as db:
            self._insert(db, ctx, cfg, r, sweep)

    def replace_source(self, points: list[tuple[Context, Config, PointResult]],
                       sweep: str) -> int:
        """Stores one source's points (`sweep`: an OSU or IMB import, tune online's runs of
        one command) in one transaction, replacing what the same source stored earlier at
        the same points (corrected or pooled data replaces, it is not ignored); a point
        another source measured (colltune's kernel) is never replaced: the whole write is
        refused and nothing is written. Returns how many points were replaced."""
        where = ("mpi_key=? AND host=? AND np=? AND ppn=? AND collective=? AND config_key=? "
                 "AND size=?")
        replaced = 0
        with self._write() as db:
            for ctx, cfg, r in points:
                key = (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective, cfg.key, r.size)
                row = db.execute(f"SELECT sweep FROM measurements WHERE {where}", key).fetchone()
                if row is not None and row[0] != sweep:
                    raise StoreError(
                        f"{self.path} already holds a {row[0]} measurement of "
                        f"{ctx.collective} at np={ctx.np}, {r.size} B ({cfg.key}): an import "
                        "does not replace what colltune measured; nothing was imported",
                        "import into another --db")
                if row is not None:
                    # counters stay: an import brings none, and a probe's counts (what the
                    # library ran there) do not change with the timings
                    db.execute(f"DELETE FROM measurements WHERE {where}", key)
                    replaced += 1
                self._insert(db, ctx, cfg, r, sweep)
        return replaced

    @staticmethod
    def _insert(db: sqlite3.Connection, ctx: Context, cfg: Config, r: PointResult,
                sweep: str) -> None:
        row = (
            ctx.mpi_key, ctx.mpi_name, ctx.mpi_version, ctx.mpi_path, ctx.host, ctx.np,
            ctx.ppn, ctx.nodes, ctx.collective, cfg.key, cfg.algorithm,
            r.size, r.status, r.n, r.median, r.ci_lo, r.ci_hi,
            r.mean, r.min, r.max, json.dumps(r.samples), r.message, sweep,
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
            timing_of(r), r.objective, json.dumps(r.series), ctx.backend,
            json.dumps(r.strata),
        )
        db.execute(
            "INSERT OR IGNORE INTO measurements (mpi_key, mpi_name, mpi_version, "
            "mpi_path, host, np, ppn, nodes, collective, config_key, algorithm, "
            "size, status, n, median, ci_lo, ci_hi, "
            "mean, min, max, samples, message, sweep, created, timing, objective, "
            "series, backend, strata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
            "?,?,?,?)",
            row,
        )
        if r.pvars:
            db.execute(
                "INSERT OR IGNORE INTO counters (mpi_key, host, np, ppn, collective, "
                "config_key, size, counts) VALUES (?,?,?,?,?,?,?,?)",
                (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective, cfg.key, r.size,
                 json.dumps(r.pvars, sort_keys=True)))

    def counters(self, ctx: Context) -> dict[tuple[str, int], dict[str, int]]:
        """What the library's own counters said ran, per (config key, size): its MPI_T
        counters where the kernel read them (MVAPICH2), or calls counted by a probe."""
        cur = self._read(
            "SELECT config_key, size, counts FROM counters WHERE mpi_key=? AND host=? AND "
            "np=? AND ppn=? AND collective=?",
            (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective))
        return {(k, int(s)): json.loads(c) for k, s, c in cur}

    def add_counts(self, ctx: Context,
                   points: list[tuple[str, int, dict[str, int]]]) -> None:
        """What probes counted of the library's own functions, per (config key, size)
        (Intel MPI's, under a debugger), in one transaction: stored so a later decision
        (--from-db, an import) needs no launch. A point probed again is replaced (it is the
        library's answer, not a sample)."""
        with self._write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO counters (mpi_key, host, np, ppn, collective, "
                "config_key, size, counts) VALUES (?,?,?,?,?,?,?,?)",
                [(ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective, key, size,
                  json.dumps(counts, sort_keys=True)) for key, size, counts in points])

    def extend(self, ctx: Context, cfg: Config, r: PointResult, sweep: str,
               retag: bool = False) -> None:
        """Adds repetitions to a stored point (searches that come back to a point), in one
        transaction, so a kill loses at most the point being measured. A new point is
        inserted; a point that now fails keeps its samples but is marked with the failure,
        so no decision rests on a configuration that hung or crashed. With `retag`, the
        point's sweep becomes `sweep` (what its samples now pool)."""
        from colltune.core.stats import median, median_ci

        key = (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective, cfg.key, r.size)
        where = ("mpi_key=? AND host=? AND np=? AND ppn=? AND collective=? AND config_key=? "
                 "AND size=?")
        with self._write() as db:
            row = db.execute(f"SELECT status, samples, series, strata FROM measurements WHERE "
                             f"{where}", key).fetchone()
            if row is None:
                pass  # a new point: inserted below, in add()'s own transaction
            elif row[0] == "ok" and r.status == "ok":
                xs = json.loads(row[1]) + r.samples
                old = json.loads(row[2])
                series = {m: {o: old.get(m, {}).get(o, []) + v for o, v in objs.items()}
                          for m, objs in r.series.items() if m in old}
                lo, hi = median_ci(xs)
                # a point pooled from launches stays so: the new samples are one more
                strata = _pooled_strata(json.loads(row[3]), len(xs) - len(r.samples), r)
                db.execute(
                    f"UPDATE measurements SET n=?, median=?, ci_lo=?, ci_hi=?, mean=?, min=?, "
                    f"max=?, samples=?, series=?, strata=? WHERE {where}",
                    (len(xs), median(xs), lo, hi, sum(xs) / len(xs), min(xs), max(xs),
                     json.dumps(xs), json.dumps(series), json.dumps(strata), *key))
                if retag:
                    db.execute(f"UPDATE measurements SET sweep=? WHERE {where}", (sweep, *key))
                return
            elif row[0] == "ok":
                db.execute(f"UPDATE measurements SET status=?, message=? WHERE {where}",
                           (r.status, r.message, *key))
                return
            else:
                return  # failed before: stays failed
        self.add(ctx, cfg, r, sweep)

    def done(self, ctx: Context) -> set[tuple[str, int]]:
        cur = self._read(
            "SELECT config_key, size FROM measurements WHERE mpi_key=? AND host=? AND np=? "
            "AND ppn=? AND collective=?",
            (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective),
        )
        return {(k, int(s)) for k, s in cur}

    def measurements(self, ctx: Context) -> list[Measurement]:
        cur = self._read(
            "SELECT config_key, size, status, n, median, ci_lo, ci_hi, samples, message, "
            "timing, objective, "
            "series, strata FROM measurements WHERE mpi_key=? AND "
            "host=? AND np=? AND ppn=? AND collective=? ORDER BY size, config_key",
            (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective),
        )
        return [self._measurement(ctx, row) for row in cur]

    def _measurement(self, ctx: Context, row: tuple) -> Measurement:  # type: ignore[type-arg]
        """One stored row, checked: an edited or damaged store is an error that names the
        row, not a traceback in show, report, export or --from-db."""
        k, s, st, n, med, lo, hi, sm, msg, timing, obj, ser, strata = row
        try:
            samples = number_list(json.loads(sm))
            modes = {str(m): json_object(objs) for m, objs in json_object(json.loads(ser)).items()}
            series = {m: number_list(objs[obj]) for m, objs in modes.items() if obj in objs}
            if type(s) is not int or type(n) is not int or s < 0 or n < 0:
                # a negative size reached math.isqrt in the range between two sizes
                raise ValueError("size and repetition count must be integers, not negative")
            return Measurement(Config.from_key(k), s, str(st), n, opt_number(med),
                               opt_number(lo), opt_number(hi), samples, str(msg), series,
                               str(timing), str(obj),
                               strata_list(json.loads(strata), len(samples)))
        except (ValueError, TypeError, KeyError) as e:
            raise StoreError(
                f"{self.path}: a stored measurement of {ctx.collective} at np={ctx.np} "
                f"(configuration {str(k)[:40]!r}, size {str(s)[:20]!r}) is malformed: "
                f"{str(e)[:120]}",
                "the store was edited or damaged: delete that row with sqlite3, or pass "
                "another --db") from None

    def contexts(self) -> list[Context]:
        """Every (MPI, host, layout, collective) the store holds measurements for."""
        # rows of one context stored before and after the backend column: one context
        rows = self._read(
            "SELECT mpi_key, mpi_name, mpi_version, mpi_path, host, np, ppn, nodes, "
            "collective, MAX(backend) FROM measurements "
            "GROUP BY mpi_key, mpi_name, mpi_version, mpi_path, host, np, ppn, nodes, "
            "collective ORDER BY mpi_version, host, collective, np", ())
        return [Context(*r) for r in rows]

    def span(self, ctx: Context) -> tuple[str, str]:
        """First and last time a measurement of `ctx` was stored (ISO 8601, UTC)."""
        rows = self._read(
            "SELECT MIN(created), MAX(created) FROM measurements WHERE mpi_key=? AND host=? "
            "AND np=? AND ppn=? AND collective=?",
            (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective))
        return (rows[0][0] or "", rows[0][1] or "")

    def add_catalog(self, mpi_key: str, backend: str,
                    algorithms: dict[str, dict[int, str]]) -> None:
        """The algorithm names an installation's catalog gave when it was measured: what
        read-only commands name stored configurations with, so they never run a program
        from a stored path (a store may come from another user)."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO catalogs (mpi_key, backend, algorithms, "
                       "created) VALUES (?,?,?,?)",
                       (mpi_key, backend, json.dumps(algorithms, sort_keys=True),
                        datetime.now(timezone.utc).isoformat(timespec="seconds")))

    def add_timer(self, mpi_key: str, host: str, wtick: float, step: float) -> None:
        """What MPI_Wtime resolves on this host (the kernel's measured step; MPI_Wtick is
        what the library claims): calls shorter than 100 steps were timed in batches."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO timers (mpi_key, host, wtick, step, created) "
                       "VALUES (?,?,?,?,?)", (mpi_key, host, wtick, step,
                                              datetime.now(timezone.utc).isoformat(
                                                  timespec="seconds")))

    def add_allocation(self, mpi_key: str, host: str, tuned: tuple[list[str], list[int]],
                       simulated: bool, account: dict[str, object]) -> None:
        """What one tune held of its allocation (core/account.py: its summary), for `tune
        show` and for the plans of later tunes."""
        colls, nps = tuned
        with self._write() as db:
            db.execute("INSERT INTO allocations (mpi_key, host, collectives, nps, nodes, "
                       "simulated, node_seconds, account, created) VALUES (?,?,?,?,?,?,?,?,?)",
                       (mpi_key, host, ",".join(colls), ",".join(map(str, nps)),
                        int(str(account["nodes"])), int(simulated),
                        float(str(account["node_seconds"])), json.dumps(account),
                        datetime.now(timezone.utc).isoformat(timespec="seconds")))

    def allocations(self) -> list[dict[str, object]]:
        """Every tune's account, oldest first (a store older than the record: none). Read
        as data: the store may be another user's."""
        tables = {r[0] for r in self._read(
            "SELECT name FROM sqlite_master WHERE type='table'", ())}
        if "allocations" not in tables:
            return []
        found = []
        for key, host, colls, nps, simulated, account, created in self._read(
                "SELECT mpi_key, host, collectives, nps, simulated, account, created FROM "
                "allocations ORDER BY id", ()):
            acct = stored_summary(str(account))
            if acct is None:  # not what colltune writes: left out, not shown
                continue
            found.append({"mpi_key": str(key), "host": str(host), "collectives": str(colls),
                          "nps": str(nps), "simulated": bool(simulated),
                          "created": str(created), **acct})
        return found

    def timer(self, mpi_key: str, host: str) -> tuple[float, float] | None:
        """(MPI_Wtick, measured step) last recorded for an installation on a host."""
        tables = {r[0] for r in self._read(
            "SELECT name FROM sqlite_master WHERE type='table'", ())}
        if "timers" not in tables:
            return None
        rows = self._read("SELECT wtick, step FROM timers WHERE mpi_key=? AND host=?",
                          (mpi_key, host))
        return (float(rows[0][0]), float(rows[0][1])) if rows else None

    def algorithms(self, mpi_key: str) -> dict[str, dict[int, str]] | None:
        """The stored algorithm names of an installation (None: a store older than the
        record, or none made); names that are not short printable text are dropped."""
        tables = {r[0] for r in self._read(
            "SELECT name FROM sqlite_master WHERE type='table'", ())}
        if "catalogs" not in tables:
            return None
        rows = self._read("SELECT algorithms FROM catalogs WHERE mpi_key=?", (mpi_key,))
        if not rows:
            return None
        try:
            doc = json.loads(rows[0][0])
            return {str(c): {int(i): n for i, n in algs.items()
                             if isinstance(n, str) and n.isprintable() and len(n) <= 80}
                    for c, algs in json_object(doc).items() if isinstance(algs, dict)}
        except (ValueError, TypeError, RecursionError):
            raise StoreError(f"{self.path}: the stored catalog of {mpi_key[:60]!r} is "
                             "malformed", "the store was edited or damaged: delete that "
                             "row with sqlite3, or pass another --db") from None

    def add_decision(self, ctx: Context, size: int, chosen_key: str, verdict: str,
                     evidence: dict[str, object]) -> None:
        """The latest decision per size with its evidence (medians, CIs, p-value,
        repetitions, confirmations) as JSON; a new decision replaces the old one."""
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO decisions (mpi_key, host, np, ppn, collective, size, "
                "chosen, verdict, evidence, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective, size, chosen_key,
                 verdict, json.dumps(evidence),
                 datetime.now(timezone.utc).isoformat(timespec="seconds")))

    def decisions(self, ctx: Context) -> list[tuple[int, str, str, dict[str, object]]]:
        rows = self._read(
            "SELECT size, chosen, verdict, evidence FROM decisions WHERE mpi_key=? AND "
            "host=? AND np=? AND ppn=? AND collective=? ORDER BY size",
            (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective))
        return [(int(s), c, v, json.loads(e)) for s, c, v, e in rows]

    def add_models(self, mpi_key: str, mpi_version: str, host: str, np: int, ppn: int,
                   fits: list[tuple[str, dict[str, object]]], probe: dict[str, object]
                   ) -> None:
        """The models of one fit (name, parameters with their fit quality) and the probe data
        they were fitted on, under one timestamp (how a reader tells one fit from the
        next); a new fit replaces the old one."""
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO models (mpi_key, mpi_version, host, np, ppn, model, "
                "params, probe, created) VALUES (?,?,?,?,?,?,?,?,?)",
                [(mpi_key, mpi_version, host, np, ppn, model, json.dumps(params),
                  json.dumps(probe), created) for model, params in fits])

    def models(self) -> list[ModelFit]:
        rows = self._read("SELECT mpi_key, mpi_version, host, np, ppn, model, params, created "
                          "FROM models ORDER BY mpi_version, host, np, model", ())
        return [ModelFit(k, v, h, int(n), int(p), m, self._model_params(m, js), c)
                for k, v, h, n, p, m, js, c in rows]

    def _model_params(self, model: str, text: str) -> dict:  # type: ignore[type-arg]
        try:
            return fit_params(model, text)
        except ValueError as e:
            raise StoreError(f"{self.path}: the stored {str(model)[:40]!r} model fit is "
                             f"malformed: {str(e)[:120]}",
                             "the store was edited or damaged: delete that row with "
                             "sqlite3, or pass another --db") from None

    def add_confirmation(self, ctx: Context, config_key: str, v: Verdict) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO confirmations (mpi_key, host, np, ppn, collective, size, "
                "config_key, verdict, default_median, tuned_median, p_faster, p_slower, "
                "rounds_won, rounds, launch_speedup, created, modes) VALUES "
                "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective, v.size, config_key,
                 v.verdict, v.default_median, v.tuned_median, v.p_faster, v.p_slower,
                 v.rounds_won, v.rounds, v.launch_speedup,
                 datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 json.dumps(v.modes)),
            )

    def confirmation(self, ctx: Context, size: int, config_key: str) -> Verdict | None:
        rows = self._read(
            "SELECT size, default_median, tuned_median, p_faster, p_slower, rounds_won, rounds, "
            "verdict, launch_speedup, modes FROM "
            "confirmations WHERE mpi_key=? AND host=? AND np=? AND ppn=? AND collective=? "
            "AND size=? AND config_key=?",
            (ctx.mpi_key, ctx.host, ctx.np, ctx.ppn, ctx.collective, size, config_key),
        )
        if not rows:
            return None
        size, dmed, tmed, pf, ps, won, rounds, verdict, speedup, modes = rows[0]
        return Verdict(size, dmed, tmed, pf, ps, won, rounds, verdict, speedup,
                       json.loads(modes))
