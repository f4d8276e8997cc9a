"""What the store already knows of an installation's candidates, as tune online's plan
lines: a candidate measured clearly slower than the fastest configuration at a
communicator size and size bucket is not explored there (`skip COLL ID NP BUCKET`), so a
run spends its share of calls on the candidates still in question; what earlier runs of
the same command gave each candidate (`prior COLL ID NP BUCKET CALLS RATIO`), so the run
takes up their successive halving instead of starting it again; and the finalist whose
gain they could not yet confirm (`final COLL ID NP BUCKET`), which gets more calls."""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import stat
from collections import defaultdict
from pathlib import Path

from colltune.core.config import DEFAULT, Config
from colltune.core.stats import stratified_compare, stratified_ratio
from colltune.store import Store

# a candidate this many times slower is clearly slower: skipped here, and dropped by the
# layer while it explores (apploop/online/driver.plan_text's `drop`)
SLOWER = 1.5
# a point with fewer samples says too little to skip a candidate on
MIN_SAMPLES = 5
NBUCKET = 48  # kernel/online/collonline.c's size buckets


def origin_of(cmd: list[str], cwd: str | None = None, series: str | None = None) -> str:
    """The store key's tag of an application's runs. Runs pool only when they are one
    program: the command (the launcher's options included: another layout is another run),
    the working directory (`cwd`, default this process's), and every file the command
    names (the executable, its inputs) by its resolved path and content, so the same
    `./app` in another project, or rebuilt, starts a series of its own. Or when the user
    names the series (`series`, tune online --series): then those runs pool whatever they
    are. A command from a profile is only read here, never run."""
    if series is not None:
        return "online=series-" + hashlib.sha256(series.encode()).hexdigest()[:12]
    base = Path(cwd or os.getcwd())
    h = hashlib.sha256(str(base).encode() + b"\0")
    for word in cmd:
        h.update(word.encode() + b"\0")
        f = _named_file(word, base)
        if f is not None:
            h.update(str(f).encode() + b"\0" + _content_digest(f))
    return "online=" + h.hexdigest()[:12]


def _named_file(word: str, base: Path) -> Path | None:
    """The regular file a command word names, as the shell would find it: a path (relative
    to `base`), else a program on PATH; None for an option, a number, or anything else."""
    if not word or len(word) > 4096 or "\0" in word:
        return None
    path = base / word if "/" in word else None
    if path is None:
        found = shutil.which(word)
        path = Path(found) if found else None
    try:
        real = path.resolve() if path is not None else None
        return real if real is not None and real.is_file() else None
    except (OSError, RuntimeError):
        return None


# what a file's content digest reads at most: the executable's whole text for any
# application this is meant for; a larger file (an input of gigabytes) by its head and size
_DIGEST_BYTES = 256 << 20


def _content_digest(path: Path) -> bytes:
    """A regular file's content, digested (its first _DIGEST_BYTES and its size); b"" where
    it cannot be read."""
    h = hashlib.sha256()
    try:  # never blocks: what is opened may have become a FIFO since it was looked at
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return b""
            left = _DIGEST_BYTES
            while left > 0 and (chunk := f.read(min(1 << 20, left))):
                h.update(chunk)
                left -= len(chunk)
            h.update(str(st.st_size).encode())
    except OSError:
        return b""
    return h.digest()


def online_key(mpi_key: str, cmd: list[str], cwd: str | None = None,
               series: str | None = None) -> str:
    """The store key tune online's runs of `cmd` (in `cwd`, or named `series`) on the
    installation `mpi_key` use (a profile's command is only digested here: it is data,
    never run)."""
    return f"{mpi_key}~{origin_of(cmd, cwd, series)}"


def bucket_of(nbytes: int) -> int:
    """The layer's size bucket of a call of `nbytes` per rank: floor(log2) + 1, 0 for 0."""
    return min(max(nbytes, 0).bit_length(), NBUCKET - 1)


def known_medians(db: Path, mpi_key: str, collectives: set[str], own: str | None = None
                  ) -> dict[tuple[str, int, int], dict[Config, float]]:
    """(collective, communicator size, bucket) -> configuration -> its fastest median
    there, from every point the store holds for this installation: the kernel's, the
    application's replayed arrival's, earlier online runs' (whatever follows `~` in the
    key). A point stored invalid (a wrong answer, the kernel's or the layer's check) counts
    as infinitely slow. The points of `own` (this command's key) count only where invalid:
    they pool several launches, which only their launch-by-launch ratios may compare
    (`prior_lines`; the layer drops what those say is clearly slower)."""
    out: dict[tuple[str, int, int], dict[Config, float]] = defaultdict(dict)
    if not db.is_file():
        return out
    base = mpi_key.split("~", 1)[0]
    store = Store(db, readonly=True)
    try:
        for ctx in store.contexts():
            if ctx.mpi_key.split("~", 1)[0] != base or ctx.collective not in collectives:
                continue
            for m in store.measurements(ctx):
                if ctx.mpi_key == own and m.status != "invalid":
                    continue
                at = out[(ctx.collective, ctx.np, bucket_of(m.size))]
                if m.status == "invalid":  # a wrong answer: as slow as can be, unless it
                    at.setdefault(m.config, math.inf)  # answered right at another size
                    continue
                if m.status != "ok" or m.median is None or m.n < MIN_SAMPLES:
                    continue
                at[m.config] = min(at.get(m.config, m.median), m.median)
    finally:
        store.close()
    return out


