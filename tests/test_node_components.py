"""A one-node Open MPI launch names the point-to-point components the library selects on
this node (backends/openmpi/node.py): proved by the library's own selection log, which must
show the same pml and the same working byte transfer layers with and without them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI, launch_command, launch_env
from colltune.backends.openmpi.node import VERBOSE, configured_pml
from colltune.kernel.build import build_kernel
from colltune.slots import place

pytestmark = pytest.mark.mpi


def _selection(mpi: OpenMPI, node: bool, tmp_path: Path) -> tuple[set[str], set[str], str]:
    """(pml selected, btls initialised successfully, the log) of a 2-rank kernel launch."""
    plan = tmp_path / "plan"
    plan.write_text("collective barrier\n")
    cmd = launch_command(mpi, place(2, None), VERBOSE, node=node)
    res = subprocess.run([*cmd, str(build_kernel(mpi)), str(plan)], capture_output=True,
                         text=True, timeout=120, env=launch_env(), check=False)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log
    return (set(re.findall(r"select: component (\w+) selected", log)),
            set(re.findall(r"select: init of component (\w+) returned success", log)), log)


def test_a_one_node_launch_names_what_the_library_selects_anyway(ompi: OpenMPI,
                                                                  tmp_path: Path) -> None:
    cmd = launch_command(ompi, place(4, None))
    mca = {k: cmd[i + 1] for i, k in enumerate(cmd[:-1]) if k in ("btl", "pml")
           and cmd[i - 1] == "--mca"}
    assert "self" in mca["btl"].split(",")
    pml, btls, plain = _selection(ompi, False, tmp_path)
    named_pml, named_btls, named = _selection(ompi, True, tmp_path)
    assert pml == named_pml == {"ob1"}
    assert btls == named_btls == set(mca["btl"].split(","))
    # what failed before is no longer tried (the 5.0 wheel's libfabric components)
    failed = set(re.findall(r"select: init of component (\w+) returned failure", plain))
    for comp in failed:
        assert f"initializing btl component {comp}" not in named
    # a pml excluded failed here (its init, or its open: 4.1's cm, whose psm transports
    # are absent), or the installation's own files excluded it (Debian's ucx), which the
    # command line would otherwise override; none of them is opened in a named launch
    configured = configured_pml(ompi.ompi_info) or ""
    theirs = set(configured.lstrip("^").split(",")) if configured.startswith("^") else set()
    for comp in mca.get("pml", "^").lstrip("^").split(","):
        if comp:
            assert (f"init returned failure for component {comp}" in plain
                    or f"component {comp} open function successful" not in plain
                    or comp in theirs), comp
            assert f"components_open: found loaded component {comp}\n" not in named
            assert f"initializing pml component {comp}" not in named


def test_nothing_is_named_across_hosts_or_over_the_users_choice(
        ompi41: OpenMPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=4\n")
    assert "btl" not in launch_command(ompi41, place(4, str(hosts)))
    assert "btl" in launch_command(ompi41, place(4, None))
    monkeypatch.setenv("OMPI_MCA_btl", "self,vader")
    assert "btl" not in launch_command(ompi41, place(4, None))
