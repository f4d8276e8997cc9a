"""What a tuning run measures, built once and handed down: per collective and communicator
size, the configurations (the catalog's, within the values the user and the output allow)
and the message sizes worth measuring. The searches, the ladder, model predictions and a
Slurm script's time limit all read the same plan; what is already known (tune app: the
application's own calls under tune online) is left out of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.space import configurations, sizes_for, useful_at

# (collective, communicator size, configuration key, size): points known already, not
# measured (tune app: what the application's own calls under tune online found)
Excluded = frozenset[tuple[str, int, str, int]]


@dataclass(frozen=True)
class Plan:
    catalog: Catalog
    # values per parameter a search may take (Session.grid: --param, --segsizes, what the
    # output can say); a parameter absent here takes the catalog's own values
    grid: dict[str, list[int]] = field(default_factory=dict)
    sizes: list[int] | None = None  # per-rank sizes asked for (None: the default range)
    excluded: Excluded = frozenset()  # TuneOptions.excluded; the default is always measured

    def configs(self, coll: Collective, np: int) -> list[Config]:
        """Every configuration of the grid at `np` ranks, the library default first."""
        return configurations(coll, self.catalog, np, self.grid)

    def sizes_at(self, coll: Collective, np: int) -> list[int]:
        return sizes_for(coll, np, self.sizes)

    def points(self, coll: Collective, np: int) -> list[tuple[Config, int]]:
        """Every (configuration, size) worth measuring at `np` ranks: a segment as large
        as the message repeats the unsegmented point, so it is left out."""
        sizes = self.sizes_at(coll, np)
        return [(c, s) for c in self.configs(coll, np) for s in sizes
                if self._wanted(coll, np, c, s)]

    def candidates(self, coll: Collective, np: int, size: int) -> list[Config]:
        """The configurations worth measuring (or predicting) at one size."""
        return [c for c in self.configs(coll, np) if self._wanted(coll, np, c, size)]

    def _wanted(self, coll: Collective, np: int, c: Config, size: int) -> bool:
        return useful_at(c, size, self.catalog) and (
            c == DEFAULT or (coll.name, np, c.key, size) not in self.excluded)

    def count(self, colls: list[Collective], nps: list[int]) -> int:
        return sum(len(self.points(c, n)) for c in colls for n in nps)
