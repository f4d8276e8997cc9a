"""Who serves each collective (issue 88, item 1): a coll/tuned rules file changes only what
coll/tuned serves. `tune check`, `tune verify` and `tune export` say, from the
installation's own settings as the job's environment and the site's parameter file set
them, which component serves in coll/tuned's place and the parameter that puts it there;
a launch proves who served, from the library's own entry functions counted under gdb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from colltune.backends.openmpi import serving
from colltune.backends.openmpi.install import OpenMPI
from colltune.slots import place
from helpers import tune_cli

# bcast (7) at 4 ranks and up: basic_linear (1) at every size, a choice whose traffic
# differs from the default's (what tune verify's proof compares)
BCAST_LINEAR = "1\n7\n1\n4\n1\n0 1 0 0\n"
ADAPT = {"OMPI_MCA_coll_adapt_priority": "50"}


def _check(ompi: OpenMPI, rules: Path, **env: str) -> str:
    r = tune_cli("check", str(rules), "--mpi", str(ompi.prefix),
                 env={**ompi.tool_env(), **env})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stderr


def test_check_names_the_component_above_tuned_and_its_parameter(ompi41: OpenMPI,
                                                                  tmp_path: Path) -> None:
    rules = tmp_path / "r.conf"
    rules.write_text(BCAST_LINEAR)
    assert "above coll/tuned" not in _check(ompi41, rules)
    said = _check(ompi41, rules, **ADAPT)
    assert "coll/adapt (coll_adapt_priority 50, set in the environment) is above " \
        "coll/tuned's 30" in said, said
    assert "--mca coll ^adapt" in said
    # a site's parameter file, as HPC-X raises coll/ucc's or coll/hcoll's in its own
    site = tmp_path / "site-params.conf"
    site.write_text("coll_adapt_priority = 60\n")
    said = _check(ompi41, rules, OMPI_MCA_mca_base_param_files=str(site))
    assert f"coll_adapt_priority 60, set in {site}:1" in said, said
    # another user's parameter file names itself: its path reaches the terminal escaped
    odd = tmp_path / "site\x1b]0;owned\x07.conf"
    odd.write_text("coll_adapt_priority = 60\n")
    said = _check(ompi41, rules, OMPI_MCA_mca_base_param_files=str(odd))
    assert "coll_adapt_priority 60, set in " in said, said
    assert "\x1b" not in said and "\x07" not in said and "site\\x1b]0;owned\\x07" in said, said
    # left out by the coll selection: whatever its priority, it serves nothing
    assert "above coll/tuned" not in _check(ompi41, rules, OMPI_MCA_coll="^adapt", **ADAPT)
    said = _check(ompi41, rules, OMPI_MCA_coll="^tuned")
    assert "does not use coll/tuned in this environment (the coll selection '^tuned' " \
        "leaves it out): this file changes nothing" in said, said


def test_check_says_where_han_serves_on_open_mpi_5(tmp_path: Path) -> None:
    from conftest import get_mpi

    ompi50 = get_mpi("ompi50")
    rules = tmp_path / "r.conf"
    rules.write_text(BCAST_LINEAR)
    said = _check(ompi50, rules)
    assert "coll/han (coll_han_priority 35) is above coll/tuned's 30: on communicators " \
        "that span nodes" in said, said
    assert "above coll/tuned" not in _check(ompi50, rules, OMPI_MCA_coll="^han")


@pytest.mark.mpi
def test_a_launch_shows_which_component_served(ompi41: OpenMPI) -> None:
    """The library's own answer: rank 0 under gdb counts the calls into every component's
    entry for the collective; coll/adapt, raised above coll/tuned, serves bcast and reduce
    (all it implements) and leaves allreduce to coll/tuned."""
    two = place(2)
    who, calls = serving.served_by(ompi41, two, "bcast", {})
    assert who == "tuned" and set(calls) == {"tuned"}, calls
    got = {coll: serving.served_by(ompi41, two, coll, ADAPT)
           for coll in ("bcast", "reduce", "allreduce")}
    assert {c: who for c, (who, _) in got.items()} == {
        "bcast": "adapt", "reduce": "adapt", "allreduce": "tuned"}, got
    assert "tuned" not in got["reduce"][1], got  # adapt's reduce does not call tuned's


@pytest.mark.mpi
def test_verify_says_not_applied_where_another_component_served(ompi41: OpenMPI,
                                                                 tmp_path: Path) -> None:
    """Before: the traffic proof saw the same traffic with the file, forced linear and the
    default (adapt served all three) and said "unproven"; a site acting on it kept a file
    that changes nothing."""
    rules = tmp_path / "r.conf"
    rules.write_text(BCAST_LINEAR)
    out = tmp_path / "v.json"
    r = tune_cli("verify", str(rules), "--np", "4", "--mpi", str(ompi41.prefix), "--sizes",
                 "8", "--rounds", "2", "--max-rounds", "2", "--json", str(out),
                 env={**ompi41.tool_env(), **ADAPT})
    (bcast,) = json.loads(out.read_text())["collectives"]
    assert bcast["applied"] == "not applied", bcast
    assert "coll/adapt served bcast, not coll/tuned" in bcast["applied_detail"], bcast
    assert r.returncode != 0, r.stdout  # a file that is not applied fails the gate
    assert "coll/adapt (coll_adapt_priority 50" in r.stderr + r.stdout


def test_export_warns_where_the_file_would_not_run(ompi41: OpenMPI, tmp_path: Path) -> None:
    rules = tmp_path / "r.conf"
    rules.write_text(BCAST_LINEAR)
    r = tune_cli("export", "--from", str(rules), "--site", str(tmp_path / "site"), "--mpi",
                 str(ompi41.prefix), env={**ompi41.tool_env(), **ADAPT})
    assert r.returncode == 0, r.stderr
    assert "warning: coll/adapt (coll_adapt_priority 50, set in the environment)" in r.stderr
    r = tune_cli("export", "--from", str(rules), "--site", str(tmp_path / "site2"), "--mpi",
                 str(ompi41.prefix), env=ompi41.tool_env())
    assert r.returncode == 0 and "warning: coll/" not in r.stderr, r.stderr
