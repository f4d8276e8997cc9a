"""tune runtime beyond Open MPI: MPICH 5.0.2 and 4.0.2 live (their CVARs read back through
MPI_T in every rank, enumerations by their index), MVAPICH2's catalog through its profile
writer, bash and tune export (no MVAPICH2 runs in CI)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from colltune.backends.common import env_runtime
from colltune.backends.mpich.install import MPICH
from colltune.backends.mpich.runtime import knobs as mpich_knobs
from colltune.backends.mvapich2 import runtime as mvapich2_runtime
from helpers import export_site, module_env, tune_cli


def test_an_mpich_search_reads_back_every_cvar_it_set(mpich: MPICH, tmp_path: Path) -> None:
    names = {k.name for k in mpich_knobs(mpich)}
    assert "MPIR_CVAR_DEVICE_COLLECTIVES" in names  # listed by both versions' mpivars
    js, out = tmp_path / "m.json", tmp_path / "m.sh"
    res = tune_cli("runtime", "--backend", "mpich", "--mpi", str(mpich.prefix),
                   "--collective", "allreduce", "--sizes", "8,16K", "--np", "2", "--calls",
                   "3", "--param", "MPIR_CVAR_DEVICE_COLLECTIVES=none,all",
                   "--param", "MPIR_CVAR_POLLS_BEFORE_YIELD=100", "--rounds", "1",
                   "--pairs", "2", "--json", str(js), "--out", str(out), timeout=600)
    assert res.returncode == 0, res.stderr
    seen = json.loads(js.read_text())["applied"]
    # MPI_T reads the enumeration as its index: all 0, none 1, percoll 2
    assert seen["MPIR_CVAR_DEVICE_COLLECTIVES"] == {
        "percoll": "the library's own choice: 2 read back",
        "none": "1 (read back in every rank)",
        "all": "0 (read back in every rank)"}
    assert set(seen["MPIR_CVAR_POLLS_BEFORE_YIELD"]) == {"1000", "100"}
    assert tune_cli("check", str(out)).returncode == 0


def test_an_mpich_cvar_this_version_lacks_is_refused(mpich: MPICH) -> None:
    res = tune_cli("runtime", "--backend", "mpich", "--mpi", str(mpich.prefix),
                   "--param", "MPIR_CVAR_NO_SUCH_THING=1", "--collective", "bcast")
    assert res.returncode == 2 and "no runtime parameter MPIR_CVAR_NO_SUCH_THING" in res.stderr


@dataclass(frozen=True)
class _Recorded:
    """What a profile's provenance line names: an MVAPICH2 installation as recorded on
    the machine where the live MVAPICH2 tests ran (none is built in CI)."""

    name: str = "MVAPICH2"
    version: str = "2.3.7"
    prefix: Path = Path("/opt/mvapich2-2.3.7")


def test_every_mvapich2_value_reaches_bash_the_parameter_file_and_the_modules(
        tmp_path: Path) -> None:
    ks = {k.name: k for k in mvapich2_runtime.knobs()}
    setting = {n: next(v for v in (*k.values, *k.choices) if v != k.default)
               for n, k in ks.items()}
    out = tmp_path / "mv2.sh"
    env_runtime.write(_Recorded(), ks, setting, out, ["test"], "MVAPICH2")  # type: ignore[arg-type]
    shown = subprocess.run(["bash", "-c", f"source {out} && env"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for n, v in setting.items():
        assert f"{n}={v}" in shown
    assert env_runtime.read(out, "MVAPICH2", mvapich2_runtime.MAY_SET) == (setting, None)
    res = tune_cli("check", str(out))
    assert res.returncode == 0 and "MVAPICH2 profile" in res.stdout, res.stderr
    site = tmp_path / "site"
    export_site(out, site, "mvapich2.conf", setting)
    env = module_env(site / "modulefiles" / "colltune" / "tuned")
    assert setting.items() <= env.items()
