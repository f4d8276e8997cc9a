"""Shared fixtures: the real Open MPI installations, an isolated cache, the CLI as users run it."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

import testcluster
from colltune.backends.impi.install import IntelMPI, find_impi
from colltune.backends.mpich.install import MPICH, find_mpich
from colltune.backends.mvapich2.install import MVAPICH2, find_mvapich2
from colltune.backends.openmpi.install import OpenMPI, find_openmpi, wheel_bindir
from colltune.errors import ColltuneError


def _prefix(which: str) -> str | None:
    if which == "ompi41":
        return "/usr" if Path("/usr/bin/ompi_info").exists() else None
    wb = wheel_bindir()
    return str(wb.parent) if wb else None


def _run_file(name: str) -> Path | None:
    """A file shared by the workers of this xdist run (None: one lane, no xdist)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return Path.home() / ".cache" / "colltune-tests" / f"{name}-{run}" if run else None


def pytest_configure(config: pytest.Config) -> None:
    """Every test's temporary directory below the home directory, not /tmp: a site export
    refuses a directory any of whose ancestors others can write (/tmp is one), as it would
    on a cluster. Removed at the end of the session."""
    if not config.option.basetemp:
        base = Path.home() / ".cache" / "colltune-tests"
        base.mkdir(parents=True, exist_ok=True)
        config.option.basetemp = str(base / f"pytest-{os.getpid()}")


def pytest_unconfigure(config: pytest.Config) -> None:
    for name in ("machine", "turnstile"):  # the workers' shared lock files (below)
        f = _run_file(name)
        if f is not None:
            f.unlink(missing_ok=True)
    base = Path(str(config.option.basetemp or ""))
    if base.parent == Path.home() / ".cache" / "colltune-tests":
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def isolated_dirs() -> Iterator[None]:
    """Kernels are built fresh for the session and no user store is touched. In the home
    directory, not /tmp: as on a cluster, a job across nodes refuses a cache and job
    directory on node-local storage (colltune.jobdir), and placements across nodes are
    tested here too."""
    base = Path.home() / ".cache" / "colltune-tests"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="session-", dir=base))
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")
    os.environ["XDG_DATA_HOME"] = str(root / "data")
    os.environ.pop("COLLTUNE_JOB_DIR", None)
    yield
    shutil.rmtree(root, ignore_errors=True)


def missing(msg: str) -> NoReturn:
    """Something .ci/run installs is not here: in CI a broken setup (a failure, never a
    skip: a skipped proof is no proof); elsewhere a skip that says what to install."""
    if os.environ.get("CI"):
        pytest.fail(msg + " (.ci/run installs it)")
    pytest.skip(msg)


def _unavailable(which: str, e: ColltuneError) -> None:
    missing(f"{which} unavailable ({e.message})")


def get_mpi(which: str) -> OpenMPI:
    prefix = _prefix(which)
    try:
        if prefix is None:
            raise ColltuneError(f"{which} is not installed")
        return find_openmpi(prefix)
    except ColltuneError as e:
        _unavailable(which, e)
        raise


@pytest.fixture(params=["ompi41", "ompi50"])
def ompi(request: pytest.FixtureRequest) -> OpenMPI:
    return get_mpi(request.param)


@pytest.fixture
def ompi41() -> OpenMPI:
    return get_mpi("ompi41")


# MPICH: 5.0.2 from PyPI lives in its own venv (its mpicc and mpirun would overwrite the
# openmpi wheel's), 4.0.2 is Debian's. .ci/run installs both.
MPICH_PREFIXES = {
    "mpich50": os.environ.get("COLLTUNE_MPICH_PREFIX",
                              str(Path(__file__).resolve().parent.parent / ".venv-mpich")),
    "mpich40": "/usr",
}


def get_mpich(which: str) -> MPICH:
    try:
        return find_mpich(MPICH_PREFIXES[which])
    except ColltuneError as e:
        _unavailable(which, e)
        raise


@pytest.fixture(params=["mpich50", "mpich40"])
def mpich(request: pytest.FixtureRequest) -> MPICH:
    return get_mpich(request.param)


# Intel MPI 2021.18 from PyPI (impi-rt, impi-devel) in its own venv, as .ci/run installs it
IMPI_PREFIX = os.environ.get("COLLTUNE_IMPI_PREFIX",
                             str(Path(__file__).resolve().parent.parent / ".venv-impi"))


@pytest.fixture(scope="session")
def impi() -> IntelMPI:
    """Intel MPI, with gdb (its proof of what ran reads the library's symbols)."""
    if not shutil.which("gdb"):
        missing("gdb is not installed (Intel MPI's proof of what ran)")
    try:
        return find_impi(IMPI_PREFIX)
    except ColltuneError as e:
        _unavailable("Intel MPI", e)
        raise


@pytest.fixture
def mvapich2() -> MVAPICH2:
    """MVAPICH2 built by hand outside the repository (no package, no CI): the live tests
    skip with this reason when COLLTUNE_MVAPICH2_PREFIX does not name one."""
    prefix = os.environ.get("COLLTUNE_MVAPICH2_PREFIX")
    if not prefix:
        pytest.skip("no MVAPICH2: set COLLTUNE_MVAPICH2_PREFIX to an MVAPICH2 2.3.x "
                    "(ch3:mrail, --enable-mpit-pvars=mv2) prefix; CI cannot build one")
    try:
        return find_mvapich2(prefix)
    except ColltuneError as e:
        # named on purpose but unusable: a broken setup, never a silent skip
        pytest.fail(f"COLLTUNE_MVAPICH2_PREFIX={prefix} is not a usable MVAPICH2: {e.message}")
        raise


