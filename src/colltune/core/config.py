"""One way to run a collective: an algorithm and the parameters it takes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from colltune.core.catalog import FAN, MAXREQ, SEG, Catalog


@dataclass(frozen=True, order=True)
class Config:
    """One way to run a collective. algorithm 0 is the library's own decision."""

    algorithm: int
    segsize: int = 0
    fanout: int = 0
    max_requests: int = 0

    @property
    def key(self) -> str:
        return f"a{self.algorithm}/s{self.segsize}/f{self.fanout}/r{self.max_requests}"

    @classmethod
    def from_key(cls, key: str) -> Config:
        m = re.fullmatch(r"a(\d+)/s(\d+)/f(\d+)/r(\d+)", key)
        if not m:
            raise ValueError(f"bad configuration key {key!r}")
        return cls(*(int(x) for x in m.groups()))

    def label(self, catalog: Catalog, coll: str) -> str:
        name = catalog.algorithm_name(coll, self.algorithm)
        extra = [f"{catalog.param_label(p)}={v}" for p, v in
                 ((SEG, self.segsize), (FAN, self.fanout), (MAXREQ, self.max_requests)) if v]
        return f"{name}({self.algorithm})" + (" " + " ".join(extra) if extra else "")


DEFAULT = Config(0)
