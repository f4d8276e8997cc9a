"""What tune online costs an application, measured: the application run without the layer
before each run under it (`--pairs`), and the runs' wall times compared pair by pair, as
a ratio with its 95% interval. The runs under the layer add up as any runs of one command
do (apploop/online/driver.run); the summary of the last one carries the measurement."""

from __future__ import annotations

from colltune.apploop.online.driver import OnlineRequest, run
from colltune.apploop.online.summary import MeasuredCost, OnlineResult
from colltune.apploop.profiling.profile import launch_timed
from colltune.errors import ColltuneError, MPIError
from colltune.tuner.measure import Reporter


def run_pairs(req: OnlineRequest, reporter: Reporter | None = None) -> OnlineResult:
    """`req.pairs` times: the application as the user launches it, then under the layer
    (apploop/online/driver.run, each run taking up where the last left off). The last run's
    result, with what the pairs measured."""
    pairs = req.checked().pairs
    if pairs < 1:
        raise ColltuneError(f"--pairs {pairs}: nothing to measure",
                            "--pairs 5 runs the application 10 times, half under the layer")
    rep = reporter or Reporter()
    cost = MeasuredCost()
    res: OnlineResult | None = None
    for i in range(pairs):
        rep.note(f"pair {i + 1} of {pairs}: the application without the layer, then under it")
        plain, wall = launch_timed(req.cmd, req.timeout, True, None,
                                   "what the layer costs is not measured")
        if plain.returncode != 0:
            tail = (plain.stderr or "").strip().splitlines()[-3:]
            raise MPIError(f"the application failed (exit {plain.returncode}) without the "
                           "online layer" + (": " + " | ".join(tail) if tail else ""),
                           "run the command by itself first")
        res = run(req, rep)
        cost.default_s.append(wall)
        cost.online_s.append(res.wall_s)
    assert res is not None
    res.measured = cost
    return res
