"""One way to run a collective: an algorithm and the values of the parameters it takes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from colltune.core.catalog import FAN, MAXREQ, SEG, Catalog

_NAME = r"[a-z][a-z0-9_]*"
# the key of stores written before parameters were declared by catalogs:
# a<algorithm>/s<segsize>/f<fanout>/r<max_requests>
_OLD_KEY = re.compile(r"a(\d{1,18})/s(\d{1,18})/f(\d{1,18})/r(\d{1,18})")
_KEY = re.compile(rf"a(\d{{1,18}})((?:/{_NAME}=\d{{1,18}})*)")


@dataclass(frozen=True, order=True)
class Config:
    """One way to run a collective. algorithm 0 is the library's own decision; `params`
    holds the parameters set to something other than the library's value (0), by name,
    sorted: two configurations that run the same are equal."""

    algorithm: int
    params: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, algorithm: int, values: Mapping[str, int] | None = None) -> Config:
        for name, v in (values or {}).items():
            if not re.fullmatch(_NAME, name) or v < 0:
                raise ValueError(f"bad parameter {name}={v}")
        return cls(algorithm, tuple(sorted((n, int(v)) for n, v in (values or {}).items()
                                           if v)))

    def get(self, name: str) -> int:
        """A parameter's value (0: not set, the library's own)."""
        return dict(self.params).get(name, 0)

    def with_values(self, values: Mapping[str, int]) -> Config:
        return Config.of(self.algorithm, {**dict(self.params), **values})

    @property
    def key(self) -> str:
        return f"a{self.algorithm}" + "".join(f"/{n}={v}" for n, v in self.params)

    @classmethod
    def from_key(cls, key: str) -> Config:
        old = _OLD_KEY.fullmatch(key)
        if old:
            a, s, f, r = (int(x) for x in old.groups())
            return cls.of(a, {SEG: s, FAN: f, MAXREQ: r})
        m = _KEY.fullmatch(key)
        if not m:
            raise ValueError(f"bad configuration key {key!r}")
        values = (p.split("=") for p in m.group(2).split("/")[1:])
        return cls.of(int(m.group(1)), {n: int(v) for n, v in values})

    def label(self, catalog: Catalog, coll: str) -> str:
        name = catalog.algorithm_name(coll, self.algorithm)
        order = [p.name for p in catalog.declared()]
        ranked = sorted(self.params, key=lambda nv: (
            order.index(nv[0]) if nv[0] in order else len(order), nv[0]))
        extra = [f"{catalog.param(n).label}={v}" for n, v in ranked]
        return f"{name}({self.algorithm})" + (" " + " ".join(extra) if extra else "")


DEFAULT = Config(0)
