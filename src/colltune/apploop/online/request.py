"""What one `tune online` run is asked to do: the application's command, the output and
the store, the family and installation, and the layer's exploration rules, each option
declared once here (core/setting): its flag, default, bound and help, which the CLI's
option, the defaults and the refusals all read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from colltune.core.setting import check, setting
from colltune.errors import ColltuneError

# the layer's own limits (kernel/online/online.h): KEEP times kept per configuration bound
# what a candidate's calls can be judged on; MAXB calls a batch
KEEP, MAXB = 512, 256


@dataclass
class OnlineRequest:
    """One `tune online` run (the declared fields are its options)."""

    cmd: list[str]
    out: Path
    db: Path
    backend: str = "openmpi"
    prefix: str | None = None
    share: float = setting(
        0.1, "--explore-share", help="At most this share of a group's calls try candidates.",
        lo=0, hi=0.5, open_lo=True, words="a share of calls between 0 and 0.5")
    min_calls: int = setting(
        64, "--min-calls", help="A group's first calls, its warm-up: the library's choice, "
        "untimed; a group with no more calls is never explored.", lo=0)
    # successive halving: every candidate gets `first` calls, the faster half twice as
    # many, and so on until one is left with `samples` (kernel/online/online_halving.c)
    samples: int = setting(
        32, "--samples", help="Calls the last candidate in question gets (successive "
        "halving).", lo=1, hi=KEEP)
    # 8, not 4: on the imbalance program the true winner's first 4 calls were 1.5x the
    # library's median in 1 run of 7, and it was dropped (docs/notes/
    # benchmarks-history.md, tune online with successive halving)
    first: int = setting(
        8, "--first-calls", help="Calls each candidate gets in the first round; the faster "
        "half goes on with twice as many.", lo=1, hi=KEEP)
    model: bool = setting(
        True, "--model/--no-model", help="Leave out the segment sizes the store's cost model "
        "(tune model fit) ranks below their algorithm's best, where it has a fit.")
    timeout: float | None = setting(
        None, "--timeout", help="Seconds before the run is abandoned.", lo=0, open_lo=True)
    evidence: Path | None = setting(
        None, "--evidence", help="Directory to copy the layer's own files into (each rank's "
        "schedule).")
    series: str | None = setting(
        None, "--series", help="Pool these runs' calls under this name, whatever the "
        "program: without it, runs pool only when they are the same command, working "
        "directory and files (the executable's content).")
    pairs: int = setting(
        0, "--pairs", help="Measure what the layer costs: run the application this many "
        "times without it, each before a run under it (the runs add up), and state their "
        "wall times' ratio with its 95% interval.", lo=0, hi=100,
        words="between 1 and 100 (0: not measured)")
    batch: int = 32  # calls between two reductions of the times (at most MAXB)
    flush: float = 1.0  # the layer writes what it learned so far every this many seconds

    def checked(self) -> OnlineRequest:
        """This request, its values within their bounds (one line naming the option and
        its default otherwise); the halving's rounds need first <= samples."""
        check(self)
        if self.first > self.samples:
            raise ColltuneError(f"--first-calls {self.first}, --samples {self.samples}: need "
                                "first <= samples", "the defaults are 8 and 32")
        return self
