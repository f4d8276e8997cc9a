"""Issue 61, finding 1: a runtime parameter file may set only its library's tuning
parameters. Reproduced as found: an MPICH profile setting LD_PRELOAD and PATH passed
`tune check` and `tune export --site` wrote a module that set both; an Open MPI file with
`orte_fork_agent` and `mca_base_component_path` passed `tune check --mpi`, was installed,
merged, and `tune compare` ran the agent. Plus a property: no name outside the allowlist
is ever installed."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from colltune.backends.mpich import runtime as mpich_runtime
from colltune.backends.mvapich2 import runtime as mvapich2_runtime
from colltune.backends.openmpi import runtime as openmpi_runtime
from colltune.errors import ColltuneError
from colltune.outputs.export import plan_export
from helpers import tune_cli

HEAD_MPICH = "# MPICH runtime parameters written by colltune\n"
HEAD_OMPI = "# Open MPI runtime parameters written by colltune\n"


def test_an_mpich_profile_cannot_set_the_loader_or_path(tmp_path: Path) -> None:
    bad = tmp_path / "mpich.sh"
    bad.write_text(HEAD_MPICH + "export MPIR_CVAR_ASYNC_PROGRESS=1\n"
                   "export LD_PRELOAD=/home/mallory/evil.so\n"
                   "export PATH=/home/mallory/bin:/usr/bin\n")
    r = tune_cli("check", str(bad))
    assert r.returncode != 0 and "LD_PRELOAD, PATH" in r.stderr, r.stdout + r.stderr
    r = tune_cli("export", "--from", str(bad), "--site", str(tmp_path / "site"))
    assert r.returncode == 2 and "LD_PRELOAD" in r.stderr, r.stderr
    assert not (tmp_path / "site").exists()


def test_an_open_mpi_file_cannot_name_an_agent_or_a_component_path(tmp_path: Path) -> None:
    from conftest import get_mpi

    ompi = get_mpi("ompi41")
    agent = tmp_path / "agent"
    mark = tmp_path / "ran"
    agent.write_text(f"#!/bin/sh\ntouch {mark}\nexec \"$@\"\n")
    agent.chmod(0o755)
    bad = tmp_path / "c.conf"
    bad.write_text(HEAD_OMPI + "btl_vader_eager_limit = 4096\n"
                   f"orte_fork_agent = {agent}\n"
                   "mca_base_component_path = /home/mallory/ompi\n")
    r = tune_cli("check", str(bad), "--mpi", str(ompi.prefix))
    assert r.returncode != 0 and "orte_fork_agent, mca_base_component_path" in r.stderr, \
        r.stdout + r.stderr
    r = tune_cli("export", "--from", str(bad), "--site", str(tmp_path / "site"))
    assert r.returncode == 2 and "orte_fork_agent" in r.stderr and \
        not (tmp_path / "site").exists(), r.stderr
    home = tmp_path / "home"
    (home / ".openmpi").mkdir(parents=True)
    r = tune_cli("export", "--from", str(bad), "--user", env={"HOME": str(home)})
    assert r.returncode == 2 and not (home / ".openmpi" / "mca-params.conf").exists()
    r = tune_cli("compare", "--lib", f"openmpi:{ompi.prefix}", "--lib",
                 f"openmpi:{ompi.prefix}={bad}", "--collective", "reduce", "--np", "2",
                 "--rounds", "3", "--calls", "3", env=ompi.tool_env())
    assert r.returncode != 0 and "orte_fork_agent" in r.stderr, r.stderr
    assert not mark.exists(), "the agent ran"


def test_the_families_declared_knobs_are_allowed() -> None:
    from conftest import get_mpi

    for k in openmpi_runtime.knobs(get_mpi("ompi41")):
        assert openmpi_runtime.MAY_SET(k.name), k.name
    for k in mvapich2_runtime.knobs():
        assert mvapich2_runtime.MAY_SET(k.name), k.name
    assert mpich_runtime.MAY_SET("MPIR_CVAR_ASYNC_PROGRESS")


DANGEROUS = ["LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "BASH_ENV", "ENV", "PYTHONPATH",
             "orte_fork_agent", "plm_rsh_agent", "mca_base_component_path",
             "opal_prefix", "orte_prefix", "MPIR_CVAR_CH4_OFI_LIBRARY_PATH",
             "MPIR_CVAR_DEBUGGER_ARGS", "MV2_LIBRARY_PATH", "btl_openib_plugin_dir",
             "coll_tuned_helper_exec", "MPIR_CVAR_NAMESERV_FILE", "pmix_mca_base_dir"]
NAMES = st.one_of(st.sampled_from(DANGEROUS),
                  st.from_regex(r"(coll_|btl_|MPIR_CVAR_|MV2_|orte_|opal_|LD_)?[A-Za-z]"
                                r"[A-Za-z0-9_]{0,24}", fullmatch=True))


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(NAMES, min_size=1, max_size=6, unique=True),
       family=st.sampled_from(["openmpi", "mpich"]))
@example(names=["MV2_A"], family="openmpi")  # was read as an MVAPICH2 profile and installed
@example(names=["MPIR_CVAR_X"], family="openmpi")
def test_no_name_outside_the_allowlist_is_ever_installed(tmp_path: Path, names: list[str],
                                                        family: str) -> None:
    src = tmp_path / f"f-{family}-{abs(hash(tuple(names)))}"
    if family == "openmpi":
        src.write_text(HEAD_OMPI + "".join(f"{n} = 1\n" for n in names))
        allowed = openmpi_runtime.MAY_SET
    else:
        src.write_text(HEAD_MPICH + "".join(f"export {n}=1\n" for n in names))
        allowed = mpich_runtime.MAY_SET
    try:
        planned = plan_export(src, tmp_path / "site")
    except ColltuneError:
        assert allowed.refused(names), names  # refused only for a name it may not set
        return
    assert not allowed.refused(names), names
    for p in planned:
        text = p.text if isinstance(p.text, str) else ""
        for n in DANGEROUS:
            assert f"{n} " not in text and f"{n}=" not in text and f'"{n}"' not in text, \
                (n, p.path, text)
