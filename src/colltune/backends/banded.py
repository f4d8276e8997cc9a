"""The banded capability: a family whose library reads a file naming a configuration per
message size runs several configurations in one launch, each at sizes of its own
(`tune --sweep bands`; tuner/bands.py packs the launches). Intel MPI has it: its choice is
fixed per launch (MPI_T writes read back and change nothing), but its tuning file selects
one per size band."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from colltune.collectives import Collective
from colltune.core.config import Config


class BandSupport(ABC):
    """The launch environment that runs a configuration per message size."""

    @abstractmethod
    def env(self, coll: Collective, np: int, at: dict[int, Config], folder: Path
            ) -> dict[str, str]:
        """Launch environment that runs `at[size]` at each of its sizes, from a file
        written in `folder`."""
