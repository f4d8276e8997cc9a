"""The application loop: profile a real application (Quantum ESPRESSO's pw.x on Open MPI
4.1.4), `tune app` what it calls, `tune verify --app` its own runs without and with the
rules. No timing is asserted: what is checked is what each step planned, wrote and
reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from colltune.apploop.app.groups import plan
from colltune.apploop.app.verify_app import disturbed
from colltune.backends.openmpi.applied import rule_at
from colltune.backends.openmpi.install import OpenMPI
from colltune.collectives import get_collective
from colltune.core.config import DEFAULT, Config
from colltune.core.records import PointResult
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import COLLTYPE
from colltune.store import Context
from helpers import check_app_verdict, tune_cli
from qe_app import prepare, pw_x


def _entry(coll: str, n: int, size: int, t: float, calls: int = 10) -> dict[str, object]:
    return {"collective": coll, "comm_size": n, "size": size, "calls": calls, "ranks": 4,
            "time_s": {"mean": t, "max": t}, "share": t / 2.0, "bytes_per_call": size}


def test_plan_orders_by_the_applications_time_and_skips_what_costs_nothing() -> None:
    prof = {"ranks": 4, "wall_s": {"mean": 2.0, "max": 2.1}, "entries": [
        _entry("bcast", 4, 16, 0.01), _entry("allreduce", 4, 8, 0.2),
        _entry("allreduce", 4, 1024, 0.1), _entry("reduce", 2, 8, 0.05),
        _entry("scan", 4, 8, 0.0001), _entry("gatherv", 4, 32, 0.3)]}
    groups, untuned, wall = plan(prof, min_share=0.001)
    assert wall == 2.0
    assert [(g.collective, g.comm_size) for g in groups] == [
        ("allreduce", 4), ("reduce", 2), ("bcast", 4), ("scan", 4)]
    assert groups[0].sizes == [8, 1024] and groups[0].time_s == pytest.approx(0.3)
    assert [g.status for g in groups] == ["planned"] * 3 + [
        "below --min-share (0.005% of the run)"]
    assert untuned == ["gatherv (4 ranks, 32 B)"]  # colltune does not tune it: said so
    # GROMACS broadcasts empty buffers: those calls leave the group (a tune of 0 B is
    # refused, and took the group's other sizes with it), said so; a barrier has no size
    prof["entries"] += [_entry("bcast", 4, 0, 0.5), _entry("barrier", 4, 0, 0.2)]
    groups, untuned, _ = plan(prof, min_share=0.001)
    (bcast,) = [g for g in groups if g.collective == "bcast"]
    assert bcast.sizes == [16] and bcast.time_s == pytest.approx(0.01), bcast
    assert [g.sizes for g in groups if g.collective == "barrier"] == [[0]]
    assert untuned == ["gatherv (4 ranks, 32 B)", "bcast (4 ranks, 0 B: no data)"]


def test_a_pair_the_load_changed_under_or_far_beyond_the_rest_is_disturbed() -> None:
    logs = [0.01, -0.02, 0.0, 0.03, 0.6, -0.01]
    loads = [(0.3, 0.4)] * 5 + [(0.3, 1.2)]  # the last pair's second run: a core more
    assert disturbed(logs, loads) == [False] * 4 + [True, True]
    assert disturbed(logs[:3], loads[:3]) == [False] * 3  # too few pairs for an outlier
    # a steady load on both runs of every pair is no disturbance: both arms share it
    assert not any(disturbed([0.01, 0.02, -0.01, 0.0], [(1.5, 1.6)] * 4))


def _tune(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return tune_cli(*args, env=env, cwd=cwd)


def test_the_loop_on_an_application_that_lives_in_its_collectives(ompi41: OpenMPI,
                                                                  tmp_path: Path) -> None:
    """Quantum ESPRESSO's pw.x (tests/qe_app.py) on one node: profile, tune app of the
    groups that cost it most (each group of the profile reported, those under --min-share
    skipped and not written, sizes above what it called left to the library), verify
    --app with every verdict's power, and the report of both. The loop across two nodes:
    tests/test_cluster_live.py. (LAMMPS melt, whose collectives are 1-2% of its time, was
    the first application here; pw.x spends 58-66% in them.)"""
    pw = pw_x()
    work = tmp_path / "qe"
    inp = prepare(work)
    env = ompi41.tool_env()
    launch = [str(ompi41.mpirun), "-np", "4", "--oversubscribe", pw, "-in", inp.name]
    r = _tune("profile", "-o", "p.json", "--mpi", str(ompi41.prefix), "--", *launch,
              cwd=work, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((work / "p.json").read_text())
    assert doc["layout"]["nodes"] == 1 and doc["layout"]["ppn"] == 4
    assert {"alltoall", "allreduce", "bcast"} <= {e["collective"] for e in doc["entries"]}
    r = _tune("app", "p.json", "--mpi", str(ompi41.prefix), "--out", "r.conf", "--db",
              "db.sqlite", "--json", "app.json", "--min-share", "0.05", "--point-time", "0.02",
              "--min-reps", "5", "--max-reps", "20", "--confirm-rounds", "1",
              "--oversubscribe", cwd=work, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    app = json.loads((work / "app.json").read_text())
    assert app["timing"] == "both" and app["objective"] == "completion"  # recorded
    groups = {(g["collective"], g["comm_size"]): g for g in app["groups"]}
    untuned = {e["collective"] for e in doc["entries"] if not e["tuned_by_colltune"]}
    wanted = {(e["collective"], e["comm_size"]) for e in doc["entries"]
              if e["collective"] not in untuned}
    assert set(groups) == wanted  # exactly what the application called
    measured = {k for k, g in groups.items() if g["status"] == "measured"}
    skipped = {k for k, g in groups.items() if g["status"].startswith("below")}
    assert measured and skipped and measured | skipped == wanted
    assert all(groups[k]["share"] < 0.05 for k in skipped)
    # every group where the profile saw it: the world 1x4, pw.x's 2-rank communicators 1x2
    assert all(groups[k]["layout"] == f"1x{k[1]}" for k in measured), groups
    # every profile entry colltune tunes is reported with its share, speed-up and saving
    assert len(app["entries"]) == sum(1 for e in doc["entries"]
                                      if e["collective"] not in untuned)
    for e in app["entries"]:
        assert e["speedup"] > 0 and e["saving_s"] >= 0 and e["verdict"]
    assert "expected saving" in r.stdout
    # what each group's tune held of the allocation, and all of them (issue 84)
    held = [groups[k]["allocation"] for k in measured]
    assert all(h and h["nodes"] == 1 and h["node_seconds"] > 0 for h in held), held
    assert app["node_seconds"] == pytest.approx(sum(h["node_seconds"] for h in held),
                                                abs=0.01)
    assert all(groups[k]["allocation"] is None for k in skipped)
    assert f"over {len(measured)} group tune(s)" in r.stdout, r.stdout[-800:]
    rf = rules.read(work / "r.conf")
    # skipped collectives are not written
    assert set(rf.collectives) == {COLLTYPE[get_collective(n).name] for n, _ in measured}
    for name, np in measured:
        coll = get_collective(name)
        if coll.size_dependent:  # above what the application called: the library's choice
            top = max(groups[(name, np)]["sizes"])
            cfg = rule_at(rf, coll, np, 64 * max(top, 8))
            assert cfg is not None and cfg.algorithm == 0, (name, cfg)

    vj = work / "v.json"
    r = _tune("verify", "--app", "--rules", "r.conf", "--mpi", str(ompi41.prefix), "--pairs",
              "2", "--max-rounds", "2", "--json", str(vj), "--", *launch, cwd=work, env=env)
    v = json.loads(vj.read_text())
    check_app_verdict(r, v)
    assert "rules/default" in r.stdout

    page = tmp_path / "report"
    r = _tune("report", "--out", str(page), "--profile", str(work / "p.json"),
              "--app-verify", str(vj), cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    text = (page / "index.html").read_text()
    assert "Application: " in text and "Without and with the rules" in text
    for kind in ("profile", "before-after"):
        assert (page / f"app-p-{kind}.png").stat().st_size > 1000
        assert (page / f"app-p-{kind}.svg").exists()
    # issue 61, finding 7: a rules name that is mathtext broke the plot's title
    vj.write_text(json.dumps({**v, "rules": str(tmp_path / "$\\frac{$.conf")}))
    r = _tune("report", "--out", str(tmp_path / "report2"), "--profile", str(work / "p.json"),
              "--app-verify", str(vj), cwd=work, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_verify_app_calls_nothing_slower_when_load_comes_halfway(ompi41: OpenMPI,
                                                                 tmp_path: Path) -> None:
    """Both arms the library's default (--aa), and a CPU burner on every core from the
    third pair on, for 6 s: the gate must not call the application slower (or faster).
    The pair the burner disturbed is run again, and the verdict says what it could see."""
    pw = pw_x()
    work = tmp_path / "qe-load"
    inp = prepare(work)
    (work / "r.conf").write_text("1\n11\n1\n4\n1\n0 0 0 0\n")  # reduce: the default
    env = {**os.environ, **ompi41.tool_env()}
    cmd = [sys.executable, "-m", "colltune.cli", "verify", "--app", "--aa", "--rules",
           "r.conf", "--mpi", str(ompi41.prefix), "--pairs", "4", "--max-rounds", "4",
           "--alpha", "0.01",  # an A/A false alarm allowed 1 time in 100, not 5
           "--json", "v.json", "--", str(ompi41.mpirun), "-np", "4", "--oversubscribe", pw,
           "-in", inp.name]
    # bounded: Open MPI's yielding ranks get almost no CPU beside it (a run takes as long
    # as the burner lasts), which is the disturbance a shared node brings
    burn = "import time\nt = time.time() + 6\nwhile time.time() < t: pass\n"
    burners: list[subprocess.Popen[bytes]] = []
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("pair 2 ") and not burners:  # halfway through the first look
                burners = [subprocess.Popen([sys.executable, "-c", burn])
                           for _ in range(os.cpu_count() or 2)]
        stdout = proc.stdout.read() if proc.stdout else ""
        proc.wait(timeout=300)
    finally:
        for b in burners:
            b.kill()
            b.wait()
        proc.kill()
    assert burners, "".join(lines)[-3000:]
    r = subprocess.CompletedProcess(cmd, proc.returncode, stdout, "".join(lines))
    v = json.loads((work / "v.json").read_text())
    assert v["aa"] is True
    check_app_verdict(r, v)
    assert all(m["verdict"] in ("same", "not slower", "inconclusive")
               for m in v["measures"].values()), v
    # the burner was seen: some run had more than a core of foreign load
    assert max(v["foreign_cores"]) > 1.0, v["foreign_cores"]


@pytest.mark.alone
def test_tune_app_replays_a_groups_arrival_pattern_and_keeps_its_points_apart(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Issue 71, part 3: tests/data/arrival.c's rank 3 enters every call 5 ms late. tune app
    measures its groups with the kernel replaying the profiled pattern (the replayed spread
    against the profiled one: the replay's accuracy), with `both` also with the ranks
    entering together (a second file beside --out, the table naming both choices); the
    store keeps replayed points under a key of their own. A profile whose clock sync failed
    is tuned with the ranks entering together, said once."""
    import sqlite3

    from arrival_prog import DELAY, build_arrival

    exe = build_arrival(ompi41, tmp_path)
    prof = tmp_path / "p.json"
    r = tune_cli("profile", "-o", str(prof), "--mpi", "/usr", "--", str(ompi41.mpirun), "-np", "4",
                 "--oversubscribe", str(exe), str(int(DELAY * 1e6)), "3", "60",
                 env=ompi41.tool_env())
    assert r.returncode == 0, r.stderr
    quick = ["--mpi", "/usr", "--oversubscribe", "--point-time", "0.03", "--min-reps", "5",
             "--max-reps", "12", "--confirm-rounds", "0", "--db", str(tmp_path / "db.sqlite")]
    out = tmp_path / "r.conf"
    # a terminal wide enough that the table's headers never wrap (how wide the table is
    # depends on the algorithms' names chosen: at 80 columns "entering together" once did)
    r = tune_cli("app", str(prof), "--arrival", "both", "--out", str(out), "--json",
                 str(tmp_path / "a.json"), *quick, env={**ompi41.tool_env(), "COLUMNS": "250"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.exists() and (tmp_path / "r.together.conf").exists()
    assert "entering together" in r.stdout, r.stdout  # the table's column of the other choice
    doc = json.loads((tmp_path / "a.json").read_text())
    world = next(g for g in doc["groups"] if (g["collective"], g["comm_size"]) ==
                 ("allreduce", 4))
    assert world["arrival"].startswith("replayed"), world
    # the replay's accuracy: its mean spread against the rows' (5 ms, rank 3 late)
    assert 0.8 * DELAY <= world["profiled_spread_s"] <= 1.3 * DELAY
    assert 0.7 <= world["replayed_spread_s"] / world["profiled_spread_s"] <= 1.5, world
    keys = {k for (k,) in sqlite3.connect(tmp_path / "db.sqlite").execute(
        "SELECT DISTINCT mpi_key FROM measurements")}
    plain = f"{ompi41.key}"
    assert plain in keys and any(k.startswith(plain + "~arrival=") for k in keys), keys
    # any tune replays a profile's pattern for its one collective and --np (the same rows:
    # the same key as tune app's points); a pattern the profile lacks is refused
    r = tune_cli("allreduce", "--np", "4", "--sizes", "64", "--arrival", str(prof), "--backend",
                 "openmpi", "--out", str(tmp_path / "one.conf"), *quick, env=ompi41.tool_env())
    assert r.returncode == 0 and "replaying" in r.stderr, r.stdout + r.stderr
    r = tune_cli("reduce", "--np", "4", "--arrival", str(prof), "--backend", "openmpi", *quick,
                 env=ompi41.tool_env())
    assert r.returncode == 2 and "no arrival pattern of reduce on 4 ranks" in r.stderr
    # the two files judged against each other by the application's own runs, each arm's
    # file read back in every rank, the verdict with its power
    v = tmp_path / "v.json"
    r = tune_cli("verify", "--app", "--rules", str(out), "--baseline",
                 str(tmp_path / "r.together.conf"), "--pairs", "3", "--max-rounds", "3", "--json",
                 str(v), "--", str(ompi41.mpirun), "-np", "4", "--oversubscribe", str(exe),
                 str(int(DELAY * 1e6)), "3", "60", env=ompi41.tool_env())
    verdict = json.loads(v.read_text())
    check_app_verdict(r, verdict)
    assert verdict["baseline"] == str(tmp_path / "r.together.conf")
    assert "baseline s (median)" in r.stdout

    # the clock failed: the pattern is not used, said once, and nothing is replayed
    bad = json.loads(prof.read_text())
    bad["clock"]["synced"] = False
    prof.write_text(json.dumps(bad))
    r = tune_cli("app", str(prof), "--json", str(tmp_path / "b.json"), *quick,
                 env=ompi41.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert said.count("arrival patterns are not used: its clock sync failed") == 1, said
    groups = json.loads((tmp_path / "b.json").read_text())["groups"]
    assert all(g["arrival"] == "together (clock)" for g in groups
               if g["status"] == "measured"), groups
    r = tune_cli("app", str(prof), "--arrival", "sometimes", *quick, env=ompi41.tool_env())
    assert r.returncode == 2 and "unknown --arrival 'sometimes'" in r.stderr
    # --layouts: each named layout checked before anything is launched
    for lays, words in (("1x4,2x2", "--layouts 2x2: allreduce at 4 ranks would run as 1x4"),
                        ("1x2", "--layouts 1x2: the profile's job had 4 ranks")):
        lay_db = tmp_path / "lay.sqlite"
        r = tune_cli("app", str(prof), "--layouts", lays, *quick[:-1], str(lay_db),
                     env=ompi41.tool_env())
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert not lay_db.exists()


def _online_points(key: str, ompi_name: str, version: str, prefix: str
                   ) -> list[tuple[Context, Config, PointResult]]:
    """What tune online's runs of a command would have stored of its 4-rank allreduce at
    64 KiB (1 node x 4), two launches, the second twice as slow as the first for every
    configuration: linear (a1) 3x the library's choice in both, nonoverlapping (a2) a wrong
    answer, recursive doubling (a3) run only in the slow launch, 0.95x the library's there
    (1.6x the median of the library's samples of both launches pooled)."""
    import socket

    ctx = Context(key, ompi_name, version, prefix, socket.gethostname(), 4, 4, 1,
                  "allreduce", "openmpi")

    def point(runs: list[tuple[str, float]]) -> PointResult:
        xs = [t * (1 + k / 100) for _, t in runs for k in range(16)]
        s = sorted(xs)
        return PointResult(0, 65536, "ok", len(xs), s[len(s) // 2], min=s[0], max=s[-1],
                           mean=sum(xs) / len(xs), samples=xs,
                           strata=[(label, 16) for label, _ in runs])

    return [(ctx, DEFAULT, point([("r1", 1e-4), ("r2", 4e-4)])),
            (ctx, Config(1), point([("r1", 3e-4), ("r2", 1.2e-3)])),
            (ctx, Config(2), PointResult(0, 65536, "invalid", message="wrong")),
            (ctx, Config(3), point([("r2", 3.8e-4)]))]


def test_what_the_applications_own_calls_found_slower_is_known(tmp_path: Path) -> None:
    """apploop/online/for_app.py on a store of tune online's points: wrong, or over 1.5x the
    library's choice launch by launch, at a size the application calls (its bucket); a
    configuration slower only by pooled medians (its calls in the slower launch) is not;
    another layout's, another command's or another size's points say nothing here."""
    from colltune.apploop.online.for_app import excluded_for, online_key
    from colltune.store import Store

    db = tmp_path / "db.sqlite"
    key = online_key("openmpi-4.1.4@/usr", ["mpirun", "-np", "4", "./app"])
    store = Store(db)
    store.replace_source(_online_points(key, "Open MPI", "4.1.4", "/usr"), "online")
    store.close()
    known = excluded_for(db, key, "allreduce", 4, (1, 4), [64, 65536, 70000])
    assert known == {("allreduce", 4, "a1", 65536), ("allreduce", 4, "a2", 65536),
                     ("allreduce", 4, "a1", 70000), ("allreduce", 4, "a2", 70000)}, known
    assert excluded_for(db, key, "allreduce", 4, None, [65536]) == {
        ("allreduce", 4, "a1", 65536), ("allreduce", 4, "a2", 65536)}
    assert not excluded_for(db, key, "allreduce", 4, (2, 2), [65536])  # another layout
    assert not excluded_for(db, key + "0", "allreduce", 4, (1, 4), [65536])
    assert not excluded_for(db, key, "bcast", 4, (1, 4), [65536])
    assert not excluded_for(tmp_path / "none.sqlite", key, "allreduce", 4, (1, 4), [65536])


def test_tune_app_leaves_out_what_the_applications_own_calls_found_slower(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Issue 72, scope 5 (the online runs' calls used by later tune app runs): the profile
    of tests/data/online.c, and a store holding tune online's points of the same command at
    64 KiB (_online_points). tune app measures neither the wrong nor the clearly slower
    configuration at 64 KiB (said, and counted in its JSON), and measures both at 64 B,
    where the application's calls said nothing; the one slower only pooled is measured."""
    from colltune.apploop.online.for_app import online_key
    from colltune.store import Store
    from helpers import tune_cli
    from test_online import _build

    exe = _build(ompi41, tmp_path)
    prof = tmp_path / "p.json"
    r = tune_cli("profile", "-o", str(prof), "--mpi", str(ompi41.prefix), "--",
                 str(ompi41.mpirun), "-np", "4", "--oversubscribe", str(exe), "200", "50",
                 env=ompi41.tool_env())
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(prof.read_text())
    # the world's allreduce at 64 B and 64 KiB alone: the rest of the profile is not what
    # this test is about (tune app would only spend longer)
    doc["entries"] = [e for e in doc["entries"] if (e["collective"], e["comm_size"]) ==
                      ("allreduce", 4) and e["size"] in (64, 65536)]
    assert sorted(e["size"] for e in doc["entries"]) == [64, 65536], doc["entries"]
    prof.write_text(json.dumps(doc))
    db = tmp_path / "db.sqlite"
    store = Store(db)
    key = online_key(ompi41.key, doc["command"], doc["cwd"])
    store.replace_source(_online_points(key, ompi41.name, ompi41.version, str(ompi41.prefix)),
                         "online")
    store.close()
    r = tune_cli("app", str(prof), "--mpi", str(ompi41.prefix), "--db", str(db), "--json",
                 str(tmp_path / "a.json"), "--min-share", "0", "--arrival", "off",
                 "--point-time", "0.02", "--min-reps", "5", "--max-reps", "12",
                 "--confirm-rounds", "0", "--oversubscribe",
                 env=ompi41.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "2 (configuration, size) point(s) not measured: this application's own calls" \
        in r.stdout + r.stderr, r.stdout + r.stderr
    group = json.loads((tmp_path / "a.json").read_text())["groups"][0]
    assert group["known_from_online"] == 2 and group["status"] == "measured", group
    store = Store(db, readonly=True)
    measured = {(m.size, m.config.key) for c in store.contexts() if c.mpi_key == ompi41.key
                and c.collective == "allreduce" for m in store.measurements(c)}
    store.close()
    at = {s: {k for sz, k in measured if sz == s} for s in (64, 65536)}
    assert {"a0", "a1", "a2", "a3"} <= at[64], at
    assert {"a0", "a3"} <= at[65536] and not {"a1", "a2"} & at[65536], at