def _no_namespace(why: str) -> NoReturn:
    """CI runs as root with iproute2, as the test cluster needs: there a missing namespace
    is a broken setup (a failure); elsewhere a skip that says why."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace with only its loopback up: every byte MPI sends over TCP
    inside it shows in that loopback's counters, and nothing else does."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        _no_namespace("needs root and iproute2 (ip) for a network namespace")
    ns = f"ctl{os.getpid() % 100000}"
    made = _ip("netns", "add", ns)
    if made.returncode != 0:
        _no_namespace(f"network namespaces not allowed here: {made.stderr.strip()}")
    try:
        _ip("-n", ns, "link", "set", "lo", "up")
        yield ns
    finally:
        _ip("netns", "del", ns)


# The test cluster (tests/testcluster.py): every test across "nodes" runs on it.

def _cluster_mark() -> Path | None:
    """The file saying a worker of this xdist run made the test cluster (None: no xdist)."""
    return _run_file("cluster-of-run")


def _the_only_cluster_of_this_run() -> None:
    """One test worker makes the cluster (its tests are one xdist group): a second would
    meet the first's Slurm and processes. Where the group did not hold (a pytest whose node
    ids drop it), the second worker fails saying so, rather than tests failing at random."""
    mark = _cluster_mark()
    if mark is None:
        return
    try:
        os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pytest.fail("another test worker of this run made the test cluster: the tests on it "
                    "must share one worker (--dist loadgroup; pytest-xdist issue 1386: "
                    "pytest 9.2 drops the groups)")


@pytest.fixture(scope="session")
def cluster() -> Iterator[testcluster.Cluster]:
    """Two nodes with a private /tmp each and a real Slurm (tests/testcluster.py), for the
    session. Skipped, saying why, where the machine cannot build it, except in CI."""
    _the_only_cluster_of_this_run()
    why = testcluster.why_not() or testcluster.slurm_why_not()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the test cluster must run in CI: {why}")
        pytest.skip(why)
    try:
        c = testcluster.make(2)
    except RuntimeError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the test cluster did not start here: {e}")
    try:
        yield c
    finally:
        c.down()
        mark = _cluster_mark()
        if mark is not None:
            mark.unlink(missing_ok=True)


@pytest.fixture
def gigabit(cluster: testcluster.Cluster) -> Iterator[testcluster.Cluster]:
    """The test cluster with every node's port shaped like Gigabit Ethernet for one test
    (testcluster.LINKS["1gbit"]), memory-speed veth again after it. A kernel that cannot
    shape them fails the test, naming what is missing."""
    cluster.shape(testcluster.LINKS["1gbit"])
    try:
        yield cluster
    finally:
        cluster.shape(None)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@pytest.fixture(autouse=True)
def _machine_share(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked `alone` has the machine to itself under two workers: its checks are
    timings (a sleep's overshoot, a replayed spread) that the other worker's ranks on the
    same two cores would stretch. A readers-writer lock on a file: every other test holds
    it shared; an `alone` test waits for the other worker's current test and holds it
    alone. The turnstile keeps a waiting `alone` test from being overtaken by the other
    worker's next tests. One lane: nothing to share."""
    machine, turnstile = _run_file("machine"), _run_file("turnstile")
    if machine is None or turnstile is None:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    with machine.open("a") as m, turnstile.open("a") as t:
        fcntl.flock(t, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(m, fcntl.LOCK_EX)  # the other worker's test ends first
            fcntl.flock(t, fcntl.LOCK_UN)
        else:
            fcntl.flock(t, fcntl.LOCK_UN)
            fcntl.flock(m, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(m, fcntl.LOCK_UN)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The test cluster is one bridge and one Slurm on this machine: every test on it runs
    in one xdist worker, in turn (--dist loadgroup), the others beside it. (Marked after
    xdist's hook, the groups were ignored: both workers built a cluster, and one's Slurm
    and processes met the other's.)

    Tests marked `alone` join that group, first: each waits for the other worker's
    current test to end, and the other worker's tests are then those off the cluster (by
    one-process durations, the one in progress has about 4 s left on average). Run beside
    the cluster's group, an `alone` test waited for the cluster test in progress: up to
    78 s each (the walkthrough's batch job), 141 s in one run.

    The other worker takes the tests off the cluster one by one in this order: those that
    launch no MPI job (milliseconds to seconds) first, while the `alone` tests wait on
    each of its tests in turn, then those that do (10-35 s each). In collection order, one
    CI run's `alone` tests waited 365 s in all on the live tests of the first modules
    (a suite of 20 minutes, against 14 in the run before)."""
    cluster = [item for item in items
               if {"cluster", "gigabit"} & set(getattr(item, "fixturenames", ()))]
    alone = [item for item in items if item.get_closest_marker("alone") is not None]
    for item in {*cluster, *alone} if cluster else ():
        item.add_marker(pytest.mark.xdist_group("cluster"))
    items.sort(key=lambda item: (item.get_closest_marker("alone") is None,  # stable
                                 item in cluster,
                                 item.get_closest_marker("mpi") is not None))
