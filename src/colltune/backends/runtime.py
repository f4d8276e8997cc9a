"""The runtime capability: the job-wide parameters a family tunes (`tune runtime`), declared
like its catalog, applied through the launcher's environment, proven by what a rank reads
back or the library logs, and written as the file a site installs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from colltune.core.runtime import Knob, Setting
from colltune.core.toolchain import Installation

M = TypeVar("M", bound=Installation)


class RuntimeSupport(ABC, Generic[M]):
    """A family's runtime parameters for its installations (`M`)."""

    @abstractmethod
    def knobs(self, mpi: M) -> list[Knob]:
        """The runtime parameters colltune tunes for this installation."""

    def vouch(self, mpi: M, name: str) -> Knob | None:
        """An undeclared parameter the installation lists (None: the library has none)."""
        return None

    def refuse(self, mpi: M, knobs: list[Knob], cmd: list[str]) -> None:
        """Refuse, before any launch, a knob unknown here (ignored silently) or set by `cmd`."""
        return None

    @abstractmethod
    def environ(self, mpi: M, knobs: dict[str, Knob], setting: Setting,
                base: dict[str, str]) -> dict[str, str]:
        """The launcher's whole environment (from `base`) that applies `setting`: every
        inherited value of a tuned knob removed, the setting's non-default values added."""

    def own(self, cmd: list[str], knobs: dict[str, Knob]) -> list[str]:
        """colltune's own launch command without what it sets for a knob searched."""
        return cmd

    def readback(self, mpi: M, knob: Knob, value: str) -> set[str]:
        """What the knob's control variable reads back in a rank when `value` applied."""
        return {value}

    def log_env(self, knobs: list[Knob]) -> dict[str, str]:
        """Launcher variables that make the library log the `component` knobs in charge."""
        return {}

    def logged(self, knob: Knob, value: str, log: str) -> tuple[bool, str]:
        """Whether the library's log (stderr) shows `value` of a `component` knob in effect."""
        return False, "the library logs nothing colltune reads"

    def cpus(self, knob: Knob, value: str) -> Callable[[int], bool] | None:
        """For a binding knob: whether a rank's CPU count fits `value` (None: not known)."""
        return None

    @abstractmethod
    def write(self, mpi: M, knobs: dict[str, Knob], setting: Setting, rules: Path | None,
              out: Path, notes: list[str]) -> dict[str, object]:
        """Write `setting` (and the settings that load `rules`) into the files sites install,
        at `out` and beside it; returns what was written (what, also, use)."""

    @abstractmethod
    def read(self, path: Path) -> tuple[Setting, Path | None] | None:
        """The setting (and rules file) a tune runtime file holds; None: not this family's."""
