"""What the store holds and hands back: a measurement's context, a measurement, a model
fit, and the checks a stored value passes before it is believed (a store may be another
user's)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from colltune.core.config import Config
from colltune.core.records import PointResult


def timing_of(r: PointResult) -> str:
    """Which timing modes produced a result: what its series hold (none: isolated)."""
    modes = sorted(r.series)
    if len(modes) > 1:
        return "both"
    return modes[0] if modes else "isolated"


def number_list(x: object) -> list[float]:
    if not isinstance(x, list) or not all(type(v) in (int, float) and math.isfinite(v)
                                          for v in x):
        raise ValueError("samples must be a list of finite numbers")
    return [float(v) for v in x]


def strata_list(x: object, samples: int) -> list[tuple[str, int]]:
    """A stored point's launches, checked: (label, count) pairs whose counts add up to its
    samples (none: one launch)."""
    if not isinstance(x, list) or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
            and len(v[0]) <= 64 and type(v[1]) is int and v[1] > 0 for v in x):
        raise ValueError("strata must be a list of [label, count] pairs")
    if x and sum(v[1] for v in x) != samples:
        raise ValueError("strata do not add up to the samples")
    return [(str(v[0]), int(v[1])) for v in x]


def json_object(x: object) -> dict:  # type: ignore[type-arg]
    if not isinstance(x, dict):
        raise ValueError("series must be an object")
    return x


def opt_number(x: object) -> float | None:
    if x is None:
        return None
    if type(x) not in (int, float):
        raise ValueError(f"{str(x)[:20]!r} is not a number")
    return float(x)  # type: ignore[arg-type]


def default_db_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "colltune" / "colltune.db"


@dataclass(frozen=True)
class Context:
    """Where and with what a measurement was taken."""

    mpi_key: str
    mpi_name: str
    mpi_version: str
    mpi_path: str
    host: str
    np: int
    ppn: int
    nodes: int
    collective: str
    # the backend that measured it (backends.registry); "": a store older than the column,
    # whose family is read from mpi_key
    backend: str = field(default="", compare=False)


@dataclass(frozen=True)
class ModelFit:
    """One stored cost-model fit."""

    mpi_key: str
    mpi_version: str
    host: str
    np: int
    ppn: int
    model: str  # hockney, loggp, or with -intra / -inter
    params: dict  # type: ignore[type-arg]
    created: str


@dataclass
class Measurement:
    config: Config
    size: int
    status: str
    n: int
    median: float | None
    ci_lo: float | None
    ci_hi: float | None
    samples: list[float]
    message: str
    # per timing mode, the objective's series (`samples` is the first mode's);
    # older stores: {} (isolated only)
    series: dict[str, list[float]] = field(default_factory=dict)
    timing: str = "isolated"
    objective: str = "completion"
    # the launches `samples` were pooled from, each (label, count), in order ([]: one)
    strata: list[tuple[str, int]] = field(default_factory=list)

    def launches(self) -> list[tuple[str, int]]:
        """The launches `samples` came from: its strata, or one launch labelled "" (a
        point never pooled, or stored before launches were told apart)."""
        return self.strata or ([("", len(self.samples))] if self.samples else [])

    def by_launch(self) -> dict[str, list[float]]:
        """`samples` split by the launch that measured them (one launch: under "")."""
        out: dict[str, list[float]] = {}
        at = 0
        for label, n in self.launches():
            out.setdefault(label, []).extend(self.samples[at:at + n])
            at += n
        return out


def fit_params(model: str, text: str) -> dict:  # type: ignore[type-arg]
    """A stored fit's parameters, checked against what a fit stores (its pieces and fit
    quality are numbers): a report prints them, and an edited store must not put text or
    nothing there. ValueError names what is wrong."""
    import jsonschema

    need = ["lo", "hi", *(("a", "b") if model.startswith("hockney") else
                          ("L", "o", "g", "G"))]
    number = {"type": "number"}
    quality = {"type": "object", "required": ["r2", "median_rel", "worst_rel"],
               "additionalProperties": number}
    schema: dict[str, object] = {
        "type": "object", "required": ["pieces", "quality"], "properties": {
        "pieces": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": need,  # o_send: null in older fits
            "additionalProperties": {"type": ["number", "null"]}}},
        "quality": quality, "gamma_quality": quality, "gamma": number}}
    if model.startswith("hockney"):
        schema["required"] = ["pieces", "quality", "gamma", "gamma_quality"]
    try:
        doc = json.loads(text)
        jsonschema.validate(doc, schema)
        return doc  # type: ignore[no-any-return]
    except (TypeError, RecursionError, jsonschema.ValidationError) as e:
        raise ValueError(e.message if isinstance(e, jsonschema.ValidationError) else str(e)
                         ) from None
