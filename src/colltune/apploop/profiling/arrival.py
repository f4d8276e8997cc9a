"""Where an application's ranks ran and how far apart they entered its collectives, from
the profiler's per-rank records (kernel/prof/collprof.c): the job's layout, the clock's quality,
and per (collective, communicator size, size bucket) the spread of the sampled calls."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

# sampled calls kept one by one per group (the delays a replay draws from)
KEPT_CALLS = 64
# ranks named as late per group
LATE_RANKS = 3

Key = tuple[str, int, int]  # collective, communicator size, size bucket


def layout(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Nodes (distinct processor names), the most ranks on one, and each world rank's host;
    None where a record says no host (a profile of an older profiler)."""
    hosts = {int(r["rank"]): r.get("host") for r in ranks}
    if any(not isinstance(h, str) or not h for h in hosts.values()):
        return None
    per = Counter(hosts.values())
    return {"nodes": len(per), "ppn": max(per.values()),
            "hosts": [hosts[i] for i in sorted(hosts)]}


def layout_of(world_ranks: list[int], hosts: list[str]) -> str:
    """A set of ranks' layout as --layouts spells it: nodes x the most ranks on one."""
    per = Counter(hosts[w] for w in world_ranks if 0 <= w < len(hosts))
    return f"{len(per)}x{max(per.values(), default=0)}"


def clock(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How well the ranks' clocks were put on rank 0's: the largest error of an offset (half
    the shortest round trip) and the largest drift between MPI_Init and MPI_Finalize."""
    cs = [r.get("clock") for r in ranks]
    if any(not isinstance(c, dict) for c in cs):
        return None
    synced = all(bool(c.get("synced")) for c in cs)  # type: ignore[union-attr]
    err = max(max(float(x) for x in c["error_s"]) for c in cs)  # type: ignore[index]
    drift = max(abs(float(c["offset_s"][1]) - float(c["offset_s"][0])) for c in cs)  # type: ignore[index]
    return {"synced": synced, "error_s": err, "drift_s": drift,
            "method": "ping-pong with rank 0 at MPI_Init and MPI_Finalize, shortest of 10 "
                      "round trips; entry times drawn onto rank 0's clock between the two"}


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def arrivals(ranks: list[dict[str, Any]], hosts: list[str] | None) -> dict[Key, dict[str, Any]]:
    """Per group, what its sampled calls show: every member's entry on rank 0's clock, for
    the calls every member sampled (a call is a communicator's n-th collective)."""
    # group -> (communicator, call) -> comm rank -> (world rank, entry, time in the call)
    calls: dict[Key, dict[tuple[int, int, int], dict[int, tuple[int, float, float]]]] = \
        defaultdict(lambda: defaultdict(dict))
    for r in ranks:
        entries = r.get("entries", [])
        for row in r.get("arrivals", []):
            i, leader, ordinal, crank, seq, t, dur = row
            if not 0 <= int(i) < len(entries):
                continue
            e = entries[int(i)]
            key = (str(e["collective"]), int(e["comm_size"]), int(e["bucket"]))
            calls[key][(int(leader), int(ordinal), int(seq))][int(crank)] = (
                int(r["rank"]), float(t), float(dur))
    out = {}
    for key, by_call in calls.items():
        n = key[1]
        whole = [(c, m) for c, m in sorted(by_call.items()) if len(m) == n]
        if whole:
            out[key] = _summary(whole, n, hosts)
    return out


def _summary(whole: list[tuple[tuple[int, int, int], dict[int, tuple[int, float, float]]]],
             n: int, hosts: list[str] | None) -> dict[str, Any]:
    spreads, slowest, after_last, delays = [], [], [], []
    # by world rank: a rank late in every communicator it is in is named once
    late: dict[int, list[float]] = defaultdict(list)
    last: Counter[int] = Counter()
    comm_rank: dict[int, int] = {}
    comms: Counter[str] = Counter()
    seen: set[tuple[int, int]] = set()
    for (leader, ordinal, _seq), members in whole:
        entry = {cr: t for cr, (_w, t, _d) in members.items()}
        first, final = min(entry.values()), max(entry.values())
        spreads.append(final - first)
        slowest.append(max(d for _w, _t, d in members.values()))
        after_last.append(max(t + d for _w, t, d in members.values()) - final)
        delays.append([entry[cr] - first for cr in range(n)])
        for cr, (w, t, _d) in members.items():
            late[w].append(t - first)
            comm_rank[w] = cr
        last[members[max(entry, key=lambda cr: entry[cr])][0]] += 1
        if hosts is not None and (leader, ordinal) not in seen:
            seen.add((leader, ordinal))
            comms[layout_of([w for w, _t, _d in members.values()], hosts)] += 1
    k = len(whole)
    mean_delay = {w: sum(ds) / len(ds) for w, ds in late.items()}
    named = sorted((w for w in mean_delay if mean_delay[w] > 0),
                   key=lambda w: -mean_delay[w])[:LATE_RANKS]
    step = max(1, k // KEPT_CALLS)  # kept calls spread over the run, not its start only
    return {
        "calls": k,
        "spread_s": {"median": statistics.median(spreads), "p90": _quantile(spreads, 0.9),
                     "max": max(spreads)},
        # the slowest member's time from its own entry (a late rank is not charged for
        # arriving late, a rank kept waiting is), and the time after the last one entered
        "call_s": statistics.median(slowest),
        "after_last_s": statistics.median(after_last),
        # the ranks that entered latest on average (world ranks; last_share: of the calls
        # it was in, how often it entered last)
        "late_ranks": [{"world_rank": w, "rank": comm_rank[w], "mean_delay_s": mean_delay[w],
                        "last_share": last[w] / len(late[w])} for w in named],
        "delays_s": delays[::step][:KEPT_CALLS],
        "layout": comms.most_common(1)[0][0] if comms else None,
        "layouts": dict(comms),
    }
