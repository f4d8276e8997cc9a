"""The arrival pattern and layout read from the profiler's per-rank records, and `tune app`
placing each group where its calls ran: synthetic records (the profiler itself is shown on
the libraries in test_profile.py and test_cluster_live.py)."""

from __future__ import annotations

from typing import Any

import pytest

from colltune.apploop.app.groups import Group, group_layout, job_layout, place_groups
from colltune.apploop.profiling import arrival
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.options import TuneOptions


def _rank(rank: int, host: str, rows: list[list[float]]) -> dict[str, Any]:
    return {"rank": rank, "host": host,
            "entries": [{"collective": "allreduce", "comm_size": 4, "bucket": 8},
                        {"collective": "bcast", "comm_size": 2, "bucket": 64}],
            "arrivals": rows,
            "clock": {"offset_s": [0.0, 1e-6], "error_s": [2e-6, 3e-6], "synced": True}}


def _records() -> list[dict[str, Any]]:
    """4 ranks, 2 a host; 3 allreduce calls on the world (leader 0) where rank 2 enters 1 ms
    late; 2 bcast calls on each half (leaders 0 and 2); one call rank 1 did not sample."""
    hosts = ["a", "a", "b", "b"]
    recs = []
    for r in range(4):
        rows = [[0, 0, 0, r, seq, 10.0 + seq + (1e-3 if r == 2 else 0.0), 2e-4]
                for seq in range(3) if not (r == 1 and seq == 2)]
        rows += [[1, 2 * (r // 2), 0, r % 2, seq, 20.0 + seq + 1e-5 * r, 1e-4]
                 for seq in range(2)]
        recs.append(_rank(r, hosts[r], rows))
    return recs


def test_layout_clock_and_spreads_from_the_ranks_records() -> None:
    recs = _records()
    lay = arrival.layout(recs)
    assert lay == {"nodes": 2, "ppn": 2, "hosts": ["a", "a", "b", "b"]}
    clock = arrival.clock(recs)
    assert clock is not None and clock["synced"] and clock["drift_s"] == pytest.approx(1e-6)
    assert clock["error_s"] == pytest.approx(3e-6)
    got = arrival.arrivals(recs, lay["hosts"])
    world = got[("allreduce", 4, 8)]
    assert world["calls"] == 2  # the call rank 1 did not sample is left out, not guessed
    assert world["spread_s"]["median"] == pytest.approx(1e-3)
    assert world["late_ranks"][0]["world_rank"] == 2 and world["late_ranks"][0]["last_share"] == 1
    assert world["delays_s"][0] == pytest.approx([0, 0, 1e-3, 0])
    assert world["layout"] == "2x2"
    halves = got[("bcast", 2, 64)]
    assert halves["calls"] == 4 and halves["layouts"] == {"1x2": 2}
    assert halves["spread_s"]["max"] == pytest.approx(1e-5)


def test_an_older_profilers_records_give_no_layout_or_clock() -> None:
    recs = [{"rank": 0, "entries": []}, {"rank": 1, "entries": []}]
    assert arrival.layout(recs) is None and arrival.clock(recs) is None
    assert arrival.arrivals(recs, None) == {}


def _profile(nodes: int, ppn: int, sub: str | None = "1x2") -> dict[str, Any]:
    hosts = [f"n{i // ppn}" for i in range(nodes * ppn)]
    return {"version": 2, "ranks": nodes * ppn, "mpi": {},
            "layout": {"nodes": nodes, "ppn": ppn, "hosts": hosts},
            "entries": [{"collective": "allreduce", "comm_size": nodes * ppn, "size": 8,
                         "arrival": {"layouts": {}}},
                        {"collective": "bcast", "comm_size": 2, "size": 64,
                         "arrival": {"layouts": {sub: 3}} if sub else None}]}


def _groups(prof: dict[str, Any]) -> list[Group]:
    return [Group(e["collective"], e["comm_size"], [e], 1.0, 0.5) for e in prof["entries"]]


def test_each_group_is_placed_where_its_calls_ran() -> None:
    prof = _profile(2, 2)
    world, half = _groups(prof)
    assert group_layout(world, prof) == (2, 2) and group_layout(half, prof) == (1, 2)
    for nodes, ppn, want in ((2, 2, None), (1, 4, (1, 2))):  # a group never sampled whole:
        bare = _profile(nodes, ppn, sub=None)  # not said, but on one node it can only be
        assert group_layout(_groups(bare)[1], bare) == want
    old = {"version": 1, "ranks": 4, "entries": prof["entries"]}
    assert group_layout(world, old) is None


def test_a_job_in_another_layout_is_refused_naming_both(tmp_path: Any) -> None:
    prof, notes = _profile(2, 2), []
    none: dict[str, str] = {}
    with pytest.raises(ColltuneError) as e:  # one node here, no hostfile, no allocation
        place_groups(_groups(prof), prof, TuneOptions([], []), False, notes.append, none)
    assert e.value.exit_code == 2
    assert "ran allreduce at 4 ranks as 2x2" in e.value.message
    assert "would run it as 1x4" in e.value.message and "--any-layout" in e.value.hint
    groups = _groups(prof)
    place_groups(groups, prof, TuneOptions([], []), True, notes.append, none)
    assert groups[0].layout is None and "(--any-layout)" in notes[0]
    assert groups[1].layout == (1, 2)  # its own layout fits here
    hosts = tmp_path / "hosts"
    hosts.write_text("n0 slots=2\nn1 slots=2\n")
    ok = TuneOptions([], [], hostfile=str(hosts))
    groups = _groups(prof)
    place_groups(groups, prof, ok, False, notes.append, none)
    assert [g.layout for g in groups] == [(2, 2), (1, 2)]
    alloc = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)"}
    assert job_layout(4, (2, 2), TuneOptions([], []), alloc) == (2, 2)
    asked = TuneOptions([], [], launch=Launch(nodes=1, ppn=4))
    assert job_layout(4, (2, 2), asked, none) == (1, 4)  # the user's word is what runs


def test_an_older_profile_is_tuned_as_this_job_runs_and_says_so() -> None:
    prof = _profile(2, 2)
    old = {"version": 1, "ranks": 4, "entries": [
        {k: v for k, v in e.items() if k != "arrival"} for e in prof["entries"]]}
    notes: list[str] = []
    groups = _groups(old)
    place_groups(groups, old, TuneOptions([], []), False, notes.append, {})
    assert [g.layout for g in groups] == [None, None]
    assert len(notes) == 1 and "does not say where its ranks ran or when they entered" \
        in notes[0]
