"""tune runtime on the real Open MPI: a search over binding, the shared-memory eager limit
and coll/han and coll/sm for LAMMPS melt and for a collective, every value read back from
the running job (a component's place in MPI_COMM_WORLD's stack from Open MPI's own log);
the written file installed with tune export --site and proven applied in a job that only
loads the module; refusals before any launch; no chosen value dropped by a writer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from colltune.backends.files import ExportRequest
from colltune.backends.openmpi import runtime as rt
from colltune.backends.openmpi.install import OpenMPI
from colltune.core.runtime import Knob, Space, build_space, changed
from colltune.errors import ColltuneError
from conftest import missing
from helpers import MELT, export_site, module_env, short_melt, tune_cli

ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _melt(ompi: OpenMPI, tmp: Path) -> list[str]:
    lmp = shutil.which("lmp")
    if lmp is None or not MELT.exists():
        missing("LAMMPS (apt-get install lammps lammps-examples) is not installed")
    return [str(ompi.mpirun), "-np", "4", "--oversubscribe", lmp, "-in", str(short_melt(tmp)),
            "-log", "none", "-screen", "none"]


def _every_value_non_default(ompi: OpenMPI) -> dict[str, str]:
    """One value per knob that is not the library's default."""
    return {k.name: next(v for v in (*k.values, *k.choices) if v != k.default)
            for k in rt.knobs(ompi)}


