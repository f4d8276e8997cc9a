"""Which arrival pattern a tune replays for one group of an application's profile
(collective, communicator size), and why: the rows of entry delays the kernel replays
(kernel/launch.Repetitions.arrival), as --arrival asks, and only from clocks that were put
on rank 0's.

--arrival auto replays a group whose ranks entered far apart (the profile's median spread
at least SPREAD_AGAINST_CALL of its median call time); `on` every group with arrival data;
`off` none; `both` as `on` (tune app also measures with the ranks entering together). A
profile whose clock sync failed, or whose clocks drifted as much as a group's spread, is
replayed nowhere."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from colltune.apploop.profiling.profile import load
from colltune.errors import ColltuneError

# --arrival auto: a group is replayed where its ranks' median entry spread is at least this
# share of its median call time (the slowest member's, from its own entry)
SPREAD_AGAINST_CALL = 0.5
MODES = ("auto", "on", "off", "both")
Rows = tuple[tuple[float, ...], ...]
# what the kernel reads of a plan's arrival rows (kernel/bench/bench.h: MAX_ARRIVAL_ROWS,
# MAX_ARRIVAL_RANKS, MAX_ARRIVAL_DELAY): a profile's rows are checked against these before
# anything is launched, never first by the kernel three launches in
MAX_ROWS, MAX_RANKS, MAX_DELAY_S = 64, 512, 10.0
# the replay's wait a repetition (its rows' mean spread: the ranks wait at once), at most:
# a profile is data another user may have written, and every repetition of every point
# waits it
MAX_WAIT_S = 1.0


@dataclass(frozen=True)
class Replay:
    """A group's pattern (no rows: the ranks enter together), how it was chosen, in words,
    and the mean entry spread of its rows (what the kernel's replayed spread is held to)."""

    rows: Rows = ()
    how: str = "together"
    profiled_spread_s: float = 0.0


def clock_problem(profile: dict, spread_s: float) -> str | None:  # type: ignore[type-arg]
    """Why a profile's entry times cannot be trusted against a spread of `spread_s`: its
    ranks' clocks were not put on rank 0's, or drifted as much as the spread."""
    clock = profile.get("clock")
    if not isinstance(clock, dict):
        return "it records no clock sync"
    if not clock.get("synced"):
        return "its clock sync failed"
    drift = float(clock.get("drift_s") or 0.0) + float(clock.get("error_s") or 0.0)
    if drift >= spread_s:
        return (f"its clocks drifted {drift * 1e6:.0f} us, as much as the spreads it "
                f"recorded ({spread_s * 1e6:.0f} us)")
    return None


def choose(entries: list[dict], profile: dict, mode: str  # type: ignore[type-arg]
           ) -> tuple[Replay, str | None]:
    """The pattern a group of these profile entries is replayed with under --arrival
    `mode` (its costliest size bucket's recorded delays), and a note for the user where
    the profile's clock rules the pattern out (said once by the caller)."""
    recorded = [e for e in entries if (e.get("arrival") or {}).get("delays_s")]
    if mode == "off" or not recorded:
        return Replay(how="together" + ("" if recorded or mode == "off" else
                                        " (the profile has no arrival data for it)")), None
    costliest = max(recorded, key=lambda e: float(e["time_s"]["mean"]))
    arr = costliest["arrival"]
    spread, call = float(arr["spread_s"]["median"]), float(arr.get("call_s") or 0.0)
    problem = clock_problem(profile, spread)
    if problem is not None:
        return Replay(how="together (clock)"), (
            f"note: the profile's arrival patterns are not used: {problem}; tuned with the "
            "ranks entering together")
    if mode == "auto" and spread < SPREAD_AGAINST_CALL * call:
        return Replay(how=f"together (spread {spread * 1e6:.0f} us under "
                          f"{SPREAD_AGAINST_CALL:.0%} of the call's {call * 1e6:.0f} us)"), None
    # the kernel takes row n % rows at repetition n, and a point may stop after a few: the
    # recorded calls (in the order of the application's communicators) are shuffled, the
    # same way every run, so that the first repetitions already see the group's mix
    rows = checked_rows(arr, int(costliest["comm_size"]), str(costliest["collective"]))
    random.Random(len(rows)).shuffle(rows)
    # the mean over the rows replayed, as the replay's is taken (a group of communicators
    # with and without a late rank has a bimodal spread, whose median says little)
    wait = statistics.fmean(max(r) - min(r) for r in rows)
    return Replay(tuple(rows), f"replayed (spread {spread * 1e6:.0f} us, call "
                               f"{call * 1e6:.0f} us; the ranks wait {wait * 1e6:.0f} us "
                               "a repetition)", wait), None


def checked_rows(arr: dict, np: int, collective: str  # type: ignore[type-arg]
                 ) -> list[tuple[float, ...]]:
    """A group's `delays_s` rows as the kernel reads them: 1 to MAX_ROWS rows of exactly
    `np` delays, each 0 to MAX_DELAY_S, no row spread wider than the profile's own
    recorded maximum, and a mean wait a repetition of at most MAX_WAIT_S; else one line
    naming the group and what is wrong (the profile is data: its rows are never replayed
    as given)."""
    def bad(why: str) -> ColltuneError:
        return ColltuneError(f"the profile's arrival rows of {collective} on {np} ranks: "
                             f"{why}", "profile the application again with tune profile")

    raw = arr["delays_s"]
    if not 1 <= len(raw) <= MAX_ROWS:
        raise bad(f"{len(raw)} rows, where a replay takes 1 to {MAX_ROWS}")
    if not 2 <= np <= MAX_RANKS:
        raise bad(f"a replay takes 2 to {MAX_RANKS} ranks")
    rows = [tuple(float(d) for d in row) for row in raw]
    if any(len(r) != np for r in rows):
        raise bad(f"a row of {min(map(len, rows))} to {max(map(len, rows))} delays, "
                  f"where each rank has one ({np})")
    top = max(d for r in rows for d in r)
    if not all(0 <= d <= MAX_DELAY_S for r in rows for d in r):
        raise bad(f"a delay of {top:g} s, where a replay waits 0 to {MAX_DELAY_S:g} s")
    recorded = float(arr["spread_s"]["max"])
    widest = max(max(r) - min(r) for r in rows)
    if widest > recorded * 1.01 + 1e-6:
        raise bad(f"a row spread {widest:g} s wide, where the profile recorded at most "
                  f"{recorded:g} s")
    wait = statistics.fmean(max(r) - min(r) for r in rows)
    if wait > MAX_WAIT_S:
        raise bad(f"the ranks would wait {wait:g} s a repetition, over the "
                  f"{MAX_WAIT_S:g} s a replay waits at most")
    return rows


def rows_for(profile_path: Path, collective: str, np: int) -> tuple[Rows, str]:
    """For `tune COLLECTIVE --np N --arrival PROFILE`: the arrival pattern the profile
    recorded for that collective on N ranks (as `tune app --arrival on` replays it), and
    a line saying what it is; refused where the profile has none or its clock failed."""
    profile = load(profile_path)
    entries = [e for e in profile["entries"]  # type: ignore[attr-defined]
               if e["collective"] == collective and int(e["comm_size"]) == np]
    replay, why = choose(entries, profile, "on")
    if not replay.rows:
        raise ColltuneError(f"--arrival {profile_path}: no arrival pattern of {collective} on "
                            f"{np} ranks to replay" + (f" ({why.split(': ', 1)[1]})"
                                                       if why else ""),
                            "profile the application with this colltune, or tune its "
                            "groups with tune app")
    return replay.rows, f"replaying {profile_path}'s arrival pattern: {replay.how}"
