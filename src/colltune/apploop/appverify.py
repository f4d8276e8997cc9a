"""`tune verify --app`: does the application itself run faster with the rules? It runs
alternately without and with them (A B, then B A, ...: linear drift cancels), the profiler
on both arms, the rules passed as the user would (the backend's launch settings for a file
of its family, through the launcher's own option), and judges each measure by a paired
t-test over the pairs on the log ratio (scipy.stats): one application run is one sample;
runs of identical settings differ by up to 2.5x on this machine, so only pairs count."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.apploop.profile import profiled_run
from colltune.backends import registry
from colltune.errors import ColltuneError, NotApplied

ARMS = ("default", "tuned")
# what is compared: the application's own wall time (slowest rank, MPI_Init to
# MPI_Finalize), the time in blocking collectives (mean rank), the whole command (launch too)
MEASURES = {"wall": ("wall_s", "max"), "collectives": ("collective_s", "mean"),
            "command": ("run_s", None)}
PRIMARY = "wall"  # significantly slower here fails the verify


@dataclass
class MeasureVerdict:
    name: str
    default: list[float]  # per pair, seconds
    tuned: list[float]
    ratio: float  # tuned / default: geometric mean over pairs
    p_value: float | None
    verdict: str  # faster | same | slower


@dataclass
class AppVerdict:
    command: list[str]
    rules: Path
    pairs: int
    measures: dict[str, MeasureVerdict] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.measures[PRIMARY].verdict == "slower"


def _figure(profile: dict[str, object], measure: str) -> float:
    key, stat = MEASURES[measure]
    v = profile[key]
    return float(v[stat] if stat else v)  # type: ignore[index, arg-type]


def judge(name: str, default: list[float], tuned: list[float], alpha: float = 0.05,
          min_gain: float = 0.03) -> MeasureVerdict:
    """Paired t-test on log(tuned/default) over the pairs; a verdict needs p < alpha and a
    geometric-mean change of at least `min_gain`."""
    logs = [math.log(t / d) for d, t in zip(default, tuned, strict=True) if d > 0 and t > 0]
    if len(logs) < 2:
        return MeasureVerdict(name, default, tuned, 1.0, None, "same")
    mean = sum(logs) / len(logs)
    ratio = math.exp(mean)
    if all(x == logs[0] for x in logs):  # no spread: the test is undefined
        p = 0.0 if mean != 0 else 1.0
    else:
        from scipy import stats  # on first use: half a second to import

        p = float(stats.ttest_1samp(logs, 0.0).pvalue)
    verdict = "same"
    if p < alpha and abs(ratio - 1) >= min_gain:
        verdict = "slower" if ratio > 1 else "faster"
    return MeasureVerdict(name, default, tuned, ratio, p, verdict)


def applied(arm: str, wanted: dict[str, str], prof: dict[str, object]) -> str:
    """Whether a run applied what its arm set, by the library's own read-back (MPI_T) in
    every rank: a command line that overrides it (mpirun --mca ...) would make both arms
    the same and every verdict "same", so that is a NotApplied error, not a pass."""
    if not wanted:
        return "what the library applied is not provable for this MPI family"
    got: dict[str, list[str | None]] = prof.get("settings") or {}  # type: ignore[assignment]
    for name, value in wanted.items():
        seen = got.get(name, [None])
        if seen == [None] and arm == "default":
            return f"unproven: the library has no control variable {name}"
        if seen != [value]:  # in the tuned arm, a variable the library lacks applies nothing
            what = (f"has no control variable {name} (the component is not in use)"
                    if seen == [None] else
                    f"read back {name} = {', '.join(map(str, seen))}, colltune set {value}")
            raise NotApplied(
                f"the {arm} runs did not apply what colltune set: the library {what}; the "
                "command line overrides it, so both arms would run the same",
                f"remove {name} from the command (mpirun --mca, -x, -genv): tune verify "
                "--app sets it in each arm")
    return "applied (" + ", ".join(f"{k} = {v}" for k, v in wanted.items()) + ", read back)"


def verify_app(cmd: list[str], rules: Path, pairs: int = 5, backend_name: str | None = None,
               prefix: str | None = None, timeout: float | None = None,
               note: Callable[[str], None] | None = None) -> AppVerdict:
    if pairs < 2:
        raise ColltuneError(f"--pairs {pairs}: a paired test needs at least 2 pairs",
                            "use --pairs 5 or more")
    if not rules.is_file():
        raise ColltuneError(f"no rules file {rules}", "pass the file tune app (or tune) wrote")
    backend = registry.named(backend_name) if backend_name else registry.for_file(rules)
    mpi = backend.find(prefix)
    arms = backend.with_files().rules_arms(rules.resolve())
    runs: dict[str, list[dict[str, object]]] = {a: [] for a in ARMS}
    say = note or (lambda _s: None)
    for i in range(pairs):
        for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
            prof = profiled_run(cmd, backend, mpi, env=arms[arm], timeout=timeout,
                                capture=True)
            if i == 0:
                say(f"{arm} run: " + applied(arm, backend.read_back(arms[arm]), prof))
            runs[arm].append(prof)
            say(f"pair {i + 1}/{pairs} {arm}: wall {_figure(prof, 'wall'):.4f} s, "
                f"collectives {_figure(prof, 'collectives'):.4f} s")
    out = AppVerdict(cmd, rules, pairs)
    for m in MEASURES:
        out.measures[m] = judge(m, [_figure(p, m) for p in runs["default"]],
                                [_figure(p, m) for p in runs["tuned"]])
    return out


def as_json(v: AppVerdict) -> dict[str, object]:
    return {"command": v.command, "rules": str(v.rules), "pairs": v.pairs,
            "failed": v.failed, "primary": PRIMARY,
            "measures": {m: {"default_s": x.default, "tuned_s": x.tuned, "ratio": x.ratio,
                             "p_value": x.p_value, "verdict": x.verdict}
                         for m, x in v.measures.items()}}