def test_a_lammps_search_reads_back_every_value_it_tried(ompi41: OpenMPI, tmp_path: Path
                                                          ) -> None:
    cmd = _melt(ompi41, tmp_path)
    out, js = tmp_path / "rt.conf", tmp_path / "rt.json"
    # binding is searched and proven on both Open MPIs by the collective search below
    res = tune_cli("runtime", "--mpi", str(ompi41.prefix),
                   "--param", "btl_vader_eager_limit=4k,16k",
                   "--params", "coll_han_priority,coll_sm_priority",
                   "--rounds", "1", "--pairs", "2", "--out", str(out), "--json", str(js),
                   "--", *cmd, env=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr
    doc = json.loads(js.read_text())
    # coll/han disqualifies itself on one node: set, read back, yet never in charge; Open
    # MPI's own log says so, and the value is left out with its reason, not searched
    assert [x for x in doc["left_out"] if x.startswith("coll_han_priority=100")] == [
        "coll_han_priority=100 left out: coll_han_priority=100 read back, but coll/han is "
        "not in MPI_COMM_WORLD's stack: comm has only local processes; disqualifying "
        "myself (Open MPI's log)"]
    # the whole remaining grid (2 x 1 x 2) screened
    assert len(doc["screened"]) == 4
    seen = doc["applied"]
    assert set(seen["btl_vader_eager_limit"]) == {"4096", "16384"}
    assert set(seen["coll_han_priority"]) == {"0"}
    assert seen["coll_sm_priority"]["100"] == (
        "100 (read back in every rank); coll/sm in MPI_COMM_WORLD's stack (Open MPI's log)")
    assert doc["verdict"] in ("faster", "same", "slower", "inconclusive", "none")
    assert set(doc["effects"]) == {"btl_vader_eager_limit", "coll_han_priority",
                                   "coll_sm_priority"}
    # the file holds what was chosen (the defaults unless confirmed faster), nothing else
    setting, rules = rt.read(out) or ({}, None)
    assert rules is None and setting == doc["chosen"]
    assert ("faster" == doc["verdict"]) == bool(doc["chosen"])


def test_a_collective_search_proves_binding_on_both_open_mpis(ompi: OpenMPI, tmp_path: Path
                                                              ) -> None:
    """An allreduce at 4 ranks on 2 cores: binding, the eager limit and coll/sm on or off,
    every value read back in every rank. Open MPI 5's binding is PRRTE's default policy,
    which mpirun ignores when it oversubscribes: its values are probed (not named), and
    the ones the library does not apply are left out, said so, not searched."""
    v5 = ompi.version_tuple >= (5,)
    bind = "hwloc_default_binding_policy" if v5 else "hwloc_base_binding_policy"
    btl = "sm" if v5 else "vader"
    js = tmp_path / "k.json"
    binding = ["--params", bind] if v5 else ["--param", f"{bind}=none,core:overload-allowed"]
    res = tune_cli("runtime", "--mpi", str(ompi.prefix), "--collective", "allreduce",
                   "--sizes", "8,16K", "--np", "4", "--calls", "3", *binding,
                   "--param", f"btl_{btl}_eager_limit=4k,8k", "--param", "coll_sm_priority=0,100",
                   "--rounds", "1", "--pairs", "2", "--json", str(js), env=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr
    doc = json.loads(js.read_text())
    seen = doc["applied"]
    assert set(seen[f"btl_{btl}_eager_limit"]) == {"4096", "8192"}
    assert seen["coll_sm_priority"]["100"].endswith("coll/sm in MPI_COMM_WORLD's stack "
                                                    "(Open MPI's log)")
    if v5:
        assert any(x.startswith(f"{bind}=core:overload-allowed left out: a launch set")
                   and "may run on 2 CPU(s)" in x for x in doc["left_out"])
        assert "ranks bound to 2 CPU(s)" in seen[bind]["none"]
        # package is not checked (it depends on the node's sockets): kept
        assert "core:overload-allowed" not in doc["space"][bind]
        assert "none" in doc["space"][bind]
    else:
        assert not doc["left_out"]
        assert len(doc["screened"]) == 12  # binding 3 (the library's own too) x 2 x 2
        assert "ranks bound to 1 CPU(s)" in seen[bind]["core:overload-allowed"]
        assert "ranks bound to 2 CPU(s)" in seen[bind]["none"]


def test_the_exported_file_applies_in_a_job_that_only_loads_the_module(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    cmd = _melt(ompi41, tmp_path)
    knobs = {k.name: k for k in rt.knobs(ompi41)}
    setting = {"hwloc_base_binding_policy": "core:overload-allowed",
               "btl_vader_eager_limit": "16384", "coll_sm_priority": "100",
               "mpi_yield_when_idle": "1"}
    conf = tmp_path / "rt.conf"
    rt.write(ompi41, knobs, setting, None, conf, ["a test"])
    site = tmp_path / "site"
    export_site(conf, site, "openmpi-mca-params.conf", setting)
    mods = site / "modulefiles" / "colltune"
    for module in (mods / "tuned", mods / "tuned.lua"):  # each run by its own interpreter
        env = module_env(module)
        assert {f"OMPI_MCA_{k}": v for k, v in setting.items()}.items() <= env.items()
    res = tune_cli("runtime", "--mpi", str(ompi41.prefix), "--prove", str(conf), "--", *cmd,
                   env={**ROOT, **env})
    assert res.returncode == 0, res.stderr
    assert "btl_vader_eager_limit = 16384: 16384 (read back in every rank)" in res.stdout
    assert "ranks bound to 1 CPU(s)" in res.stdout
    assert "coll/sm in MPI_COMM_WORLD's stack (Open MPI's log)" in res.stdout
    # the site's parameter file alone, as an administrator installs it, does the same
    res = tune_cli("runtime", "--mpi", str(ompi41.prefix), "--prove", str(conf), "--", *cmd,
                   env={**ROOT, "OMPI_MCA_mca_base_param_files":
                        str(site / "openmpi-mca-params.conf")})
    assert res.returncode == 0, res.stderr
    # a command line that overrides a value: not applied, exit 1, never a silent pass
    over = [cmd[0], "--mca", "btl_vader_eager_limit", "8192", *cmd[1:]]
    res = tune_cli("runtime", "--mpi", str(ompi41.prefix), "--prove", str(conf), "--", *over,
                   env={**ROOT, **env})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "read back btl_vader_eager_limit = 8192" in res.stderr


@pytest.mark.parametrize("args, says", [
    (["--param", "btl_vader_eagr_limit=4k"], "did you mean btl_vader_eager_limit"),
    (["--params", "btl_sm_eager_limit"], "no runtime parameter btl_sm_eager_limit"),
    (["--param", "btl_vader_eager_limit=-5"], "outside 256..1048576"),
    (["--param", "btl_vader_single_copy_mechanism=fast"], "accepts only cma"),
    (["--param", "mpi_leave_pinned=7"], "accepts only -1, 0, 1"),
    (["--param", "btl_vader_fbox_max=$(reboot)"], "not a value colltune writes"),
    (["--param", "hwloc_base_binding_policy=core", "--", "mpirun", "--bind-to", "none",
      "x"], "sets the binding itself"),
])
def test_what_open_mpi_would_ignore_or_reject_is_refused_before_any_launch(
        ompi41: OpenMPI, args: list[str], says: str, tmp_path: Path) -> None:
    marker = tmp_path / "launched"
    tail = [] if "--" in args else ["--", "sh", "-c", f"touch {marker}"]
    res = tune_cli("runtime", "--mpi", str(ompi41.prefix), *args, *tail, env=ROOT)
    assert res.returncode == 2, res.stdout + res.stderr
    assert says in res.stderr
    assert not marker.exists()


def test_a_parameter_the_library_lists_but_the_catalog_lacks_is_checked_by_the_library(
        ompi41: OpenMPI) -> None:
    knob = rt.vouch(ompi41, "btl_vader_single_copy_mechanism")
    assert knob is not None and "cma" in knob.choices
    assert rt.vouch(ompi41, "btl_vader_no_such_thing") is None
    fbox = rt.vouch(ompi41, "btl_vader_fbox_max")
    assert fbox is not None and fbox.default == "32"
    space = build_space(rt.knobs(ompi41), [], {"btl_vader_fbox_max": ["16", "64"]},
                        {"btl_vader_fbox_max": fbox})
    assert space.values["btl_vader_fbox_max"] == ("32", "16", "64")
    with pytest.raises(ColltuneError, match="has no MCA parameter btl_sm_eager_limit"):
        rt.refuse(ompi41, [Knob("btl_sm_eager_limit", "int", "mca", ("4096",), "4096")], [])


def test_no_writer_drops_a_chosen_value(ompi: OpenMPI, tmp_path: Path) -> None:
    """Every knob of this Open MPI set away from its default: the parameter file read back,
    the files tune export installs and the module's variables hold every value."""
    knobs = {k.name: k for k in rt.knobs(ompi)}
    setting = _every_value_non_default(ompi)
    rules = tmp_path / "rules.conf"
    rules.write_text("1\n7\n1\n4\n1\n0 1 0 0\n")  # bcast at 4 ranks: linear everywhere
    conf = tmp_path / "rt.conf"
    rt.write(ompi, knobs, setting, rules, conf, ["note"])
    got, rules_read = rt.read(conf) or ({}, None)
    assert rules_read == rules.resolve()
    assert {k: v for k, v in got.items() if k not in rt.rules_params(rules)} == setting
    inst = rt.installable(ExportRequest(conf, "stamp", tmp_path / "site", tmp_path),
                          "colltune-rules.conf")
    env = inst.env
    for k, v in setting.items():
        var = ("PRTE_MCA_" if knobs[k].via == "prte" else "OMPI_MCA_") + k
        assert env[var] == v
    texts = "\n".join(p.text for p in inst.files)
    for k, v in setting.items():
        assert f"{k} = {v}" in texts
    # the rules file it loads is installed too, and the parameter file points at the copy
    assert env["OMPI_MCA_coll_tuned_dynamic_rules_filename"] == str(
        tmp_path / "site" / "colltune-rules.conf")


def test_the_space_always_holds_the_librarys_defaults(ompi41: OpenMPI) -> None:
    space: Space = build_space(rt.knobs(ompi41), ["btl_vader_eager_limit"],
                               {"btl_vader_eager_limit": ["1k", "64k"]})
    assert space.values["btl_vader_eager_limit"] == ("4096", "1024", "65536")
    assert changed(space.default(), space) == {}
    assert len(space.grid()) == 3