def _median_of(cfg: Config, medians: dict[Config, float]) -> float | None:
    """What the store says of `cfg`: its own median, or, for an algorithm run with the
    library's own parameters, its best variant's (the layer runs it so: a skip is never
    for a variant it would not run); None: never measured there."""
    if cfg in medians:
        return medians[cfg]
    if cfg.params:
        return None
    same = [m for c, m in medians.items() if c.algorithm == cfg.algorithm]
    return min(same) if same else None


def skip_lines(db: Path, mpi_key: str, candidates: dict[str, dict[int, Config]],
               own: str | None = None) -> list[str]:
    """The plan's `skip` lines: each candidate (the plan's id -> what it runs, per
    collective) the store measured over SLOWER times the fastest configuration of its
    (collective, communicator size, bucket), by other sources than `own` (this command's
    key: only its wrong answers count here). A candidate never measured there stays: what
    the store does not know, the run explores."""
    lines = []
    known = known_medians(db, mpi_key, set(candidates), own)
    for (coll, np, bucket), medians in sorted(known.items(), key=lambda kv: kv[0]):
        fastest = min(medians.values())
        for ident, cfg in sorted(candidates.get(coll, {}).items()):
            m = _median_of(cfg, medians)
            # a wrong answer is skipped whatever answered right there (perhaps nothing the
            # store holds: this command's own times are not compared here)
            if ident and m is not None and (math.isinf(m) or m > SLOWER * fastest):
                lines.append(f"skip {coll} {ident} {np} {bucket}")
    return lines


# a finalist gets more calls, run after run, until this many in all (then its gain is
# not confirmed, and it is left at that)
FINAL_ROUNDS = 8


def _by_group(store: Store, key: str, candidates: dict[str, dict[int, Config]]
              ) -> dict[tuple[str, int, int], tuple[int, dict[int, dict[str, list[float]]]]]:
    """This command's points (store key `key`), per (collective, communicator size,
    bucket): the library's calls there, and each configuration's samples by launch (the
    plan's id; 0: the library's). Where a communicator size has calls in several layouts,
    the one with the most calls of the library's choice."""
    best: dict[tuple[str, int, int], tuple[int, dict[int, dict[str, list[float]]]]] = {}
    for ctx in store.contexts():
        if ctx.mpi_key != key or ctx.collective not in candidates:
            continue
        ids = {cfg: ident for ident, cfg in candidates[ctx.collective].items()}
        by_size: dict[int, dict[int, dict[str, list[float]]]] = defaultdict(dict)
        for m in store.measurements(ctx):
            if m.status == "ok" and m.samples and (m.config == DEFAULT or m.config in ids):
                by_size[m.size][0 if m.config == DEFAULT else ids[m.config]] = m.by_launch()
        for size, points in by_size.items():
            if 0 not in points or len(points) < 2:
                continue
            at = (ctx.collective, ctx.np, bucket_of(size))
            calls = sum(len(v) for v in points[0].values())
            if at not in best or calls > best[at][0]:
                best[at] = (calls, points)
    return best


def final_lines(db: Path, key: str, candidates: dict[str, dict[int, Config]],
                samples: int, alpha: float = 0.01, min_gain: float = 0.03) -> list[str]:
    """The plan's `final` lines: in each group whose halving the earlier runs of this
    command ended (a candidate with `samples` calls), the fastest such candidate by its
    launches' ratios, where it looks `min_gain` faster than the library's choice but the
    stratified rank test does not confirm it at `alpha` (the decision's own test): the run
    gives it `samples` more calls, up to FINAL_ROUNDS times `samples` in all. A gain
    confirmed, or one that does not look worth a rule, needs no more calls."""
    if not db.is_file():
        return []
    out = []
    store = Store(db, readonly=True)
    try:
        for (coll, np, bucket), (_, points) in sorted(_by_group(store, key, candidates).items()):
            base = points[0]
            ratios = {k: stratified_ratio(runs, base) for k, runs in points.items()
                      if k and sum(len(v) for v in runs.values()) >= samples}
            ranked = sorted((r, k) for k, r in ratios.items() if r is not None)
            if not ranked:
                continue
            ratio, k = ranked[0]
            calls = sum(len(v) for v in points[k].values())
            if ratio <= 1 - min_gain and calls < FINAL_ROUNDS * samples and not \
                    stratified_compare(points[k], base, alpha, min_gain).significant:
                out.append(f"final {coll} {k} {np} {bucket}")
    finally:
        store.close()
    return out


def prior_lines(db: Path, key: str, candidates: dict[str, dict[int, Config]]
                ) -> dict[str, int]:
    """The plan's `prior` lines (-> how many earlier launches each rests on): for each
    candidate the earlier runs stored under this command's own key (`key`, with its
    `~online=`), how many calls it had in launches that timed the library's choice too,
    and its median over the library's, launch by launch (stats.stratified_ratio: two
    launches' times are never compared with each other, so a launch that ran slower does
    not pass for a slower candidate)."""
    if not db.is_file():
        return {}
    out: dict[str, int] = {}
    store = Store(db, readonly=True)
    try:
        for (coll, np, bucket), (_, points) in sorted(_by_group(store, key, candidates).items()):
            base = points[0]
            launches = {lb for k, runs in points.items() if k
                        for lb in runs if runs[lb] and base.get(lb)}
            for k, runs in sorted(points.items()):
                ratio = stratified_ratio(runs, base)
                if not k or ratio is None:
                    continue
                calls = sum(len(v) for lb, v in runs.items() if base.get(lb))
                out[f"prior {coll} {k} {np} {bucket} {calls} {ratio:.6g}"] = len(launches)
    finally:
        store.close()
    return out
